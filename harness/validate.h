// `dtbench validate`: is this cluster fit to train on, and if not, which node is not.
//
// Levels, each including the one before:
//  - quick: the inventory of every rank and node (host, node, CPU model, cores, memory, device,
//    MPI and BLAS versions; on GPUs the device's PCI bus id, UUID and memory, the driver, CUDA
//    runtime and NCCL versions) and its consistency across nodes (no two ranks of a node on one
//    device), checked against --expect before anything expensive runs.
//  - medium: each rank's compute (GEMM FLOP/s, STREAM-triad bandwidth; the ranks of one host one
//    at a time), host<->device copies (cuda backend; skipped with its reason on cpu), each node's
//    rank x rank send/recv matrix and its all-reduce (bus bandwidth and each rank's arrival).
//  - long: every pair's send/recv (round-robin, n - 1 rounds of n / 2 pairs; retested before
//    blamed), each pair against its link class (pairs/links: a slow link is named as a pair and
//    makes no node defective; a rank slow with most partners is a node fault), alpha-beta fits
//    per link class (intra-node, inter-node), groups of two nodes' all-reduce (naming only the
//    nodes the pairs show slow), the world's all-reduce with arrival times, and a few
//    data-parallel training steps of the reference GPT. --pairs adaptive replaces every pair by
//    fault isolation in rounds (isolate.h, check pairs/isolation): groups of nodes measured at
//    once as rings of pairs, only failed groups split, each suspect confirmed with a known-good
//    partner; the rounds and tests are reported beside n(n - 1) / 2.
//  - burnin: the long level looped for --duration seconds, each rank's worst figure judged.
// Silent-data-corruption triage (check sdc/replay; levels long and burnin, or --sdc at any
// level): every rank replays the same few training steps of the reference GPT alone, without
// communication, and hashes its loss, gradient and weights; among ranks of one CPU model and
// BLAS build the majority's hash is the reference, and a rank that computed other bits is named
// with its node (no majority: every rank of the group), as is a rank whose first loss is far
// from a fresh model's ln 256. The train check names odd replicas by the same majority rule,
// not by rank 0's.
// Metrics are judged by rules (a rules file's, or the defaults: the fleet median, and the
// baseline when given); a metric a rule needs and the run lacks fails, as does a figure that is
// NaN, infinite or (a rate) not positive. Hosts sharing one machine (one kernel boot id) take
// turns on it and are counted against its cores. Every step of a check has
// a timeout: a rank that does not arrive is named and the run ends incomplete. Nodes can be
// emulated on one machine (--ranks-per-node N groups consecutive ranks) and one rank's compute
// or transfers, or one pair's transfers, slowed, the rank hung, or one bit of its SDC replay
// flipped (--inject), all for tests only.
//
// Verdicts: each check is pass, warn, fail, skip (with its reason) or not_run; a node is
// accepted when no failed check names it. Exit status: 0 every node accepted (warnings too,
// unless --werror), 1 a node is defective or a check failed, 2 bad usage, 3 incomplete.
//
// The parts live in harness/validate/: inventory.h (level quick), rules.h (metrics, rules,
// baselines), faults.h (--inject), steps.h (a check's steps and timeouts), compute.h,
// pairs.h and collective.h (the probes), links.h (the pair and group verdicts), isolate.h
// (--pairs adaptive), sdc.h (the SDC replay and the majority rule), run.h and levels.h (one
// function per level), verdict.h (the verdict and the report) and command.cc (this command and
// its options).
#pragma once
#include <string>

#include "harness/validate/check.h"
#include "harness/validate/faults.h"
#include "harness/validate/inventory.h"
#include "harness/validate/pairs.h"
#include "harness/validate/rules.h"
#include "kernels/comm/communicator.h"

namespace CLI {
class App;
}

namespace dtb {

/// The options of `dtbench validate` (add_validate_subcommand), checked by cmd_validate.
struct ValidateArgs {
  std::string level = "quick";
  std::string expect;       // "key=value,..." (parse_expectations)
  int ranks_per_node = 0;   // > 0: emulate nodes of this many consecutive ranks
  std::string backend = "cpu";
  std::string output = "results/validate.json";
  bool werror = false;
  double tolerance = 0.3;   // medium: a rank below (1 - tolerance) x the fleet median fails
  std::string inject;       // "RANK:compute:FACTOR", "A-B:comm:FACTOR", "RANK:sdc", ...: tests only (parse_injection)
  std::string make_baseline;  // write a baseline from this run's metrics to this file
  std::string baseline;       // judge this run's metrics against this baseline file too
  std::string rules;          // a rules file (parse_rules) instead of the default rules
  double check_timeout = 300;  // seconds a step of a check may take before its missing ranks are named (exit 3)
  double duration = 600;       // burnin: seconds to loop the long level for
  bool sdc = false;            // the SDC replay (check sdc/replay) at levels quick and medium too
  std::string pairs = "all";   // long: "all" (every pair) or "adaptive" (fault isolation in rounds, isolate.h)
};

/// The command: collective over `world`. Prints the expected duration first, then the checks
/// and the per-node verdicts on rank 0, writes args.output (JSON, kind "validate") and returns
/// the exit status above. Errors: InputError (exit 2) for bad usage.
int cmd_validate(Communicator& world, const ValidateArgs& args);

/// The `validate` subcommand and its options on `app`, parsed into `args` (which must
/// outlive the parse).
CLI::App* add_validate_subcommand(CLI::App& app, ValidateArgs& args);

}  // namespace dtb
