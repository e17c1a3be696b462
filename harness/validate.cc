#include "harness/validate.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <set>

#include "harness/report.h"
#include "harness/validate_train.h"
#include "kernels/backend.h"
#include "kernels/comm/watchdog.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

const std::map<std::string, bool> kExpectKeys = {  // key -> numeric
    {"nodes", true}, {"ranks_per_node", true}, {"gpus_per_node", true},
    {"device", false}, {"cores", true}, {"memory_gb", true}};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

double mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("MemTotal:", 0) == 0) return std::stod(line.substr(9)) * 1024.0;
  return 0;
}

// Every rank's string, in rank order: lengths by all_reduce max, then the strings padded to
// whole i32 words through one all_gather.
std::vector<std::string> all_gather_strings(Communicator& world, const std::string& s) {
  int len = int(s.size());
  world.all_reduce(&len, &len, 1, DType::i32, ReduceOp::max);
  const size_t words = (size_t(len) + 4) / 4;  // + the terminating 0
  std::vector<int32_t> mine(words, 0), all(words * size_t(world.size()), 0);
  std::memcpy(mine.data(), s.data(), s.size());
  world.all_gather(mine.data(), all.data(), words, DType::i32);
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) out.emplace_back(reinterpret_cast<const char*>(all.data() + size_t(r) * words));
  return out;
}

// 2 -> "2", 2.5 -> "2.5".
std::string num_str(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// The value most ranks report for `key` (ties: the lowest rank's).
json majority(const std::vector<json>& inv, const std::string& key) {
  std::map<std::string, int> count;
  for (const json& r : inv) count[r.value(key, json()).dump()]++;
  std::string best = inv.front().value(key, json()).dump();
  for (const json& r : inv)
    if (count[r.value(key, json()).dump()] > count[best]) best = r.value(key, json()).dump();
  return json::parse(best);
}

}  // namespace

std::map<std::string, std::string> parse_expectations(const std::string& spec) {
  std::map<std::string, std::string> out;
  if (spec.empty()) return out;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--expect: '" + item + "' is not key=value (keys: nodes, ranks_per_node, gpus_per_node, device, "
                       "cores, memory_gb)");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const auto k = kExpectKeys.find(key);
    if (k == kExpectKeys.end())
      throw InputError("--expect: unknown key '" + key + "' (keys: nodes, ranks_per_node, gpus_per_node, device, cores, "
                       "memory_gb)");
    if (value.empty()) throw InputError("--expect: " + key + " has an empty value");
    if (k->second) {
      char* e = nullptr;
      const double v = std::strtod(value.c_str(), &e);
      if (e == value.c_str() || *e != '\0' || !std::isfinite(v) || v < 0)
        throw InputError("--expect: " + key + "=" + value + " is not a non-negative number");
      const bool count = key == "nodes" || key == "ranks_per_node" || key == "gpus_per_node" || key == "cores";
      if (count && (v != std::floor(v) || (key != "gpus_per_node" && v < 1)))
        throw InputError("--expect: " + key + "=" + value + " is not a whole number" +
                         (key != "gpus_per_node" ? " >= 1" : ""));
    }
    if (!out.emplace(key, value).second) throw InputError("--expect: " + key + " given twice");
    start = end + 1;
  }
  return out;
}

json rank_inventory(int rank, int node_index, int local_rank, bool emulated, const std::string& device,
                    const std::string& backend) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  std::string mpi(mpi_version, size_t(len));
  if (auto nl = mpi.find_first_of(",\n"); nl != std::string::npos) mpi = mpi.substr(0, nl);
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const double mem = mem_total_bytes();
  const std::string cpu = cpu_model();
  return {{"rank", rank},
          {"host", host},
          {"node", emulated ? std::string(host) + "/node" + std::to_string(node_index) : std::string(host)},
          {"node_index", node_index},
          {"local_rank", local_rank},
          {"cpu_model", cpu.empty() ? json(nullptr) : json(cpu)},
          {"cores", cores > 0 ? json(cores) : json(nullptr)},
          {"memory_bytes", mem > 0 ? json(mem) : json(nullptr)},
          {"backend", backend},
          {"device", device.empty() ? json(nullptr) : json(device)},
          {"mpi_version", mpi},
          {"blas_version", std::string(openblas_get_config())}};
}

std::vector<ValidateCheck> quick_checks(const std::vector<json>& inv, const std::map<std::string, std::string>& expect) {
  std::vector<ValidateCheck> checks;
  std::map<std::string, std::vector<int>> nodes;  // node -> ranks
  std::vector<std::string> node_order;
  for (const json& r : inv) {
    const std::string n = r.value("node", "?");
    if (!nodes.count(n)) node_order.push_back(n);
    nodes[n].push_back(r.value("rank", -1));
  }
  auto node_of = [&](int rank) { return inv[size_t(rank)].value("node", "?"); };

  // Ranks per node: the same on every node.
  {
    std::map<size_t, int> count;
    for (const auto& [n, rs] : nodes) count[rs.size()]++;
    size_t common = nodes.at(node_order.front()).size();
    for (const auto& [c, k] : count)
      if (k > count[common]) common = c;
    ValidateCheck c{"consistency/ranks_per_node", "pass", "", {}, {}, {{"ranks_per_node", common}}, {}};
    for (const std::string& n : node_order)
      if (nodes[n].size() != common) {
        c.nodes.push_back(n), c.ranks.insert(c.ranks.end(), nodes[n].begin(), nodes[n].end());
        c.node_detail[n] = std::to_string(nodes[n].size()) + " ranks, most nodes " + std::to_string(common);
      }
    if (c.nodes.empty()) {
      c.detail = std::to_string(nodes.size()) + " nodes of " + std::to_string(common) + " ranks";
    } else {
      c.status = "fail";
      c.detail = "node " + c.nodes.front() + " has " + std::to_string(nodes[c.nodes.front()].size()) +
                 " ranks, most nodes " + std::to_string(common);
    }
    checks.push_back(c);
  }
  // The same device, CPU model, cores, MPI and BLAS on every rank (the majority's value); and,
  // where the ranks have GPUs, the same driver, CUDA runtime, NCCL and device memory.
  for (const char* key : {"device", "cpu_model", "cores", "mpi_version", "blas_version", "driver_version",
                          "cuda_runtime_version", "nccl_version", "device_memory_bytes"}) {
    const bool gpu_key = std::string(key).find("version") != std::string::npos && std::string(key) != "mpi_version" &&
                         std::string(key) != "blas_version";
    if ((gpu_key || std::string(key) == "device_memory_bytes") &&
        std::none_of(inv.begin(), inv.end(), [&](const json& r) { return r.contains(key); }))
      continue;  // no GPU on any rank
    const json want = majority(inv, key);
    ValidateCheck c{std::string("consistency/") + key, "pass", "", {}, {}, {{"majority", want}}, {}};
    for (const json& r : inv)
      if (r.value(key, json()) != want) {
        const int rank = r.value("rank", -1);
        c.ranks.push_back(rank);
        if (std::find(c.nodes.begin(), c.nodes.end(), node_of(rank)) == c.nodes.end()) c.nodes.push_back(node_of(rank));
        c.values["rank " + std::to_string(rank)] = r.value(key, json());
        const json v = r.value(key, json());
        std::string& d = c.node_detail[node_of(rank)];
        d += (d.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " has " +
             (v.is_string() ? v.get<std::string>() : v.dump()) + ", the others " +
             (want.is_string() ? want.get<std::string>() : want.dump());
      }
    if (want.is_null()) {
      c.status = c.ranks.empty() ? "skip" : "fail";
      c.detail = c.ranks.empty() ? std::string(key) + " could not be read on any rank" : "differs between ranks";
    } else if (c.ranks.empty()) {
      c.detail = "all " + std::to_string(inv.size()) + " ranks: " + (want.is_string() ? want.get<std::string>() : want.dump());
    } else {
      c.status = "fail";
      const json& odd = inv[size_t(c.ranks.front())].value(key, json());
      c.detail = "rank " + std::to_string(c.ranks.front()) + " (node " + node_of(c.ranks.front()) + ") has " +
                 (odd.is_string() ? odd.get<std::string>() : odd.dump()) + ", the others " +
                 (want.is_string() ? want.get<std::string>() : want.dump()) +
                 (c.ranks.size() > 1 ? " (ranks " + join_ranks(c.ranks) + ")" : "");
    }
    checks.push_back(c);
  }
  // One GPU per rank: two ranks of a node on one device (a launcher's wrong mapping) would share
  // it and measure each other.
  if (std::any_of(inv.begin(), inv.end(), [](const json& r) { return r.contains("device_pci_bus_id"); })) {
    ValidateCheck c{"consistency/device_ids", "pass", "every rank of a node on its own device", {}, {}, json::object(), {}};
    for (const std::string& n : node_order) {
      std::map<std::string, std::vector<int>> by_bus;
      for (int r : nodes[n])
        by_bus[inv[size_t(r)].value("device_pci_bus_id", "unknown")].push_back(r);
      for (const auto& [bus, ranks] : by_bus)
        if (ranks.size() > 1 || bus == "unknown") {
          c.status = "fail";
          c.ranks.insert(c.ranks.end(), ranks.begin(), ranks.end());
          if (std::find(c.nodes.begin(), c.nodes.end(), n) == c.nodes.end()) c.nodes.push_back(n);
          std::string& d = c.node_detail[n];
          d += (d.empty() ? "" : "; ") + std::string("ranks ") + join_ranks(ranks) + " on device " + bus;
          c.detail = "node " + n + ": ranks " + join_ranks(ranks) + " on device " + bus;
        }
    }
    checks.push_back(c);
  }
  // Memory per node: within 5% of the median node (warn), 20% (fail).
  {
    std::vector<double> mem;
    for (const std::string& n : node_order) mem.push_back(inv[size_t(nodes[n].front())].value("memory_bytes", 0.0));
    std::vector<double> sorted = mem;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    ValidateCheck c{"consistency/memory", "pass", "", {}, {}, {{"median_bytes", median}}, {}};
    double worst = 0;
    for (size_t i = 0; i < node_order.size(); ++i) {
      const double dev = median > 0 ? std::abs(mem[i] - median) / median : 1.0;
      if (dev > 0.05) {
        c.nodes.push_back(node_order[i]), c.values[node_order[i]] = mem[i];
        c.node_status[node_order[i]] = dev > 0.20 ? "fail" : "warn";
        c.node_detail[node_order[i]] = std::to_string(int64_t(mem[i] / 1e9)) + " GB, " +
                                       std::to_string(int(std::lround(100 * dev))) + "% from the median node's " +
                                       std::to_string(int64_t(median / 1e9)) + " GB";
      }
      if (dev > worst) worst = dev;
    }
    c.status = worst > 0.20 ? "fail" : worst > 0.05 ? "warn" : "pass";
    c.detail = c.nodes.empty() ? "every node within 5% of the median " + std::to_string(int64_t(median / 1e9)) + " GB"
                               : "node " + c.nodes.front() + " is " + std::to_string(int(std::lround(100 * worst))) +
                                     "% from the median node's memory";
    checks.push_back(c);
  }
  // The expectations.
  for (const auto& [key, value] : expect) {
    ValidateCheck c{"expect/" + key, "pass", "", {}, {}, {{"expected", value}}, {}};
    auto per_node = [&](auto measure, auto ok, const std::string& what) {
      for (const std::string& n : node_order) {
        const double v = measure(n);
        c.values[n] = v;
        if (!ok(v)) c.nodes.push_back(n), c.node_detail[n] = num_str(v) + ", expected " + what;
      }
      c.status = c.nodes.empty() ? "pass" : "fail";
      c.detail = c.nodes.empty() ? "every node: " + what
                                 : "node " + c.nodes.front() + ": " + c.node_detail[c.nodes.front()];
    };
    const double want = kExpectKeys.at(key) ? std::stod(value) : 0.0;
    if (key == "nodes") {
      c.values["nodes"] = nodes.size();
      c.status = double(nodes.size()) == want ? "pass" : "fail";
      c.detail = std::to_string(nodes.size()) + " nodes, expected " + value;
    } else if (key == "ranks_per_node") {
      per_node([&](const std::string& n) { return double(nodes[n].size()); }, [&](double v) { return v == want; },
               value + " ranks");
    } else if (key == "gpus_per_node") {
      per_node(
          [&](const std::string& n) { return inv[size_t(nodes[n].front())].value("backend", "") == "cuda" ? double(nodes[n].size()) : 0.0; },
          [&](double v) { return v == want; }, value + " GPUs (one a rank on the cuda backend; 0 on cpu)");
    } else if (key == "cores") {
      per_node([&](const std::string& n) { return inv[size_t(nodes[n].front())].value("cores", 0.0); },
               [&](double v) { return v >= want; }, "at least " + value + " cores");
    } else if (key == "memory_gb") {
      per_node([&](const std::string& n) { return inv[size_t(nodes[n].front())].value("memory_bytes", 0.0) / 1e9; },
               [&](double v) { return v >= want; }, "at least " + value + " GB");
    } else if (key == "device") {
      for (const json& r : inv) {
        const json d = r.value("device", json());
        if (!d.is_string() || lower(d.get<std::string>()).find(lower(value)) == std::string::npos) {
          const int rank = r.value("rank", -1);
          c.ranks.push_back(rank);
          if (std::find(c.nodes.begin(), c.nodes.end(), node_of(rank)) == c.nodes.end()) c.nodes.push_back(node_of(rank));
          std::string& dd = c.node_detail[node_of(rank)];
          dd += (dd.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " has " +
                (d.is_string() ? d.get<std::string>() : "no device") + ", expected '" + value + "'";
        }
      }
      c.status = c.ranks.empty() ? "pass" : "fail";
      const json first = c.ranks.empty() ? json() : inv[size_t(c.ranks.front())].value("device", json());
      c.detail = c.ranks.empty() ? "every rank's device matches '" + value + "'"
                                 : "rank " + std::to_string(c.ranks.front()) + " (node " + node_of(c.ranks.front()) +
                                       ") has " + (first.is_string() ? first.get<std::string>() : "no device") +
                                       ", expected '" + value + "'" +
                                       (c.ranks.size() > 1 ? " (ranks " + join_ranks(c.ranks) + ")" : "");
    }
    checks.push_back(c);
  }
  return checks;
}

Injection parse_injection(const std::string& spec, int world_size) {
  Injection inj;
  if (spec.empty()) return inj;
  const size_t a = spec.find(':'), b = spec.find(':', a == std::string::npos ? a : a + 1);
  char* e = nullptr;
  const std::string rank = a == std::string::npos ? spec : spec.substr(0, a);
  const long r = std::strtol(rank.c_str(), &e, 10);
  if (a != std::string::npos && b == std::string::npos && spec.substr(a + 1) == "hang" && !rank.empty() && *e == '\0') {
    if (r < 0 || r >= world_size)
      throw InputError("--inject: rank " + rank + " is not in [0, " + std::to_string(world_size) + ")");
    inj.rank = int(r);
    inj.hang = true;
    return inj;
  }
  if (a == std::string::npos || b == std::string::npos || rank.empty() || *e != '\0')
    throw InputError("--inject: '" + spec + "' is not RANK:compute:FACTOR");
  if (r < 0 || r >= world_size)
    throw InputError("--inject: rank " + rank + " is not in [0, " + std::to_string(world_size) + ")");
  const std::string kind = spec.substr(a + 1, b - a - 1);
  if (kind != "compute" && kind != "comm")
    throw InputError(kind == "hang" ? "--inject: 'hang' takes no factor (RANK:hang)"
                                    : "--inject: '" + kind + "' is not a fault this build injects (compute, comm, hang)");
  const std::string f = spec.substr(b + 1);
  const double factor = std::strtod(f.c_str(), &e);
  if (f.empty() || *e != '\0' || !std::isfinite(factor) || factor < 1)
    throw InputError("--inject: factor '" + f + "' is not a number >= 1");
  inj.rank = int(r);
  (kind == "compute" ? inj.compute : inj.comm) = factor;
  return inj;
}

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n) {
  // Circle method: position 0 fixed, the others rotate; with odd n a dummy (n) sits out.
  const int m = n % 2 ? n + 1 : n;
  std::vector<int> pos(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) pos[size_t(i)] = i;
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (int r = 0; r < m - 1; ++r) {
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < m / 2; ++i) {
      const int a = pos[size_t(i)], b = pos[size_t(m - 1 - i)];
      if (a < n && b < n) pairs.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(pairs);
    std::rotate(pos.begin() + 1, pos.end() - 1, pos.end());
  }
  return rounds;
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string pct(double f) { return std::to_string(int(std::lround(100 * f))) + "%"; }

// One rule's outcome on every rank: "pass", "warn" or "fail" and, where not pass, one line.
struct RankOutcomes {
  std::vector<std::string> status, text;
};

// Folds per-rank outcomes into a check: the worst status, the ranks and nodes not passing, each
// node's lines; `all_pass` is the detail when every rank passes.
ValidateCheck fold(const std::string& name, const RankOutcomes& o, const std::vector<std::string>& nodes,
                   const std::string& all_pass, json values) {
  ValidateCheck c{name, "pass", all_pass, {}, {}, std::move(values), {}};
  std::string worst_text;
  for (size_t r = 0; r < o.status.size(); ++r) {
    if (o.status[r] == "pass") continue;
    c.ranks.push_back(int(r));
    if (std::find(c.nodes.begin(), c.nodes.end(), nodes[r]) == c.nodes.end()) c.nodes.push_back(nodes[r]);
    std::string& d = c.node_detail[nodes[r]];
    d += (d.empty() ? "" : "; ") + o.text[r];
    std::string& ns = c.node_status[nodes[r]];
    if (ns != "fail") ns = o.status[r];
    if (o.status[r] == "fail" && c.status != "fail") c.status = "fail", worst_text = o.text[r];
    if (o.status[r] == "warn" && c.status == "pass") c.status = "warn", worst_text = o.text[r];
  }
  if (c.status != "pass") c.detail = worst_text;
  return c;
}

// A metric's worse-than fraction against a reference: how far below it (higher is better) or
// above it (lower is better); 1 (or more) when the reference is not positive.
double worse_by(double value, double reference, bool higher_is_better) {
  if (!(reference > 0)) return 1.0;
  return higher_is_better ? 1.0 - value / reference : value / reference - 1.0;
}

// The outcomes of a drop rule (fleet_drop, baseline_drop) against `reference`, which `what`
// names ("the median", "the baseline").
RankOutcomes drop_outcomes(const ValidateRule& rule, const Metric& m, double reference, const std::string& what) {
  RankOutcomes o;
  for (size_t r = 0; r < m.per_rank.size(); ++r) {
    const double w = worse_by(m.per_rank[r], reference, m.higher_is_better);
    const bool fail = w > rule.fail, warn = rule.warn > 0 && w > rule.warn;
    o.status.push_back(fail ? "fail" : warn ? "warn" : "pass");
    o.text.push_back(fail || warn ? "rank " + std::to_string(r) + " " + num_str(m.per_rank[r]) + " " + m.unit + ", " +
                                        pct(w) + (m.higher_is_better ? " below " : " above ") + what + " " +
                                        num_str(reference) + " (rule " + rule.name + ": " + (fail ? "fail" : "warn") +
                                        " beyond " + pct(fail ? rule.fail : rule.warn) +
                                        (m.higher_is_better ? " below " : " above ") +
                                        (rule.type == "fleet_drop" ? "the fleet median" : "the baseline") + ")"
                                  : "");
  }
  return o;
}

// The outcomes of an absolute bound (min: fail below `fail`, warn below `warn`; max: above).
RankOutcomes bound_outcomes(const ValidateRule& rule, const Metric& m) {
  RankOutcomes o;
  const bool is_min = rule.type == "min";
  for (size_t r = 0; r < m.per_rank.size(); ++r) {
    const double v = m.per_rank[r];
    const bool fail = is_min ? v < rule.fail : v > rule.fail;
    const bool warn = rule.has_warn && (is_min ? v < rule.warn : v > rule.warn);
    o.status.push_back(fail ? "fail" : warn ? "warn" : "pass");
    o.text.push_back(fail || warn ? "rank " + std::to_string(r) + " " + num_str(v) + " " + m.unit + (is_min ? " < " : " > ") +
                                        num_str(fail ? rule.fail : rule.warn) + " (rule " + rule.name + ": " +
                                        (fail ? "fail" : "warn") + (is_min ? " below " : " above ") +
                                        num_str(fail ? rule.fail : rule.warn) + " " + m.unit + ")"
                                  : "");
  }
  return o;
}

const std::set<std::string> kRuleTypes = {"fleet_drop", "baseline_drop", "min", "max", "k_of"};

}  // namespace

const std::map<std::string, MetricInfo>& validate_metrics() {
  static const std::map<std::string, MetricInfo> m = {
      {"compute/gemm_gflops", {"GFLOP/s", true, true, "medium", "sgemm 1024^3 on each rank, best of 3 rounds"}},
      {"compute/triad_GBps", {"GB/s", true, true, "medium", "STREAM triad over 3 x 32 MiB on each rank"}},
      {"copy/h2d_GBps", {"GB/s", true, true, "medium", "host-to-device copy of 64 MiB from pageable memory (cuda)"}},
      {"copy/d2h_GBps", {"GB/s", true, true, "medium", "device-to-host copy of 64 MiB to pageable memory (cuda)"}},
      {"node/sendrecv_GBps", {"GB/s", true, true, "medium",
                              "send/recv bandwidth with the other ranks of its node, 4 MiB each way, both directions "
                              "counted (2 x bytes / s), median over partners"}},
      {"node/allreduce_busbw_GBps", {"GB/s", true, true, "medium",
                                     "all-reduce of 16 MiB within each node, busbw (its node's, on each rank)"}},
      {"node/arrival_late_pct", {"% of the work", false, true, "medium",
                                 "how late each rank reaches its node's all-reduce after the first, median of 15, "
                                 "as a share of the work between them", false}},
      {"world/arrival_late_pct", {"% of the work", false, true, "long",
                                  "how late each rank reaches the world's all-reduce after the first, median of 15, "
                                  "as a share of the work between them", false}},
      {"pairs/sendrecv_GBps", {"GB/s", true, true, "long",
                               "send/recv bandwidth with every other rank, 4 MiB each way, both directions counted "
                               "(2 x bytes / s), median over partners"}},
      {"groups/allreduce_busbw_GBps", {"GB/s", true, true, "long",
                                       "all-reduce of 16 MiB within each group of 2 nodes, busbw (its group's)"}},
      {"world/allreduce_busbw_GBps", {"GB/s", true, false, "long", "all-reduce of 16 MiB over every rank, busbw"}},
      {"train/tokens_per_s", {"tokens/s", true, true, "long", "data-parallel reference GPT steps on every rank"}},
  };
  return m;
}

namespace {
std::vector<ValidateRule> parse_rules_unchecked(const json& doc, const std::string& where);
}  // namespace

std::vector<ValidateRule> parse_rules(const json& doc, const std::string& where) {
  try {
    return parse_rules_unchecked(doc, where);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw InputError(where + ": " + e.what());
  }
}

namespace {
std::vector<ValidateRule> parse_rules_unchecked(const json& doc, const std::string& where) {
  auto bad = [&](const std::string& what) { return InputError(where + ": " + what); };
  if (!doc.is_object() || !doc.contains("kind") || doc["kind"] != "validate-rules" || !doc.contains("rules") ||
      !doc["rules"].is_array())
    throw bad("not a validate rules file ({\"kind\": \"validate-rules\", \"rules\": [...]})");
  if (doc["rules"].empty()) throw bad("no rules: an empty list would judge nothing");
  std::vector<ValidateRule> rules;
  std::set<std::string> names;
  for (const json& j : doc["rules"]) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
      throw bad("a rule without a \"name\"");
    ValidateRule r;
    r.name = j["name"];
    if (r.name.find_first_of("\n\r\t") != std::string::npos) throw bad("a rule name with a control character");
    auto rb = [&](const std::string& what) { return bad("rule '" + r.name + "': " + what); };
    if (!names.insert(r.name).second) throw rb("the name is used twice");
    const bool is_k_of = j.contains("type") && j["type"] == "k_of";
    for (const auto& [k, v] : j.items()) {
      if (k != "name" && k != "type" && k != "metric" && k != "fail" && k != "warn" && k != "k" && k != "of")
        throw rb("unknown key '" + k + "' (name, type, metric, fail, warn, k, of)");
      if (is_k_of && (k == "metric" || k == "fail" || k == "warn"))
        throw rb("'" + k + "' does not apply to a k_of rule (name, type, k, of)");
      if (!is_k_of && (k == "k" || k == "of")) throw rb("'" + k + "' applies to k_of rules only");
    }
    if (!j.contains("type") || !j["type"].is_string()) throw rb("needs a \"type\" (a string)");
    r.type = j.value("type", "");
    if (!kRuleTypes.count(r.type))
      throw rb("type '" + r.type + "' is not one of fleet_drop, baseline_drop, min, max, k_of");
    if (r.type == "k_of") {
      if (!j.contains("k") || !j["k"].is_number_integer() || !j.contains("of") || !j["of"].is_array() || j["of"].empty())
        throw rb("k_of needs an integer \"k\" and a list \"of\" of rule names");
      const long long k = j["k"].is_number_unsigned() && j["k"].get<unsigned long long>() > (1ull << 40)
                              ? (1ll << 40)
                              : j["k"].get<long long>();
      if (k < 1 || size_t(k) > j["of"].size())
        throw rb("k " + j["k"].dump() + " is not in [1, " + std::to_string(j["of"].size()) + "]");
      r.k = int(k);
      for (const json& n : j["of"]) {
        if (!n.is_string()) throw rb("\"of\" must list rule names");
        if (std::find(r.of.begin(), r.of.end(), n.get<std::string>()) != r.of.end())
          throw rb("\"of\" names '" + n.get<std::string>() + "' twice");
        r.of.push_back(n);
      }
    } else {
      if (!j.contains("metric") || !j["metric"].is_string()) throw rb("needs a \"metric\" (a string)");
      r.metric = j["metric"];
      if (!validate_metrics().count(r.metric)) throw rb("unknown metric '" + r.metric + "'");
      if (!j.contains("fail") || !j["fail"].is_number() || !std::isfinite(j["fail"].get<double>()))
        throw rb("needs a numeric \"fail\" threshold");
      r.fail = j["fail"];
      r.has_warn = j.contains("warn");
      if (r.has_warn && (!j["warn"].is_number() || !std::isfinite(j["warn"].get<double>())))
        throw rb("\"warn\" must be a number");
      if (r.has_warn) r.warn = j["warn"];
      const bool drop = r.type == "fleet_drop" || r.type == "baseline_drop";
      if (drop && !(r.fail > 0 && r.fail < 1)) throw rb("a drop's \"fail\" must be a fraction in (0, 1)");
      if (drop && r.has_warn && !(r.warn > 0 && r.warn < r.fail)) throw rb("\"warn\" must be in (0, fail)");
      if (r.type == "min" && r.has_warn && r.warn < r.fail) throw rb("a min rule's \"warn\" must be >= its \"fail\"");
      if (r.type == "max" && r.has_warn && r.warn > r.fail) throw rb("a max rule's \"warn\" must be <= its \"fail\"");
      if (!r.has_warn && drop) r.warn = -1;
    }
    rules.push_back(r);
  }
  for (const ValidateRule& r : rules)
    for (const std::string& n : r.of) {
      const auto it = std::find_if(rules.begin(), rules.end(), [&](const ValidateRule& x) { return x.name == n; });
      if (it == rules.end()) throw bad("rule '" + r.name + "': \"of\" names no rule '" + n + "'");
      if (it->type == "k_of") throw bad("rule '" + r.name + "': \"of\" names another k_of ('" + n + "')");
    }
  return rules;
}
}  // namespace

std::vector<ValidateRule> default_rules(const std::map<std::string, Metric>& measured, const json& baseline,
                                        double tolerance) {
  std::vector<ValidateRule> rules;
  for (const auto& [name, m] : measured) {
    const auto it = validate_metrics().find(name);
    if (it == validate_metrics().end() || !it->second.per_rank) continue;
    if (it->second.higher_is_better)
      rules.push_back({name, "fleet_drop", name, tolerance, tolerance / 2, true, 0, {}});
    else  // lateness: near 0 when healthy, so an absolute bound, not a ratio to the median
      rules.push_back({name, "max", name, 100 * tolerance, 50 * tolerance, true, 0, {}});
  }
  if (baseline.is_object())
    for (const auto& [name, entry] : baseline.at("metrics").items())
      rules.push_back({"baseline/" + name, "baseline_drop", name, tolerance, tolerance / 2, true, 0, {}});
  return rules;
}

std::vector<ValidateCheck> evaluate_rules(const std::vector<ValidateRule>& rules,
                                          const std::map<std::string, Metric>& measured, const json& baseline,
                                          const std::vector<std::string>& nodes) {
  std::vector<ValidateCheck> out;
  std::map<std::string, RankOutcomes> outcomes;  // rules that ran, for k_of
  std::set<std::string> inputs, missing;
  for (const ValidateRule& r : rules) inputs.insert(r.of.begin(), r.of.end());
  for (const ValidateRule& r : rules) {
    if (r.type == "k_of") continue;
    const auto it = measured.find(r.metric);
    const json* base = nullptr;
    if (r.type == "baseline_drop") {
      if (!baseline.is_object()) throw InputError("rule '" + r.name + "' (baseline_drop) needs --baseline");
      const json& bm = baseline.at("metrics");
      if (bm.contains(r.metric)) base = &bm.at(r.metric);
    }
    json values = {{"rule", r.name}, {"type", r.type}, {"metric", r.metric}, {"fail", r.fail}};
    if (r.has_warn && r.warn > 0) values["warn"] = r.warn;
    if (it == measured.end() || (r.type == "baseline_drop" && base == nullptr)) {
      const std::string why = it == measured.end()
                                  ? "missing: this run measured no " + r.metric +
                                        " (a level too low, or a test that could not run); rule " + r.name + " fails"
                                  : "missing: the baseline has no " + r.metric + "; rule " + r.name + " fails";
      ValidateCheck c{r.name, "fail", why, {}, {}, values, {}};
      if (base) c.values["baseline"] = base->value("value", 0.0);
      // A missing metric fails the run, a k_of's input too.
      missing.insert(r.name);
      out.push_back(c);
      continue;
    }
    const Metric& m = it->second;
    for (size_t i = 0; i < m.per_rank.size(); ++i) values["rank " + std::to_string(i)] = m.per_rank[i];
    RankOutcomes o;
    std::string all_pass;
    if (r.type == "fleet_drop") {
      const double med = median_of(m.per_rank);
      values["median"] = med;
      values["reference"] = med;
      o = drop_outcomes(r, m, med, "the median");
      all_pass = "every rank within " + pct(r.has_warn && r.warn > 0 ? r.warn : r.fail) + " of the median " +
                 num_str(med) + " " + m.unit;
    } else if (r.type == "baseline_drop") {
      const double b = base->value("value", 0.0);
      values["baseline"] = b;
      values["reference"] = b;
      o = drop_outcomes(r, m, b, "the baseline");
      all_pass = "every rank within " + pct(r.has_warn && r.warn > 0 ? r.warn : r.fail) + " of the baseline " +
                 num_str(b) + " " + m.unit;
    } else {
      o = bound_outcomes(r, m);
      all_pass = "every rank " + std::string(r.type == "min" ? ">= " : "<= ") + num_str(r.fail) + " " + m.unit;
    }
    values["unit"] = m.unit;
    if (m.extra.is_object())
      for (const auto& [k, v] : m.extra.items()) values[k] = v;
    ValidateCheck c = fold(r.name, o, nodes, all_pass, values);
    if (inputs.count(r.name)) {
      c.counts = false;  // judged through the k_of rules that name it
      c.detail = "(input of a k_of rule) " + c.detail;
    }
    outcomes[r.name] = o;
    out.push_back(c);
  }
  for (const ValidateRule& r : rules) {
    if (r.type != "k_of") continue;
    json values = {{"rule", r.name}, {"type", "k_of"}, {"k", r.k}, {"of", r.of}};
    std::vector<std::string> gone;
    for (const std::string& n : r.of)
      if (missing.count(n)) gone.push_back(n);
    if (!gone.empty()) {
      out.push_back({r.name, "fail", "rule " + gone.front() + " could not be judged (its metric is missing), so " +
                                         r.name + " fails", {}, {}, values, {}});
      continue;
    }
    RankOutcomes o;
    const size_t n = nodes.size();
    for (size_t rank = 0; rank < n; ++rank) {
      int fails = 0, warns = 0;
      std::string why;
      for (const std::string& in : r.of) {
        const RankOutcomes& x = outcomes.at(in);
        if (rank >= x.status.size()) continue;
        fails += x.status[rank] == "fail";
        warns += x.status[rank] != "pass";
        if (x.status[rank] != "pass") why += (why.empty() ? "" : "; ") + x.text[rank];
      }
      const bool fail = fails >= r.k, warn = !fail && warns >= r.k;
      o.status.push_back(fail ? "fail" : warn ? "warn" : "pass");
      o.text.push_back(fail || warn ? "rank " + std::to_string(rank) + ": " + std::to_string(fail ? fails : warns) +
                                          " of " + std::to_string(r.of.size()) + " rules " +
                                          (fail ? "failed" : "warned or failed") + " (rule " + r.name + ": fail when " +
                                          std::to_string(r.k) + " fail): " + why
                                    : "");
    }
    out.push_back(fold(r.name, o, nodes,
                       "no rank fails " + std::to_string(r.k) + " of " + std::to_string(r.of.size()) + " rules", values));
  }
  return out;
}

ValidateCheck fleet_median_check(const std::string& name, const std::string& unit, const std::vector<double>& value,
                                 const std::vector<std::string>& nodes, double tolerance) {
  return evaluate_rules({{name, "fleet_drop", name, tolerance, tolerance / 2, true, 0, {}}},
                        {{name, {unit, value, true}}}, json(), nodes)
      .front();
}

double baseline_value(std::vector<double> v) {
  // Iterative outlier removal: drop what lies more than 3 x max(MAD, 1% of the median) from
  // the median, until nothing is dropped; the median of what stays.
  for (;;) {
    const double m = median_of(v);
    std::vector<double> dev;
    for (double x : v) dev.push_back(std::abs(x - m));
    const double cut = 3.0 * std::max(median_of(dev), 0.01 * std::abs(m));
    std::vector<double> kept;
    for (double x : v)
      if (std::abs(x - m) <= cut) kept.push_back(x);
    if (kept.size() == v.size() || kept.empty()) return m;
    v = kept;
  }
}

std::vector<ValidateCheck> baseline_checks(const json& baseline, const std::map<std::string, Metric>& measured,
                                           const std::vector<std::string>& nodes, double tolerance) {
  std::vector<ValidateRule> rules;
  for (const auto& [name, entry] : baseline.at("metrics").items())
    rules.push_back({"baseline/" + name, "baseline_drop", name, tolerance, tolerance / 2, true, 0, {}});
  return evaluate_rules(rules, measured, baseline, nodes);
}

namespace {

// Spins until `until` (a slowed rank keeps its core busy, as a slower device would).
void spin_until(std::chrono::steady_clock::time_point until) {
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Best of `reps` timed runs of fn, each stretched to `factor` times its length (injection).
template <typename F>
double best_seconds(int reps, double factor, F fn) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto dt = std::chrono::steady_clock::now() - t0;
    if (factor > 1) spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(dt * factor));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// This rank's compute: sgemm FLOP/s at 1024^3 (OpenBLAS, the threads OPENBLAS_NUM_THREADS
// gives) and a STREAM triad's bytes/s over 3 x 32 MiB (beyond a 32 MiB L3), each the best of 3
// repetitions per call; the buffers are allocated and touched once.
struct ComputeProbe {
  static constexpr int n = 1024;
  static constexpr size_t m = size_t(8) << 20;
  std::vector<float> a = std::vector<float>(size_t(n) * n, 1.0f), b = std::vector<float>(size_t(n) * n, 0.5f),
                     c = std::vector<float>(size_t(n) * n, 0.0f);
  std::vector<float> x = std::vector<float>(m, 1.0f), y = std::vector<float>(m, 2.0f), z = std::vector<float>(m, 0.0f);

  std::pair<double, double> measure(double factor) {
    auto gemm = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    };
    auto triad = [&] {
      for (size_t i = 0; i < m; ++i) z[i] = x[i] + 3.0f * y[i];
    };
    gemm();  // warm-up (OpenBLAS's buffers, the caches)
    const double tg = best_seconds(3, factor, gemm);
    triad();
    const double tt = best_seconds(3, factor, triad);
    return {2.0 * n * n * double(n) / tg / 1e9, 12.0 * double(m) / tt / 1e9};
  }
};

// A check that did not finish in time: rank 0 names the ranks that never arrived, or the two
// ranks of a transfer that did not complete (`pair`: "transfer between rank 1 and rank 3").
struct CheckTimeout {
  std::string check;
  std::vector<int> ranks;
  double seconds = 0;
  std::string pair;
};

// The ranks' barrier between the steps of a check (a turn, a round of pairs), with the check's
// timeout. Each rank sends its arrival to rank 0 and sleeps in naps growing from 0.1 to 5 ms until
// rank 0 releases it (MPI's own barrier spins, and on a host whose ranks take turns the spinning
// ranks would take the cores from the one being measured: rank 0's GEMM measured 31% low so; with
// 1 ms naps throughout, the waking ranks still made a measured rank late at the all-reduce). Rank 0 waits for
// every arrival at most `timeout_s` seconds from its own; then it throws CheckTimeout naming the
// ranks still missing. An arrival may report a partner whose transfer timed out (`stuck_with`);
// rank 0 then throws CheckTimeout naming the pair. A rank that rank 0 does not release within
// 2 x timeout + 10 s (rank 0 itself hung) ends with exit status 3 and one line. On a private
// duplicate of MPI_COMM_WORLD; the receives rank 0 leaves pending on a timeout stay valid (they
// are members, and the job ends right after).
class Steps {
 public:
  explicit Steps(double timeout_s) : timeout_(timeout_s) {
    DTB_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_) == MPI_SUCCESS, "MPI_Comm_dup failed");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  Steps(const Steps&) = delete;
  Steps& operator=(const Steps&) = delete;
  ~Steps() { MPI_Comm_free(&comm_); }
  double timeout() const { return timeout_; }
  std::chrono::steady_clock::time_point deadline() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_));
  }

  void arrive(const std::string& check, int stuck_with = -1) {
    int token = stuck_with + 2;  // 1: arrived; 2 + p: arrived, a transfer with rank p timed out
    if (rank_ != 0) {
      DTB_CHECK(MPI_Send(&token, 1, MPI_INT, 0, kArrive, comm_) == MPI_SUCCESS, "MPI_Send failed");
      MPI_Request req;
      DTB_CHECK(MPI_Irecv(&token, 1, MPI_INT, 0, kRelease, comm_, &req) == MPI_SUCCESS, "MPI_Irecv failed");
      const auto give_up = std::chrono::steady_clock::now() +
                           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(2 * timeout_ + 10));
      for (int done = 0, nap = 100;; nap = std::min(2 * nap, kMaxNapUs)) {
        DTB_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Test failed");
        if (done) return;
        if (std::chrono::steady_clock::now() > give_up) {
          std::fprintf(stderr, "dtbench: error: validate: rank %d: rank 0 did not release check %s within %s s\n", rank_,
                       check.c_str(), num_str(2 * timeout_ + 10).c_str());
          std::fflush(stderr);
          std::_Exit(3);
        }
        usleep(useconds_t(nap));
      }
    }
    req_.assign(size_t(size_ > 0 ? size_ - 1 : 0), MPI_REQUEST_NULL);
    tokens_.assign(req_.size(), 0);
    for (int r = 1; r < size_; ++r)
      DTB_CHECK(MPI_Irecv(&tokens_[size_t(r - 1)], 1, MPI_INT, r, kArrive, comm_, &req_[size_t(r - 1)]) == MPI_SUCCESS,
                "MPI_Irecv failed");
    const auto until = deadline();
    for (int all = 0, nap = 100;; nap = std::min(2 * nap, kMaxNapUs)) {
      DTB_CHECK(MPI_Testall(int(req_.size()), req_.data(), &all, MPI_STATUSES_IGNORE) == MPI_SUCCESS,
                "MPI_Testall failed");
      if (all) break;
      if (std::chrono::steady_clock::now() > until) {
        CheckTimeout t{check, {}, timeout_, ""};
        for (size_t i = 0; i < req_.size(); ++i) {
          int done = 0;
          MPI_Test(&req_[i], &done, MPI_STATUS_IGNORE);
          if (!done) t.ranks.push_back(int(i) + 1);
        }
        throw t;
      }
      usleep(useconds_t(nap));
    }
    // A transfer that timed out: name its two ranks (the lower-numbered reporter first).
    for (int r = 0; r < size_; ++r) {
      const int p = (r == 0 ? token : tokens_[size_t(r - 1)]) - 2;
      if (p >= 0) {
        CheckTimeout t{check, {std::min(r, p), std::max(r, p)}, timeout_, ""};
        t.pair = "a transfer between rank " + std::to_string(t.ranks[0]) + " and rank " + std::to_string(t.ranks[1]);
        throw t;
      }
    }
    for (int r = 1; r < size_; ++r)
      DTB_CHECK(MPI_Send(&token, 1, MPI_INT, r, kRelease, comm_) == MPI_SUCCESS, "MPI_Send failed");
  }

 private:
  static constexpr int kArrive = 11, kRelease = 12;
  static constexpr int kMaxNapUs = 5000;
  double timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> req_;
  std::vector<int> tokens_;
};

// Sends `bytes` from s to `partner` and receives as many into r (nonblocking, polled until done
// or `until`). False when the deadline passed: the buffers then stay with MPI (leaked: the run
// ends at the next step's barrier).
bool exchange(int partner, std::vector<char>& s, std::vector<char>& r, size_t bytes, int tag,
              std::chrono::steady_clock::time_point until) {
  MPI_Request req[2];
  DTB_CHECK(MPI_Irecv(r.data(), int(bytes), MPI_BYTE, partner, tag, MPI_COMM_WORLD, &req[0]) == MPI_SUCCESS,
            "MPI_Irecv failed");
  DTB_CHECK(MPI_Isend(s.data(), int(bytes), MPI_BYTE, partner, tag, MPI_COMM_WORLD, &req[1]) == MPI_SUCCESS,
            "MPI_Isend failed");
  for (int done = 0;;) {
    DTB_CHECK(MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "MPI_Testall failed");
    if (done) return true;
    if (std::chrono::steady_clock::now() > until) {
      new std::vector<char>(std::move(s));  // still MPI's
      new std::vector<char>(std::move(r));
      return false;
    }
  }
}

// The message sizes of the pair sweeps, bytes each way: latency, middle, bandwidth (the last is
// the bandwidth metric's). The alpha-beta fit uses all three.
const std::vector<size_t> kPairSizes = {8, size_t(64) << 10, size_t(4) << 20};

// The best time of a bidirectional exchange of each of kPairSizes with `partner` (11 repetitions,
// the first a warm-up), seconds: each side times its own transfer, then both swap their times
// (an 8-byte exchange, not timed) and keep the longer. `factor` > 1 (--inject, both sides of a
// pair with the slowed rank) emulates a link that many times slower: the time is factor x the
// longer, and both sides spin until it has passed since the start, then swap once more (so the
// next transfer starts together). Empty when a transfer did not finish by `until`.
std::vector<double> pair_times(int partner, double factor, std::chrono::steady_clock::time_point until) {
  std::vector<double> best;
  std::vector<char> sbuf(kPairSizes.back(), 1), rbuf(kPairSizes.back());
  std::vector<char> mine(sizeof(double)), theirs(sizeof(double));
  auto swap = [&](double t) {
    std::memcpy(mine.data(), &t, sizeof t);
    if (!exchange(partner, mine, theirs, sizeof t, 8, until)) return -1.0;
    double v;
    std::memcpy(&v, theirs.data(), sizeof v);
    return v;
  };
  for (size_t bytes : kPairSizes) {
    double b = 1e300;
    for (int rep = 0; rep < 11; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!exchange(partner, sbuf, rbuf, bytes, 7, until)) return {};
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double other = swap(dt);
      if (other < 0) return {};
      if (factor > 1) {
        spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(factor * std::max(dt, other))));
        if (swap(0.0) < 0) return {};
      }
      // The longer side's transfer (both sides keep the same figure), stretched by the fault.
      if (rep > 0) b = std::min(b, std::max(dt, other) * std::max(factor, 1.0));
    }
    best.push_back(b);
  }
  return best;
}

// A sweep of pairs: rounds of disjoint pairs (world ranks); pairs of a round that share a host
// take turns (slots), as ranks do for compute: two transfers through one host's memory would
// measure each other. Three sweeps, each pair's best: where ranks share cores, one sweep's figure
// for a pair can depend on where the scheduler put its two ranks at that moment. Returns this
// rank's best time with each partner per size ([size][partner], 0: not a partner). A transfer
// that does not finish within the check's timeout is reported at the next step's barrier, where
// rank 0 ends the run naming the pair (CheckTimeout).
struct PairSweep {
  std::vector<std::vector<double>> seconds;
};
PairSweep sweep_pairs(const std::vector<std::vector<std::pair<int, int>>>& rounds, const std::vector<json>& inv,
                      const Injection& inj, Steps& steps, const std::string& check, int rank) {
  const size_t n = inv.size();
  PairSweep out{std::vector<std::vector<double>>(kPairSizes.size(), std::vector<double>(n, 0.0))};
  int stuck = -1;  // the partner of a transfer that timed out
  auto host = [&](int r) { return inv[size_t(r)].value("host", "?"); };
  auto run = [&](const std::vector<std::vector<std::pair<int, int>>>& rs) {
    for (const auto& round : rs) {
      std::vector<int> slot(round.size(), 0);
      int slots = 1;
      for (size_t i = 0; i < round.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          const std::set<std::string> hi = {host(round[i].first), host(round[i].second)};
          if (hi.count(host(round[j].first)) || hi.count(host(round[j].second))) slot[i] = std::max(slot[i], slot[j] + 1);
        }
        slots = std::max(slots, slot[i] + 1);
      }
      for (int k = 0; k < slots; ++k) {
        steps.arrive(check, stuck);
        for (size_t i = 0; i < round.size(); ++i) {
          const auto [x, y] = round[i];
          if (slot[i] != k || (x != rank && y != rank)) continue;
          const int partner = x == rank ? y : x;
          const bool slowed = rank == inj.rank || partner == inj.rank;
          const std::vector<double> t = pair_times(partner, slowed ? inj.comm : 1.0, steps.deadline());
          if (t.empty()) {
            stuck = partner;
            continue;
          }
          for (size_t s = 0; s < t.size(); ++s) {
            double& cell = out.seconds[s][size_t(partner)];
            cell = cell > 0 ? std::min(cell, t[s]) : t[s];
          }
        }
      }
    }
  };
  for (int sweep = 0; sweep < 3; ++sweep) run(rounds);
  // Retest before blaming: a pair more than 25% slower than the upper quartile is measured again,
  // twice, after a 100 ms pause of every rank, keeping its best. Two ranks that the scheduler
  // put on one core for a while measure half their bandwidth for that while (seen on a 2-core
  // machine running 4 ranks: one pair in three runs at half speed in all three sweeps, a
  // moment later at full speed); a slow link or rank measures slow again.
  for (int retest = 0; retest < 2; ++retest) {
    steps.arrive(check, stuck);
    std::vector<double> m(n * n);
    {
      CommOpScope watched(describe_comm_group(MPI_COMM_WORLD, "world").id, CommOp::all_gather);
      DTB_CHECK(MPI_Allgather(out.seconds.back().data(), int(n), MPI_DOUBLE, m.data(), int(n), MPI_DOUBLE,
                              MPI_COMM_WORLD) == MPI_SUCCESS,
                "MPI_Allgather failed");
    }
    std::vector<std::pair<int, int>> measured;
    std::vector<double> t;
    for (size_t x = 0; x < n; ++x)
      for (size_t y = x + 1; y < n; ++y)
        if (m[x * n + y] > 0 && m[y * n + x] > 0) {
          measured.emplace_back(int(x), int(y));
          t.push_back(std::max(m[x * n + y], m[y * n + x]));
        }
    // The reference is the upper quartile's time, not the median's: a slow rank's pairs (n - 1
    // of them) would otherwise pull the median down to their own speed.
    std::vector<double> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    const double ref = sorted.empty() ? 0.0 : sorted[sorted.size() / 4];
    std::vector<std::vector<std::pair<int, int>>> again;  // the suspects, packed into disjoint rounds
    for (size_t i = 0; i < measured.size(); ++i) {
      if (!(t[i] > ref / 0.75)) continue;
      const int x = measured[i].first, y = measured[i].second;
      auto fits = [&](const std::vector<std::pair<int, int>>& r) {
        return std::none_of(r.begin(), r.end(), [&](const auto& q) {
          return q.first == x || q.second == x || q.first == y || q.second == y;
        });
      };
      auto it = std::find_if(again.begin(), again.end(), fits);
      if (it == again.end()) again.push_back({measured[i]});
      else it->push_back(measured[i]);
    }
    if (again.empty()) break;
    usleep(100000);
    run(again);
  }
  steps.arrive(check, stuck);
  return out;
}

}  // namespace

// The latency-bandwidth model t(n) = alpha + n / beta fitted by weighted least squares to
// (bytes, seconds) points (Hockney's model, the alpha-beta of the MPI literature), each point
// weighted by 1 / t^2 so that the residuals are relative: plain least squares lets the
// largest message's microseconds of noise swamp the smallest's whole time, and alpha came out
// negative so. Alpha in seconds, beta in bytes/s. Needs two distinct sizes; {0, 0} otherwise.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& pts) {
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    const double w = y > 0 ? 1.0 / (y * y) : 0.0;
    s += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double den = s * sxx - sx * sx;
  if (pts.size() < 2 || !(den > 0)) return {0, 0};
  const double slope = (s * sxy - sx * sy) / den;
  return {(sy - slope * sx) / s, slope > 0 ? 1.0 / slope : 0.0};
}

namespace {

// An all-reduce over `comm` (the ranks of a node, or the world): `busbw` of a 16 MiB float sum,
// best of 5 after a warm-up, 2 (n - 1) / n x bytes / seconds (nccl-tests' bus bandwidth, GB/s);
// and each rank's arrival: 15 iterations of a fixed piece of work (sgemm 768^3, about 8 ms a core, stretched by the
// test-only compute fault) then an 8-byte all-reduce, each rank timing its wait inside it. The
// last to arrive waits least, so rank r's lateness in an iteration is the longest wait less its
// own: a measure free of clock offsets between hosts. lag_ms: each rank's median lateness,
// work_ms: the median time of the work, both in comm's rank order.
struct CollectiveProbe {
  double busbw = 0;
  std::vector<double> lag_ms;
  double work_ms = 0;
};
CollectiveProbe probe_allreduce(MPI_Comm comm, const std::string& name, double factor) {
  // On the communication watchdog's board, so a rank hung inside these calls is named.
  const uint64_t gid = describe_comm_group(comm, name).id;
  int n = 1;
  MPI_Comm_size(comm, &n);
  CollectiveProbe p;
  const size_t count = size_t(4) << 20;
  std::vector<float> buf(count, 1.0f);
  double best = 1e300;
  for (int rep = 0; rep < 6; ++rep) {
    {
      CommOpScope watched(gid, CommOp::barrier);
      MPI_Barrier(comm);
    }
    const auto t0 = std::chrono::steady_clock::now();
    {
      CommOpScope watched(gid, CommOp::all_reduce);
      DTB_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(count), MPI_FLOAT, MPI_SUM, comm) == MPI_SUCCESS,
                "MPI_Allreduce failed");
    }
    if (rep > 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  {  // the collective's time is its slowest member's: every rank reports the same busbw
    CommOpScope watched(gid, CommOp::all_reduce);
    DTB_CHECK(MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MAX, comm) == MPI_SUCCESS, "MPI_Allreduce failed");
  }
  p.busbw = n > 1 ? 2.0 * (n - 1) / n * double(count * sizeof(float)) / best / 1e9 : 0.0;
  const int w = 768, iters = 15;
  std::vector<float> a(size_t(w) * w, 0.5f), b(size_t(w) * w, 0.25f), c(size_t(w) * w);
  std::vector<double> waits(iters), works(iters);
  {
    CommOpScope watched(gid, CommOp::barrier);
    MPI_Barrier(comm);
  }
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, w, w, w, 1.0f, a.data(), w, b.data(), w, 0.0f, c.data(), w);
    const auto dt = std::chrono::steady_clock::now() - t0;
    if (factor > 1) spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(dt * factor));
    const auto t1 = std::chrono::steady_clock::now();
    works[size_t(i)] = std::chrono::duration<double>(t1 - t0).count();
    double x = 1;
    {
      CommOpScope watched(gid, CommOp::all_reduce);
      DTB_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm) == MPI_SUCCESS, "MPI_Allreduce failed");
    }
    waits[size_t(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  std::vector<double> all(size_t(n) * iters), all_work(size_t(n) * iters);
  {
    CommOpScope watched(gid, CommOp::all_gather);
    DTB_CHECK(MPI_Allgather(waits.data(), iters, MPI_DOUBLE, all.data(), iters, MPI_DOUBLE, comm) == MPI_SUCCESS &&
                  MPI_Allgather(works.data(), iters, MPI_DOUBLE, all_work.data(), iters, MPI_DOUBLE, comm) ==
                      MPI_SUCCESS,
              "MPI_Allgather failed");
  }
  for (int r = 0; r < n; ++r) {
    std::vector<double> late;
    for (int i = 0; i < iters; ++i) {
      double longest = 0;
      for (int q = 0; q < n; ++q) longest = std::max(longest, all[size_t(q) * iters + size_t(i)]);
      late.push_back(longest - all[size_t(r) * iters + size_t(i)]);
    }
    p.lag_ms.push_back(1e3 * median_of(late));
  }
  p.work_ms = 1e3 * median_of(all_work);
  return p;
}

}  // namespace

namespace {

struct ReportExtra {
  json metrics = json::object();  // every metric measured: unit, direction, per-rank values
  bool incomplete = false;
  std::vector<std::string> levels_run;
  json rules = json::array();
  int loops = 1;
};
int write_verdict(const ValidateArgs& a, const std::vector<json>& inv, const std::vector<ValidateCheck>& checks,
                  std::chrono::steady_clock::time_point t0, const ReportExtra& extra);

// Reads a JSON file for --baseline or --rules on rank 0 (the other ranks may have no shared
// filesystem) and parses it on every rank: InputError on every rank, naming the option and file.
json read_json_file(Communicator& world, const std::string& option, const std::string& path) {
  const std::string text = on_root(world, [&] {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw InputError(option + " " + path + ": is a directory, not a file");
    if (!std::filesystem::exists(path, ec)) throw InputError(option + " " + path + ": no such file");
    if (!std::filesystem::is_regular_file(path, ec)) throw InputError(option + " " + path + ": not a regular file");
    std::ifstream f(path, std::ios::binary);
    std::string t((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) throw InputError(option + " " + path + ": cannot read it");
    return t;
  });
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse errors, numbers beyond a double
    throw InputError(option + " " + path + ": malformed JSON (" + e.what() + ")");
  }
}

// Refuses, before anything is measured, an output path dtbench could not write or would
// destroy: an existing directory, symlink, FIFO or device (the report is written to a temporary
// file renamed over the path), or a parent that is not a directory. Checked on rank 0, which
// writes; InputError on every rank.
void check_output_path(Communicator& world, const std::string& option, const std::string& path) {
  on_root(world, [&] {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (path.empty()) throw InputError(option + " is empty");
    const fs::file_status st = fs::symlink_status(path, ec);
    if (fs::exists(st) && !fs::is_regular_file(st))
      throw InputError(option + " " + path + ": exists and is not a regular file (a directory, link, FIFO or device)");
    for (fs::path p = fs::path(path).parent_path(); !p.empty(); p = p.parent_path()) {
      const fs::file_status ps = fs::status(p, ec);
      if (fs::exists(ps)) {
        if (!fs::is_directory(ps)) throw InputError(option + " " + path + ": " + p.string() + " is not a directory");
        break;
      }
      if (p == p.parent_path()) break;
    }
    return std::string();
  });
}

// The checks of one pass over the measuring levels, and the metrics it measured.
struct ValidatePass {
  std::vector<ValidateCheck> checks;
  std::map<std::string, Metric> metrics;
};

// The worse of two statuses: fail > warn > pass > skip.
int severity(const std::string& s) { return s == "fail" ? 3 : s == "warn" ? 2 : s == "pass" ? 1 : 0; }

}  // namespace

int cmd_validate(Communicator& world, const ValidateArgs& a) {
  const bool root = world.rank() == 0;
  if (a.level != "quick" && a.level != "medium" && a.level != "long" && a.level != "burnin")
    throw InputError("--level '" + a.level + "' is not one of quick, medium, long, burnin");
  if (!(a.tolerance > 0 && a.tolerance < 1)) throw InputError("--tolerance must be in (0, 1)");
  if (!(a.check_timeout >= 1 && a.check_timeout <= 1e6))
    throw InputError("--check-timeout must be a number of seconds in [1, 1e6]");
  if (!(a.duration > 0 && a.duration <= 1e7)) throw InputError("--duration must be a number of seconds in (0, 1e7]");
  if (!a.make_baseline.empty() && a.level == "quick")
    throw InputError("--make-baseline needs --level medium or higher: level quick measures no metric");
  if (!a.make_baseline.empty() && !a.inject.empty())
    throw InputError("--make-baseline with --inject would make the injected fault the baseline");
  {
    std::error_code ec1, ec2;
    if (!a.make_baseline.empty() && std::filesystem::weakly_canonical(a.make_baseline, ec1) ==
                                        std::filesystem::weakly_canonical(a.output, ec2))
      throw InputError("--make-baseline and --output are the same file, " + a.output);
  }
  check_output_path(world, "--output", a.output);
  if (!a.make_baseline.empty()) check_output_path(world, "--make-baseline", a.make_baseline);
  const Injection inj = parse_injection(a.inject, world.size());
  json baseline;
  if (!a.baseline.empty()) {
    baseline = read_json_file(world, "--baseline", a.baseline);
    const std::string where = "--baseline " + a.baseline + ": ";
    if (!baseline.is_object() || !baseline.contains("kind") || baseline["kind"] != "validate-baseline" ||
        !baseline.contains("metrics") || !baseline["metrics"].is_object())
      throw InputError(where + "not a validate baseline (kind \"validate-baseline\")");
    if (baseline["metrics"].empty()) throw InputError(where + "no metrics: it would judge nothing");
    for (const auto& [k, v] : baseline["metrics"].items()) {
      const auto info = validate_metrics().find(k);
      if (info == validate_metrics().end()) throw InputError(where + "unknown metric '" + k + "'");
      if (!v.is_object() || !v.contains("value") || !v["value"].is_number() || !std::isfinite(v["value"].get<double>()) ||
          !(v["value"].get<double>() > 0))
        throw InputError(where + "metric " + k + " has no positive numeric \"value\"");
      if (v.contains("unit") && v["unit"] != info->second.unit)
        throw InputError(where + "metric " + k + " is in " + v["unit"].dump() + ", dtbench measures it in " +
                         info->second.unit);
    }
  }
  std::vector<ValidateRule> file_rules;
  if (!a.rules.empty()) {
    file_rules = parse_rules(read_json_file(world, "--rules", a.rules), "--rules " + a.rules);
    for (const ValidateRule& r : file_rules)
      if (r.type == "baseline_drop" && a.baseline.empty())
        throw InputError("--rules " + a.rules + ": rule '" + r.name + "' (baseline_drop) needs --baseline");
  }
  if (a.backend != "cpu" && a.backend != "cuda") throw InputError("--backend '" + a.backend + "' is not cpu or cuda");
  const auto expect = parse_expectations(a.expect);
  if (a.ranks_per_node < 0) throw InputError("--ranks-per-node must be positive");
  if (a.ranks_per_node > 0 && world.size() % a.ranks_per_node != 0)
    throw InputError("--ranks-per-node " + std::to_string(a.ranks_per_node) + " does not divide the " +
                     std::to_string(world.size()) + " ranks");
  const bool medium = a.level != "quick", long_level = a.level == "long" || a.level == "burnin";
  const auto t0 = std::chrono::steady_clock::now();
  if (root) {
    std::printf("# validate %s: inventory and consistency of %d ranks%s", a.level.c_str(), world.size(),
                a.ranks_per_node > 0 ? (", emulated nodes of " + std::to_string(a.ranks_per_node) + " ranks (for tests)").c_str() : "");
    if (medium)
      std::printf("; then each rank's GEMM, memory bandwidth and host-device copies, the ranks of a host one at a "
                  "time (about 0.5 s a rank of the most populated host), the send/recv pairs and an all-reduce "
                  "within each node");
    if (long_level)
      std::printf("; then every pair's send/recv (n - 1 rounds of n / 2 pairs, about 0.1 s a round), an all-reduce "
                  "over the world and a few training steps");
    if (a.level == "burnin") std::printf("; looped for %s s", num_str(a.duration).c_str());
    if (!long_level) std::printf("; expected a few seconds");
    std::printf("; each step of a check times out after %s s", num_str(a.check_timeout).c_str());
    std::printf("%s\n", inj.rank >= 0 ? ("; TEST FAULT: rank " + std::to_string(inj.rank) + " " +
                                          (inj.hang ? std::string("hangs in its compute")
                                           : inj.comm > 1 ? "communication x" + num_str(inj.comm) + " slower"
                                                          : "compute x" + num_str(inj.compute) + " slower")).c_str()
                                      : "");
  }
  std::fflush(stdout);
  set_comm_timeout(a.check_timeout);

  // Where this rank sits: emulated nodes, or the ranks sharing memory (MPI_COMM_TYPE_SHARED).
  int node_index = 0, local_rank = 0;
  const bool emulated = a.ranks_per_node > 0;
  if (emulated) {
    node_index = world.rank() / a.ranks_per_node;
    local_rank = world.rank() % a.ranks_per_node;
  } else {
    MPI_Comm node;
    DTB_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS,
              "MPI_Comm_split_type failed");
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
  }
  std::string device, device_error;
  std::unique_ptr<Backend> gpu;
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
  json mine = rank_inventory(world.rank(), node_index, local_rank, emulated, device, a.backend);
  if (!device_error.empty()) mine["device_error"] = device_error;
  if (gpu)
    for (const auto& [k, v] : gpu->device_inventory()) mine[k] = v;
  std::vector<json> inv;
  for (const std::string& s : all_gather_strings(world, mine.dump())) inv.push_back(json::parse(s));
  // Real nodes are numbered by first appearance of their host.
  if (!emulated) {
    std::map<std::string, int> index;
    for (json& r : inv) r["node_index"] = index.emplace(r["node"].get<std::string>(), int(index.size())).first->second;
    node_index = inv[size_t(world.rank())]["node_index"];
  }
  const int n = world.size(), me = world.rank();
  if (emulated)  // the same decision on every rank: all hold the inventory
    for (int r = 0; r < n; ++r)
      if (inv[size_t(r)].value("host", "") != inv[size_t(r - r % a.ranks_per_node)].value("host", ""))
        throw InputError("--ranks-per-node " + std::to_string(a.ranks_per_node) + ": emulated node " +
                         std::to_string(r / a.ranks_per_node) + " spans hosts " +
                         inv[size_t(r - r % a.ranks_per_node)].value("host", "") + " and " +
                         inv[size_t(r)].value("host", "") + " (an emulated node must sit on one host)");
  std::vector<std::string> node_of_rank;
  for (const json& r : inv) node_of_rank.push_back(r.value("node", "?"));
  auto host = [&](int r) { return inv[size_t(r)].value("host", "?"); };
  std::vector<ValidateCheck> checks = quick_checks(inv, expect);
  ReportExtra extra;
  extra.levels_run = {"quick"};

  // The checks of the measuring levels, in order: a timed-out check names its missing ranks;
  // the ones after it are not_run.
  std::vector<std::string> planned;
  if (medium) planned = {"compute", "copy", "node/sendrecv", "node/allreduce"};
  if (long_level) planned.insert(planned.end(), {"pairs", "groups/allreduce", "world/allreduce", "train"});
  // What the communication watchdog's termination hook reads (a timeout inside an MPI call, or
  // SIGTERM/SIGINT): the check running and the checks so far, under `progress_mu`.
  std::mutex progress_mu;
  std::string current;
  auto begin_check = [&](const std::string& name) {
    std::lock_guard<std::mutex> lock(progress_mu);
    current = name;
  };
  Steps steps(a.check_timeout);
  // This rank's turn among the ranks of its host: they share its cores and memory.
  int turn = 0, turns = 1;
  {
    std::map<std::string, int> per_host;
    for (int r = 0; r < n; ++r) {
      const int k = per_host[host(r)]++;
      if (r == me) turn = k;
      turns = std::max(turns, k + 1);
    }
  }
  auto gather = [&](std::vector<double> mine_v) {
    std::vector<double> all(mine_v.size() * size_t(n));
    world.all_gather(mine_v.data(), all.data(), mine_v.size(), DType::f64);
    return all;
  };
  auto matrix_json = [&](const std::vector<double>& m, size_t bytes) {
    json j = json::array();
    for (int r = 0; r < n; ++r) {
      json row = json::array();
      for (int p = 0; p < n; ++p) {
        const double t = m[size_t(r) * size_t(n) + size_t(p)];
        row.push_back(t > 0 ? 2.0 * double(bytes) / t / 1e9 : 0.0);
      }
      j.push_back(row);
    }
    return j;
  };
  // Per rank: the median over its partners (those with a time) of 2 x bytes / seconds, GB/s.
  auto median_bw = [&](const std::vector<double>& m, size_t bytes) {
    std::vector<double> out;
    for (int r = 0; r < n; ++r) {
      std::vector<double> v;
      for (int p = 0; p < n; ++p)
        if (p != r && m[size_t(r) * size_t(n) + size_t(p)] > 0)
          v.push_back(2.0 * double(bytes) / m[size_t(r) * size_t(n) + size_t(p)] / 1e9);
      out.push_back(median_of(v));
    }
    return out;
  };
  // Alpha-beta per link class over the measured pairs of `m_by_size` ([size][r * n + p]).
  auto alpha_beta = [&](const std::vector<std::vector<double>>& m_by_size, const std::string& name) {
    json classes = json::object();
    std::string text;
    for (const std::string cls : {"intra-node", "inter-node"}) {
      std::vector<std::pair<double, double>> pts;
      for (size_t s = 0; s < kPairSizes.size(); ++s) {
        std::vector<double> t;
        for (int r = 0; r < n; ++r)
          for (int p = r + 1; p < n; ++p) {
            const bool intra = node_of_rank[size_t(r)] == node_of_rank[size_t(p)];
            const double x = m_by_size[s][size_t(r) * size_t(n) + size_t(p)];
            if (x > 0 && intra == (cls == "intra-node")) t.push_back(x);
          }
        if (!t.empty()) pts.emplace_back(double(kPairSizes[s]), median_of(t));
      }
      if (pts.size() < 2) continue;
      const auto [alpha, beta] = fit_alpha_beta(pts);
      json p = json::array();
      for (const auto& [b, t] : pts) p.push_back({{"bytes", b}, {"seconds", t}});
      classes[cls] = {{"alpha_us", alpha * 1e6}, {"beta_GBps", beta / 1e9}, {"points", p}};
      text += (text.empty() ? "" : "; ") + cls + ": alpha " + num_str(alpha * 1e6) + " us, beta " + num_str(beta / 1e9) +
              " GB/s each way";
    }
    return ValidateCheck{name, classes.empty() ? "skip" : "pass",
                         classes.empty() ? "no pairs measured" : "t(n) = alpha + n / beta, relative least squares over " +
                                                                      std::to_string(kPairSizes.size()) +
                                                                      " sizes of each pair's best: " + text,
                         {}, {}, {{"classes", classes}}, {}};
  };

  // Why arrival times cannot attribute a straggler here, or "": a host running more ranks at
  // once than it has cores (the world's collective: all its ranks; a node's: its largest node,
  // as a host's nodes take turns). Their arrival order is then the OS scheduler's.
  auto crowded = [&](bool world_wide) -> std::string {
    std::map<std::string, int> at_once;
    std::map<int, int> node_size;
    for (int r = 0; r < n; ++r) ++node_size[inv[size_t(r)].value("node_index", 0)];
    for (int r = 0; r < n; ++r) {
      int& c = at_once[host(r)];
      c = world_wide ? c + 1 : std::max(c, node_size[inv[size_t(r)].value("node_index", 0)]);
    }
    for (const auto& [h, k] : at_once) {
      int cores = 0;
      for (int r = 0; r < n; ++r)
        if (host(r) == h) cores = inv[size_t(r)].value("cores", 0);
      if (cores > 0 && k > cores)
        return "host " + h + " runs " + std::to_string(k) + " ranks at once on " + std::to_string(cores) +
               " cores, so their arrival order is the OS scheduler's";
    }
    return "";
  };

  // The pass being measured, which the termination hook also reads.
  ValidatePass pass;
  auto add_check = [&](ValidatePass& out, ValidateCheck c) {
    std::lock_guard<std::mutex> lock(progress_mu);
    out.checks.push_back(std::move(c));
  };
  auto add_metric = [&](ValidatePass& out, const std::string& name, Metric m) {
    std::lock_guard<std::mutex> lock(progress_mu);
    out.metrics[name] = std::move(m);
  };

  // Two per-rank figures of this rank, gathered into the metrics `first` and `second` (units
  // from validate_metrics()). Collective.
  auto add_two_metrics = [&](ValidatePass& out, std::pair<double, double> mine_v, const std::string& first,
                             const std::string& second) {
    const auto all = gather({mine_v.first, mine_v.second});
    Metric m1{validate_metrics().at(first).unit, {}, true}, m2{validate_metrics().at(second).unit, {}, true};
    for (int r = 0; r < n; ++r) m1.per_rank.push_back(all[2 * size_t(r)]), m2.per_rank.push_back(all[2 * size_t(r) + 1]);
    add_metric(out, first, m1);
    add_metric(out, second, m2);
  };

  // An all-reduce probe on `comm`, one communicator per group of ranks (a node, a group of
  // nodes; group_of(rank) names it): the groups sharing a host take turns, groups on different
  // hosts run at once; a step of `check` between turns. MPI_COMM_NULL: this rank only takes the
  // turns (its group has no collective to measure). Collective over the world.
  auto probe_in_turns = [&](MPI_Comm comm, const std::string& name, const std::string& check,
                            const std::function<int(int)>& group_of) {
    std::map<std::string, std::vector<int>> groups_on_host;
    for (int r = 0; r < n; ++r) {
      auto& v = groups_on_host[host(r)];
      if (std::find(v.begin(), v.end(), group_of(r)) == v.end()) v.push_back(group_of(r));
    }
    const auto& mine_g = groups_on_host[host(me)];
    const int my_turn = int(std::find(mine_g.begin(), mine_g.end(), group_of(me)) - mine_g.begin());
    int turns_g = 1;
    for (const auto& [h, v] : groups_on_host) turns_g = std::max(turns_g, int(v.size()));
    CollectiveProbe p;
    for (int t = 0; t < turns_g; ++t) {
      steps.arrive(check);
      if (t == my_turn && comm != MPI_COMM_NULL) p = probe_allreduce(comm, name, me == inj.rank ? inj.compute : 1.0);
    }
    steps.arrive(check);
    return p;
  };

  // One pass over the measuring levels.
  auto measure = [&](ValidatePass& out) {
    if (!medium) return;
    // compute: the ranks of a host one at a time, hosts at once; three rounds, each rank's best.
    begin_check("compute");
    {
      std::pair<double, double> best{0, 0};
      ComputeProbe probe;
      for (int round = 0; round < 3; ++round)
        for (int t = 0; t < turns; ++t) {
          steps.arrive(current);
          if (t != turn) continue;
          if (me == inj.rank && inj.hang)
            for (;;) sleep(1);  // the test-only hang: never arrives at the next step
          const double f = me == inj.rank ? inj.compute : 1.0;
          std::pair<double, double> m = probe.measure(f);
          if (gpu) {  // the device's GEMM instead of the host's (bf16 in, fp32 accumulate)
            const int k = 8192;
            m.first = 2.0 * k * double(k) * k / (gpu->time_gemm(k, k, k, "bf16", 2, 5) * f) / 1e9;
          }
          best = {std::max(best.first, m.first), std::max(best.second, m.second)};
        }
      steps.arrive(current);
      add_two_metrics(out, best, "compute/gemm_gflops", "compute/triad_GBps");
    }
    // copy: host <-> device on GPUs, one GPU of a host at a time.
    begin_check("copy");
    // Every rank takes the same branch: a rank whose GPU could not be opened makes the check
    // fail for all, naming it (its error is in the inventory), instead of skipping steps alone.
    int with_gpu = gpu ? 1 : 0;
    world.all_reduce(&with_gpu, &with_gpu, 1, DType::i32, ReduceOp::min);
    if (a.backend == "cuda" && !with_gpu) {
      ValidateCheck c{"copy/host_device", "fail", "", {}, {}, json::object(), {}};
      for (int r = 0; r < n; ++r)
        if (inv[size_t(r)].contains("device_error")) {
          c.ranks.push_back(r);
          const std::string& nd = node_of_rank[size_t(r)];
          if (std::find(c.nodes.begin(), c.nodes.end(), nd) == c.nodes.end()) c.nodes.push_back(nd);
          c.node_detail[nd] += (c.node_detail[nd].empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                               " has no usable GPU: " + inv[size_t(r)].value("device_error", std::string());
        }
      c.detail = "ranks " + join_ranks(c.ranks) + " have no usable GPU, so no copies were measured";
      add_check(out, c);
    } else if (!with_gpu) {
      add_check(out, {"copy/host_device", "skip", "the " + a.backend + " backend has no device memory to copy to",
                            {}, {}, json::object(), {}});
    } else {
      std::pair<double, double> bw{0, 0};
      const size_t bytes = size_t(64) << 20;
      for (int t = 0; t < turns; ++t) {
        steps.arrive(current);
        if (t != turn) continue;
        std::vector<char> h(bytes, 1);
        void* d = gpu->device().allocate(bytes, MemCategory::workspace, Tier::device);
        const double f = me == inj.rank ? inj.compute : 1.0;
        const double up = best_seconds(5, f, [&] { gpu->copy_from_host(d, h.data(), bytes); });
        const double down = best_seconds(5, f, [&] { gpu->copy_to_host(h.data(), d, bytes); });
        gpu->device().deallocate(d, bytes, MemCategory::workspace, Tier::device);
        bw = {double(bytes) / up / 1e9, double(bytes) / down / 1e9};
      }
      steps.arrive(current);
      add_two_metrics(out, bw, "copy/h2d_GBps", "copy/d2h_GBps");
    }
    // node/sendrecv: the rank x rank matrix within each node (each node's round-robin, at once).
    begin_check("node/sendrecv");
    {
      std::map<int, std::vector<int>> members;
      for (int r = 0; r < n; ++r) members[inv[size_t(r)].value("node_index", 0)].push_back(r);
      std::vector<std::vector<std::pair<int, int>>> rounds;
      for (const auto& [node, ranks] : members) {
        const auto local = pair_rounds(int(ranks.size()));
        if (rounds.size() < local.size()) rounds.resize(local.size());
        for (size_t k = 0; k < local.size(); ++k)
          for (const auto& [x, y] : local[k]) rounds[k].emplace_back(ranks[size_t(x)], ranks[size_t(y)]);
      }
      const PairSweep sw = sweep_pairs(rounds, inv, inj, steps, current, me);
      std::vector<std::vector<double>> m;
      for (const auto& row : sw.seconds) m.push_back(gather(row));
      const size_t big = kPairSizes.back();
      bool any = false;
      for (const auto& [node, ranks] : members) any = any || ranks.size() > 1;
      if (!any) {
        add_check(out, {"node/sendrecv", "skip", "one rank per node: no pairs within a node", {}, {},
                              json::object(), {}});
      } else {
        add_metric(out, "node/sendrecv_GBps", {"GB/s", median_bw(m.back(), big), true});
        ValidateCheck mat{"node/sendrecv_matrix", "pass",
                          "each node's rank x rank send/recv bandwidth, " + std::to_string(big >> 20) +
                              " MiB each way (2 x bytes / seconds, GB/s; 0: not in one node)",
                          {}, {}, {{"matrix_GBps", matrix_json(m.back(), big)}, {"bytes", big}}, {}};
        add_check(out, mat);
        add_check(out, alpha_beta(m, "node/alpha_beta"));
      }
    }
    // node/allreduce: each node's all-reduce (bus bandwidth, arrival times); nodes sharing a
    // host (emulated) take turns.
    begin_check("node/allreduce");
    {
      MPI_Comm node_comm;
      DTB_CHECK(MPI_Comm_split(MPI_COMM_WORLD, node_index, me, &node_comm) == MPI_SUCCESS, "MPI_Comm_split failed");
      int node_size = 1;
      MPI_Comm_size(node_comm, &node_size);
      const CollectiveProbe p = probe_in_turns(node_size > 1 ? node_comm : MPI_COMM_NULL,
                                               "validate node " + std::to_string(node_index), current,
                                               [&](int r) { return inv[size_t(r)].value("node_index", 0); });
      int local = 0;
      MPI_Comm_rank(node_comm, &local);
      MPI_Comm_free(&node_comm);
      const auto all = gather({p.busbw, p.lag_ms.empty() ? 0.0 : p.lag_ms[size_t(local)], p.work_ms});
      // Decided from the inventory, the same on every rank: the check needs every node to have
      // two ranks or more (a one-rank node has no collective to measure).
      std::map<int, int> node_sizes;
      for (const json& r : inv) ++node_sizes[r.value("node_index", 0)];
      const bool all_multi = std::all_of(node_sizes.begin(), node_sizes.end(), [](const auto& e) { return e.second > 1; });
      if (all_multi) {
        Metric bus{"GB/s", {}, true}, late{"% of the work", {}, false};
        json lag = json::object(), work = json::object();
        for (int r = 0; r < n; ++r) {
          bus.per_rank.push_back(all[3 * size_t(r)]);
          const double l = all[3 * size_t(r) + 1], w = all[3 * size_t(r) + 2];
          late.per_rank.push_back(w > 0 ? 100.0 * l / w : 0.0);
          lag["rank " + std::to_string(r)] = l, work["rank " + std::to_string(r)] = w;
        }
        add_metric(out, "node/allreduce_busbw_GBps", bus);
        late.extra = {{"lateness_ms", lag}, {"node_work_ms", work}};
        if (const std::string why = crowded(false); !why.empty())
          add_check(out, {"node/arrival", "skip", why, {}, {}, late.extra, {}});
        else
          add_metric(out, "node/arrival_late_pct", late);
      } else {
        add_check(out, {"node/allreduce", "skip", "a node with one rank: no collective within it to compare", {},
                        {}, json::object(), {}});
      }
    }
    if (!long_level) return;
    // pairs: every pair once, round-robin; each rank's median over its partners.
    begin_check("pairs");
    if (n > 1) {
      const PairSweep sw = sweep_pairs(pair_rounds(n), inv, inj, steps, current, me);
      std::vector<std::vector<double>> m;
      for (const auto& row : sw.seconds) m.push_back(gather(row));
      const size_t big = kPairSizes.back();
      add_metric(out, "pairs/sendrecv_GBps", {"GB/s", median_bw(m.back(), big), true});
      add_check(out, {"pairs/sendrecv_matrix", "pass",
                            "every pair's send/recv bandwidth, " + std::to_string(big >> 20) +
                                " MiB each way, both directions counted (2 x bytes / seconds, GB/s)",
                            {}, {}, {{"matrix_GBps", matrix_json(m.back(), big)}, {"bytes", big}}, {}});
      add_check(out, alpha_beta(m, "pairs/alpha_beta"));
    }
    // groups/allreduce: nodes in groups of two (nodes 2k and 2k + 1, as under one leaf switch
    // when the hostfile lists them so), each group's all-reduce at once (groups sharing a host
    // take turns); each group's busbw against the other groups'.
    begin_check("groups/allreduce");
    {
      int nodes = 0;
      for (const json& r : inv) nodes = std::max(nodes, r.value("node_index", 0) + 1);
      if (nodes < 4) {
        add_check(out, {"groups/allreduce", "skip",
                        "fewer than 4 nodes: groups of 2 nodes would be fewer than 2 to compare", {}, {},
                        json::object(), {}});
      } else {
        const int group = node_index / 2;
        MPI_Comm gcomm;
        DTB_CHECK(MPI_Comm_split(MPI_COMM_WORLD, group, me, &gcomm) == MPI_SUCCESS, "MPI_Comm_split failed");
        const CollectiveProbe p = probe_in_turns(gcomm, "validate group " + std::to_string(group), "groups/allreduce",
                                                 [&](int r) { return inv[size_t(r)].value("node_index", 0) / 2; });
        MPI_Comm_free(&gcomm);
        const auto all = gather({p.busbw});
        add_metric(out, "groups/allreduce_busbw_GBps", {"GB/s", all, true});
      }
    }
    // world/allreduce: every rank at once, bus bandwidth and arrival times.
    begin_check("world/allreduce");
    if (n > 1) {
      steps.arrive(current);
      const CollectiveProbe p = probe_allreduce(MPI_COMM_WORLD, "world", me == inj.rank ? inj.compute : 1.0);
      steps.arrive(current);
      add_metric(out, "world/allreduce_busbw_GBps", {"GB/s", std::vector<double>(size_t(n), p.busbw), true});
      Metric late{"% of the work", {}, false};
      json lag = json::object();
      for (int r = 0; r < n; ++r) {
        late.per_rank.push_back(p.work_ms > 0 ? 100.0 * p.lag_ms[size_t(r)] / p.work_ms : 0.0);
        lag["rank " + std::to_string(r)] = p.lag_ms[size_t(r)];
      }
      late.extra = {{"lateness_ms", lag}, {"work_ms", p.work_ms}, {"busbw_GBps", p.busbw}};
      if (const std::string why = crowded(true); !why.empty())
        add_check(out, {"world/arrival", "skip", why, {}, {}, late.extra, {}});
      else
        add_metric(out, "world/arrival_late_pct", late);
    }
    // train: a few data-parallel steps of the reference GPT on the whole world.
    begin_check("train");
    {
      steps.arrive(current);
      const TrainProbe tp = validate_train_steps(world, 6, me == inj.rank ? inj.compute : 1.0);
      steps.arrive(current);
      const double tokens = tp.step_seconds > 0 ? tp.tokens_per_s * tp.step_seconds : 0;
      // This rank's own speed: tokens over its compute time (wall; CPU time on a host with more
      // ranks than cores, where wall time counts the waits for a core).
      const bool by_cpu = !crowded(true).empty();
      const double own = by_cpu ? tp.compute_cpu_seconds : tp.compute_seconds;
      const auto all = gather({own > 0 ? tokens / own : 0.0, double(tp.param_hash >> 32),
                               double(tp.param_hash & 0xffffffffu), tp.step_seconds});
      Metric tps{"tokens/s", {}, true};
      std::vector<int> differ;
      for (int r = 0; r < n; ++r) {
        tps.per_rank.push_back(all[4 * size_t(r)]);
        if (all[4 * size_t(r) + 1] != all[1] || all[4 * size_t(r) + 2] != all[2]) differ.push_back(r);
      }
      add_metric(out, "train/tokens_per_s", tps);
      ValidateCheck c{"train/world", "pass", "", {}, {}, {{"model", tp.model}, {"steps", tp.steps},
                      {"first_loss", tp.first_loss}, {"last_loss", tp.last_loss}, {"step_seconds", tp.step_seconds},
                      {"tokens_per_s_from", by_cpu ? "compute CPU time" : "compute wall time"}}, {}};
      if (!tp.finite) {
        c.status = "fail", c.detail = "a loss was not finite";
      } else if (!differ.empty()) {
        c.status = "fail", c.ranks = differ;
        for (int r : differ) {
          if (std::find(c.nodes.begin(), c.nodes.end(), node_of_rank[size_t(r)]) == c.nodes.end())
            c.nodes.push_back(node_of_rank[size_t(r)]);
          c.node_detail[node_of_rank[size_t(r)]] += "rank " + std::to_string(r) + "'s parameters differ from rank 0's ";
        }
        c.detail = "after " + std::to_string(tp.steps) + " steps, ranks " + join_ranks(differ) +
                   " hold other parameters than rank 0 (data-parallel replicas must stay bitwise equal)";
      } else if (!(tp.last_loss < tp.first_loss)) {
        c.status = "fail";
        c.detail = "the loss did not fall: " + num_str(tp.first_loss) + " to " + num_str(tp.last_loss);
      } else {
        c.detail = tp.model + ": loss " + num_str(tp.first_loss) + " to " + num_str(tp.last_loss) + " in " +
                   std::to_string(tp.steps) + " steps, replicas bitwise equal, " + num_str(1e3 * tp.step_seconds) +
                   " ms a step";
      }
      add_check(out, c);
    }
    begin_check("");
  };

  // Rank 0 writes what it has when the watchdog ends the run (it names the call and the ranks;
  // the check running fails with its line, the ones after it are not_run): exit 3, incomplete.
  int loops = 0;  // whole passes over the measuring levels (burnin: more than one)
  std::map<std::string, Metric> metrics;  // each rank's worst figure over the finished loops
  // The report of a run that ended early: the checks so far, the failed one, the rest not_run,
  // and the metrics measured so far judged by the rules (`done`: finished loops' metrics merged
  // with those of the loop that was running).
  auto incomplete = [&](std::vector<ValidateCheck> so_far, const ValidateCheck& failed,
                        const std::map<std::string, Metric>& done) {
    // A check measured again in a later burnin loop appears once: its latest outcome.
    std::vector<ValidateCheck> once;
    for (auto it = so_far.rbegin(); it != so_far.rend(); ++it)
      if (std::none_of(once.begin(), once.end(), [&](const ValidateCheck& c) { return c.name == it->name; }))
        once.insert(once.begin(), *it);
    so_far = once;
    so_far.push_back(failed);
    bool after = false;
    for (const std::string& s : planned) {  // after a whole loop, every check has run once
      if (after && loops == 0)
        so_far.push_back({s, "not_run", "not run: check " + failed.name + " did not finish", {}, {}, json::object(), {}});
      after = after || s == failed.name;
    }
    ReportExtra e = extra;
    e.incomplete = true;
    if (loops > 0) {
      e.levels_run = {"quick", "medium"};
      if (long_level) e.levels_run.push_back("long");
      if (a.level == "burnin") e.levels_run.push_back("burnin");
      e.loops = loops;
    }
    if (!done.empty()) {
      try {
        const auto rules = a.rules.empty() ? default_rules(done, baseline, a.tolerance) : file_rules;
        for (ValidateCheck& c : evaluate_rules(rules, done, baseline, node_of_rank))
          if (c.detail.rfind("missing", 0) != 0 && c.detail.find("could not be judged") == std::string::npos)
            so_far.push_back(std::move(c));  // a metric not measured yet: the run ended first, not_run says so
      } catch (const std::exception&) {
      }
      for (const auto& [name, m] : done)
        e.metrics[name] = {{"unit", m.unit}, {"higher_is_better", m.higher_is_better}, {"per_rank", m.per_rank}};
    }
    write_verdict(a, inv, so_far, t0, e);
  };
  // The metrics of the finished loops, each rank's worse figure where the running loop has one too.
  auto measured_so_far = [&]() {
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
  };
  if (root)
    set_termination_hook([&](const std::string& why) {
      std::vector<ValidateCheck> so_far;
      std::map<std::string, Metric> done;
      std::string running;
      {
        std::lock_guard<std::mutex> lock(progress_mu);
        so_far = checks;
        so_far.insert(so_far.end(), pass.checks.begin(), pass.checks.end());
        done = measured_so_far();
        running = current;
      }
      incomplete(so_far, {running.empty() ? "validate" : running, "fail", why, {}, {}, json::object(), {}}, done);
    });
  struct HookReset {
    ~HookReset() { set_termination_hook({}); }
  } hook_reset;
  try {
    if (medium) {
      const auto start = std::chrono::steady_clock::now();
      for (;;) {
        {
          std::lock_guard<std::mutex> lock(progress_mu);
          pass = ValidatePass{};
        }
        ValidatePass& p = pass;
        measure(p);
        // Burnin keeps each rank's worst figure of every loop and each check's worst outcome.
        {
          std::lock_guard<std::mutex> lock(progress_mu);
          metrics = measured_so_far();
          for (ValidateCheck& c : p.checks) {
            auto it = std::find_if(checks.begin(), checks.end(), [&](const ValidateCheck& x) { return x.name == c.name; });
            if (it == checks.end()) checks.push_back(std::move(c));
            else if (severity(c.status) > severity(it->status)) *it = std::move(c);
          }
          p.checks.clear();
          p.metrics.clear();
          ++loops;
        }
        double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        world.broadcast(&elapsed, 1, DType::f64, 0);  // one decision for every rank
        if (a.level != "burnin" || elapsed >= a.duration) break;
      }
    }
  } catch (const CheckTimeout& t) {
    // Rank 0 alone throws: it names the ranks, writes what it has and ends the job (exit 3).
    ValidateCheck c{t.check, "fail", "", {}, t.ranks, {{"timeout_s", t.seconds}}, {}};
    const std::string what = t.pair.empty() ? "did not finish a step of check " + t.check
                                            : "(" + t.pair + " in check " + t.check + ") did not finish";
    for (int r : t.ranks) {
      const std::string& nd = node_of_rank[size_t(r)];
      if (std::find(c.nodes.begin(), c.nodes.end(), nd) == c.nodes.end()) c.nodes.push_back(nd);
      c.node_detail[nd] += (c.node_detail[nd].empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " " +
                           what + " within the " + num_str(t.seconds) + " s timeout (hung, or far too slow)";
    }
    c.detail = !t.pair.empty() ? t.pair + " in check " + t.check + " did not finish within " + num_str(t.seconds) +
                                     " s (a hung rank or a dead link); the run is incomplete"
                               : (t.ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(t.ranks) + " " + what +
                                     " within " + num_str(t.seconds) + " s (hung, or far too slow); the run is incomplete";
    set_termination_hook({});  // this path writes the report itself
    try {
      std::vector<ValidateCheck> so_far = checks;
      so_far.insert(so_far.end(), pass.checks.begin(), pass.checks.end());
      incomplete(so_far, c, measured_so_far());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    }
    std::fprintf(stderr, "dtbench: error: validate: %s\n", c.detail.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  // From here the main thread writes `checks` and `extra` without the lock, and writes the
  // verdict itself: no hook from now on.
  set_termination_hook({});
  if (medium) extra.levels_run.push_back("medium");
  if (long_level) extra.levels_run.push_back("long");
  if (a.level == "burnin") extra.levels_run.push_back("burnin");
  extra.loops = std::max(loops, 1);

  // The rules: a rules file's, or the defaults (the fleet median, and the baseline when given).
  const std::vector<ValidateRule> rules = a.rules.empty() ? default_rules(metrics, baseline, a.tolerance) : file_rules;
  for (ValidateCheck& c : evaluate_rules(rules, metrics, baseline, node_of_rank)) checks.push_back(std::move(c));
  if (!a.baseline.empty()) {
    const json platform = majority(inv, "device");
    if (baseline.value("platform", json()) != platform)
      checks.push_back({"baseline/platform", "fail",
                        "the baseline is for " + baseline.value("platform", json()).dump() + ", this run's devices are " +
                            platform.dump(),
                        {}, {}, json::object(), {}});
    // A metric the baseline has and this run lacks fails, whatever the rules name.
    if (!a.rules.empty())
      for (const auto& [name, entry] : baseline["metrics"].items())
        if (!metrics.count(name))
          checks.push_back({"baseline/" + name, "fail",
                            "missing: the baseline has " + name + ", this run measured none (a level too low, or a "
                            "test that could not run)",
                            {}, {}, {{"baseline", entry.value("value", 0.0)}}, {}});
  }
  for (const auto& [name, m] : metrics) {
    extra.metrics[name] = {{"unit", m.unit}, {"higher_is_better", m.higher_is_better}, {"per_rank", m.per_rank}};
    if (m.extra.is_object()) extra.metrics[name]["extra"] = m.extra;
  }
  for (const ValidateRule& r : rules) {
    json j = {{"name", r.name}, {"type", r.type}};
    if (r.type == "k_of") j["k"] = r.k, j["of"] = r.of;
    else j["metric"] = r.metric, j["fail"] = r.fail;
    if (r.has_warn && r.warn > 0) j["warn"] = r.warn;
    extra.rules.push_back(j);
  }
  // Rank 0 decides, prints and writes; every rank returns its exit status.
  int code = 0;
  if (root) {
    try {
      code = write_verdict(a, inv, checks, t0, extra);
    } catch (const InputError& e) {
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = 2;  // bad input, as dtbench exits for it
    }
  }
  // A baseline comes from an accepted run only: a defective node's figures would pull it down
  // and let the next slow node pass.
  if (!a.make_baseline.empty() && root && code != 0) {
    std::fprintf(stderr, "dtbench: error: --make-baseline: not written, the run was not accepted (exit %d)\n", code);
  } else if (!a.make_baseline.empty() && root) {
    json m = json::object();
    for (const auto& [name, metric] : metrics) {
      const auto info = validate_metrics().find(name);
      if (info != validate_metrics().end() && !info->second.baseline) continue;  // judged by absolute bounds
      m[name] = {{"value", baseline_value(metric.per_rank)}, {"unit", metric.unit}, {"ranks", metric.per_rank.size()}};
    }
    const json b = {{"kind", "validate-baseline"}, {"version", 1}, {"platform", majority(inv, "device")},
                    {"level", a.level},
                    {"method", "per metric: the median of the ranks' values after iterative removal of those more than 3 "
                               "x max(MAD, 1% of the median) from the median"},
                    {"metrics", m}};
    try {
      const std::filesystem::path bp(a.make_baseline);
      if (bp.has_parent_path()) std::filesystem::create_directories(bp.parent_path());
      write_json_atomic(a.make_baseline, b);
      std::printf("baseline of %zu metrics written to %s\n", m.size(), a.make_baseline.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtbench: error: --make-baseline: %s\n", e.what());
      code = 2;
    }
  }
  world.broadcast(&code, 1, DType::i32, 0);
  return code;
}

namespace {

int write_verdict(const ValidateArgs& a, const std::vector<json>& inv, const std::vector<ValidateCheck>& checks,
                  std::chrono::steady_clock::time_point t0, const ReportExtra& extra) {

  // Per node: accepted unless a failed check (or a warning, with --werror) names it.
  std::vector<std::string> node_order;
  for (const json& r : inv)
    if (std::find(node_order.begin(), node_order.end(), r["node"].get<std::string>()) == node_order.end())
      node_order.push_back(r["node"]);
  // A check that could not run fails; an input of a k_of rule gives no verdict of its own.
  auto bad_status = [&](const std::string& st) {
    return st == "fail" || st == "not_run" || (a.werror && st == "warn");
  };
  auto bad = [&](const ValidateCheck& c) { return c.counts && bad_status(c.status); };
  // The check's status at node n (a check failing for one node may only warn for another).
  auto status_at = [](const ValidateCheck& c, const std::string& n) {
    const auto it = c.node_status.find(n);
    return it == c.node_status.end() ? c.status : it->second;
  };
  json nodes = json::array();
  bool world_failed = false;
  for (const ValidateCheck& c : checks)
    if (bad(c) && c.nodes.empty()) world_failed = true;
  int defective = 0;
  for (const std::string& n : node_order) {
    json violations = json::array(), ranks = json::array();
    for (const json& r : inv)
      if (r["node"] == n) ranks.push_back(r["rank"]);
    for (const ValidateCheck& c : checks)
      if (c.counts && (status_at(c, n) == "fail" || status_at(c, n) == "warn") &&
          std::find(c.nodes.begin(), c.nodes.end(), n) != c.nodes.end()) {
        json v = {{"check", c.name},
                  {"status", status_at(c, n)},
                  {"detail", c.node_detail.count(n) ? c.node_detail.at(n) : c.detail},
                  {"values", c.values}};
        for (const char* k : {"rule", "metric", "baseline", "median", "reference"})
          if (c.values.contains(k)) v[k] = c.values[k];
        violations.push_back(v);
      }
    bool accepted = true;
    for (const ValidateCheck& c : checks)
      if (c.counts && bad_status(status_at(c, n)) && std::find(c.nodes.begin(), c.nodes.end(), n) != c.nodes.end())
        accepted = false;
    defective += accepted ? 0 : 1;
    nodes.push_back({{"node", n}, {"ranks", ranks}, {"accepted", accepted}, {"violations", violations}});
  }
  const int code = extra.incomplete ? 3 : defective > 0 || world_failed ? 1 : 0;
  json jchecks = json::array();
  for (const ValidateCheck& c : checks)
    jchecks.push_back({{"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"nodes", c.nodes},
                       {"ranks", c.ranks}, {"values", c.values}, {"counts", c.counts}});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const json out = {{"kind", "validate"},
                    {"version", 1},
                    {"level", a.level},
                    {"levels_run", extra.levels_run},
                    {"loops", extra.loops},
                    {"check_timeout_s", a.check_timeout},
                    {"tolerance", a.tolerance},
                    {"rules_file", a.rules.empty() ? json(nullptr) : json(a.rules)},
                    {"rules", extra.rules},
                    {"metrics", extra.metrics},
                    {"baseline", a.baseline.empty() ? json(nullptr) : json(a.baseline)},
                    {"injected_fault", a.inject.empty() ? json(nullptr) : json(a.inject)},
                    {"expect", parse_expectations(a.expect)},
                    {"emulated_ranks_per_node", a.ranks_per_node > 0 ? json(a.ranks_per_node) : json(nullptr)},
                    {"world_size", inv.size()},
                    {"duration_s", secs},
                    {"inventory", inv},
                    {"checks", jchecks},
                    {"nodes", nodes},
                    {"verdict", code == 0 ? "accepted" : code == 3 ? "incomplete" : "defective"},
                    {"exit_status", code}};
  for (const ValidateCheck& c : checks)
    std::printf("  %-8s %-28s %s\n", c.status.c_str(), c.name.c_str(),
                c.name.find("matrix") != std::string::npos ? (c.detail + " (in the report)").c_str() : c.detail.c_str());
  for (const json& n : nodes) {
    std::printf("node %s (ranks %s): %s\n", n["node"].get<std::string>().c_str(), n["ranks"].dump().c_str(),
                n["accepted"].get<bool>() ? "accepted" : "DEFECTIVE");
    for (const json& v : n["violations"])
      std::printf("    %s %s: %s\n", v["status"].get<std::string>().c_str(), v["check"].get<std::string>().c_str(),
                  v["detail"].get<std::string>().c_str());
  }
  try {
    const std::filesystem::path p(a.output);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    write_json_atomic(a.output, out);
  } catch (const std::exception& e) {
    throw InputError(std::string("--output: ") + e.what());
  }
  int world_fails = 0;
  for (const ValidateCheck& c : checks) world_fails += bad(c) && c.nodes.empty() ? 1 : 0;
  std::printf("validate %s: %zu of %zu nodes accepted%s; %.1f s; report %s\n", a.level.c_str(),
              node_order.size() - size_t(defective), node_order.size(),
              world_fails ? ("; " + std::to_string(world_fails) + " failed checks about the whole run").c_str() : "", secs,
              a.output.c_str());
  return code;
}

}  // namespace

}  // namespace dtb
