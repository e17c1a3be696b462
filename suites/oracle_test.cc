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
