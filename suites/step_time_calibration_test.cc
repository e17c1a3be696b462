// Tests of suites/step_time_calibration.h on the whole world (2 and 4 ranks): the fit recovers
// exact alpha-beta points; a calibration times every op asked, fits a collective per group size
// dividing the world, agrees on every rank, and lets predict_step price a layout of the world.
#include "suites/step_time_calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/comm/communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/timer.h"
#include "reference/training/counting_ops_test_util.h"
#include "kernels/error.h"
#include "suites/suite.h"

namespace dtb {
namespace {

TEST(StepTimeCalibration, FitRecoversExactPoints) {
  const AlphaBeta f = fit_alpha_beta({0, 1000, 1e6}, {1e-5, 1e-5 + 1e-6, 1e-5 + 1e-3});  // 10 us + 1 GB/s
  EXPECT_NEAR(f.alpha_s, 1e-5, 1e-12);
  EXPECT_NEAR(f.per_s, 1e9, 1e3);
  const AlphaBeta flat = fit_alpha_beta({1, 2}, {3e-6, 3e-6});  // no slope: the size costs nothing
  EXPECT_NEAR(flat.alpha_s, 3e-6, 1e-15);
  EXPECT_EQ(flat.per_s, 0);
  EXPECT_THROW(fit_alpha_beta({1}, {1}), InputError);
  EXPECT_THROW(fit_alpha_beta({1, 2}, {1, 0}), InputError);
}

// A busy machine's first round: the small size disturbed (slower than the large), no bandwidth.
// The sizes are timed again, each keeping its least time, until a fit has one; a quiet machine
// costs one round; a machine that never settles gives per 0 after the rounds asked.
TEST(StepTimeCalibration, FitTimesTheSizesAgainWhenItFindsNoBandwidth) {
  const std::vector<double> x = {64, 1 << 20};
  const std::vector<double> quiet = {1e-5 + 64 / 1e9, 1e-5 + (1 << 20) / 1e9};  // 10 us + 1 GB/s
  int calls = 0;
  auto busy_first = [&](size_t i) { return calls++ < 2 && i == 0 ? 5e-3 : quiet[i]; };  // a 5 ms slice
  const AlphaBeta f = fit_alpha_beta_retimed(x, busy_first);
  EXPECT_EQ(calls, 4);  // two rounds
  EXPECT_NEAR(f.alpha_s, 1e-5, 1e-12);
  EXPECT_NEAR(f.per_s, 1e9, 1e3);
  calls = 0;
  EXPECT_NEAR(fit_alpha_beta_retimed(x, [&](size_t i) { return ++calls, quiet[i]; }).per_s, 1e9, 1e3);
  EXPECT_EQ(calls, 2);
  calls = 0;
  EXPECT_EQ(fit_alpha_beta_retimed(x, [&](size_t) { return ++calls, 3e-6; }, 3).per_s, 0);
  EXPECT_EQ(calls, 6);
  EXPECT_THROW(fit_alpha_beta_retimed(x, [](size_t) { return 1.0; }, 0), InputError);
}

TEST(StepTimeCalibration, MeasuresEveryOpAndGroupAlikeOnEveryRank) {
  auto world = make_mpi_world();
  const int n = world->size();
  StepTimeInput in;
  in.model = GptConfig{.L = 2, .C = 32, .NH = 4, .T = 16, .V = 64};
  in.global_batch = 2 * n, in.micro_batches = 2, in.seq_len = 16;
  in.layout.dp = n;
  StepTimeCalibrationSpec spec;
  spec.ops = step_ops(in);
  spec.samples = 3, spec.window_s = 0.001;
  CpuDevice device;
  const StepTimeHardware hw = calibrate_step_time(*world, device, PrecisionOps{}, spec);
  for (const StepOp& o : spec.ops) {
    ASSERT_TRUE(hw.op_seconds.count(o.key(Precision::fp32))) << o.key(Precision::fp32);
    EXPECT_GT(hw.op_seconds.at(o.key(Precision::fp32)), 0) << o.key(Precision::fp32);
  }
  EXPECT_GT(hw.gemm[0].per_s, 0);
  EXPECT_GT(hw.attention[0].per_s, 0);
  std::vector<int> groups;
  for (const CollectiveFit& f : hw.collectives) {
    groups.push_back(f.group);
    EXPECT_GE(f.bus.alpha_s, 0);
    EXPECT_GE(f.bus.per_s, 0);
  }
  std::vector<int> want;
  for (int g = 2; g <= n; ++g)
    if (n % g == 0) want.push_back(g);
  EXPECT_EQ(groups, want);
  // Every rank holds the same op times (the largest over ranks): their sum agrees.
  double sum = 0;
  for (const auto& [k, s] : hw.op_seconds) sum += s;
  double lo = sum, hi = sum;
  world->all_reduce(&lo, &lo, 1, DType::f64, ReduceOp::min);
  world->all_reduce(&hi, &hi, 1, DType::f64, ReduceOp::max);
  EXPECT_EQ(lo, hi);
  const StepTimeTerms t = predict_step(in, hw);
  EXPECT_TRUE(std::isfinite(t.step_s));
  EXPECT_GT(t.dp_comm_s, 0);
  EXPECT_GT(t.step_s, t.pipeline_s);
  const nlohmann::json j = step_time_hardware_json(hw);
  EXPECT_EQ(j.at("op_us").size(), hw.op_seconds.size());
}

// The ops in sequence cost what a switch between ops costs: ops that spin 50 us whenever the op
// before was another (and nothing more when the same op repeats, as in each op's own loop) give a
// factor of at least 1 + (switches x 50 us, less a fifth for the clock) / the loops' sum; every
// op's time carries it. Plain CPU ops give a factor >= 1 (the bound is taken).
TEST(StepTimeCalibration, OpsInSequenceCarryTheSwitchCost) {
  auto world = make_mpi_world();
  StepTimeInput in;
  in.model = GptConfig{.L = 1, .C = 32, .NH = 4, .T = 16, .V = 64};
  in.global_batch = 2 * world->size(), in.micro_batches = 2, in.seq_len = 16;
  in.layout.dp = world->size();
  StepTimeCalibrationSpec spec;
  spec.ops = step_ops(in);
  spec.samples = 3, spec.window_s = 0.002;
  CpuDevice device;
  CpuOps<float> cpu;
  CountingOps<float> ops(cpu);
  std::string last;
  constexpr double kSwitch = 50e-6;
  ops.on_call = [&](const char* op) {
    if (op != last) {
      Stopwatch sw;
      while (sw.elapsed() < kSwitch) {
      }
    }
    last = op;
  };
  PrecisionOps po;
  po.fp32 = &ops;
  const StepTimeHardware hw = calibrate_step_time(*world, device, po, spec);
  double scaled = 0;
  for (const StepOp& o : spec.ops) scaled += hw.op_seconds.at(o.key(Precision::fp32));
  const double looped = scaled / hw.op_sequence_factor;
  double switches = 0;  // ops whose predecessor in the (repeated) sequence is another op
  for (size_t i = 0; i < spec.ops.size(); ++i)
    switches += spec.ops[i].name != spec.ops[(i + spec.ops.size() - 1) % spec.ops.size()].name;
  std::printf("op_sequence_factor %.3f: %zu ops, %.0f switches, loops' sum %.1f us, in sequence %.1f us\n",
              hw.op_sequence_factor, spec.ops.size(), switches, looped * 1e6, scaled * 1e6);
  EXPECT_GE(hw.op_sequence_factor, 1 + 0.8 * switches * kSwitch / looped);
  EXPECT_EQ(step_time_hardware_json(hw).at("op_sequence_factor").get<double>(), hw.op_sequence_factor);
  const StepTimeHardware plain = calibrate_step_time(*world, device, PrecisionOps{}, spec);
  EXPECT_GE(plain.op_sequence_factor, 1.0);
}

}  // namespace
}  // namespace dtb
