// CUDA causal self-attention, forward and backward (contract: ops.cuh), after llm.c's
// train_gpt2.cu: the per-head products as batched cuBLASLt GEMMs (kernels/cuda/gemm.h) and
// the masked softmax and its backward as one warp per row of att. No allocation, no
// synchronisation; every launch is followed by a launch-error check.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/error.h"

namespace dtb::cuda {

using namespace detail;

namespace {

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

}  // namespace

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

// Grouped-query heads: as above with the row width W = (NH + 2KV) hs of qkv and NH hs of out,
// and query head h reading key/value head g = h / (NH / KV).
void gqa_attention_forward(Gemm& gemm, float* out, float* att, const float* qkv, int B, int T, int NH, int KV,
                           int hs, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || NH <= 0 || KV <= 0 || hs <= 0) return;
  DTB_CHECK(NH % KV == 0, "gqa_attention_forward: KV does not divide NH");
  const int group = NH / KV, W = (NH + 2 * KV) * hs, C = NH * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long sq = (long long)T * W, sa = (long long)NH * T * T, so = (long long)T * C;
  const GemmPrecision p = GemmPrecision::fp32;
  for (int h = 0; h < NH; h++) {
    const float* q = qkv + size_t(h) * hs;
    const float* k = qkv + size_t(NH + h / group) * hs;
    gemm.matmul_batched(q, W, sq, k, W, sq, att + size_t(h) * T * T, T, sa, B, T, T, hs, false, true, scale, 0.0f,
                        p, stream);
  }
  const size_t rows = size_t(B) * NH * T;
  causal_softmax_kernel<<<grid_for_rows(rows), kBlock, 0, stream>>>(att, T, rows);
  DTB_LAUNCH_CHECK();
  for (int h = 0; h < NH; h++) {
    const float* v = qkv + size_t(NH + KV + h / group) * hs;
    gemm.matmul_batched(att + size_t(h) * T * T, T, sa, v, W, sq, out + size_t(h) * hs, C, so, B, T, hs, T, false,
                        false, 1.0f, 0.0f, p, stream);
  }
}

void gqa_attention_backward(Gemm& gemm, float* dqkv, float* scratch, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int KV, int hs, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || NH <= 0 || KV <= 0 || hs <= 0) return;
  DTB_CHECK(NH % KV == 0, "gqa_attention_backward: KV does not divide NH");
  const int group = NH / KV, W = (NH + 2 * KV) * hs, C = NH * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long sq = (long long)T * W, sa = (long long)NH * T * T, so = (long long)T * C;
  const GemmPrecision p = GemmPrecision::fp32;
  for (int h = 0; h < NH; h++) {
    const size_t voff = size_t(NH + KV + h / group) * hs;
    const float* d = dout + size_t(h) * hs;
    float* da = scratch + size_t(h) * T * T;
    // datt (T,T) = dout (T,hs) @ v^T; dv (T,hs) += att^T @ dout, the group's heads in order.
    gemm.matmul_batched(d, C, so, qkv + voff, W, sq, da, T, sa, B, T, T, hs, false, true, 1.0f, 0.0f, p, stream);
    gemm.matmul_batched(att + size_t(h) * T * T, T, sa, d, C, so, dqkv + voff, W, sq, B, T, hs, T, true, false,
                        1.0f, 1.0f, p, stream);
  }
  const size_t rows = size_t(B) * NH * T;
  causal_softmax_backward_kernel<<<grid_for_rows(rows), kBlock, 0, stream>>>(scratch, att, T, rows);
  DTB_LAUNCH_CHECK();
  for (int h = 0; h < NH; h++) {
    const size_t qoff = size_t(h) * hs, koff = size_t(NH + h / group) * hs;
    const float* da = scratch + size_t(h) * T * T;
    // dq (T,hs) += scale * dpre @ k; dk += scale * dpre^T @ q.
    gemm.matmul_batched(da, T, sa, qkv + koff, W, sq, dqkv + qoff, W, sq, B, T, hs, T, false, false, scale, 1.0f,
                        p, stream);
    gemm.matmul_batched(da, T, sa, qkv + qoff, W, sq, dqkv + koff, W, sq, B, T, hs, T, true, false, scale, 1.0f,
                        p, stream);
  }
}

}  // namespace dtb::cuda
