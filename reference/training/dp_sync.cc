// Stale-gradient and local-step DP in the parallel trainer; see dp_sync.h.
#include "reference/training/dp_sync.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {

void validate_dp_sync_layout(const DpSync& d, const ParallelLayout& l, const ZeroConfig& z,
                             const std::string& path) {
  if (d.synchronous()) return;
  const std::string what = d.staleness > 0 ? path + ".staleness = " + std::to_string(d.staleness)
                                           : path + ".local_steps = " + std::to_string(d.local_steps);
  auto refuse = [&](const std::string& setting) {
    throw InputError(what + " with " + setting +
                     ": stale gradients and local steps run over DP replicas alone (tensor_parallel = "
                     "pipeline_parallel = expert_parallel = 1, no sequence parallel, zero_stage 0, no offload)");
  };
  if (l.tp > 1) refuse("tensor_parallel = " + std::to_string(l.tp));
  if (l.pp > 1) refuse("pipeline_parallel = " + std::to_string(l.pp));
  if (l.ep > 1) refuse("expert_parallel = " + std::to_string(l.ep));
  if (l.sequence_parallel) refuse("sequence_parallel = true");
  if (z.stage > 0) refuse("zero_stage = " + std::to_string(z.stage));
  if (z.offload_optimizer) refuse("offload_optimizer = cpu");
  if (d.local_steps > 0 && d.replicas != l.dp)
    throw InputError(what + ": the recipe's replicas = " + std::to_string(d.replicas) + " is not data_parallel = " +
                     std::to_string(l.dp) + " (one replica per DP rank)");
}

template <typename T>
DpSyncStepper<T>::DpSyncStepper(ZeroEngine<T>& engine, const ParallelLayout& layout, const TrainConfig& cfg,
                                const DpSync& sync, ParallelGroups& g)
    : engine_(engine), cfg_(cfg), sync_(sync), g_(g) {
  validate_dp_sync(sync, precision_of<T>(), cfg, "train");
  validate_dp_sync_layout(sync, layout, engine.config(), "train");
  n_ = engine.state_shape().params;
  engine_.set_dp_reduction(false);
  if (sync.local_steps > 0) {
    theta_ = weights();
    mom_.assign(n_, A(0));
  }
}

template <typename T>
DpSyncStepper<T>::~DpSyncStepper() {
  for (Slot& s : slots_)
    if (s.done) s.done->wait();
  engine_.set_dp_reduction(true);
}

template <typename T>
double DpSyncStepper<T>::loss_scale() const {
  return sync_.local_steps > 0 ? double(sync_.replicas) : 1.0;
}

template <typename T>
std::vector<acc_t<T>> DpSyncStepper<T>::weights() {
  ZeroState<T> st = engine_.export_state();
  if (!st.master.empty()) return std::move(st.master);
  return std::vector<A>(st.params.begin(), st.params.end());
}

template <typename T>
StepOutcome DpSyncStepper<T>::step(int64_t s, StepTiming* timing) {
  return sync_.staleness > 0 ? stale_step(s, timing) : local_step(s);
}

template <typename T>
StepOutcome DpSyncStepper<T>::stale_step(int64_t s, StepTiming* timing) {
  Ops<T>& ops = engine_.ops();
  Communicator& dp = g_.dp;
  const double lambda = sync_.delay_compensation;
  Slot slot;
  slot.grad = Tensor::empty(engine_.device(), {int64_t(n_)}, dtype_of<T>(), MemCategory::comm_buffer);
  copy_within(ops, slot.grad.template data<T>(), engine_.full_grad_data(), n_);
  ops.synchronize();
  // w_s, where g_s was taken; also the current weights the compensation below reads (no update
  // happens in between), so one host copy of the state serves both.
  std::vector<A> w_now;
  if (lambda > 0) w_now = weights(), slot.w = w_now;
  if (dp.size() > 1) {
    slot.done = dp.all_reduce_async(slot.grad.raw(), slot.grad.raw(), n_, dtype_of<T>(), ReduceOp::sum);
    engine_.comm_stats().bytes += n_ * sizeof(T);
    engine_.comm_stats().calls++;
  }
  slots_.push_back(std::move(slot));
  if (s < sync_.staleness) {  // nothing to apply yet: no update, AdamW's t stays
    StepOutcome out;
    out.grad_norm = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  Slot old = std::move(slots_.front());
  slots_.pop_front();
  if (old.done) {
    Stopwatch sw;
    old.done->wait();
    engine_.comm_stats().seconds += sw.elapsed();
    if (timing) timing->comm_s += sw.elapsed();
  }
  copy_within(ops, engine_.full_grad_data(), old.grad.template data<T>(), n_);
  if (lambda > 0) {  // DC-ASGD (Zheng et al. 2017, eq. 10), elementwise on the host
    std::vector<T> gh(n_);
    ops.copy_to_host(gh.data(), engine_.full_grad_data(), n_ * sizeof(T));
    for (size_t i = 0; i < n_; ++i) {
      const double gi = double(A(gh[i]));
      gh[i] = T(A(gi + lambda * gi * gi * (double(w_now[i]) - double(old.w[i]))));
    }
    ops.copy_from_host(engine_.full_grad_data(), gh.data(), n_ * sizeof(T));
  }
  return parallel_optimizer_step(engine_, cfg_, nullptr, g_);
}

template <typename T>
StepOutcome DpSyncStepper<T>::local_step(int64_t s) {
  StepOutcome out;
  double sq = 0;
  for (T x : engine_.full_grads()) sq += double(A(x)) * double(A(x));  // this replica's whole gradient
  const double sum = all_reduce_host_scalar(g_.dp, engine_.device(), engine_.ops(), sq);
  out.grad_norm = std::sqrt(sum / sync_.replicas);
  if (cfg_.grad_clip > 0) engine_.scale_grads(A(clip_coefficient(std::sqrt(sq), cfg_.grad_clip)));
  engine_.step();
  if ((s + 1) % sync_.local_steps == 0) outer_step();
  return out;
}

template <typename T>
void DpSyncStepper<T>::outer_step() {
  ZeroState<T> st = engine_.export_state();
  const bool master = !st.master.empty();
  std::vector<A> sum = master ? st.master : std::vector<A>(st.params.begin(), st.params.end());
  Communicator& dp = g_.dp;
  if (dp.size() > 1) {  // sum_r w_r: one all-reduce of the weights (device memory off the CPU)
    Stopwatch sw;
    if (engine_.device().is_cpu()) {
      dp.all_reduce(sum.data(), sum.data(), n_, dtype_of<A>(), ReduceOp::sum);
    } else {
      Tensor buf = Tensor::empty(engine_.device(), {int64_t(n_)}, dtype_of<A>(), MemCategory::comm_buffer);
      engine_.ops().copy_from_host(buf.raw(), sum.data(), n_ * sizeof(A));
      dp.all_reduce(buf.raw(), buf.raw(), n_, dtype_of<A>(), ReduceOp::sum);
      engine_.ops().copy_to_host(sum.data(), buf.raw(), n_ * sizeof(A));
    }
    engine_.comm_stats().bytes += n_ * sizeof(A);
    engine_.comm_stats().calls++;
    engine_.comm_stats().seconds += sw.elapsed();
  }
  // PyTorch SGD with nesterov=True, dampening 0, on the outer gradient theta - mean_r w_r.
  const A eta = A(sync_.outer_lr), mu = A(sync_.outer_momentum), R = A(sync_.replicas);
  for (size_t i = 0; i < n_; ++i) {
    const A delta = theta_[i] - sum[i] / R;
    mom_[i] = mu * mom_[i] + delta;
    theta_[i] = theta_[i] - eta * (delta + mu * mom_[i]);
    st.params[i] = T(theta_[i]);
    if (master) st.master[i] = theta_[i];
  }
  engine_.import_state(st);  // every replica restarts from theta; its AdamW moments stay
}

template class DpSyncStepper<float>;
template class DpSyncStepper<double>;
template class DpSyncStepper<bf16>;
template class DpSyncStepper<fp16>;

}  // namespace dtb
