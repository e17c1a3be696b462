// HalfCpuOps<H>'s Llama-block ops (RMSNorm, SwiGLU, rotary embeddings, grouped-query
// attention) and context parallelism's blockwise attention, by half_ops.h's recipe: convert
// the H inputs to float, run the float kernel (llama_ops.cc, attention.cc,
// attention_block.cc), round each H output once. Row-wise ops go in chunks of rows, the
// attention ops one group of batch entries at a time (the float kernels' per-(b, h) work
// does not depend on B). The GPT-2 ops are half_ops.cc's.
#include <algorithm>
#include <cstddef>

#include "kernels/cpu/half_ops.h"

namespace dtb {

namespace {

// As half_ops.cc: a dimension as a size (negative ones, a caller's error, count as empty),
// and the rows of `len` elements in a chunk of about `chunk` elements (at least one row).
size_t dim(int x) { return x > 0 ? size_t(x) : 0; }
size_t chunk_rows(size_t len, size_t chunk) { return len ? std::max<size_t>(1, chunk / len) : chunk; }

// `rows` rows of C elements, row r at src + r * stride, widened into dense dst (rows, C);
// and the rounding back into the strided rows.
template <typename H>
void gather_rows(float* dst, const H* src, size_t rows, size_t stride, size_t C) {
  for (size_t r = 0; r < rows; ++r) convert_to_float(dst + r * C, src + r * stride, C);
}
template <typename H>
void scatter_rows(H* dst, const float* src, size_t rows, size_t stride, size_t C) {
  for (size_t r = 0; r < rows; ++r) convert_from_float(dst + r * stride, src + r * C, C);
}

}  // namespace

// ---- RMSNorm: rows in chunks; rstd in A; dweight float across the chunks, rounded once ----

template <typename H>
void HalfCpuOps<H>::rmsnorm_forward(H* out, A* rstd, const H* inp, const H* weight, A eps, int N, int C) {
  const size_t Ns = dim(N), Cs = dim(C), rows = std::min(Ns, chunk_rows(Cs, kChunk));
  float* w = buf(0, Cs);
  float* x = buf(1, rows * Cs);
  float* y = buf(2, rows * Cs);
  convert_to_float(w, weight, Cs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(x, inp + n0 * Cs, k * Cs);
    cpu::rmsnorm_forward<float>(y, rstd + n0, x, w, eps, int(k), C);
    convert_from_float(out + n0 * Cs, y, k * Cs);
  }
}

template <typename H>
void HalfCpuOps<H>::rmsnorm_backward(H* dinp, H* dweight, const H* dout, const H* inp, const H* weight,
                                     const A* rstd, int N, int C) {
  const size_t Ns = dim(N), Cs = dim(C), rows = std::min(Ns, chunk_rows(Cs, kChunk));
  float* w = buf(0, Cs);
  float* dw = buf(1, Cs);
  float* dx = buf(2, rows * Cs);
  float* d = buf(3, rows * Cs);
  float* x = buf(4, rows * Cs);
  convert_to_float(w, weight, Cs);
  convert_to_float(dw, dweight, Cs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(dx, dinp + n0 * Cs, k * Cs);
    convert_to_float(d, dout + n0 * Cs, k * Cs);
    convert_to_float(x, inp + n0 * Cs, k * Cs);
    cpu::rmsnorm_backward<float>(dx, dw, d, x, w, rstd + n0, int(k), C);  // accumulates into dx, dw
    convert_from_float(dinp + n0 * Cs, dx, k * Cs);
  }
  convert_from_float(dweight, dw, Cs);
}

// ---- SwiGLU: rows of (2F) in, (F) out, in chunks ----

template <typename H>
void HalfCpuOps<H>::swiglu_forward(H* out, const H* inp, int N, int F) {
  const size_t Ns = dim(N), Fs = dim(F), rows = std::min(Ns, chunk_rows(3 * Fs, kChunk));
  float* x = buf(0, rows * 2 * Fs);
  float* y = buf(1, rows * Fs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(x, inp + n0 * 2 * Fs, k * 2 * Fs);
    cpu::swiglu_forward<float>(y, x, int(k), F);  // writes
    convert_from_float(out + n0 * Fs, y, k * Fs);
  }
}

template <typename H>
void HalfCpuOps<H>::swiglu_backward(H* dinp, const H* inp, const H* dout, int N, int F) {
  const size_t Ns = dim(N), Fs = dim(F), rows = std::min(Ns, chunk_rows(5 * Fs, kChunk));
  float* dx = buf(0, rows * 2 * Fs);
  float* x = buf(1, rows * 2 * Fs);
  float* d = buf(2, rows * Fs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(dx, dinp + n0 * 2 * Fs, k * 2 * Fs);
    convert_to_float(x, inp + n0 * 2 * Fs, k * 2 * Fs);
    convert_to_float(d, dout + n0 * Fs, k * Fs);
    cpu::swiglu_backward<float>(dx, x, d, int(k), F);  // accumulates
    convert_from_float(dinp + n0 * 2 * Fs, dx, k * 2 * Fs);
  }
}

// ---- rotary embeddings: in place, a run of positions of one sequence at a time ----

namespace {
// The float kernel on rows [t0, t0 + k) of sequence b is the whole call's on them: a row's
// angles depend only on its position pos0 + t, which the chunk keeps by starting at pos0 + t0.
// Rows are W = (NH + 2 KV) hs wide; only their first QK = (NH + KV) hs elements, the q and k
// heads, are rounded back: v is not written. rotate(x, k, p0) is the float kernel on k rows.
template <typename H, typename Rotate>
void rope_chunks(H* qkv, float* x, size_t rows, size_t B, size_t Ts, size_t W, size_t QK, int pos0,
                 Rotate rotate) {
  for (size_t b = 0; b < B; ++b) {
    for (size_t t0 = 0; t0 < Ts; t0 += rows) {
      const size_t k = std::min(rows, Ts - t0);
      H* p = qkv + (b * Ts + t0) * W;
      convert_to_float(x, p, k * W);
      rotate(x, int(k), pos0 + int(t0));
      for (size_t r = 0; r < k; ++r) convert_from_float(p + r * W, x + r * W, QK);
    }
  }
}
}  // namespace

template <typename H>
void HalfCpuOps<H>::rope_forward(H* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  const size_t W = (dim(NH) + 2 * dim(KV)) * dim(hs), QK = (dim(NH) + dim(KV)) * dim(hs), Ts = dim(Tn);
  const size_t rows = std::min(Ts, chunk_rows(W, kChunk));
  rope_chunks(qkv, buf(0, rows * W), rows, dim(B), Ts, W, QK, pos0, [&](float* x, int k, int p0) {
    cpu::rope_forward<float>(x, 1, k, NH, KV, hs, p0, theta);
  });
}

template <typename H>
void HalfCpuOps<H>::rope_backward(H* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  const size_t W = (dim(NH) + 2 * dim(KV)) * dim(hs), QK = (dim(NH) + dim(KV)) * dim(hs), Ts = dim(Tn);
  const size_t rows = std::min(Ts, chunk_rows(W, kChunk));
  rope_chunks(dqkv, buf(0, rows * W), rows, dim(B), Ts, W, QK, pos0, [&](float* x, int k, int p0) {
    cpu::rope_backward<float>(x, 1, k, NH, KV, hs, p0, theta);
  });
}

// ---- grouped-query attention: a group of batch entries at a time ----

template <typename H>
void HalfCpuOps<H>::gqa_attention_forward(H* out, H* att, const H* qkv, int B, int Tn, int NH, int KV, int hs) {
  const size_t Bs = dim(B), Ts = dim(Tn), NHs = dim(NH), hss = dim(hs);
  const size_t q_b = Ts * (NHs + 2 * dim(KV)) * hss, o_b = Ts * NHs * hss, a_b = NHs * Ts * Ts;  // per entry
  const size_t bb = std::min(Bs, chunk_rows(q_b + o_b + a_b, kChunk));
  float* q = buf(0, bb * q_b);
  float* o = buf(1, bb * o_b);
  float* a = buf(2, bb * a_b);
  for (size_t b0 = 0; b0 < Bs; b0 += bb) {
    const size_t k = std::min(bb, Bs - b0);
    convert_to_float(q, qkv + b0 * q_b, k * q_b);
    cpu::gqa_attention_forward<float>(o, a, q, int(k), Tn, NH, KV, hs);  // writes both
    convert_from_float(out + b0 * o_b, o, k * o_b);
    convert_from_float(att + b0 * a_b, a, k * a_b);
  }
}

template <typename H>
void HalfCpuOps<H>::gqa_attention_backward(H* dqkv, H* scratch, const H* dout, const H* qkv, const H* att, int B,
                                           int Tn, int NH, int KV, int hs) {
  (void)scratch;  // the float kernel's scratch is buf(4); the caller's H scratch is not touched
  const size_t Bs = dim(B), Ts = dim(Tn), NHs = dim(NH), hss = dim(hs);
  const size_t q_b = Ts * (NHs + 2 * dim(KV)) * hss, o_b = Ts * NHs * hss, a_b = NHs * Ts * Ts;
  const size_t bb = std::min(Bs, chunk_rows(2 * q_b + o_b + 2 * a_b, kChunk));
  float* dq = buf(0, bb * q_b);
  float* q = buf(1, bb * q_b);
  float* d = buf(2, bb * o_b);
  float* a = buf(3, bb * a_b);
  float* s = buf(4, bb * a_b);
  for (size_t b0 = 0; b0 < Bs; b0 += bb) {
    const size_t k = std::min(bb, Bs - b0);
    convert_to_float(dq, dqkv + b0 * q_b, k * q_b);
    convert_to_float(q, qkv + b0 * q_b, k * q_b);
    convert_to_float(d, dout + b0 * o_b, k * o_b);
    convert_to_float(a, att + b0 * a_b, k * a_b);
    cpu::gqa_attention_backward<float>(dq, s, d, q, a, int(k), Tn, NH, KV, hs);  // accumulates into dq
    convert_from_float(dqkv + b0 * q_b, dq, k * q_b);
  }
}

// ---- blockwise attention (context parallelism): strided rows gathered, a group of batch
// entries at a time; lse in A ----

template <typename H>
void HalfCpuOps<H>::attention_block_forward(H* out, A* lse, H* scratch, const H* q, int q_stride, const H* k,
                                            const H* v, int kv_stride, int B, int Tq, int Tk, int C, int NH,
                                            int qpos0, int kpos0) {
  (void)scratch;  // the float kernel's is buf(4)
  const size_t Bs = dim(B), Tqs = dim(Tq), Tks = dim(Tk), Cs = dim(C), qs = dim(q_stride), ks = dim(kv_stride);
  const size_t bb = std::min(Bs, chunk_rows(2 * Tqs * Cs + 2 * Tks * Cs, kChunk));
  float* qf = buf(0, bb * Tqs * Cs);
  float* kf = buf(1, bb * Tks * Cs);
  float* vf = buf(2, bb * Tks * Cs);
  float* o = buf(3, bb * Tqs * Cs);
  float* s = buf(4, Tqs * Tks);
  for (size_t b0 = 0; b0 < Bs; b0 += bb) {
    const size_t n = std::min(bb, Bs - b0);
    gather_rows(qf, q + b0 * Tqs * qs, n * Tqs, qs, Cs);
    gather_rows(kf, k + b0 * Tks * ks, n * Tks, ks, Cs);
    gather_rows(vf, v + b0 * Tks * ks, n * Tks, ks, Cs);
    cpu::attention_block_forward<float>(o, lse + b0 * Tqs * dim(NH), s, qf, C, kf, vf, C, int(n), Tq, Tk, C, NH,
                                        qpos0, kpos0);  // writes out and lse
    convert_from_float(out + b0 * Tqs * Cs, o, n * Tqs * Cs);
  }
}

template <typename H>
void HalfCpuOps<H>::attention_merge(H* out, A* lse, const H* out2, const A* lse2, int N, int C, int NH) {
  const size_t Ns = dim(N), Cs = dim(C), rows = std::min(Ns, chunk_rows(2 * Cs, kChunk));
  float* o = buf(0, rows * Cs);
  float* o2 = buf(1, rows * Cs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(o, out + n0 * Cs, k * Cs);
    convert_to_float(o2, out2 + n0 * Cs, k * Cs);
    cpu::attention_merge<float>(o, lse + n0 * dim(NH), o2, lse2 + n0 * dim(NH), int(k), C, NH);
    convert_from_float(out + n0 * Cs, o, k * Cs);
  }
}

template <typename H>
void HalfCpuOps<H>::attention_block_backward(H* dq, H* dk, H* dv, H* scratch, const H* dout, const H* out,
                                             const A* lse, const H* q, int q_stride, const H* k, const H* v,
                                             int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0,
                                             int kpos0) {
  (void)scratch;  // the float kernel's is behind dv's in buf(7)
  const size_t Bs = dim(B), Tqs = dim(Tq), Tks = dim(Tk), Cs = dim(C), qs = dim(q_stride), ks = dim(kv_stride);
  const size_t bb = std::min(Bs, chunk_rows(4 * Tqs * Cs + 4 * Tks * Cs, kChunk));
  const size_t nq = bb * Tqs * Cs, nk = bb * Tks * Cs;
  // All kSlots = 8 buffers: the query rows' q, dq, dout, out in 0-3, the key rows' k, v, dk
  // in 4-6, dv and the float kernel's scratch (2 Tq Tk + Tq) behind it in 7.
  float* qf = buf(0, nq);
  float* dqf = buf(1, nq);
  float* df = buf(2, nq);
  float* of = buf(3, nq);
  float* kf = buf(4, nk);
  float* vf = buf(5, nk);
  float* dkf = buf(6, nk);
  float* dvf = buf(7, nk + 2 * Tqs * Tks + Tqs);
  float* s = dvf + nk;
  for (size_t b0 = 0; b0 < Bs; b0 += bb) {
    const size_t n = std::min(bb, Bs - b0);
    const size_t qo = b0 * Tqs, ko = b0 * Tks;  // first row of the group
    gather_rows(qf, q + qo * qs, n * Tqs, qs, Cs);
    gather_rows(dqf, dq + qo * qs, n * Tqs, qs, Cs);
    convert_to_float(df, dout + qo * Cs, n * Tqs * Cs);
    convert_to_float(of, out + qo * Cs, n * Tqs * Cs);
    gather_rows(kf, k + ko * ks, n * Tks, ks, Cs);
    gather_rows(vf, v + ko * ks, n * Tks, ks, Cs);
    gather_rows(dkf, dk + ko * ks, n * Tks, ks, Cs);
    gather_rows(dvf, dv + ko * ks, n * Tks, ks, Cs);
    cpu::attention_block_backward<float>(dqf, dkf, dvf, s, df, of, lse + qo * dim(NH), qf, C, kf, vf, C, int(n),
                                         Tq, Tk, C, NH, qpos0, kpos0);  // accumulates into dq, dk, dv
    scatter_rows(dq + qo * qs, dqf, n * Tqs, qs, Cs);
    scatter_rows(dk + ko * ks, dkf, n * Tks, ks, Cs);
    scatter_rows(dv + ko * ks, dvf, n * Tks, ks, Cs);
  }
}

// The members defined here, for the two storage types (half_ops.cc instantiates the class's
// others: one explicit instantiation of the class per program).
#define DTB_INSTANTIATE_HALF_LLAMA_OPS(H)                                                                         \
  template void HalfCpuOps<H>::rmsnorm_forward(H*, float*, const H*, const H*, float, int, int);                 \
  template void HalfCpuOps<H>::rmsnorm_backward(H*, H*, const H*, const H*, const H*, const float*, int, int);   \
  template void HalfCpuOps<H>::swiglu_forward(H*, const H*, int, int);                                           \
  template void HalfCpuOps<H>::swiglu_backward(H*, const H*, const H*, int, int);                                \
  template void HalfCpuOps<H>::rope_forward(H*, int, int, int, int, int, int, double);                           \
  template void HalfCpuOps<H>::rope_backward(H*, int, int, int, int, int, int, double);                          \
  template void HalfCpuOps<H>::gqa_attention_forward(H*, H*, const H*, int, int, int, int, int);                 \
  template void HalfCpuOps<H>::gqa_attention_backward(H*, H*, const H*, const H*, const H*, int, int, int, int,  \
                                                      int);                                                      \
  template void HalfCpuOps<H>::attention_block_forward(H*, float*, H*, const H*, int, const H*, const H*, int,   \
                                                       int, int, int, int, int, int, int);                       \
  template void HalfCpuOps<H>::attention_merge(H*, float*, const H*, const float*, int, int, int);               \
  template void HalfCpuOps<H>::attention_block_backward(H*, H*, H*, H*, const H*, const H*, const float*,        \
                                                        const H*, int, const H*, const H*, int, int, int, int,   \
                                                        int, int, int, int);

DTB_INSTANTIATE_HALF_LLAMA_OPS(bf16)
DTB_INSTANTIATE_HALF_LLAMA_OPS(fp16)
#undef DTB_INSTANTIATE_HALF_LLAMA_OPS

}  // namespace dtb
