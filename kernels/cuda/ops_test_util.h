// What the tests of the CUDA ops (ops_test.cc, attention_test.cc, crossentropy_test.cc,
// cuda_ops_test.cc) share: the fp32 tolerance, random token ids and the relative norm of a
// difference. Test code only.
//
// Tolerances. Float unit roundoff u = 2^-24. Both sides round; they differ in summation
// order (warp trees and cuBLASLt tiles vs left-to-right loops and OpenBLAS), in FMA
// contraction (nvcc contracts a*b+c by default, g++ on x86-64 without -mfma does not), and in
// expf/tanhf (CUDA: <= 2 ulp). A sum of k random terms rounded in any order has a relative
// error of ~u sqrt(k) (a random walk of the per-add roundings), so the relative norm
// ||gpu - cpu|| / ||cpu|| of an output whose elements are k-term sums is expected near
// u sqrt(k); tol_fp32(k) = 4 u (sqrt(k) + 4) allows 4x that plus a few ulp of elementwise
// work (1.2e-6 at k = 1, 2.9e-6 at k = 64). Any indexing bug gives O(1e-2..1).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"

namespace dtb::cuda::ops_test_util {

using test_util::FVec;
using test_util::kU;


inline double tol_fp32(double k) { return 4.0 * kU * (std::sqrt(k) + 4.0); }


inline std::vector<int32_t> ids(size_t n, int V, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// ||got - want|| / ||want|| in double; NaN if got has a NaN (so EXPECT_LE fails), 0 if equal.
inline double rel_err(const FVec& got, const FVec& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  if (num == 0) return 0;
  return std::sqrt(num / den);
}

}  // namespace dtb::cuda::ops_test_util
