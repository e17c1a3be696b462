// Level medium of `dtbench validate`: each rank's compute and host-device copies (the ranks
// of a host one at a time), each node's send/recv matrix and its all-reduce (bus bandwidth
// and arrival), and the turns of an all-reduce probe that level long's groups take too.
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "harness/validate/collective.h"
#include "harness/validate/compute.h"
#include "harness/validate/format.h"
#include "harness/validate/inventory.h"
#include "harness/validate/levels.h"
#include "harness/validate/pairs.h"
#include "kernels/error.h"
#include "suites/gemm_rate.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace validate_detail;

// compute: the ranks of a machine one at a time, machines at once; three rounds, each rank's best.
void check_compute(ValidateRun& run) {
  run.begin_check("compute");
  std::pair<double, double> best{0, 0};
  ComputeProbe probe;
  for (int round = 0; round < 3; ++round)
    for (int t = 0; t < run.turns; ++t) {
      run.steps->arrive(run.current);
      if (t != run.turn) continue;
      if (run.me == run.inj.rank && run.inj.hang)
        for (;;) sleep(1);  // the test-only hang: never arrives at the next step
      const double f = run.compute_factor();
      std::pair<double, double> m = probe.measure(f);
      if (run.gpu) {  // the device's GEMM instead of the host's (bf16 in, fp32 accumulate)
        const int k = 8192;
        m.first = gemm_flops(k, k, k) / (run.gpu->time_gemm(k, k, k, "bf16", 2, 5) * f) / 1e9;
      }
      best = {std::max(best.first, m.first), std::max(best.second, m.second)};
    }
  run.steps->arrive(run.current);
  run.add_two_metrics(best, "compute/gemm_gflops", "compute/triad_GBps");
}

// copy: host <-> device on GPUs, one GPU of a host at a time.
void check_copy(ValidateRun& run) {
  run.begin_check("copy");
  // Every rank takes the same branch: a rank whose GPU could not be opened makes the check
  // fail for all, naming it (its error is in the inventory), instead of skipping steps alone.
  int with_gpu = run.gpu ? 1 : 0;
  run.world.all_reduce(&with_gpu, &with_gpu, 1, DType::i32, ReduceOp::min);
  if (run.args.backend == "cuda" && !with_gpu) {
    ValidateCheck c{"copy/host_device", "fail", "", {}, {}, json::object(), {}};
    for (int r = 0; r < run.n; ++r)
      if (run.inv[size_t(r)].contains("device_error")) {
        c.ranks.push_back(r);
        const std::string& nd = run.node_of_rank[size_t(r)];
        add_once(c.nodes, nd);
        c.node_detail[nd] += (c.node_detail[nd].empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                             " has no usable GPU: " + run.inv[size_t(r)].value("device_error", std::string());
      }
    c.detail = "ranks " + join_ranks(c.ranks) + " have no usable GPU, so no copies were measured";
    run.add_check(c);
    return;
  }
  if (!with_gpu) {
    run.add_check({"copy/host_device", "skip", "the " + run.args.backend + " backend has no device memory to copy to",
                   {}, {}, json::object(), {}});
    return;
  }
  std::pair<double, double> bw{0, 0};
  const size_t bytes = size_t(64) << 20;
  for (int t = 0; t < run.turns; ++t) {
    run.steps->arrive(run.current);
    if (t != run.turn) continue;
    Backend& gpu = *run.gpu;
    std::vector<char> h(bytes, 1);
    void* d = gpu.device().allocate(bytes, MemCategory::workspace, Tier::device);
    const double f = run.compute_factor();
    const double up = best_seconds(5, f, [&] { gpu.copy_from_host(d, h.data(), bytes); });
    const double down = best_seconds(5, f, [&] { gpu.copy_to_host(h.data(), d, bytes); });
    gpu.device().deallocate(d, bytes, MemCategory::workspace, Tier::device);
    bw = {double(bytes) / up / 1e9, double(bytes) / down / 1e9};
  }
  run.steps->arrive(run.current);
  run.add_two_metrics(bw, "copy/h2d_GBps", "copy/d2h_GBps");
}

// node/sendrecv: the rank x rank matrix within each node (each node's round-robin, at once).
void check_node_sendrecv(ValidateRun& run) {
  run.begin_check("node/sendrecv");
  std::map<int, std::vector<int>> members;
  for (int r = 0; r < run.n; ++r) members[run.node_index_of(r)].push_back(r);
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (const auto& [node, ranks] : members) {
    const auto local = pair_rounds(int(ranks.size()));
    if (rounds.size() < local.size()) rounds.resize(local.size());
    for (size_t k = 0; k < local.size(); ++k)
      for (const auto& [x, y] : local[k]) rounds[k].emplace_back(ranks[size_t(x)], ranks[size_t(y)]);
  }
  const PairSweep sw = sweep_pairs(run.world, rounds, run.inv, run.inj, *run.steps, run.current);
  std::vector<std::vector<double>> m;
  for (const auto& row : sw.seconds) m.push_back(run.gather(row));
  const size_t big = kPairSizes.back();
  bool any = false;
  for (const auto& [node, ranks] : members) any = any || ranks.size() > 1;
  if (!any) {
    run.add_check({"node/sendrecv", "skip", "one rank per node: no pairs within a node", {}, {}, json::object(), {}});
    return;
  }
  run.add_metric("node/sendrecv_GBps", {"GB/s", median_bandwidth(m.back(), run.n, big), true});
  run.add_check({"node/sendrecv_matrix", "pass",
                 "each node's rank x rank send/recv bandwidth, " + std::to_string(big >> 20) +
                     " MiB each way (2 x bytes / seconds, GB/s; 0: not in one node)",
                 {}, {}, {{"matrix_GBps", bandwidth_matrix_json(m.back(), run.n, big)}, {"bytes", big}}, {}});
  run.add_check(alpha_beta_check(m, run.node_of_rank, "node/alpha_beta"));
}

}  // namespace

CollectiveProbe probe_in_turns(ValidateRun& run, Communicator* comm, const std::string& check,
                               const std::function<int(int)>& group_of) {
  // Groups on one machine (a host, or hosts sharing one kernel) take turns.
  const std::vector<std::string> machine = machine_of_rank(run.inv);
  std::map<std::string, std::vector<int>> groups_on_host;
  for (int r = 0; r < run.n; ++r) {
    auto& v = groups_on_host[machine[size_t(r)]];
    if (std::find(v.begin(), v.end(), group_of(r)) == v.end()) v.push_back(group_of(r));
  }
  const auto& mine_g = groups_on_host[machine[size_t(run.me)]];
  const int my_turn = int(std::find(mine_g.begin(), mine_g.end(), group_of(run.me)) - mine_g.begin());
  int turns_g = 1;
  for (const auto& [h, v] : groups_on_host) turns_g = std::max(turns_g, int(v.size()));
  CollectiveProbe p;
  for (int t = 0; t < turns_g; ++t) {
    run.steps->arrive(check);
    if (t == my_turn && comm != nullptr) p = probe_allreduce(*comm, run.compute_factor());
  }
  run.steps->arrive(check);
  return p;
}

namespace {

// node/allreduce: each node's all-reduce (bus bandwidth, arrival times); nodes sharing a host
// (emulated) take turns.
void check_node_allreduce(ValidateRun& run) {
  run.begin_check("node/allreduce");
  // Named on the watchdog's board, so a rank hung inside its calls is named with its node.
  const auto node = run.world.split(run.node_index, run.me, "validate node " + std::to_string(run.node_index));
  const CollectiveProbe p = probe_in_turns(run, node->size() > 1 ? node.get() : nullptr, run.current,
                                           [&](int r) { return run.node_index_of(r); });
  const int local = node->rank();
  const auto all = run.gather({p.busbw, p.lag_ms.empty() ? 0.0 : p.lag_ms[size_t(local)], p.work_ms});
  // Decided from the inventory, the same on every rank: the check needs every node to have
  // two ranks or more (a one-rank node has no collective to measure).
  std::map<int, int> node_sizes;
  for (const json& r : run.inv) ++node_sizes[r.value("node_index", 0)];
  const bool all_multi = std::all_of(node_sizes.begin(), node_sizes.end(), [](const auto& e) { return e.second > 1; });
  if (!all_multi) {
    run.add_check({"node/allreduce", "skip", "a node with one rank: no collective within it to compare", {}, {},
                   json::object(), {}});
    return;
  }
  Metric bus{"GB/s", {}, true}, late{"% of the work", {}, false};
  json lag = json::object(), work = json::object();
  for (int r = 0; r < run.n; ++r) {
    bus.per_rank.push_back(all[3 * size_t(r)]);
    const double l = all[3 * size_t(r) + 1], w = all[3 * size_t(r) + 2];
    late.per_rank.push_back(w > 0 ? 100.0 * l / w : 0.0);
    lag["rank " + std::to_string(r)] = l, work["rank " + std::to_string(r)] = w;
  }
  run.add_metric("node/allreduce_busbw_GBps", bus);
  late.extra = {{"lateness_ms", lag}, {"node_work_ms", work}};
  if (const std::string why = crowded(run.inv, false); !why.empty())
    run.add_check({"node/arrival", "skip", why, {}, {}, late.extra, {}});
  else
    run.add_metric("node/arrival_late_pct", late);
}

}  // namespace

void medium_level(ValidateRun& run) {
  check_compute(run);
  check_copy(run);
  check_node_sendrecv(run);
  check_node_allreduce(run);
}

}  // namespace dtb
