// Data-parallel training of the reference GPT with gradient accumulation over
// micro-batches (docs/numerics.md): the loss is the mean over every token of the
// global batch, so each micro-batch's backward is scaled by 1 / (global tokens) once and
// the DP gradient all-reduce is a plain SUM — never an average by a guessed world size.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"
#include "kernels/adamw.h"
#include "reference/model/data.h"
#include "reference/model/gpt.h"
#include "reference/training/loss_scaler.h"
#include "reference/analytic/memory_model.h"
#include "reference/training/spans.h"

namespace dtb {

/// How the data-parallel replicas keep in step (docs/comm-efficiency.md): synchronously (every
/// field at its default: each step applies the step's all-reduced gradient), with stale
/// gradients, or with local steps. Both non-synchronous recipes are defined over DP replicas
/// alone (tp = pp = 1, ZeRO stage 0); the numerics contract compares them with one rank running
/// the same recipe in sequence (reference/training/trainer.h train), not with synchronous training.
struct DpSync {
  /// Stale-gradient DP, k >= 0: step t applies the all-reduced gradient of step t - k (none for
  /// t < k) while step t's reduction runs in the background. 0: synchronous.
  int staleness = 0;
  /// DC-ASGD's delay compensation (Zheng et al. 2017, eq. 10), lambda >= 0: the applied gradient
  /// g_{t-k} becomes g + lambda g (.) g (.) (w_t - w_{t-k}). 0: none. Only with staleness >= 1.
  double delay_compensation = 0.0;
  /// DiLoCo (Douillard et al. 2023, Algorithm 1), H >= 0: each DP replica takes H inner AdamW
  /// steps on its own share of each global batch, then one outer step on the replicas' averaged
  /// parameter change. 0: none (every step synchronous).
  int local_steps = 0;
  double outer_lr = 0.7;        // DiLoCo's outer SGD learning rate (the paper's 0.7)
  double outer_momentum = 0.9;  // its Nesterov momentum (the paper's 0.9)
  /// DiLoCo's R, the number of replicas (set by the caller to the layout's DP size; the
  /// single-rank reference simulates R replicas in turn, the parallel trainer refuses an R
  /// other than its DP size). Unused by the other recipes.
  int replicas = 1;
  bool synchronous() const { return staleness == 0 && local_steps == 0; }
  bool operator==(const DpSync&) const = default;
};

/// One training run's settings apart from its layout: steps, the global batch (sequences per
/// step over all DP ranks) split into micro-batches per rank, the sequence length, the data
/// seed, AdamW, clipping, loss scaling and the pipeline sends' overlap. The precision recipe
/// and the DP sync recipe are the layout's (reference/layout/layout_spec.h LayoutSpec::precision
/// and dp_sync); the single-rank trainer takes its DpSync as an argument (train).
struct TrainConfig {
  int steps = 10;
  int global_batch = 8;   // sequences per step, over all DP ranks
  int micro_batches = 1;  // per DP rank and step
  int seq_len = 64;       // Tn, <= model T
  uint64_t seed = 1234;   // data order (the weights use the same seed, see Gpt::init)
  AdamWParams adamw;
  /// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_): when > 0, every
  /// gradient is multiplied by min(1, grad_clip / (||g|| + 1e-6)) before the step.
  double grad_clip = 0.0;
  /// Dynamic loss scaling (reference/training/loss_scaler.h); the sharded trainer only.
  LossScalerConfig loss_scaler;
  /// Pipeline sends (Megatron-LM's --overlap-p2p-communication; the article's [docs/claims.md#the-article] §5.2): true posts
  /// each activation or gradient send and computes on, the sends waited for at the step's end;
  /// false waits for each send before the next compute, the next action's receive posted first
  /// (Megatron-LM's non-overlapped send_forward_recv_backward pairing; the blocking baseline;
  /// not with schedule interleaved, refused). Values are the same either way.
  bool overlap_p2p_comm = true;
};

/// Throws InputError when the batch does not divide: global_batch must be a multiple of
/// dp * micro_batches, seq_len in [1, model T].
void validate_train_config(const TrainConfig& cfg, const GptConfig& model, int dp);

/// Throws InputError, naming the key and value ("<path>.staleness = -1 ..."), when `sync` is
/// not a recipe for a run of `cfg` in `precision`: staleness or local_steps negative, both set,
/// delay_compensation negative or without staleness, outer_lr <= 0, outer_momentum outside
/// [0, 1), replicas < 1, cfg.steps not a multiple of local_steps, cfg.global_batch not a
/// multiple of replicas x cfg.micro_batches (DiLoCo), and a non-synchronous recipe with loss
/// scaling (cfg.loss_scaler) or in fp16 (docs/comm-efficiency.md).
void validate_dp_sync(const DpSync& sync, Precision precision, const TrainConfig& cfg, const std::string& path);

/// The sum over `comm` of a host double `x` (one per rank), through a one-element buffer in
/// `device`'s memory when that is not the host's (NCCL reduces device buffers only).
/// Collective over `comm`; a failed collective aborts through the error sink.
template <typename T>
double all_reduce_host_scalar(Communicator& comm, Device& device, Ops<T>& ops, double x);

/// Time of one step on this rank, in seconds.
struct StepTiming {
  double step_s = 0;     // wall time of the whole step
  double compute_s = 0;  // batch assembly + forward + backward + optimizer
  double comm_s = 0;     // gradient and loss all-reduce
  double p2p_bytes = 0;  // bytes this rank sent point to point (pipeline activations and their gradients)
};

/// Computes the gradient of the global-batch mean loss at `step` into model.grads() (zeroed
/// first) on every DP rank: this rank's global_batch/dp sequences in `micro_batches`
/// micro-batches, each backward scaled by 1/(global_batch*seq_len), then one SUM
/// all-reduce of the gradients over `dp`. Returns the global mean loss (same on all
/// ranks). `timing` (optional) gets compute and comm seconds added. `spans` (optional) gets
/// compute.forward and compute.backward per micro-batch and one comm.all_reduce (gradients
/// and loss) for `step`, the device synchronised before each span ends. Aborts when
/// global_batch is not a multiple of dp.size() * micro_batches (validate_train_config first).
template <typename T>
double compute_gradients(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, int64_t step,
                         Communicator& dp, StepTiming* timing = nullptr, SpanRecorder* spans = nullptr);

/// AdamW state (m, v; category optimizer_state, zeroed) for n parameters on `device`,
/// stepped with the backend's `ops` (torch.optim.AdamW semantics, kernels/cpu/ops.h).
template <typename T>
class AdamW {
 public:
  AdamW(size_t n, Device& device, Ops<T>& ops, const AdamWParams& hp);
  /// One step (t counts from 1 internally) on params from grads.
  void step(T* params, const T* grads);
  int t() const { return t_; }

 private:
  Tensor m_, v_;
  Ops<T>& ops_;
  AdamWParams hp_;
  size_t n_;
  int t_ = 0;
};

struct TrainRun {
  std::vector<double> losses;       // global mean loss per step
  std::vector<StepTiming> timings;  // this rank's timings per step
  /// The global L2 norm of the step's gradient per step, before clipping and after unscaling
  /// (Megatron-LM's grad_norm, DeepSpeed's get_global_grad_norm), every element counted once;
  /// NaN for a step skipped on an inf or NaN gradient (the norm is undefined there).
  std::vector<double> grad_norms;
  std::vector<double> loss_scales;  // the loss scale used at each step, when loss scaling
  std::vector<int> skipped;         // 1 where the step was skipped (inf or NaN gradient)
};

/// PyTorch's clip_grad_norm_ coefficient for a global gradient norm: min(1, max_norm /
/// (norm + 1e-6)).
inline double clip_coefficient(double norm, double max_norm) { return std::min(1.0, max_norm / (norm + 1e-6)); }

/// Trains `model` (already initialised) for cfg.steps steps with DP over `dp`. With
/// `sync` non-synchronous this is the sequential reference of the recipe
/// (docs/comm-efficiency.md): stale gradients (staleness k) keep a queue of the step's
/// gradients (and, with delay compensation, of the weights they were taken at) and apply the one
/// of step t - k at step t (no update for t < k, grad_norms NaN there); local steps (DiLoCo)
/// need `dp` of size 1 and simulate sync.replicas replicas in turn, each with its own
/// weights and AdamW state on its share of each global batch, and an outer Nesterov step on
/// their average every local_steps steps (losses: the mean of the replicas' local losses;
/// grad_norms: sqrt of the mean of their squared norms). Synchronous: per step
/// compute_gradients, the global gradient norm (TrainRun::grad_norms, every step; clipping by
/// it when cfg.grad_clip > 0), then AdamW on every rank (so DP replicas stay identical). `spans`
/// (optional) gets compute_gradients' spans, compute.optimizer and each step's window
/// (steps 0 .. cfg.steps-1, idle filled). `step_slowdown` is test-only (the regression gate's
/// power measurement, kernels/slowdown.h): each step does extra CPU work (extra_cpu_seconds:
/// (step_slowdown - 1) times the smaller of its CPU time and the fastest step's time) before its
/// timing ends; 1: none.
/// Errors: InputError from validate_train_config when the batch does not divide, from
/// validate_dp_sync (in fp32: the model computes in T), or for local steps on more than one rank.
template <typename T>
TrainRun train(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, const DpSync& sync, Communicator& dp,
               SpanRecorder* spans = nullptr, double step_slowdown = 1.0);

}  // namespace dtb
