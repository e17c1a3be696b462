// The suite runner: runs the selected suites in order on every rank, recording how each
// ended (passed, failed, error) and handing the outcomes to a callback after each suite so
// the report on disk always holds what finished.
#pragma once
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report.h"

namespace dtb {

/// Runs config["suites"] in order. A suite that throws std::exception is recorded as
/// "error" with its message; on one rank the run goes on, on several the job ends through
/// the error sink (MPI_Abort) after rank 0 wrote what it has, since the other ranks may
/// be blocked in the failed suite's collectives (a collective timeout comes later). `after_each` is called on every rank
/// after each suite with the outcomes so far. `spans` (optional) is handed to every suite
/// as SuiteContext::spans. Rank 0 prints one line per suite as it ends; with
/// `live_progress` it also keeps a live line (suite, training step, elapsed, estimate) for
/// a terminal. `info` (its ranks per node and the run's options) goes to every suite's
/// SuiteContext. Collective over `world`.
std::vector<SuiteOutcome> run_suites(const nlohmann::json& config, Communicator& world, Backend& backend,
                                     Communicator* device_world, const Dataset* dataset,
                                     const std::function<void(const std::vector<SuiteOutcome>&)>& after_each,
                                     SpanRecorder* spans = nullptr, bool live_progress = false,
                                     const WorldInfo& info = WorldInfo());

}  // namespace dtb
