// Tests of kernels/fp8.h against references written here, apart from it:
// (a) decoding: every one of the 256 codes of E4M3 and E5M2 against the value the OFP8 spec
//     gives it ((-1)^s 2^(e-bias) (1 + m/2^M), exponent 0 subnormal, the NaN and inf codes),
//     computed in double with std::ldexp;
// (b) encoding: the nearest of the format's finite values (a linear search over that table),
//     ties to the even code, magnitudes from the largest finite value up saturating to it, NaN
//     to 0x7f; over every midpoint between neighbours and its float neighbours, 300000 random
//     floats over every exponent, and hand-worked values (saturation, subnormals, signed zero);
// (c) E8M0: the smallest power of two 2^k >= v, k in [-127, 127], for every float exponent and
//     the mantissas where the rounding turns, with TE's NaN / inf codes;
// (d) an MXFP8 block worked by hand.
#include "kernels/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dtb {
namespace {

struct FormatSpec {
  Fp8Format f;
  const char* name;
  int e_bits, m_bits, bias;
  bool has_inf;  // E5M2: exponent all ones is inf / NaN; E4M3: only S.1111.111 is NaN
};
constexpr FormatSpec kE4M3{Fp8Format::e4m3, "e4m3", 4, 3, 7, false};
constexpr FormatSpec kE5M2{Fp8Format::e5m2, "e5m2", 5, 2, 15, true};

/// The value of `code` by the OFP8 spec, in double (exact): NaN for the NaN codes, +-inf for E5M2's.
double spec_value(const FormatSpec& s, int code) {
  const int sign = code >> 7, e = (code >> s.m_bits) & ((1 << s.e_bits) - 1), m = code & ((1 << s.m_bits) - 1);
  const int e_max = (1 << s.e_bits) - 1;
  double v;
  if (s.has_inf && e == e_max) v = m == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
  else if (!s.has_inf && e == e_max && m == (1 << s.m_bits) - 1) v = std::nan("");
  else if (e == 0) v = std::ldexp(double(m), 1 - s.bias - s.m_bits);
  else v = std::ldexp(1.0 + std::ldexp(double(m), -s.m_bits), e - s.bias);
  return sign ? -v : v;
}

/// The positive finite codes in increasing value (code order is value order for them).
std::vector<int> finite_codes(const FormatSpec& s) {
  std::vector<int> c;
  for (int code = 0; code < 128; ++code)
    if (std::isfinite(spec_value(s, code))) c.push_back(code);
  return c;
}

/// The reference encoder: NaN -> 0x7f; |x| >= largest finite -> it (saturation; a value between
/// the largest and the next binade's would-be neighbour rounds to the largest or overflows, and
/// saturates either way); else the nearest finite value, ties to the even code (a linear search).
int reference_encode(const FormatSpec& s, float x) {
  static const std::vector<int> codes4 = finite_codes(kE4M3), codes5 = finite_codes(kE5M2);
  const std::vector<int>& codes = s.f == Fp8Format::e4m3 ? codes4 : codes5;
  if (std::isnan(x)) return 0x7f;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (a >= spec_value(s, codes.back())) return sign | codes.back();
  int best = codes[0];
  double best_d = std::fabs(a - spec_value(s, best));
  for (int c : codes) {
    const double d = std::fabs(a - spec_value(s, c));
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) best = c, best_d = d;
  }
  return sign | best;
}

void expect_encodes(const FormatSpec& s, float x) {
  const int want = reference_encode(s, x), got = float_to_fp8_bits(x, s.f);
  ASSERT_EQ(got, want) << s.name << " x = " << x << " (" << std::hexfloat << x << ")";
}

TEST(Fp8, EveryCodeDecodesToItsSpecValue) {
  for (const FormatSpec& s : {kE4M3, kE5M2}) {
    int nans = 0;
    for (int code = 0; code < 256; ++code) {
      const double want = spec_value(s, code);
      const float got = fp8_bits_to_float(uint8_t(code), s.f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << s.name << " code " << code;
        ++nans;
      } else {
        EXPECT_EQ(double(got), want) << s.name << " code " << code;
        EXPECT_EQ(std::signbit(got), code >= 128) << s.name << " code " << code;  // -0 too
      }
    }
    EXPECT_EQ(nans, s.has_inf ? 6 : 2) << s.name;  // E5M2: S.11111.{01,10,11}; E4M3: S.1111.111
  }
  EXPECT_EQ(fp8_bits_to_float(0x7e, Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_bits_to_float(0x7b, Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8_bits_to_float(0x01, Fp8Format::e4m3), 0x1p-9f);
  EXPECT_EQ(fp8_bits_to_float(0x01, Fp8Format::e5m2), 0x1p-16f);
  EXPECT_EQ(fp8_bits_to_float(0x7c, Fp8Format::e5m2), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_max(Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e5m2), 57344.0f);
}

TEST(Fp8, EveryFiniteValueRoundTrips) {
  for (const FormatSpec& s : {kE4M3, kE5M2})
    for (int code = 0; code < 256; ++code) {
      const float v = fp8_bits_to_float(uint8_t(code), s.f);
      if (std::isfinite(v)) {
        EXPECT_EQ(float_to_fp8_bits(v, s.f), code) << s.name << " code " << code;
      }
    }
}

TEST(Fp8, MidpointsAndTheirNeighboursRoundToNearestEven) {
  for (const FormatSpec& s : {kE4M3, kE5M2}) {
    const std::vector<int> codes = finite_codes(s);
    std::vector<double> points;
    for (size_t i = 0; i + 1 < codes.size(); ++i)
      points.push_back((spec_value(s, codes[i]) + spec_value(s, codes[i + 1])) / 2);
    // Past the largest: its midpoint with the next binade's value, and far beyond.
    const double top = spec_value(s, codes.back()), ulp = top - spec_value(s, codes[codes.size() - 2]);
    points.push_back(top + ulp / 2);
    points.push_back(top * 4);
    for (double p : points) {
      const float mid = float(p);  // exact: a midpoint has one more significant bit than the format
      ASSERT_EQ(double(mid), p);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
        for (float y : {x, -x}) expect_encodes(s, y);
    }
  }
}

TEST(Fp8, RandomFloatsOverEveryExponent) {
  std::mt19937 rng(2209);
  std::uniform_int_distribution<uint32_t> bits;
  for (const FormatSpec& s : {kE4M3, kE5M2})
    for (int i = 0; i < 300000; ++i) {
      // Exponents from 2^-30 to 2^20 (all of both formats' ranges and well beyond each end), any mantissa.
      const uint32_t u = bits(rng);
      const uint32_t exp = 97u + (u >> 9) % 51u;
      const float x = std::bit_cast<float>((u & 0x80000000u) | (exp << 23) | (bits(rng) & 0x7fffffu));
      expect_encodes(s, x);
    }
}

TEST(Fp8, HandWorkedValues) {
  constexpr Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  const float inf = std::numeric_limits<float>::infinity();
  // Saturation: the largest finite value, the tie above it (to 448, the even neighbour), beyond, inf.
  EXPECT_EQ(float_to_fp8_bits(448.0f, e4), 0x7e);
  EXPECT_EQ(float_to_fp8_bits(464.0f, e4), 0x7e);
  EXPECT_EQ(float_to_fp8_bits(480.0f, e4), 0x7e);
  EXPECT_EQ(float_to_fp8_bits(inf, e4), 0x7e);
  EXPECT_EQ(float_to_fp8_bits(-inf, e4), 0xfe);
  EXPECT_EQ(float_to_fp8_bits(61440.0f, e5), 0x7b);  // the tie above 57344 goes to 2^16, which saturates
  EXPECT_EQ(float_to_fp8_bits(-1e30f, e5), 0xfb);
  EXPECT_EQ(float_to_fp8_bits(inf, e5), 0x7b);
  // NaN, of either sign: 0x7f, as CUDA's __nv_cvt_float_to_fp8.
  EXPECT_EQ(float_to_fp8_bits(std::nanf(""), e4), 0x7f);
  EXPECT_EQ(float_to_fp8_bits(-std::nanf(""), e5), 0x7f);
  // One, two, and a value that rounds up into the next binade (1.9375 = 1 + 15/16 -> 2 in E4M3).
  EXPECT_EQ(float_to_fp8_bits(1.0f, e4), 0x38);
  EXPECT_EQ(float_to_fp8_bits(-2.0f, e4), 0xc0);
  EXPECT_EQ(float_to_fp8_bits(1.9375f, e4), 0x40);
  EXPECT_EQ(float_to_fp8_bits(1.0f, e5), 0x3c);
  EXPECT_EQ(float_to_fp8_bits(1.125f, e5), 0x3c);  // tie between 1 (even) and 1.25
  EXPECT_EQ(float_to_fp8_bits(1.375f, e5), 0x3e);  // tie between 1.25 and 1.5 (even)
  // Subnormals: the smallest, half of it (a tie to zero), 1.5 of it (a tie to 2, even), a signed zero.
  EXPECT_EQ(float_to_fp8_bits(0x1p-9f, e4), 0x01);
  EXPECT_EQ(float_to_fp8_bits(0x1p-10f, e4), 0x00);
  EXPECT_EQ(float_to_fp8_bits(0x1.000002p-10f, e4), 0x01);
  EXPECT_EQ(float_to_fp8_bits(0x1.8p-9f, e4), 0x02);
  EXPECT_EQ(float_to_fp8_bits(-0x1p-12f, e4), 0x80);
  EXPECT_EQ(float_to_fp8_bits(0x1p-16f, e5), 0x01);
  EXPECT_EQ(float_to_fp8_bits(0x1p-17f, e5), 0x00);
  EXPECT_EQ(float_to_fp8_bits(0x1.ep-7f, e4), 0x08);  // 7.5 subnormal quanta: the tie goes to 8, 2^-6 (even)
  EXPECT_EQ(float_to_fp8_bits(-0.0f, e5), 0x80);
  EXPECT_EQ(float_to_fp8_bits(0x1p-149f, e4), 0x00);
}

/// The reference E8M0 encoder: the smallest k in [-127, 127] with 2^k >= v (saturating at 127).
int reference_e8m0(float v) {
  if (std::isnan(v)) return 0xff;
  if (std::isinf(v)) return 0xfe;
  for (int k = -127; k <= 127; ++k)
    if (std::ldexp(1.0, k) >= double(v)) return k + 127;
  return 0xfe;
}

TEST(Fp8, E8m0RoundsUpToAPowerOfTwo) {
  for (uint32_t exp = 0; exp < 255; ++exp)
    for (uint32_t mant : {0u, 1u, 0x3fffffu, 0x400000u, 0x400001u, 0x7fffffu}) {
      const float v = std::bit_cast<float>((exp << 23) | mant);
      ASSERT_EQ(float_to_e8m0_bits(v), reference_e8m0(v)) << std::hexfloat << v;
    }
  EXPECT_EQ(float_to_e8m0_bits(std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_e8m0_bits(std::nanf("")), 0xff);
  EXPECT_EQ(float_to_e8m0_bits(1.0f), 127);
  EXPECT_EQ(float_to_e8m0_bits(1.5f), 128);
  EXPECT_EQ(float_to_e8m0_bits(0.0f), 0);
  for (int e = 0; e < 255; ++e) {  // the scale a code stands for, and the multiplier that quantizes with it
    const float scale = e8m0_bits_to_float(uint8_t(e));
    EXPECT_EQ(double(scale), std::ldexp(1.0, e - 127)) << e;
    if (e > 0 && e < 254) {
      EXPECT_EQ(double(e8m0_quantize_multiplier(uint8_t(e))), std::ldexp(1.0, 127 - e)) << e;
    }
  }
  EXPECT_TRUE(std::isnan(e8m0_bits_to_float(0xff)));
  // The multiplier at the codes TE special-cases (exp2f_rcp since its PR #2647): 2^127, 2^-127, NaN.
  EXPECT_EQ(double(e8m0_quantize_multiplier(0)), std::ldexp(1.0, 127));
  EXPECT_EQ(double(e8m0_quantize_multiplier(0xfe)), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(e8m0_quantize_multiplier(0xff)));
  EXPECT_EQ(float_to_e8m0_bits(-1.5f), 128);  // the sign bit is ignored
}

TEST(Fp8, MxBlockWorkedByHand) {
  // amax 3: 3 / 448 = 0.0067 -> 2^-7 (e = 120); the elements times 2^7: 3 -> 384 (E4M3 0x7c), -1 -> -128
  // (0xf0), 0.01 -> 1.28 -> 1.25 (0x3a), 1e-4 -> 0.0128 -> 0.013671875 = 7/512 (0x07, a subnormal).
  std::vector<float> x(32, 0.0f);
  x[0] = 3.0f, x[1] = -1.0f, x[2] = 0.01f, x[3] = 1e-4f, x[31] = std::nanf("");
  std::vector<uint8_t> q(32);
  const uint8_t e = mxfp8_quantize_block(q.data(), x.data(), 32, Fp8Format::e4m3);
  EXPECT_EQ(e, 120);
  EXPECT_EQ(q[0], 0x7c);
  EXPECT_EQ(q[1], 0xf0);
  EXPECT_EQ(q[2], 0x3a);
  EXPECT_EQ(q[3], 0x07);
  EXPECT_EQ(q[4], 0x00);
  EXPECT_EQ(q[31], 0x7f);  // a NaN element stays NaN and does not set the scale
  EXPECT_EQ(fp8_bits_to_float(q[0], Fp8Format::e4m3) * e8m0_bits_to_float(e), 3.0f);
  // An amax of exactly 448 * 2^k gives 2^k, and no element saturates.
  x.assign(32, 0.5f);
  x[7] = 448.0f * 4;
  EXPECT_EQ(mxfp8_quantize_block(q.data(), x.data(), 32, Fp8Format::e4m3), 129);
  EXPECT_EQ(q[7], 0x7e);
  // All zeros: e = 0, codes 0.
  x.assign(32, 0.0f);
  EXPECT_EQ(mxfp8_quantize_block(q.data(), x.data(), 32, Fp8Format::e5m2), 0);
  for (uint8_t b : q) EXPECT_EQ(b, 0);
  // A tiny block (amax 2^-130, below 448 · 2^-127): e = 0, the elements times 2^127 -> 2^-3 (0x20).
  x.assign(32, 0.0f);
  x[5] = 0x1p-130f;
  EXPECT_EQ(mxfp8_quantize_block(q.data(), x.data(), 32, Fp8Format::e4m3), 0);
  EXPECT_EQ(q[5], 0x20);
  // A block holding an infinity: e = 0xfe; inf saturates to 448, 1e38 times 2^-127 = 0.5877 -> 0.5625
  // (0x31), -1 times 2^-127 flushes to -0.
  x.assign(32, 0.0f);
  x[0] = std::numeric_limits<float>::infinity(), x[1] = 1e38f, x[2] = -1.0f;
  EXPECT_EQ(mxfp8_quantize_block(q.data(), x.data(), 32, Fp8Format::e4m3), 0xfe);
  EXPECT_EQ(q[0], 0x7e);
  EXPECT_EQ(q[1], 0x31);
  EXPECT_EQ(q[2], 0x80);
}

}  // namespace
}  // namespace dtb
