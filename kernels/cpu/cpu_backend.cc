// The CPU backend: host memory, the OpenBLAS-backed ops, and sgemm timed with steady_clock.
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "kernels/backend.h"
#include "kernels/comm/communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"
#include "kernels/slowdown.h"
#include "kernels/tensor.h"
#include "kernels/timer.h"

namespace dtb {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return "cpu"; }
  Device& device() override { return device_; }
  Ops<float>& ops() override { return ops_; }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
  std::vector<std::string> gemm_precisions() const override { return {"fp32"}; }
  void set_matmul_precision(const std::string& precision) override {
    if (precision != "fp32") throw InputError("the CPU backend computes matmuls in fp32 only, not " + precision);
  }
  double time_gemm(int M, int N, int K, const std::string& precision, int warmup, int iters,
                   double slowdown) override {
    if (precision != "fp32") throw InputError("the CPU backend has no " + precision + " GEMM");
    Tensor a = Tensor::empty(device_, {M, K}, DType::f32, MemCategory::workspace);
    Tensor b = Tensor::empty(device_, {K, N}, DType::f32, MemCategory::workspace);
    Tensor c = Tensor::empty(device_, {M, N}, DType::f32, MemCategory::workspace);
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float* p : {a.data<float>(), b.data<float>()})
      for (int64_t i = 0, n = (p == a.data<float>() ? a.numel() : b.numel()); i < n; ++i) p[i] = u(gen);
    auto gemm = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a.data<float>(), K,
                  b.data<float>(), N, 0.f, c.data<float>(), N);
    };
    for (int i = 0; i < warmup; ++i) gemm();
    double fastest = INFINITY;  // the slowdown's state (kernels/slowdown.h)
    Stopwatch sw;
    for (int i = 0; i < iters; ++i) slowed(slowdown, fastest, gemm);
    return sw.elapsed() / iters;
  }
  // Host buffers: the MPI world serves as it is.
  std::unique_ptr<Communicator> make_device_world(Communicator&, double) override { return nullptr; }

 private:
  CpuDevice device_;
  CpuOps<float> ops_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }


}  // namespace dtb
