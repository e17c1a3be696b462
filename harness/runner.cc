#include "harness/runner.h"

#include "kernels/timer.h"

namespace dtb {

std::vector<SuiteOutcome> run_suites(const nlohmann::json& config, Communicator& world, Device& device,
                                     const Dataset* dataset,
                                     const std::function<void(const std::vector<SuiteOutcome>&)>& after_each) {
  std::vector<SuiteOutcome> outcomes;
  for (const auto& s : config.at("suites")) {
    const std::string name = s.get<std::string>();
    auto suite = suite_registry().at(name)();
    SuiteContext ctx{world, device, config, config.at(name), dataset};
    SuiteOutcome out;
    out.name = name;
    device.reset_peaks();
    world.barrier();
    Stopwatch sw;
    try {
      out.result = suite->run(ctx);
      bool ok = true;
      for (const auto& c : out.result.checks) ok = ok && c.passed;
      out.status = ok ? "passed" : "failed";
    } catch (const std::exception& e) {
      out.status = "error";
      out.error = e.what();
    }
    out.duration_s = sw.elapsed();
    outcomes.push_back(std::move(out));
    after_each(outcomes);
  }
  return outcomes;
}

}  // namespace dtb
