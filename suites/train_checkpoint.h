// The train suite's checkpoint settings (suites/train.cc): checkpoint_dir, checkpoint_every and
// resume_from of its section, checked before anything runs, and what checkpointing did in a run
// as its report says it. The checkpoints themselves: reference/checkpoint/checkpoint.h.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "reference/layout/layout_runner.h"

namespace dtb::train_suite {

/// Training checkpoints (reference/checkpoint/checkpoint.h): the section's checkpoint_dir,
/// checkpoint_every and resume_from. With any of them the layout runs on the sharded
/// trainer (ZeroEngine holds the state a checkpoint saves), also for plain DP.
struct CheckpointPlan {
  std::string dir;          // "" : none
  int every = 0;            // save after every `every` steps; 0: never
  std::string resume_from;  // "": a fresh run; "latest": dir's latest checkpoint (fresh when none); a step directory
  bool on() const { return !dir.empty() || !resume_from.empty(); }
};

/// The plan of the train section `s`. Errors: InputError "train.checkpoint_every ..." /
/// "train.resume_from ..." / "train.checkpoint_dir ...": an interval without a directory,
/// "latest" without one, a directory that is a file, not writable, or that holds an earlier
/// run's checkpoints which a fresh run saving there would overwrite.
CheckpointPlan checkpoint_plan_from_json(const nlohmann::json& s);

/// The step directory the plan resumes from ("" for a fresh run). Errors: InputError
/// "train.resume_from: ..." when it names none.
std::string resume_step_dir(const CheckpointPlan& p);

/// What checkpointing did in a run of `steps` steps: its report's data.checkpoint.
nlohmann::json checkpoint_json(const CheckpointActivity& a, const CheckpointPlan& p, int steps);

}  // namespace dtb::train_suite
