// The counter-based RNG: pure, stream-separated, and with the right moments.
#include <gtest/gtest.h>

#include <cmath>

#include "reference/model/rng.h"

namespace dtb {

TEST(Rng, PureFunctionOfSeedStreamCounter) {
  EXPECT_EQ(random_bits(1, 2, 3), random_bits(1, 2, 3));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(1, 3, 2));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(2, 2, 3));
  EXPECT_NE(stream_id("qkvw"), stream_id("fcw"));
}

TEST(Rng, UniformAndNormalMoments) {
  // n = 200000 draws: the sample mean's standard error is sigma/sqrt(n) (uniform sigma
  // 0.289, normal 1), so 5 standard errors bound it; the variance's relative standard
  // error for a normal is sqrt(2/n) = 0.32%, bounded at 5x.
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const double u = random_uniform(42, 7, i);
    su += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    const double z = random_normal(42, 7, i);
    sn += z;
    sn2 += z * z;
  }
  EXPECT_GT(umin, 0.0);
  EXPECT_LT(umax, 1.0);
  EXPECT_NEAR(su / n, 0.5, 5 * 0.289 / std::sqrt(n));
  EXPECT_NEAR(sn / n, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(sn2 / n, 1.0, 5 * std::sqrt(2.0 / n));
}

}  // namespace dtb
