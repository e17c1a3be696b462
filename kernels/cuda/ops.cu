// CUDA forward/backward ops (see ops.cuh for the contract), written after llm.c's
// train_gpt2.cu and the CPU ops of kernels/cpu/ops.cc, whose arithmetic they repeat step by
// step. Simple kernels: elementwise ops are grid-stride loops, per-row reductions are one
// warp per row (or one block per row for the vocabulary), column reductions a 32-column
// tile per block with the rows split over 8 thread rows and summed in a fixed order.
// No allocation, no synchronisation; every launch is followed by a launch-error check.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/error.h"

namespace dtb::cuda {
namespace {

constexpr int kBlock = 256;        // threads per block of the 1D kernels
constexpr int kWarpsPerBlock = kBlock / 32;
constexpr int kColRows = 8;        // thread rows of the column-reduction tiles (32 x 8)

#define DTB_LAUNCH_CHECK() DTB_CUDA_CHECK(cudaGetLastError())

// Blocks for a grid-stride loop over n elements (n > 0): enough to cover n once, capped;
// the loops handle any remainder.
unsigned grid_for(size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  return unsigned(std::min<size_t>(blocks, size_t(1) << 20));
}
// Blocks for one warp per row over `rows` rows (rows > 0).
unsigned grid_for_rows(size_t rows) {
  const size_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  DTB_CHECK(blocks < (size_t(1) << 31), "too many rows for one launch: " + std::to_string(rows));
  return unsigned(blocks);
}

__device__ __forceinline__ size_t thread_index() {
  return size_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t thread_count() { return size_t(gridDim.x) * blockDim.x; }

// Full-warp reductions (every lane gets the result); all 32 lanes must be active.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum or max, every thread gets the result. blockDim.x a multiple of 32, <= 1024,
// and every thread of the block must call it (it has __syncthreads).
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // every reader of the previous call's `partial` is past it
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(v) : warp_sum(v);
}

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

// ---- attention: the masked softmax and its backward, one warp per row of att ----
// Row r of the (B*NH*T, T) view of att is position t = r % T of head (b, h) = r / T.

__global__ void causal_softmax_kernel(float* att, int T, size_t rows) {
  const size_t r = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = int(r % T);
  float* row = att + r * T;
  float mx = -INFINITY;
  for (int i = lane; i <= t; i += 32) mx = fmaxf(mx, row[i]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int i = lane; i <= t; i += 32) sum += expf(row[i] - mx);
  const float inv = 1.0f / warp_sum(sum);  // sum >= 1: the max term is exp(0)
  // Each lane rewrites only the elements it read, so no hazard within the row.
  for (int i = lane; i < T; i += 32) row[i] = i <= t ? expf(row[i] - mx) * inv : 0.0f;
}

// In place on datt: dpre[i] = att[i] * (datt[i] - sum_j att[j] datt[j]) for i <= t, else 0.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int T, size_t rows) {
  const size_t r = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = int(r % T);
  const float* a = att + r * T;
  float* d = datt + r * T;
  float dot = 0.0f;
  for (int i = lane; i <= t; i += 32) dot += a[i] * d[i];
  dot = warp_sum(dot);
  for (int i = lane; i < T; i += 32) d[i] = i <= t ? a[i] * (d[i] - dot) : 0.0f;
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

// ---- cross-entropy ----

constexpr int kCeBlock = 512;

// One block per row: max, sum of exp(l - max), then probs and the loss.
__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits,
                                            const int32_t* targets, int V) {
  const size_t row = blockIdx.x;
  const float* l = logits + row * V;
  float* p = probs + row * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, l[i]);
  mx = block_reduce<true>(mx);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(l[i] - mx);
  sum = block_reduce<false>(sum);
  const float inv = 1.0f / sum;
  for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = expf(l[i] - mx) * inv;
  // -log p[target] = log(sum) - (l[target] - max): finite even where p[target] underflows.
  if (threadIdx.x == 0) losses[row] = logf(sum) - (l[targets[row]] - mx);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs,
                                             const int32_t* targets, float dloss, int V,
                                             size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t row = idx / V;
    const int i = int(idx % V);
    const float p = probs[idx];
    dlogits[idx] = i == targets[row] ? (p - 1.0f) * dloss : p * dloss;
  }
}

// ---- vocabulary-parallel cross-entropy: logits (N, Vl) for ids [v_begin, v_begin + Vl) ----

// One block per row: the shard's row max (exact in any order).
__global__ void crossentropy_shard_max_kernel(float* maxes, const float* logits, int Vl) {
  const size_t row = blockIdx.x;
  const float* l = logits + row * Vl;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < Vl; i += blockDim.x) mx = fmaxf(mx, l[i]);
  mx = block_reduce<true>(mx);
  if (threadIdx.x == 0) maxes[row] = mx;
}

// One block per row: sums[row] = sum of exp(l - max) (a fixed per-thread order, then the
// block tree: deterministic, as crossentropy_forward); sums[N + row] = the target's logit
// when it lies in the shard, else 0.
__global__ void crossentropy_shard_sums_kernel(float* sums, const float* logits,
                                               const float* maxes, const int32_t* targets,
                                               int N, int Vl, int v_begin) {
  const size_t row = blockIdx.x;
  const float* l = logits + row * Vl;
  const float mx = maxes[row];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < Vl; i += blockDim.x) sum += expf(l[i] - mx);
  sum = block_reduce<false>(sum);
  if (threadIdx.x == 0) {
    sums[row] = sum;
    const int32_t j = targets[row] - v_begin;
    sums[size_t(N) + row] = j >= 0 && j < Vl ? l[j] : 0.0f;
  }
}

// One block per row: probs = exp(l - max) * (1 / sum); the loss log(sum) - (target logit -
// max) from the all-reduced maxes and sums, as the CPU op (no product to contract).
__global__ void crossentropy_shard_forward_kernel(float* losses, float* probs,
                                                  const float* logits, const float* maxes,
                                                  const float* sums, int N, int Vl) {
  const size_t row = blockIdx.x;
  const float* l = logits + row * Vl;
  float* p = probs + row * Vl;
  const float mx = maxes[row], sum = sums[row];
  const float inv = 1.0f / sum;
  for (int i = threadIdx.x; i < Vl; i += blockDim.x) p[i] = expf(l[i] - mx) * inv;
  if (threadIdx.x == 0) losses[row] = logf(sum) - (sums[size_t(N) + row] - mx);
}

// Elementwise, as crossentropy_backward with the one-hot at target - v_begin (never hit when
// the target is outside the shard, since 0 <= i < Vl).
__global__ void crossentropy_shard_backward_kernel(float* dlogits, const float* probs,
                                                   const int32_t* targets, float dloss, int Vl,
                                                   int v_begin, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t row = idx / Vl;
    const int i = int(idx % Vl);
    const float p = probs[idx];
    dlogits[idx] = i == targets[row] - v_begin ? (p - 1.0f) * dloss : p * dloss;
  }
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

void attention_forward(Gemm& gemm, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
  DTB_CHECK(C % NH == 0, "attention_forward: C % NH != 0");
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));  // as the CPU: T(1) / sqrt(T(hs))
  // Batch strides over b (elements) of qkv, att and out; head h starts at h*hs (qkv, out)
  // or h*T*T (att).
  const long long sq = (long long)T * C3, sa = (long long)NH * T * T, so = (long long)T * C;
  const GemmPrecision p = GemmPrecision::fp32;
  for (int h = 0; h < NH; h++) {
    const float* q = qkv + size_t(h) * hs;
    const float* k = q + C;
    float* a = att + size_t(h) * T * T;
    // preatt (T,T) = scale * q (T,hs) @ k^T; k stored (T,hs) with rows 3C apart.
    gemm.matmul_batched(q, C3, sq, k, C3, sq, a, T, sa, B, T, T, hs, false, true, scale, 0.0f, p,
                        stream);
  }
  const size_t rows = size_t(B) * NH * T;
  causal_softmax_kernel<<<grid_for_rows(rows), kBlock, 0, stream>>>(att, T, rows);
  DTB_LAUNCH_CHECK();
  for (int h = 0; h < NH; h++) {
    const float* v = qkv + size_t(h) * hs + 2 * size_t(C);
    const float* a = att + size_t(h) * T * T;
    // out (T,hs) = att (T,T) @ v (T,hs); the exact zeros above the diagonal mask the future.
    gemm.matmul_batched(a, T, sa, v, C3, sq, out + size_t(h) * hs, C, so, B, T, hs, T, false,
                        false, 1.0f, 0.0f, p, stream);
  }
}

void attention_backward(Gemm& gemm, float* dqkv, float* scratch, const float* dout,
                        const float* qkv, const float* att, int B, int T, int C, int NH,
                        cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
  DTB_CHECK(C % NH == 0, "attention_backward: C % NH != 0");
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long sq = (long long)T * C3, sa = (long long)NH * T * T, so = (long long)T * C;
  const GemmPrecision p = GemmPrecision::fp32;
  for (int h = 0; h < NH; h++) {
    const size_t qoff = size_t(h) * hs;
    const float* v = qkv + qoff + 2 * size_t(C);
    float* dv = dqkv + qoff + 2 * size_t(C);
    const float* d = dout + qoff;
    const float* a = att + size_t(h) * T * T;
    float* da = scratch + size_t(h) * T * T;
    // datt (T,T) = dout (T,hs) @ v^T
    gemm.matmul_batched(d, C, so, v, C3, sq, da, T, sa, B, T, T, hs, false, true, 1.0f, 0.0f, p,
                        stream);
    // dv (T,hs) += att^T (T,T) @ dout (T,hs)
    gemm.matmul_batched(a, T, sa, d, C, so, dv, C3, sq, B, T, hs, T, true, false, 1.0f, 1.0f, p,
                        stream);
  }
  const size_t rows = size_t(B) * NH * T;
  causal_softmax_backward_kernel<<<grid_for_rows(rows), kBlock, 0, stream>>>(scratch, att, T, rows);
  DTB_LAUNCH_CHECK();
  for (int h = 0; h < NH; h++) {
    const size_t qoff = size_t(h) * hs;
    const float* q = qkv + qoff;
    const float* k = q + C;
    float* dq = dqkv + qoff;
    float* dk = dq + C;
    const float* da = scratch + size_t(h) * T * T;
    // preatt = scale * q k^T: dq (T,hs) += scale * dpre (T,T) @ k; dk += scale * dpre^T @ q.
    gemm.matmul_batched(da, T, sa, k, C3, sq, dq, C3, sq, B, T, hs, T, false, false, scale, 1.0f,
                        p, stream);
    gemm.matmul_batched(da, T, sa, q, C3, sq, dk, C3, sq, B, T, hs, T, true, false, scale, 1.0f,
                        p, stream);
  }
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

void crossentropy_forward(float* losses, float* probs, const float* logits,
                          const int32_t* targets, int N, int V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  crossentropy_forward_kernel<<<unsigned(N), kCeBlock, 0, stream>>>(losses, probs, logits,
                                                                    targets, V);
  DTB_LAUNCH_CHECK();
}

void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           float dloss, int N, int V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  const size_t n = size_t(N) * V;
  crossentropy_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dlogits, probs, targets,
                                                                   dloss, V, n);
  DTB_LAUNCH_CHECK();
}

void crossentropy_shard_max(float* maxes, const float* logits, int N, int Vl,
                            cudaStream_t stream) {
  if (N <= 0 || Vl < 0) return;  // Vl 0: the CPU's writes (max: -inf, the MAX identity)
  crossentropy_shard_max_kernel<<<unsigned(N), kCeBlock, 0, stream>>>(maxes, logits, Vl);
  DTB_LAUNCH_CHECK();
}

void crossentropy_shard_sums(float* sums, const float* logits, const float* maxes,
                             const int32_t* targets, int N, int Vl, int v_begin,
                             cudaStream_t stream) {
  if (N <= 0 || Vl < 0) return;  // Vl 0: the CPU's writes (max: -inf, the MAX identity)
  crossentropy_shard_sums_kernel<<<unsigned(N), kCeBlock, 0, stream>>>(sums, logits, maxes,
                                                                       targets, N, Vl, v_begin);
  DTB_LAUNCH_CHECK();
}

void crossentropy_shard_forward(float* losses, float* probs, const float* logits,
                                const float* maxes, const float* sums, int N, int Vl,
                                cudaStream_t stream) {
  if (N <= 0 || Vl < 0) return;  // Vl 0: the CPU's writes (max: -inf, the MAX identity)
  crossentropy_shard_forward_kernel<<<unsigned(N), kCeBlock, 0, stream>>>(losses, probs, logits,
                                                                          maxes, sums, N, Vl);
  DTB_LAUNCH_CHECK();
}

void crossentropy_shard_backward(float* dlogits, const float* probs, const int32_t* targets,
                                 float dloss, int N, int Vl, int v_begin, cudaStream_t stream) {
  if (N <= 0 || Vl <= 0) return;
  const size_t n = size_t(N) * Vl;
  crossentropy_shard_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dlogits, probs, targets,
                                                                         dloss, Vl, v_begin, n);
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
