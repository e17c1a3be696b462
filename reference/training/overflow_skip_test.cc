// Dynamic loss scaling's skip under every kind of sharding (reference/parallel/parallel_trainer.h
// parallel_optimizer_step): an inf or NaN in one rank's held gradient makes every rank skip
// the step, whatever that rank holds — its ZeRO 1-3 shard, the host-tier state of offload, a
// pipeline stage's layers, a TP shard. Runs in the multi-rank binary (2 and 4 ranks).
#include <gtest/gtest.h>

#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "reference/training/loss_scaler.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/model/test_dataset.h"

namespace dtb {
namespace {

// 4 layers (PP 4), 4 heads (TP 4), V 256 (divisible by 4).
const GptConfig kModel{4, 32, 4, 16, 256};

// One layout of the whole world: its name, the grid (as a function of the world size n) and ZeRO.
struct SkipCase {
  std::string name;
  int tp_of_n, pp_of_n;  // 1: that dimension is 1; 0: the whole world
  int stage;
  bool offload;
};

void PrintTo(const SkipCase& c, std::ostream* os) { *os << c.name; }

ParallelLayout grid(const SkipCase& c, int n) {
  ParallelLayout l;
  l.tp = c.tp_of_n == 0 ? n : 1;
  l.pp = c.pp_of_n == 0 ? n : 1;
  l.dp = n / (l.tp * l.pp);
  return l;
}

class OverflowSkip : public ::testing::TestWithParam<SkipCase> {};

// The skip trap: a skip decided per rank deadlocks or desynchronises. With an inf only in
// rank 1's held gradient, then a NaN only in rank 1's: every rank skips both steps and halves
// the scale twice (the same scale and skip count on every rank), no rank steps AdamW (their
// step counters stay 0) and the parameters stay bitwise what they were, every replica equal;
// the next, clean step updates everyone alike and counts. No hang.
TEST_P(OverflowSkip, AnInfOnOneRankSkipsTheStepEverywhere) {
  const SkipCase& c = GetParam();
  auto w = make_mpi_world();
  const int n = w->size();
  TrainConfig cfg;
  cfg.micro_batches = n;  // at least one per pipeline stage
  cfg.global_batch = 2 * n;
  cfg.seq_len = 16;
  cfg.loss_scaler.enabled = true;
  ParallelLayout l = grid(c, n);
  l.micro_batches = cfg.micro_batches;
  cfg.global_batch = l.dp * cfg.micro_batches;
  CpuDevice dev;
  OwnedGroups og = make_parallel_groups(*w, l);
  ParallelGroups g{*w, *og.tp, *og.dp, *og.pp, og.pp_backward.get()};
  ParallelGpt<float> m(kModel, l, w->rank(), dev, *og.tp);
  ZeroConfig z;
  z.stage = c.stage;
  z.offload_optimizer = c.offload;
  ZeroEngine<float> engine(m, z, *og.dp, cfg.adamw);
  engine.load(m.initial_params(cfg.seed));
  LossScaler scaler(cfg.loss_scaler);
  const Dataset data = test_data();
  auto all = [&](double x) {  // x from every rank
    std::vector<double> v(size_t(w->size()));
    w->all_gather(&x, v.data(), 1, DType::f64);
    return v;
  };
  auto sum = [&](double x) {
    double s = 0;
    for (double y : all(x)) s += y;
    return s;
  };
  const std::vector<float> before = engine.full_params();  // collective at stage 3
  const float poison[2] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  const double scale0 = scaler.scale();
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    parallel_compute_gradients(m, engine, data, cfg, s, g, nullptr, nullptr, scaler.scale());
    ASSERT_EQ(sum(engine.local_nonfinite() ? 1 : 0), 0.0) << "overflow before the injection";
    if (w->rank() == 1) engine.set_held_grad(7, poison[s]);
    ASSERT_EQ(sum(engine.local_nonfinite() ? 1 : 0), 1.0) << "the injection is on one rank only";
    const StepOutcome o = parallel_optimizer_step(engine, cfg, &scaler, g);
    EXPECT_EQ(sum(o.skipped ? 1 : 0), double(n)) << "every rank skips";
    EXPECT_EQ(o.loss_scale, scale0 / (s == 0 ? 1 : 2));
    for (double x : all(scaler.scale())) EXPECT_EQ(x, scale0 / (s == 0 ? 2 : 4));
    for (double x : all(scaler.skipped_steps())) EXPECT_EQ(x, double(s + 1));
    for (double x : all(engine.steps_taken())) EXPECT_EQ(x, 0.0);
    const std::vector<float> now = engine.full_params();
    EXPECT_EQ(sum(now == before ? 0 : 1), 0.0) << "a rank's parameters changed";
    EXPECT_EQ(m.replica_max_diff(now, *w), 0.0);
  }
  parallel_compute_gradients(m, engine, data, cfg, 2, g, nullptr, nullptr, scaler.scale());
  const StepOutcome o = parallel_optimizer_step(engine, cfg, &scaler, g);
  EXPECT_EQ(sum(o.skipped ? 1 : 0), 0.0);
  for (double x : all(engine.steps_taken())) EXPECT_EQ(x, 1.0);
  const std::vector<float> after = engine.full_params();
  EXPECT_EQ(sum(after == before ? 1 : 0), 0.0) << "a rank's parameters did not change";
  EXPECT_EQ(m.replica_max_diff(after, *w), 0.0);
  for (double x : all(scaler.skipped_steps())) EXPECT_EQ(x, 2.0);
  for (double x : all(scaler.scale())) EXPECT_EQ(x, scale0 / 4);  // one good step: no growth yet
}

INSTANTIATE_TEST_SUITE_P(Layouts, OverflowSkip,
                         ::testing::Values(SkipCase{"DP_zero1", 1, 1, 1, false}, SkipCase{"DP_zero2", 1, 1, 2, false},
                                           SkipCase{"DP_zero3", 1, 1, 3, false},
                                           SkipCase{"DP_zero2_offload", 1, 1, 2, true},
                                           SkipCase{"DP_zero3_offload", 1, 1, 3, true},
                                           SkipCase{"PP_1f1b", 1, 0, 0, false}, SkipCase{"TP", 0, 1, 0, false}),
                         [](const ::testing::TestParamInfo<SkipCase>& i) { return i.param.name; });

}  // namespace
}  // namespace dtb
