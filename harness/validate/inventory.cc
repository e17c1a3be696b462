// Level quick of `dtbench validate`: the inventory of a rank and the checks over every rank's
// (consistency within and across nodes, then --expect). Pure except rank_inventory (which
// reads /proc and the libraries' versions) and all_gather_strings (a collective).
#include "harness/validate/inventory.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>

#include "harness/validate/format.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace validate_detail;

const std::map<std::string, bool> kExpectKeys = {  // key -> numeric
    {"nodes", true}, {"ranks_per_node", true}, {"gpus_per_node", true},
    {"device", false}, {"cores", true}, {"memory_gb", true}};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The kernel's boot id (one per booted machine, shared by its namespaces), or "".
std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

double mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("MemTotal:", 0) == 0) return std::stod(line.substr(9)) * 1024.0;
  return 0;
}

}  // namespace

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


std::vector<std::string> machine_of_rank(const std::vector<json>& inv) {
  std::vector<std::string> out;
  for (const json& r : inv) {
    const json id = r.value("boot_id", json());
    out.push_back(id.is_string() && !id.get<std::string>().empty() ? "boot " + id.get<std::string>()
                                                                  : "host " + r.value("host", "?"));
  }
  return out;
}

std::vector<SharedMachine> shared_machines(const std::vector<json>& inv) {
  const std::vector<std::string> machine = machine_of_rank(inv);
  std::vector<SharedMachine> all;
  for (size_t r = 0; r < inv.size(); ++r) {
    auto it = std::find_if(all.begin(), all.end(), [&](const SharedMachine& m) { return m.machine == machine[r]; });
    if (it == all.end()) it = all.insert(all.end(), SharedMachine{machine[r], {}, {}});
    add_once(it->hosts, inv[r].value("host", "?"));
    add_once(it->nodes, inv[r].value("node", "?"));
  }
  std::vector<SharedMachine> shared;
  for (SharedMachine& m : all)
    if (m.nodes.size() > 1 || m.hosts.size() > 1) shared.push_back(std::move(m));
  return shared;
}

json majority(const std::vector<json>& inv, const std::string& key) {
  std::map<std::string, int> count;
  for (const json& r : inv) count[r.value(key, json()).dump()]++;
  std::string best = inv.front().value(key, json()).dump();
  for (const json& r : inv)
    if (count[r.value(key, json()).dump()] > count[best]) best = r.value(key, json()).dump();
  return json::parse(best);
}


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
      // Decimal digits only (strtod also reads " 2", "0x1" and "inf"): the report keeps the text.
      const bool decimal = value.find_first_not_of("0123456789.eE+-") == std::string::npos && std::isdigit(value[0]);
      if (!decimal || e == value.c_str() || *e != '\0' || !std::isfinite(v) || v < 0)
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
  const std::string cpu = cpu_model(), boot = boot_id();
  return {{"rank", rank},
          {"host", host},
          {"node", emulated ? std::string(host) + "/node" + std::to_string(node_index) : std::string(host)},
          {"node_index", node_index},
          {"local_rank", local_rank},
          {"boot_id", boot.empty() ? json(nullptr) : json(boot)},
          {"cpu_model", cpu.empty() ? json(nullptr) : json(cpu)},
          {"cores", cores > 0 ? json(cores) : json(nullptr)},
          {"memory_bytes", mem > 0 ? json(mem) : json(nullptr)},
          {"backend", backend},
          {"device", device.empty() ? json(nullptr) : json(device)},
          {"mpi_version", mpi},
          {"blas_version", std::string(openblas_get_config())}};
}


namespace {

// The ranks of each node, nodes in order of first appearance.
struct Nodes {
  std::map<std::string, std::vector<int>> ranks;  // node -> ranks
  std::vector<std::string> order;
  explicit Nodes(const std::vector<json>& inv) {
    for (const json& r : inv) {
      const std::string n = r.value("node", "?");
      if (!ranks.count(n)) order.push_back(n);
      ranks[n].push_back(r.value("rank", -1));
    }
  }
};

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Ranks per node: the same on every node.
ValidateCheck ranks_per_node_check(Nodes& nodes) {
  std::map<size_t, int> count;
  for (const auto& [n, rs] : nodes.ranks) count[rs.size()]++;
  size_t common = nodes.ranks.at(nodes.order.front()).size();
  for (const auto& [c, k] : count)
    if (k > count[common]) common = c;
  ValidateCheck c{"consistency/ranks_per_node", "pass", "", {}, {}, {{"ranks_per_node", common}}, {}};
  for (const std::string& n : nodes.order)
    if (nodes.ranks[n].size() != common) {
      c.nodes.push_back(n), c.ranks.insert(c.ranks.end(), nodes.ranks[n].begin(), nodes.ranks[n].end());
      c.node_detail[n] = std::to_string(nodes.ranks[n].size()) + " ranks, most nodes " + std::to_string(common);
    }
  if (c.nodes.empty()) {
    c.detail = std::to_string(nodes.ranks.size()) + " nodes of " + std::to_string(common) + " ranks";
  } else {
    c.status = "fail";
    c.detail = "node " + c.nodes.front() + " has " + std::to_string(nodes.ranks[c.nodes.front()].size()) +
               " ranks, most nodes " + std::to_string(common);
  }
  return c;
}

// One inventory key the same on every rank (the majority's value).
ValidateCheck same_everywhere_check(const std::vector<json>& inv, const char* key) {
  auto node_of = [&](int rank) { return inv[size_t(rank)].value("node", "?"); };
  const json want = majority(inv, key);
  ValidateCheck c{std::string("consistency/") + key, "pass", "", {}, {}, {{"majority", want}}, {}};
  for (const json& r : inv)
    if (r.value(key, json()) != want) {
      const int rank = r.value("rank", -1);
      c.ranks.push_back(rank);
      add_once(c.nodes, node_of(rank));
      c.values["rank " + std::to_string(rank)] = r.value(key, json());
      const json v = r.value(key, json());
      std::string& d = c.node_detail[node_of(rank)];
      d += (d.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " has " + text_of(v) +
           ", the others " + text_of(want);
    }
  if (want.is_null()) {
    c.status = c.ranks.empty() ? "skip" : "fail";
    c.detail = c.ranks.empty() ? std::string(key) + " could not be read on any rank" : "differs between ranks";
  } else if (c.ranks.empty()) {
    c.detail = "all " + std::to_string(inv.size()) + " ranks: " + text_of(want);
  } else {
    c.status = "fail";
    const json& odd = inv[size_t(c.ranks.front())].value(key, json());
    c.detail = "rank " + std::to_string(c.ranks.front()) + " (node " + node_of(c.ranks.front()) + ") has " +
               text_of(odd) + ", the others " + text_of(want) +
               (c.ranks.size() > 1 ? " (ranks " + join_ranks(c.ranks) + ")" : "");
  }
  return c;
}

// One GPU per rank: two ranks of a node on one device (a launcher's wrong mapping) would share
// it and measure each other.
ValidateCheck device_ids_check(const std::vector<json>& inv, Nodes& nodes) {
  ValidateCheck c{"consistency/device_ids", "pass", "every rank of a node on its own device", {}, {}, json::object(), {}};
  for (const std::string& n : nodes.order) {
    std::map<std::string, std::vector<int>> by_bus;
    for (int r : nodes.ranks[n]) by_bus[inv[size_t(r)].value("device_pci_bus_id", "unknown")].push_back(r);
    for (const auto& [bus, ranks] : by_bus)
      if (ranks.size() > 1 || bus == "unknown") {
        c.status = "fail";
        c.ranks.insert(c.ranks.end(), ranks.begin(), ranks.end());
        add_once(c.nodes, n);
        std::string& d = c.node_detail[n];
        d += (d.empty() ? "" : "; ") + std::string("ranks ") + join_ranks(ranks) + " on device " + bus;
        c.detail = "node " + n + ": ranks " + join_ranks(ranks) + " on device " + bus;
      }
  }
  return c;
}

// Memory per node: within 5% of the median node (warn), 20% (fail).
ValidateCheck memory_check(const std::vector<json>& inv, Nodes& nodes) {
  std::vector<double> mem;
  for (const std::string& n : nodes.order) mem.push_back(inv[size_t(nodes.ranks[n].front())].value("memory_bytes", 0.0));
  std::vector<double> sorted = mem;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];  // the upper middle: a node's own figure
  ValidateCheck c{"consistency/memory", "pass", "", {}, {}, {{"median_bytes", median}}, {}};
  double worst = 0;
  for (size_t i = 0; i < nodes.order.size(); ++i) {
    const double dev = median > 0 ? std::abs(mem[i] - median) / median : 1.0;
    const std::string& n = nodes.order[i];
    if (dev > 0.05) {
      c.nodes.push_back(n), c.values[n] = mem[i];
      c.node_status[n] = dev > 0.20 ? "fail" : "warn";
      c.node_detail[n] = std::to_string(int64_t(mem[i] / 1e9)) + " GB, " + std::to_string(int(std::lround(100 * dev))) +
                         "% from the median node's " + std::to_string(int64_t(median / 1e9)) + " GB";
    }
    if (dev > worst) worst = dev;
  }
  c.status = worst > 0.20 ? "fail" : worst > 0.05 ? "warn" : "pass";
  c.detail = c.nodes.empty() ? "every node within 5% of the median " + std::to_string(int64_t(median / 1e9)) + " GB"
                             : "node " + c.nodes.front() + " is " + std::to_string(int(std::lround(100 * worst))) +
                                   "% from the median node's memory";
  return c;
}

// expect/device: every rank's device name holds `value` (case-insensitive).
void expect_device(ValidateCheck& c, const std::vector<json>& inv, const std::string& value) {
  auto node_of = [&](int rank) { return inv[size_t(rank)].value("node", "?"); };
  for (const json& r : inv) {
    const json d = r.value("device", json());
    if (!d.is_string() || lower(d.get<std::string>()).find(lower(value)) == std::string::npos) {
      const int rank = r.value("rank", -1);
      c.ranks.push_back(rank);
      add_once(c.nodes, node_of(rank));
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

// One expectation's check.
ValidateCheck expectation_check(const std::vector<json>& inv, Nodes& nodes, const std::string& key,
                                const std::string& value) {
  ValidateCheck c{"expect/" + key, "pass", "", {}, {}, {{"expected", value}}, {}};
  auto per_node = [&](auto measure, auto ok, const std::string& what) {
    for (const std::string& n : nodes.order) {
      const double v = measure(n);
      c.values[n] = v;
      if (!ok(v)) c.nodes.push_back(n), c.node_detail[n] = num_str(v) + ", expected " + what;
    }
    c.status = c.nodes.empty() ? "pass" : "fail";
    c.detail = c.nodes.empty() ? "every node: " + what : "node " + c.nodes.front() + ": " + c.node_detail[c.nodes.front()];
  };
  auto first_of = [&](const std::string& n) -> const json& { return inv[size_t(nodes.ranks[n].front())]; };
  const double want = kExpectKeys.at(key) ? std::stod(value) : 0.0;
  if (key == "nodes") {
    c.values["nodes"] = nodes.ranks.size();
    c.status = double(nodes.ranks.size()) == want ? "pass" : "fail";
    c.detail = std::to_string(nodes.ranks.size()) + " nodes, expected " + value;
  } else if (key == "ranks_per_node") {
    per_node([&](const std::string& n) { return double(nodes.ranks[n].size()); }, [&](double v) { return v == want; },
             value + " ranks");
  } else if (key == "gpus_per_node") {
    per_node(
        [&](const std::string& n) {
          return first_of(n).value("backend", "") == "cuda" ? double(nodes.ranks[n].size()) : 0.0;
        },
        [&](double v) { return v == want; }, value + " GPUs (one a rank on the cuda backend; 0 on cpu)");
  } else if (key == "cores") {
    per_node([&](const std::string& n) { return first_of(n).value("cores", 0.0); },
             [&](double v) { return v >= want; }, "at least " + value + " cores");
  } else if (key == "memory_gb") {
    per_node([&](const std::string& n) { return first_of(n).value("memory_bytes", 0.0) / 1e9; },
             [&](double v) { return v >= want; }, "at least " + value + " GB");
  } else if (key == "device") {
    expect_device(c, inv, value);
  }
  return c;
}

// Which hosts and nodes share one physical machine (by boot id): for the report, so that a
// reader knows their figures measure each other; the probes take turns and skip arrival there.
ValidateCheck machines_check(const std::vector<json>& inv) {
  const std::vector<SharedMachine> shared = shared_machines(inv);
  json values = json::array();
  std::string text;
  for (const SharedMachine& m : shared) {
    values.push_back({{"machine", m.machine}, {"hosts", m.hosts}, {"nodes", m.nodes}});
    std::string hs, ns;
    for (const std::string& h : m.hosts) hs += (hs.empty() ? "" : ", ") + h;
    for (const std::string& n : m.nodes) ns += (ns.empty() ? "" : ", ") + n;
    text += (text.empty() ? "" : "; ") + std::string(m.hosts.size() > 1 ? "hosts " : "host ") + hs + " (nodes " + ns +
            ") share one machine (" + m.machine + ")";
  }
  return {"consistency/machines", "pass",
          shared.empty() ? "every node on a machine of its own" : text + ": their figures share its cores and memory",
          {}, {}, {{"shared", values}}, {}};
}

}  // namespace

std::vector<ValidateCheck> quick_checks(const std::vector<json>& inv, const std::map<std::string, std::string>& expect) {
  Nodes nodes(inv);
  std::vector<ValidateCheck> checks = {ranks_per_node_check(nodes)};
  // The same device, CPU model, cores, MPI and BLAS on every rank (the majority's value); and,
  // where the ranks have GPUs, the same driver, CUDA runtime, NCCL and device memory.
  for (const char* key : {"device", "cpu_model", "cores", "mpi_version", "blas_version", "driver_version",
                          "cuda_runtime_version", "nccl_version", "device_memory_bytes"}) {
    const std::string k = key;
    const bool gpu_key = k.find("version") != std::string::npos && k != "mpi_version" && k != "blas_version";
    if ((gpu_key || k == "device_memory_bytes") &&
        std::none_of(inv.begin(), inv.end(), [&](const json& r) { return r.contains(key); }))
      continue;  // no GPU on any rank
    checks.push_back(same_everywhere_check(inv, key));
  }
  if (std::any_of(inv.begin(), inv.end(), [](const json& r) { return r.contains("device_pci_bus_id"); }))
    checks.push_back(device_ids_check(inv, nodes));
  checks.push_back(memory_check(inv, nodes));
  checks.push_back(machines_check(inv));
  for (const auto& [key, value] : expect) checks.push_back(expectation_check(inv, nodes, key, value));
  return checks;
}

}  // namespace dtb
