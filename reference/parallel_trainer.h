// Training the reference GPT on a tp x dp x pp grid (reference/parallel_gpt.h): one step
// runs this rank's pipeline schedule (reference/pipeline_schedule.h: GPipe, 1F1B or
// interleaved 1F1B) over its DP rank's micro-batches, passing activations forward and
// their gradients backward with point-to-point messages, then reduces gradients — SUM over
// the DP group (all-reduce, or reduce-scatter under ZeRO 2-3: reference/zero.h), and the
// tied embedding's two copies summed between the first and the last pipeline stage after
// the last micro-batch's backward (Megatron-LM's embedding group) — and steps AdamW on the
// rank's share of the parameters (ZeroEngine::step). The loss is the global batch's mean, the
// one division by the global token count done in each backward (README.md, numerics
// contract), so every layout computes the single-rank baseline's step.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/comm/communicator.h"
#include "reference/data.h"
#include "reference/parallel_gpt.h"
#include "reference/spans.h"
#include "reference/trainer.h"
#include "reference/zero.h"

namespace dtb {

/// The communicators of one rank's groups (reference/process_grid.h): TP, DP and PP
/// groups, each in its coordinate order, and the whole world. Not owned.
struct ParallelGroups {
  Communicator& world;
  Communicator& tp;
  Communicator& dp;
  Communicator& pp;
};

/// Builds the TP, DP and PP groups of `world` for `layout` by splitting it (collective).
struct OwnedGroups {
  std::unique_ptr<Communicator> tp, dp, pp;
};
OwnedGroups make_parallel_groups(Communicator& world, const ParallelLayout& layout);

/// Computes the gradient of step `step`'s global-batch mean loss into the engine's gradients
/// (zeroed first), reduced over DP and between the tied embedding's copies, and returns the
/// global mean loss (the same on every rank). cfg.micro_batches micro-batches per DP rank,
/// run in layout.schedule's order; DP rank d takes sequences [d g/dp, (d+1) g/dp) of the
/// global batch g, micro-batch j the j-th slice of those. `timing` (optional) gets compute
/// and communication seconds added; `spans` (optional) compute.forward/backward per action,
/// comm.send/recv for pipeline messages, comm.all_reduce for the reductions.
/// Errors: aborts when the batch does not divide (validate_layout first).
template <typename T>
double parallel_compute_gradients(ParallelGpt<T>& model, ZeroEngine<T>& engine, const Dataset& data,
                                  const TrainConfig& cfg, int64_t step, ParallelGroups& groups,
                                  StepTiming* timing = nullptr, SpanRecorder* spans = nullptr);

/// Trains `model` (its engine loaded) for cfg.steps steps: parallel_compute_gradients,
/// then the engine's AdamW step (elementwise, so every replica stays identical).
/// Errors: InputError from validate_layout / validate_train_config.
template <typename T>
TrainRun parallel_train(ParallelGpt<T>& model, ZeroEngine<T>& engine, const Dataset& data, const TrainConfig& cfg,
                        ParallelGroups& groups, SpanRecorder* spans = nullptr);

}  // namespace dtb
