// The JSON report of a run (docs/report.md): Google Benchmark's {context,
// benchmarks[]} shape, so its tools/compare.py reads two dtbench reports, plus `suites`
// and `checks`. Written by rank 0, atomically (temp file + rename), after every suite so
// that what finished is never lost; read back for its summary (`dtbench summary`).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "reference/model/data.h"
#include "suites/suite.h"

namespace dtb {

/// The report format's version: the report schema (harness/report.schema.json, the shell, with
/// each suite's suites/<suite>.schema.json; scripts/validate_report.py --print-schema) describes
/// exactly this one. Bump both together on any incompatible change (the schema's description says which).
inline constexpr int kReportSchemaVersion = 6;

/// How one suite ended. status: "passed" (ran, no check failed: each passed or was not judged),
/// "failed" (a check failed), "error" (threw; `error` holds the message), "skipped".
struct SuiteOutcome {
  std::string name;
  std::string status;
  double duration_s = 0;
  std::string error;
  SuiteResult result;
  /// The in-run calibration measured before and after the suite (suites/calibration.h
  /// calibration_json); null where none was (a non-CPU backend, a suite that threw).
  nlohmann::json calibration = nullptr;
  /// The suite stopped on bad input every rank found alike (AgreedInputError, e.g. a
  /// checkpoint refused at load): status "error", and dtbench exits 2.
  bool refused = false;
  /// Other work on the run's hosts while the suite ran (suites/host_load.h host_load_json);
  /// null where none was measured (the suite threw, or no /proc/stat).
  nlohmann::json host_load = nullptr;
};

/// A suite's status from its checks: "failed" when one failed (judged and not passed), else
/// "passed" — a check that was not judged fails nothing.
std::string suite_status(const SuiteResult& result);

/// The line rank 0 prints as suite `index` of `total` ends: "# [i/n] name: status in T s,
/// P/N checks" with ", K not judged (the machine was busy)" and "; other work on host ..."
/// (suites/host_load.h other_work_line) where there are.
std::string suite_end_line(int index, int total, const SuiteOutcome& s);

/// The report's `context`: date, host, git commit (read on rank 0 only), build and
/// backend, world size, ranks per node, MPI and BLAS versions, the full config, the dataset
/// (path, bytes, sha256). Not collective. Fields follow Google Benchmark's context names
/// where one exists (date, host_name, num_cpus, library_build_type). With
/// emulated_ranks_per_node > 0 (`dtbench run --ranks-per-node`) the context says so; `nodes` is
/// the nodes the node-aware algorithms saw (suites/suite.h node_size).
nlohmann::json make_context(const nlohmann::json& config, const Dataset* dataset,
                            const Communicator& world, int ranks_per_node, const std::string& run_id,
                            Backend& backend, int emulated_ranks_per_node = 0);

/// The context's software versions of the run's backend, from its Backend::device_inventory():
/// {"cuda_version": the inventory's "cuda_runtime_version" ("12.4", cudaRuntimeGetVersion),
/// "nccl_version": its "nccl_version" ("2.21.5", ncclGetVersion)}, each null where the inventory
/// has none (the CPU backend: the run uses no CUDA or NCCL). No errors.
nlohmann::json software_versions(const std::map<std::string, std::string>& inventory);

/// The whole report from a context and the suites run so far.
nlohmann::json make_report(const nlohmann::json& context, const std::vector<SuiteOutcome>& suites);

/// True when no suite failed or errored (so the exit status is 0).
bool report_passed(const std::vector<SuiteOutcome>& suites);

/// One line of the end-of-run summary: a report's suites[] entry.
struct SuiteLine {
  std::string name, status;  // status: passed, failed, error, skipped
  double duration_s = 0;
  int64_t checks_passed = 0, checks_total = 0, checks_not_judged = 0;
  std::optional<std::string> error;  // the report's message, when it has one (status error)
  std::string other_work;            // other_work_line of its host_load; "" when quiet or unknown
};

/// A pure data-parallel training record (`train/gpt/dp:N`): the summary's train line.
struct TrainLine {
  int64_t dp = 1;
  double tokens_per_s = 0, step_ms = 0, comm_fraction = 0;
  double final_loss = 0;  // NaN where the report holds null (not finite)
};

/// What the end-of-run summary shows of a report (print_summary).
struct ReportSummary {
  std::vector<SuiteLine> suites;
  std::vector<TrainLine> train;
  double peak_busbw_GBps = 0, peak_busbw_bytes = 0;  // all_reduce's best record; 0: none
  size_t checks = 0, checks_failed = 0, checks_not_judged = 0;
  /// True when no suite failed or errored (report_passed's rule; `dtbench summary` exits 0).
  bool passed() const;
};

/// The summary of a report (make_report's shape), its structure checked as far as the
/// summary reads it: schema_version == kReportSchemaVersion; context an object; benchmarks,
/// suites and checks lists of objects; each suite's name, status, duration_s,
/// checks_passed + checks_not_judged <= checks_total, data, error and host_load (null, or its
/// hosts' figures); each check's name, passed and verdict (passed, failed or not_judged, agreeing
/// with passed); the fields of the all_reduce and train/gpt/dp records the summary shows.
/// `source` names the report.
/// Errors: InputError "report <source>: <where> <problem>", one line.
ReportSummary summarize_report(const nlohmann::json& report, const std::string& source);

/// A report's text parsed (nesting bounded: parse_json_input) and summarized. Errors:
/// InputError, one line naming `source`: malformed JSON, too deep, or summarize_report's.
ReportSummary read_report(const std::string& text, const std::string& source);

/// The file at `path` (at most 1 GiB) read and summarized; InputError when unreadable.
ReportSummary read_report_file(const std::string& path);

/// The summary `dtbench run` prints at its end and `dtbench summary` prints for a report
/// on disk: one line per suite (errors and other work on its hosts under it), the training
/// and all_reduce headline figures, the checks ("N passed, M failed", and ", K not judged (the
/// machine was busy)" where there are) and the report's path. Names and messages from the report
/// are printed through printable().
std::string format_summary(const ReportSummary& s, const std::string& path);
/// format_summary to stdout.
void print_summary(const ReportSummary& s, const std::string& path);

/// Writes `j` to `path` atomically: a temp file in the same directory, then rename(2).
/// Errors: throws std::runtime_error naming the path when it cannot be written.
void write_json_atomic(const std::string& path, const nlohmann::json& j);

/// When rank 0, which writes the report, has hung or exited: the report on disk at `path`,
/// whose running suite rank 0 marked `unfinished` as the suite began, with that error
/// replaced by `why` (another rank's watchdog line naming rank 0), rewritten atomically at
/// `path` and `latest`. Best effort, on the way out of a failed job: returns false (and
/// writes nothing) when the file is missing or unreadable or holds no such suite.
bool name_in_unfinished_report(const std::string& path, const std::string& latest, const std::string& unfinished,
                               const std::string& why);

/// Whether a suite's error in the report on disk at `path` names rank 0 as failed ("rank 0
/// (pid ...", written by another rank through name_in_unfinished_report). False when the file
/// is missing or unreadable.
bool report_names_rank0(const std::string& path);

}  // namespace dtb
