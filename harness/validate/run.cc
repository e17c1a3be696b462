// One run of `dtbench validate` (see run.h): level quick's inventory gathered on every rank,
// and the bookkeeping of what has been measured.
#include "harness/validate/run.h"

#include <unistd.h>

#include <algorithm>

#include "harness/validate/inventory.h"
#include "harness/validate/rules.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

// This rank's index among the ranks on its host, in world-rank order (the order of
// MPI_COMM_TYPE_SHARED's split with key 0, from the hosts' names). Collective.
int rank_on_host(Communicator& world) {
  char name[256] = "?";
  gethostname(name, sizeof name - 1);
  const std::vector<std::string> hosts = all_gather_strings(world, name);
  int k = 0;
  for (int r = 0; r < world.rank(); ++r) k += hosts[size_t(r)] == hosts[size_t(world.rank())] ? 1 : 0;
  return k;
}

}  // namespace

ValidateRun::ValidateRun(Communicator& w, const ValidateArgs& a, const Injection& injection)
    : world(w), args(a), inj(injection), n(w.size()), me(w.rank()) {
  // Where this rank sits: emulated nodes, or its index among the ranks of its host.
  int local_rank = 0;
  const bool emulated = a.ranks_per_node > 0;
  if (emulated) {
    node_index = me / a.ranks_per_node;
    local_rank = me % a.ranks_per_node;
  } else {
    local_rank = rank_on_host(world);
  }
  std::string device, device_error;
  if (a.backend == "cpu") {
    device = "cpu: " + cpu_model();
  } else {
    try {
      gpu = make_cuda_backend(local_rank);
      device = gpu->device_name();
    } catch (const std::exception& e) {
      device_error = e.what();
    }
  }
  json mine = rank_inventory(me, node_index, local_rank, emulated, device, a.backend);
  if (!device_error.empty()) mine["device_error"] = device_error;
  if (gpu)
    for (const auto& [k, v] : gpu->device_inventory()) mine[k] = v;
  for (const std::string& s : all_gather_strings(world, mine.dump())) inv.push_back(json::parse(s));
  // Real nodes are numbered by first appearance of their host.
  if (!emulated) {
    std::map<std::string, int> index;
    for (json& r : inv) r["node_index"] = index.emplace(r["node"].get<std::string>(), int(index.size())).first->second;
    node_index = inv[size_t(me)]["node_index"];
  }
  if (emulated)  // the same decision on every rank: all hold the inventory
    for (int r = 0; r < n; ++r)
      if (inv[size_t(r)].value("host", "") != inv[size_t(r - r % a.ranks_per_node)].value("host", ""))
        throw InputError("--ranks-per-node " + std::to_string(a.ranks_per_node) + ": emulated node " +
                         std::to_string(r / a.ranks_per_node) + " spans hosts " +
                         inv[size_t(r - r % a.ranks_per_node)].value("host", "") + " and " +
                         inv[size_t(r)].value("host", "") + " (an emulated node must sit on one host)");
  for (const json& r : inv) node_of_rank.push_back(r.value("node", "?"));
  steps = std::make_unique<Steps>(world, a.check_timeout);
  // This rank's turn among the ranks of its machine (its host, or the hosts that share one
  // kernel): they share its cores and memory.
  const std::vector<std::string> machine = machine_of_rank(inv);
  std::map<std::string, int> per_machine;
  for (int r = 0; r < n; ++r) {
    const int k = per_machine[machine[size_t(r)]]++;
    if (r == me) turn = k;
    turns = std::max(turns, k + 1);
  }
}

void ValidateRun::begin_check(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu);
  current = name;
}

void ValidateRun::add_check(ValidateCheck c) {
  std::lock_guard<std::mutex> lock(mu);
  pass.checks.push_back(std::move(c));
}

void ValidateRun::add_metric(const std::string& name, Metric m) {
  std::lock_guard<std::mutex> lock(mu);
  pass.metrics[name] = std::move(m);
}

std::vector<double> ValidateRun::gather(const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * size_t(n));
  world.all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  return all;
}

void ValidateRun::add_two_metrics(std::pair<double, double> mine, const std::string& first, const std::string& second) {
  const auto all = gather({mine.first, mine.second});
  Metric m1{validate_metrics().at(first).unit, {}, true}, m2{validate_metrics().at(second).unit, {}, true};
  for (int r = 0; r < n; ++r) m1.per_rank.push_back(all[2 * size_t(r)]), m2.per_rank.push_back(all[2 * size_t(r) + 1]);
  add_metric(first, m1);
  add_metric(second, m2);
}

std::map<std::string, Metric> ValidateRun::measured_so_far() const {
  std::map<std::string, Metric> done = metrics;
  for (const auto& [name, m] : pass.metrics) {
    auto it = done.find(name);
    if (it == done.end()) {
      done[name] = m;
      continue;
    }
    for (size_t r = 0; r < m.per_rank.size() && r < it->second.per_rank.size(); ++r)
      it->second.per_rank[r] = m.higher_is_better ? std::min(it->second.per_rank[r], m.per_rank[r])
                                                  : std::max(it->second.per_rank[r], m.per_rank[r]);
  }
  return done;
}

}  // namespace dtb
