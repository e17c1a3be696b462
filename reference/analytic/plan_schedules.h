// The pipeline schedules and layer splits the planner enumerates for one layout (what
// reference/parallel/pipeline_schedule.h and the reference trainer run: 1F1B, interleaved 1F1B at
// v virtual stages, ZB-H1; an uneven split where pp does not divide L). Not here: pricing
// (reference/analytic/step_time_model.h), the enumeration of sizes (planner.h).
// Legend: p = pp, v virtual stages, m micro-batches per DP rank, L layers.
#pragma once
#include <string>
#include <vector>

#include "reference/analytic/step_time_model.h"

namespace dtb {

/// The most virtual stages the planner tries. Narayanan et al. 2021 (Fig. 12-13, Sec. 3.3)
/// measured interleaving's gain at 2-4 chunks per rank, each step costing v times the pipeline's
/// point-to-point sends; Megatron-LM's GPT-3 175B examples use 2-4 (examples/gpt3). 8 leaves room
/// beyond those while bounding the enumeration (each v is one more simulation of p v m actions).
inline constexpr int kMaxPlanVirtualStages = 8;

/// One schedule of a candidate: its name (pipeline_schedule.h) and virtual stages.
struct ScheduleChoice {
  std::string schedule;
  int virtual_stages = 1;
};

/// The schedules the planner tries for `pp` stages, `m` micro-batches per DP rank and L layers
/// (`even`: pp divides L): "1f1b" always; at pp > 1 "zb-h1" (Qi et al. 2024) unless `full_recompute`
/// (the trainer refuses ZB-H1 with full recompute: its W would need the recomputed forward kept),
/// and "interleaved" at each v in [2, kMaxPlanVirtualStages] with L divisible by pp v (Megatron-LM's
/// even chunks: --num-layers-per-virtual-pipeline-stage) and m a multiple of pp
/// (validate_pipeline, Megatron-LM's micro-batch groups). Pure.
std::vector<ScheduleChoice> plan_schedule_choices(int L, int pp, int m, bool full_recompute);

/// The balancer's split of `in`'s L layers over in.layout.pp stages: balance_stages
/// (reference/analytic/stage_balance.h) over per-part costs priced by the step-time model's own
/// ops on `hw` (the embedding, one transformer layer, the LM head with its loss; each part's
/// forward, whole backward and weight-gradient half), so that the busiest stage's compute is as
/// small as any split makes it. Empty when pp divides L. TP, CP and point-to-point communication
/// are not in the costs (a layer's TP collectives are the same in every stage). Errors:
/// InputError from stage_ops or when pp > L.
std::vector<int> balanced_split(const StepTimeInput& in, const StepTimeHardware& hw);

}  // namespace dtb
