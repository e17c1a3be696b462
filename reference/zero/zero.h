// ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", Sec. 5) over the DP group, as the ParamStore of a ParallelGpt: where
// the rank's parameters, gradients and AdamW moments live, how gradients are reduced over
// DP and how the optimizer step runs.
//
//   stage 0: every DP rank holds everything; gradients all-reduced (DDP).
//   stage 1: AdamW moments sharded; gradients all-reduced; each rank updates its shard of
//            the parameters, which are then all-gathered.
//   stage 2: gradients sharded too: each unit's gradient is reduce-scattered after every
//            micro-batch's backward through it (DeepSpeed stage 2) into the rank's shard.
//   stage 3: parameters sharded too: a unit's parameters are all-gathered before its
//            forward and its backward, and freed after.
//   offload_optimizer: the fp32 master shard and the moments live in the host tier and the
//            AdamW step runs there on the CPU (ZeRO-Offload, Ren et al. 2021): the gradient
//            shard moved down, the updated parameter shard moved up. Stages 1-3.
//
// Sharding is per unit (ParamUnit: wte, wpe, each layer, the final LayerNorm), as FSDP's
// flat parameters: a unit of n elements is padded to dp * ceil(n / dp) and DP rank d holds
// elements [d s, (d+1) s), s = ceil(n / dp). Gradients and parameters move in buckets of
// whole units of up to reduce_bucket_size / allgather_bucket_size elements (DeepSpeed's
// names and units), and with overlap_comm the reduce-scatters are issued without waiting,
// completed at the end of the backward.
//
// Memory categories (kernels/device.h): param, grad, optimizer_state and master_param for
// the persistent state; comm_buffer for the transient full copies (a stage-3 unit gathered
// for use, a stage-2/3 unit's gradient before its reduce-scatter, bucket buffers).
// In fp32 training AdamW updates the weights themselves: there is no master copy on the
// device; with offload the host's fp32 shard is the master.
//
// Mixed precision (T = bf16 or fp16; Micikevicius et al. 2018, ZeRO paper Sec. 3.1's K = 12):
// parameters and gradients in T (2 + 2 bytes), the fp32 master copy of what the rank updates
// (N at stage 0, its shard S at stages 1-3) and the fp32 moments (4 + 4 + 4 bytes):
// AdamW runs on the master from the T gradient and the parameters are the master rounded to
// T. With offload the master and moments are in the host tier; the T gradient shard moves
// down, is widened to fp32 on the host, and the rounded T parameters move up (ZeRO-Offload).
// Gradients are reduced over DP in T (half the bytes of fp32, one rounding per reduction
// step) or, with communication_data_type "fp32" (DeepSpeed's key), widened to fp32, reduced
// and rounded to T once.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"
#include "kernels/adamw.h"
#include "kernels/half.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/tensor_parallel.h"
#include "reference/zero/zero_config.h"

namespace dtb {

/// ceil(n / dp): a unit's shard per DP rank.
inline size_t zero_shard_size(size_t n, int dp) { return (n + size_t(dp) - 1) / size_t(dp); }

/// The sum of squares, in double, of the n host gradient elements h[i] whose mask[i] is non-zero
/// (a null mask counts every one); a half type is widened and multiplied by `multiplier` in fp32
/// first, as adamw_update_master widens it. ZeroEngine::owned_grad_sq_norm's pass at ZeRO 0-1,
/// and what the step-time calibration times as the trainer's host pass (StepTimeHardware::
/// host_pass).
template <typename T>
double masked_sq_sum(const T* h, const char* mask, size_t n, float multiplier);

/// The persistent state one rank's ZeroEngine holds between steps: what a training
/// checkpoint saves and restores (reference/checkpoint/checkpoint.h; DeepSpeed's per-rank
/// zero_pp_rank_*_optim_states files hold the same). A = acc_t<T>. Sizes: ZeroEngine::
/// state_shape(). Everything else the engine holds (gradients, bucket and gather buffers,
/// the pending unscale/clip factor) is rebuilt within every step.
template <typename T>
struct ZeroState {
  using A = acc_t<T>;
  std::vector<T> params;  // stages 0-2: the full local parameters (num_params()); stage 3: the shard (S)
  std::vector<A> master;  // the fp32 master weights when held (half T: N at stage 0, else S; offload: S); else empty
  std::vector<A> m, v;    // AdamW moments: N at stage 0, S at stages 1-3 (padding included)
  int64_t t = 0;          // AdamW steps taken (the bias correction's t)
};

/// Where each element of a ZeroState sits in the full model: its index in the flat buffer of
/// gpt_param_layout (reference/model/gpt.h), or -1 for a shard's padding. `params` is indexed as
/// ZeroState::params, `moments` as m and v (and master, which when held has their shape). An
/// element held by several ranks (a TP-replicated tensor, a DP replica at stage 0, the tied
/// wte on the first and last stage) appears on each of them. What a layout-independent
/// checkpoint stores beside the state (reference/checkpoint/checkpoint.h), as PyTorch Distributed
/// Checkpoint stores each shard's offsets in its global tensor.
struct ZeroStateIndex {
  std::vector<int64_t> params, moments;
};

/// Element counts of a ZeroState for one engine (0 master: none held).
struct ZeroStateShape {
  size_t params = 0, master = 0, moments = 0;
  bool operator==(const ZeroStateShape&) const = default;
};

template <typename T>
class ZeroEngine final : public ParamStore<T> {
 public:
  using A = acc_t<T>;  // master weights, moments and the scalars: fp32 under mixed precision
  /// Storage for `model`'s units on its device (attached to the model here), sharded over
  /// `dp` (this rank's DP group; must outlive the engine) per `cfg`, with AdamW `hp`. An MoE
  /// model's expert units (ParamUnit::expert) are reduced, sharded and gathered over
  /// `expert_dp` instead, the expert-data-parallel group (Megatron-LM's expert_data_parallel
  /// group; DeepSpeed's expert-data-parallel ZeRO groups), when given (expert_parallel > 1).
  /// Parameters start at 0: load() them. Errors: InputError from validate_zero.
  ZeroEngine(ParallelGpt<T>& model, const ZeroConfig& cfg, Communicator& dp, const AdamWParams& hp,
             Communicator* expert_dp = nullptr);
  ~ZeroEngine() override;
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  // ParamStore
  T* param(int unit) override;
  void release_param(int unit) override;
  T* grad(int unit) override;
  void grad_done(int unit) override;

  const ZeroConfig& config() const { return cfg_; }
  Device& device() const { return device_; }
  Ops<T>& ops() const { return ops_; }
  /// Sets the rank's parameters from num_params() host values (local flat order; each DP
  /// rank passes the same values). Stage 3 keeps its shard of each unit.
  void load(const std::vector<T>& local);
  /// Gradients to 0, at the start of a step.
  void zero_grad();
  /// After the step's last backward: completes pending reduce-scatters (stages 2-3) or
  /// all-reduces the gradients over DP (stages 0-1).
  void finish_gradients();
  /// Whether finish_gradients reduces over DP (default true). false: every rank keeps its own
  /// gradient, for the recipes that reduce later or not at all (reference/training/dp_sync.h: stale
  /// gradients, local steps). Stage 0 only (aborts otherwise).
  void set_dp_reduction(bool on);
  /// The full local gradient on the device (num_params() elements of T), stages 0-1: what
  /// finish_gradients reduces and step() applies (aborts at stages 2-3).
  T* full_grad_data();
  /// Sums the tied wte's gradient (this rank's full copy, or its shard at stages 2-3) with
  /// the same of `peer` in `pp` (a + b on one side, b + a on the other: bitwise equal).
  void add_tied_gradient(Communicator& pp, int peer);
  /// One AdamW step (t counts from 1) on this rank's share, then the parameter all-gather
  /// (stages 1-2); with offload, on the CPU from the host tier.
  void step();
  /// The rank's full local parameters / reduced gradients on the host (num_params()
  /// values): stage 3 all-gathers the parameter shards, stages 2-3 the gradient shards.
  /// Collective over the DP group.
  std::vector<T> full_params();
  std::vector<T> full_grads();
  /// Whether any gradient element this rank holds (all of them at stages 0-1, its shard at
  /// 2-3) is inf or NaN. Local; the caller agrees on it across ranks.
  bool local_nonfinite();
  /// Sum of squares of the reduced gradient elements this rank counts for the global norm:
  /// each element once over the whole grid (TP-replicated tensors on TP rank 0, the tied wte
  /// on the first stage, DP replicas on DP rank 0 at stages 0-1 — an expert's on its
  /// expert-data-parallel rank 0 —, every shard at 2-3). Local,
  /// in double; the caller sums it over the world.
  double owned_grad_sq_norm();
  /// Every gradient element this rank holds *= a (unscaling, clipping). In fp32/fp64 the
  /// stored gradients are multiplied; in a half type the factor is kept in fp32 and applied
  /// as the optimizer widens the gradients (and to owned_grad_sq_norm), since unscaling in
  /// the half type itself would flush a scaled gradient's small values to zero (fp16: below
  /// 2^-24). zero_grad() resets it to 1.
  void scale_grads(A a);
  /// Fault injection for tests: sets element `index` of the gradient this rank holds (the
  /// full local gradient at stages 0-1, the shard at 2-3) to `value`.
  void set_held_grad(size_t index, T value);
  /// DP communication of this engine since the last reset (gradient reductions and
  /// parameter gathers).
  CommStats& comm_stats() { return stats_; }
  /// Elements this rank stores per unit: the shard s_u (stages >= 1) and their sum.
  size_t shard_elements() const { return shard_total_; }
  /// AdamW steps taken (skipped steps do not count).
  int steps_taken() const { return t_; }
  /// The element counts export_state() returns and import_state() needs, for validating a
  /// checkpoint before anything is modified.
  ZeroStateShape state_shape() const;
  /// A host copy of this rank's persistent state (ZeroState): parameters as stored (full
  /// local at stages 0-2, the shard at 3), master weights, moments, t. Local, not
  /// collective; call between steps (not inside a backward: aborts).
  ZeroState<T> export_state();
  /// Replaces this rank's persistent state with `s` (from export_state() of an engine of
  /// the same model, layout, stage, offload and T, e.g. through a checkpoint), so the next
  /// step() is bitwise the exported engine's next step. Sizes must be state_shape()'s
  /// (aborts otherwise: validate first). Local, not collective; between steps.
  void import_state(const ZeroState<T>& s);
  /// Each state element's index in the full model (ZeroStateIndex), from the model's tensors
  /// and this rank's shards. Local. Defined with the state functions in zero_state.cc.
  ZeroStateIndex state_index() const;

 private:
  struct Pending;
  void reduce_bucket();
  void complete(Pending& p);
  void gather_params_into_full();
  T* full_param_ptr(int unit);
  size_t own_count(int unit) const;  // elements of the unit this rank's shard covers
  /// The gradient this rank holds, copied to the host into held_host_ (kept between steps: a new
  /// vector each step cost a fresh zero-filled, page-faulted allocation, about 0.2 ms for 0.5 MB).
  const std::vector<T>& held_grads();
  std::vector<T> held_host_;
  std::vector<char> norm_mask_;      // owned_grad_sq_norm's per-element mask, built at its first call

  ParallelGpt<T>& model_;
  ZeroConfig cfg_;
  Communicator& dp_;
  Communicator* expert_dp_ = nullptr;
  // Unit u's group (expert units: the expert-data-parallel one), this rank's rank in it, its size.
  Communicator& group(size_t u) const { return model_.units()[u].expert && expert_dp_ ? *expert_dp_ : dp_; }
  int grank(size_t u) const { return group(u).rank(); }
  int gsize(size_t u) const { return group(u).size(); }
  AdamWParams hp_;
  Ops<T>& ops_;
  Device& device_;
  int t_ = 0;
  std::vector<size_t> shard_, shard_off_;  // per unit: s_u and its offset in the shard arrays
  size_t shard_total_ = 0;
  Tensor full_param_, full_grad_;          // stages 0-2: N params; stages 0-1: N grads
  Tensor shard_param_, shard_grad_;        // stage 3: S params; stages 2-3: S grads
  Tensor m_, v_;                           // moments (A): N (stage 0) or S, device or host tier
  Tensor master_;                          // half T without offload: A master, N (stage 0) or S
  A grad_multiplier_ = A(1);               // half T: the pending scale_grads factors, in A
  Tensor host_master_, host_grad_;         // offload: S each, host tier (A master, T gradient)
  Tensor host_param_;                      // offload with half T: the rounded S parameters going up
  std::unique_ptr<Ops<T>> host_ops_;       // offload with half T: the CPU's ops for the host-tier step
  bool comm_wide() const { return is_half_v<T> && cfg_.fp32_communication; }
  // Over `g`: all-reduce (stages 0-1) of buf (n), in T or widened to fp32 per comm_wide();
  // counts the bytes.
  void dp_all_reduce(Communicator& g, T* buf, size_t n);
  std::map<int, std::pair<Tensor, int>> gathered_;  // stage 3: unit -> (full copy, uses)
  std::map<int, Tensor> unit_grad_;                 // stages 2-3: unit -> full gradient
  std::vector<int> bucket_;                         // stages 2-3: units waiting to reduce
  size_t bucket_elems_ = 0;
  bool dp_reduction_ = true;  // set_dp_reduction
  std::vector<std::unique_ptr<Pending>> pending_;
  CommStats stats_;
};

extern template class ZeroEngine<float>;
extern template class ZeroEngine<double>;
extern template class ZeroEngine<bf16>;
extern template class ZeroEngine<fp16>;

}  // namespace dtb
