// Device: where tensors live, with per-category, per-tier memory accounting.
// Not a compute API: compute ops are Ops<T> (kernels/ops.h), in kernels/cpu and kernels/cuda.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace dtb {

/// What an allocation holds; the memory suite and the analytic model use the same names.
enum class MemCategory { param, grad, master_param, optimizer_state, activation, comm_buffer, workspace };
inline constexpr int kNumMemCategories = 7;
/// The category's name as reports and configs write it, e.g. "optimizer_state".
std::string_view to_string(MemCategory c);

/// Where an allocation lives: the accelerator (or, on CPU, main memory) or the host tier
/// used by optimizer offload. On the CPU backend both are RAM but are accounted apart.
enum class Tier { device, host };
inline constexpr int kNumTiers = 2;
/// "device" or "host".
std::string_view to_string(Tier t);

/// Current and peak bytes per (tier, category), plus the peak of each tier's total.
struct MemoryStats {
  std::array<std::array<size_t, kNumMemCategories>, kNumTiers> current{};
  std::array<std::array<size_t, kNumMemCategories>, kNumTiers> peak{};
  std::array<size_t, kNumTiers> current_total{};
  std::array<size_t, kNumTiers> peak_total{};
  size_t bytes(Tier t, MemCategory c) const { return current[int(t)][int(c)]; }
  size_t peak_bytes(Tier t, MemCategory c) const { return peak[int(t)][int(c)]; }
};

/// An allocator with accounting. allocate() returns 64-byte aligned memory and never
/// returns null (out of memory aborts the job through the error sink, naming the bytes
/// and category). Not thread-safe: one Device per rank, used from the rank's thread.
class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;   // e.g. "cpu"
  virtual bool is_cpu() const = 0;
  /// `bytes` of memory (64-byte aligned; bytes may be 0), accounted under (cat, tier).
  /// Aborts through the error sink when the memory is not there.
  virtual void* allocate(size_t bytes, MemCategory cat, Tier tier) = 0;
  /// Returns memory from allocate(); bytes, cat and tier must be those it was allocated
  /// with (the accounting aborts on an underflow). A null ptr is ignored.
  virtual void deallocate(void* ptr, size_t bytes, MemCategory cat, Tier tier) = 0;
  const MemoryStats& stats() const { return stats_; }
  /// Peaks restart from the current bytes (e.g. between suites).
  void reset_peaks();

 protected:
  void account_alloc(size_t bytes, MemCategory cat, Tier tier);
  void account_free(size_t bytes, MemCategory cat, Tier tier);
  MemoryStats stats_;
};

/// Physical memory of this machine in bytes (sysconf), for "will it fit" checks of a config.
size_t host_memory_bytes();

/// Host memory through aligned operator new. Every byte is accounted in stats().
class CpuDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  bool is_cpu() const override { return true; }
  void* allocate(size_t bytes, MemCategory cat, Tier tier) override;
  void deallocate(void* ptr, size_t bytes, MemCategory cat, Tier tier) override;
};

}  // namespace dtb
