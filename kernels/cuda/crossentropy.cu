// CUDA softmax cross-entropy, forward and backward, and its vocabulary-parallel shards
// (contract: ops.cuh), repeating the arithmetic of kernels/cpu/crossentropy.cc step by step:
// one block per row for the vocabulary's max and sum, grid-stride loops for the rest. No
// allocation, no synchronisation; every launch is followed by a launch-error check.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/error.h"

namespace dtb::cuda {

using namespace detail;

namespace {

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

}  // namespace

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

}  // namespace dtb::cuda
