// Helpers the CUDA tests share: a device buffer that uploads, poisons (NaN) and downloads,
// a stream, uniform random inputs, and the float32 rounding unit. Test code only.
#pragma once
#include <cuda_runtime.h>

#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace dtb::cuda::test_util {

using FVec = std::vector<float>;
constexpr double kU = 1.0 / 16777216.0;  // 2^-24, the float32 unit roundoff

template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    if (n_) DTB_CUDA_CHECK(cudaMalloc(&p_, n_ * sizeof(T)));
  }
  explicit DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() {
    if (p_) (void)cudaFree(p_);  // a destructor must not abort
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return p_; }
  void upload(const std::vector<T>& h) {
    if (n_) DTB_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() {  // all-ones bytes: NaN as float
    if (n_) DTB_CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T)));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_) DTB_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  size_t n_ = 0;
  T* p_ = nullptr;
};

class Stream {
 public:
  Stream() { DTB_CUDA_CHECK(cudaStreamCreate(&s_)); }
  ~Stream() { (void)cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return s_; }
  void sync() const { DTB_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

/// n floats uniform in [lo, hi).
inline FVec uniform(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  FVec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace dtb::cuda::test_util
