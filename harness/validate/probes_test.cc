// Tests of validate's probes' pure parts: the --inject parser (harness/validate/faults.h), the
// round-robin schedule of pairs and Hockney's alpha-beta fit (harness/validate/pairs.h).
#include "harness/validate/pairs.h"

#include <gtest/gtest.h>

#include <set>

#include "harness/validate/faults.h"
#include "kernels/error.h"

namespace dtb {
namespace {

TEST(ValidateMedium, InjectionParses) {
  const Injection i = parse_injection("3:compute:2", 4);
  EXPECT_EQ(i.rank, 3);
  EXPECT_DOUBLE_EQ(i.compute, 2.0);
  EXPECT_EQ(parse_injection("", 4).rank, -1);
  for (const char* bad : {"4:compute:2", "-1:compute:2", "x:compute:2", "3:disk:2", "3:compute:0.5", "3:compute:", "3",
                          "3:compute"})
    EXPECT_THROW(parse_injection(bad, 4), InputError) << bad;
}

// Round-robin pairs: every pair exactly once, no rank twice in a round; n - 1 rounds for even
// n, n for odd (one rank sits each out).
TEST(ValidateLong, PairRoundsMeetEveryPairOnce) {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    const auto rounds = pair_rounds(n);
    std::set<std::pair<int, int>> met;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << "n " << n << ": a rank twice in a round";
        EXPECT_TRUE(met.insert({a, b}).second) << "n " << n << ": pair " << a << "," << b << " twice";
      }
    }
    EXPECT_EQ(met.size(), size_t(n * (n - 1) / 2)) << n;
    if (n > 1) {
      EXPECT_EQ(rounds.size(), size_t(n % 2 ? n : n - 1)) << n;
    }
  }
  const Injection c = parse_injection("2:comm:3", 4);
  EXPECT_EQ(c.rank, 2);
  EXPECT_DOUBLE_EQ(c.comm, 3.0);
  EXPECT_DOUBLE_EQ(c.compute, 1.0);
}

// Hockney's model recovers alpha and beta from exact points; fewer than two sizes: {0, 0}.
TEST(ValidateLong, AlphaBetaFit) {
  const double alpha = 5e-6, beta = 10e9;
  std::vector<std::pair<double, double>> pts;
  for (double n : {8.0, 65536.0, 4194304.0}) pts.emplace_back(n, alpha + n / beta);
  const auto [a, b] = fit_alpha_beta(pts);
  EXPECT_NEAR(a, alpha, 1e-12);  // exact data: rounding of ~1e-3 s sums, relative 1e-15
  EXPECT_NEAR(b, beta, beta * 1e-9);
  EXPECT_EQ(fit_alpha_beta({{8.0, 1e-6}}), (std::pair<double, double>{0, 0}));
  // 1% noise on the largest message (4 us of its 420): residuals are relative, so alpha moves by
  // about 1% of itself (the 8-byte point, t = alpha + 0.8 ns, pins it), not by the microseconds
  // an unweighted fit would shift it (it went negative so on a real sweep).
  pts.back().second *= 1.01;
  const auto [a1, b1] = fit_alpha_beta(pts);
  EXPECT_NEAR(a1, alpha, 0.05 * alpha);
  EXPECT_NEAR(b1, beta, 0.02 * beta);
  const Injection h = parse_injection("2:hang", 4);
  EXPECT_TRUE(h.hang);
  EXPECT_EQ(h.rank, 2);
  EXPECT_THROW(parse_injection("4:hang", 4), InputError);
}

// The alpha-beta check is called where pairs were measured: none measured fails, not skips.
TEST(ValidateLong, AlphaBetaCheckFailsWithoutPairs) {
  const std::vector<std::vector<double>> none(kPairSizes.size(), std::vector<double>(4, 0.0));
  EXPECT_EQ(alpha_beta_check(none, {"a", "b"}, "pairs/alpha_beta").status, "fail");
  std::vector<std::vector<double>> two(kPairSizes.size(), std::vector<double>(4, 0.0));
  for (size_t s = 0; s < kPairSizes.size(); ++s) two[s][1] = 1e-6 + double(kPairSizes[s]) / 1e10;  // rank 0 - rank 1
  EXPECT_EQ(alpha_beta_check(two, {"a", "b"}, "pairs/alpha_beta").status, "pass");
}

}  // namespace
}  // namespace dtb
