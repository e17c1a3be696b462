#include "harness/validate.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/report.h"
#include "kernels/backend.h"
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
  // The same device, CPU model, cores, MPI and BLAS on every rank (the majority's value).
  for (const char* key : {"device", "cpu_model", "cores", "mpi_version", "blas_version"}) {
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
  if (a == std::string::npos || b == std::string::npos || rank.empty() || *e != '\0')
    throw InputError("--inject: '" + spec + "' is not RANK:compute:FACTOR");
  if (r < 0 || r >= world_size)
    throw InputError("--inject: rank " + rank + " is not in [0, " + std::to_string(world_size) + ")");
  const std::string kind = spec.substr(a + 1, b - a - 1);
  if (kind != "compute" && kind != "comm")
    throw InputError("--inject: '" + kind + "' is not a fault this build injects (compute, comm)");
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

// A rank below (1 - tolerance) x reference fails, below (1 - tolerance / 2) x warns; `what`
// names the reference in the messages ("the median", "the baseline").
ValidateCheck below_reference_check(const std::string& name, const std::string& unit, const std::vector<double>& value,
                                    const std::vector<std::string>& nodes, double tolerance, double reference,
                                    const std::string& what, const std::string& rule) {
  ValidateCheck c{name, "pass", "", {}, {}, {{"reference", reference}, {"unit", unit}, {"tolerance", tolerance}}, {}};
  double worst = 0;
  int worst_rank = -1;
  for (size_t r = 0; r < value.size(); ++r) {
    const double drop = reference > 0 ? 1.0 - value[r] / reference : 1.0;
    c.values["rank " + std::to_string(r)] = value[r];
    if (drop > tolerance / 2) {
      c.ranks.push_back(int(r));
      if (std::find(c.nodes.begin(), c.nodes.end(), nodes[r]) == c.nodes.end()) c.nodes.push_back(nodes[r]);
      std::string& d = c.node_detail[nodes[r]];
      d += (d.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " " + num_str(value[r]) + " " + unit +
           ", " + std::to_string(int(std::lround(100 * drop))) + "% below " + what + " " + num_str(reference) +
           " (rule: " + (drop > tolerance ? "fail" : "warn") + " beyond " +
           std::to_string(int(std::lround(100 * (drop > tolerance ? tolerance : tolerance / 2)))) + "% below " + rule + ")";
    }
    if (drop > worst) worst = drop, worst_rank = int(r);
  }
  c.status = worst > tolerance ? "fail" : worst > tolerance / 2 ? "warn" : "pass";
  c.detail = c.ranks.empty() ? "every rank within " + std::to_string(int(std::lround(50 * tolerance))) + "% of " + what +
                                   " " + num_str(reference) + " " + unit
                             : c.node_detail[nodes[size_t(worst_rank)]];
  return c;
}

}  // namespace

ValidateCheck fleet_median_check(const std::string& name, const std::string& unit, const std::vector<double>& value,
                                 const std::vector<std::string>& nodes, double tolerance) {
  const double median = median_of(value);
  ValidateCheck c = below_reference_check(name, unit, value, nodes, tolerance, median, "the median", "the fleet median");
  c.values["median"] = median;
  return c;
}

double baseline_value(std::vector<double> v) {
  // Iterative outlier removal: drop what lies beyond 3 MADs (at least 1% of the median) from
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
  std::vector<ValidateCheck> out;
  for (const auto& [name, entry] : baseline.at("metrics").items()) {
    const auto it = measured.find(name);
    if (it == measured.end()) {
      out.push_back({"baseline/" + name, "fail",
                     "missing: the baseline has " + name + ", this run measured none (a level too low, or a test that "
                     "could not run)",
                     {}, {}, {{"baseline", entry.value("value", 0.0)}}, {}});
      continue;
    }
    out.push_back(below_reference_check("baseline/" + name, it->second.unit, it->second.per_rank, nodes, tolerance,
                                        entry.value("value", 0.0), "the baseline", "the baseline"));
  }
  return out;
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

// A barrier whose waiting ranks sleep between polls (MPI_Ibarrier, MPI_Test, 200 us naps):
// MPI's own barrier spins, and on a host whose ranks take turns the spinning ranks would take
// the cores from the one being measured (rank 0's GEMM measured 31% low so).
void sleeping_barrier() {
  MPI_Request req;
  DTB_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req) == MPI_SUCCESS, "MPI_Ibarrier failed");
  for (int done = 0;;) {
    DTB_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Test failed");
    if (done) return;
    usleep(200);
  }
}

// Bidirectional point-to-point bandwidth with `partner`: MPI_Sendrecv of `bytes` each way,
// then both sides swap their transfer times (a 1-double handshake), best of 10 after a warm-up;
// (2 bytes) / seconds in GB/s. `factor` > 1 (--inject, both sides of a pair with the slowed
// rank) emulates a link that many times slower: both sides spin until factor x the longer of
// the two transfer times has passed since the start, then swap once more.
double pair_bandwidth(int partner, size_t bytes, double factor) {
  std::vector<char> sbuf(bytes, 1), rbuf(bytes);
  double best = 1e300;
  auto swap = [&](double mine) {
    double theirs = 0;
    DTB_CHECK(MPI_Sendrecv(&mine, 1, MPI_DOUBLE, partner, 8, &theirs, 1, MPI_DOUBLE, partner, 8, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE) == MPI_SUCCESS,
              "MPI_Sendrecv failed");
    return theirs;
  };
  for (int rep = 0; rep < 11; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    DTB_CHECK(MPI_Sendrecv(sbuf.data(), int(bytes), MPI_BYTE, partner, 7, rbuf.data(), int(bytes), MPI_BYTE, partner, 7,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS,
              "MPI_Sendrecv failed");
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double longer = std::max(dt, swap(dt));
    if (factor > 1) {
      spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(factor * longer)));
      swap(0.0);
    }
    if (rep > 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(bytes) / best / 1e9;
}

}  // namespace

namespace {
int report_quick(const ValidateArgs& a, const std::vector<json>& inv, const std::vector<ValidateCheck>& checks,
                 std::chrono::steady_clock::time_point t0);
}  // namespace

int cmd_validate(Communicator& world, const ValidateArgs& a) {
  const bool root = world.rank() == 0;
  if (a.level != "quick" && a.level != "medium" && a.level != "long") {
    if (a.level == "burnin")
      throw InputError("--level burnin is not available yet: quick, medium and long are built");
    throw InputError("--level '" + a.level + "' is not one of quick, medium, long, burnin");
  }
  if (!(a.tolerance > 0 && a.tolerance < 1)) throw InputError("--tolerance must be in (0, 1)");
  const Injection inj = parse_injection(a.inject, world.size());
  json baseline;
  if (!a.baseline.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(a.baseline, ec)) throw InputError("--baseline " + a.baseline + ": no such file");
    std::ifstream f(a.baseline);
    try {
      baseline = json::parse(f);
    } catch (const json::parse_error& e) {
      throw InputError("--baseline " + a.baseline + ": malformed JSON (" + e.what() + ")");
    }
    if (!baseline.is_object() || baseline.value("kind", "") != "validate-baseline" || !baseline.contains("metrics") ||
        !baseline["metrics"].is_object())
      throw InputError("--baseline " + a.baseline + ": not a validate baseline (kind \"validate-baseline\")");
    for (const auto& [k, v] : baseline["metrics"].items())
      if (!v.is_object() || !v.contains("value") || !v["value"].is_number())
        throw InputError("--baseline " + a.baseline + ": metric " + k + " has no numeric \"value\"");
  }
  if (a.backend != "cpu" && a.backend != "cuda") throw InputError("--backend '" + a.backend + "' is not cpu or cuda");
  const auto expect = parse_expectations(a.expect);
  if (a.ranks_per_node < 0) throw InputError("--ranks-per-node must be positive");
  if (a.ranks_per_node > 0 && world.size() % a.ranks_per_node != 0)
    throw InputError("--ranks-per-node " + std::to_string(a.ranks_per_node) + " does not divide the " +
                     std::to_string(world.size()) + " ranks");
  const auto t0 = std::chrono::steady_clock::now();
  if (root) {
    std::printf("# validate %s: inventory and consistency of %d ranks%s", a.level.c_str(), world.size(),
                a.ranks_per_node > 0 ? (", emulated nodes of " + std::to_string(a.ranks_per_node) + " ranks (for tests)").c_str() : "");
    if (a.level == "medium" || a.level == "long")
      std::printf("; then each rank's GEMM and memory bandwidth, the ranks of a host one at a time: expected about 0.5 s "
                  "a rank of the most populated host");
    if (a.level == "long")
      std::printf("; then every pair's send/recv bandwidth, n - 1 rounds of n / 2 pairs at once: about 0.05 s a round");
    else
      std::printf("; expected a few seconds");
    std::printf("%s\n", inj.rank >= 0 ? ("; TEST FAULT: rank " + std::to_string(inj.rank) + " " +
                                          (inj.comm > 1 ? "communication x" + num_str(inj.comm)
                                                        : "compute x" + num_str(inj.compute)) + " slower").c_str() : "");
  }
  std::fflush(stdout);

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
  if (a.backend == "cpu") {
    device = "cpu: " + cpu_model();
  } else {
    try {
      device = make_cuda_backend(local_rank)->device_name();
    } catch (const std::exception& e) {
      device_error = e.what();
    }
  }
  json mine = rank_inventory(world.rank(), node_index, local_rank, emulated, device, a.backend);
  if (!device_error.empty()) mine["device_error"] = device_error;
  std::vector<json> inv;
  for (const std::string& s : all_gather_strings(world, mine.dump())) inv.push_back(json::parse(s));
  // Real nodes are numbered by first appearance of their host.
  if (!emulated) {
    std::map<std::string, int> index;
    for (json& r : inv) r["node_index"] = index.emplace(r["node"].get<std::string>(), int(index.size())).first->second;
  }
  std::vector<ValidateCheck> checks = quick_checks(inv, expect);
  std::map<std::string, Metric> metrics;  // per rank, for baselines
  const bool medium = a.level == "medium" || a.level == "long";
  if (medium) {
    // The ranks of one host take turns (they share its cores and memory); hosts run at once.
    int turn = 0, turns = 1;
    std::map<std::string, int> per_host;
    for (const json& r : inv) {
      const int k = per_host[r.value("host", "?")]++;
      if (r.value("rank", -1) == world.rank()) turn = k;
      turns = std::max(turns, k + 1);
    }
    // Three rounds of turns, each rank's best over them: a neighbour's burst of load spoils one
    // round's figure, not the rank's.
    std::pair<double, double> mine_c{0, 0};
    ComputeProbe probe;
    for (int round = 0; round < 3; ++round)
      for (int t = 0; t < turns; ++t) {
        sleeping_barrier();
        if (t == turn) {
          const auto m = probe.measure(world.rank() == inj.rank ? inj.compute : 1.0);
          mine_c = {std::max(mine_c.first, m.first), std::max(mine_c.second, m.second)};
        }
      }
    sleeping_barrier();
    std::vector<double> both = {mine_c.first, mine_c.second}, all(2 * size_t(world.size()));
    world.all_gather(both.data(), all.data(), 2, DType::f64);
    std::vector<double> gemm, triad;
    std::vector<std::string> node;
    for (int r = 0; r < world.size(); ++r) {
      gemm.push_back(all[2 * size_t(r)]), triad.push_back(all[2 * size_t(r) + 1]);
      node.push_back(inv[size_t(r)].value("node", "?"));
    }
    checks.push_back(fleet_median_check("compute/gemm_gflops", "GFLOP/s", gemm, node, a.tolerance));
    checks.push_back(fleet_median_check("compute/triad_GBps", "GB/s", triad, node, a.tolerance));
    metrics["compute/gemm_gflops"] = {"GFLOP/s", gemm};
    metrics["compute/triad_GBps"] = {"GB/s", triad};
    checks.push_back({"collectives/intra_node", "skip", "not built yet (level medium measures compute only so far)",
                      {}, {}, json::object(), {}});
  }
  if (a.level == "long" && world.size() > 1) {
    // Every pair once, round-robin (n - 1 rounds of n / 2 pairs at once): each rank's
    // bidirectional bandwidth with each partner; a rank's figure is the median over its
    // partners, so one slow link (or one slow rank) shows at its own ranks, not at all of
    // theirs. 4 MiB each way.
    const size_t bytes = size_t(4) << 20;
    std::vector<double> row(size_t(world.size()), 0.0);
    // Pairs of a round that share a host take turns (slots), as ranks do for compute: two
    // transfers through one host's memory would measure each other.
    auto host = [&](int r) { return inv[size_t(r)].value("host", "?"); };
    // Two sweeps, each pair's best: where ranks share cores, one sweep's figure for a pair can
    // depend on where the scheduler put its two ranks at that moment.
    for (int sweep = 0; sweep < 2; ++sweep)
    for (const auto& round : pair_rounds(world.size())) {
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
        sleeping_barrier();
        for (size_t i = 0; i < round.size(); ++i) {
          const auto [x, y] = round[i];
          if (slot[i] == k && (x == world.rank() || y == world.rank())) {
            const int partner = x == world.rank() ? y : x;
            const bool slowed = world.rank() == inj.rank || partner == inj.rank;
            row[size_t(partner)] =
                std::max(row[size_t(partner)], pair_bandwidth(partner, bytes, slowed ? inj.comm : 1.0));
          }
        }
      }
    }
    sleeping_barrier();
    std::vector<double> matrix(row.size() * row.size());
    world.all_gather(row.data(), matrix.data(), row.size(), DType::f64);
    std::vector<double> per_rank;
    std::vector<std::string> node;
    json m = json::array();
    for (int r = 0; r < world.size(); ++r) {
      std::vector<double> v;
      json mr = json::array();
      for (int p = 0; p < world.size(); ++p) {
        mr.push_back(matrix[size_t(r) * row.size() + size_t(p)]);
        if (p != r) v.push_back(matrix[size_t(r) * row.size() + size_t(p)]);
      }
      std::sort(v.begin(), v.end());
      per_rank.push_back(v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
      node.push_back(inv[size_t(r)].value("node", "?"));
      m.push_back(mr);
    }
    ValidateCheck c = fleet_median_check("pairs/sendrecv_GBps", "GB/s", per_rank, node, a.tolerance);
    metrics["pairs/sendrecv_GBps"] = {"GB/s", per_rank};
    c.values["matrix_GBps"] = m;
    c.values["bytes"] = bytes;
    checks.push_back(c);
    checks.push_back({"train/world", "skip", "not built yet (level long runs the pair sweep only so far)", {}, {},
                      json::object(), {}});
  }
  std::vector<std::string> node_of_rank;
  for (const json& r : inv) node_of_rank.push_back(r.value("node", "?"));
  const json platform = majority(inv, "device");
  if (!a.baseline.empty()) {
    if (baseline.value("platform", json()) != platform)
      checks.push_back({"baseline/platform", "fail",
                        "the baseline is for " + baseline.value("platform", json()).dump() + ", this run's devices are " +
                            platform.dump(),
                        {}, {}, json::object(), {}});
    for (ValidateCheck& c : baseline_checks(baseline, metrics, node_of_rank, a.tolerance)) checks.push_back(std::move(c));
  }
  bool baseline_unwritten = false;
  if (!a.make_baseline.empty() && root) {
    json m = json::object();
    for (const auto& [name, metric] : metrics)
      m[name] = {{"value", baseline_value(metric.per_rank)}, {"unit", metric.unit}, {"ranks", metric.per_rank.size()}};
    const json b = {{"kind", "validate-baseline"}, {"version", 1}, {"platform", platform}, {"level", a.level},
                    {"method", "per metric: the median of the ranks' values after iterative removal of those beyond 3 "
                               "MADs (at least 1% of the median)"},
                    {"metrics", m}};
    try {
      const std::filesystem::path bp(a.make_baseline);
      if (bp.has_parent_path()) std::filesystem::create_directories(bp.parent_path());
      write_json_atomic(a.make_baseline, b);
      std::printf("baseline of %zu metrics written to %s\n", m.size(), a.make_baseline.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtbench: error: --make-baseline: %s\n", e.what());
      baseline_unwritten = true;
    }
  }
  // Rank 0 decides, prints and writes; every rank returns its exit status.
  int code = 0;
  if (root) {
    try {
      code = report_quick(a, inv, checks, t0);
      if (baseline_unwritten) code = 2;
    } catch (const InputError& e) {
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = 2;  // bad input, as dtbench exits for it
    }
  }
  world.broadcast(&code, 1, DType::i32, 0);
  return code;
}

namespace {

int report_quick(const ValidateArgs& a, const std::vector<json>& inv, const std::vector<ValidateCheck>& checks,
                 std::chrono::steady_clock::time_point t0) {

  // Per node: accepted unless a failed check (or a warning, with --werror) names it.
  std::vector<std::string> node_order;
  for (const json& r : inv)
    if (std::find(node_order.begin(), node_order.end(), r["node"].get<std::string>()) == node_order.end())
      node_order.push_back(r["node"]);
  auto bad = [&](const ValidateCheck& c) { return c.status == "fail" || (a.werror && c.status == "warn"); };
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
      if ((c.status == "fail" || c.status == "warn") && std::find(c.nodes.begin(), c.nodes.end(), n) != c.nodes.end())
        violations.push_back({{"check", c.name},
                              {"status", c.status},
                              {"detail", c.node_detail.count(n) ? c.node_detail.at(n) : c.detail},
                              {"values", c.values}});
    bool accepted = true;
    for (const ValidateCheck& c : checks)
      if (bad(c) && std::find(c.nodes.begin(), c.nodes.end(), n) != c.nodes.end()) accepted = false;
    defective += accepted ? 0 : 1;
    nodes.push_back({{"node", n}, {"ranks", ranks}, {"accepted", accepted}, {"violations", violations}});
  }
  const int code = defective > 0 || world_failed ? 1 : 0;
  json jchecks = json::array();
  for (const ValidateCheck& c : checks)
    jchecks.push_back({{"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"nodes", c.nodes},
                       {"ranks", c.ranks}, {"values", c.values}});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const json out = {{"kind", "validate"},
                    {"version", 1},
                    {"level", a.level},
                    {"levels_run", a.level == "long"     ? json{"quick", "medium", "long"}
                                   : a.level == "medium" ? json{"quick", "medium"}
                                                         : json{"quick"}},
                    {"injected_fault", a.inject.empty() ? json(nullptr) : json(a.inject)},
                    {"expect", parse_expectations(a.expect)},
                    {"emulated_ranks_per_node", a.ranks_per_node > 0 ? json(a.ranks_per_node) : json(nullptr)},
                    {"world_size", inv.size()},
                    {"duration_s", secs},
                    {"inventory", inv},
                    {"checks", jchecks},
                    {"nodes", nodes},
                    {"verdict", code == 0 ? "accepted" : "defective"},
                    {"exit_status", code}};
  for (const ValidateCheck& c : checks)
    std::printf("  %-8s %-28s %s\n", c.status.c_str(), c.name.c_str(), c.detail.c_str());
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
