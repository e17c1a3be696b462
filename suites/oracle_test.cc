// Tests of suites/oracle.h's step times over the world (2 and 4 ranks): the per-step slowest rank
// and the step period, on ranks whose steps jitter out of phase (as ranks sharing cores do).
#include "suites/oracle.h"

#include <gtest/gtest.h>

#include "kernels/comm/communicator.h"
#include "kernels/error.h"
#include "suites/suite.h"

namespace dtb {
namespace {

// Rank r's steps: 9 s (step 0, which allocates), then 1 and 3 s on even ranks, 3 and 1 on odd ones.
// Each step's slowest rank took 3 s, but every rank ran its two steps in 4 s: the period is 2.
LayoutOutcome jittered(int rank) {
  LayoutOutcome out;
  for (double s : {9.0, rank % 2 ? 3.0 : 1.0, rank % 2 ? 1.0 : 3.0}) {
    StepTiming t;
    t.step_s = s;
    out.timings.push_back(t);
  }
  return out;
}

// tail_gap by hand: 8 steps, the last quarter is steps 6 and 7. ref 2, 2; losses 2.1, 1.9 + 0.2 =
// 2.1: differences 0.1, 0.1, mean 0.1, gap 0.1 / 2 = 0.05, sd 0, se 0. Then differences 0.3 and
// -0.1: mean 0.1, sd sqrt(((0.2)^2 + (0.2)^2) / 1) = 0.2828, se = 0.2828 / sqrt(2) = 0.2, over the
// mean 2: 0.1. The FP8 check passes |gap| <= 2^-6 + 3 se: 0.05 > 2^-6 fails with se 0, passes with
// 0.1 (bound 0.316).
TEST(LossGaps, TailGapAndItsStandardErrorByHand) {
  const std::vector<double> ref = {5, 5, 4, 4, 3, 3, 2, 2};
  std::vector<double> a = {5, 5, 4, 4, 3, 3, 2.1, 2.1};
  TailGap g = tail_gap(a, ref);
  EXPECT_EQ(g.steps, 2);
  EXPECT_NEAR(g.gap, 0.05, 1e-12);
  EXPECT_NEAR(g.se_rel, 0.0, 1e-12);
  EXPECT_FALSE(fp8_vs_bf16_checks("p/", a, ref)[1].passed);
  a[6] = 2.3, a[7] = 1.9;
  g = tail_gap(a, ref);
  EXPECT_NEAR(g.gap, 0.05, 1e-12);
  EXPECT_NEAR(g.se_rel, 0.1, 1e-12);
  const std::vector<Check> c = fp8_vs_bf16_checks("p/", a, ref);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].name, "p/loss_vs_bf16/tail_mean");
  EXPECT_TRUE(c[1].passed);
  EXPECT_NEAR(c[1].tolerance, 0x1p-6 + 0.3, 1e-12);
  EXPECT_NEAR(max_rel_deviation(a, ref), 0.15, 1e-12);
  // Step 0 within E4M3's unit roundoff of |loss_0|: 5 +- 5/16.
  a[0] = 5 + 5.0 / 16 * 1.01;
  EXPECT_FALSE(fp8_vs_bf16_checks("p/", a, ref)[0].passed);
}

TEST(StepTimes, PeriodIsTheSlowestRanksMeanNotTheStepsMaximum) {
  auto world = make_mpi_world();
  ASSERT_GE(world->size(), 2);
  const LayoutOutcome out = jittered(world->rank());
  EXPECT_EQ(slowest_step_times(out, *world), (std::vector<double>{9, 3, 3}));
  EXPECT_DOUBLE_EQ(step_period(out, *world), 2.0);
  // A rank slower throughout sets the period: rank 0's steps 1.5 times as long.
  LayoutOutcome slow = out;
  if (world->rank() == 0)
    for (StepTiming& t : slow.timings) t.step_s *= 1.5;
  EXPECT_DOUBLE_EQ(step_period(slow, *world), 3.0);
  LayoutOutcome one;
  one.timings.resize(1);
  EXPECT_THROW(step_period(one, *world), InputError);
}

}  // namespace
}  // namespace dtb
