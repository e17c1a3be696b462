// What the CUDA op files (ops.cu, attention.cu, crossentropy.cu) share: block sizes, the
// launch check, grid sizing, thread indexing and the warp and block reductions. Private to
// kernels/cuda: no other file includes it. Device code only where marked __device__.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/error.h"

namespace dtb::cuda::detail {

constexpr int kBlock = 256;        // threads per block of the 1D kernels
constexpr int kWarpsPerBlock = kBlock / 32;
constexpr int kColRows = 8;        // thread rows of the column-reduction tiles (32 x 8)

#define DTB_LAUNCH_CHECK() DTB_CUDA_CHECK(cudaGetLastError())

// Blocks for a grid-stride loop over n elements (n > 0): enough to cover n once, capped;
// the loops handle any remainder.
inline unsigned grid_for(size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  return unsigned(std::min<size_t>(blocks, size_t(1) << 20));
}
// Blocks for one warp per row over `rows` rows (rows > 0).
inline unsigned grid_for_rows(size_t rows) {
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

}  // namespace dtb::cuda::detail
