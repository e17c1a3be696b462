// One-line checks of CUDA, cuBLAS(Lt) and NCCL return codes over the error sink
// (kernels/error.h): a failed call aborts the job naming the call, file and line.
// After every kernel launch: DTB_CUDA_CHECK(cudaGetLastError()).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "kernels/error.h"

#define DTB_CUDA_CHECK(expr)                                                                  \
  do {                                                                                        \
    const cudaError_t dtb_e_ = (expr);                                                        \
    if (dtb_e_ != cudaSuccess)                                                                \
      ::dtb::fatal(__FILE__, __LINE__,                                                        \
                   std::string(#expr) + ": " + cudaGetErrorName(dtb_e_) + ": " + cudaGetErrorString(dtb_e_)); \
  } while (0)

#define DTB_CUBLAS_CHECK(expr)                                                                \
  do {                                                                                        \
    const cublasStatus_t dtb_s_ = (expr);                                                     \
    if (dtb_s_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::dtb::fatal(__FILE__, __LINE__, std::string(#expr) + ": cuBLAS status " + std::to_string(int(dtb_s_))); \
  } while (0)

// For calls that complete before returning. A collective on a non-blocking communicator
// may return ncclInProgress, which needs polling (kernels/comm/nccl_communicator.cc), so
// it is an error here.
#define DTB_NCCL_CHECK(expr)                                                                  \
  do {                                                                                        \
    const ncclResult_t dtb_r_ = (expr);                                                       \
    if (dtb_r_ != ncclSuccess)                                                                \
      ::dtb::fatal(__FILE__, __LINE__, std::string(#expr) + ": " + ncclGetErrorString(dtb_r_)); \
  } while (0)
