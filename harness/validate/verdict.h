// The verdict and the report of `dtbench validate`: per node accepted or defective from the
// checks that name it, the exit status, the JSON report (kind "validate") and the lines on
// stdout; the incomplete report of a run that ended early; the input files (--baseline,
// --rules, output paths) read or refused up front; the baseline a run writes.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/validate.h"
#include "harness/validate/check.h"
#include "harness/validate/rules.h"
#include "kernels/comm/communicator.h"

namespace dtb {

/// What the report holds beside the inventory and the checks.
struct ReportExtra {
  nlohmann::json metrics = nlohmann::json::object();  // every metric measured: unit, direction, per-rank values
  bool incomplete = false;
  std::vector<std::string> levels_run;
  nlohmann::json rules = nlohmann::json::array();
  int loops = 1;
};

/// Decides every node's verdict from `checks`, prints the checks and the verdicts, writes
/// a.output and returns the exit status: 3 incomplete, 1 a node defective or a check about the
/// whole run failed, else 0. On rank 0 only. Errors: InputError ("--output: ...") when the
/// report cannot be written.
int write_verdict(const ValidateArgs& a, const std::vector<nlohmann::json>& inv, const std::vector<ValidateCheck>& checks,
                  std::chrono::steady_clock::time_point t0, const ReportExtra& extra);

/// The report's "metrics" entry of `m` (unit, direction, per-rank values; `with_extra`: its
/// extra values too).
nlohmann::json metric_json(const Metric& m, bool with_extra);

/// The report's "rules" entries.
nlohmann::json rules_json(const std::vector<ValidateRule>& rules);

/// Reads a JSON file for --baseline or --rules on rank 0 (the other ranks may have no shared
/// filesystem) and parses it on every rank. Collective. Errors: InputError on every rank,
/// naming the option and file (a directory, missing, not a regular file, unreadable,
/// malformed).
nlohmann::json read_json_file(Communicator& world, const std::string& option, const std::string& path);

/// The --baseline file, read and checked: kind "validate-baseline", a non-empty "metrics" of
/// known metrics with positive values in dtbench's units. Collective. Errors: InputError.
nlohmann::json read_baseline(Communicator& world, const std::string& path);

/// Refuses, before anything is measured, an output path dtbench could not write or would
/// destroy: an existing directory, symlink, FIFO or device (the report is written to a
/// temporary file renamed over the path), or a parent that is not a directory. Checked on rank
/// 0, which writes; InputError on every rank. Collective.
void check_output_path(Communicator& world, const std::string& option, const std::string& path);

/// Writes the baseline of an accepted run (`code` 0) to a.make_baseline: each metric's
/// baseline_value (those judged by absolute bounds left out). On rank 0. Returns the exit
/// status: `code`, or 2 when the file cannot be written (one line on stderr).
int write_baseline(const ValidateArgs& a, const std::vector<nlohmann::json>& inv,
                   const std::map<std::string, Metric>& metrics, int code);

}  // namespace dtb
