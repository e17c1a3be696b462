// Data parallelism without a gradient all-reduce before every update (docs/comm-efficiency.md):
// stale gradients (step t applies the all-reduced gradient of step t - k, its reduction in
// flight meanwhile) with DC-ASGD's delay compensation, and DiLoCo's local steps (each replica
// trains alone for H steps, then one outer step on the replicas' average). This is the
// parallel trainer's update for them, over the DP group at ZeRO stage 0 with tp = pp = 1; the
// sequential references are reference/training/trainer.cc's train(). Not here: synchronous DP.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "reference/parallel/parallel_trainer.h"
#include "reference/layout/process_grid.h"
#include "reference/training/trainer.h"
#include "reference/zero/zero.h"

namespace dtb {

/// Refuses a non-synchronous `sync` on a layout it is not defined for, in one line naming
/// the setting ("<path>.staleness = 1 with tensor_parallel = 2: ..."): tp, pp or expert
/// parallel > 1, sequence parallel, ZeRO stage >= 1 or offload, and local steps whose
/// replicas differ from layout.dp. A synchronous recipe passes. Errors: InputError.
void validate_dp_sync_layout(const DpSync& sync, const ParallelLayout& layout, const ZeroConfig& zero,
                             const std::string& path);

/// The update of one step under a non-synchronous `sync`, after parallel_compute_gradients
/// (with loss scale loss_scale()) left this rank's own, unreduced gradient in the engine
/// (construction turns the engine's DP reduction off; destruction turns it back on).
///  - Stale gradients, staleness k: the gradient is copied to a slot buffer (device memory,
///    category comm_buffer) and its SUM all-reduce over DP issued without waiting; from step k
///    on, slot t - k's reduction is waited for and its gradient applied (delay-compensated by
///    lambda g (.) g (.) (w_t - w_{t-k}) on the host when lambda > 0, w the weights AdamW
///    updates: the fp32 master under bf16), then the norm, clipping and AdamW as
///    parallel_optimizer_step. Steps before k: no update, grad_norm NaN.
///  - Local steps H over R = dp replicas: each rank clips by its own gradient's norm and steps
///    its own AdamW; grad_norm = sqrt(mean_r ||g_r||^2) (a scalar all-reduce); after every H
///    steps one SUM all-reduce of the weights (acc_t<T>) over DP, the outer Nesterov SGD step on
///    theta (host memory) and every replica's weights set to theta (the moments stay).
/// Every DP byte moved is added to engine.comm_stats(). Collective over groups.dp (and
/// groups.world for the norms).
template <typename T>
class DpSyncStepper {
 public:
  using A = acc_t<T>;
  /// Errors: InputError from validate_dp_sync (in T's precision) / validate_dp_sync_layout.
  DpSyncStepper(ZeroEngine<T>& engine, const ParallelLayout& layout, const TrainConfig& cfg, const DpSync& sync,
                ParallelGroups& groups);
  /// Waits for the reductions still in flight (their gradients are never applied).
  ~DpSyncStepper();
  DpSyncStepper(const DpSyncStepper&) = delete;
  DpSyncStepper& operator=(const DpSyncStepper&) = delete;
  /// The factor parallel_compute_gradients' backward carries: R under local steps (a replica's
  /// gradient is its own mean loss's: R / (global tokens) = 1 / (its tokens)), 1 otherwise.
  double loss_scale() const;
  /// Step s's update (steps in order from 0). `timing` (optional) gets the waits for a
  /// reduction added to comm_s.
  StepOutcome step(int64_t s, StepTiming* timing = nullptr);

 private:
  struct Slot {
    Tensor grad;                       // N elements of T: g_s, reduced in place
    std::unique_ptr<CommHandle> done;  // null on one rank
    std::vector<A> w;                  // w_s, when compensating
  };
  std::vector<A> weights();           // the weights AdamW updates, host copy
  StepOutcome stale_step(int64_t s, StepTiming* timing);
  StepOutcome local_step(int64_t s);
  void outer_step();

  ZeroEngine<T>& engine_;
  const TrainConfig& cfg_;
  const DpSync sync_;
  ParallelGroups& g_;
  size_t n_ = 0;
  std::deque<Slot> slots_;      // stale: the reductions not yet applied, oldest first
  std::vector<A> theta_, mom_;  // local steps: the outer weights and Nesterov buffer
};

extern template class DpSyncStepper<float>;
extern template class DpSyncStepper<double>;
extern template class DpSyncStepper<bf16>;
extern template class DpSyncStepper<fp16>;

}  // namespace dtb
