// Backend: what a run computes on — a Device, the model's float ops on it, its memory
// copies and a GEMM timer — chosen by name ("cpu", "cuda") so the harness and suites are
// written once. kernels/cpu/cpu_backend.cc and kernels/cuda/cuda_backend.cc implement it.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtb {

// Named, not included: the collectives (kernels/comm/communicator.h) are a layer above this
// header; a backend that builds one (kernels/cuda/cuda_backend.cc) includes it.
class Communicator;
class OpClock;

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// Human-readable device name, e.g. "cpu" or "NVIDIA H200".
  virtual std::string device_name() const = 0;
  /// What identifies the device and its software, for `dtbench validate`'s inventory: on CUDA
  /// "device_ordinal", "device_pci_bus_id" (cudaDeviceGetPCIBusId), "device_uuid",
  /// "device_memory_bytes" (cudaMemGetInfo's total), "driver_version" and "cuda_runtime_version"
  /// (cudaDriverGetVersion, cudaRuntimeGetVersion, as "12.4"), "nccl_version" (ncclGetVersion,
  /// as "2.21.5"); empty on the CPU. Errors: none; what a call cannot read is left out.
  virtual std::map<std::string, std::string> device_inventory() const { return {}; }
  virtual Device& device() = 0;
  virtual Ops<float>& ops() = 0;
  /// The ops on bf16 / fp16 storage: 2-byte tensors in the device's memory, fp32 compute and
  /// accumulation, fp32 statistics, master weights and moments (the recipe of
  /// kernels/cpu/half_ops.h). Null on the CPU backend, whose callers use HalfCpuOps (the
  /// reference's default for a null ops pointer).
  virtual Ops<bf16>* bf16_ops() { return nullptr; }
  virtual Ops<fp16>* fp16_ops() { return nullptr; }
  /// Copies between host memory and the device's memory (memcpy on the CPU; cudaMemcpy,
  /// complete on return, on CUDA).
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  /// A clock for ProfiledOps (kernels/op_profile.h) that times the work each op queues:
  /// steady_clock around the call on the CPU, CUDA events on the compute stream on CUDA.
  virtual std::unique_ptr<OpClock> make_op_clock();
  /// Waits for all work queued on the device.
  virtual void synchronize() = 0;
  /// The GEMM precisions time_gemm() accepts: "fp32" everywhere; "tf32", "bf16", "fp16"
  /// (fp32 accumulation) on CUDA.
  virtual std::vector<std::string> gemm_precisions() const = 0;
  /// Seconds per GEMM C (M,N) = A (M,K) @ B (K,N), row-major, at `precision`: `warmup`
  /// untimed calls, then `iters` timed back to back, divided once (CUDA events on CUDA,
  /// steady_clock on the CPU). Inputs are random in [-1, 1). `slowdown` (test-only, the
  /// regression gate's power measurement, kernels/slowdown.h): each timed call does about that
  /// factor times its CPU work (slowed), CPU only. Errors: an unsupported precision, or a slowdown on a
  /// backend without it, throws InputError; out of memory aborts.
  virtual double time_gemm(int M, int N, int K, const std::string& precision, int warmup, int iters,
                           double slowdown = 1.0) = 0;
  /// The precision ops().matmul_* use from now on, one of gemm_precisions() (inputs
  /// rounded to it, fp32 accumulation). Errors: InputError for one this backend lacks.
  virtual void set_matmul_precision(const std::string& precision) = 0;
  /// The communicator for collectives on this backend's memory, built over `world` (MPI,
  /// host buffers) — on CUDA, NCCL with a collective timeout of `timeout_s` seconds when
  /// every rank has its own GPU, and a StagedCommunicator (MPI through host buffers, MPI's
  /// timeout) when ranks share one — or null when `world` itself serves (the CPU).
  /// Collective over `world`.
  virtual std::unique_ptr<Communicator> make_device_world(Communicator& world, double timeout_s) = 0;
};

/// The CPU backend: CpuDevice, CpuOps<float>, OpenBLAS sgemm.
std::unique_ptr<Backend> make_cpu_backend();
/// The CUDA backend on GPU `ordinal` (CudaDevice, CUDA ops, cuBLASLt), when dtbench was
/// built with CUDA; otherwise, or without a usable GPU, throws InputError saying why.
std::unique_ptr<Backend> make_cuda_backend(int ordinal);
/// Backend names this build has: {"cpu"} or {"cpu", "cuda"}.
std::vector<std::string> backend_names();

}  // namespace dtb
