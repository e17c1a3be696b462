// `dtbench run`: reads and validates the config (harness/config.h), sets up the backend, the
// dataset and the report files, runs the suites (harness/run_suites.h) and writes the JSON report
// (harness/report.h) after every suite and, through the termination hook, when the run ends early.
#pragma once
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"

namespace CLI {
class App;  // <CLI/CLI.hpp> only in the files that build or read the options (why: harness/cli_text.h)
}

namespace dtb {

/// dtbench's exit status for bad input (one line on stderr): a bad option, config or file, or
/// a suite that refused its section on every rank.
constexpr int kExitInput = 2;

/// The options of `dtbench run`, as given.
struct RunArgs {
  std::string config = "default";
  std::string suites, data, output_dir, run_id, backend;
  std::string trace;  // Chrome trace JSON path, empty: none
  bool print_config = false;
  bool force = false;  // --force: run even when a suite's memory estimate exceeds 80% of RAM
  std::string progress = "auto";  // --progress auto|on|off
  bool sweep = false;        // --sweep: run the sweep suite only
  std::string sweep_layouts;  // its comma-separated layouts, empty: every layout that fits
  std::vector<std::string> allow_changed;  // --allow-changed KEY (repeatable)
  int ranks_per_node = 0;  // --ranks-per-node N: emulated nodes of N consecutive ranks; 0: the real ones
};

/// Adds the `run` subcommand with its options bound to `args` (which must outlive `app`).
CLI::App* add_run_subcommand(CLI::App& app, RunArgs& args);

/// Runs `dtbench run` over `world` (collective): `sub` is the parsed subcommand, `args` its
/// options. Prints a line per suite and the summary on rank 0; writes <output-dir>/<run id>.json
/// and latest.json. Returns 0 when every suite passed and the report was written, 1 when a check
/// failed, a suite errored or a file could not be written, kExitInput when a suite refused its
/// input. Errors: InputError for an empty option, a bad --ranks-per-node, config, run id,
/// output path or dataset (every rank throws it).
int cmd_run(Communicator& world, const CLI::App& sub, RunArgs args);

}  // namespace dtb
