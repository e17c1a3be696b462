// The train suite's checkpoint settings (suites/train_checkpoint.h).
#include "suites/train_checkpoint.h"

#include <filesystem>

#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "suites/suite.h"

namespace dtb::train_suite {

using nlohmann::json;

CheckpointPlan checkpoint_plan_from_json(const json& s) {
  CheckpointPlan p;
  p.dir = s.at("checkpoint_dir").get<std::string>();
  p.every = int(int_in_range(s, "checkpoint_every", "train.checkpoint_every", 0, 1000000));
  p.resume_from = s.at("resume_from").get<std::string>();
  if (p.every > 0 && p.dir.empty())
    throw InputError("train.checkpoint_every = " + std::to_string(p.every) +
                     " needs train.checkpoint_dir (where to save)");
  if (p.resume_from == "latest" && p.dir.empty())
    throw InputError("train.resume_from \"latest\" needs train.checkpoint_dir (where to look)");
  std::error_code ec;
  if (!p.dir.empty() && std::filesystem::exists(p.dir, ec) && !std::filesystem::is_directory(p.dir, ec))
    throw InputError("train.checkpoint_dir: '" + printable(p.dir) + "' is not a directory");
  if (p.every > 0) check_dir_writable(p.dir, "train.checkpoint_dir");  // before anything is measured
  // A fresh run saving where an earlier run's checkpoints are would overwrite them (and its
  // `latest` would then name a mix of the two runs).
  if (p.every > 0 && p.resume_from.empty()) {
    std::string held;
    try {
      held = resolve_resume(p.dir, "latest");
    } catch (const InputError& e) {
      throw InputError("train.checkpoint_dir: " + std::string(e.what()));
    }
    if (!held.empty())
      throw InputError("train.checkpoint_dir: '" + printable(p.dir) + "' holds an earlier run's checkpoints (latest " +
                       printable(held) + "); a fresh run would overwrite them: resume with train.resume_from "
                       "\"latest\", or save into another directory");
  }
  return p;
}

// The step directory the plan resumes from ("" for a fresh run); InputError
// "train.resume_from: ..." when it names none.
std::string resume_step_dir(const CheckpointPlan& p) {
  try {
    return resolve_resume(p.dir, p.resume_from);
  } catch (const InputError& e) {
    throw InputError("train.resume_from: " + std::string(e.what()));
  }
}

// What checkpointing did in a run: its report's data.checkpoint.
json checkpoint_json(const CheckpointActivity& a, const CheckpointPlan& p, int steps) {
  return {{"save_error", a.save_error.empty() ? json(nullptr) : json(a.save_error)},
          {"dir", p.dir},
          {"every", p.every},
          {"resume_from", p.resume_from},
          {"resumed_from", a.resumed_from},
          {"resumed_at_step", a.first_step},
          {"changed_on_resume", a.changed_on_resume},
          {"resharded_from", a.resharded_from},
          {"steps_run", steps - a.first_step},
          {"saved_at_steps", a.saved}};
}

}  // namespace dtb::train_suite
