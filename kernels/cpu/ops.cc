// CPU forward/backward ops of a GPT-2 style transformer (see ops.h for the contract), written
// after llm.c's train_gpt2.c. Matmuls and the per-head attention products go through OpenBLAS
// gemm; everything else is plain loops. Ops never allocate: attention_backward gets its
// scratch from the caller, everything else works in place in its outputs.
#include "kernels/cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

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

namespace dtb::cpu {
namespace {

// Row-major C = alpha * op(A) @ op(B) + beta * C, with op(X) = X^T when the flag is set.
// One overload per precision so the templates below stay precision-agnostic.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
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

}  // namespace

// ---- encoder ----

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      T* o = out + (size_t(b) * Tn + t) * C;
      const T* we = wte + size_t(tokens[size_t(b) * Tn + t]) * C;
      const T* pe = wpe + size_t(t) * C;
      for (int i = 0; i < C; i++) o[i] = we[i] + pe[i];
    }
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                      int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      const T* d = dout + (size_t(b) * Tn + t) * C;
      T* dwe = dwte + size_t(tokens[size_t(b) * Tn + t]) * C;
      T* dpe = dwpe + size_t(t) * C;
      for (int i = 0; i < C; i++) {
        dwe[i] += d[i];
        dpe[i] += d[i];
      }
    }
  }
}

template <typename T>
void embedding_shard_forward(T* out, const int32_t* tokens, const T* wte_shard, const T* wpe, int B, int Tn,
                             int C, int v_begin, int v_end) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      T* o = out + (size_t(b) * Tn + t) * C;
      const int32_t tok = tokens[size_t(b) * Tn + t];
      const bool mine = tok >= v_begin && tok < v_end;
      const T* we = mine ? wte_shard + size_t(tok - v_begin) * C : nullptr;
      const T* pe = wpe ? wpe + size_t(t) * C : nullptr;
      for (int i = 0; i < C; i++) o[i] = (we ? we[i] : T(0)) + (pe ? pe[i] : T(0));
    }
  }
}

template <typename T>
void embedding_shard_backward(T* dwte_shard, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                              int v_begin, int v_end) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      const T* d = dout + (size_t(b) * Tn + t) * C;
      const int32_t tok = tokens[size_t(b) * Tn + t];
      if (tok >= v_begin && tok < v_end) {
        T* dwe = dwte_shard + size_t(tok - v_begin) * C;
        for (int i = 0; i < C; i++) dwe[i] += d[i];
      }
      if (dwpe) {
        T* dpe = dwpe + size_t(t) * C;
        for (int i = 0; i < C; i++) dpe[i] += d[i];
      }
    }
  }
}

template <typename T>
void scale(T* x, T a, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

template <typename T>
void add_bias(T* out, const T* bias, int N, int OC) {
  for (int n = 0; n < N; n++) {
    T* o = out + size_t(n) * OC;
    for (int i = 0; i < OC; i++) o[i] += bias[i];
  }
}

// ---- layernorm ----

template <typename T>
DTB_VECTOR_CLONES void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
  const T eps = T(1e-5);
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    // Two passes (mean, then centred squares) rather than E[x^2] - m^2, which cancels
    // catastrophically in float when |mean| >> std.
    const T m = sum_over<T>(C, [x](int i) DTB_INLINE_LAMBDA { return x[i]; }) / T(C);
    const T var = sum_over<T>(C, [x, m](int i) DTB_INLINE_LAMBDA { return (x[i] - m) * (x[i] - m); }) / T(C);  // biased, as torch
    const T s = T(1) / std::sqrt(var + eps);
    T* o = out + size_t(n) * C;
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
DTB_VECTOR_CLONES void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    const T* d = dout + size_t(n) * C;
    const T m = mean[n], s = rstd[n];
    // With xhat = (x - m) * s and g = weight * dout, the input gradient is
    // s * (g - mean(g) - xhat * mean(g * xhat)): the two means are the paths through m and s.
    const T g_mean = sum_over<T>(C, [weight, d](int i) DTB_INLINE_LAMBDA { return weight[i] * d[i]; }) / T(C);
    const T g_xhat_mean =
        sum_over<T>(C, [weight, d, x, m, s](int i) DTB_INLINE_LAMBDA { return weight[i] * d[i] * (x[i] - m) * s; }) / T(C);
    T* dx = dinp + size_t(n) * C;
    for (int i = 0; i < C; i++) {
      const T xhat = (x[i] - m) * s;
      dbias[i] += d[i];
      dweight[i] += xhat * d[i];
      dx[i] += (weight[i] * d[i] - g_mean - xhat * g_xhat_mean) * s;
    }
  }
}

// ---- matmul ----

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  // Seed out with the bias rows and let gemm accumulate (beta = 1): no second pass over out.
  if (bias) {
    for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + size_t(n) * OC);
  } else {
    std::fill(out, out + size_t(N) * OC, T(0));
  }
  if (C <= 0) return;  // BLAS rejects lda = 0; the product is empty anyway
  gemm(false, true, N, OC, C, T(1), inp, C, weight, C, T(1), out, OC);
}

template <typename T>
DTB_VECTOR_CLONES void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C > 0) {
    if (dinp) gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
    gemm(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  }
  if (dbias) {
    for (int n = 0; n < N; n++) {
      const T* d = dout + size_t(n) * OC;
      for (int o = 0; o < OC; o++) dbias[o] += d[o];
    }
  }
}

// ---- shared by softmax, cross-entropy and GELU ----

namespace {

// exp(a) for GELU's sigmoid and the softmaxes, with a clamped to [-80, 80] and NaN passed through. e^+-80
// (5.5e34, 1.8e-35) and 1 / (1 + e^80) are finite and normal: e * sig^2 below is never
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


// Runs fn(b, h) for every (batch row, head) pair: on one thread in order, or, when OpenBLAS
// may use n > 1 threads (OPENBLAS_NUM_THREADS), on n threads taking pairs in turn, each pair's
// gemms on one OpenBLAS thread. A head's products (T x T x hs, 64 x 256 x 64 at the GPT-2
// shape) are too small for OpenBLAS to split well: attention forward at that shape ran slower
// on 2 OpenBLAS threads than on 1 (7.6 against 6.5 ms, `dtb_kernel_bench
// --benchmark_filter=Attention`). A pair's arithmetic does not depend on the thread that runs
// it, so the results are bitwise those of one thread. OpenBLAS's thread count is one global
// in its pthreads build (Debian's libopenblas0-pthread): set to 1 for the region and restored
// after; no other thread calls BLAS meanwhile (the communication watchdog does not), and
// attention is not called concurrently. (In an OpenMP build the count is per calling thread
// and the helpers would not see the 1.)
// Small problems stay on one thread: below ~2e7 flops (2 B NH T^2 hs, a fraction of a
// millisecond) starting a thread (tens of microseconds) costs more than it saves (the tiny
// config's attention, 4e6 flops, ran slower on 2 threads).
template <typename F>
void for_each_head(int B, int NH, int Tn, int hs, F fn) {
  const int pairs = B * NH;
  const int blas_threads = openblas_get_num_threads();
  const double flops = 2.0 * pairs * double(Tn) * Tn * hs;
  const int threads = flops < 2e7 ? 1 : std::min(blas_threads, pairs);
  if (threads <= 1) {
    for (int i = 0; i < pairs; i++) fn(i / NH, i % NH);
    return;
  }
  struct RestoreBlasThreads {  // also when a thread cannot be started
    int n;
    ~RestoreBlasThreads() { openblas_set_num_threads(n); }
  } restore{blas_threads};
  openblas_set_num_threads(1);
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < pairs;) fn(i / NH, i % NH);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(size_t(threads - 1));
  try {
    for (int t = 1; t < threads; t++) helpers.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads to be had (a process or pids limit): the ones started and this one
    // share the pairs; the result is the same.
  }
  work();
  for (auto& th : helpers) th.join();
}

}  // namespace

// ---- attention ----
// Per (b, h) everything is a (T, hs) or (T, T) matrix whose rows are strided by 3C (qkv),
// C (out, dout) or T (att), so each product is a gemm with the stride as leading dim. Causal:
// only the lower triangle of att is needed, so the products run over row (or column) blocks
// of kAttBlock positions, each only as far as the diagonal block: block i of rows meets
// key positions [0, (i + 1) kAttBlock) only. At T = 256 that is 5/8 of the full T x T flops
// (4 blocks), against the full product's 8/8 whose upper half the mask then discards. The
// entries above the diagonal are written as exact zeros by the softmax (and its backward),
// so every row of att is whole for the caller, and the products never read past them.

namespace {
constexpr int kAttBlock = 64;
}

namespace {

// One (batch row b, head h) of attention_forward: the products up to the diagonal block and
// the softmax of its rows.
template <typename T>
DTB_VECTOR_CLONES void attention_forward_head(T* out, T* att, const T* qkv, int b, int h, int Tn, int C,
                                              int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
    const T* q = qkv + size_t(b) * Tn * C3 + size_t(h) * hs;
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* a = att + (size_t(b) * NH + h) * Tn * Tn;
    for (int r0 = 0; r0 < Tn; r0 += kAttBlock) {  // preatt = q k^T * scale, up to the diagonal
      const int rows = std::min(kAttBlock, Tn - r0);
      gemm(false, true, rows, r0 + rows, hs, scale, q + size_t(r0) * C3, C3, k, C3, T(0),
           a + size_t(r0) * Tn, Tn);
    }
    for (int t = 0; t < Tn; t++) {
      T* row = a + size_t(t) * Tn;
      const T sum = exp_shifted(row, row, t + 1, max_of(row, t + 1));
      const T inv = T(1) / sum;  // sum >= 1 (the max term is exp(0))
      for (int t2 = 0; t2 <= t; t2++) row[t2] *= inv;
      for (int t2 = t + 1; t2 < Tn; t2++) row[t2] = T(0);
    }
    // out = att @ v, each row block over the positions up to its diagonal block (the
    // zeros past the diagonal inside that block keep later positions out).
    T* o = out + size_t(b) * Tn * C + size_t(h) * hs;
    for (int r0 = 0; r0 < Tn; r0 += kAttBlock) {
      const int rows = std::min(kAttBlock, Tn - r0);
      gemm(false, false, rows, hs, r0 + rows, T(1), a + size_t(r0) * Tn, Tn, v, C3, T(0),
           o + size_t(r0) * C, C);
    }
}

// One (batch row b, head h) of attention_backward.
template <typename T>
DTB_VECTOR_CLONES void attention_backward_head(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att,
                                               int b, int h, int Tn, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
    const size_t qoff = size_t(b) * Tn * C3 + size_t(h) * hs;
    const T* q = qkv + qoff;
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* dq = dqkv + qoff;
    T* dk = dq + C;
    T* dv = dq + 2 * C;
    const T* a = att + (size_t(b) * NH + h) * Tn * Tn;
    const T* d = dout + size_t(b) * Tn * C + size_t(h) * hs;
    T* da = scratch + (size_t(b) * NH + h) * Tn * Tn;
    // Row block [r0, r0 + rows) of datt, dq; column block [c0, c0 + cols) of dv, dk, which
    // only rows from c0 on reach (att and dpre are zero above the diagonal).
    for (int r0 = 0; r0 < Tn; r0 += kAttBlock) {  // datt = dout v^T
      const int rows = std::min(kAttBlock, Tn - r0);
      gemm(false, true, rows, r0 + rows, hs, T(1), d + size_t(r0) * C, C, v, C3, T(0),
           da + size_t(r0) * Tn, Tn);
    }
    for (int c0 = 0; c0 < Tn; c0 += kAttBlock) {  // dv += att^T dout
      const int cols = std::min(kAttBlock, Tn - c0);
      gemm(true, false, cols, hs, Tn - c0, T(1), a + size_t(c0) * Tn + c0, Tn, d + size_t(c0) * C, C,
           T(1), dv + size_t(c0) * C3, C3);
    }
    // Softmax backward in place: dpre[t2] = att[t2] * (datt[t2] - sum_t3 att[t3] datt[t3]).
    for (int t = 0; t < Tn; t++) {
      const T* arow = a + size_t(t) * Tn;
      T* row = da + size_t(t) * Tn;
      const T dot = sum_over<T>(t + 1, [arow, row](int t2) DTB_INLINE_LAMBDA { return arow[t2] * row[t2]; });
      for (int t2 = 0; t2 <= t; t2++) row[t2] = arow[t2] * (row[t2] - dot);
      for (int t2 = t + 1; t2 < Tn; t2++) row[t2] = T(0);
    }
    // preatt = scale * q k^T, so dq += scale * dpre k and dk += scale * dpre^T q.
    for (int r0 = 0; r0 < Tn; r0 += kAttBlock) {
      const int rows = std::min(kAttBlock, Tn - r0);
      gemm(false, false, rows, hs, r0 + rows, scale, da + size_t(r0) * Tn, Tn, k, C3, T(1),
           dq + size_t(r0) * C3, C3);
    }
    for (int c0 = 0; c0 < Tn; c0 += kAttBlock) {
      const int cols = std::min(kAttBlock, Tn - c0);
      gemm(true, false, cols, hs, Tn - c0, scale, da + size_t(c0) * Tn + c0, Tn, q + size_t(c0) * C3,
           C3, T(1), dk + size_t(c0) * C3, C3);
    }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  for_each_head(B, NH, Tn, C / NH, [&](int b, int h) { attention_forward_head(out, att, qkv, b, h, Tn, C, NH); });
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int NH) {
  for_each_head(B, NH, Tn, C / NH,
                [&](int b, int h) { attention_backward_head(dqkv, scratch, dout, qkv, att, b, h, Tn, C, NH); });
}

// ---- gelu ----

// GELU (tanh form) as x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3), since
// 0.5 (1 + tanh z) = 1 / (1 + e^-2z): one exponential, no cancellation where tanh z -> -1.
// The backward uses 1 + tanh z = 2 sig and sech^2 z = 4 sig (1 - sig) = 4 e sig^2 (e = e^-2z),
// exact where sig -> 1 (1 - sig would cancel there).
template <typename T>
DTB_VECTOR_CLONES void gelu_forward(T* out, const T* inp, size_t n) {
  const T s = T(std::sqrt(2.0 / std::numbers::pi));
  for (size_t i = 0; i < n; i++) {
    const T x = inp[i];
    const T e = exp_clamped(T(-2) * s * (x + T(0.044715) * x * x * x));
    out[i] = x * (T(1) / (T(1) + e));
  }
}

template <typename T>
DTB_VECTOR_CLONES void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T s = T(std::sqrt(2.0 / std::numbers::pi));
  for (size_t i = 0; i < n; i++) {
    const T x = inp[i];
    const T a = T(-2) * s * (x + T(0.044715) * x * x * x);
    const T e = exp_clamped(a);
    const T sig = T(1) / (T(1) + e);
    // d/dx [x sig(2z)] = sig + x * 2 sig (1 - sig) * z', z' = s (1 + 3 * 0.044715 x^2). Where
    // the exponent is clamped (|2z| >= the clamp) the second term is 0 in exact arithmetic
    // (below 1e-30 at the clamp, and falling like x^3 e^(-2z) beyond it), but the clamped e
    // would make it grow like x^3 e^-80: it is dropped there. NaN fails both tests: NaN.
    const T t2 = T(2) * x * (e * sig * sig) * s * (T(1) + T(3 * 0.044715) * x * x);
    const T grad = sig + (a > -exp_clamp_bound<T>() && a < exp_clamp_bound<T>() ? t2 : T(0));
    dinp[i] += grad * dout[i];
  }
}

// ---- residual ----

template <typename T>
DTB_VECTOR_CLONES void residual_forward(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ---- cross-entropy ----

template <typename T>
DTB_VECTOR_CLONES void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int N,
                          int V) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + size_t(n) * V;
    T* p = probs + size_t(n) * V;
    const T mx = max_of(l, V);
    const T sum = exp_shifted_blocks(p, l, V, mx);
    const T inv = T(1) / sum;
    for (int i = 0; i < V; i++) p[i] *= inv;
    // -log p[target] = log(sum) - (l[target] - mx): stays finite and accurate when
    // p[target] underflows to 0, where -log(p) would be inf.
    losses[n] = std::log(sum) - (l[targets[n]] - mx);
  }
}

template <typename T>
DTB_VECTOR_CLONES void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N,
                           int V) {
  for (int n = 0; n < N; n++) {
    const T* p = probs + size_t(n) * V;
    T* d = dlogits + size_t(n) * V;
    for (int i = 0; i < V; i++) d[i] = p[i] * dloss;
    d[targets[n]] = (p[targets[n]] - T(1)) * dloss;
  }
}

template <typename T>
void crossentropy_shard_max(T* maxes, const T* logits, int N, int Vl) {
  for (int n = 0; n < N; n++) {
    maxes[n] = max_of(logits + size_t(n) * Vl, Vl);
  }
}

template <typename T>
DTB_VECTOR_CLONES void crossentropy_shard_sums(T* sums, const T* logits, const T* maxes, const int32_t* targets, int N, int Vl,
                             int v_begin) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + size_t(n) * Vl;
    sums[n] = exp_shifted_blocks(static_cast<T*>(nullptr), l, Vl, maxes[n]);  // the logits stay as they are
    const int32_t j = targets[n] - v_begin;
    sums[N + n] = j >= 0 && j < Vl ? l[j] : T(0);
  }
}

template <typename T>
DTB_VECTOR_CLONES void crossentropy_shard_forward(T* losses, T* probs, const T* logits, const T* maxes, const T* sums, int N, int Vl) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + size_t(n) * Vl;
    T* p = probs + size_t(n) * Vl;
    const T inv = T(1) / sums[n];
    for (int i = 0; i < Vl; i++) p[i] = exp_clamped(l[i] - maxes[n]) * inv;
    losses[n] = std::log(sums[n]) - (sums[N + n] - maxes[n]);
  }
}

template <typename T>
void crossentropy_shard_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N, int Vl,
                                 int v_begin) {
  for (int n = 0; n < N; n++) {
    const T* p = probs + size_t(n) * Vl;
    T* d = dlogits + size_t(n) * Vl;
    for (int i = 0; i < Vl; i++) d[i] = p[i] * dloss;
    const int32_t j = targets[n] - v_begin;
    if (j >= 0 && j < Vl) d[j] = (p[j] - T(1)) * dloss;
  }
}

// ---- AdamW ----

template <typename T>
DTB_VECTOR_CLONES void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, const AdamWParams& hp, int t) {
  const T lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps;
  const T decay = T(1) - lr * T(hp.weight_decay);
  // Bias corrections in double: 1 - beta2^t is a small difference of numbers near 1.
  const T inv_bc1 = T(1.0 / (1.0 - std::pow(double(hp.beta1), t)));
  const T inv_bc2 = T(1.0 / (1.0 - std::pow(double(hp.beta2), t)));
  for (size_t i = 0; i < n; i++) {
    const T g = grad[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    // Decay is applied to the pre-step parameter and kept out of m and v (decoupled).
    param[i] = param[i] * decay - lr * (mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps);
  }
}

// ---- explicit instantiations ----

#define DTB_INSTANTIATE_OPS(T)                                                                   \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int);       \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int);            \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);        \
  template void embedding_shard_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, int, int); \
  template void embedding_shard_backward<T>(T*, T*, const T*, const int32_t*, int, int, int, int, int);     \
  template void add_bias<T>(T*, const T*, int, int);                                                     \
  template void scale<T>(T*, T, size_t);                                                                 \
  template void crossentropy_shard_max<T>(T*, const T*, int, int);                                       \
  template void crossentropy_shard_sums<T>(T*, const T*, const T*, const int32_t*, int, int, int);       \
  template void crossentropy_shard_forward<T>(T*, T*, const T*, const T*, const T*, int, int);           \
  template void crossentropy_shard_backward<T>(T*, const T*, const int32_t*, T, int, int, int);          \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,        \
                                      const T*, int, int);                                       \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);              \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);     \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                      \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int); \
  template void gelu_forward<T>(T*, const T*, size_t);                                           \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);                                \
  template void residual_forward<T>(T*, const T*, const T*, size_t);                             \
  template void crossentropy_forward<T>(T*, T*, const T*, const int32_t*, int, int);             \
  template void crossentropy_backward<T>(T*, const T*, const int32_t*, T, int, int);             \
  template void adamw_update<T>(T*, const T*, T*, T*, size_t, const AdamWParams&, int);

DTB_INSTANTIATE_OPS(float)
DTB_INSTANTIATE_OPS(double)
#undef DTB_INSTANTIATE_OPS

}  // namespace dtb::cpu
