// The planner's schedules and the balancer's split (reference/analytic/plan_schedules.h).
#include "reference/analytic/plan_schedules.h"

#include <algorithm>

#include "kernels/error.h"
#include "reference/analytic/stage_balance.h"

namespace dtb {

std::vector<ScheduleChoice> plan_schedule_choices(int L, int pp, int m, bool full_recompute) {
  std::vector<ScheduleChoice> out{{"1f1b", 1}};
  if (pp <= 1) return out;
  if (!full_recompute) out.push_back({"zb-h1", 1});
  if (m % pp == 0)
    for (int v = 2; v <= kMaxPlanVirtualStages && pp * v <= L; ++v)
      if (L % (pp * v) == 0) out.push_back({"interleaved", v});
  return out;
}

std::vector<int> balanced_split(const StepTimeInput& in, const StepTimeHardware& hw) {
  const int L = in.model.L, p = in.layout.pp;
  if (p > L) throw InputError("pipeline split: " + std::to_string(p) + " stages for " + std::to_string(L) + " layers");
  if (L % p == 0) return {};
  // Three stages of one layer each: stage 0 is the embedding and a layer, stage 1 a layer, stage 2
  // a layer and the head; the parts are the differences.
  StepTimeInput one = in;
  one.model.L = 3;
  one.layout.pp = 3, one.layout.virtual_stages = 1, one.layout.schedule = "1f1b";
  one.layout.pipeline_layers.clear();
  one.layout.dp = 1;
  one.micro_batches = 1;
  one.global_batch = in.global_batch / (in.layout.dp * in.micro_batches);
  const Precision pr = in.precision;
  double f[3], b[3], w[3];
  for (int s = 0; s < 3; ++s) {
    f[s] = ops_seconds(stage_ops(one, s, true), hw, pr, in.attention);
    const std::vector<StepOp> bops = stage_ops(one, s, false);
    b[s] = ops_seconds(bops, hw, pr, in.attention), w[s] = weight_grad_seconds(bops, hw, pr);
  }
  PartCosts c;
  auto part = [&](double fv, double bv, double wv) {
    c.forward.push_back(std::max(0.0, fv)), c.backward.push_back(std::max(0.0, bv)), c.weight.push_back(std::max(0.0, wv));
  };
  part(f[0] - f[1], b[0] - b[1], w[0] - w[1]);
  for (int l = 0; l < L; ++l) part(f[1], b[1], w[1]);
  part(f[2] - f[1], b[2] - b[1], w[2] - w[1]);
  return balance_stages(c, p);
}

}  // namespace dtb
