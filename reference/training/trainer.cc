// Data-parallel training: gradients summed over micro-batches and DP ranks, scaled once
// by the global token count, then AdamW.
#include "reference/training/trainer.h"

#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <sstream>

#include "kernels/slowdown.h"
#include "kernels/timer.h"
#include "reference/layout/layout_spec.h"
#include "reference/training/progress.h"
#include "reference/zero/zero.h"

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

void validate_dp_sync(const DpSync& d, Precision precision, const TrainConfig& cfg, const std::string& path) {
  auto kv = [&](const char* key, double v) {
    std::ostringstream o;
    o << path << "." << key << " = " << v;
    return o.str();
  };
  // The keys' spellings: the layout table's config keys (reference/layout/layout_spec.h).
  const char* stale = spelling(LayoutKey::staleness).config_key;
  const char* local = spelling(LayoutKey::local_steps).config_key;
  const char* dc = spelling(LayoutKey::delay_compensation).config_key;
  if (d.staleness < 0) throw InputError(kv(stale, d.staleness) + " is negative (0: synchronous, k >= 1: stale)");
  if (d.local_steps < 0)
    throw InputError(kv(local, d.local_steps) + " is negative (0: synchronous, H >= 1: DiLoCo)");
  if (d.staleness > 0 && d.local_steps > 0)
    throw InputError(kv(stale, d.staleness) + " with " + kv(local, d.local_steps) +
                     ": stale gradients and local steps do not combine, set one");
  if (!(d.delay_compensation >= 0))
    throw InputError(kv(dc, d.delay_compensation) + " is negative (DC-ASGD's lambda >= 0)");
  if (d.delay_compensation > 0 && d.staleness == 0)
    throw InputError(kv(dc, d.delay_compensation) + " needs " + path + "." + stale +
                     " >= 1 (it compensates a gradient's delay)");
  if (!(d.outer_lr > 0)) throw InputError(kv("outer_lr", d.outer_lr) + " must be > 0");
  if (!(d.outer_momentum >= 0 && d.outer_momentum < 1))
    throw InputError(kv("outer_momentum", d.outer_momentum) + " is outside [0, 1)");
  if (d.replicas < 1) throw InputError(kv("replicas", d.replicas) + " must be >= 1");
  if (d.local_steps > 0 && cfg.steps % d.local_steps != 0)
    throw InputError(kv("steps", cfg.steps) + " is not a multiple of " + kv(local, d.local_steps) +
                     " (every run ends with an outer step)");
  if (d.local_steps > 0 && cfg.global_batch % (d.replicas * cfg.micro_batches) != 0)
    throw InputError(kv("global_batch", cfg.global_batch) + " does not divide over " + std::to_string(d.replicas) +
                     " DiLoCo replicas x " + std::to_string(cfg.micro_batches) + " micro-batches");
  if (!d.synchronous() && (cfg.loss_scaler.enabled || precision == Precision::fp16))
    throw InputError(std::string(d.staleness > 0 ? kv(stale, d.staleness) : kv(local, d.local_steps)) +
                     " with " + (precision == Precision::fp16 ? "precision fp16" : "loss scaling") +
                     ": not supported (a skipped step and the in-flight gradients or replicas do not compose)");
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

namespace {

// The stale-gradient recipe's queue on one rank: the gradient of every step not yet applied,
// oldest first, each with the weights it was computed at when delay compensation needs them.
template <typename T>
struct StaleQueue {
  int k;
  std::deque<std::pair<std::vector<T>, std::vector<T>>> q;  // (g_s, w_s)
  // Queues g (step s's gradient at the model's current weights); when s >= k replaces g by
  // the gradient of step s - k, delay-compensated when lambda > 0 (Zheng et al. 2017, eq. 10:
  // g + lambda g (.) g (.) (w_s - w_{s-k}), in double, rounded to T), writes it into
  // model.grads() and returns true; false (nothing to apply) for s < k.
  bool take(std::vector<T>& g, int64_t s, Gpt<T>& model, double lambda) {
    std::vector<T> w;
    const size_t N = g.size();
    if (lambda > 0) {
      w.resize(N);
      model.ops().copy_to_host(w.data(), model.params(), N * sizeof(T));
    }
    q.emplace_back(g, w);
    if (s < k) return false;
    auto [old_g, old_w] = std::move(q.front());
    q.pop_front();
    if (lambda > 0)
      for (size_t i = 0; i < N; ++i) {
        const double gi = double(old_g[i]);
        old_g[i] = T(gi + lambda * gi * gi * (double(w[i]) - double(old_w[i])));
      }
    g = std::move(old_g);
    model.ops().copy_from_host(model.grads(), g.data(), N * sizeof(T));
    return true;
  }
};

// Replica r of R's gradient at step `step`: the mean loss over its share of the global batch,
// sequences [r g/R, (r+1) g/R) in cfg.micro_batches micro-batches, each backward scaled by
// 1 / (the share's tokens). Returns that mean loss.
template <typename T>
double replica_gradients(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, int64_t step, int r, int R) {
  const int share = cfg.global_batch / R, mb = share / cfg.micro_batches, Tn = cfg.seq_len;
  const double tokens = double(share) * Tn;
  std::vector<int32_t> tokens_in(size_t(mb) * Tn), targets(size_t(mb) * Tn);
  model.zero_grad();
  double loss_sum = 0;
  for (int m = 0; m < cfg.micro_batches; ++m) {
    fill_batch(data, cfg.seed, step, cfg.global_batch, r * share + m * mb, mb, Tn, tokens_in.data(), targets.data());
    loss_sum += model.forward(tokens_in.data(), targets.data(), mb, Tn);
    model.backward(T(1.0 / tokens));
  }
  return loss_sum / tokens;
}

// DiLoCo (Douillard et al. 2023, Algorithm 1) on one rank: R = d.replicas replicas
// simulated in turn, each with its own weights and AdamW state; every H steps the outer
// Nesterov SGD step on theta from the replicas' average, and every replica restarts from theta.
template <typename T>
TrainRun train_local_steps(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, const DpSync& d,
                           Communicator& dp) {
  if (dp.size() != 1)
    throw InputError("train: local_steps' reference simulates its replicas on one rank, not " +
                     std::to_string(dp.size()));
  const int R = d.replicas, H = d.local_steps;
  const size_t N = model.num_params();
  Ops<T>& ops = model.ops();
  std::vector<T> theta(N), b(N, T(0)), g(N);
  ops.copy_to_host(theta.data(), model.params(), N * sizeof(T));
  std::vector<std::vector<T>> w(size_t(R), theta);
  std::vector<std::unique_ptr<AdamW<T>>> opt;
  for (int r = 0; r < R; ++r) opt.push_back(std::make_unique<AdamW<T>>(N, model.device(), ops, cfg.adamw));
  const T eta = T(d.outer_lr), mu = T(d.outer_momentum);
  TrainRun run;
  for (int s = 0; s < cfg.steps; ++s) {
    Stopwatch sw;
    double loss = 0, sq_sum = 0;
    for (int r = 0; r < R; ++r) {
      ops.copy_from_host(model.params(), w[r].data(), N * sizeof(T));
      loss += replica_gradients(model, data, cfg, s, r, R);
      ops.copy_to_host(g.data(), model.grads(), N * sizeof(T));
      const double sq = masked_sq_sum(g.data(), nullptr, g.size(), 1.0f);
      sq_sum += sq;
      if (cfg.grad_clip > 0) ops.scale(model.grads(), T(clip_coefficient(std::sqrt(sq), cfg.grad_clip)), N);
      opt[r]->step(model.params(), model.grads());
      ops.copy_to_host(w[r].data(), model.params(), N * sizeof(T));
    }
    run.losses.push_back(loss / R);
    run.grad_norms.push_back(std::sqrt(sq_sum / R));
    if ((s + 1) % H == 0) {  // the outer step: PyTorch SGD, nesterov=True, dampening 0
      for (size_t i = 0; i < N; ++i) {
        T sum = T(0);
        for (int r = 0; r < R; ++r) sum += w[r][i];
        const T delta = theta[i] - sum / T(R);  // the outer gradient theta - mean_r w_r
        b[i] = mu * b[i] + delta;
        theta[i] = theta[i] - eta * (delta + mu * b[i]);
      }
      for (auto& wr : w) wr = theta;
    }
    StepTiming tm;
    tm.step_s = tm.compute_s = sw.elapsed();
    run.timings.push_back(tm);
    report_progress(s + 1, cfg.steps);
  }
  ops.copy_from_host(model.params(), theta.data(), N * sizeof(T));  // steps % H == 0: every w_r is theta
  return run;
}

}  // namespace

template <typename T>
TrainRun train(Gpt<T>& model, const Dataset& data, const TrainConfig& cfg, const DpSync& sync, Communicator& dp,
               SpanRecorder* spans, double step_slowdown) {
  validate_train_config(cfg, model.config(), dp.size());
  validate_dp_sync(sync, Precision::fp32, cfg, "train");  // the model computes in T: no half recipe
  if (sync.local_steps > 0) return train_local_steps(model, data, cfg, sync, dp);
  AdamW<T> opt(model.num_params(), model.device(), model.ops(), cfg.adamw);
  const int k = sync.staleness;
  StaleQueue<T> stale{k, {}};
  TrainRun run;
  double fastest = INFINITY;  // step_slowdown's state (kernels/slowdown.h)
  std::vector<T> g(model.num_params());  // the step's gradient on the host; kept: no page faults per step
  for (int s = 0; s < cfg.steps; ++s) {
    StepTiming tm;
    const double cpu0 = step_slowdown != 1.0 ? thread_cpu_seconds() : 0;
    auto window = spans ? spans->step_scope(s) : SpanRecorder::Scope();
    Stopwatch step_sw;
    run.losses.push_back(compute_gradients(model, data, cfg, s, dp, &tm, spans));
    Stopwatch opt_sw;
    auto optim = span_scope(spans, "compute.optimizer", s);
    model.ops().copy_to_host(g.data(), model.grads(), g.size() * sizeof(T));
    // Stale gradients: this step's gradient joins the queue, the one of step s - k leaves it.
    const bool apply = k == 0 || stale.take(g, s, model, sync.delay_compensation);
    if (!apply) {
      run.grad_norms.push_back(std::numeric_limits<double>::quiet_NaN());  // no update before step k
    } else {  // the global norm, every step; the gradients are replicated after the DP all-reduce
      const double sq = masked_sq_sum(g.data(), nullptr, g.size(), 1.0f);  // out of line: its sum in a register
      run.grad_norms.push_back(std::sqrt(sq));
      if (cfg.grad_clip > 0)
        model.ops().scale(model.grads(), T(clip_coefficient(std::sqrt(sq), cfg.grad_clip)), model.num_params());
      opt.step(model.params(), model.grads());
    }
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
template TrainRun train<float>(Gpt<float>&, const Dataset&, const TrainConfig&, const DpSync&, Communicator&,
                               SpanRecorder*, double);
template TrainRun train<double>(Gpt<double>&, const Dataset&, const TrainConfig&, const DpSync&, Communicator&,
                                SpanRecorder*, double);

}  // namespace dtb
