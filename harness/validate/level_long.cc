// Level long of `dtbench validate`: every pair's send/recv (round-robin), the all-reduce of
// groups of two nodes and of the world (bus bandwidth, arrival), and a few data-parallel
// training steps of the reference GPT (harness/validate_train.h).
#include <algorithm>
#include <map>
#include <set>

#include "harness/validate/collective.h"
#include "harness/validate/format.h"
#include "harness/validate/isolate.h"
#include "harness/validate/levels.h"
#include "harness/validate/links.h"
#include "harness/validate/pairs.h"
#include "harness/validate/sdc.h"
#include "harness/validate_train.h"
#include "kernels/error.h"
#include "suites/bandwidth.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace validate_detail;

// pairs: every pair once, round-robin; each rank's median over its partners; each pair against
// the pairs of its link class (a slow link named as a pair, not as a node).
void check_pairs(ValidateRun& run) {
  run.begin_check("pairs");
  if (run.n <= 1) return;
  const PairSweep sw = sweep_pairs(run.world, pair_rounds(run.n), run.inv, run.inj, *run.steps, run.current);
  std::vector<std::vector<double>> m;
  for (const auto& row : sw.seconds) m.push_back(run.gather(row));
  const size_t big = kPairSizes.back();
  run.add_metric("pairs/sendrecv_GBps", {"GB/s", median_bandwidth(m.back(), run.n, big), true});
  run.add_check({"pairs/sendrecv_matrix", "pass",
                 "every pair's send/recv bandwidth, " + std::to_string(big >> 20) +
                     " MiB each way, both directions counted (2 x bytes / seconds, GB/s)",
                 {}, {}, {{"matrix_GBps", bandwidth_matrix_json(m.back(), run.n, big)}, {"bytes", big}}, {}});
  run.add_check(alpha_beta_check(m, run.node_of_rank, "pairs/alpha_beta"));
  // pairs/links: each pair against its link class, after the sweep's retests.
  std::vector<double> gbps(m.back().size(), 0.0);
  for (size_t i = 0; i < gbps.size(); ++i)
    gbps[i] = m.back()[i] > 0 ? algbw_GBps(2 * big, m.back()[i]) : 0.0;  // both directions, as the matrix
  std::vector<std::string> hosts;
  for (int r = 0; r < run.n; ++r) hosts.push_back(run.host(r));
  int retests = 0;
  for (const auto& again : sw.retested) retests += again.empty() ? 0 : 1;
  const bool busy = !crowded(run.inv, true).empty();
  ValidateCheck links =
      links_check(gbps, run.node_of_rank, hosts, retests, busy ? kLinkThresholdsCrowded : kLinkThresholds);
  if (busy) {  // the reason without its last clause, which is about arrival
    const std::string why = crowded(run.inv, true);
    links.detail += "; slow below " + num_str(kLinkThresholdsCrowded.link) + " of the quartile, not " +
                    num_str(kLinkThresholds.link) + ", as the timings share cores: " + why.substr(0, why.find(", so "));
  }
  run.add_check(links);
}

// pairs/isolation (--pairs adaptive): groups of nodes measured at once as rings of pairs, the
// failed ones split in halves, the suspects confirmed with known-good partners (isolate.h).
// Every rank plans the same rounds from the same gathered figures.
void check_isolation(ValidateRun& run) {
  run.begin_check("pairs");
  const std::set<std::string> nodes(run.node_of_rank.begin(), run.node_of_rank.end());
  if (run.n < 3 || int(nodes.size()) != run.n) {
    run.add_check({"pairs/isolation", "skip",
                   run.n < 3 ? "fewer than 3 nodes: a ring of fewer than 3 pairs gives no quartile to judge by"
                             : "--pairs adaptive measures one rank per node, and a node here runs several: use --pairs all",
                   {}, {}, json::object(), {}});
    return;
  }
  const size_t big = kPairSizes.back();
  const std::string why = crowded(run.inv, true);
  Isolation iso = isolation_start(run.n, (why.empty() ? kLinkThresholds : kLinkThresholdsCrowded).link);
  std::map<std::pair<int, int>, double> gbps;  // (a < b): the lower direction's 4 MiB figure
  auto measure = [&](const std::vector<std::pair<int, int>>& pairs) {
    const PairSweep sw = sweep_pairs(run.world, disjoint_rounds(pairs), run.inv, run.inj, *run.steps, run.current);
    const std::vector<double> m = run.gather(sw.seconds.back());
    for (const auto& [a, b] : pairs) {
      const double t = std::max(m[size_t(a * run.n + b)], m[size_t(b * run.n + a)]);
      gbps[{std::min(a, b), std::max(a, b)}] = t > 0 ? algbw_GBps(2 * big, t) : 0.0;  // both directions, as pairs/links
    }
  };
  const PairFigure fig = [&](int a, int b) {
    const auto it = gbps.find({std::min(a, b), std::max(a, b)});
    return it == gbps.end() ? 0.0 : it->second;
  };
  while (!iso.pending.empty()) {
    std::vector<std::pair<int, int>> pairs;
    for (const auto& g : iso.pending)
      for (const auto& p : ring_pairs(g)) pairs.push_back(p);
    measure(pairs);
    isolation_judge_round(iso, fig);
  }
  if (const auto confirm = isolation_confirm_pairs(iso); !confirm.empty()) measure(confirm);
  isolation_confirm(iso, fig);
  std::vector<std::string> hosts;
  for (int r = 0; r < run.n; ++r) hosts.push_back(run.host(r));
  ValidateCheck c = isolation_check(iso, run.node_of_rank, hosts);
  if (!why.empty())
    c.detail += "; slow below " + num_str(kLinkThresholdsCrowded.link) + " of the quartile, not " +
                num_str(kLinkThresholds.link) + ", as the timings share cores: " + why.substr(0, why.find(", so "));
  run.add_check(c);
}

// groups/allreduce: nodes in groups of two (nodes 2k and 2k + 1, as under one leaf switch when
// the hostfile lists them so), each group's all-reduce at once (groups sharing a host take
// turns); each group's busbw against the other groups'.
void check_groups_allreduce(ValidateRun& run) {
  run.begin_check("groups/allreduce");
  int nodes = 0;
  for (const json& r : run.inv) nodes = std::max(nodes, r.value("node_index", 0) + 1);
  if (nodes < 4) {
    run.add_check({"groups/allreduce", "skip", "fewer than 4 nodes: groups of 2 nodes would be fewer than 2 to compare",
                   {}, {}, json::object(), {}});
    return;
  }
  const int group = run.node_index / 2;
  const auto gcomm = run.world.split(group, run.me, "validate group " + std::to_string(group));
  const CollectiveProbe p = probe_in_turns(run, gcomm.get(), "groups/allreduce",
                                           [&](int r) { return run.node_index_of(r) / 2; });
  const auto all = run.gather({p.busbw});
  run.add_metric("groups/allreduce_busbw_GBps", {"GB/s", all, true});
}

// world/allreduce: every rank at once, bus bandwidth and arrival times.
void check_world_allreduce(ValidateRun& run) {
  run.begin_check("world/allreduce");
  if (run.n <= 1) return;
  run.steps->arrive(run.current);
  const CollectiveProbe p = probe_allreduce(run.world, run.compute_factor());
  run.steps->arrive(run.current);
  run.add_metric("world/allreduce_busbw_GBps", {"GB/s", std::vector<double>(size_t(run.n), p.busbw), true});
  Metric late{"% of the work", {}, false};
  json lag = json::object();
  for (int r = 0; r < run.n; ++r) {
    late.per_rank.push_back(p.work_ms > 0 ? 100.0 * p.lag_ms[size_t(r)] / p.work_ms : 0.0);
    lag["rank " + std::to_string(r)] = p.lag_ms[size_t(r)];
  }
  late.extra = {{"lateness_ms", lag}, {"work_ms", p.work_ms}, {"busbw_GBps", p.busbw}};
  if (const std::string why = crowded(run.inv, true); !why.empty())
    run.add_check({"world/arrival", "skip", why, {}, {}, late.extra, {}});
  else
    run.add_metric("world/arrival_late_pct", late);
}

// The train check's verdict: finite losses, replicas bitwise equal (`hashes`: each rank's
// parameters; a rank off the majority's is named, so an odd rank 0 is named alone), a falling loss.
void judge_train(ValidateCheck& c, const TrainProbe& tp, const std::vector<uint64_t>& hashes,
                 const std::vector<std::string>& node_of_rank) {
  const ValidateCheck odd = replicas_check(hashes, node_of_rank, tp.steps);
  if (!tp.finite) {
    c.status = "fail", c.detail = "a loss was not finite";
  } else if (odd.status == "fail") {
    c.status = "fail", c.ranks = odd.ranks, c.nodes = odd.nodes, c.node_detail = odd.node_detail;
    c.detail = odd.detail;
  } else if (!(tp.last_loss < tp.first_loss)) {
    c.status = "fail";
    c.detail = "the loss did not fall: " + num_str(tp.first_loss) + " to " + num_str(tp.last_loss);
  } else {
    c.detail = tp.model + ": loss " + num_str(tp.first_loss) + " to " + num_str(tp.last_loss) + " in " +
               std::to_string(tp.steps) + " steps, replicas bitwise equal, " + num_str(1e3 * tp.step_seconds) +
               " ms a step";
  }
}

// train: a few data-parallel steps of the reference GPT on the whole world.
void check_train(ValidateRun& run) {
  run.begin_check("train");
  run.steps->arrive(run.current);
  const TrainProbe tp = validate_train_steps(run.world, 6, run.compute_factor());
  run.steps->arrive(run.current);
  const double tokens = tp.step_seconds > 0 ? tp.tokens_per_s * tp.step_seconds : 0;
  // This rank's own speed: tokens over its compute time (wall; CPU time on a host with more
  // ranks than cores, where wall time counts the waits for a core).
  const bool by_cpu = !crowded(run.inv, true).empty();
  const double own = by_cpu ? tp.compute_cpu_seconds : tp.compute_seconds;
  const auto all = run.gather({own > 0 ? tokens / own : 0.0, double(tp.param_hash >> 32),
                               double(tp.param_hash & 0xffffffffu), tp.step_seconds});
  Metric tps{"tokens/s", {}, true};
  std::vector<uint64_t> hashes;
  for (int r = 0; r < run.n; ++r) {
    tps.per_rank.push_back(all[4 * size_t(r)]);
    hashes.push_back(uint64_t(all[4 * size_t(r) + 1]) << 32 | uint64_t(all[4 * size_t(r) + 2]));
  }
  run.add_metric("train/tokens_per_s", tps);
  ValidateCheck c{"train/world", "pass", "", {}, {}, {{"model", tp.model}, {"steps", tp.steps},
                  {"first_loss", tp.first_loss}, {"last_loss", tp.last_loss}, {"step_seconds", tp.step_seconds},
                  {"tokens_per_s_from", by_cpu ? "compute CPU time" : "compute wall time"}}, {}};
  judge_train(c, tp, hashes, run.node_of_rank);
  run.add_check(c);
}

}  // namespace

void long_level(ValidateRun& run) {
  if (run.args.pairs == "adaptive")
    check_isolation(run);
  else
    check_pairs(run);
  check_groups_allreduce(run);
  check_world_allreduce(run);
  check_train(run);
  run.begin_check("");
}

}  // namespace dtb
