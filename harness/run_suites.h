// The run loop of `dtbench run` (harness/run_cli.h): the config's suites one after another on
// every rank, each timed, calibrated on the CPU and its outcome recorded, with a live progress
// line on a terminal. Not the run's setup (config, backend, report files): run_cli.cc does that.
#pragma once
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report.h"
#include "kernels/backend.h"
#include "kernels/comm/communicator.h"
#include "reference/training/spans.h"
#include "suites/suite.h"

namespace dtb {

/// Runs config["suites"] in order, each on every rank. A suite that throws std::exception is
/// recorded as "error" with its message; on one rank the run goes on, on several the job ends
/// through the error sink (MPI_Abort) after rank 0 wrote what it has, since the other ranks
/// may be blocked in the failed suite's collectives. `after_each` is called on every rank
/// after each suite with the outcomes so far, so the report on disk always holds what
/// finished. `spans` goes to every suite as SuiteContext::spans, `info` (ranks per node, the
/// run's options) into every SuiteContext. Rank 0 prints one line per suite as it ends; with
/// `live_progress` also a live line for a terminal. Collective over `world`.
std::vector<SuiteOutcome> run_suites(const nlohmann::json& config, Communicator& world, Backend& backend,
                                     Communicator* device_world, const Dataset* dataset,
                                     const std::function<void(const std::vector<SuiteOutcome>&)>& after_each,
                                     SpanRecorder* spans, bool live_progress, const WorldInfo& info);

}  // namespace dtb
