// What the tests of CudaHalfOps (half_ops_test.cc, half_ops_gemm_test.cc) share: H vectors,
// one ulp of H, and the error measure "beyond one rounding step". Plain C++ (no CUDA), so
// half_ops_test_util_test.cc checks the measure on a machine without a GPU. Test code only.
//
// Error analysis. For an op output, HalfCpuOps gives c = round_H(c_f), c_f the CPU fp32
// kernel's result on the widened inputs; CudaHalfOps gives g = round_H(g_f), g_f the CUDA
// fp32 kernel's result on the same fp32 inputs (the widening is exact, and both sides get
// the same H inputs). Let d = g_f - c_f: what the fp32 kernels differ by, bounded (in norm)
// by the fp32 CUDA tests' tolerance for that op, ops_test_util.h: ||d|| <= t ||c_f||.
// Rounding to nearest moves a value by at most half an ulp of H at it, so per element
//   |g - c| <= |g - g_f| + |d| + |c_f - c| <= ulp_H(m) + |d|,   m = max(|g|, |c|)
// (half an ulp at each, taken at the larger magnitude, which has the larger or equal ulp).
// So the excess e_i = max(0, |g_i - c_i| - ulp_H(m_i)) satisfies e_i <= |d_i| and
//   ||e|| <= ||d|| <= t ||c_f|| <= t ||c|| / (1 - u_H)
// (||c - c_f|| <= u_H ||c_f||, u_H = 2^-8 for bf16, 2^-11 for fp16). excess() returns
// ||e|| / ||scale||; the tests use scale = c with the bound half_tol<H>(t) = t / (1 - u_H),
// or for a GEMM scale = mag (the same product on absolute values, as gemm_test.cc) with the
// GEMM bound directly. Where the fp32 kernels agree bitwise (d = 0: one IEEE add, a max,
// the same adds in the same order) g and c agree bitwise and the tests ask for that.
// What it catches: a forgotten write (the poison is NaN, which fails), a write instead of
// an accumulate (O(1)), a wrong index (O(1)), and an intermediate rounded to H and then
// combined (attention's softmax rounded before att @ v: excess 5e-4 (bf16), 6e-5 (fp16)
// against bounds of 8e-6). What it cannot see: a second rounding of the output itself
// (e.g. the bias added to an already rounded GEMM output), which stays within the one step
// allowed; the bitwise checks cover that for the ops whose fp32 kernels agree bitwise.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/half.h"

namespace dtb::cuda::half_test_util {

/// The unit roundoff of H: 2^-8 (bf16), 2^-11 (fp16).
template <typename H>
constexpr double unit_roundoff() {
  return std::is_same_v<H, bf16> ? 0x1p-8 : 0x1p-11;
}

/// One ulp of H at magnitude m >= 0: the spacing of H's values in m's binade,
/// 2^(floor(log2 m) - p + 1) with p = 8 (bf16) or 11 (fp16) significant bits, and the
/// subnormal spacing (2^-133, 2^-24) below the smallest normal (2^-126, 2^-14).
template <typename H>
double ulp(double m) {
  constexpr int p = std::is_same_v<H, bf16> ? 8 : 11;
  constexpr int emin = std::is_same_v<H, bf16> ? -126 : -14;  // smallest normal exponent
  int e = 0;
  (void)std::frexp(m, &e);  // m = f 2^e, f in [0.5, 1): floor(log2 m) = e - 1
  const int ex = m > 0 ? std::max(e - 1, emin) : emin;
  return std::ldexp(1.0, ex - p + 1);
}

/// The tolerance on excess() relative to ||c|| for an op whose fp32 kernels differ by
/// t relative (see the analysis above).
template <typename H>
double half_tol(double t) {
  return t / (1.0 - unit_roundoff<H>());
}

/// ||max(0, |got - want| - ulp_H(max(|got|, |want|)))|| / ||scale|| in double: the part of
/// the difference beyond one rounding step of H. 0 where got equals want (infinities
/// included); NaN if either has a NaN (so EXPECT_LE fails) or the sizes differ.
template <typename H, typename S>
double excess(const std::vector<H>& got, const std::vector<H>& want, const std::vector<S>& scale) {
  if (got.size() != want.size() || got.size() != scale.size()) return NAN;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double g = float(got[i]), c = float(want[i]);
    if (std::isnan(g) || std::isnan(c)) return NAN;
    den += double(scale[i]) * double(scale[i]);
    if (g == c) continue;
    const double e = std::abs(g - c) - ulp<H>(std::max(std::abs(g), std::abs(c)));
    if (e > 0) num += e * e;
  }
  if (num == 0) return 0;
  return std::sqrt(num / den);
}

/// excess() relative to want itself.
template <typename H>
double excess(const std::vector<H>& got, const std::vector<H>& want) {
  std::vector<double> s(want.size());
  for (size_t i = 0; i < want.size(); i++) s[i] = float(want[i]);
  return excess(got, want, s);
}

/// Whether the bit patterns are equal, element by element.
template <typename H>
bool same_bits(const std::vector<H>& a, const std::vector<H>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(H)) == 0);
}

/// n H values: uniform floats in [lo, hi) rounded to H.
template <typename H>
std::vector<H> hrand(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<H> v(n);
  for (H& x : v) x = H(dist(rng));
  return v;
}

/// The widened values and their absolute values, for the CPU float reference of a scale.
template <typename H>
std::vector<float> widen(const std::vector<H>& v) {
  return std::vector<float>(v.begin(), v.end());
}
template <typename H>
std::vector<float> abs_of(const std::vector<H>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); i++) a[i] = std::abs(float(v[i]));
  return a;
}

}  // namespace dtb::cuda::half_test_util
