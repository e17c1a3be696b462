// The compute probe of `dtbench validate`: this rank's GEMM FLOP/s and STREAM-triad bandwidth,
// each the best of a few repetitions, stretched by the test-only compute fault. Not the gemm
// suite (suites/gemm.cc), which reports a device's GEMM throughput per precision.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace dtb {

/// C (n,n) = A (n,n) B (n,n) in float32, row-major, on this host (OpenBLAS sgemm).
void host_sgemm(int n, const float* a, const float* b, float* c);

/// This rank's compute: sgemm FLOP/s at 1024^3 (OpenBLAS, the threads OPENBLAS_NUM_THREADS
/// gives) and a STREAM triad's bytes/s over 3 x 32 MiB (beyond a 32 MiB L3), each the best of 3
/// repetitions per call; the buffers are allocated and touched once.
struct ComputeProbe {
  static constexpr int n = 1024;
  static constexpr size_t m = size_t(8) << 20;
  std::vector<float> a = std::vector<float>(size_t(n) * n, 1.0f), b = std::vector<float>(size_t(n) * n, 0.5f),
                     c = std::vector<float>(size_t(n) * n, 0.0f);
  std::vector<float> x = std::vector<float>(m, 1.0f), y = std::vector<float>(m, 2.0f), z = std::vector<float>(m, 0.0f);

  /// {GEMM GFLOP/s, triad GB/s}, each repetition stretched to `factor` times its length.
  std::pair<double, double> measure(double factor);
};

}  // namespace dtb
