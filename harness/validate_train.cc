// A few data-parallel training steps of the reference GPT on every rank (harness/validate_train.h).
#include "harness/validate_train.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <vector>

#include "kernels/device.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/layout/process_grid.h"
#include "reference/model/gpt.h"
#include "reference/layout/layout_runner.h"
#include "reference/model/test_dataset.h"
#include "reference/training/trainer.h"

namespace dtb {

namespace {

// This process's CPU time, seconds (all its threads: OpenBLAS's workers too).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Forwards everything to `inner`, and marks the first all_reduce after arm(): in a step of
// compute_gradients that is the gradient all-reduce, right after the last backward, so the
// time since arm() is the step's batch assembly, forward and backward (wall and this
// process's CPU time). With factor > 1 (the test-only slowed rank) it first spins for
// (factor - 1) x that wall time, keeping its core busy as a slower device would.
class StepCommunicator final : public ForwardingCommunicator {
 public:
  StepCommunicator(Communicator& inner, double factor) : ForwardingCommunicator(inner), factor_(factor) {}
  void arm() {
    armed_ = true;
    fwd_bwd_cpu_ = -1, spin_s_ = 0, spin_cpu_ = 0;
    cpu0_ = cpu_seconds();
    since_.restart();
  }
  /// CPU seconds from arm() to the step's first all-reduce (-1: none was called, dp size 1).
  double fwd_bwd_cpu() const { return fwd_bwd_cpu_; }
  /// The spin before that all-reduce: wall and CPU seconds (0 when not slowed).
  double spin_seconds() const { return spin_s_; }
  double spin_cpu() const { return spin_cpu_; }
  /// This process's CPU time when the last all_reduce returned, seconds (0: none yet).
  double last_return_cpu() const { return last_return_cpu_; }

  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    if (armed_) {
      armed_ = false;
      const double c0 = cpu_seconds();
      fwd_bwd_cpu_ = c0 - cpu0_;
      if (factor_ > 1.0) {
        Stopwatch sw;
        const double spin = (factor_ - 1.0) * since_.elapsed();
        while (sw.elapsed() < spin) {
        }
        spin_s_ = sw.elapsed();
        spin_cpu_ = cpu_seconds() - c0;
      }
    }
    inner_.all_reduce(s, r, n, t, op);
    last_return_cpu_ = cpu_seconds();
  }

 private:
  double factor_;
  bool armed_ = false;
  double cpu0_ = 0, fwd_bwd_cpu_ = -1, spin_s_ = 0, spin_cpu_ = 0, last_return_cpu_ = 0;
  Stopwatch since_;
};

// The median of xs (non-empty); of an even count the mean of the two middle values.
double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t h = xs.size() / 2;
  return xs.size() % 2 ? xs[h] : 0.5 * (xs[h - 1] + xs[h]);
}

// FNV-1a, 64-bit, over n bytes.
uint64_t fnv1a(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace

TrainProbe validate_train_steps(Communicator& world, int steps, double compute_slowdown) {
  // The factor is per rank: agree on whether any rank's is bad before anyone throws.
  double bad = (std::isfinite(compute_slowdown) && compute_slowdown >= 1.0) ? 0.0 : 1.0;
  world.all_reduce(&bad, &bad, 1, DType::f64, ReduceOp::max);
  if (steps < 2) throw InputError("validate train probe: steps = " + std::to_string(steps) + " must be >= 2");
  if (bad > 0) throw InputError("validate train probe: a rank's compute slowdown is not a number >= 1");

  const GptConfig model_cfg{2, 64, 4, 64, 256};  // L, C, NH, T, V
  constexpr int kSeqPerRank = 64, kMicroBatches = 4;
  TrainConfig cfg;
  cfg.steps = steps;
  cfg.global_batch = kSeqPerRank * world.size();
  cfg.micro_batches = kMicroBatches;
  cfg.seq_len = model_cfg.T;
  cfg.seed = 1234;
  cfg.adamw.lr = 3e-3f;
  validate_train_config(cfg, model_cfg, world.size());  // InputError, the same on every rank

  CpuDevice device;
  const Dataset data = test_data();
  // The world behind a clock (the loss all-reduce's return), the DP group behind the step
  // marker (and, slowed, the spin): reference/layout/layout_runner.h's hooks.
  StepCommunicator clock(world, 1.0);
  StepCommunicator* dp = nullptr;
  TrainProbe p;
  p.steps = steps;
  std::vector<double> step_s, compute_s, compute_cpu, comm_s;
  double cpu0 = 0;
  LayoutHooks hooks;
  hooks.wrap_dp = [&](Communicator& group) {
    auto w = std::make_unique<StepCommunicator>(group, compute_slowdown);
    dp = w.get();
    return std::unique_ptr<Communicator>(std::move(w));
  };
  hooks.before_step = [&](int64_t) {
    dp->arm();
    cpu0 = cpu_seconds();
  };
  hooks.after_step = [&](int64_t done, const TrainRun& so_far) {
    // After the gradient and loss all-reduces: the optimizer step (and, at DP 1 where no
    // gradient all-reduce marks it, the forward and backward too).
    const double cpu_end = cpu_seconds(), cpu1 = clock.last_return_cpu();
    const double fwd_bwd_cpu = dp->fwd_bwd_cpu() >= 0 ? dp->fwd_bwd_cpu() : cpu1 - cpu0;
    const double loss = so_far.losses.back();
    if (done == 1) p.first_loss = loss;
    p.last_loss = loss;
    p.finite = p.finite && std::isfinite(loss);
    if (done > 1) {
      const StepTiming& tm = so_far.timings.back();
      step_s.push_back(tm.step_s);
      // The trainer timed the spin with the all-reduce: it is this rank's compute.
      compute_s.push_back(tm.compute_s + dp->spin_seconds());
      compute_cpu.push_back(fwd_bwd_cpu + dp->spin_cpu() + (cpu_end - cpu1));
      comm_s.push_back(std::max(0.0, tm.comm_s - dp->spin_seconds()));
    }
  };
  hooks.final_params = [&](const std::vector<double>& params) {
    const std::vector<float> f(params.begin(), params.end());  // exact: they were floats
    p.param_hash = fnv1a(f.data(), f.size() * sizeof(float));
  };
  ParallelLayout layout;
  layout.dp = world.size();
  run_layout({.model = model_cfg, .layout = {.l = layout}, .train = cfg, .device = device, .host = world,
              .device_comm = &clock, .data = data, .hooks = &hooks});
  p.step_seconds = median(step_s);
  p.compute_seconds = median(compute_s);
  p.compute_cpu_seconds = median(compute_cpu);
  p.comm_seconds = median(comm_s);
  const double tokens_per_rank = double(kSeqPerRank) * cfg.seq_len;
  p.tokens_per_s = tokens_per_rank / p.step_seconds;

  char line[200];
  std::snprintf(line, sizeof line,
                "GPT L%d C%d H%d T%d V%d (%zu params, fp32), DP%d, %d micro-batches of %d x %d tokens per rank, "
                "AdamW lr %g, cpu",
                model_cfg.L, model_cfg.C, model_cfg.NH, model_cfg.T, model_cfg.V, gpt_num_params(model_cfg),
                world.size(), kMicroBatches, kSeqPerRank / kMicroBatches, cfg.seq_len, double(cfg.adamw.lr));
  p.model = line;
  return p;
}

}  // namespace dtb
