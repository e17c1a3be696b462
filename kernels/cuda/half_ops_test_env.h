// What the GPU tests of CudaHalfOps (half_ops_test.cc, half_ops_gemm_test.cc) share: the ops
// in H on one GPU beside the CPU's, the typed-test list (bf16, fp16) and the skip without a
// GPU. Test code only.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "kernels/cpu/half_ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/half_ops.h"

namespace dtb::cuda::half_test_util {

/// One GPU's ops in H beside the CPU's. Build it after the GPU check (CudaDevice aborts
/// without one).
template <typename H>
struct Env {
  CudaDevice dev;
  Gemm gemm;
  CudaHalfOps<H> gpu{dev, gemm};
  HalfCpuOps<H> cpu;
};

/// Waits for the uploads and poisons (cudaMemcpy, cudaMemset: the legacy stream) before
/// ops run on the device's non-blocking compute stream.
inline void settle() { DTB_CUDA_CHECK(cudaDeviceSynchronize()); }

/// Typed-test names "bf16" and "fp16".
struct HalfName {
  template <typename T>
  static std::string GetName(int) { return std::is_same_v<T, bf16> ? "bf16" : "fp16"; }
};
using HalfTypes = testing::Types<bf16, fp16>;

}  // namespace dtb::cuda::half_test_util

/// Skips the test, with the reason, when no usable GPU is here.
#define DTB_NEED_GPU()                                        \
  do {                                                        \
    std::string why_;                                         \
    if (!dtb::cuda_available(&why_)) GTEST_SKIP() << why_;    \
  } while (0)
