// Test helpers shared by HalfCpuOps's tests (half_ops_test.cc, half_llama_ops_test.cc): random
// inputs representable in H, the recipe's exact widening and one rounding, and bitwise
// comparison naming the first difference. Test code only.
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/half.h"

namespace dtb::half_test {

using Rng = std::mt19937_64;
using FVec = std::vector<float>;
template <typename H>
using HVec = std::vector<H>;
using Tok = std::vector<int32_t>;

inline FVec rand_f(size_t n, Rng& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  FVec v(n);
  for (float& x : v) x = u(rng);
  return v;
}
// Random values representable in H: floats rounded to H.
template <typename H>
HVec<H> rand_h(size_t n, Rng& rng, float lo = -1.f, float hi = 1.f) {
  const FVec f = rand_f(n, rng, lo, hi);
  return HVec<H>(f.begin(), f.end());
}
inline Tok rand_tokens(size_t n, int lo, int hi, Rng& rng) {
  std::uniform_int_distribution<int32_t> u(lo, hi - 1);
  Tok t(n);
  for (int32_t& x : t) x = u(rng);
  return t;
}
// Exact widening, and the one rounding of the recipe.
template <typename H>
FVec widen(const HVec<H>& v) {
  return FVec(v.begin(), v.end());
}
template <typename H>
HVec<H> round_to(const FVec& v) {
  return HVec<H>(v.begin(), v.end());
}

inline uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
inline uint32_t bits_of(bf16 x) { return x.bits; }
inline uint32_t bits_of(fp16 x) { return x.bits; }

// Bitwise equality of two buffers, naming the first difference and the count.
template <typename X>
::testing::AssertionResult same_bits(const std::vector<X>& got, const std::vector<X>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i]) && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << bad << " of " << got.size() << " differ; first at " << first << ": got " << float(got[first]) << " (bits 0x"
     << std::hex << bits_of(got[first]) << "), want " << std::dec << float(want[first]) << " (bits 0x" << std::hex
     << bits_of(want[first]) << ")";
  return ::testing::AssertionFailure() << os.str();
}

struct HalfNames {
  template <typename H>
  static std::string GetName(int) {
    return std::is_same_v<H, bf16> ? "bf16" : "fp16";
  }
};
using HalfTypes = ::testing::Types<bf16, fp16>;

}  // namespace dtb::half_test
