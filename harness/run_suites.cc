// run_suites (harness/run_suites.h): the suites in order on every rank, and rank 0's live
// progress line on a terminal (TerminalProgress).
#include "harness/run_suites.h"

#include <cstdio>

#include "kernels/agreed_error.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/training/progress.h"
#include "suites/calibration.h"
#include "suites/host_load.h"

namespace dtb {
namespace {

// Rank 0's live progress line on a terminal: "[suite i/n name] step s/S, elapsed, ~left",
// redrawn at most 4 times a second; the estimate assumes the loop's remaining steps take
// as long as its steps so far (a loop restarts when a step 1 is reported).
class TerminalProgress final : public ProgressSink {
 public:
  void begin_suite(int index, int total, const std::string& name) {
    prefix_ = "[suite " + std::to_string(index) + "/" + std::to_string(total) + " " + name + "]";
    suite_start_ = now_seconds();
    draw("running");
  }
  void step(int64_t done, int64_t total) override {
    const double now = now_seconds();
    if (done <= 1) loop_start_ = now - 1e-9;  // a new training loop
    if (now - last_draw_ < 0.25 && done < total) return;
    const double per = (now - loop_start_) / double(done);
    char b[160];
    std::snprintf(b, sizeof b, "step %lld/%lld, %.1f s elapsed, ~%.0f s left in this loop", (long long)done,
                  (long long)total, now - suite_start_, per * double(total - done));
    draw(b);
  }
  void clear() override {
    if (!shown_) return;
    std::fputs("\r\033[K", stdout);
    std::fflush(stdout);
    shown_ = false;
  }

 private:
  void draw(const std::string& what) {
    std::fprintf(stdout, "\r\033[K%s %s", prefix_.c_str(), what.c_str());
    std::fflush(stdout);
    shown_ = true;
    last_draw_ = now_seconds();
  }
  std::string prefix_;
  double suite_start_ = 0, loop_start_ = 0, last_draw_ = -1;
  bool shown_ = false;
};

}  // namespace

std::vector<SuiteOutcome> run_suites(const nlohmann::json& config, Communicator& world, Backend& backend,
                                     Communicator* device_world, const Dataset* dataset,
                                     const std::function<void(const std::vector<SuiteOutcome>&)>& after_each,
                                     SpanRecorder* spans, bool live_progress, const WorldInfo& info) {
  std::vector<SuiteOutcome> outcomes;
  // Progress: a live line on rank 0 when asked; one line per suite always.
  TerminalProgress live;
  const bool tty = world.rank() == 0 && live_progress;
  ProgressSink* previous = tty ? set_progress_sink(&live) : nullptr;
  const int n_suites = int(config.at("suites").size());
  int index = 0;
  for (const auto& s : config.at("suites")) {
    const std::string name = s.get<std::string>();
    ++index;
    if (tty) live.begin_suite(index, n_suites, name);
    auto suite = suite_registry().at(name)();
    Device& device = backend.device();
    SuiteContext ctx{world, device, config, config.at(name), dataset, &backend, device_world, spans,
                     info.ranks_per_node, info.options};
    SuiteOutcome out;
    out.name = name;
    // The in-run calibration (suites/calibration.h): the CPU's reference kernels just before
    // and after the suite, so that every time it records is also a ratio to them.
    const bool calibrate = backend.name() == "cpu";
    const Calibration before = calibrate ? measure_calibration(world) : Calibration{};
    device.reset_peaks();
    world.barrier();
    Stopwatch sw;
    double ran_s = -1;  // the suite's own time, without the calibration after it
    try {
      LoadMeter load(world);  // other work on the hosts while it runs (suites/host_load.h)
      out.result = suite->run(ctx);
      ran_s = sw.elapsed();
      out.host_load = host_load_json(load.stop());
      if (calibrate) {
        const Calibration after = measure_calibration(world);
        out.calibration = calibration_json(before, after);
        apply_calibration(out.result.benchmarks, combine(before, after));
      }
      out.status = suite_status(out.result);
    } catch (const AgreedInputError& e) {  // every rank threw it: none waits, the job goes on
      out.status = "error";
      out.error = e.what();
      out.refused = true;
      if (world.rank() == 0) std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    } catch (const std::exception& e) {
      out.status = "error";
      out.error = e.what();
      if (world.size() > 1) {
        // The other ranks may be inside this suite's collectives, waiting for this one, and
        // cannot be told; record what is known (rank 0 writes the report) and end the job.
        outcomes.push_back(std::move(out));
        if (world.rank() == 0) after_each(outcomes);
        set_termination_hook({});  // the report already holds this suite's error
        fatal(__FILE__, __LINE__, "suite '" + name + "' failed: " + e.what() +
                                      "; ending the job so that no rank waits for this one");
      }
    }
    out.duration_s = ran_s >= 0 ? ran_s : sw.elapsed();
    if (world.rank() == 0) {
      clear_progress();
      std::printf("%s\n", suite_end_line(index, n_suites, out).c_str());
      std::fflush(stdout);
    }
    outcomes.push_back(std::move(out));
    after_each(outcomes);
  }
  if (tty) set_progress_sink(previous);
  return outcomes;
}

}  // namespace dtb
