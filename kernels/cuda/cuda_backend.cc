// The CUDA backend: one GPU (CudaDevice), its ops (CudaOps; CudaHalfOps for bf16 and fp16
// storage), cuBLASLt GEMMs timed with CUDA events, and NCCL for collectives on its memory (or, where ranks share a GPU, MPI
// staged through host memory: kernels/comm/staged_communicator.h).
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include <nccl.h>

#include "kernels/backend.h"
#include "kernels/comm/nccl_communicator.h"
#include "kernels/comm/staged_communicator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/half_ops.h"
#include "kernels/cuda/op_clock.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/error.h"

namespace dtb {
namespace {

cuda::GemmPrecision parse_precision(const std::string& p) {
  if (p == "fp32") return cuda::GemmPrecision::fp32;
  if (p == "tf32") return cuda::GemmPrecision::tf32;
  if (p == "bf16") return cuda::GemmPrecision::bf16;
  if (p == "fp16") return cuda::GemmPrecision::fp16;
  throw InputError("unknown GEMM precision '" + p + "' (fp32, tf32, bf16, fp16)");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal)
      : device_(ordinal), ops_(device_, gemm_), bf16_ops_(device_, gemm_), fp16_ops_(device_, gemm_) {}
  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return device_.name(); }
  std::map<std::string, std::string> device_inventory() const override {
    std::map<std::string, std::string> out;
    const int ord = device_.ordinal();
    out["device_ordinal"] = std::to_string(ord);
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, ord) == cudaSuccess) out["device_pci_bus_id"] = bus;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ord) == cudaSuccess) {
      char uuid[64];
      const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
      std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                    u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
      out["device_uuid"] = uuid;
    }
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) out["device_memory_bytes"] = std::to_string(total_b);
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) out["driver_version"] = version(v);
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) out["cuda_runtime_version"] = version(v);
    if (ncclGetVersion(&v) == ncclSuccess)  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (>= 2.9)
      out["nccl_version"] = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
    return out;
  }
  Device& device() override { return device_; }
  Ops<float>& ops() override { return ops_; }
  /// Built with the backend (no memory until first used). Their GEMMs are the storage
  /// type's (bf16 / fp16 operands, fp32 accumulation) whatever set_matmul_precision says:
  /// see kernels/cuda/half_ops.h.
  Ops<bf16>* bf16_ops() override { return &bf16_ops_; }
  Ops<fp16>* fp16_ops() override { return &fp16_ops_; }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { ops_.copy_from_host(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { ops_.copy_to_host(dst, src, bytes); }
  void synchronize() override { DTB_CUDA_CHECK(cudaDeviceSynchronize()); }  // NCCL's streams too
  std::unique_ptr<OpClock> make_op_clock() override { return make_cuda_op_clock(device_.compute_stream()); }
  std::vector<std::string> gemm_precisions() const override { return {"fp32", "tf32", "bf16", "fp16"}; }
  void set_matmul_precision(const std::string& p) override { ops_.set_precision(parse_precision(p)); }

  double time_gemm(int M, int N, int K, const std::string& precision, int warmup, int iters,
                   double slowdown) override {
    if (slowdown != 1.0) throw InputError("the injected GEMM slowdown (DTB_INJECT_SLOWDOWN) is CPU-only");
    const cuda::GemmPrecision p = parse_precision(precision);
    const bool half = p == cuda::GemmPrecision::bf16 || p == cuda::GemmPrecision::fp16;
    const DType in = p == cuda::GemmPrecision::bf16 ? DType::bf16 : p == cuda::GemmPrecision::fp16 ? DType::f16 : DType::f32;
    const size_t na = size_t(M) * K, nb = size_t(K) * N;
    // Random float inputs, cast on the GPU to the input type when it is a half type.
    Tensor a32 = Tensor::empty(device_, {int64_t(na)}, DType::f32, MemCategory::workspace);
    Tensor b32 = Tensor::empty(device_, {int64_t(nb)}, DType::f32, MemCategory::workspace);
    Tensor c = Tensor::empty(device_, {M, N}, DType::f32, MemCategory::workspace);
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> h(std::max(na, nb));
    for (auto& x : h) x = u(gen);
    copy_from_host(a32.raw(), h.data(), na * sizeof(float));
    copy_from_host(b32.raw(), h.data(), nb * sizeof(float));
    Tensor a = a32, b = b32;
    if (half) {
      a = Tensor::empty(device_, {int64_t(na)}, in, MemCategory::workspace);
      b = Tensor::empty(device_, {int64_t(nb)}, in, MemCategory::workspace);
      cuda::cast(a.raw(), in, a32.raw(), DType::f32, na, device_.compute_stream());
      cuda::cast(b.raw(), in, b32.raw(), DType::f32, nb, device_.compute_stream());
    }
    const cudaStream_t s = device_.compute_stream();
    auto gemm = [&] {
      gemm_.matmul(a.raw(), b.raw(), c.data<float>(), M, N, K, false, false, 1.f, 0.f, p, s);
    };
    for (int i = 0; i < warmup; ++i) gemm();
    CudaTimer timer(s);
    timer.start();
    for (int i = 0; i < iters; ++i) gemm();
    timer.stop();
    return timer.seconds() / iters;
  }

  // NCCL when every rank has a GPU of its own; when ranks share one (more ranks than GPUs on
  // a node, e.g. a TP x PP layout on a one-GPU machine), MPI through host staging, said once.
  std::unique_ptr<Communicator> make_device_world(Communicator& world, double timeout_s) override {
    const SharedGpu shared = first_shared_gpu(world);
    if (shared.a < 0) return make_nccl_world(world, device_.compute_stream(), timeout_s);
    if (world.rank() == 0)
      std::printf("# ranks %d and %d (and maybe more) share GPU %s: device collectives over MPI, staged "
                  "through host memory (NCCL needs a GPU per rank)\n",
                  shared.a, shared.b, shared.uuid.c_str());
    return std::make_unique<StagedCommunicator>(world.split(0, world.rank(), world.name()), *this);
  }

 private:
  CudaDevice device_;
  cuda::Gemm gemm_;
  CudaOps ops_;
  CudaHalfOps<bf16> bf16_ops_;
  CudaHalfOps<fp16> fp16_ops_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int ordinal) {
  std::string why;
  if (!cuda_available(&why)) throw InputError("backend 'cuda': " + why);
  int count = 0;
  DTB_CUDA_CHECK(cudaGetDeviceCount(&count));
  return std::make_unique<CudaBackend>(ordinal % count);
}

std::vector<std::string> backend_names() { return {"cpu", "cuda"}; }

}  // namespace dtb
