// The levels of `dtbench validate`, one function each, composing the probes: quick (the
// inventory's checks), medium (each rank's compute and copies, each node's pairs and
// all-reduce), long (every pair, groups of nodes, the world's all-reduce, training steps) and
// burnin (the measuring levels looped). Each records into the ValidateRun (run.h).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/validate/collective.h"
#include "harness/validate/run.h"

namespace dtb {

/// Level quick: the consistency checks over the gathered inventories and the expectations,
/// into run.checks. Pure (the inventory was gathered when the run was built).
void quick_level(ValidateRun& run, const std::map<std::string, std::string>& expect);

/// Level medium, one pass: compute, copy, node/sendrecv, node/allreduce into run.pass.
/// Collective over the world. A step that times out throws CheckTimeout on rank 0.
void medium_level(ValidateRun& run);

/// Level long, one pass (after medium_level): pairs, groups/allreduce, world/allreduce, train
/// into run.pass. Collective over the world.
void long_level(ValidateRun& run);

/// The measuring levels of run.args.level (medium, long; burnin: long looped for
/// args.duration seconds) and the SDC replay (sdc.h; with the long level, or --sdc), each pass
/// folded into run.checks and run.metrics: each rank's worst figure of every pass, each check's
/// worst outcome. Collective over the world; nothing for level quick without --sdc.
void burnin_level(ValidateRun& run);

/// The checks the measuring levels run, in order (the report lists the ones after a timed-out
/// check as not_run).
std::vector<std::string> planned_checks(const ValidateArgs& args);

/// An all-reduce probe on `comm`, one communicator per group of ranks (a node, a group of
/// nodes; group_of(rank) names it): the groups sharing a machine (a host, or hosts of one
/// kernel: machine_of_rank) take turns, groups on different machines run at once; a step of
/// `check` between turns. Null `comm`: this rank only takes the
/// turns (its group has no collective to measure). Collective over the world.
CollectiveProbe probe_in_turns(ValidateRun& run, Communicator* comm, const std::string& check,
                               const std::function<int(int)>& group_of);

}  // namespace dtb
