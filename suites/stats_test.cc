// Tests of suites/stats.h: the median (odd and even counts, empty), the summary, and the median
// after iterative outlier removal that dtbench validate's baselines use.
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

}  // namespace
}  // namespace dtb
