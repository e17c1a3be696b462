// Training the reference GPT on a tp x dp x pp grid (reference/parallel/parallel_gpt.h): one step
// runs this rank's pipeline schedule (reference/parallel/pipeline_schedule.h: GPipe, 1F1B or
// interleaved 1F1B) over its DP rank's micro-batches, passing activations forward and
// their gradients backward with point-to-point messages, then reduces gradients — SUM over
// the DP group (all-reduce, or reduce-scatter under ZeRO 2-3: reference/zero/zero.h), and the
// tied embedding's two copies summed between the first and the last pipeline stage after
// the last micro-batch's backward (Megatron-LM's embedding group) — and steps AdamW on the
// rank's share of the parameters (ZeroEngine::step). The loss is the global batch's mean, the
// one division by the global token count done in each backward (docs/numerics.md),
// so every layout computes the single-rank baseline's step.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/comm/communicator.h"
#include "reference/model/data.h"
#include "reference/training/loss_scaler.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/layout/process_grid.h"
#include "reference/training/spans.h"
#include "reference/training/trainer.h"
#include "reference/zero/zero.h"

namespace dtb {

/// Computes the gradient of step `step`'s global-batch mean loss into the engine's gradients
/// (zeroed first), reduced over DP and between the tied embedding's copies, and returns the
/// global mean loss (the same on every rank). cfg.micro_batches micro-batches per DP rank,
/// run in layout.schedule's order; DP rank d takes sequences [d g/dp, (d+1) g/dp) of the
/// global batch g, micro-batch j the j-th slice of those. `timing` (optional) gets compute
/// and communication seconds added; `spans` (optional) compute.forward/backward per action,
/// comm.send/recv for pipeline messages, comm.all_reduce for the reductions.
/// Errors: aborts when the batch does not divide (validate_layout first).
/// `loss_scale` multiplies the loss before backward (dynamic loss scaling: the gradients come
/// out scaled by it).
template <typename T>
double parallel_compute_gradients(ParallelGpt<T>& model, ZeroEngine<T>& engine, const Dataset& data,
                                  const TrainConfig& cfg, int64_t step, ParallelGroups& groups,
                                  StepTiming* timing = nullptr, SpanRecorder* spans = nullptr,
                                  double loss_scale = 1.0);

/// What the optimizer step did.
struct StepOutcome {
  bool skipped = false;   // an inf or NaN gradient on some rank: no update anywhere
  /// The global L2 norm of the gradient after unscaling, before clipping (each element
  /// counted once over TP, PP and DP shards), every step; NaN when skipped.
  double grad_norm = 0;
  double loss_scale = 1;  // the scale the step's gradients carried
};

/// The optimizer step after parallel_compute_gradients (loss scaled by scaler->scale() when
/// given): every rank agrees whether any rank holds an inf or NaN gradient (an all-reduce MAX
/// over the world, so no rank decides alone and none waits for a collective the others
/// skip); if so every rank skips the update and the scaler backs off. Otherwise the
/// gradients are unscaled, their global norm is computed (each element counted once over
/// TP, PP and DP shards; one scalar all-reduce over the world), they are clipped by it
/// (cfg.grad_clip > 0) and the engine steps; the scaler counts a good
/// step. Collective over groups.world.
template <typename T>
StepOutcome parallel_optimizer_step(ZeroEngine<T>& engine, const TrainConfig& cfg, LossScaler* scaler,
                                    ParallelGroups& groups);

/// Where a parallel_train run starts and what it calls between steps: what resuming from a
/// training checkpoint (reference/checkpoint/checkpoint.h) and saving one every N steps need.
struct TrainLoop {
  /// The first step to run (the data position: step s's batch is a pure function of the
  /// dataset, seed and s); steps [first_step, cfg.steps) run. 0: a fresh run.
  int64_t first_step = 0;
  /// The run's loss scaler (e.g. restored from a checkpoint), updated in place; null: a
  /// fresh one from cfg.loss_scaler.
  LossScaler* scaler = nullptr;
  /// Called on every rank before each step s (e.g. a probe's clock). Null: nothing.
  std::function<void(int64_t step)> before_step;
  /// Called on every rank after each step's optimizer step with the number of steps done
  /// (s + 1), the scaler and what the run recorded so far (its steps only); e.g. saves a
  /// checkpoint (collective: every rank calls it at the same steps). Null: nothing.
  std::function<void(int64_t steps_done, const LossScaler& scaler, const TrainRun& so_far)> after_step;
  /// Test-only (the regression gate's power measurement, kernels/slowdown.h): each step does
  /// extra CPU work (kernels/slowdown.h extra_cpu_seconds: (step_slowdown - 1) times the
  /// smaller of its CPU time and the fastest step's time) before its timing ends. 1: none.
  double step_slowdown = 1.0;
};

/// Trains `model` (its engine loaded) for steps [loop.first_step, cfg.steps):
/// parallel_compute_gradients, then the engine's AdamW step (elementwise, so every replica
/// stays identical), then loop.after_step. The TrainRun holds the steps run, in order
/// (losses[i] is step first_step + i's). With a non-synchronous `sync` (stale gradients,
/// local steps) the update is reference/training/dp_sync.h's DpSyncStepper instead of
/// parallel_optimizer_step (grad_norms NaN where a stale recipe has nothing to apply yet).
/// Errors: InputError from validate_layout / validate_train_config, or when first_step is
/// outside [0, cfg.steps]; from validate_dp_sync / validate_dp_sync_layout. A resume (first_step
/// > 0) under a non-synchronous recipe aborts (DTB_CHECK): the layout's validator refuses it first.
template <typename T>
TrainRun parallel_train(ParallelGpt<T>& model, ZeroEngine<T>& engine, const Dataset& data, const TrainConfig& cfg,
                        const DpSync& sync, ParallelGroups& groups, SpanRecorder* spans = nullptr,
                        const TrainLoop& loop = {});

}  // namespace dtb
