// `dtbench count`: fixed work of the CPU paths, region by region, for the regression gate's
// counting mode (docs/ci.md): run under `valgrind --tool=callgrind --collect-atstart=no`, each
// region's instructions and simulated cache misses are collected alone (callgrind's client
// requests: zero, collect on, work, collect off, dump under the region's name), so a count
// does not depend on the machine's load. Not a timing: outside valgrind it prints the regions
// with their wall time, which only says the work ran. scripts/dtbreport/gate/count.py reads
// the dumps.
#pragma once
#include <string>

#include "kernels/comm/communicator.h"

namespace CLI {
class App;  // <CLI/CLI.hpp> only in the files that build or read the options (why: harness/cli_text.h)
}

namespace dtb {

/// The options of `dtbench count`.
struct CountArgs {
  std::string config = "smoke";  // whose model, batch and data the train-step regions use
  int reps = 20;                 // repetitions per region (the counts are divided by it)
  std::string only;              // a substring: only the regions whose name holds it
  bool list = false;             // print the region names and exit
};

/// Adds the `count` subcommand with its options bound to `args` (which must outlive `app`).
CLI::App* add_count_subcommand(CLI::App& app, CountArgs& args);

/// Runs the regions on this rank alone (a world of one rank; refused on more) with one BLAS
/// thread (callgrind collects the calling thread's work), prints one JSON
/// object to stdout: {"count_version", "config", "reps", "injected_slowdown", "regions": [{"name",
/// "reps", "runs", "seconds"}]}, where runs is how many repetitions ran (reps, or more where
/// DTB_INJECT_SLOWDOWN's gemm or train_step factor repeats the region's own work: runs =
/// round(factor x reps), so that the count per repetition grows by the factor) and seconds
/// the region's wall time. Returns 0. Errors: InputError for a world of more than one rank,
/// reps outside [1, 1000], an unknown config, a filter no region matches, a bad
/// DTB_INJECT_SLOWDOWN.
int cmd_count(Communicator& world, const CountArgs& args);

}  // namespace dtb
