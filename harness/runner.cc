// The suite runner: each selected suite in turn on every rank, its outcome recorded.
#include "harness/runner.h"

#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {

std::vector<SuiteOutcome> run_suites(const nlohmann::json& config, Communicator& world, Backend& backend,
                                     Communicator* device_world, const Dataset* dataset,
                                     const std::function<void(const std::vector<SuiteOutcome>&)>& after_each,
                                     SpanRecorder* spans) {
  std::vector<SuiteOutcome> outcomes;
  for (const auto& s : config.at("suites")) {
    const std::string name = s.get<std::string>();
    auto suite = suite_registry().at(name)();
    Device& device = backend.device();
    SuiteContext ctx{world, device, config, config.at(name), dataset, &backend, device_world, spans};
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
      if (world.size() > 1) {
        // The other ranks may be inside this suite's collectives, waiting for this one, and
        // cannot be told; record what is known (rank 0 writes the report) and end the job.
        outcomes.push_back(std::move(out));
        if (world.rank() == 0) after_each(outcomes);
        fatal(__FILE__, __LINE__, "suite '" + name + "' failed: " + e.what() +
                                      "; ending the job so that no rank waits for this one");
      }
    }
    out.duration_s = sw.elapsed();
    outcomes.push_back(std::move(out));
    after_each(outcomes);
  }
  return outcomes;
}

}  // namespace dtb
