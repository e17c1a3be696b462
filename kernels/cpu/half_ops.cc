// HalfCpuOps<H>: convert the H inputs to float, run the float kernel of kernels/cpu/ops.h,
// round each H output once (see half_ops.h for the recipe). Elementwise and row-wise ops go
// through the float kernel in chunks of about kChunk elements, which it computes exactly as
// one whole call (no cross-row or cross-element state); GEMM-backed ops convert whole
// tensors so the sgemm calls are those of the float backend, and the attention ops go one
// group of batch entries at a time (the float kernel's per-(b, h) gemms do not depend on B).
#include "kernels/cpu/half_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

namespace dtb {

namespace {

// A dimension as a size; negative ones (a caller's error) count as empty.
size_t dim(int x) { return x > 0 ? size_t(x) : 0; }

}  // namespace

template <typename H>
float* HalfCpuOps<H>::buf(int slot, size_t n) {
  std::vector<float>& b = bufs_[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

template <typename H>
size_t HalfCpuOps<H>::scratch_bytes() const {
  size_t bytes = 0;
  for (const auto& b : bufs_) bytes += b.capacity() * sizeof(float);
  return bytes + (map_.capacity() + rows_.capacity() + tok_.capacity()) * sizeof(int32_t);
}

template <typename H>
int HalfCpuOps<H>::compact_rows(const int32_t* tokens, size_t n, int64_t lo, int64_t hi) {
  tok_.resize(n);
  rows_.clear();
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = tokens[i];
    if (t < lo || t >= hi) {
      tok_[i] = -1;
      continue;
    }
    const size_t r = size_t(t - lo);
    if (r >= map_.size()) map_.resize(r + 1, -1);
    if (map_[r] < 0) {
      map_[r] = int32_t(rows_.size());
      rows_.push_back(int32_t(r));
    }
    tok_[i] = map_[r];
  }
  for (int32_t r : rows_) map_[size_t(r)] = -1;
  return int(rows_.size());
}

// ---- memory ----

template <typename H>
void HalfCpuOps<H>::zero(H* p, size_t n) {
  if (n) std::memset(static_cast<void*>(p), 0, n * sizeof(H));
}
template <typename H>
void HalfCpuOps<H>::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
template <typename H>
void HalfCpuOps<H>::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

// ---- embeddings: only the distinct token rows are converted ----

template <typename H>
void HalfCpuOps<H>::encoder_forward(H* out, const int32_t* tokens, const H* wte, const H* wpe, int B, int Tn,
                                    int C) {
  const size_t BT = dim(B) * dim(Tn), Cs = dim(C);
  const int R = compact_rows(tokens, BT, 0, std::numeric_limits<int64_t>::max());
  float* we = buf(0, size_t(R) * Cs);
  float* pe = buf(1, dim(Tn) * Cs);
  float* o = buf(2, BT * Cs);
  for (int r = 0; r < R; ++r) convert_to_float(we + size_t(r) * Cs, wte + size_t(rows_[r]) * Cs, Cs);
  convert_to_float(pe, wpe, dim(Tn) * Cs);
  cpu::encoder_forward<float>(o, tok_.data(), we, pe, B, Tn, C);
  convert_from_float(out, o, BT * Cs);
}

template <typename H>
void HalfCpuOps<H>::encoder_backward(H* dwte, H* dwpe, const H* dout, const int32_t* tokens, int B, int Tn,
                                     int C) {
  const size_t BT = dim(B) * dim(Tn), Cs = dim(C);
  const int R = compact_rows(tokens, BT, 0, std::numeric_limits<int64_t>::max());
  float* dwe = buf(0, size_t(R) * Cs);
  float* dpe = buf(1, dim(Tn) * Cs);
  float* d = buf(2, BT * Cs);
  for (int r = 0; r < R; ++r) convert_to_float(dwe + size_t(r) * Cs, dwte + size_t(rows_[r]) * Cs, Cs);
  convert_to_float(dpe, dwpe, dim(Tn) * Cs);
  convert_to_float(d, dout, BT * Cs);
  cpu::encoder_backward<float>(dwe, dpe, d, tok_.data(), B, Tn, C);
  for (int r = 0; r < R; ++r) convert_from_float(dwte + size_t(rows_[r]) * Cs, dwe + size_t(r) * Cs, Cs);
  convert_from_float(dwpe, dpe, dim(Tn) * Cs);
}

template <typename H>
void HalfCpuOps<H>::embedding_shard_forward(H* out, const int32_t* tokens, const H* wte_shard, const H* wpe, int B,
                                            int Tn, int C, int v_begin, int v_end) {
  const size_t BT = dim(B) * dim(Tn), Cs = dim(C);
  const int R = compact_rows(tokens, BT, v_begin, v_end);
  float* we = buf(0, size_t(R) * Cs);
  float* pe = wpe ? buf(1, dim(Tn) * Cs) : nullptr;
  float* o = buf(2, BT * Cs);
  for (int r = 0; r < R; ++r) convert_to_float(we + size_t(r) * Cs, wte_shard + size_t(rows_[r]) * Cs, Cs);
  if (wpe) convert_to_float(pe, wpe, dim(Tn) * Cs);
  // Remapped tokens index the compact rows [0, R); the others are -1, outside the shard.
  cpu::embedding_shard_forward<float>(o, tok_.data(), we, pe, B, Tn, C, 0, R);
  convert_from_float(out, o, BT * Cs);
}

template <typename H>
void HalfCpuOps<H>::embedding_shard_backward(H* dwte_shard, H* dwpe, const H* dout, const int32_t* tokens, int B,
                                             int Tn, int C, int v_begin, int v_end) {
  const size_t BT = dim(B) * dim(Tn), Cs = dim(C);
  const int R = compact_rows(tokens, BT, v_begin, v_end);
  float* dwe = buf(0, size_t(R) * Cs);
  float* dpe = dwpe ? buf(1, dim(Tn) * Cs) : nullptr;
  float* d = buf(2, BT * Cs);
  for (int r = 0; r < R; ++r) convert_to_float(dwe + size_t(r) * Cs, dwte_shard + size_t(rows_[r]) * Cs, Cs);
  if (dwpe) convert_to_float(dpe, dwpe, dim(Tn) * Cs);
  convert_to_float(d, dout, BT * Cs);
  cpu::embedding_shard_backward<float>(dwe, dpe, d, tok_.data(), B, Tn, C, 0, R);
  for (int r = 0; r < R; ++r) convert_from_float(dwte_shard + size_t(rows_[r]) * Cs, dwe + size_t(r) * Cs, Cs);
  if (dwpe) convert_from_float(dwpe, dpe, dim(Tn) * Cs);
}

// ---- row-wise ops, in chunks of rows ----

namespace {
// Rows per chunk for rows of `len` elements: about kChunk elements, at least one row.
size_t chunk_rows(size_t len, size_t chunk) { return len ? std::max<size_t>(1, chunk / len) : chunk; }
}  // namespace

template <typename H>
void HalfCpuOps<H>::layernorm_forward(H* out, A* mean, A* rstd, const H* inp, const H* weight, const H* bias, int N,
                                      int C) {
  const size_t Ns = dim(N), Cs = dim(C), rows = std::min(Ns, chunk_rows(Cs, kChunk));
  float* w = buf(0, Cs);
  float* b = buf(1, Cs);
  float* x = buf(2, rows * Cs);
  float* y = buf(3, rows * Cs);
  convert_to_float(w, weight, Cs);
  convert_to_float(b, bias, Cs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(x, inp + n0 * Cs, k * Cs);
    cpu::layernorm_forward<float>(y, mean + n0, rstd + n0, x, w, b, int(k), C);
    convert_from_float(out + n0 * Cs, y, k * Cs);
  }
}

template <typename H>
void HalfCpuOps<H>::layernorm_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight,
                                       const A* mean, const A* rstd, int N, int C) {
  const size_t Ns = dim(N), Cs = dim(C), rows = std::min(Ns, chunk_rows(Cs, kChunk));
  float* w = buf(0, Cs);
  float* dw = buf(1, Cs);
  float* db = buf(2, Cs);
  float* dx = buf(3, rows * Cs);
  float* d = buf(4, rows * Cs);
  float* x = buf(5, rows * Cs);
  convert_to_float(w, weight, Cs);
  convert_to_float(dw, dweight, Cs);
  convert_to_float(db, dbias, Cs);
  // dweight and dbias stay float across the chunks (rows added in the whole call's order)
  // and are rounded once at the end.
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(dx, dinp + n0 * Cs, k * Cs);
    convert_to_float(d, dout + n0 * Cs, k * Cs);
    convert_to_float(x, inp + n0 * Cs, k * Cs);
    cpu::layernorm_backward<float>(dx, dw, db, d, x, w, mean + n0, rstd + n0, int(k), C);
    convert_from_float(dinp + n0 * Cs, dx, k * Cs);
  }
  convert_from_float(dweight, dw, Cs);
  convert_from_float(dbias, db, Cs);
}

template <typename H>
void HalfCpuOps<H>::add_bias(H* out, const H* bias, int N, int OC) {
  const size_t Ns = dim(N), Os = dim(OC), rows = std::min(Ns, chunk_rows(Os, kChunk));
  float* b = buf(0, Os);
  float* o = buf(1, rows * Os);
  convert_to_float(b, bias, Os);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(o, out + n0 * Os, k * Os);
    cpu::add_bias<float>(o, b, int(k), OC);
    convert_from_float(out + n0 * Os, o, k * Os);
  }
}

template <typename H>
void HalfCpuOps<H>::crossentropy_forward(A* losses, H* probs, const H* logits, const int32_t* targets, int N,
                                         int V) {
  const size_t Ns = dim(N), Vs = dim(V), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  float* p = buf(1, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(l, logits + n0 * Vs, k * Vs);
    cpu::crossentropy_forward<float>(losses + n0, p, l, targets + n0, int(k), V);
    convert_from_float(probs + n0 * Vs, p, k * Vs);
  }
}

template <typename H>
void HalfCpuOps<H>::crossentropy_backward(H* dlogits, const H* probs, const int32_t* targets, A dloss, int N,
                                          int V) {
  const size_t Ns = dim(N), Vs = dim(V), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* p = buf(0, rows * Vs);
  float* d = buf(1, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(p, probs + n0 * Vs, k * Vs);
    cpu::crossentropy_backward<float>(d, p, targets + n0, dloss, int(k), V);  // writes
    convert_from_float(dlogits + n0 * Vs, d, k * Vs);
  }
}

template <typename H>
void HalfCpuOps<H>::crossentropy_shard_max(A* maxes, const H* logits, int N, int Vl) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(l, logits + n0 * Vs, k * Vs);
    cpu::crossentropy_shard_max<float>(maxes + n0, l, int(k), Vl);
  }
}

template <typename H>
void HalfCpuOps<H>::crossentropy_shard_sums(A* sums, const H* logits, const A* maxes, const int32_t* targets, int N,
                                            int Vl, int v_begin) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  float* s = buf(1, 2 * rows);  // a chunk's (2k) layout: k sums, then k target logits
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(l, logits + n0 * Vs, k * Vs);
    cpu::crossentropy_shard_sums<float>(s, l, maxes + n0, targets + n0, int(k), Vl, v_begin);
    std::copy_n(s, k, sums + n0);
    std::copy_n(s + k, k, sums + Ns + n0);
  }
}

template <typename H>
void HalfCpuOps<H>::crossentropy_shard_forward(A* losses, H* probs, const H* logits, const A* maxes, const A* sums,
                                               int N, int Vl) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  float* p = buf(1, rows * Vs);
  float* s = buf(2, 2 * rows);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    std::copy_n(sums + n0, k, s);
    std::copy_n(sums + Ns + n0, k, s + k);
    convert_to_float(l, logits + n0 * Vs, k * Vs);
    cpu::crossentropy_shard_forward<float>(losses + n0, p, l, maxes + n0, s, int(k), Vl);
    convert_from_float(probs + n0 * Vs, p, k * Vs);
  }
}

template <typename H>
void HalfCpuOps<H>::crossentropy_shard_backward(H* dlogits, const H* probs, const int32_t* targets, A dloss, int N,
                                                int Vl, int v_begin) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* p = buf(0, rows * Vs);
  float* d = buf(1, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    convert_to_float(p, probs + n0 * Vs, k * Vs);
    cpu::crossentropy_shard_backward<float>(d, p, targets + n0, dloss, int(k), Vl, v_begin);  // writes
    convert_from_float(dlogits + n0 * Vs, d, k * Vs);
  }
}

// ---- matmuls: whole tensors, so the sgemm calls are exactly the float backend's ----

template <typename H>
void HalfCpuOps<H>::matmul_forward(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC) {
  linear_forward_in_float(out, inp, weight, bias, N, C, OC, [&](float* o, const float* x, const float* w,
                                                                 const float* b) {
    cpu::matmul_forward<float>(o, x, w, b, N, C, OC);
  });
}

template <typename H>
void HalfCpuOps<H>::matmul_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight,
                                    int N, int C, int OC) {
  linear_backward_in_float(dinp, dweight, dbias, dout, inp, weight, N, C, OC,
                           [&](float* dx, float* dw, float* db, const float* d, const float* x, const float* w) {
                             cpu::matmul_backward<float>(dx, dw, db, d, x, w, N, C, OC);
                           });
}

// ---- attention: a group of batch entries at a time ----

template <typename H>
void HalfCpuOps<H>::attention_forward(H* out, H* att, const H* qkv, int B, int Tn, int C, int NH) {
  const size_t Bs = dim(B), Ts = dim(Tn), Cs = dim(C), NHs = dim(NH);
  const size_t q_b = Ts * 3 * Cs, o_b = Ts * Cs, a_b = NHs * Ts * Ts;  // per batch entry
  const size_t bb = std::min(Bs, chunk_rows(q_b + o_b + a_b, kChunk));
  float* q = buf(0, bb * q_b);
  float* o = buf(1, bb * o_b);
  float* a = buf(2, bb * a_b);
  for (size_t b0 = 0; b0 < Bs; b0 += bb) {
    const size_t k = std::min(bb, Bs - b0);
    convert_to_float(q, qkv + b0 * q_b, k * q_b);
    cpu::attention_forward<float>(o, a, q, int(k), Tn, C, NH);  // writes both
    convert_from_float(out + b0 * o_b, o, k * o_b);
    convert_from_float(att + b0 * a_b, a, k * a_b);
  }
}

template <typename H>
void HalfCpuOps<H>::attention_backward(H* dqkv, H* scratch, const H* dout, const H* qkv, const H* att, int B,
                                       int Tn, int C, int NH) {
  (void)scratch;  // the float kernel's scratch is buf(4); the caller's H scratch is not touched
  const size_t Bs = dim(B), Ts = dim(Tn), Cs = dim(C), NHs = dim(NH);
  const size_t q_b = Ts * 3 * Cs, o_b = Ts * Cs, a_b = NHs * Ts * Ts;  // per batch entry
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
    cpu::attention_backward<float>(dq, s, d, q, a, int(k), Tn, C, NH);  // accumulates into dq
    convert_from_float(dqkv + b0 * q_b, dq, k * q_b);
  }
}

// ---- elementwise ops, in chunks of kChunk ----

template <typename H>
void HalfCpuOps<H>::gelu_forward(H* out, const H* inp, size_t n) {
  const size_t c = std::min(n, kChunk);
  float* x = buf(0, c);
  float* y = buf(1, c);
  for (size_t i0 = 0; i0 < n; i0 += c) {
    const size_t k = std::min(c, n - i0);
    convert_to_float(x, inp + i0, k);
    cpu::gelu_forward<float>(y, x, k);
    convert_from_float(out + i0, y, k);
  }
}

template <typename H>
void HalfCpuOps<H>::gelu_backward(H* dinp, const H* inp, const H* dout, size_t n) {
  const size_t c = std::min(n, kChunk);
  float* dx = buf(0, c);
  float* x = buf(1, c);
  float* d = buf(2, c);
  for (size_t i0 = 0; i0 < n; i0 += c) {
    const size_t k = std::min(c, n - i0);
    convert_to_float(dx, dinp + i0, k);
    convert_to_float(x, inp + i0, k);
    convert_to_float(d, dout + i0, k);
    cpu::gelu_backward<float>(dx, x, d, k);  // accumulates
    convert_from_float(dinp + i0, dx, k);
  }
}

template <typename H>
void HalfCpuOps<H>::residual_forward(H* out, const H* a, const H* b, size_t n) {
  // A chunk of out aliases only the same chunk of a or b, read before it is written.
  const size_t c = std::min(n, kChunk);
  float* x = buf(0, c);
  float* y = buf(1, c);
  for (size_t i0 = 0; i0 < n; i0 += c) {
    const size_t k = std::min(c, n - i0);
    convert_to_float(x, a + i0, k);
    convert_to_float(y, b + i0, k);
    cpu::residual_forward<float>(x, x, y, k);
    convert_from_float(out + i0, x, k);
  }
}

template <typename H>
void HalfCpuOps<H>::scale(H* x, A a, size_t n) {
  const size_t c = std::min(n, kChunk);
  float* f = buf(0, c);
  for (size_t i0 = 0; i0 < n; i0 += c) {
    const size_t k = std::min(c, n - i0);
    convert_to_float(f, x + i0, k);
    cpu::scale<float>(f, a, k);
    convert_from_float(x + i0, f, k);
  }
}

// ---- AdamW ----

template <typename H>
void HalfCpuOps<H>::adamw_update(H* param, const H* grad, A* m, A* v, size_t n, const AdamWParams& hp, int t) {
  const size_t c = std::min(n, kChunk);
  float* p = buf(0, c);
  float* g = buf(1, c);
  for (size_t i0 = 0; i0 < n; i0 += c) {
    const size_t k = std::min(c, n - i0);
    convert_to_float(p, param + i0, k);
    convert_to_float(g, grad + i0, k);
    cpu::adamw_update<float>(p, g, m + i0, v + i0, k, hp, t);
    convert_from_float(param + i0, p, k);  // an update below half an ulp of param is lost here
  }
}

template <typename H>
void HalfCpuOps<H>::adamw_update_master(H* param, A* master, const H* grad, A* m, A* v, size_t n,
                                        const AdamWParams& hp, int t, A grad_scale) {
  const size_t c = std::min(n, kChunk);
  float* g = buf(0, c);
  for (size_t i0 = 0; i0 < n; i0 += c) {
    const size_t k = std::min(c, n - i0);
    convert_to_float(g, grad + i0, k);
    if (grad_scale != 1.0f)
      for (size_t i = 0; i < k; ++i) g[i] *= grad_scale;
    cpu::adamw_update<float>(master + i0, g, m + i0, v + i0, k, hp, t);
    convert_from_float(param + i0, master + i0, k);
  }
}

template class HalfCpuOps<bf16>;
template class HalfCpuOps<fp16>;

}  // namespace dtb
