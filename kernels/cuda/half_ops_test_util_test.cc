// Tests of the error measure the CudaHalfOps tests use (half_ops_test_util.h): ulp<H> against
// the spacing of every H value, and excess() on crafted differences. Host code only: these run
// without a GPU.
#include "kernels/cuda/half_ops_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace dtb::cuda::half_test_util {
namespace {

// ulp<H>(|h|) is the distance from h to the next H value up, for every finite positive h
// but the largest (all 2^15 positive patterns minus the non-finite ones).
template <typename H>
void check_ulp_against_every_value() {
  const uint16_t inf = std::is_same_v<H, bf16> ? 0x7f80 : 0x7c00;
  for (uint16_t b = 0; b + 1 < inf; b++) {
    const double x = float(H::from_bits(b)), next = float(H::from_bits(uint16_t(b + 1)));
    ASSERT_EQ(ulp<H>(x), next - x) << "bits " << b;
  }
}

TEST(HalfOpsTestUtil, UlpIsTheSpacingOfEveryBf16Value) { check_ulp_against_every_value<bf16>(); }
TEST(HalfOpsTestUtil, UlpIsTheSpacingOfEveryFp16Value) { check_ulp_against_every_value<fp16>(); }

template <typename H>
void check_excess() {
  std::mt19937 rng(1);
  // Magnitudes in [0.25, 1), both signs, none zero (a step down from 0 is no H value);
  // element 7 mid-binade, so two steps up stay in its binade.
  std::vector<H> want = hrand<H>(1000, rng, 0.25f, 1.0f);
  for (size_t i = 0; i < want.size(); i += 3) want[i] = H(-float(want[i]));
  want[7] = H(0.75f);
  EXPECT_EQ(excess(want, want), 0.0);
  // Every element one step away (up or down, at the larger magnitude's spacing): allowed.
  std::vector<H> one = want;
  for (size_t i = 0; i < one.size(); i++) one[i] = H::from_bits(uint16_t(want[i].bits + (i % 2 ? 1 : -1)));
  EXPECT_EQ(excess(one, want), 0.0);
  // One element two steps away: the excess is one step there, relative to ||want||.
  std::vector<H> two = want;
  two[7] = H::from_bits(uint16_t(want[7].bits + 2));
  double norm = 0;
  for (const H h : want) norm += double(float(h)) * double(float(h));
  const double step = std::abs(double(float(two[7])) - double(float(want[7]))) / 2;
  EXPECT_NEAR(excess(two, want), step / std::sqrt(norm), 1e-12);
  EXPECT_GT(excess(two, want), 0.0);
  // A poisoned (NaN) element fails any bound; so do unequal sizes.
  std::vector<H> nan = want;
  nan[3] = H::from_bits(0xFFFF);
  EXPECT_TRUE(std::isnan(excess(nan, want)));
  EXPECT_TRUE(std::isnan(excess(std::vector<H>(want.begin(), want.end() - 1), want)));
  EXPECT_TRUE(same_bits(want, want));
  EXPECT_FALSE(same_bits(one, want));
}

TEST(HalfOpsTestUtil, ExcessAllowsOneRoundingStepBf16) { check_excess<bf16>(); }
TEST(HalfOpsTestUtil, ExcessAllowsOneRoundingStepFp16) { check_excess<fp16>(); }

}  // namespace
}  // namespace dtb::cuda::half_test_util
