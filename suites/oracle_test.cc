// Tests of suites/oracle.h's step times over the world (2 and 4 ranks): the per-step slowest rank
// and the step period, on ranks whose steps jitter out of phase (as ranks sharing cores do).
#include "suites/oracle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

// The FP8 layout contract's checks by hand (suites/oracle.cc). The fp32 layout sits 1e-7 from its twin
// in every step's loss and 1e-6 in the step-0 gradient. Without TP or CP (flips false) the FP8 run
// may sit k dev32 + 4 u32 |loss| from its twin: 10 x 1e-7 + 4 x 2^-24 x 2 for the losses, 10 x 1e-6 +
// 4 x 2^-24 for the gradient; with them, k sqrt(2 u8 dev32) + 4 u32: 10 sqrt(0.25e-7) = 1.58e-3 for
// the losses. The delayed recipe's weight amaxes must be the twin's bit for bit; its activations'
// within the gradient's bound, and not checked under TP or CP.
TEST(Fp8Twin, ContractChecksByHand) {
  auto outcome = [](std::vector<double> losses, std::vector<double> grads0, float w_amax = 1, float x_amax = 1) {
    LayoutOutcome o;
    o.losses = std::move(losses);
    o.grads0 = std::move(grads0);
    o.fp8_state.history_len = 1;
    o.fp8_state.layers = {0};
    o.fp8_state.values.assign(Fp8Checkpoint::floats_per_layer(1), 1.0f);  // 4 linears x (x, w, dy) x 3
    o.fp8_state.values[3] = w_amax;  // the first linear's w: its amax history's one entry
    o.fp8_state.values[0] = x_amax;  // and its x
    return o;
  };
  const LayoutOutcome twin32 = outcome({2, 2, 2}, {1, 0}), run32 = outcome({2 + 1e-7, 2, 2}, {1 + 1e-6, 0});
  const LayoutOutcome twin = outcome({2, 2, 2}, {1, 0});
  const double u32 = 0x1p-24;
  auto check = [&](const std::vector<Check>& cs, const std::string& name) -> const Check& {
    for (const Check& c : cs)
      if (c.name == name) return c;
    ADD_FAILURE() << "no check " << name;
    return cs.front();
  };
  // Within the bounds: the loss 9e-7 off at step 1 (bound 1e-6 + 8 u32), the gradient 9e-6.
  std::vector<Check> cs = fp8_twin_checks("p/", false, outcome({2, 2 + 9e-7, 2}, {1 + 9e-6, 0}), twin, run32, twin32);
  ASSERT_EQ(cs.size(), 6u);  // 3 losses, the gradient, two amax checks
  for (const Check& c : cs) EXPECT_TRUE(c.passed) << c.name << " " << c.value << " > " << c.tolerance;
  EXPECT_NEAR(check(cs, "p/fp8_vs_twin/loss/step:2").value, 9e-7, 1e-15);  // the envelope up to the step
  // (dev32 = (2 + 1e-7) - 2 in double: 1e-7 to within 2^-51 of 2, so the bounds to ~1e-14 relative.)
  EXPECT_NEAR(check(cs, "p/fp8_vs_twin/loss/step:2").tolerance, 1e-6 + 8 * u32, 1e-13);
  EXPECT_NEAR(check(cs, "p/fp8_vs_twin/grads/step:0").tolerance, 1e-5 + 4 * u32, 1e-15);
  // Over them: the loss 1.5e-6 off, the gradient 1.2e-5; a weight's amax one ulp off; an input's 2e-5.
  cs = fp8_twin_checks("p/", false, outcome({2, 2 + 1.5e-6, 2}, {1 + 1.2e-5, 0}, std::nextafter(1.0f, 2.0f), 1 + 2e-5f),
                       twin, run32, twin32);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/loss/step:1").passed);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/grads/step:0").passed);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/amax_history/weight").passed);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/amax_history/activations").passed);
  // A NaN fails its check and every later step's (the envelope keeps it), and in a weight's amax too.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  cs = fp8_twin_checks("p/", false, outcome({2, nan, 2}, {1, 0}, std::numeric_limits<float>::quiet_NaN()), twin, run32,
                       twin32);
  EXPECT_TRUE(check(cs, "p/fp8_vs_twin/loss/step:0").passed);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/loss/step:1").passed);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/loss/step:2").passed);
  EXPECT_FALSE(check(cs, "p/fp8_vs_twin/amax_history/weight").passed);
  // TP or CP: the flip bound passes the loss; the weights' amaxes still bitwise; no activation check.
  cs = fp8_twin_checks("p/", true, outcome({2, 2 + 1.5e-3, 2}, {1, 0}, 1, 1.1f), twin, run32, twin32);
  ASSERT_EQ(cs.size(), 5u);
  EXPECT_NEAR(check(cs, "p/fp8_vs_twin/loss/step:1").tolerance, 10 * std::sqrt(0.25 * 1e-7) + 8 * u32, 1e-10);
  for (const Check& c : cs) EXPECT_TRUE(c.passed) << c.name;
  EXPECT_NEAR(fp8_twin_bound(true, 1e-6, 1), 10 * std::sqrt(0.25e-6) + 4 * u32, 1e-15);
  // Only the current recipe under TP is outside the contract.
  Fp8Settings current, delayed;
  current.recipe = Fp8Recipe::current;
  ParallelLayout tp2, pp2;
  tp2.tp = 2, pp2.pp = 2;
  EXPECT_NE(fp8_twin_uncovered(current, tp2).find("no bound covers that cascade"), std::string::npos);
  EXPECT_EQ(fp8_twin_uncovered(current, pp2), "");
  EXPECT_EQ(fp8_twin_uncovered(delayed, tp2), "");
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
