// The composition of `dtbench validate`'s levels: quick (the inventory's checks), and the
// measuring levels run once (medium, long) or looped (burnin), each pass folded into the run's
// checks and metrics. The levels' checks are in level_medium.cc and level_long.cc, the SDC
// replay (long, burnin, or --sdc at any level) in sdc.cc.
#include <algorithm>
#include <chrono>

#include "harness/validate/inventory.h"
#include "harness/validate/levels.h"
#include "harness/validate/sdc.h"

namespace dtb {
namespace {

// The worse of two statuses: fail > warn > pass > skip.
int severity(const std::string& s) { return s == "fail" ? 3 : s == "warn" ? 2 : s == "pass" ? 1 : 0; }

}  // namespace

void quick_level(ValidateRun& run, const std::map<std::string, std::string>& expect) {
  run.checks = quick_checks(run.inv, expect);
}

std::vector<std::string> planned_checks(const ValidateArgs& args) {
  std::vector<std::string> planned;
  if (args.level != "quick") planned = {"compute", "copy", "node/sendrecv", "node/allreduce"};
  if (args.level == "long" || args.level == "burnin")
    planned.insert(planned.end(), {"pairs", "groups/allreduce", "world/allreduce", "train"});
  if (runs_sdc(args)) planned.push_back("sdc");
  return planned;
}

void burnin_level(ValidateRun& run) {
  if (!run.medium() && !runs_sdc(run.args)) return;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(run.mu);
      run.pass = ValidatePass{};
    }
    if (run.medium()) medium_level(run);
    if (run.long_level()) long_level(run);
    if (runs_sdc(run.args)) sdc_check(run);
    // Burnin keeps each rank's worst figure of every loop and each check's worst outcome.
    {
      std::lock_guard<std::mutex> lock(run.mu);
      run.metrics = run.measured_so_far();
      for (ValidateCheck& c : run.pass.checks) {
        auto it = std::find_if(run.checks.begin(), run.checks.end(),
                               [&](const ValidateCheck& x) { return x.name == c.name; });
        if (it == run.checks.end()) run.checks.push_back(std::move(c));
        else if (severity(c.status) > severity(it->status)) *it = std::move(c);
      }
      run.pass.checks.clear();
      run.pass.metrics.clear();
      ++run.loops;
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run.world.broadcast(&elapsed, 1, DType::f64, 0);  // one decision for every rank
    if (run.args.level != "burnin" || elapsed >= run.args.duration) break;
  }
}

}  // namespace dtb
