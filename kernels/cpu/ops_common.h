// What the CPU op files (ops.cc, attention.cc, crossentropy.cc) share: the clone and
// inlining attributes, the BLAS gemm overloads, the ordered lane sums, and the clamped exp
// with the softmax helpers built on it. Private to kernels/cpu: no other file includes it.
// Every file that includes it is built with the same flags (CMakeLists.txt: no FMA
// contraction, no trapping math, no errno), so an op gives the same bits in any of them.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

// The loops of the hot ops in two builds, picked once per process by the CPU (GCC's
// target_clones, an ifunc): x86-64-v3 (AVX2, FMA: 8 floats a vector, as in every x86 server
// since 2013) and the baseline (SSE2). This file is built with -ffp-contract=off (no a * b + c
// fused into one rounding) and every reduction has its order written out (sum_over), so the
// clones differ in vector width only and give bitwise the same results.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DTB_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DTB_VECTOR_CLONES
#endif
// The helpers the clones call, and the lambdas they pass, must be inlined into each clone to
// be compiled for its target (GCC does not inline across differing targets by itself).
#define DTB_INLINE __attribute__((always_inline)) inline
#define DTB_INLINE_LAMBDA __attribute__((always_inline))

namespace dtb::cpu::detail {

// Row-major C = alpha * op(A) @ op(B) + beta * C, with op(X) = X^T when the flag is set.
// One overload per precision so the templates below stay precision-agnostic.
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Sums and maxima over kLanes interleaved partial results, combined pairwise at the end: each
// partial result is in order, so the loops vectorise without reassociating anything the
// compiler may not (no -ffast-math). A term passes through at most n / kLanes + kLanes - 1
// additions in its partial sum (the tail's terms go to the first) and 3 pairwise ones, and a
// sum of n terms has only n - 1 inexact additions in all, so it errs <= min(n - 1, n / kLanes
// + kLanes + 2) u sum |x| (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
// eq. 4.4 for each path): never more than one running sum's (n - 1) u.
constexpr int kLanes = 8;

template <typename T>
DTB_INLINE T combine_sums(const T* acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// sum_{i < n} term(i), over kLanes partial sums (term is inlined: the loop vectorises).
template <typename T, typename F>
DTB_INLINE T sum_over(int n, F term) {
  T acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) acc[j] += term(i + j);
  for (; i < n; i++) acc[0] += term(i);
  return combine_sums(acc);
}

// ---- shared by softmax, cross-entropy and GELU ----

// exp(a) for GELU's sigmoid and the softmaxes, with a clamped to [-80, 80] and NaN passed through. e^+-80
// (5.5e34, 1.8e-35) and 1 / (1 + e^80) are finite and normal: e * sig^2 in gelu_backward (ops.cc) is never
// inf * 0, and no value the loops compute is subnormal, not even the constants the compiler
// folds for clamped lanes and blends in (a subnormal operand or result costs a microcode
// assist: with the clamp at 88, whose 1 / (1 + e^88) = 6e-39 is subnormal, the forward ran
// at 4.3 ns an element whatever its input, 1.7 ns with flush-to-zero set). The clamp moves
// gelu by less than |x| e^-80 (a few 1e-33 for |x| <= 10; gelu_backward drops its second
// term where the exponent is clamped). float: branch-free so
// that the compiler vectorises the loops calling it (libm's expf and tanhf are calls, 16 ns
// an element here): a = n ln2 + r by Cody-Waite (ln2 in two parts, n rounded to nearest by
// the 1.5 * 2^23 trick, so |r| <= ln2/2 and the reduction is exact to ~u), e^r by Cephes'
// expf polynomial (degree 6; relative error < 2e-7 on that interval, S. Moshier, Cephes
// Mathematical Library, expf.c), 2^n placed in the exponent bits (n in [-126, 127]). The
// result is within 4 u (u = 2^-24) of e^a relative; FloatVsDouble.Forwards (ops_test.cc)
// holds float GELU, its backward, attention and cross-entropy to bounds that count those 4 u,
// against double on libm's exp. In a softmax the argument is x - max <= 0, and the clamp
// gives e^-80 = 1.8e-35 where exp would give less: below u of the sum (>= 1).
// double: libm's exp of the clamped argument.
template <typename T>
constexpr T exp_clamp_bound() {
  return std::is_same_v<T, float> ? T(80) : T(700);
}
DTB_INLINE float exp_clamped(float a) {
  a = a < -80.0f ? -80.0f : (a > 80.0f ? 80.0f : a);  // NaN fails both tests and stays NaN
  constexpr float kMagic = 12582912.0f;              // 1.5 * 2^23
  const float nf = (a * 1.44269504088896341f + kMagic) - kMagic;  // round(a / ln2)
  const float r = (a - nf * 0.693359375f) - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t n = std::bit_cast<int32_t>(nf + kMagic) - std::bit_cast<int32_t>(kMagic);
  return p * std::bit_cast<float>(uint32_t(n + 127) << 23);
}
DTB_INLINE double exp_clamped(double a) { return std::exp(a < -700.0 ? -700.0 : (a > 700.0 ? 700.0 : a)); }


template <typename T>
DTB_INLINE T sum_of(const T* x, int n) {
  return sum_over<T>(n, [x](int i) DTB_INLINE_LAMBDA { return x[i]; });
}

// max of x[0, n), n >= 1. A NaN is dropped, as by std::max (the sum of exps that follows
// turns it into a NaN loss).
template <typename T>
DTB_INLINE T max_of(const T* x, int n) {
  T mx = x[0];
  if (n >= kLanes) {
    T acc[kLanes];
    for (int j = 0; j < kLanes; j++) acc[j] = x[j];
    int i = kLanes;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; j++) acc[j] = std::max(acc[j], x[i + j]);
    for (; i < n; i++) acc[0] = std::max(acc[0], x[i]);
    mx = acc[0];
    for (int j = 1; j < kLanes; j++) mx = std::max(mx, acc[j]);
  } else {
    for (int i = 1; i < n; i++) mx = std::max(mx, x[i]);
  }
  return mx;
}

// out[i] = exp(x[i] - shift) for i < n (out may be x), returning their sum: the softmax's
// numerators and denominator. With shift = max x every argument is <= 0 and the sum >= 1.
template <typename T>
DTB_INLINE T exp_shifted(T* out, const T* x, int n, T shift) {
  for (int i = 0; i < n; i++) out[i] = exp_clamped(x[i] - shift);
  return sum_of(out, n);
}

// The sum of exp(x[i] - shift) over a vocabulary row, in blocks of kExpBlock terms (each an
// exp_shifted sum, the blocks added in order), writing the terms to out when out is not null
// and otherwise through a buffer on the stack. crossentropy_forward and the vocabulary shards'
// sums both sum this way, so one shard is bitwise the unsharded op at any V.
constexpr int kExpBlock = 256;
template <typename T>
DTB_INLINE T exp_shifted_blocks(T* out, const T* x, int n, T shift) {
  T sum = 0;
  T buf[kExpBlock];
  for (int i0 = 0; i0 < n; i0 += kExpBlock)
    sum += exp_shifted(out ? out + i0 : buf, x + i0, std::min(kExpBlock, n - i0), shift);
  return sum;
}

}  // namespace dtb::cpu::detail
