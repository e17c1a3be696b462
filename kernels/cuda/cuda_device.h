// CudaDevice: GPU memory with the same per-category accounting as CpuDevice, through a
// caching allocator (freed blocks are kept and reused, so the steady state makes no
// cudaMalloc), plus the compute and communication streams and CUDA-event timing.
// Not the compute ops (kernels/cuda/ops.cuh, gemm.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "kernels/device.h"

namespace dtb {

/// True when a CUDA device can be used here; otherwise false with `why` set to a one-line
/// reason ("no CUDA driver", "no CUDA device", the runtime's error), for GTEST_SKIP.
bool cuda_available(std::string* why = nullptr);

/// One GPU. Tier::device memory is cudaMalloc'd (cached); Tier::host memory is pinned host
/// memory (cudaMallocHost), for offload. Allocation sizes are rounded up to 512 B (small)
/// or 2 MiB (large) blocks; accounting counts the bytes asked for, as CpuDevice does, and
/// reserved_bytes() the bytes held from the driver. Not thread-safe.
/// Stream-ordered reuse: a freed device block is cached at once, though kernels already
/// queued on the compute stream may still use it; this is safe because its next user is
/// also compute-stream work (PyTorch's single-stream assumption). A block used on the comm
/// stream must be ordered before compute-stream work (an event) before it is freed.
/// Freeing a host-tier block synchronises both streams first. Do not copy a CudaDevice.
class CudaDevice final : public Device {
 public:
  /// Binds to GPU `ordinal` (cudaSetDevice) and creates the compute and comm streams.
  /// Aborts (error sink) when the device cannot be used.
  explicit CudaDevice(int ordinal = 0);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  std::string name() const override;  // e.g. "NVIDIA H200"
  bool is_cpu() const override { return false; }
  void* allocate(size_t bytes, MemCategory cat, Tier tier) override;
  void deallocate(void* ptr, size_t bytes, MemCategory cat, Tier tier) override;

  int ordinal() const { return ordinal_; }
  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }
  /// Bytes held from cudaMalloc (in use + cached), device tier.
  size_t reserved_bytes() const { return reserved_; }
  /// Number of cudaMalloc calls so far (the steady state adds none).
  size_t malloc_calls() const { return malloc_calls_; }
  /// Returns every cached, unused block to the driver.
  void release_cached();
  /// cudaMemGetInfo: free and total device bytes.
  void mem_info(size_t* free_bytes, size_t* total_bytes) const;
  /// Blocks until all work on both streams is done.
  void synchronize() const;

 private:
  int ordinal_ = 0;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  std::multimap<size_t, void*> free_blocks_;  // block size -> cached block
  std::map<void*, size_t> block_size_;        // live or cached block -> its size
                                              // (live pinned host blocks too, size 0)
  size_t reserved_ = 0, malloc_calls_ = 0;
};

/// Times GPU work on a stream with CUDA events: start() records an event, stop() records
/// another, seconds() synchronises on the second and returns the elapsed time in seconds
/// (cudaEventElapsedTime, ~0.5 us resolution).
class CudaTimer {
 public:
  explicit CudaTimer(cudaStream_t stream);
  ~CudaTimer();
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;
  void start();
  void stop();
  double seconds() const;

 private:
  cudaStream_t stream_;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

}  // namespace dtb
