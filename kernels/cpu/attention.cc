// CPU causal self-attention, forward and backward (contract: ops.h), after llm.c's
// train_gpt2.c: per (batch row, head) the products go through OpenBLAS gemm up to the
// diagonal block, the softmax between them in plain loops; the pairs may run on several
// threads (for_each_head), with bitwise the results of one. No allocation: the backward's
// scratch comes from the caller.
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <system_error>
#include <thread>
#include <vector>

#include "kernels/cpu/ops_common.h"

namespace dtb::cpu {

using namespace detail;

namespace {

// Runs fn(b, h) for every (batch row, head) pair (h < NH; `hs` the channels a pair's products
// run over, for the flop count): on one thread in order, or, when OpenBLAS
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

// The packed qkv's row (B,T,(NH+2KV)hs): query head h at channel h hs, key head g at (NH + g) hs,
// value head g at (NH + KV + g) hs; out's row (NH hs). For KV = NH (the GPT) these are 3C, C + h hs,
// 2C + h hs and C: the arithmetic below is then the multi-head op's, bitwise.
struct Heads {
  int NH, KV, hs;
  int width() const { return (NH + 2 * KV) * hs; }
  int kv_of(int h) const { return h / (NH / KV); }
  size_t q(int h) const { return size_t(h) * hs; }
  size_t k(int g) const { return size_t(NH + g) * hs; }
  size_t v(int g) const { return size_t(NH + KV + g) * hs; }
};

// One (batch row b, query head h) of attention_forward: the products up to the diagonal block
// and the softmax of its rows.
template <typename T>
DTB_VECTOR_CLONES void attention_forward_head(T* out, T* att, const T* qkv, int b, int h, int Tn, Heads hd) {
  const int hs = hd.hs, W = hd.width(), C = hd.NH * hs, g = hd.kv_of(h);
  const T scale = T(1) / std::sqrt(T(hs));
    const T* row0 = qkv + size_t(b) * Tn * W;
    const T* q = row0 + hd.q(h);
    const T* k = row0 + hd.k(g);
    const T* v = row0 + hd.v(g);
    T* a = att + (size_t(b) * hd.NH + h) * Tn * Tn;
    for (int r0 = 0; r0 < Tn; r0 += kAttBlock) {  // preatt = q k^T * scale, up to the diagonal
      const int rows = std::min(kAttBlock, Tn - r0);
      gemm(false, true, rows, r0 + rows, hs, scale, q + size_t(r0) * W, W, k, W, T(0),
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
      gemm(false, false, rows, hs, r0 + rows, T(1), a + size_t(r0) * Tn, Tn, v, W, T(0),
           o + size_t(r0) * C, C);
    }
}

// One (batch row b, query head h) of attention_backward: adds into h's dq and into the dk, dv
// of its key/value head.
template <typename T>
DTB_VECTOR_CLONES void attention_backward_head(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att,
                                               int b, int h, int Tn, Heads hd) {
  const int hs = hd.hs, W = hd.width(), C = hd.NH * hs, g = hd.kv_of(h);
  const T scale = T(1) / std::sqrt(T(hs));
    const size_t row0 = size_t(b) * Tn * W;
    const T* q = qkv + row0 + hd.q(h);
    const T* k = qkv + row0 + hd.k(g);
    const T* v = qkv + row0 + hd.v(g);
    T* dq = dqkv + row0 + hd.q(h);
    T* dk = dqkv + row0 + hd.k(g);
    T* dv = dqkv + row0 + hd.v(g);
    const T* a = att + (size_t(b) * hd.NH + h) * Tn * Tn;
    const T* d = dout + size_t(b) * Tn * C + size_t(h) * hs;
    T* da = scratch + (size_t(b) * hd.NH + h) * Tn * Tn;
    // Row block [r0, r0 + rows) of datt, dq; column block [c0, c0 + cols) of dv, dk, which
    // only rows from c0 on reach (att and dpre are zero above the diagonal).
    for (int r0 = 0; r0 < Tn; r0 += kAttBlock) {  // datt = dout v^T
      const int rows = std::min(kAttBlock, Tn - r0);
      gemm(false, true, rows, r0 + rows, hs, T(1), d + size_t(r0) * C, C, v, W, T(0),
           da + size_t(r0) * Tn, Tn);
    }
    for (int c0 = 0; c0 < Tn; c0 += kAttBlock) {  // dv += att^T dout
      const int cols = std::min(kAttBlock, Tn - c0);
      gemm(true, false, cols, hs, Tn - c0, T(1), a + size_t(c0) * Tn + c0, Tn, d + size_t(c0) * C, C,
           T(1), dv + size_t(c0) * W, W);
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
      gemm(false, false, rows, hs, r0 + rows, scale, da + size_t(r0) * Tn, Tn, k, W, T(1),
           dq + size_t(r0) * W, W);
    }
    for (int c0 = 0; c0 < Tn; c0 += kAttBlock) {
      const int cols = std::min(kAttBlock, Tn - c0);
      gemm(true, false, cols, hs, Tn - c0, scale, da + size_t(c0) * Tn + c0, Tn, q + size_t(c0) * W,
           W, T(1), dk + size_t(c0) * W, W);
    }
}

}  // namespace

template <typename T>
void gqa_attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KV, int hs) {
  const Heads hd{NH, KV, hs};
  for_each_head(B, NH, Tn, hs, [&](int b, int h) { attention_forward_head(out, att, qkv, b, h, Tn, hd); });
}

// One task per (batch row, key/value head): its query heads in order, so that no two threads add
// into one dk, dv (with KV = NH a task is one head, as before grouped-query heads).
template <typename T>
void gqa_attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int NH,
                            int KV, int hs) {
  const Heads hd{NH, KV, hs};
  const int group = NH / KV;
  for_each_head(B, KV, Tn, hs * group, [&](int b, int g) {
    for (int h = g * group; h < (g + 1) * group; h++) attention_backward_head(dqkv, scratch, dout, qkv, att, b, h, Tn, hd);
  });
}

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  gqa_attention_forward(out, att, qkv, B, Tn, NH, NH, C / NH);
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int NH) {
  gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, Tn, NH, NH, C / NH);
}

#define DTB_INSTANTIATE_ATTENTION(T)                                                             \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                      \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int);                 \
  template void gqa_attention_forward<T>(T*, T*, const T*, int, int, int, int, int);                            \
  template void gqa_attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, int);

DTB_INSTANTIATE_ATTENTION(float)
DTB_INSTANTIATE_ATTENTION(double)
#undef DTB_INSTANTIATE_ATTENTION

}  // namespace dtb::cpu
