// Tests of kernels/half.h: the bf16 and fp16 conversions against an independent reference.
// (a) every one of the 65536 bit patterns of each format survives half -> float -> half
// (NaNs come back as NaNs); (b) float -> half rounding equals IEEE round-to-nearest-even
// computed in double (std::nearbyint on the scaled significand, gradual underflow, overflow
// to inf once the rounded magnitude reaches 2^(emax+1)), over a few million random floats
// spread over every exponent, every midpoint between adjacent half values and its float
// neighbours, and named ties; (c) unit_roundoff<T>() bounds the relative rounding error.
#include "kernels/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dtb {
namespace {

/// A half format's parameters: precision p (significand bits, hidden bit included), the
/// exponent range of its normal numbers [emin, emax], and its conversions under test.
struct Format {
  const char* name;
  int p, emin, emax;
  uint16_t (*to_bits)(float);
  float (*to_float)(uint16_t);
};
constexpr Format kBf16{"bf16", 8, -126, 127, float_to_bf16_bits, bf16_bits_to_float};
constexpr Format kFp16{"fp16", 11, -14, 15, float_to_fp16_bits, fp16_bits_to_float};

/// The reference: x rounded to the format, to nearest, ties to even, in double (exact for
/// every float x and every half result). The quantum is 2^(max(e, emin) - (p-1)) for x in
/// [2^e, 2^(e+1)), i.e. subnormals below 2^emin keep the step 2^(emin-p+1); a rounded
/// magnitude of 2^(emax+1) or more is inf (IEEE 754 overflow under round to nearest).
/// NaN -> NaN, inf -> inf, signs (of zeros too) kept.
double reference_round(double x, const Format& f) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double a = std::fabs(x);
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1): a in [2^(e2-1), 2^e2)
  const int e = std::max(e2 - 1, f.emin);
  const double quantum = std::ldexp(1.0, e - (f.p - 1));
  double r = std::nearbyint(a / quantum) * quantum;  // a / quantum: exact (a power of 2)
  if (r >= std::ldexp(1.0, f.emax + 1)) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}

/// Empty when float -> half of x matches the reference (value, sign of zero, NaN-ness);
/// otherwise a description of the mismatch.
std::string mismatch(float x, const Format& f) {
  const uint16_t bits = f.to_bits(x);
  const double got = f.to_float(bits), want = reference_round(x, f);
  const bool ok = std::isnan(want) ? std::isnan(got)
                                   : got == want && std::signbit(got) == std::signbit(want);
  if (ok) return {};
  char text[160];
  std::snprintf(text, sizeof text, "%s(%a = 0x%08x): got bits 0x%04x = %a, want %a", f.name,
                double(x), std::bit_cast<uint32_t>(x), unsigned(bits), got, want);
  return text;
}

/// Runs `mismatch` over xs; fails with the count and the first few mismatches.
void expect_rounding(const std::vector<float>& xs, const Format& f) {
  long bad = 0;
  std::string first;
  for (float x : xs) {
    const std::string m = mismatch(x, f);
    if (m.empty()) continue;
    if (bad++ < 5) first += m + "\n";
  }
  EXPECT_EQ(bad, 0) << "of " << xs.size() << " floats; first mismatches:\n" << first;
}

TEST(HalfConversion, ReferenceIsRoundToNearestEven) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);  // the reference's nearbyint relies on it
  // The reference itself on a few hand-computed values.
  EXPECT_EQ(reference_round(1 + 0x1p-8, kBf16), 1.0);
  EXPECT_EQ(reference_round(1 + 3 * 0x1p-8, kBf16), 1 + 0x1p-6);
  EXPECT_EQ(reference_round(65520, kFp16), std::numeric_limits<double>::infinity());
  EXPECT_EQ(reference_round(65519, kFp16), 65504.0);
  EXPECT_EQ(reference_round(0x1.8p-25, kFp16), 0x1p-24);
  EXPECT_EQ(reference_round(0x1p-25, kFp16), 0.0);
}

// (a) half -> float -> half is the identity on all 65536 patterns; NaN patterns stay NaN
// (quieted: the payload's top bit set, sign kept).
TEST(HalfConversion, RoundTripAllBf16Patterns) {
  long bad = 0, nans = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = bf16_bits_to_float(h);
    const uint16_t back = float_to_bf16_bits(f);
    const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    nans += is_nan;
    if (is_nan) {
      bad += !std::isnan(f) || !std::isnan(bf16_bits_to_float(back)) ||
             (back & 0x8000) != (h & 0x8000);
    } else {
      bad += back != h;
      bad += bf16(f).bits != h || float(bf16::from_bits(h)) != f;  // the struct agrees
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(nans, 2 * 127);
}

TEST(HalfConversion, RoundTripAllFp16Patterns) {
  long bad = 0, nans = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = fp16_bits_to_float(h);
    const uint16_t back = float_to_fp16_bits(f);
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    nans += is_nan;
    if (is_nan) {
      bad += !std::isnan(f) || !std::isnan(fp16_bits_to_float(back)) ||
             (back & 0x8000) != (h & 0x8000);
    } else {
      bad += back != h;
      bad += fp16(f).bits != h || float(fp16::from_bits(h)) != f;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(nans, 2 * 1023);
}

// half -> float is exact: every finite pattern's float equals the value its fields encode.
TEST(HalfConversion, ToFloatDecodesFields) {
  long bad = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const double sign = (b & 0x8000) ? -1 : 1;
    {  // fp16: 5-bit exponent, bias 15
      const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
      if (e != 31) {
        const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
        const float got = fp16_bits_to_float(uint16_t(b));
        bad += got != sign * v || std::signbit(got) != (sign < 0);
      }
    }
    {  // bf16: 8-bit exponent, bias 127
      const int e = (b >> 7) & 0xff, m = b & 0x7f;
      if (e != 255) {
        const double v = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
        const float got = bf16_bits_to_float(uint16_t(b));
        bad += got != sign * v || std::signbit(got) != (sign < 0);
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

/// n random floats: uniform random bit patterns (so every exponent, subnormals, infs and
/// NaNs occur in proportion to their share of the patterns) and, for half of them, values
/// uniform in [2^e, 2^(e+1)) for a uniform random e in [-30, 20] (the range where fp16 is
/// interesting), both signs.
std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<int> exp(-30, 20);
  std::uniform_real_distribution<double> unit(1.0, 2.0);
  std::vector<float> xs(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      xs[i] = std::bit_cast<float>(bits(rng));
    } else {
      const float v = float(std::ldexp(unit(rng), exp(rng)));
      xs[i] = (bits(rng) & 1) ? -v : v;
    }
  }
  return xs;
}

// (b) Random floats over all exponents against the double reference.
TEST(HalfRounding, RandomFloatsBf16) { expect_rounding(random_floats(4'000'000, 1), kBf16); }
TEST(HalfRounding, RandomFloatsFp16) { expect_rounding(random_floats(4'000'000, 2), kFp16); }

/// Every midpoint between adjacent finite non-negative half values of `f` (and between the
/// largest and 2^(emax+1), the overflow threshold) with its float neighbours, both signs:
/// the ties, where round-to-nearest-even decides, and the values one float ulp either side.
/// Midpoints have p+1 significant bits, so they are exact floats.
std::vector<float> midpoints(const Format& f) {
  std::vector<float> xs;
  for (uint32_t b = 0; b < 0x8000; ++b) {
    const double lo = f.to_float(uint16_t(b));
    if (!std::isfinite(lo)) continue;
    const double hi_bits = f.to_float(uint16_t(b + 1));
    const double hi = std::isinf(hi_bits) ? std::ldexp(1.0, f.emax + 1) : hi_bits;
    const float mid = float((lo + hi) / 2);
    EXPECT_EQ(double(mid), (lo + hi) / 2) << "midpoint not exact at " << b;
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
      xs.insert(xs.end(), {x, -x});
  }
  return xs;
}

TEST(HalfRounding, MidpointsBf16) { expect_rounding(midpoints(kBf16), kBf16); }
TEST(HalfRounding, MidpointsFp16) { expect_rounding(midpoints(kFp16), kFp16); }

// Every finite half value itself and its float neighbours (the patterns nearest each value).
TEST(HalfRounding, ExactValuesAndNeighbours) {
  for (const Format* f : {&kBf16, &kFp16}) {
    std::vector<float> xs;
    for (uint32_t b = 0; b <= 0xffff; ++b) {
      const float v = f->to_float(uint16_t(b));
      if (std::isnan(v)) continue;
      xs.insert(xs.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, INFINITY),
                           std::nextafter(v, -INFINITY)});
    }
    expect_rounding(xs, *f);
  }
}

TEST(HalfRounding, NamedCases) {
  const float inf = std::numeric_limits<float>::infinity();
  // bf16: ties at 1 + 2^-8 (to even: 1) and 1 + 3*2^-8 (to even: 1 + 2^-6).
  EXPECT_EQ(float(bf16(1 + 0x1p-8f)), 1.0f);
  EXPECT_EQ(float(bf16(1 + 3 * 0x1p-8f)), 1 + 0x1p-6f);
  EXPECT_EQ(float(bf16(1 + 0x1p-8f + 0x1p-23f)), 1 + 0x1p-7f);  // just above the tie
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(-2.0f).bits, 0xc000);
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // overflows to inf
  EXPECT_EQ(bf16(0x1.fep127f).bits, 0x7f7f);                      // bf16's largest, kept
  EXPECT_EQ(bf16(0x1.ffp127f).bits, 0x7f80);  // tie with 2^128: to even, inf
  // fp16: tie at 1 + 2^-11 (to even: 1); 65504 (largest) kept; 65520 (tie with 2^16): inf;
  // just below 65520: 65504; 2^-25 (tie between 0 and 2^-24): 0; 1.5*2^-25: 2^-24.
  EXPECT_EQ(float(fp16(1 + 0x1p-11f)), 1.0f);
  EXPECT_EQ(float(fp16(1 + 3 * 0x1p-11f)), 1 + 0x1p-9f);
  EXPECT_EQ(fp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(fp16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(fp16(65520.0f).bits, 0x7c00);
  EXPECT_EQ(fp16(std::nextafter(65520.0f, 0.0f)).bits, 0x7bff);
  EXPECT_EQ(fp16(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(fp16(0x1p-25f).bits, 0x0000);
  EXPECT_EQ(fp16(0x1.8p-25f).bits, 0x0001);
  EXPECT_EQ(fp16(0x1p-24f).bits, 0x0001);
  EXPECT_EQ(fp16(0x1.8p-24f).bits, 0x0002);  // tie between 1 and 2 quanta: to even, 2
  EXPECT_EQ(fp16(0x1p-14f).bits, 0x0400);    // smallest normal
  EXPECT_EQ(fp16(0x1.ff8p-15f).bits, 0x03ff);  // largest subnormal, 1023 * 2^-24
  EXPECT_EQ(fp16(0x1.ffcp-15f).bits, 0x0400);  // tie 1023.5 * 2^-24: to even, 2^-14
  EXPECT_EQ(fp16(1e-30f).bits, 0x0000);
  EXPECT_EQ(fp16(-1e-30f).bits, 0x8000);  // underflow keeps the sign
  // -0.0 keeps its sign; inf stays inf; NaN stays NaN (quiet), both formats.
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(fp16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::signbit(float(bf16(-0.0f))));
  EXPECT_TRUE(std::signbit(float(fp16(-0.0f))));
  EXPECT_EQ(bf16(inf).bits, 0x7f80);
  EXPECT_EQ(bf16(-inf).bits, 0xff80);
  EXPECT_EQ(fp16(inf).bits, 0x7c00);
  EXPECT_EQ(fp16(-inf).bits, 0xfc00);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  for (float nan : {qnan, -qnan, snan, std::bit_cast<float>(0x7f800001u)}) {
    EXPECT_TRUE(std::isnan(float(bf16(nan))));
    EXPECT_TRUE(std::isnan(float(fp16(nan))));
    EXPECT_NE(bf16(nan).bits & 0x40, 0);   // quiet bit of bf16
    EXPECT_NE(fp16(nan).bits & 0x200, 0);  // quiet bit of fp16
  }
  // The conversions are constexpr.
  static_assert(float_to_bf16_bits(1.0f) == 0x3f80 && float_to_fp16_bits(65520.0f) == 0x7c00);
  static_assert(bf16_bits_to_float(0x4049) == 3.140625f && fp16_bits_to_float(0x0001) == 0x1p-24f);
}

/// Largest |round(x) - x| / |x| over random x in T's normal range [2^emin, max], and over
/// the named worst cases (just below a midpoint above a power of two).
template <typename T>
double max_relative_error(const Format& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> exp(f.emin, f.emax);
  std::uniform_real_distribution<double> unit(1.0, 2.0);
  const double largest = f.to_float(f.emax == 15 ? 0x7bff : 0x7f7f);
  double worst = 0;
  auto visit = [&](float x) {
    if (!(std::fabs(x) >= std::ldexp(1.0, f.emin) && std::fabs(x) <= largest)) return;
    const double r = float(T(x));
    worst = std::max(worst, std::fabs(r - x) / std::fabs(x));
  };
  for (int i = 0; i < 1'000'000; ++i) visit(float(std::ldexp(unit(rng), exp(rng))));
  for (int e = f.emin; e <= f.emax; ++e) {  // 2^e (1 + u), the relative worst case, and below
    float x = float(std::ldexp(1 + std::ldexp(1.0, -f.p), e));
    for (int k = 0; k < 4; ++k, x = std::nextafter(x, 0.0f)) visit(x);
  }
  return worst;
}

// (c) unit_roundoff<T>() bounds the relative error of rounding in the normal range, and is
// tight: just below 2^e (1 + u) the error is u / (1 + u) minus a float ulp.
TEST(HalfUnitRoundoff, BoundsRelativeError) {
  EXPECT_EQ(unit_roundoff<bf16>(), std::ldexp(1.0, -kBf16.p));
  EXPECT_EQ(unit_roundoff<fp16>(), std::ldexp(1.0, -kFp16.p));
  EXPECT_EQ(unit_roundoff<float>(), std::ldexp(1.0, -std::numeric_limits<float>::digits));
  EXPECT_EQ(unit_roundoff<double>(), std::ldexp(1.0, -std::numeric_limits<double>::digits));
  const double wb = max_relative_error<bf16>(kBf16, 3), wh = max_relative_error<fp16>(kFp16, 4);
  EXPECT_LE(wb, unit_roundoff<bf16>());
  EXPECT_LE(wh, unit_roundoff<fp16>());
  EXPECT_GT(wb, 0.99 * unit_roundoff<bf16>() / (1 + unit_roundoff<bf16>()));
  EXPECT_GT(wh, 0.99 * unit_roundoff<fp16>() / (1 + unit_roundoff<fp16>()));
  // double -> float, for the float entry.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unit(1.0, 2.0);
  std::uniform_int_distribution<int> exp(-126, 127);
  double wf = 0;
  for (int i = 0; i < 100'000; ++i) {
    const double x = std::ldexp(unit(rng), exp(rng));
    if (x > std::numeric_limits<float>::max()) continue;
    wf = std::max(wf, std::fabs(double(float(x)) - x) / x);
  }
  EXPECT_LE(wf, unit_roundoff<float>());
}

TEST(HalfTypes, TraitsAndConvert) {
  static_assert(is_half_v<bf16> && is_half_v<fp16> && !is_half_v<float>);
  static_assert(std::is_same_v<acc_t<bf16>, float> && std::is_same_v<acc_t<double>, double>);
  const std::vector<float> src = {1.0f, 1 + 0x1p-8f, 65520.0f, -0.0f};
  std::vector<bf16> b(src.size());
  std::vector<fp16> h(src.size());
  std::vector<float> back(src.size());
  convert(b.data(), src.data(), src.size());
  convert(h.data(), src.data(), src.size());
  EXPECT_EQ(b[1].bits, 0x3f80);
  EXPECT_EQ(h[2].bits, 0x7c00);
  EXPECT_EQ(h[3].bits, 0x8000);
  convert(back.data(), b.data(), b.size());
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_TRUE(std::signbit(back[3]));
}

// (d) The bulk conversions (convert_to_float / convert_from_float, and convert<> over them)
// are bitwise the scalar functions, element by element: on x86 with F16C the fp16 ones run
// the hardware instructions with the NaN lanes fixed up, so every NaN payload is checked
// too; tails (lengths not a multiple of the vector width) and misaligned pointers as well.

uint32_t float_bits(float x) { return std::bit_cast<uint32_t>(x); }

/// Every 16-bit pattern, in order, as H.
template <typename H>
std::vector<H> all_patterns() {
  std::vector<H> v(0x10000);
  for (uint32_t b = 0; b <= 0xffff; ++b) v[b] = H::from_bits(uint16_t(b));
  return v;
}

/// The scalar functions of H.
uint16_t scalar_bits(bf16, float x) { return float_to_bf16_bits(x); }
uint16_t scalar_bits(fp16, float x) { return float_to_fp16_bits(x); }
float scalar_float(bf16 h) { return bf16_bits_to_float(h.bits); }
float scalar_float(fp16 h) { return fp16_bits_to_float(h.bits); }

/// Counts the elements where got (from the bulk path) differs from the scalar function of
/// src, and describes the first few.
template <typename H>
long count_to_float_mismatches(const H* src, const float* got, size_t n, std::string* first) {
  long bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t want = float_bits(scalar_float(src[i]));
    if (float_bits(got[i]) == want) continue;
    if (bad++ < 5) {
      char text[120];
      std::snprintf(text, sizeof text, "[%zu] 0x%04x: got 0x%08x, want 0x%08x\n", i, unsigned(src[i].bits),
                    float_bits(got[i]), want);
      *first += text;
    }
  }
  return bad;
}
template <typename H>
long count_from_float_mismatches(const float* src, const H* got, size_t n, std::string* first) {
  long bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t want = scalar_bits(H(), src[i]);
    if (got[i].bits == want) continue;
    if (bad++ < 5) {
      char text[120];
      std::snprintf(text, sizeof text, "[%zu] %a (0x%08x): got 0x%04x, want 0x%04x\n", i, double(src[i]),
                    float_bits(src[i]), unsigned(got[i].bits), unsigned(want));
      *first += text;
    }
  }
  return bad;
}

template <typename H>
void expect_all_patterns_to_float() {
  const std::vector<H> src = all_patterns<H>();
  std::vector<float> got(src.size(), 12345.f);
  convert_to_float(got.data(), src.data(), src.size());
  std::string first;
  EXPECT_EQ(count_to_float_mismatches(src.data(), got.data(), src.size(), &first), 0) << first;
  std::vector<float> via_template(src.size(), 12345.f);
  convert(via_template.data(), src.data(), src.size());
  first.clear();
  EXPECT_EQ(count_to_float_mismatches(src.data(), via_template.data(), src.size(), &first), 0) << first;
}

TEST(HalfBulkConversion, AllFp16PatternsToFloat) { expect_all_patterns_to_float<fp16>(); }
TEST(HalfBulkConversion, AllBf16PatternsToFloat) { expect_all_patterns_to_float<bf16>(); }

/// The floats float -> half is checked on: the named ties and specials (fp16's largest
/// 65504, the overflow tie 65520 and its neighbours, the underflow ties 2^-25 and
/// 1.5 * 2^-25, 1 + 2^-11, +-0, +-inf, float subnormals and max, quiet and signalling NaNs
/// with various payloads and both signs), each at every lane offset of a 16-wide block;
/// every midpoint between adjacent values of both formats with its neighbours; and ~4M
/// random floats (uniform bit patterns, so every exponent and many NaNs, and values spread
/// over fp16's range).
std::vector<float> from_float_inputs() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> named = {65504.f, 65520.f, std::nextafter(65520.f, 0.f), std::nextafter(65520.f, inf),
                              -65504.f, -65520.f, 65519.f, 0x1p16f, 0x1p-25f, -0x1p-25f, 0x1.8p-25f,
                              std::nextafter(0x1p-25f, 0.f), std::nextafter(0x1p-25f, inf), 0x1p-24f,
                              0x1.8p-24f, 0x1p-14f, 0x1.ff8p-15f, 0x1.ffcp-15f, 1 + 0x1p-11f, 1 + 3 * 0x1p-11f,
                              1 + 0x1p-8f, 1 + 3 * 0x1p-8f, 0x1.ffp127f, 0x1.fep127f, 1.0f, -1.0f, 0.0f, -0.0f,
                              inf, -inf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(), 1e-30f, -1e-30f};
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7fc00001u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7f802000u,
                       0xffc02000u, 0x7fffffffu, 0xffffffffu, 0x7fbfffffu, 0x7fe00000u, 0x7f801fffu})
    named.push_back(std::bit_cast<float>(nan));
  std::vector<float> xs;
  for (int lane = 0; lane < 16; ++lane) {  // every named value at every lane of a block
    xs.insert(xs.end(), size_t(lane), 0.5f);
    xs.insert(xs.end(), named.begin(), named.end());
  }
  for (const Format* f : {&kFp16, &kBf16}) {
    const std::vector<float> m = midpoints(*f);
    xs.insert(xs.end(), m.begin(), m.end());
  }
  const std::vector<float> r = random_floats(4'000'000, 6);
  xs.insert(xs.end(), r.begin(), r.end());
  return xs;
}

template <typename H>
void expect_from_float(const std::vector<float>& xs) {
  std::vector<H> got(xs.size(), H::from_bits(0x1234));
  convert_from_float(got.data(), xs.data(), xs.size());
  std::string first;
  EXPECT_EQ(count_from_float_mismatches(xs.data(), got.data(), xs.size(), &first), 0)
      << "of " << xs.size() << "; first:\n" << first;
  std::vector<H> via_template(xs.size(), H::from_bits(0x1234));
  convert(via_template.data(), xs.data(), xs.size());
  first.clear();
  EXPECT_EQ(count_from_float_mismatches(xs.data(), via_template.data(), xs.size(), &first), 0) << first;
}

TEST(HalfBulkConversion, FloatsToFp16) { expect_from_float<fp16>(from_float_inputs()); }
TEST(HalfBulkConversion, FloatsToBf16) { expect_from_float<bf16>(from_float_inputs()); }

/// Lengths 0..40 (empty, shorter than one vector, every tail) from and to pointers at
/// element offsets 0..7 (so neither 16- nor 32-byte aligned): the n elements match the
/// scalar functions, and nothing before or after them is written.
template <typename H>
void expect_tails_and_offsets() {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  const size_t kPad = 8, kMax = 40;
  const uint32_t guard_f = 0x7f8abcdeu;  // a NaN pattern no conversion produces here
  const uint16_t guard_h = 0x7d5a;
  long bad = 0, guards = 0;
  std::string first;
  for (size_t n = 0; n <= kMax; ++n) {
    for (size_t off = 0; off < 8; ++off) {
      // Inputs: random bit patterns (NaNs included) and a few named ones, as floats and halves.
      std::vector<float> fsrc(kMax + 2 * kPad);
      std::vector<H> hsrc(kMax + 2 * kPad);
      for (size_t i = 0; i < fsrc.size(); ++i) {
        fsrc[i] = i % 5 == 3 ? 65520.f : i % 7 == 2 ? 0x1.8p-25f : std::bit_cast<float>(bits(rng));
        hsrc[i] = H::from_bits(uint16_t(bits(rng)));
      }
      std::vector<H> hdst(kMax + 2 * kPad, H::from_bits(guard_h));
      std::vector<float> fdst(kMax + 2 * kPad, std::bit_cast<float>(guard_f));
      const size_t in_off = (off * 3) % 8;  // the input at another misalignment
      convert_from_float(hdst.data() + off, fsrc.data() + in_off, n);
      convert_to_float(fdst.data() + off, hsrc.data() + in_off, n);
      bad += count_from_float_mismatches(fsrc.data() + in_off, hdst.data() + off, n, &first);
      bad += count_to_float_mismatches(hsrc.data() + in_off, fdst.data() + off, n, &first);
      for (size_t i = 0; i < hdst.size(); ++i) {
        if (i >= off && i < off + n) continue;
        guards += hdst[i].bits != guard_h;
        guards += float_bits(fdst[i]) != guard_f;
      }
    }
  }
  EXPECT_EQ(bad, 0) << first;
  EXPECT_EQ(guards, 0) << "elements outside [dst, dst + n) written";
}

TEST(HalfBulkConversion, TailsAndMisalignedPointersFp16) { expect_tails_and_offsets<fp16>(); }
TEST(HalfBulkConversion, TailsAndMisalignedPointersBf16) { expect_tails_and_offsets<bf16>(); }

}  // namespace
}  // namespace dtb
