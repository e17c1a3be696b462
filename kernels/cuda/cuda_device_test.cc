// CudaDevice and CudaTimer: accounting as CpuDevice does it, block caching (no cudaMalloc in
// the steady state), reserved bytes against the driver's cudaMemGetInfo, data round trips
// and event timing. Every test but the first is skipped, with the reason, without a GPU.
#include "kernels/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtb {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// A failed CUDA call fails the test (DTB_CUDA_CHECK would abort the whole binary).
#define ASSERT_CUDA(expr)                                                       \
  do {                                                                          \
    const cudaError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorName(e_) << ": " \
                               << cudaGetErrorString(e_);                       \
  } while (0)

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// The same allocations and frees on any Device; the stats after the last free of each phase.
std::pair<MemoryStats, MemoryStats> exercise(Device& dev) {
  void* p = dev.allocate(1000, MemCategory::param, Tier::device);
  void* g = dev.allocate(3 * kMiB + 5, MemCategory::grad, Tier::device);
  void* z = dev.allocate(0, MemCategory::activation, Tier::device);
  void* h = dev.allocate(4096, MemCategory::optimizer_state, Tier::host);
  dev.deallocate(g, 3 * kMiB + 5, MemCategory::grad, Tier::device);
  void* a = dev.allocate(777, MemCategory::activation, Tier::device);
  dev.deallocate(a, 777, MemCategory::activation, Tier::device);
  dev.deallocate(z, 0, MemCategory::activation, Tier::device);
  const MemoryStats mid = dev.stats();
  dev.deallocate(p, 1000, MemCategory::param, Tier::device);
  dev.deallocate(h, 4096, MemCategory::optimizer_state, Tier::host);
  return {mid, dev.stats()};
}

// Runs without a GPU: the probe itself must never abort, and explains a false.
TEST(CudaAvailable, ReturnsWithAReasonWhenFalse) {
  std::string why = "unset", again;
  const bool ok = cuda_available(&why);
  EXPECT_EQ(cuda_available(), ok);  // a null `why` is allowed
  EXPECT_EQ(cuda_available(&again), ok);
  EXPECT_EQ(again, why);
  if (ok) {
    EXPECT_TRUE(why.empty()) << why;
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;  // one line, for GTEST_SKIP
    // The probe clears the error it caused. Only a failed runtime initialisation (e.g. no
    // driver) survives: the runtime reports it from every call for the rest of the process,
    // and it is the error the reason names.
    const cudaError_t left = cudaGetLastError();
    if (left != cudaSuccess) {
      EXPECT_NE(why.find(cudaGetErrorName(left)), std::string::npos) << why;
    }
  }
}

// cuda_available() under CUDA_VISIBLE_DEVICES="" is not tested: the variable is read once,
// when the runtime initialises, so setting it here would not take effect (or, before the
// first CUDA call, would hide the GPU from every later test in this process).

TEST(CudaDevice, DescribesItself) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  EXPECT_FALSE(dev.name().empty());
  EXPECT_FALSE(dev.is_cpu());
  EXPECT_EQ(dev.ordinal(), 0);
  EXPECT_NE(dev.compute_stream(), nullptr);
  EXPECT_NE(dev.comm_stream(), nullptr);
  EXPECT_NE(dev.compute_stream(), dev.comm_stream());
  size_t free_b = 0, total_b = 0;
  dev.mem_info(&free_b, &total_b);
  EXPECT_GT(total_b, 0u);
  EXPECT_LE(free_b, total_b);
  dev.synchronize();
  EXPECT_EQ(dev.reserved_bytes(), 0u);
  EXPECT_EQ(dev.malloc_calls(), 0u);
}

TEST(CudaDevice, AccountsPerCategoryAndTierLikeCpuDevice) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CpuDevice cpu;
  CudaDevice gpu;
  const auto [cpu_mid, cpu_end] = exercise(cpu);
  const auto [gpu_mid, gpu_end] = exercise(gpu);
  EXPECT_EQ(gpu_mid.current, cpu_mid.current);
  EXPECT_EQ(gpu_mid.peak, cpu_mid.peak);
  EXPECT_EQ(gpu_mid.current_total, cpu_mid.current_total);
  EXPECT_EQ(gpu_mid.peak_total, cpu_mid.peak_total);
  EXPECT_EQ(gpu_end.current, cpu_end.current);
  EXPECT_EQ(gpu_end.peak, cpu_end.peak);
  EXPECT_EQ(gpu_end.peak_total, cpu_end.peak_total);
  // The bytes asked for, not the rounded blocks (1000 B lives in a 1024 B block).
  EXPECT_EQ(gpu_mid.bytes(Tier::device, MemCategory::param), 1000u);
  EXPECT_EQ(gpu_mid.peak_bytes(Tier::device, MemCategory::grad), 3 * kMiB + 5);
  EXPECT_EQ(gpu_mid.peak_bytes(Tier::device, MemCategory::activation), 777u);
  EXPECT_EQ(gpu_mid.bytes(Tier::host, MemCategory::optimizer_state), 4096u);
  EXPECT_EQ(gpu_mid.bytes(Tier::device, MemCategory::optimizer_state), 0u);
  EXPECT_EQ(gpu_mid.peak_total[int(Tier::device)], 1000u + 3 * kMiB + 5);
  EXPECT_EQ(gpu_end.current_total[int(Tier::device)], 0u);
  EXPECT_EQ(gpu_end.current_total[int(Tier::host)], 0u);
  // Reserved counts device blocks only (host tier is pinned memory, not cudaMalloc).
  EXPECT_EQ(gpu.reserved_bytes(), 1024u + 4 * kMiB + 512u + 1024u);

  // Zero-byte and odd-size requests get distinct, 64-byte aligned, non-null blocks.
  void* z0 = gpu.allocate(0, MemCategory::workspace, Tier::device);
  void* z1 = gpu.allocate(0, MemCategory::workspace, Tier::device);
  void* o = gpu.allocate(3, MemCategory::workspace, Tier::device);
  void* h0 = gpu.allocate(0, MemCategory::workspace, Tier::host);
  for (void* p : {z0, z1, o, h0}) {
    EXPECT_NE(p, nullptr);
    EXPECT_TRUE(aligned64(p));
  }
  EXPECT_NE(z0, z1);
  EXPECT_NE(z0, o);
  EXPECT_NE(z1, o);
  EXPECT_EQ(gpu.stats().bytes(Tier::device, MemCategory::workspace), 3u);
  gpu.deallocate(z0, 0, MemCategory::workspace, Tier::device);
  gpu.deallocate(z1, 0, MemCategory::workspace, Tier::device);
  gpu.deallocate(o, 3, MemCategory::workspace, Tier::device);
  gpu.deallocate(h0, 0, MemCategory::workspace, Tier::host);
  gpu.deallocate(nullptr, 0, MemCategory::workspace, Tier::device);  // ignored
  EXPECT_EQ(gpu.stats().current_total[int(Tier::device)], 0u);
}

TEST(CudaDevice, ReusesFreedBlocks) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  const auto cat = MemCategory::workspace;
  void* p = dev.allocate(1000, cat, Tier::device);
  EXPECT_EQ(dev.malloc_calls(), 1u);
  EXPECT_EQ(dev.reserved_bytes(), 1024u);  // 512 B granularity below 1 MiB
  dev.deallocate(p, 1000, cat, Tier::device);
  EXPECT_EQ(dev.reserved_bytes(), 1024u);  // cached, not returned to the driver
  void* q = dev.allocate(1000, cat, Tier::device);
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.malloc_calls(), 1u);
  dev.deallocate(q, 1000, cat, Tier::device);
  // A smaller request reuses a block of at most twice its size.
  void* r = dev.allocate(512, cat, Tier::device);
  EXPECT_EQ(r, p);
  EXPECT_EQ(dev.malloc_calls(), 1u);

  // 2 MiB granularity above 1 MiB; exactly 1 MiB is still a small block.
  void* big = dev.allocate(kMiB + 1, cat, Tier::device);
  void* mib = dev.allocate(kMiB, cat, Tier::device);
  EXPECT_EQ(dev.reserved_bytes(), 1024u + 2 * kMiB + kMiB);
  EXPECT_EQ(dev.malloc_calls(), 3u);
  dev.deallocate(big, kMiB + 1, cat, Tier::device);
  // A small request does not take a cached block over twice its size.
  void* small = dev.allocate(100, cat, Tier::device);
  EXPECT_NE(small, big);
  EXPECT_EQ(dev.malloc_calls(), 4u);
  // ... but a request of the same block size does.
  void* big2 = dev.allocate(2 * kMiB, cat, Tier::device);
  EXPECT_EQ(big2, big);
  EXPECT_EQ(dev.malloc_calls(), 4u);
  dev.deallocate(r, 512, cat, Tier::device);
  dev.deallocate(mib, kMiB, cat, Tier::device);
  dev.deallocate(small, 100, cat, Tier::device);
  dev.deallocate(big2, 2 * kMiB, cat, Tier::device);
  EXPECT_EQ(dev.stats().current_total[int(Tier::device)], 0u);
}

TEST(CudaDevice, SteadyStateMakesNoCudaMalloc) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  const std::vector<size_t> sizes = {0,    1,        511,      513,       4096,
                                     kMiB, kMiB + 1, 3 * kMiB, 17 * kMiB, 1000};
  std::vector<void*> ptrs(sizes.size());
  size_t calls_after_first = 0, reserved_after_first = 0;
  for (int cycle = 0; cycle < 100; ++cycle) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      ptrs[i] = dev.allocate(sizes[i], MemCategory::activation, Tier::device);
    }
    // Free in a different order every other cycle, as a backward pass would.
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t i = cycle % 2 ? sizes.size() - 1 - k : k;
      dev.deallocate(ptrs[i], sizes[i], MemCategory::activation, Tier::device);
    }
    if (cycle == 0) {
      calls_after_first = dev.malloc_calls();
      reserved_after_first = dev.reserved_bytes();
      EXPECT_EQ(calls_after_first, sizes.size());
    }
  }
  EXPECT_EQ(dev.malloc_calls(), calls_after_first);
  EXPECT_EQ(dev.reserved_bytes(), reserved_after_first);
  EXPECT_EQ(dev.stats().current_total[int(Tier::device)], 0u);
  EXPECT_EQ(dev.stats().peak_total[int(Tier::device)],
            0u + 1 + 511 + 513 + 4096 + kMiB + kMiB + 1 + 3 * kMiB + 17 * kMiB + 1000);
}

// reserved_bytes() is what the allocator believes it holds; cudaMemGetInfo is what the
// driver says is gone. They agree up to slack: the driver maps memory in 2 MiB pages and may
// fit the start of a new allocation into a page it had already mapped, so the drop in free
// memory can fall short of the growth by up to one page (2 MiB); and it may map more than
// asked for (its own page tables and bookkeeping grow with allocations), bounded here by
// 64 MiB. Assumes no other process allocates on this GPU during the test.
TEST(CudaDevice, ReservedBytesMatchCudaMemGetInfo) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  // The first cudaMalloc of a process sets up driver state it keeps; keep it out of the delta.
  void* warm = dev.allocate(1, MemCategory::workspace, Tier::device);
  dev.deallocate(warm, 1, MemCategory::workspace, Tier::device);
  size_t free0 = 0, free1 = 0, total = 0;
  dev.mem_info(&free0, &total);
  const size_t reserved0 = dev.reserved_bytes();
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(dev.allocate(8 * kMiB, MemCategory::param, Tier::device));
  }
  const size_t growth = dev.reserved_bytes() - reserved0;
  EXPECT_EQ(growth, 64 * kMiB);  // fresh blocks: the cached 512 B block is too small to reuse
  dev.mem_info(&free1, &total);
  const size_t drop = free0 > free1 ? free0 - free1 : 0;
  EXPECT_GE(drop + 2 * kMiB, growth) << "free " << free0 << " -> " << free1;
  EXPECT_LE(drop, growth + 64 * kMiB) << "free " << free0 << " -> " << free1;
  for (void* b : blocks) dev.deallocate(b, 8 * kMiB, MemCategory::param, Tier::device);
}

TEST(CudaDevice, ReleaseCachedReturnsMemory) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  constexpr size_t kBytes = 256 * kMiB;
  void* live = dev.allocate(kMiB, MemCategory::param, Tier::device);
  void* p = dev.allocate(kBytes, MemCategory::activation, Tier::device);
  dev.deallocate(p, kBytes, MemCategory::activation, Tier::device);
  EXPECT_EQ(dev.reserved_bytes(), kMiB + kBytes);
  size_t free_cached = 0, free_released = 0, total = 0;
  dev.mem_info(&free_cached, &total);
  dev.release_cached();
  EXPECT_EQ(dev.reserved_bytes(), kMiB);  // the live block stays
  dev.mem_info(&free_released, &total);
  // The same one-page slack as in ReservedBytesMatchCudaMemGetInfo.
  EXPECT_GE(free_released + 2 * kMiB, free_cached + kBytes)
      << "free " << free_cached << " -> " << free_released;
  ASSERT_CUDA(cudaMemset(live, 0, kMiB));  // still usable
  const size_t calls = dev.malloc_calls();
  p = dev.allocate(kBytes, MemCategory::activation, Tier::device);  // back to the driver
  EXPECT_EQ(dev.malloc_calls(), calls + 1);
  dev.deallocate(p, kBytes, MemCategory::activation, Tier::device);
  dev.deallocate(live, kMiB, MemCategory::param, Tier::device);
}

TEST(CudaDevice, DataRoundTrips) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  const size_t n = (size_t(1) << 20) + 3;  // not a multiple of any block size
  const size_t bytes = n * sizeof(float);
  std::vector<float> src(n), back(n, 0.0f);
  for (size_t i = 0; i < n; ++i) src[i] = float(i % 4099) * 0.5f - 7.0f;
  auto* d0 = static_cast<float*>(dev.allocate(bytes, MemCategory::activation, Tier::device));
  auto* d1 = static_cast<float*>(dev.allocate(bytes, MemCategory::activation, Tier::device));
  ASSERT_CUDA(cudaMemcpy(d0, src.data(), bytes, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(d1, d0, bytes, cudaMemcpyDeviceToDevice));
  ASSERT_CUDA(cudaMemcpy(back.data(), d1, bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += back[i] != src[i];
  EXPECT_EQ(bad, 0u);

  // Pinned host tier, written by an async copy on the compute stream.
  auto* h = static_cast<float*>(dev.allocate(bytes, MemCategory::optimizer_state, Tier::host));
  std::fill(h, h + n, 0.0f);
  ASSERT_CUDA(cudaMemcpyAsync(h, d1, bytes, cudaMemcpyDeviceToHost, dev.compute_stream()));
  dev.synchronize();
  bad = 0;
  for (size_t i = 0; i < n; ++i) bad += h[i] != src[i];
  EXPECT_EQ(bad, 0u);
  dev.deallocate(h, bytes, MemCategory::optimizer_state, Tier::host);
  dev.deallocate(d1, bytes, MemCategory::activation, Tier::device);
  dev.deallocate(d0, bytes, MemCategory::activation, Tier::device);
}

// A device left with live, cached and pinned blocks gives them all back when destroyed.
TEST(CudaDevice, DestructorFreesLiveAndCachedBlocks) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice probe;
  void* warm = probe.allocate(1, MemCategory::workspace, Tier::device);  // first-use driver state
  probe.deallocate(warm, 1, MemCategory::workspace, Tier::device);
  size_t free0 = 0, free_during = 0, free1 = 0, total = 0;
  probe.mem_info(&free0, &total);
  {
    CudaDevice dev;
    void* live = dev.allocate(256 * kMiB, MemCategory::param, Tier::device);
    void* cached = dev.allocate(256 * kMiB, MemCategory::grad, Tier::device);
    dev.deallocate(cached, 256 * kMiB, MemCategory::grad, Tier::device);
    void* pinned = dev.allocate(kMiB, MemCategory::optimizer_state, Tier::host);
    EXPECT_NE(live, nullptr);
    EXPECT_NE(pinned, nullptr);
    dev.mem_info(&free_during, &total);
    EXPECT_GE(free0 + 2 * kMiB, free_during + 512 * kMiB);  // the memory really was taken
  }
  probe.mem_info(&free1, &total);
  // Slack for driver bookkeeping, as in ReservedBytesMatchCudaMemGetInfo.
  EXPECT_GE(free1 + 64 * kMiB, free0) << "free " << free0 << " -> " << free1;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A 256 MiB device-to-device copy reads and writes every byte: on an H200 (4.8 TB/s HBM)
// that is at most ~2.4 TB/s of copied bytes, so 10 TB/s bounds every current GPU with
// headroom, while a timer reading too short (an empty interval, or a unit slip such as
// dividing by 1e6) breaks it. Any GPU, even a small MIG slice, copies far above 10 GB/s, so
// that floor catches a timer reading ~1000x too long (milliseconds taken as seconds).
TEST(CudaTimer, TimesADeviceToDeviceCopy) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  CudaDevice dev;
  constexpr size_t kBytes = 256 * kMiB;
  const cudaStream_t stream = dev.compute_stream();
  void* src = dev.allocate(kBytes, MemCategory::workspace, Tier::device);
  void* dst = dev.allocate(kBytes, MemCategory::workspace, Tier::device);
  ASSERT_CUDA(cudaMemsetAsync(src, 1, kBytes, stream));
  // Warm-up: the first copy pays one-off costs that are not bandwidth.
  ASSERT_CUDA(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, stream));
  CudaTimer timer(stream);
  timer.start();
  ASSERT_CUDA(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, stream));
  timer.stop();
  const double s = timer.seconds();
  EXPECT_GT(s, 0.0);
  EXPECT_LT(s, 10.0);
  const double bytes_per_s = double(kBytes) / s;
  EXPECT_LT(bytes_per_s, 10e12) << s << " s for " << kBytes << " B";
  EXPECT_GT(bytes_per_s, 10e9) << s << " s for " << kBytes << " B";
  dev.deallocate(dst, kBytes, MemCategory::workspace, Tier::device);
  dev.deallocate(src, kBytes, MemCategory::workspace, Tier::device);
}

}  // namespace
}  // namespace dtb
