// The JSON report of a run (README.md, "The report"): Google Benchmark's {context,
// benchmarks[]} shape, so its tools/compare.py reads two dtbench reports, plus `suites`
// and `checks`. Written by rank 0, atomically (temp file + rename), after every suite so
// that what finished is never lost.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "reference/data.h"
#include "suites/suite.h"

namespace dtb {

/// The report format's version: harness/report.schema.json describes exactly this one. Bump
/// both together on any incompatible change (the schema's description says which).
inline constexpr int kReportSchemaVersion = 2;

/// How one suite ended. status: "passed" (ran, every check passed), "failed" (a check
/// failed), "error" (threw; `error` holds the message), "skipped".
struct SuiteOutcome {
  std::string name;
  std::string status;
  double duration_s = 0;
  std::string error;
  SuiteResult result;
};

/// The report's `context`: date, host, git commit (read on rank 0 only), build and
/// backend, world size, ranks per node, MPI and BLAS versions, the full config, the dataset
/// (path, bytes, sha256). Not collective. Fields follow Google Benchmark's context names
/// where one exists (date, host_name, num_cpus, library_build_type).
nlohmann::json make_context(const nlohmann::json& config, const Dataset* dataset,
                            const Communicator& world, int ranks_per_node, const std::string& run_id,
                            Backend& backend);

/// The whole report from a context and the suites run so far.
nlohmann::json make_report(const nlohmann::json& context, const std::vector<SuiteOutcome>& suites);

/// True when no suite failed or errored (so the exit status is 0).
bool report_passed(const std::vector<SuiteOutcome>& suites);

/// Writes `j` to `path` atomically: a temp file in the same directory, then rename(2).
/// Errors: throws std::runtime_error naming the path when it cannot be written.
void write_json_atomic(const std::string& path, const nlohmann::json& j);

}  // namespace dtb
