// CUDA ops of the Llama block in float32 (contract: ops.cuh; the math: kernels/cpu/ops.h and
// llama_ops.cc, whose arithmetic they repeat): RMSNorm (a warp per row, a column reduction
// for dweight), SwiGLU and rotary embeddings (grid-stride loops). Grouped-query attention is
// attention.cu's. No allocation, no synchronisation; a launch-error check after every launch.
// Compiled (sm_80, sm_90) but not yet run on a GPU: llama_ops_test.cc (label gpu) checks them.
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

namespace dtb::cuda {

using namespace detail;

namespace {

// ---- RMSNorm ----

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, float eps,
                                       int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // whole warps leave together
  const float* x = inp + size_t(row) * C;
  float ss = 0.0f;
  for (int i = lane; i < C; i += 32) ss += x[i] * x[i];
  const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);  // IEEE sqrt and divide
  float* o = out + size_t(row) * C;
  for (int i = lane; i < C; i += 32) o[i] = __fmul_rn(x[i], r) * weight[i];  // (x rstd) w, as the CPU
  if (lane == 0) rstd[row] = r;
}

// dx += (w d - xhat m) r, m = mean(w d xhat); w d rounded before use (__fmul_rn), as
// layernorm_backward_dinp_kernel does, so a contracted fma keeps no unrounded product.
__global__ void rmsnorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                             const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* d = dout + size_t(row) * C;
  const float r = rstd[row];
  float acc = 0.0f;
  for (int i = lane; i < C; i += 32) acc += __fmul_rn(weight[i], d[i]) * __fmul_rn(x[i], r);
  const float m = warp_sum(acc) / C;
  float* dx = dinp + size_t(row) * C;
  for (int i = lane; i < C; i += 32) {
    const float xhat = __fmul_rn(x[i], r);
    dx[i] += (__fmul_rn(weight[i], d[i]) - xhat * m) * r;
  }
}

// Block (32, kColRows) per 32 columns, as layernorm_backward_params_kernel: thread (x, y)
// sums rows y, y + kColRows, ... of its column; thread row 0 adds the partials in order.
__global__ void rmsnorm_backward_dweight_kernel(float* dweight, const float* dout, const float* inp,
                                                const float* rstd, int N, int C) {
  __shared__ float sw[kColRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float w = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColRows) {
      const size_t idx = size_t(n) * C + c;
      w += __fmul_rn(inp[idx], rstd[n]) * dout[idx];
    }
  }
  sw[threadIdx.y][threadIdx.x] = w;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kColRows; y++) w += sw[y][threadIdx.x];
    dweight[c] += w;
  }
}

// ---- SwiGLU ----

// e^-g with the exponent clamped to [-80, 80], as the CPU's exp_clamped (NaN stays NaN).
__device__ __forceinline__ float exp_neg_clamped(float g) { return expf(fminf(fmaxf(-g, -80.0f), 80.0f)); }

__global__ void swiglu_forward_kernel(float* out, const float* inp, int F, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t row = idx / F;
    const int i = int(idx % F);
    const float g = inp[row * 2 * F + i], up = inp[row * 2 * F + F + i];
    out[idx] = __fmul_rn(g, 1.0f / (1.0f + exp_neg_clamped(g))) * up;
  }
}

__global__ void swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, int F, size_t n) {
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const size_t row = idx / F;
    const int i = int(idx % F);
    const float g = inp[row * 2 * F + i], up = inp[row * 2 * F + F + i], d = dout[idx];
    const float e = exp_neg_clamped(g);
    const float sig = 1.0f / (1.0f + e);
    dinp[row * 2 * F + i] += __fmul_rn(d, up) * (sig * (1.0f + g * (e * sig)));
    dinp[row * 2 * F + F + i] += d * __fmul_rn(g, sig);
  }
}

// ---- rotary embeddings ----

// One thread per (row b*T + t, q-or-k head, pair i < hs/2); sign +1 forward, -1 backward.
__global__ void rope_kernel(float* qkv, int T, int heads, int W, int hs, int pos0, double theta, int sign,
                            size_t n) {
  const int half = hs / 2;
  for (size_t idx = thread_index(); idx < n; idx += thread_count()) {
    const int i = int(idx % half);
    const size_t rest = idx / half;
    const int h = int(rest % heads);
    const size_t row = rest / heads;
    const int t = int(row % T);
    const double inv_freq = 1.0 / pow(theta, double(2 * i) / double(hs));
    const double a = double(pos0 + t) * inv_freq;
    const float c = float(cos(a)), s = float(sign * sin(a));
    float* p = qkv + row * W + size_t(h) * hs;
    const float x1 = p[i], x2 = p[i + half];
    p[i] = __fmul_rn(x1, c) - __fmul_rn(x2, s);
    p[i + half] = __fmul_rn(x2, c) + __fmul_rn(x1, s);
  }
}

void rope(float* qkv, int B, int T, int NH, int KV, int hs, int pos0, double theta, int sign, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || hs < 2 || NH + KV <= 0) return;
  const size_t n = size_t(B) * T * (NH + KV) * (hs / 2);
  rope_kernel<<<grid_for(n), kBlock, 0, stream>>>(qkv, T, NH + KV, (NH + 2 * KV) * hs, hs, pos0, theta, sign, n);
  DTB_LAUNCH_CHECK();
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float eps, int N, int C,
                     cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_forward_kernel<<<grid_for_rows(size_t(N)), kBlock, 0, stream>>>(out, rstd, inp, weight, eps, N, C);
  DTB_LAUNCH_CHECK();
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_backward_dinp_kernel<<<grid_for_rows(size_t(N)), kBlock, 0, stream>>>(dinp, dout, inp, weight, rstd, N,
                                                                                C);
  DTB_LAUNCH_CHECK();
  rmsnorm_backward_dweight_kernel<<<unsigned((C + 31) / 32), dim3(32, kColRows), 0, stream>>>(dweight, dout, inp,
                                                                                              rstd, N, C);
  DTB_LAUNCH_CHECK();
}

void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return;
  const size_t n = size_t(N) * F;
  swiglu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, inp, F, n);
  DTB_LAUNCH_CHECK();
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return;
  const size_t n = size_t(N) * F;
  swiglu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dinp, inp, dout, F, n);
  DTB_LAUNCH_CHECK();
}

void rope_forward(float* qkv, int B, int T, int NH, int KV, int hs, int pos0, double theta, cudaStream_t stream) {
  rope(qkv, B, T, NH, KV, hs, pos0, theta, +1, stream);
}

void rope_backward(float* dqkv, int B, int T, int NH, int KV, int hs, int pos0, double theta,
                   cudaStream_t stream) {
  rope(dqkv, B, T, NH, KV, hs, pos0, theta, -1, stream);
}

}  // namespace dtb::cuda
