// The bulk conversions of kernels/half.h (convert_to_float, convert_from_float): fp16 through
// x86 F16C where the CPU has it, chosen at run time; bf16 and the tails in portable loops.
#include "kernels/half.h"

#include <bit>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace dtb {

// Each is bitwise its scalar function of half.h applied element by element; half_test.cc
// checks all 65536 half patterns and millions of floats, tails and misaligned pointers.

namespace {

// Elements per block of the portable loops: a fixed trip count, so that GCC's vectoriser
// takes the inner loop even under -O2's very-cheap cost model (which refuses loops that
// need a scalar epilogue); the tail goes element by element.
constexpr size_t kBlock = 16;

#if defined(__x86_64__) || defined(__i386__)
#define DTB_HALF_F16C 1

// F16C (with AVX for the 256-bit registers), compiled for those instructions only here and
// used only when the CPU has them: 8 elements per instruction, any alignment. Everything
// but the NaN patterns converts exactly as the scalar code (F16C rounds to nearest even
// with overflow to inf and gradual underflow, as float_to_fp16_bits); the NaN lanes are
// fixed up without branches, in 128-bit SSE2 integer ops (AVX has no 256-bit ones).

// fp16 -> float: F16C quiets a signalling NaN (sets the float's bit 22); the scalar code
// keeps the payload as it is (sign | 0x7f800000 | mant << 13). Clear bit 22 again in the
// lanes whose input is a signalling NaN, |h| in (0x7c00, 0x7e00).
__attribute__((target("f16c,avx"))) size_t fp16_to_float_f16c(float* dst, const uint16_t* src, size_t n) {
  const __m128i abs_mask = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00), qnan = _mm_set1_epi16(0x7e00);
  const __m128i quiet_hi = _mm_set1_epi16(0x0040);  // bit 22 of a float, in its upper half
  const __m128i zero = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i a = _mm_and_si128(h, abs_mask);  // 0..0x7fff: the signed compares are exact
    const __m128i snan = _mm_and_si128(_mm_cmpgt_epi16(a, inf), _mm_cmplt_epi16(a, qnan));
    const __m128i bit = _mm_and_si128(snan, quiet_hi);
    const __m256i clear = _mm256_insertf128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(zero, bit)),
                                                  _mm_unpackhi_epi16(zero, bit), 1);
    const __m256 f = _mm256_andnot_ps(_mm256_castsi256_ps(clear), _mm256_cvtph_ps(h));
    _mm256_storeu_ps(dst + i, f);
  }
  return i;
}

// float -> fp16: F16C keeps a NaN's sign and top payload bits (quieted); the scalar code
// gives sign | 0x7e00. In the NaN lanes (unordered with themselves) keep the sign bit only
// and set 0x7e00.
__attribute__((target("f16c,avx"))) size_t float_to_fp16_f16c(uint16_t* dst, const float* src, size_t n) {
  const __m128i payload = _mm_set1_epi16(0x7fff), qnan = _mm_set1_epi16(0x7e00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan32 = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // all ones in the NaN lanes
    const __m128i nan = _mm_packs_epi32(_mm_castps_si128(_mm256_castps256_ps128(nan32)),
                                        _mm_castps_si128(_mm256_extractf128_ps(nan32, 1)));
    const __m128i fixed = _mm_or_si128(_mm_andnot_si128(_mm_and_si128(nan, payload), h), _mm_and_si128(nan, qnan));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), fixed);
  }
  return i;
}

// Whether this CPU (and OS) runs the above. GCC: libgcc's "avx" includes the check that
// the OS saves the YMM registers; __builtin_cpu_init first, in case the first call comes
// from a static initialiser that runs before libgcc's own. Clang (which does not know
// "f16c" there): CPUID leaf 1 (F16C, AVX, OSXSAVE) and XGETBV (XMM and YMM state enabled).
bool have_f16c() {
  static const bool yes = [] {
#if defined(__clang__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
#else
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
  }();
  return yes;
}
#endif

}  // namespace

void convert_to_float(float* dst, const fp16* src, size_t n) {
  size_t i = 0;
#ifdef DTB_HALF_F16C
  if (have_f16c()) i = fp16_to_float_f16c(dst, reinterpret_cast<const uint16_t*>(src), n);
#endif
  for (; i < n; ++i) dst[i] = fp16_bits_to_float(src[i].bits);
}

void convert_from_float(fp16* dst, const float* src, size_t n) {
  size_t i = 0;
#ifdef DTB_HALF_F16C
  if (have_f16c()) i = float_to_fp16_f16c(reinterpret_cast<uint16_t*>(dst), src, n);
#endif
  for (; i < n; ++i) dst[i].bits = float_to_fp16_bits(src[i]);
}

// bf16 -> float is a shift.
void convert_to_float(float* dst, const bf16* src, size_t n) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (size_t j = 0; j < kBlock; ++j) dst[i + j] = bf16_bits_to_float(src[i + j].bits);
  for (; i < n; ++i) dst[i] = bf16_bits_to_float(src[i].bits);
}

// float -> bf16: float_to_bf16_bits with its NaN branch as a select.
void convert_from_float(bf16* dst, const float* src, size_t n) {
  const auto one = [](float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quieted = (x >> 16) | 0x40u;
    return uint16_t((x & 0x7fffffffu) > 0x7f800000u ? quieted : rounded);
  };
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (size_t j = 0; j < kBlock; ++j) dst[i + j].bits = one(src[i + j]);
  for (; i < n; ++i) dst[i].bits = one(src[i]);
}

}  // namespace dtb
