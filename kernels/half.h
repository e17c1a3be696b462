// Half-precision storage types for mixed precision (Micikevicius et al. 2018): bf16
// (bfloat16: 1 sign, 8 exponent, 7 mantissa bits; fp32's range, unit roundoff 2^-8) and
// fp16 (IEEE binary16: 1, 5, 10; max 65504, unit roundoff 2^-11). They store, they do not
// compute: arithmetic converts to float (the implicit conversion is exact) and a float is
// stored back rounded to nearest, ties to even, as CUDA's __float2bfloat16_rn /
// __float2half_rn and PyTorch's .to(torch.bfloat16 / torch.float16) do. Overflow rounds to
// inf (fp16 from 65520 up); NaN stays NaN (quiet); fp16 keeps subnormals down to 2^-24.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace dtb {

namespace half_detail {
/// std::bit_cast where the library has it (C++20), else the builtin it is made of (GCC >= 11,
/// Clang, nvcc), so that this header also compiles as C++17 (CUDA sources include it).
template <typename To, typename From>
constexpr To bit_cast(const From& from) {
#if defined(__cpp_lib_bit_cast)
  return std::bit_cast<To>(from);
#else
  return __builtin_bit_cast(To, from);
#endif
}
}  // namespace half_detail

/// float -> bfloat16 bits, round to nearest even on the upper 16 bits; NaN -> quiet NaN.
constexpr uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = half_detail::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
constexpr float bf16_bits_to_float(uint16_t h) {
  return half_detail::bit_cast<float>(uint32_t(h) << 16);
}

/// float -> IEEE binary16 bits, round to nearest even (F. Giesen's float_to_half_fast3_rtne):
/// >= 65520 in magnitude -> inf, below 2^-14 -> subnormal or zero, NaN -> quiet NaN.
constexpr uint16_t float_to_fp16_bits(float fin) {
  uint32_t f = half_detail::bit_cast<uint32_t>(fin);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint16_t o = 0;
  if (f >= ((127u + 16u) << 23)) {  // 2^16 and up, inf, NaN
    o = f > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (f < (113u << 23)) {  // below 2^-14: let fp32 addition round at 2^-24
    constexpr uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5f
    const float r = half_detail::bit_cast<float>(f) + half_detail::bit_cast<float>(magic);
    o = uint16_t(half_detail::bit_cast<uint32_t>(r) - magic);
  } else {
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += ((15u - 127u) << 23) + 0xfffu;  // rebias the exponent, add half an ulp minus one
    f += mant_odd;                       // ties to even
    o = uint16_t(f >> 13);
  }
  return uint16_t(o | (sign >> 16));
}
constexpr float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return half_detail::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return half_detail::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// bfloat16 storage: converts from float (rounding) and to float (exact), implicitly, so
/// templated host code reads and writes it as a float.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  constexpr bf16(float f) : bits(float_to_bf16_bits(f)) {}  // NOLINT: implicit by design
  constexpr operator float() const { return bf16_bits_to_float(bits); }
  static constexpr bf16 from_bits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
};

/// IEEE binary16 storage, as bf16.
struct fp16 {
  uint16_t bits = 0;
  fp16() = default;
  constexpr fp16(float f) : bits(float_to_fp16_bits(f)) {}  // NOLINT: implicit by design
  constexpr operator float() const { return fp16_bits_to_float(bits); }
  static constexpr fp16 from_bits(uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2 && std::is_trivially_copyable_v<bf16>);

/// Whether T is a half storage type.
template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

/// The type an op over T-stored tensors computes and keeps its statistics in: float for the
/// half types (fp32 accumulation, fp32 master weights and Adam moments, fp32 LayerNorm
/// statistics and losses, as Megatron-LM and llm.c), T itself otherwise.
template <typename T>
using acc_t = std::conditional_t<is_half_v<T>, float, T>;

/// Unit roundoff of T's storage (half the distance from 1 to the next value): 2^-8 (bf16),
/// 2^-11 (fp16), 2^-24 (float), 2^-53 (double).
template <typename T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, bf16>) return 0x1p-8;
  else if constexpr (std::is_same_v<T, fp16>) return 0x1p-11;
  else if constexpr (std::is_same_v<T, float>) return 0x1p-24;
  else return 0x1p-53;
}

/// Bulk conversions between float and the half types: dst[i] = src[i] for i < n, bitwise
/// what the scalar functions above give element by element (fp16_bits_to_float,
/// float_to_fp16_bits, bf16_bits_to_float, float_to_bf16_bits: ties to even, overflow to
/// inf, subnormals, -0, NaN -> the same NaN bits), but vectorised: fp16 through the x86
/// F16C instructions where the CPU has them (chosen at run time; the scalar loop elsewhere
/// and for the tail), bf16 in branch-free loops the compiler vectorises. Any alignment;
/// dst and src must not overlap. Defined in kernels/half.cc (dtb_kernels).
/// float_to_fp16_bits rounds its subnormal results with an fp32 addition, i.e. in the
/// current rounding mode, F16C always to nearest: the two agree (bitwise) under the default
/// FE_TONEAREST only, which the whole project assumes.
void convert_to_float(float* dst, const fp16* src, size_t n);
void convert_to_float(float* dst, const bf16* src, size_t n);
void convert_from_float(fp16* dst, const float* src, size_t n);
void convert_from_float(bf16* dst, const float* src, size_t n);

/// Converts n values, dst[i] = src[i], between float and the half types (rounding to
/// nearest even where dst is narrower; half -> float is exact). float <-> bf16/fp16 go
/// through the bulk conversions above (bitwise the same results); other pairs convert
/// element by element.
template <typename D, typename S>
void convert(D* dst, const S* src, size_t n) {
  if constexpr (std::is_same_v<D, float> && is_half_v<S>) {
    convert_to_float(dst, src, n);
  } else if constexpr (is_half_v<D> && std::is_same_v<S, float>) {
    convert_from_float(dst, src, n);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = D(src[i]);
  }
}

}  // namespace dtb
