// CPU blockwise causal attention at absolute positions, its online-softmax merge and its
// backward (contract: ops.h), the building block of context parallelism's ring. Not the
// whole-sequence op (attention.cc). Per (batch row, head): the products through OpenBLAS gemm
// over the keys any query of the block may see, the softmax rows in plain loops, on one
// thread. No allocation: the scratch comes from the caller.
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/ops_common.h"

namespace dtb::cpu {

using namespace detail;

namespace {

// Keys [0, visible(t)) of the block are unmasked for query row t: positions are consecutive
// in both blocks, so the unmasked keys of a row are a prefix.
struct CausalBlock {
  int Tk, qpos0, kpos0;
  int visible(int t) const { return std::clamp(qpos0 + t - kpos0 + 1, 0, Tk); }
};

template <typename T>
DTB_VECTOR_CLONES void block_forward_head(T* out, T* lse, T* S, const T* q, int qs, const T* k, const T* v, int ks,
                                          int Tq, int C, int NH, int h, const CausalBlock& blk) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const int kmax = blk.visible(Tq - 1);  // keys the last (latest) query sees: all any row sees
  T* o = out + size_t(h) * hs;
  if (kmax == 0) {
    for (int t = 0; t < Tq; t++) {
      std::fill_n(o + size_t(t) * C, hs, T(0));
      lse[size_t(t) * NH + h] = -std::numeric_limits<T>::infinity();
    }
    return;
  }
  gemm(false, true, Tq, kmax, hs, scale, q + size_t(h) * hs, qs, k + size_t(h) * hs, ks, T(0), S, kmax);
  for (int t = 0; t < Tq; t++) {
    T* row = S + size_t(t) * kmax;
    const int n = blk.visible(t);
    if (n == 0) {
      std::fill_n(row, kmax, T(0));
      lse[size_t(t) * NH + h] = -std::numeric_limits<T>::infinity();
      continue;
    }
    const T mx = max_of(row, n);
    const T sum = exp_shifted(row, row, n, mx);  // sum >= 1 (the max term is exp(0))
    const T inv = T(1) / sum;
    for (int s = 0; s < n; s++) row[s] *= inv;
    std::fill(row + n, row + kmax, T(0));
    lse[size_t(t) * NH + h] = mx + std::log(sum);
  }
  gemm(false, false, Tq, hs, kmax, T(1), S, kmax, v + size_t(h) * hs, ks, T(0), o, C);
}

template <typename T>
DTB_VECTOR_CLONES void block_backward_head(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* out,
                                           const T* lse, const T* q, int qs, const T* k, const T* v, int ks, int Tq,
                                           int C, int NH, int h, const CausalBlock& blk) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const int kmax = blk.visible(Tq - 1);
  if (kmax == 0) return;  // every score masked: no gradient flows through this block
  const size_t ho = size_t(h) * hs;
  T* P = scratch;                        // (Tq, kmax)
  T* dS = scratch + size_t(Tq) * kmax;   // (Tq, kmax)
  T* D = dS + size_t(Tq) * kmax;         // (Tq)
  gemm(false, true, Tq, kmax, hs, scale, q + ho, qs, k + ho, ks, T(0), P, kmax);
  for (int t = 0; t < Tq; t++) {
    T* row = P + size_t(t) * kmax;
    const T l = lse[size_t(t) * NH + h];
    // A row without any unmasked key in the FULL result (lse -inf) has no probabilities.
    const int n = l == -std::numeric_limits<T>::infinity() ? 0 : blk.visible(t);
    for (int s = 0; s < n; s++) row[s] = exp_clamped(row[s] - l);
    std::fill(row + n, row + kmax, T(0));
    const T* d = dout + size_t(t) * C + ho;
    const T* o = out + size_t(t) * C + ho;
    D[t] = sum_over<T>(hs, [d, o](int i) DTB_INLINE_LAMBDA { return d[i] * o[i]; });
  }
  gemm(true, false, kmax, hs, Tq, T(1), P, kmax, dout + ho, C, T(1), dv + ho, ks);     // dv += P^T dout
  gemm(false, true, Tq, kmax, hs, T(1), dout + ho, C, v + ho, ks, T(0), dS, kmax);      // dP = dout v^T
  for (int t = 0; t < Tq; t++) {                                                       // dS = P (dP - D)
    const T* p = P + size_t(t) * kmax;
    T* row = dS + size_t(t) * kmax;
    for (int s = 0; s < kmax; s++) row[s] = p[s] * (row[s] - D[t]);
  }
  gemm(false, false, Tq, hs, kmax, scale, dS, kmax, k + ho, ks, T(1), dq + ho, qs);     // dq += scale dS k
  gemm(true, false, kmax, hs, Tq, scale, dS, kmax, q + ho, qs, T(1), dk + ho, ks);      // dk += scale dS^T q
}

}  // namespace

template <typename T>
void attention_block_forward(T* out, T* lse, T* scratch, const T* q, int q_stride, const T* k, const T* v,
                             int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0, int kpos0) {
  const CausalBlock blk{Tk, qpos0, kpos0};
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      block_forward_head(out + size_t(b) * Tq * C, lse + size_t(b) * Tq * NH, scratch,
                         q + size_t(b) * Tq * q_stride, q_stride, k + size_t(b) * Tk * kv_stride,
                         v + size_t(b) * Tk * kv_stride, kv_stride, Tq, C, NH, h, blk);
    }
  }
}

template <typename T>
void attention_block_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* out, const T* lse,
                              const T* q, int q_stride, const T* k, const T* v, int kv_stride, int B, int Tq,
                              int Tk, int C, int NH, int qpos0, int kpos0) {
  const CausalBlock blk{Tk, qpos0, kpos0};
  for (int b = 0; b < B; b++) {
    const size_t qo = size_t(b) * Tq * q_stride, ko = size_t(b) * Tk * kv_stride;
    for (int h = 0; h < NH; h++) {
      block_backward_head(dq + qo, dk + ko, dv + ko, scratch, dout + size_t(b) * Tq * C, out + size_t(b) * Tq * C,
                          lse + size_t(b) * Tq * NH, q + qo, q_stride, k + ko, v + ko, kv_stride, Tq, C, NH, h,
                          blk);
    }
  }
}

// logaddexp as max + log1p(exp(min - max)): exact when one side is -inf (log1p(0) = 0), and
// the weights e^(lse_i - lse') are then exactly 1 and 0, so merging a fully masked block, or
// into the empty start (out 0, lse -inf), changes nothing or copies, bitwise. std::exp, not
// the clamped exp of the softmaxes: e^-inf must be 0, not e^-80.
template <typename T>
void attention_merge(T* out, T* lse, const T* out2, const T* lse2, int N, int C, int NH) {
  const int hs = C / NH;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int r = 0; r < N; r++) {
    for (int h = 0; h < NH; h++) {
      const T l1 = lse[size_t(r) * NH + h], l2 = lse2[size_t(r) * NH + h];
      if (l2 == kNegInf) continue;
      T* o = out + size_t(r) * C + size_t(h) * hs;
      const T* o2 = out2 + size_t(r) * C + size_t(h) * hs;
      if (l1 == kNegInf) {
        std::copy_n(o2, hs, o);
        lse[size_t(r) * NH + h] = l2;
        continue;
      }
      const T hi = std::max(l1, l2), lo = std::min(l1, l2);
      const T l = hi + std::log1p(std::exp(lo - hi));
      const T w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
      for (int i = 0; i < hs; i++) o[i] = w1 * o[i] + w2 * o2[i];
      lse[size_t(r) * NH + h] = l;
    }
  }
}

#define DTB_INSTANTIATE_ATTENTION_BLOCK(T)                                                                      \
  template void attention_block_forward<T>(T*, T*, T*, const T*, int, const T*, const T*, int, int, int, int,   \
                                           int, int, int, int);                                                 \
  template void attention_merge<T>(T*, T*, const T*, const T*, int, int, int);                                  \
  template void attention_block_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, int,        \
                                            const T*, const T*, int, int, int, int, int, int, int, int);

DTB_INSTANTIATE_ATTENTION_BLOCK(float)
DTB_INSTANTIATE_ATTENTION_BLOCK(double)
#undef DTB_INSTANTIATE_ATTENTION_BLOCK

}  // namespace dtb::cpu
