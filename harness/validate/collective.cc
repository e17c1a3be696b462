// The collective probes of `dtbench validate` (see collective.h).
#include "harness/validate/collective.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "harness/validate/faults.h"
#include "harness/validate/compute.h"
#include "harness/validate/inventory.h"
#include "kernels/error.h"
#include "suites/bandwidth.h"
#include "suites/stats.h"

namespace dtb {

using nlohmann::json;

CollectiveProbe probe_allreduce(Communicator& comm, double factor) {
  const int n = comm.size();
  CollectiveProbe p;
  const size_t count = size_t(4) << 20;
  std::vector<float> buf(count, 1.0f);
  double best = 1e300;
  for (int rep = 0; rep < 6; ++rep) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum);
    if (rep > 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The collective's time is its slowest member's: every rank reports the same busbw.
  comm.all_reduce(&best, &best, 1, DType::f64, ReduceOp::max);
  p.busbw = n > 1 ? busbw_GBps(CollectiveOp::all_reduce, count * sizeof(float), best, n) : 0.0;  // 2 (n - 1) / n x algbw
  const int w = 768, iters = 15;
  std::vector<float> a(size_t(w) * w, 0.5f), b(size_t(w) * w, 0.25f), c(size_t(w) * w);
  std::vector<double> waits(iters), works(iters);
  comm.barrier();
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    host_sgemm(w, a.data(), b.data(), c.data());
    const auto dt = std::chrono::steady_clock::now() - t0;
    if (factor > 1) spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(dt * factor));
    const auto t1 = std::chrono::steady_clock::now();
    works[size_t(i)] = std::chrono::duration<double>(t1 - t0).count();
    double x = 1;
    comm.all_reduce(&x, &x, 1, DType::f64, ReduceOp::sum);
    waits[size_t(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  std::vector<double> all(size_t(n) * iters), all_work(size_t(n) * iters);
  comm.all_gather(waits.data(), all.data(), iters, DType::f64);
  comm.all_gather(works.data(), all_work.data(), iters, DType::f64);
  for (int r = 0; r < n; ++r) {
    std::vector<double> late;
    for (int i = 0; i < iters; ++i) {
      double longest = 0;
      for (int q = 0; q < n; ++q) longest = std::max(longest, all[size_t(q) * iters + size_t(i)]);
      late.push_back(longest - all[size_t(r) * iters + size_t(i)]);
    }
    p.lag_ms.push_back(1e3 * median(late));
  }
  p.work_ms = 1e3 * median(all_work);
  return p;
}

std::string crowded(const std::vector<json>& inv, bool world_wide) {
  const int n = int(inv.size());
  // Counted per physical machine: hosts that are namespaces of one kernel share its cores.
  const std::vector<std::string> machine = machine_of_rank(inv);
  std::map<std::string, int> at_once;
  std::map<int, int> node_size;
  for (int r = 0; r < n; ++r) ++node_size[inv[size_t(r)].value("node_index", 0)];
  for (int r = 0; r < n; ++r) {
    int& c = at_once[machine[size_t(r)]];
    c = world_wide ? c + 1 : std::max(c, node_size[inv[size_t(r)].value("node_index", 0)]);
  }
  for (const auto& [m, k] : at_once) {
    int cores = 0;
    std::vector<std::string> hosts;
    for (int r = 0; r < n; ++r)
      if (machine[size_t(r)] == m) {
        cores = inv[size_t(r)].value("cores", 0);
        if (std::find(hosts.begin(), hosts.end(), inv[size_t(r)].value("host", "?")) == hosts.end())
          hosts.push_back(inv[size_t(r)].value("host", "?"));
      }
    if (cores > 0 && k > cores) {
      std::string who = "host " + hosts.front() + " runs ";
      if (hosts.size() > 1) {
        who = "hosts ";
        for (size_t i = 0; i < hosts.size(); ++i) who += (i ? ", " : "") + hosts[i];
        who += " share one machine (" + m + ") and run ";
      }
      return who + std::to_string(k) + " ranks at once on " + std::to_string(cores) +
             " cores, so their arrival order is the OS scheduler's";
    }
  }
  return "";
}

}  // namespace dtb
