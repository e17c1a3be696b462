// The checkpoint interval formulas (reference/checkpoint/checkpoint_interval.h) against a worked value and
// against the minimum of the exact expected run time they approximate: with failures at rate
// 1/M, a checkpoint costing delta and a restart R, solving T_s seconds of work in segments of
// tau takes M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau (Daly 2006, eq. 20).
#include "reference/checkpoint/checkpoint_interval.h"

#include <gtest/gtest.h>

namespace dtb {
namespace {

// Expected wall time per second of work at interval tau (Daly's eq. 20 with R = 0, T_s = 1).
double wall_per_work(double tau, double delta, double M) { return M * std::expm1((tau + delta) / M) / tau; }

// The tau in [lo, hi] that minimises wall_per_work, by golden-section search (unimodal there).
double exact_optimum(double delta, double M) {
  double lo = 1e-3 * delta, hi = 10 * M;
  const double g = (std::sqrt(5.0) - 1) / 2;
  for (int i = 0; i < 300; ++i) {
    const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
    if (wall_per_work(a, delta, M) < wall_per_work(b, delta, M))
      hi = b;
    else
      lo = a;
  }
  return (lo + hi) / 2;
}

TEST(CheckpointInterval, WorkedValues) {
  // A 60 s checkpoint and a failure a day: Young sqrt(2 x 60 x 86400) = 3219.94 s; Daly adds
  // the higher-order terms and subtracts delta: 3180.06 s.
  EXPECT_NEAR(young_interval_s(60, 86400), 3219.9378, 1e-3);
  EXPECT_NEAR(daly_interval_s(60, 86400), 3180.0621, 1e-3);
  EXPECT_EQ(daly_interval_s(300, 100), 100);  // delta >= 2M: checkpoint every M
  // At Young's interval the first-order overhead is sqrt(2 delta / M).
  EXPECT_NEAR(checkpoint_overhead_share(young_interval_s(60, 86400), 60, 86400), std::sqrt(120.0 / 86400), 1e-12);
}

// Daly's estimate is within 0.5 % of the exact model's optimum from delta/M = 1e-5 to 0.2 (his
// Fig. 4: within a few tenths of a percent); Young's, without the -delta term, drifts above it.
TEST(CheckpointInterval, DalyIsTheExactOptimumToHigherOrder) {
  const double M = 200 * 3600.0;
  for (double r : {1e-5, 1e-4, 1e-3, 1e-2, 0.05, 0.2}) {
    const double delta = r * M, best = exact_optimum(delta, M);
    EXPECT_NEAR(daly_interval_s(delta, M) / best, 1.0, 5e-3) << "delta/M = " << r;
    EXPECT_GT(young_interval_s(delta, M), daly_interval_s(delta, M)) << "delta/M = " << r;
  }
}

}  // namespace
}  // namespace dtb
