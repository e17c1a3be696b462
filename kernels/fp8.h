// FP8 storage formats for FP8 training (Micikevicius et al. 2022, "FP8 Formats for Deep
// Learning", arXiv 2209.05433; the OCP 8-bit Floating Point Specification (OFP8) rev. 1.0) and
// the E8M0 block scale of the OCP Microscaling Formats (MX) Specification v1.0:
//
//   format  bits     bias  largest finite    smallest normal  smallest subnormal  inf  NaN
//   E4M3    1, 4, 3  7     448 (0x7e)        2^-6             2^-9                none S.1111.111
//   E5M2    1, 5, 2  15    57344 (0x7b)      2^-14            2^-16               yes  S.11111.{01,10,11}
//   E8M0    0, 8, 0  127   2^127 (0xfe)      2^-127 (0x00)    -                   none 0xff
//
// The conversions are those of CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt), which the
// __nv_fp8_e4m3 / __nv_fp8_e5m2 constructors call and Transformer Engine casts with (on Hopper
// the PTX instruction cvt.rn.satfinite.{e4m3,e5m2}x2.f32): round to nearest, ties to even, with
// gradual underflow into the subnormals; a magnitude that rounds past the largest finite value,
// infinity included, saturates to it (sign kept); every NaN becomes 0x7f (a positive NaN in both
// formats). Decoding is exact in float. kernels/fp8_test.cc checks every one against a reference
// written apart from it (the nearest of the format's 256 decoded values).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/half.h"  // half_detail::bit_cast

namespace dtb {

/// An FP8 element format: E4M3 (weights and activations; gradients too under the "e4m3"
/// recipe format) or E5M2 (gradients under the "hybrid" format), as Transformer Engine's
/// recipe.Format names them.
enum class Fp8Format : uint8_t { e4m3, e5m2 };

/// The granularity of an FP8 tensor's scales (kernels/cpu/fp8_gemm.h lays each out):
///   per_tensor     one scale (Transformer Engine's delayed and current scaling)
///   tile_1x128     one per 128 consecutive elements along the GEMM's reduction dimension
///                  (DeepSeek-V3 Sec. 3.3.1, TE's Float8BlockScaling for inputs and gradients)
///   block_128x128  one per 128 x 128 block (DeepSeek-V3's and Float8BlockScaling's weights)
///   mx_1x32        one E8M0 power of two per 32 elements along the reduction dimension (OCP MX v1.0,
///                  TE's MXFP8BlockScaling)
enum class Fp8Scaling : uint8_t { per_tensor, tile_1x128, block_128x128, mx_1x32 };
/// "per_tensor", "tile_1x128", "block_128x128", "mx_1x32".
constexpr const char* to_string(Fp8Scaling s) {
  return s == Fp8Scaling::per_tensor   ? "per_tensor"
         : s == Fp8Scaling::tile_1x128 ? "tile_1x128"
         : s == Fp8Scaling::block_128x128 ? "block_128x128"
                                          : "mx_1x32";
}

/// How one operand of an FP8 GEMM is quantized: element format, granularity and, for per_tensor,
/// the scale that multiplies it before the cast (delayed: the history's; current: from the whole
/// tensor's amax, which a sharded tensor reduces over its group first: reference/training/
/// fp8_linear.h). The other granularities
/// compute their scales from each tile's or block's own amax.
struct Fp8Operand {
  Fp8Format format = Fp8Format::e4m3;
  Fp8Scaling scaling = Fp8Scaling::per_tensor;
  float scale = 1.0f;
};

/// The largest finite magnitude of `f`: 448 (E4M3), 57344 (E5M2): Transformer Engine's
/// fp8_dtype_max, the FP8_MAX of its scale update.
constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

namespace fp8_detail {
/// Mantissa bits, exponent bias, the largest finite code and the float bits of the magnitude from
/// which a value saturates (the largest finite value plus half its ulp: 464 and 61440; at exactly
/// that magnitude E4M3 ties to 448, its even neighbour, and E5M2 ties to its even neighbour 2^16,
/// which saturates: from there on the result is the largest finite value either way).
struct Spec {
  uint32_t m, bias;
  uint8_t max_code;
  uint32_t saturate_from;
};
constexpr Spec spec(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Spec{3, 7, 0x7e, 0x43e80000u}    // 464.0f
                              : Spec{2, 15, 0x7b, 0x47700000u};  // 61440.0f
}
}  // namespace fp8_detail

/// float -> FP8 bits of format `f`, rounded to nearest even and saturated (see the file comment):
/// NaN -> 0x7f; |x| >= 464 (E4M3) or 61440 (E5M2), infinity included -> +-largest finite; below
/// the smallest normal -> a subnormal or a signed zero (a half of the smallest subnormal ties to
/// zero). Constant-time, no table.
constexpr uint8_t float_to_fp8_bits(float x, Fp8Format f) {
  const fp8_detail::Spec s = fp8_detail::spec(f);
  const uint32_t u = half_detail::bit_cast<uint32_t>(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a >= s.saturate_from) return uint8_t(sign | s.max_code);
  const uint32_t min_normal = (127u + 1u - s.bias) << 23;
  if (a >= min_normal) {
    // Keep the top m mantissa bits, rounding the 23 - m dropped ones to nearest even (a carry
    // moves into the exponent, as it should), then rebias the exponent from 127 to s.bias.
    const uint32_t drop = 23u - s.m;
    const uint32_t r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
    return uint8_t(sign | (r - ((127u - s.bias) << s.m)));
  }
  // Subnormal range: |x| / 2^(1 - bias - m) is the count of smallest subnormals, below 2^m; adding
  // 2^23 rounds it to an integer, to nearest even, in float (exact: every float here is a multiple
  // of 2^-149 and the scaling by a power of two loses nothing). A count of 2^m is the smallest
  // normal, whose code is 2^m as well.
  const float q = half_detail::bit_cast<float>(a) * half_detail::bit_cast<float>((127u + s.bias + s.m - 1u) << 23);
  const float rounded = q + 8388608.0f;
  return uint8_t(sign | (half_detail::bit_cast<uint32_t>(rounded) - 0x4b000000u));
}

/// FP8 bits of format `f` -> float, exactly: E4M3's 0x7f and 0xff are NaN; E5M2's 0x7c / 0xfc are
/// +-inf and exponent 31 with a non-zero mantissa NaN; exponent 0 is mantissa x 2^(1 - bias - m).
constexpr float fp8_bits_to_float(uint8_t b, Fp8Format f) {
  const fp8_detail::Spec s = fp8_detail::spec(f);
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t exp = (b & 0x7fu) >> s.m, mant = b & ((1u << s.m) - 1u);
  const uint32_t exp_all_ones = (1u << (7u - s.m)) - 1u;
  if (f == Fp8Format::e4m3 && exp == exp_all_ones && mant == (1u << s.m) - 1u)
    return half_detail::bit_cast<float>(sign | 0x7fc00000u);
  if (f == Fp8Format::e5m2 && exp == exp_all_ones)
    return half_detail::bit_cast<float>(sign | (mant == 0 ? 0x7f800000u : 0x7fc00000u));
  if (exp == 0) {
    const float v = float(mant) * half_detail::bit_cast<float>((127u + 1u - s.bias - s.m) << 23);
    return sign ? -v : v;
  }
  return half_detail::bit_cast<float>(sign | ((exp + 127u - s.bias) << 23) | (mant << (23u - s.m)));
}

/// A block's E8M0 scale from v = the block's amax / the element format's largest finite value
/// (v >= 0, or NaN), rounded up to a power of two and saturated, so that no element of the block
/// saturates: Transformer Engine's float_to_e8m0 (transformer_engine/common/util/ptx.cuh; on
/// Blackwell the PTX cvt.rp.satfinite.ue8m0x2.f32; the same in TE 2.0 to 2.13). NaN -> 0xff;
/// inf -> 0xfe (2^127); 0 -> 0x00;
/// a power of two 2^k -> k + 127; otherwise the next power of two up, up to 0xfe; float subnormals
/// up to 2^-127 -> 0x00 (2^-127), larger ones -> 0x01. The sign bit of v is ignored.
constexpr uint8_t float_to_e8m0_bits(float v) {
  const uint32_t a = half_detail::bit_cast<uint32_t>(v) & 0x7fffffffu;
  if (a > 0x7f800000u) return 0xff;
  if (a == 0x7f800000u) return 0xfe;
  const uint32_t exp = a >> 23, mant = a & 0x7fffffu;
  if (mant != 0 && exp != 0xfe && !(exp == 0 && mant <= 0x400000u)) return uint8_t(exp + 1);
  return uint8_t(exp);
}

/// E8M0 bits -> the scale 2^(e - 127) as a float (0x00 -> 2^-127, a float subnormal); 0xff -> NaN.
constexpr float e8m0_bits_to_float(uint8_t e) {
  if (e == 0xff) return half_detail::bit_cast<float>(0x7fc00000u);
  return e == 0 ? half_detail::bit_cast<float>(0x00400000u) : half_detail::bit_cast<float>(uint32_t(e) << 23);
}

/// What an MXFP8 quantizer multiplies a block's elements by before the cast: 1 / 2^(e - 127) =
/// 2^(127 - e), exactly, for every code: e = 0x00 gives 2^127, e = 0xfe (an infinite amax) gives
/// 2^-127 (a float subnormal), 0xff NaN. This is Transformer Engine's exp2f_rcp since its PR #2647
/// (merged 2026-02, release 2.13; transformer_engine/common/util/ptx.cuh); before it, e = 0x00 gave 1
/// and e = 0xfe gave +0 (TE issues #2407, #2408).
constexpr float e8m0_quantize_multiplier(uint8_t e) {
  if (e == 0xff) return half_detail::bit_cast<float>(0x7fc00000u);
  if (e == 0xfe) return half_detail::bit_cast<float>(0x00400000u);
  return half_detail::bit_cast<float>(uint32_t(254 - e) << 23);
}

/// The scale that maps `amax` onto `fp8_max`, as Transformer Engine's compute_scale_from_amax
/// (transformer_engine/common/recipe/recipe_common.cuh, TE 2.x), the current and block recipes' rule:
/// amax below `epsilon` is raised to it; an amax that is 0, inf or NaN gives 1; else fp8_max /
/// amax rounded to nearest in float, an infinite quotient replaced by `value_for_inf`, and with
/// `pow2` the result rounded down to a power of two (its mantissa bits cleared).
inline float fp8_scale_from_amax(float amax, float fp8_max, bool pow2, float epsilon, float value_for_inf) {
  if (amax < epsilon) amax = epsilon;
  if (std::isinf(amax) || amax == 0.0f || std::isnan(amax)) return 1.0f;
  float scale = fp8_max / amax;
  if (std::isinf(scale)) scale = value_for_inf;
  if (pow2) scale = half_detail::bit_cast<float>(half_detail::bit_cast<uint32_t>(scale) & 0xff800000u);
  return scale;
}

/// The largest |x[i]| of n floats, NaNs skipped (fmaxf, as the quantizers' amax kernels); 0 for n = 0.
inline float fp8_amax(const float* x, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

/// MXFP8 (OCP MX v1.0 with E4M3 or E5M2 elements; Transformer Engine's MXFP8BlockScaling): one
/// block of n floats x[0..n) (32 in MX: the caller cuts the blocks) into q[0..n) and its E8M0
/// scale, returned. As Transformer Engine's cast_mxfp8 kernels: amax = fp8_amax(x, n),
/// e = float_to_e8m0_bits(amax * float(1 / fp8_max(f))), q[i] =
/// float_to_fp8_bits(x[i] * e8m0_quantize_multiplier(e), f). The value of q[i] is
/// fp8_bits_to_float(q[i], f) * e8m0_bits_to_float(e). A block of zeros gets e = 0 and codes 0; one
/// whose amax is below fp8_max · 2^-127 gets e = 0 and its elements times 2^127; one holding an
/// infinity gets e = 0xfe, the infinities saturate and the finite elements are scaled by 2^-127.
inline uint8_t mxfp8_quantize_block(uint8_t* q, const float* x, size_t n, Fp8Format f) {
  const float max_norm_rcp = float(1.0 / double(fp8_max(f)));
  const uint8_t e = float_to_e8m0_bits(fp8_amax(x, n) * max_norm_rcp);
  const float mult = e8m0_quantize_multiplier(e);
  for (size_t i = 0; i < n; ++i) q[i] = float_to_fp8_bits(x[i] * mult, f);
  return e;
}

}  // namespace dtb
