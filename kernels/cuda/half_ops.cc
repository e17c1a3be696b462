// CudaHalfOps<H>: cast the H inputs into fp32 device scratch, run the fp32 CUDA kernel (or
// the cuBLASLt GEMM on the H operands), cast each H output back once (see half_ops.h for the
// recipe). Everything on the device's compute stream.
#include "kernels/cuda/half_ops.h"

#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.cuh"

namespace dtb {
namespace {

size_t dim(int x) { return x > 0 ? size_t(x) : 0; }

// The GEMM precision whose input type is H (cuBLASLt reads the H values directly).
template <typename H>
constexpr cuda::GemmPrecision gemm_precision() {
  return std::is_same_v<H, bf16> ? cuda::GemmPrecision::bf16 : cuda::GemmPrecision::fp16;
}

// Rows per chunk for rows of `len` elements: about `chunk` elements, at least one row.
size_t chunk_rows(size_t len, size_t chunk) { return len ? std::max<size_t>(1, chunk / len) : chunk; }

}  // namespace

// ---- scratch, conversions, memory ----

template <typename H>
CudaHalfOps<H>::CudaHalfOps(CudaDevice& device, cuda::Gemm& gemm) : device_(device), gemm_(gemm), f32_(device, gemm) {}

template <typename H>
float* CudaHalfOps<H>::buf(int slot, size_t n) {
  Tensor& t = bufs_[slot];
  if (size_t(t.numel()) < n) {
    t = Tensor();  // the old block goes back to the cache first, so it may be reused here
    t = Tensor::empty(device_, {int64_t(n)}, DType::f32, MemCategory::workspace);
  }
  return t.defined() ? t.template data<float>() : nullptr;
}

template <typename H>
void CudaHalfOps<H>::to_float(float* dst, const H* src, size_t n) {
  cuda::cast(dst, DType::f32, src, dtype_of<H>(), n, s());
}

template <typename H>
float* CudaHalfOps<H>::widen(int slot, const H* src, size_t n) {
  float* f = buf(slot, n);
  to_float(f, src, n);
  return f;
}

template <typename H>
void CudaHalfOps<H>::round_to(H* dst, const float* src, size_t n) {
  cuda::cast(dst, dtype_of<H>(), src, DType::f32, n, s());
}

template <typename H>
size_t CudaHalfOps<H>::scratch_bytes() const {
  size_t b = 0;
  for (const Tensor& t : bufs_) b += t.defined() ? t.bytes() : 0;
  return b;
}

template <typename H>
std::pair<int64_t, int64_t> CudaHalfOps<H>::touched_rows(const int32_t* tokens, size_t n, int v_begin, int v_end) {
  if (n == 0) return {v_begin, v_begin};
  host_tokens_.resize(n);
  f32_.copy_to_host(host_tokens_.data(), tokens, n * sizeof(int32_t));  // after the queued work
  const auto [t_lo, t_hi] = std::minmax_element(host_tokens_.begin(), host_tokens_.end());
  const int64_t lo = std::max<int64_t>(*t_lo, v_begin), end = std::min<int64_t>(int64_t(*t_hi) + 1, v_end);
  return end > lo ? std::pair{lo, end} : std::pair<int64_t, int64_t>{v_begin, v_begin};
}

template <typename H>
void CudaHalfOps<H>::zero(H* p, size_t n) {
  if (n) DTB_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(H), s()));
}
template <typename H>
void CudaHalfOps<H>::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  f32_.copy_from_host(dst, host_src, bytes);
}
template <typename H>
void CudaHalfOps<H>::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  f32_.copy_to_host(host_dst, src, bytes);
}
template <typename H>
int64_t CudaHalfOps<H>::copy_to_host_async(void* host_dst, const void* src, size_t bytes) {
  return f32_.copy_to_host_async(host_dst, src, bytes);
}
template <typename H>
int64_t CudaHalfOps<H>::copy_from_host_async(void* dst, const void* host_src, size_t bytes) {
  return f32_.copy_from_host_async(dst, host_src, bytes);
}

// ---- embeddings: only the wte rows the tokens touch ----

template <typename H>
void CudaHalfOps<H>::encoder_forward(H* out, const int32_t* tokens, const H* wte, const H* wpe, int B, int Tn,
                                     int C) {
  // Every token lies in [0, INT_MAX): the shard op over it is the encoder's (one add each).
  embedding_shard_forward(out, tokens, wte, wpe, B, Tn, C, 0, INT_MAX);
}

template <typename H>
void CudaHalfOps<H>::encoder_backward(H* dwte, H* dwpe, const H* dout, const int32_t* tokens, int B, int Tn,
                                      int C) {
  embedding_shard_backward(dwte, dwpe, dout, tokens, B, Tn, C, 0, INT_MAX);
}

template <typename H>
void CudaHalfOps<H>::embedding_shard_forward(H* out, const int32_t* tokens, const H* wte_shard, const H* wpe,
                                             int B, int Tn, int C, int v_begin, int v_end) {
  const size_t BT = dim(B) * dim(Tn), Cs = dim(C);
  if (BT == 0 || Cs == 0) return;
  const auto [lo, end] = touched_rows(tokens, BT, v_begin, v_end);
  const size_t R = size_t(end - lo);
  float* we = R ? widen(0, wte_shard + size_t(lo - v_begin) * Cs, R * Cs) : nullptr;
  float* pe = wpe ? widen(1, wpe, dim(Tn) * Cs) : nullptr;
  float* o = buf(2, BT * Cs);
  // Tokens outside [lo, hi] are outside [v_begin, v_end) too: the kernel gives them 0.
  const int r_begin = R ? int(lo) : 0, r_end = R ? int(end) : 0;
  cuda::embedding_shard_forward(o, tokens, we, pe, B, Tn, C, r_begin, r_end, s());
  round_to(out, o, BT * Cs);
}

template <typename H>
void CudaHalfOps<H>::embedding_shard_backward(H* dwte_shard, H* dwpe, const H* dout, const int32_t* tokens,
                                              int B, int Tn, int C, int v_begin, int v_end) {
  const size_t BT = dim(B) * dim(Tn), Cs = dim(C);
  if (BT == 0 || Cs == 0) return;
  const auto [lo, end] = touched_rows(tokens, BT, v_begin, v_end);
  const size_t R = size_t(end - lo);
  H* rows = R ? dwte_shard + size_t(lo - v_begin) * Cs : nullptr;
  float* dwe = R ? widen(0, rows, R * Cs) : nullptr;
  float* dpe = dwpe ? widen(1, dwpe, dim(Tn) * Cs) : nullptr;
  float* d = widen(2, dout, BT * Cs);
  const int r_begin = R ? int(lo) : 0, r_end = R ? int(end) : 0;
  cuda::embedding_shard_backward(dwe, dpe, d, tokens, B, Tn, C, r_begin, r_end, s());  // accumulates
  if (R) round_to(rows, dwe, R * Cs);  // an untouched row rounds back to itself
  if (dwpe) round_to(dwpe, dpe, dim(Tn) * Cs);
}

// ---- LayerNorm and the bias ----

template <typename H>
void CudaHalfOps<H>::layernorm_forward(H* out, A* mean, A* rstd, const H* inp, const H* weight, const H* bias,
                                       int N, int C) {
  const size_t n = dim(N) * dim(C);
  float* x = widen(0, inp, n);
  float* w = widen(1, weight, dim(C));
  float* b = widen(2, bias, dim(C));
  float* y = buf(3, n);
  cuda::layernorm_forward(y, mean, rstd, x, w, b, N, C, s());  // writes y, mean, rstd
  round_to(out, y, n);
}

template <typename H>
void CudaHalfOps<H>::layernorm_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp,
                                        const H* weight, const A* mean, const A* rstd, int N, int C) {
  const size_t n = dim(N) * dim(C), Cs = dim(C);
  float* dx = widen(0, dinp, n);
  float* d = widen(1, dout, n);
  float* x = widen(2, inp, n);
  float* w = widen(3, weight, Cs);
  float* dw = widen(4, dweight, Cs);
  float* db = widen(5, dbias, Cs);
  cuda::layernorm_backward(dx, dw, db, d, x, w, mean, rstd, N, C, s());  // accumulates all three
  round_to(dinp, dx, n);
  round_to(dweight, dw, Cs);
  round_to(dbias, db, Cs);
}

template <typename H>
void CudaHalfOps<H>::add_bias(H* out, const H* bias, int N, int OC) {
  const size_t n = dim(N) * dim(OC);
  float* o = widen(0, out, n);
  float* b = widen(1, bias, dim(OC));
  cuda::add_bias(o, b, N, OC, s());  // accumulates
  round_to(out, o, n);
}

// ---- matmuls: cuBLASLt on the H operands, fp32 accumulation and output ----

template <typename H>
void CudaHalfOps<H>::matmul_forward(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC) {
  const size_t Ns = dim(N), Os = dim(OC);
  if (Ns == 0 || Os == 0) return;
  float* o = buf(0, Ns * Os);
  // o (N,OC) = inp (N,C) @ weight^T, weight stored (OC,C) (K = C = 0 gives 0); bias in fp32.
  gemm_.matmul(inp, weight, o, N, OC, C, false, true, 1.0f, 0.0f, gemm_precision<H>(), s());
  if (bias) cuda::add_bias(o, widen(1, bias, Os), N, OC, s());
  round_to(out, o, Ns * Os);
}

template <typename H>
void CudaHalfOps<H>::matmul_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight,
                                     int N, int C, int OC) {
  const size_t Ns = dim(N), Cs = dim(C), Os = dim(OC);
  if (Ns == 0 || Os == 0) return;
  constexpr cuda::GemmPrecision p = gemm_precision<H>();
  if (Cs > 0) {
    if (dinp) {  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
      float* dx = widen(0, dinp, Ns * Cs);
      gemm_.matmul(dout, weight, dx, N, C, OC, false, false, 1.0f, 1.0f, p, s());
      round_to(dinp, dx, Ns * Cs);
    }
    if (dweight) {  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C); dout stored (N,OC)
      float* dw = widen(1, dweight, Os * Cs);
      gemm_.matmul(dout, inp, dw, OC, C, N, true, false, 1.0f, 1.0f, p, s());
      round_to(dweight, dw, Os * Cs);
    }
  }
  if (dbias) {  // dbias (OC) += column sums of dout, in fp32 as the float op
    float* db = widen(2, dbias, Os);
    cuda::column_sum_accumulate(db, widen(3, dout, Ns * Os), N, OC, s());
    round_to(dbias, db, Os);
  }
}

// ---- attention: the fp32 kernels on widened inputs ----

template <typename H>
void CudaHalfOps<H>::attention_forward(H* out, H* att, const H* qkv, int B, int Tn, int C, int NH) {
  const size_t BT = dim(B) * dim(Tn), natt = dim(B) * dim(NH) * dim(Tn) * dim(Tn);
  float* q = widen(0, qkv, BT * 3 * dim(C));
  float* o = buf(1, BT * dim(C));
  float* a = buf(2, natt);
  cuda::attention_forward(gemm_, o, a, q, B, Tn, C, NH, s());  // writes both
  round_to(out, o, BT * dim(C));
  round_to(att, a, natt);
}

template <typename H>
void CudaHalfOps<H>::attention_backward(H* dqkv, H* scratch, const H* dout, const H* qkv, const H* att, int B,
                                        int Tn, int C, int NH) {
  (void)scratch;  // the fp32 kernel's scratch is buf(4); the caller's H scratch is not touched
  const size_t BT = dim(B) * dim(Tn), natt = dim(B) * dim(NH) * dim(Tn) * dim(Tn);
  float* dq = widen(0, dqkv, BT * 3 * dim(C));
  float* q = widen(1, qkv, BT * 3 * dim(C));
  float* d = widen(2, dout, BT * dim(C));
  float* a = widen(3, att, natt);
  float* sc = buf(4, natt);
  cuda::attention_backward(gemm_, dq, sc, d, q, a, B, Tn, C, NH, s());  // accumulates into dq
  round_to(dqkv, dq, BT * 3 * dim(C));
}

// ---- elementwise ops ----

template <typename H>
void CudaHalfOps<H>::gelu_forward(H* out, const H* inp, size_t n) {
  float* x = widen(0, inp, n);
  float* y = buf(1, n);
  cuda::gelu_forward(y, x, n, s());
  round_to(out, y, n);
}

template <typename H>
void CudaHalfOps<H>::gelu_backward(H* dinp, const H* inp, const H* dout, size_t n) {
  float* dx = widen(0, dinp, n);
  float* x = widen(1, inp, n);
  float* d = widen(2, dout, n);
  cuda::gelu_backward(dx, x, d, n, s());  // accumulates
  round_to(dinp, dx, n);
}

template <typename H>
void CudaHalfOps<H>::residual_forward(H* out, const H* a, const H* b, size_t n) {
  float* x = widen(0, a, n);  // both read before out (which may alias a or b) is written
  float* y = widen(1, b, n);
  cuda::residual_forward(x, x, y, n, s());
  round_to(out, x, n);
}

template <typename H>
void CudaHalfOps<H>::scale(H* x, A a, size_t n) {
  float* f = widen(0, x, n);
  cuda::scale(f, a, n, s());
  round_to(x, f, n);  // fp16: past 65504 rounds to inf
}

// ---- AdamW ----

template <typename H>
void CudaHalfOps<H>::adamw_update(H* param, const H* grad, A* m, A* v, size_t n, const AdamWParams& hp, int t) {
  float* p = widen(0, param, n);
  float* g = widen(1, grad, n);
  cuda::adamw_update(p, g, m, v, n, hp, t, s());
  round_to(param, p, n);  // an update below half an ulp of param is lost here
}

template <typename H>
void CudaHalfOps<H>::adamw_update_master(H* param, A* master, const H* grad, A* m, A* v, size_t n,
                                         const AdamWParams& hp, int t, A grad_scale) {
  float* g = widen(0, grad, n);
  if (grad_scale != 1.0f) cuda::scale(g, grad_scale, n, s());  // one fp32 product per element
  cuda::adamw_update(master, g, m, v, n, hp, t, s());
  round_to(param, master, n);
}

// ---- cross-entropy, in chunks of rows ----

template <typename H>
void CudaHalfOps<H>::crossentropy_forward(A* losses, H* probs, const H* logits, const int32_t* targets, int N,
                                          int V) {
  const size_t Ns = dim(N), Vs = dim(V), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  float* p = buf(1, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    to_float(l, logits + n0 * Vs, k * Vs);
    cuda::crossentropy_forward(losses + n0, p, l, targets + n0, int(k), V, s());
    round_to(probs + n0 * Vs, p, k * Vs);
  }
}

template <typename H>
void CudaHalfOps<H>::crossentropy_backward(H* dlogits, const H* probs, const int32_t* targets, A dloss, int N,
                                           int V) {
  const size_t Ns = dim(N), Vs = dim(V), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* p = buf(0, rows * Vs);
  float* d = buf(1, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    to_float(p, probs + n0 * Vs, k * Vs);
    cuda::crossentropy_backward(d, p, targets + n0, dloss, int(k), V, s());  // writes
    round_to(dlogits + n0 * Vs, d, k * Vs);
  }
}

template <typename H>
void CudaHalfOps<H>::crossentropy_shard_max(A* maxes, const H* logits, int N, int Vl) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    to_float(l, logits + n0 * Vs, k * Vs);
    cuda::crossentropy_shard_max(maxes + n0, l, int(k), Vl, s());
  }
}

template <typename H>
void CudaHalfOps<H>::crossentropy_shard_sums(A* sums, const H* logits, const A* maxes, const int32_t* targets,
                                             int N, int Vl, int v_begin) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  // One chunk writes the (2N) layout directly; several go through a chunk's (2k) layout
  // (k sums, then k target logits) in buf(1).
  float* c = rows < Ns ? buf(1, 2 * rows) : sums;
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    to_float(l, logits + n0 * Vs, k * Vs);
    cuda::crossentropy_shard_sums(c, l, maxes + n0, targets + n0, int(k), Vl, v_begin, s());
    if (c != sums) {
      DTB_CUDA_CHECK(cudaMemcpyAsync(sums + n0, c, k * sizeof(float), cudaMemcpyDeviceToDevice, s()));
      DTB_CUDA_CHECK(cudaMemcpyAsync(sums + Ns + n0, c + k, k * sizeof(float), cudaMemcpyDeviceToDevice, s()));
    }
  }
}

template <typename H>
void CudaHalfOps<H>::crossentropy_shard_forward(A* losses, H* probs, const H* logits, const A* maxes,
                                                const A* sums, int N, int Vl) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* l = buf(0, rows * Vs);
  float* p = buf(1, rows * Vs);
  float* c = rows < Ns ? buf(2, 2 * rows) : nullptr;  // a chunk's (2k) layout, as in _sums
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    if (c) {
      DTB_CUDA_CHECK(cudaMemcpyAsync(c, sums + n0, k * sizeof(float), cudaMemcpyDeviceToDevice, s()));
      DTB_CUDA_CHECK(cudaMemcpyAsync(c + k, sums + Ns + n0, k * sizeof(float), cudaMemcpyDeviceToDevice, s()));
    }
    to_float(l, logits + n0 * Vs, k * Vs);
    cuda::crossentropy_shard_forward(losses + n0, p, l, maxes + n0, c ? c : sums, int(k), Vl, s());
    round_to(probs + n0 * Vs, p, k * Vs);
  }
}

template <typename H>
void CudaHalfOps<H>::crossentropy_shard_backward(H* dlogits, const H* probs, const int32_t* targets, A dloss,
                                                 int N, int Vl, int v_begin) {
  const size_t Ns = dim(N), Vs = dim(Vl), rows = std::min(Ns, chunk_rows(Vs, kChunk));
  float* p = buf(0, rows * Vs);
  float* d = buf(1, rows * Vs);
  for (size_t n0 = 0; n0 < Ns; n0 += rows) {
    const size_t k = std::min(rows, Ns - n0);
    to_float(p, probs + n0 * Vs, k * Vs);
    cuda::crossentropy_shard_backward(d, p, targets + n0, dloss, int(k), Vl, v_begin, s());  // writes
    round_to(dlogits + n0 * Vs, d, k * Vs);
  }
}

// ---- the Llama block: the fp32 kernels on whole widened tensors ----

template <typename H>
void CudaHalfOps<H>::rmsnorm_forward(H* out, A* rstd, const H* inp, const H* weight, A eps, int N, int C) {
  const size_t n = dim(N) * dim(C);
  float* x = widen(0, inp, n);
  float* w = widen(1, weight, dim(C));
  float* y = buf(2, n);
  cuda::rmsnorm_forward(y, rstd, x, w, eps, N, C, s());  // writes y and rstd
  round_to(out, y, n);
}

template <typename H>
void CudaHalfOps<H>::rmsnorm_backward(H* dinp, H* dweight, const H* dout, const H* inp, const H* weight,
                                      const A* rstd, int N, int C) {
  const size_t n = dim(N) * dim(C), Cs = dim(C);
  float* dx = widen(0, dinp, n);
  float* d = widen(1, dout, n);
  float* x = widen(2, inp, n);
  float* w = widen(3, weight, Cs);
  float* dw = widen(4, dweight, Cs);
  cuda::rmsnorm_backward(dx, dw, d, x, w, rstd, N, C, s());  // accumulates both
  round_to(dinp, dx, n);
  round_to(dweight, dw, Cs);
}

template <typename H>
void CudaHalfOps<H>::swiglu_forward(H* out, const H* inp, int N, int F) {
  const size_t n = dim(N) * dim(F);
  float* x = widen(0, inp, 2 * n);
  float* y = buf(1, n);
  cuda::swiglu_forward(y, x, N, F, s());  // writes
  round_to(out, y, n);
}

template <typename H>
void CudaHalfOps<H>::swiglu_backward(H* dinp, const H* inp, const H* dout, int N, int F) {
  const size_t n = dim(N) * dim(F);
  float* dx = widen(0, dinp, 2 * n);
  float* x = widen(1, inp, 2 * n);
  float* d = widen(2, dout, n);
  cuda::swiglu_backward(dx, x, d, N, F, s());  // accumulates
  round_to(dinp, dx, 2 * n);
}

template <typename H>
void CudaHalfOps<H>::rope(H* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta, int sign) {
  const size_t rows = dim(B) * dim(Tn), W = (dim(NH) + 2 * dim(KV)) * dim(hs), QK = (dim(NH) + dim(KV)) * dim(hs);
  if (rows == 0 || QK == 0) return;
  float* x = widen(0, qkv, rows * W);
  if (sign > 0) {
    cuda::rope_forward(x, B, Tn, NH, KV, hs, pos0, theta, s());
  } else {
    cuda::rope_backward(x, B, Tn, NH, KV, hs, pos0, theta, s());
  }
  H* r = reinterpret_cast<H*>(buf(1, (rows * W + 1) / 2));  // rows * W H values in float slots
  round_to(r, x, rows * W);
  DTB_CUDA_CHECK(cudaMemcpy2DAsync(qkv, W * sizeof(H), r, W * sizeof(H), QK * sizeof(H), rows,
                                   cudaMemcpyDeviceToDevice, s()));
}

template <typename H>
void CudaHalfOps<H>::rope_forward(H* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  rope(qkv, B, Tn, NH, KV, hs, pos0, theta, +1);
}

template <typename H>
void CudaHalfOps<H>::rope_backward(H* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  rope(dqkv, B, Tn, NH, KV, hs, pos0, theta, -1);
}

template <typename H>
void CudaHalfOps<H>::gqa_attention_forward(H* out, H* att, const H* qkv, int B, int Tn, int NH, int KV, int hs) {
  const size_t BT = dim(B) * dim(Tn), natt = dim(B) * dim(NH) * dim(Tn) * dim(Tn);
  const size_t nq = BT * (dim(NH) + 2 * dim(KV)) * dim(hs), no = BT * dim(NH) * dim(hs);
  float* q = widen(0, qkv, nq);
  float* o = buf(1, no);
  float* a = buf(2, natt);
  cuda::gqa_attention_forward(gemm_, o, a, q, B, Tn, NH, KV, hs, s());  // writes both
  round_to(out, o, no);
  round_to(att, a, natt);
}

template <typename H>
void CudaHalfOps<H>::gqa_attention_backward(H* dqkv, H* scratch, const H* dout, const H* qkv, const H* att, int B,
                                            int Tn, int NH, int KV, int hs) {
  (void)scratch;  // the fp32 kernel's scratch is buf(4); the caller's H scratch is not touched
  const size_t BT = dim(B) * dim(Tn), natt = dim(B) * dim(NH) * dim(Tn) * dim(Tn);
  const size_t nq = BT * (dim(NH) + 2 * dim(KV)) * dim(hs), no = BT * dim(NH) * dim(hs);
  float* dq = widen(0, dqkv, nq);
  float* q = widen(1, qkv, nq);
  float* d = widen(2, dout, no);
  float* a = widen(3, att, natt);
  float* sc = buf(4, natt);
  cuda::gqa_attention_backward(gemm_, dq, sc, d, q, a, B, Tn, NH, KV, hs, s());  // accumulates into dq
  round_to(dqkv, dq, nq);
}

template class CudaHalfOps<bf16>;
template class CudaHalfOps<fp16>;

}  // namespace dtb
