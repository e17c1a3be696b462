// CUDA forward/backward ops (see ops.cuh for the contract), written after llm.c's
// train_gpt2.cu and the CPU ops of kernels/cpu/ops.cc, whose arithmetic they repeat step by
// step. Simple kernels: elementwise ops are grid-stride loops, per-row reductions are one
// warp per row (or one block per row for the vocabulary), column reductions a 32-column
// tile per block with the rows split over 8 thread rows and summed in a fixed order.
// No allocation, no synchronisation; every launch is followed by a launch-error check.
// Attention and cross-entropy have files of their own (attention.cu, crossentropy.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/error.h"

namespace dtb::cuda {

using namespace detail;

namespace {

// ---- encoder ----

__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                       const float* wpe, int T, int C, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t bt = idx / C;  // row b*T + t
    const int i = int(idx % C);
    const int t = int(bt % T);
    out[idx] = wte[size_t(tokens[bt]) * C + i] + wpe[size_t(t) * C + i];
  }
}

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens,
                                            int C, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t bt = idx / C;
    const int i = int(idx % C);
    atomicAdd(&dwte[size_t(tokens[bt]) * C + i], dout[idx]);
  }
}

// One thread per (t, i): dwpe[t,i] += dout[0,t,i], dout[1,t,i], ... in b order, as the CPU.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t n = size_t(T) * C;
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc += dout[size_t(b) * n + idx];  // (b*T + t)*C + i
    dwpe[idx] = acc;
  }
}

// ---- vocabulary-parallel embedding (this rank's rows [v_begin, v_end) of wte) ----

// As encoder_forward with each term 0 where the CPU op uses 0: the token's row only when it
// lies in the shard, wpe only when given. The add is always done, as on the CPU (bitwise).
__global__ void embedding_shard_forward_kernel(float* out, const int32_t* tokens,
                                               const float* wte_shard, const float* wpe, int T,
                                               int C, int v_begin, int v_end, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t bt = idx / C;
    const int i = int(idx % C);
    const int t = int(bt % T);
    const int32_t tok = tokens[bt];
    const float we =
        tok >= v_begin && tok < v_end ? wte_shard[size_t(tok - v_begin) * C + i] : 0.0f;
    const float pe = wpe ? wpe[size_t(t) * C + i] : 0.0f;
    out[idx] = we + pe;
  }
}

// dwte_shard without atomics: one block (kBlock threads) per position p = b*T + t. The block
// of a position whose token is outside the shard, or occurred at an earlier position, leaves;
// the block of the token's first position alone writes its row, adding the dout rows of
// every position holding the token in position ((b, t)) order, as the CPU loop. One writer
// and one order per row: deterministic and bitwise the CPU's. Positions are scanned
// kBlock at a time; the hits of a chunk are compacted in order into shared memory (warp
// ballots), then each thread adds them to its channels.
__global__ void embedding_shard_backward_wte_kernel(float* dwte_shard, const float* dout,
                                                    const int32_t* tokens, int BT, int C,
                                                    int v_begin, int v_end) {
  __shared__ int hits[kBlock];
  __shared__ int warp_hits[kWarpsPerBlock];
  const int p = blockIdx.x;
  const int32_t tok = tokens[p];
  if (tok < v_begin || tok >= v_end) return;  // the same for the whole block
  for (int base = 0; base < p; base += kBlock) {
    const int q = base + int(threadIdx.x);
    if (__syncthreads_or(q < p && tokens[q] == tok)) return;  // not the first: all leave
  }
  float* dwe = dwte_shard + size_t(tok - v_begin) * C;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int base = p; base < BT; base += kBlock) {
    const int q = base + int(threadIdx.x);
    const bool hit = q < BT && tokens[q] == tok;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, count = 0;  // hits of the warps before this one; of the whole chunk
    for (int w = 0; w < kWarpsPerBlock; w++) {
      offset += w < warp ? warp_hits[w] : 0;
      count += warp_hits[w];
    }
    if (hit) hits[offset + __popc(ballot & ((1u << lane) - 1u))] = q;
    __syncthreads();
    if (count > 0) {  // the same for the whole block
      for (int i = threadIdx.x; i < C; i += kBlock) {
        float acc = dwe[i];
        for (int k = 0; k < count; k++) acc += dout[size_t(hits[k]) * C + i];
        dwe[i] = acc;
      }
    }
    __syncthreads();  // hits and warp_hits are rewritten by the next chunk
  }
}

// ---- layernorm ----

// One warp per row: two-pass mean and biased variance, as the CPU op.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // whole warps leave together
  const float* x = inp + size_t(row) * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += 32) s += x[i];
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int i = lane; i < C; i += 32) v += (x[i] - m) * (x[i] - m);
  const float var = warp_sum(v) / C;
  const float r = 1.0f / sqrtf(var + 1e-5f);  // IEEE sqrt and divide (no fast math)
  float* o = out + size_t(row) * C;
  for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * r * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// One warp per row: dinp += (weight*dout - mean(g) - xhat * mean(g*xhat)) * rstd.
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* d = dout + size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float g_mean = 0.0f, g_xhat_mean = 0.0f;
  // Each product w*dout is rounded (__fmul_rn) before it is used, as on the CPU: a contracted
  // fma(w, dout, -g_mean) keeps the product's rounding error, which rstd (up to 1/sqrt(eps) =
  // 316 when a row's variance is 0, e.g. C = 1) turns into a gradient that should be 0.
  for (int i = lane; i < C; i += 32) {
    const float g = __fmul_rn(weight[i], d[i]);
    g_mean += g;
    g_xhat_mean += g * (x[i] - m) * s;
  }
  g_mean = warp_sum(g_mean) / C;
  g_xhat_mean = warp_sum(g_xhat_mean) / C;
  float* dx = dinp + size_t(row) * C;
  for (int i = lane; i < C; i += 32) {
    const float xhat = (x[i] - m) * s;
    dx[i] += (__fmul_rn(weight[i], d[i]) - g_mean - xhat * g_xhat_mean) * s;
  }
}

// Block (32, kColRows) per 32 columns: thread (x, y) sums rows y, y + kColRows, ... of column
// blockIdx.x*32 + x; thread row 0 then adds the kColRows partials in order and accumulates.
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int N, int C) {
  __shared__ float sw[kColRows][32], sb[kColRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float w = 0.0f, b = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColRows) {
      const size_t idx = size_t(n) * C + c;
      const float d = dout[idx];
      w += (inp[idx] - mean[n]) * rstd[n] * d;
      b += d;
    }
  }
  sw[threadIdx.y][threadIdx.x] = w;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kColRows; y++) {
      w += sw[y][threadIdx.x];
      b += sb[y][threadIdx.x];
    }
    dweight[c] += w;
    dbias[c] += b;
  }
}

__global__ void column_sum_kernel(float* dst, const float* x, int N, int OC) {
  __shared__ float s[kColRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < OC) {
    for (int n = threadIdx.y; n < N; n += kColRows) acc += x[size_t(n) * OC + c];
  }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < OC) {
    for (int y = 1; y < kColRows; y++) acc += s[y][threadIdx.x];
    dst[c] += acc;
  }
}

__global__ void add_bias_kernel(float* out, const float* bias, int OC, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) out[idx] += bias[idx % OC];
}

__global__ void scale_matrix_kernel(float* c, int rows, int cols, int ld, long long batch_stride,
                                    float beta, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t j = idx % cols;
    const size_t r = (idx / cols) % rows;
    const size_t b = idx / (size_t(cols) * rows);
    float* p = c + b * batch_stride + r * ld + j;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

// ---- gelu, residual ----

constexpr float kGeluS = float(0.7978845608028654);  // sqrt(2/pi), rounded as the CPU's T(...)
constexpr float kGeluC = 0.044715f;
constexpr float kGeluC3 = float(3 * 0.044715);

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluS * (x + kGeluC * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    const float x = inp[i];
    const float th = tanhf(kGeluS * (x + kGeluC * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluS * (1.0f + kGeluC3 * x * x);
    dinp[i] += grad * dout[i];
  }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float a, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) x[i] = __fmul_rn(x[i], a);
}

// ---- AdamW ----

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n,
                             float lr, float b1, float b2, float eps, float decay, float inv_bc1,
                             float inv_bc2) {
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    const float g = grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - lr * (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
  }
}

// ---- cast, count_nonfinite ----

__device__ __forceinline__ void convert(__nv_bfloat16& d, float s) { d = __float2bfloat16_rn(s); }
__device__ __forceinline__ void convert(float& d, __nv_bfloat16 s) { d = __bfloat162float(s); }
__device__ __forceinline__ void convert(__half& d, float s) { d = __float2half_rn(s); }
__device__ __forceinline__ void convert(float& d, __half s) { d = __half2float(s); }

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* dst, const Src* src, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) convert(dst[i], src[i]);
}

template <typename Dst, typename Src>
void launch_cast(void* dst, const void* src, size_t n, cudaStream_t stream) {
  cast_kernel<Dst, Src><<<grid_for(n), kBlock, 0, stream>>>(static_cast<Dst*>(dst),
                                                             static_cast<const Src*>(src), n);
  DTB_LAUNCH_CHECK();
}

__global__ void count_nonfinite_kernel(const float* x, size_t n, unsigned int* count) {
  unsigned int c = 0;
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    // inf or NaN: exponent bits all ones.
    c += (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
  }
  for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c != 0) atomicAdd(count, c);
}

}  // namespace

// ---- host wrappers ----

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C, cudaStream_t stream) {
  const size_t n = size_t(B) * T * C;
  if (B <= 0 || T <= 0 || C <= 0) return;
  encoder_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, tokens, wte, wpe, T, C, n);
  DTB_LAUNCH_CHECK();
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const size_t n = size_t(B) * T * C;
  encoder_backward_wte_kernel<<<grid_for(n), kBlock, 0, stream>>>(dwte, dout, tokens, C, n);
  DTB_LAUNCH_CHECK();
  encoder_backward_wpe_kernel<<<grid_for(size_t(T) * C), kBlock, 0, stream>>>(dwpe, dout, B, T, C);
  DTB_LAUNCH_CHECK();
}

void embedding_shard_forward(float* out, const int32_t* tokens, const float* wte_shard,
                             const float* wpe, int B, int T, int C, int v_begin, int v_end,
                             cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const size_t n = size_t(B) * T * C;
  embedding_shard_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, tokens, wte_shard, wpe,
                                                                     T, C, v_begin, v_end, n);
  DTB_LAUNCH_CHECK();
}

void embedding_shard_backward(float* dwte_shard, float* dwpe, const float* dout,
                              const int32_t* tokens, int B, int T, int C, int v_begin, int v_end,
                              cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const size_t bt = size_t(B) * T;
  DTB_CHECK(bt < (size_t(1) << 31), "embedding_shard_backward: too many positions: " +
                                        std::to_string(bt));
  if (v_begin < v_end) {
    embedding_shard_backward_wte_kernel<<<unsigned(bt), kBlock, 0, stream>>>(
        dwte_shard, dout, tokens, int(bt), C, v_begin, v_end);
    DTB_LAUNCH_CHECK();
  }
  if (dwpe) {
    encoder_backward_wpe_kernel<<<grid_for(size_t(T) * C), kBlock, 0, stream>>>(dwpe, dout, B, T,
                                                                                C);
    DTB_LAUNCH_CHECK();
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<grid_for_rows(N), kBlock, 0, stream>>>(out, mean, rstd, inp, weight,
                                                                    bias, N, C);
  DTB_LAUNCH_CHECK();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_dinp_kernel<<<grid_for_rows(N), kBlock, 0, stream>>>(dinp, dout, inp, weight,
                                                                          mean, rstd, N, C);
  DTB_LAUNCH_CHECK();
  const unsigned col_blocks = unsigned((C + 31) / 32);
  layernorm_backward_params_kernel<<<col_blocks, dim3(32, kColRows), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  DTB_LAUNCH_CHECK();
}

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, inp, n);
  DTB_LAUNCH_CHECK();
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dinp, inp, dout, n);
  DTB_LAUNCH_CHECK();
}

void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, a, b, n);
  DTB_LAUNCH_CHECK();
}

void scale(float* x, float a, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, a, n);
  DTB_LAUNCH_CHECK();
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& hp, int t, cudaStream_t stream) {
  if (n == 0) return;
  // As cpu::adamw_update: decay in float, bias corrections in double then rounded to float.
  const float decay = 1.0f - hp.lr * float(hp.weight_decay);
  const float inv_bc1 = float(1.0 / (1.0 - std::pow(double(hp.beta1), t)));
  const float inv_bc2 = float(1.0 / (1.0 - std::pow(double(hp.beta2), t)));
  adamw_kernel<<<grid_for(n), kBlock, 0, stream>>>(param, grad, m, v, n, hp.lr, hp.beta1,
                                                   hp.beta2, hp.eps, decay, inv_bc1, inv_bc2);
  DTB_LAUNCH_CHECK();
}

void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n,
          cudaStream_t stream) {
  if (n == 0) return;
  if (dst_type == src_type) {
    DTB_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_type), cudaMemcpyDeviceToDevice,
                                   stream));
    return;
  }
  if (dst_type == DType::bf16 && src_type == DType::f32) {
    launch_cast<__nv_bfloat16, float>(dst, src, n, stream);
  } else if (dst_type == DType::f32 && src_type == DType::bf16) {
    launch_cast<float, __nv_bfloat16>(dst, src, n, stream);
  } else if (dst_type == DType::f16 && src_type == DType::f32) {
    launch_cast<__half, float>(dst, src, n, stream);
  } else if (dst_type == DType::f32 && src_type == DType::f16) {
    launch_cast<float, __half>(dst, src, n, stream);
  } else {
    DTB_CHECK(false, "cast: unsupported " + std::string(to_string(src_type)) + " -> " +
                         std::string(to_string(dst_type)));
  }
}

void count_nonfinite(const float* x, size_t n, unsigned int* count_dev, cudaStream_t stream) {
  if (n == 0) return;
  count_nonfinite_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, n, count_dev);
  DTB_LAUNCH_CHECK();
}

void add_bias(float* out, const float* bias, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  const size_t n = size_t(N) * OC;
  add_bias_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, bias, OC, n);
  DTB_LAUNCH_CHECK();
}

void column_sum_accumulate(float* dst, const float* x, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  column_sum_kernel<<<unsigned((OC + 31) / 32), dim3(32, kColRows), 0, stream>>>(dst, x, N, OC);
  DTB_LAUNCH_CHECK();
}

void scale_matrix(float* c, int rows, int cols, int ld, long long batch_stride, int batch,
                  float beta, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return;
  const size_t n = size_t(batch) * rows * cols;
  scale_matrix_kernel<<<grid_for(n), kBlock, 0, stream>>>(c, rows, cols, ld, batch_stride, beta, n);
  DTB_LAUNCH_CHECK();
}

}  // namespace dtb::cuda
