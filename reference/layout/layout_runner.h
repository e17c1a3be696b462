// The layout runner: the one place where a training run on a tp x dp x pp layout is put
// together — the process groups split from the communicator, the sharded model
// (reference/parallel/parallel_gpt.h), the ZeRO engine (reference/zero/zero.h), the trainer
// (reference/parallel/parallel_trainer.h) and, optionally, training checkpoints (reference/checkpoint/checkpoint.h).
// Not here: the single-rank Gpt trainer (reference/training/trainer.h), config parsing, reporting.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "kernels/op_profile.h"
#include "reference/checkpoint/checkpoint_async.h"
#include "reference/model/data.h"
#include "reference/model/gpt.h"
#include "reference/analytic/memory_model.h"
#include "reference/layout/layout_spec.h"
#include "reference/layout/process_grid.h"
#include "reference/training/spans.h"
#include "reference/training/trainer.h"
#include "reference/zero/zero.h"

namespace dtb {

/// Training checkpoints of a layout run (reference/checkpoint/checkpoint.h): resume from a step
/// directory, save one every `every` steps. The train suite's checkpoint_dir,
/// checkpoint_every and resume_from keys.
struct LayoutCheckpoints {
  std::string dir{};            // where saves go (DIR/step-<k>); "": no saves
  int every = 0;                // save after every `every` steps done; 0: never
  std::string resume_step_dir{};  // a step directory to resume from (resolve_resume's); "": a fresh run
  std::vector<std::string> allowed_changes{};  // recipe keys the resume may change (CheckpointRunInfo)
  /// Save asynchronously (reference/checkpoint/checkpoint_async.h): the state copied to host memory, the
  /// files written in a thread while training goes on, each save committed at the next one or
  /// after the last step. false: each save blocks the step (save_checkpoint).
  bool async = false;
  /// Progress lines ("resumed from ...", "checkpoint ... saved (...)"), called on every rank
  /// (the saved line on rank 0 only); null: none.
  std::function<void(const std::string&)> note{};
};

/// What checkpointing did in a run (with LayoutRunSpec::checkpoints).
struct CheckpointActivity {
  std::string resumed_from;    // the step directory, "" for a fresh run
  /// The recipe keys the resume changed (allowed by LayoutCheckpoints::allowed_changes), each
  /// {"key", "saved", "now"} (recipe_changes); empty otherwise.
  nlohmann::json changed_on_resume = nlohmann::json::array();
  /// The layout the checkpoint was saved on (describe_layout) when it was another and the
  /// resume resharded it (resharded_from); "" otherwise.
  std::string resharded_from;
  int64_t first_step = 0;      // steps taken from the checkpoint = the first step run here
  std::vector<int64_t> saved;  // steps done at each completed save
  std::string save_error;      // the first failed save (every rank agrees); later saves are skipped
  /// This rank's timings of every save begun (CheckpointWriter::timings), in order.
  std::vector<SaveTiming> save_timings;
  double load_s = 0;        // this rank's load_checkpoint on resume, seconds (0: no resume)
  uint64_t load_bytes = 0;  // the rank files this rank read on resume (its own; every one when resharded), bytes
};

/// Probe and fault hooks into a layout run (validate's training probe, tests).
struct LayoutHooks {
  /// Replaces the DP group's communicator (split from the device communicator; with context
  /// parallelism the data-and-context group, over which gradients are reduced) by what it
  /// returns, e.g. a ForwardingCommunicator that times, slows or corrupts the gradient
  /// all-reduce; the ZeRO engine and the trainer reduce over it. Null: the group as split.
  std::function<std::unique_ptr<Communicator>(Communicator& dp)> wrap_dp{};
  /// Called on every rank before each training step s (not before step 0's gradient).
  std::function<void(int64_t step)> before_step{};
  /// Called on every rank after each training step (after a checkpoint's save) with the
  /// steps done and what the run recorded so far (timings.back() is the step's).
  std::function<void(int64_t steps_done, const TrainRun& so_far)> after_step{};
  /// Called on every rank after the last step with this rank's full local parameters
  /// (ZeroEngine::full_params, in ParallelGpt's unit order: its TP / PP share of the model,
  /// all of it at TP = PP = 1), widened to double (exact). Collective at ZeRO 3 (a gather).
  std::function<void(const std::vector<double>& params)> final_params{};
};

/// A backend's compute ops for each storage precision (Backend::ops, bf16_ops, fp16_ops), over
/// the backend's memory. A null pointer means the CPU's (CpuOps<float>, HalfCpuOps<bf16 or
/// fp16>, built by the model), which only a CPU device can use.
struct PrecisionOps {
  Ops<float>* fp32 = nullptr;
  Ops<::dtb::bf16>* bf16 = nullptr;
  Ops<::dtb::fp16>* fp16 = nullptr;
};

/// The ops of `backend` for each precision: &backend->ops(), bf16_ops(), fp16_ops() (on the
/// CPU backend: its CpuOps<float> and null for the half types); all null for a null backend.
PrecisionOps precision_ops(Backend* backend);

/// One layout run. Designated-initialiser friendly: the references are required, the rest
/// has defaults, e.g. run_layout({.model = m, .layout = spec, .train = cfg, .device = dev,
/// .host = world, .data = data}).
///
/// Every per-layout setting is in `layout` and nowhere else: degrees, schedule, virtual stages,
/// layer split, SP, EP, ZeRO stage and offload, recompute, precision, the DP sync recipe and the
/// hierarchical node size. `train` holds the run's other settings (steps, batch, data, AdamW,
/// clipping, loss scaling, p2p overlap).
struct LayoutRunSpec {
  GptConfig model{};
  /// The layout and its settings (reference/layout/layout_spec.h); layout.l.micro_batches is
  /// taken from train.micro_batches. layout.hier_node_ranks: the DP all-reduce, 0 flat, N > 0
  /// hierarchical (kernels/comm/hierarchical_communicator.h) over nodes of N consecutive ranks
  /// of the layout's communicator (node of rank r = r / N), wrapped around the DP group after
  /// hooks->wrap_dp (validate_dp_hierarchical must pass). layout.dp_sync.replicas is the
  /// caller's to set (the layout's dp, for local steps).
  LayoutSpec layout{};
  /// Steps, global batch (sequences per step), micro-batches per DP rank, seq_len, seed,
  /// AdamW, clipping, loss scaling.
  TrainConfig train{};
  Device& device;
  /// The backend's compute ops per precision (precision_ops); the one for layout.precision is
  /// used, and must be non-null on a non-CPU device.
  PrecisionOps ops{};
  /// An MPI communicator of layout.world() ranks: the gathers and the checkpoints' files
  /// (host memory).
  Communicator& host;
  /// The same ranks on the backend (NCCL on a GPU), from which the groups are split; null: host.
  Communicator* device_comm = nullptr;
  const Dataset& data;
  /// Gather the step-0 gradient and the final parameters of the full model to rank 0.
  bool gather = false;
  SpanRecorder* spans = nullptr;  // per-step spans (compute.forward, comm.*, ...); null: none
  const LayoutCheckpoints* checkpoints = nullptr;  // null: none
  const LayoutHooks* hooks = nullptr;              // null: none
  /// Times every compute op of the training steps by family (kernels/op_profile.h: the ops
  /// are wrapped in ProfiledOps; the results are bitwise those without), reset before the
  /// first training step, so step 0's gradient is not in it; null: no profile.
  OpClock* op_clock = nullptr;
  /// Compute seconds per model part over the training steps (ParallelGpt::set_part_times; this
  /// rank's parts), attached after step 0's gradient as op_clock; null: none. Its L is the model's.
  PartTimes* part_times = nullptr;
  /// FP8 runs (layout.fp8): count this rank's quantized values per operand class over the training
  /// steps (LayoutOutcome::fp8_census; step 0's gradient not in it). Quantizes each operand once
  /// more on the host, so off unless asked (the precision suite asks).
  bool fp8_census = false;
  /// Test-only: each training step takes this factor times as long (TrainLoop::step_slowdown,
  /// DTB_INJECT_SLOWDOWN's train_step); 1: none.
  double step_slowdown = 1.0;
};

/// What one run of a training layout produced, on rank 0 of its communicator: per-step
/// global losses, this rank's timings, the full model's step-0 gradient and final
/// parameters gathered from the shards (empty unless `gather`), and the largest difference
/// between copies of a replicated element (ParallelGpt::replica_max_diff) of the step-0
/// gradient and of the final parameters (0: bitwise equal). A run resumed from a checkpoint
/// has the steps before it in losses, loss_scales, grad_norms and skipped (from the
/// checkpoint's history), its own steps alone in timings, and no step-0 gradient.
struct LayoutOutcome {
  std::vector<double> losses;
  std::vector<StepTiming> timings;
  std::vector<double> grad_norms;   // per step: TrainRun::grad_norms (NaN where skipped)
  std::vector<double> loss_scales;  // per step, when loss scaling
  std::vector<int> skipped;
  std::vector<double> grads0, params;
  double dp_comm_bytes = 0;  // this rank's DP gradient/parameter traffic over the run (ZeroEngine), bytes
  double replica_grads0 = 0, replica_params = 0;
  int pp_rank = 0, tp_rank = 0;        // this rank's pipeline stage and TP rank
  double peak_activation_bytes = 0;    // this rank's, over the training steps
  /// This rank's peak bytes per (tier, category) from the model's construction to the end
  /// of training, above what was allocated before (the device's accounting).
  std::array<std::array<double, kNumMemCategories>, kNumTiers> peak_bytes{};
  /// This rank's peak of all categories together per tier (the simultaneous high-water
  /// mark, at most the sum of the per-category peaks), above what was allocated before.
  std::array<double, kNumTiers> peak_total_bytes{};
  CheckpointActivity checkpoints;  // with spec.checkpoints
  /// With spec.op_clock: this rank's seconds and calls per op family (index int(OpFamily))
  /// over the training steps run here; zeros without it.
  std::array<double, kNumOpFamilies> op_seconds{};
  std::array<int64_t, kNumOpFamilies> op_calls{};
  /// An MoE model, per training step run here: this rank's ParallelGpt::moe_counts() of the
  /// step (num_moe_layers x (E + 1)) and its dispatch + combine seconds (forward and backward);
  /// empty for a dense model.
  std::vector<std::vector<double>> moe_counts;
  std::vector<double> moe_all_to_all_s;
  /// FP8's delayed recipe, per training step run here: the median over this rank's FP8 linears of
  /// each operand class's scale after the step's update (x, w, dy: fp8_median_scales, the scales
  /// the next step quantizes with); empty under another recipe or without FP8.
  std::vector<std::array<double, 3>> fp8_scales;
  /// With spec.fp8_census: this rank's counts of quantized values per operand class over the
  /// training steps run here (Fp8Census); zeros otherwise.
  Fp8Census fp8_census;
  /// With spec.gather and FP8's delayed recipe, on every rank of host: every transformer layer's final
  /// scaling state (Fp8Checkpoint: layers 0..L-1, each's amax histories, scales and scale_invs after
  /// the last step's update), each layer's from the first rank of its pipeline stage (TP, DP and CP
  /// rank 0), so that a rank whose state strays from its replicas' shows; history_len 0 otherwise.
  Fp8Checkpoint fp8_state;
};

/// The one place a training run's per-step record becomes a LayoutOutcome's, so that no training
/// path (run_layout, the train suite's plain data-parallel path over reference/training/trainer.h's
/// train()) drops a field: out.losses, grad_norms, loss_scales and skipped are `before`'s steps
/// (the history a resume took from its checkpoint; empty for a fresh run) followed by `run`'s,
/// out.timings `run`'s alone (the steps run here). Then checks what every report relies on: one
/// loss and one global gradient norm per step of cfg.steps (a norm NaN where undefined: a step
/// skipped on an inf or NaN gradient, a stale-gradient step before the first update, a resumed
/// step whose checkpoint did not record it), one loss scale and skip flag per step with
/// cfg.loss_scaler.enabled and none without, one timing per step run here. A record that breaks
/// it is a bug of the trainer: DTB_CHECK aborts naming the field and the counts.
void record_steps(LayoutOutcome& out, TrainHistory before, const TrainRun& run, const TrainConfig& cfg);

/// Trains spec.model on spec.layout (its precision, ZeRO, recompute, DP sync recipe): step 0's
/// gradient first (unless resuming), then the training steps, saving checkpoints as
/// spec.checkpoints says. Collective over spec.host. The device's peaks are reset before
/// the model is built, so peak_activation_bytes is the stored activations' high-water mark
/// under the schedule (category activation: GPipe holds m micro-batches, 1F1B at most
/// p - stage). Used by every suite that trains a layout (train, conformance, sweep,
/// precision, recompute, offload, overlap, memory), by the oracle's half-precision
/// references (suites/oracle.h) and by validate's training probe (harness/validate_train.h).
/// Errors: AgreedInputError, before any collective, with the first of the layout validator's
/// refusals of the run (reference/layout/layout_validate.h layout_refusals: the layout, ZeRO,
/// zb-h1 with full recompute, an MoE model's limits, the DP sync recipe and its layout,
/// checkpoints with a non-synchronous layout.dp_sync, the hierarchical all-reduce);
/// "precision <p>: the <backend> backend has no <p> ops" for bf16 / fp16 on a non-CPU device
/// whose ops for it are null, and from a resume (load_checkpoint's, a history that
/// does not hold the checkpoint's steps, a checkpoint that leaves no step to run), the same
/// on every rank. Stale gradients and local steps run through parallel_train's
/// DpSyncStepper (step 0's gradient, grads0, stays the synchronous one); their DP bytes are in
/// dp_comm_bytes. A failed save is not an error: it is recorded (checkpoints.save_error)
/// and training goes on without saving.
LayoutOutcome run_layout(const LayoutRunSpec& spec);

/// Refuses a hierarchical DP all-reduce over nodes of `node_ranks` consecutive ranks that cannot
/// work or would change nothing, with an InputError naming the numbers: node_ranks < 1; nodes not
/// dividing the layout's ranks (tp x dp x pp); the layout on one node (nothing crosses nodes);
/// data_parallel 1 (no DP all-reduce); ZeRO stage 2-3 (gradients are reduce-scattered, not
/// all-reduced); a DP group on one node, or whose ranks are not spread evenly over its nodes
/// (e.g. PP2xDP2 over nodes of 2: each DP group is one node). A pure function of its arguments: every rank decides alike.
void validate_dp_hierarchical(const ParallelLayout& l, int zero_stage, int node_ranks);

}  // namespace dtb
