// Tests of suites/stats.h: the median (odd and even counts, empty), the summary, and the median
// after iterative outlier removal that dtbench validate's baselines use; MAPE and Kendall's tau.
#include "suites/stats.h"

#include <gtest/gtest.h>

namespace dtb {
namespace {

TEST(Stats, MedianOfOddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({40, 100, 100, 100}), 100.0);  // the mean of the middle two
  EXPECT_DOUBLE_EQ(median({1, 2, 3, 4}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
  EXPECT_DOUBLE_EQ(summarize({1, 2, 3, 4}).median, median({1, 2, 3, 4}));
}

// Rank 3 at half speed is dropped before the median (99 with it, 100 without); iterative: after
// 10 goes, nothing more; equal values, one value and none are their own median.
TEST(Stats, MedianWithoutOutliers) {
  EXPECT_DOUBLE_EQ(median_without_outliers({100, 102, 98, 50}), 100.0);  // median of {98, 100, 102}
  EXPECT_DOUBLE_EQ(median_without_outliers({99, 101, 100, 10}), 100.0);  // median 99.5 with the 10
  EXPECT_DOUBLE_EQ(median_without_outliers({100, 100, 100, 100}), 100.0);
  EXPECT_DOUBLE_EQ(median_without_outliers({7}), 7.0);
  EXPECT_DOUBLE_EQ(median_without_outliers({}), 0.0);
}

// MAPE: |110-100|/100 and |45-50|/50 average to 0.1. Kendall tau-b: same order 1, reversed -1,
// one swapped pair of three (2 concordant, 1 discordant) 1/3, ties as worked below, a constant
// series 0.
TEST(Stats, MapeAndKendallTau) {
  EXPECT_NEAR(mape({110, 45}, {100, 50}), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(mape({}, {}), 0.0);
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_NEAR(kendall_tau({1, 2, 3}, {1, 3, 2}), 1.0 / 3.0, 1e-12);
  // x = 1, 2, 3; y = 1, 1, 2: pairs (1,2) tied in y, (1,3) and (2,3) concordant: 2 / sqrt(3 x 2).
  EXPECT_NEAR(kendall_tau({1, 2, 3}, {1, 1, 2}), 2.0 / std::sqrt(6.0), 1e-12);
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3}, {5, 5, 5}), 0.0);
  EXPECT_DOUBLE_EQ(kendall_tau({1}, {1}), 0.0);
}

}  // namespace
}  // namespace dtb
