// Data-parallel training: gradients summed over micro-batches and DP ranks, scaled once
// by the global token count, then AdamW.
#include "reference/trainer.h"

#include <cmath>

#include "kernels/slowdown.h"
#include "kernels/timer.h"
#include "reference/progress.h"

namespace dtb {

void validate_train_config(const TrainConfig& cfg, const GptConfig& model, int dp) {
  if (cfg.steps <= 0) throw InputError("train.steps must be positive");
  if (cfg.global_batch <= 0 || cfg.micro_batches <= 0)
    throw InputError("train.global_batch and train.micro_batches must be positive");
  if (cfg.global_batch % (dp * cfg.micro_batches) != 0)
    throw InputError("train.global_batch = " + std::to_string(cfg.global_batch) +
                     " is not divisible by data_parallel (" + std::to_string(dp) +
                     ") x micro_batches (" + std::to_string(cfg.micro_batches) + ")");
  if (cfg.seq_len <= 0 || cfg.seq_len > model.T)
    throw InputError("train.seq_len = " + std::to_string(cfg.seq_len) +
                     " must be in [1, model.T = " + std::to_string(model.T) + "]");
}

// Sum of a host scalar over `comm`, through the backend's memory when it is not the host's
// (NCCL reduces device buffers only).
template <typename T>
double all_reduce_host_scalar(Communicator& comm, Device& device, Ops<T>& ops, double x) {
  if (device.is_cpu()) {
    comm.all_reduce(&x, &x, 1, DType::f64, ReduceOp::sum);
    return x;
  }
  Tensor buf = Tensor::empty(device, {1}, DType::f64, MemCategory::comm_buffer);
  ops.copy_from_host(buf.raw(), &x, sizeof x);
  comm.all_reduce(buf.raw(), buf.raw(), 1, DType::f64, ReduceOp::sum);
  ops.copy_to_host(&x, buf.raw(), sizeof x);
  return x;
}
template double all_reduce_host_scalar<float>(Communicator&, Device&, Ops<float>&, double);
template double all_reduce_host_scalar<double>(Communicator&, Device&, Ops<double>&, double);
template double all_reduce_host_scalar<bf16>(Communicator&, Device&, Ops<bf16>&, double);
template double all_reduce_host_scalar<fp16>(Communicator&, Device&, Ops<fp16>&, double);

template <typename T>
double compute_gradients(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, int64_t step,
                         Communicator& dp, StepTiming* timing, SpanRecorder* spans) {
  DTB_CHECK(cfg.micro_batches > 0 && cfg.global_batch % (dp.size() * cfg.micro_batches) == 0,
            "compute_gradients: global batch does not divide over ranks and micro-batches");
  const bool recording = spans && spans->enabled();  // only then synchronise per span
  Stopwatch sw;
  const int per_rank = cfg.global_batch / dp.size();
  const int mb = per_rank / cfg.micro_batches;  // sequences per micro-batch
  const int Tn = cfg.seq_len;
  const double global_tokens = double(cfg.global_batch) * Tn;
  std::vector<int32_t> tokens(size_t(mb) * Tn), targets(size_t(mb) * Tn);
  model.zero_grad();
  double loss_sum = 0;
  for (int m = 0; m < cfg.micro_batches; ++m) {
    const int first = dp.rank() * per_rank + m * mb;
    fill_batch(data, cfg.seed, step, cfg.global_batch, first, mb, Tn, tokens.data(), targets.data());
    auto fwd = span_scope(spans, "compute.forward", step);
    loss_sum += model.forward(tokens.data(), targets.data(), mb, Tn);
    if (recording) model.ops().synchronize();
    fwd.end();
    auto bwd = span_scope(spans, "compute.backward", step);
    model.backward(T(1.0 / global_tokens));  // the one division of the numerics contract
    if (recording) model.ops().synchronize();
    bwd.end();
  }
  model.ops().synchronize();  // queued GPU work belongs to this step's compute
  const double compute = sw.elapsed();
  sw.restart();
  if (dp.size() > 1) {
    auto comm = span_scope(spans, "comm.all_reduce", step);
    dp.all_reduce(model.grads(), model.grads(), model.num_params(), dtype_of<T>(), ReduceOp::sum);
    loss_sum = all_reduce_host_scalar(dp, model.device(), model.ops(), loss_sum);
    if (recording) model.ops().synchronize();
  }
  if (timing) {
    timing->compute_s += compute;
    timing->comm_s += sw.elapsed();
  }
  return loss_sum / global_tokens;
}

template <typename T>
AdamW<T>::AdamW(size_t n, Device& device, Ops<T>& ops, const AdamWParams& hp)
    : m_(Tensor::empty(device, {int64_t(n)}, dtype_of<T>(), MemCategory::optimizer_state)),
      v_(Tensor::empty(device, {int64_t(n)}, dtype_of<T>(), MemCategory::optimizer_state)),
      ops_(ops),
      hp_(hp),
      n_(n) {
  ops_.zero(m_.template data<T>(), n);
  ops_.zero(v_.template data<T>(), n);
}

template <typename T>
void AdamW<T>::step(T* params, const T* grads) {
  ++t_;
  ops_.adamw_update(params, grads, m_.template data<T>(), v_.template data<T>(), n_, hp_, t_);
}

template <typename T>
TrainRun train(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, Communicator& dp,
               SpanRecorder* spans, double step_slowdown) {
  validate_train_config(cfg, model.config(), dp.size());
  AdamW<T> opt(model.num_params(), model.device(), model.ops(), cfg.adamw);
  TrainRun run;
  double fastest = INFINITY;  // step_slowdown's state (kernels/slowdown.h)
  for (int s = 0; s < cfg.steps; ++s) {
    StepTiming tm;
    const double cpu0 = step_slowdown != 1.0 ? thread_cpu_seconds() : 0;
    auto window = spans ? spans->step_scope(s) : SpanRecorder::Scope();
    Stopwatch step_sw;
    run.losses.push_back(compute_gradients(model, data, cfg, s, dp, &tm, spans));
    Stopwatch opt_sw;
    auto optim = span_scope(spans, "compute.optimizer", s);
    {  // the global norm, every step; the gradients are replicated after the DP all-reduce
      std::vector<T> g(model.num_params());
      model.ops().copy_to_host(g.data(), model.grads(), g.size() * sizeof(T));
      double sq = 0;
      for (T x : g) sq += double(x) * double(x);
      run.grad_norms.push_back(std::sqrt(sq));
      if (cfg.grad_clip > 0)
        model.ops().scale(model.grads(), T(clip_coefficient(std::sqrt(sq), cfg.grad_clip)), model.num_params());
    }
    opt.step(model.params(), model.grads());
    model.ops().synchronize();
    optim.end();
    tm.compute_s += opt_sw.elapsed();
    if (step_slowdown != 1.0)
      spin_cpu(extra_cpu_seconds(step_slowdown, thread_cpu_seconds() - cpu0, step_sw.elapsed(), fastest));
    tm.step_s = step_sw.elapsed();
    window.end();  // after the step's spans: fills its idle time
    run.timings.push_back(tm);
    report_progress(s + 1, cfg.steps);
  }
  return run;
}

template double compute_gradients<float>(Gpt<float>&, const Dataset&, const TrainConfig&, int64_t,
                                         Communicator&, StepTiming*, SpanRecorder*);
template double compute_gradients<double>(Gpt<double>&, const Dataset&, const TrainConfig&, int64_t,
                                          Communicator&, StepTiming*, SpanRecorder*);
template class AdamW<float>;
template class AdamW<double>;
template TrainRun train<float>(Gpt<float>&, const Dataset&, const TrainConfig&, Communicator&,
                               SpanRecorder*, double);
template TrainRun train<double>(Gpt<double>&, const Dataset&, const TrainConfig&, Communicator&,
                                SpanRecorder*, double);

}  // namespace dtb
