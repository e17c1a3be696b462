// CudaDevice: a caching allocator over cudaMalloc (freed device blocks are kept, keyed by
// size, and handed out again), pinned host memory for the host tier, the two streams, and
// CUDA-event timing. Accounting is Device's, by the bytes asked for.
#include "kernels/cuda/cuda_device.h"

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/error.h"

namespace dtb {
namespace {

constexpr size_t kSmallGranule = 512;              // block granularity up to kSmallLimit
constexpr size_t kSmallLimit = size_t(1) << 20;    // 1 MiB
constexpr size_t kLargeGranule = size_t(2) << 20;  // 2 MiB, the driver's large page
constexpr size_t kMaxRequest = size_t(1) << 62;    // far above any memory; rounding cannot wrap
// block_size_ also records live pinned host blocks (so the destructor can free them), with
// this size: device blocks are never smaller than kSmallGranule, and cudaFreeHost needs no size.
constexpr size_t kHostBlock = 0;

size_t round_up(size_t n, size_t granule) { return (n + granule - 1) / granule * granule; }

/// The size of the device block serving a request of `bytes` (0 B gets the minimum block,
/// so every allocation has its own unique pointer).
size_t block_bytes(size_t bytes) {
  if (bytes == 0) return kSmallGranule;
  return bytes <= kSmallLimit ? round_up(bytes, kSmallGranule) : round_up(bytes, kLargeGranule);
}

std::string error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // A failed query records the error as the runtime's last error; clear it so that the
    // next DTB_CUDA_CHECK(cudaGetLastError()) does not report it as its own. (A failed
    // runtime initialisation, e.g. no driver, is reported by every call for the rest of the
    // process whatever we do.)
    (void)cudaGetLastError();
    if (why) {
      const char* kind = "CUDA unavailable: ";
      if (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) kind = "no CUDA driver: ";
      if (e == cudaErrorNoDevice) kind = "no CUDA device: ";
      *why = kind + error_text(e);
    }
    return false;
  }
  if (n <= 0) {
    if (why) *why = "no CUDA device: cudaGetDeviceCount found 0 devices";
    return false;
  }
  if (why) why->clear();
  return true;
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  int n = 0;
  DTB_CUDA_CHECK(cudaGetDeviceCount(&n));
  DTB_CHECK(ordinal >= 0 && ordinal < n, "CUDA device " + std::to_string(ordinal) +
                                             " requested but " + std::to_string(n) + " visible");
  DTB_CUDA_CHECK(cudaSetDevice(ordinal));
  // Non-blocking: neither stream synchronises with the legacy default stream, so work a
  // library issues there cannot serialise compute against communication.
  DTB_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  DTB_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
}

CudaDevice::~CudaDevice() {
  // Every error is ignored: a destructor must not abort, and after a sticky error (or at
  // exit, once the runtime is unloading) each call fails anyway; freeing what we can is all
  // that is left to do.
  (void)cudaSetDevice(ordinal_);
  // Work still queued on any stream may use the blocks freed below.
  (void)cudaDeviceSynchronize();
  for (const auto& [ptr, size] : block_size_) {
    (void)(size == kHostBlock ? cudaFreeHost(ptr) : cudaFree(ptr));
  }
  block_size_.clear();
  free_blocks_.clear();
  reserved_ = 0;
  if (compute_) (void)cudaStreamDestroy(compute_);
  if (comm_) (void)cudaStreamDestroy(comm_);
  // Leave no error of ours behind for the next DTB_CUDA_CHECK(cudaGetLastError()).
  (void)cudaGetLastError();
}

std::string CudaDevice::name() const {
  cudaDeviceProp prop{};
  DTB_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
  return prop.name;
}

// Stream-ordered reuse: deallocate() caches a device block at once, although kernels queued
// on the compute stream may still be using it. That is safe only because the next user of
// the block is also work on the compute stream, which runs after the queued kernels (the
// assumption PyTorch's caching allocator makes for a single stream). A block used on the
// comm stream (or any other) must be ordered before compute-stream work (an event) before it
// is freed. release_cached() and the destructor synchronise the device before cudaFree.
void* CudaDevice::allocate(size_t bytes, MemCategory cat, Tier tier) {
  DTB_CHECK(bytes <= kMaxRequest, "CudaDevice::allocate: implausible size " +
                                      std::to_string(bytes) + " B of " +
                                      std::string(to_string(cat)));
  if (tier == Tier::host) {
    // Pinned (page-locked) so that offload copies run asynchronously at full PCIe/C2C speed.
    // Not cached: host-tier buffers are few and long-lived. Page aligned, so 64 B aligned.
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes == 0 ? kSmallGranule : bytes);
    if (e != cudaSuccess) {
      fatal(__FILE__, __LINE__,
            "cudaMallocHost failed allocating " + std::to_string(bytes) + " B of pinned " +
                std::string(to_string(cat)) + ": " + error_text(e));
    }
    block_size_[p] = kHostBlock;
    account_alloc(bytes, cat, tier);
    return p;
  }

  const size_t want = block_bytes(bytes);
  // The smallest cached block that fits, unless it is over twice the size: a small request
  // must not pin down a large block that a large request could use.
  const size_t limit = 2 * want;
  if (auto it = free_blocks_.lower_bound(want); it != free_blocks_.end() && it->first <= limit) {
    void* p = it->second;
    free_blocks_.erase(it);
    account_alloc(bytes, cat, tier);
    return p;
  }

  // cudaMalloc allocates on the calling thread's current device, which other code may change.
  DTB_CUDA_CHECK(cudaSetDevice(ordinal_));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, want);
  if (e == cudaErrorMemoryAllocation) {
    // Out of memory is not a sticky error: clear it, give the cache back, try once more.
    (void)cudaGetLastError();
    release_cached();
    e = cudaMalloc(&p, want);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    const bool have_info = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
    fatal(__FILE__, __LINE__,
          "CUDA out of memory on device " + std::to_string(ordinal_) + " allocating " +
              std::to_string(bytes) + " B (block " + std::to_string(want) + " B) of " +
              std::string(to_string(cat)) + ": " +
              (have_info ? std::to_string(free_b) + " B free of " + std::to_string(total_b) + " B"
                         : std::string("cudaMemGetInfo failed")) +
              ", " + std::to_string(reserved_) + " B reserved by this allocator");
  }
  if (e != cudaSuccess) {
    fatal(__FILE__, __LINE__,
          "cudaMalloc(" + std::to_string(want) + " B) on device " + std::to_string(ordinal_) +
              " failed: " + error_text(e));
  }
  // cudaMalloc returns at least 256 B alignment, above Device's 64 B guarantee.
  ++malloc_calls_;
  reserved_ += want;
  block_size_[p] = want;
  account_alloc(bytes, cat, tier);
  return p;
}

void CudaDevice::deallocate(void* ptr, size_t bytes, MemCategory cat, Tier tier) {
  if (!ptr) return;
  const auto it = block_size_.find(ptr);
  if (tier == Tier::host) {
    DTB_CHECK(it != block_size_.end() && it->second == kHostBlock,
              "CudaDevice::deallocate: pointer is not a live pinned host block of this device");
    account_free(bytes, cat, tier);
    // cudaFreeHost "may" synchronise; an async copy on our streams may still read or write
    // the buffer, so wait for them. Host-tier frees are rare, so this costs little.
    synchronize();
    DTB_CUDA_CHECK(cudaFreeHost(ptr));
    block_size_.erase(it);
    return;
  }
  DTB_CHECK(it != block_size_.end() && it->second != kHostBlock,
            "CudaDevice::deallocate: pointer is not a device block of this device");
  DTB_CHECK(block_bytes(bytes) <= it->second, "CudaDevice::deallocate: " + std::to_string(bytes) +
                                                  " B freed from a block of " +
                                                  std::to_string(it->second) + " B");
  const auto [lo, hi] = free_blocks_.equal_range(it->second);
  for (auto c = lo; c != hi; ++c) {
    DTB_CHECK(c->second != ptr, "CudaDevice::deallocate: double free");
  }
  account_free(bytes, cat, tier);
  free_blocks_.emplace(it->second, ptr);  // cached, not cudaFree'd; see the note at allocate()
}

void CudaDevice::release_cached() {
  if (free_blocks_.empty()) return;
  DTB_CUDA_CHECK(cudaSetDevice(ordinal_));
  // Cached blocks may still be in use by queued work (stream-ordered reuse, see allocate()).
  // Releasing is rare (out of memory, between suites), so wait for the whole device.
  DTB_CUDA_CHECK(cudaDeviceSynchronize());
  for (const auto& [size, ptr] : free_blocks_) {
    DTB_CUDA_CHECK(cudaFree(ptr));
    reserved_ -= size;
    block_size_.erase(ptr);
  }
  free_blocks_.clear();
}

void CudaDevice::mem_info(size_t* free_bytes, size_t* total_bytes) const {
  // cudaMemGetInfo reports on the current device, which other code may have changed.
  DTB_CUDA_CHECK(cudaSetDevice(ordinal_));
  DTB_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

void CudaDevice::synchronize() const {
  DTB_CUDA_CHECK(cudaStreamSynchronize(compute_));
  DTB_CUDA_CHECK(cudaStreamSynchronize(comm_));
}

CudaTimer::CudaTimer(cudaStream_t stream) : stream_(stream) {
  // Default flags: timing enabled (cudaEventDisableTiming would make seconds() fail).
  DTB_CUDA_CHECK(cudaEventCreate(&begin_));
  DTB_CUDA_CHECK(cudaEventCreate(&end_));
}

CudaTimer::~CudaTimer() {
  // Ignored errors, as in ~CudaDevice: a destructor must not abort.
  if (begin_) (void)cudaEventDestroy(begin_);
  if (end_) (void)cudaEventDestroy(end_);
}

void CudaTimer::start() { DTB_CUDA_CHECK(cudaEventRecord(begin_, stream_)); }

void CudaTimer::stop() { DTB_CUDA_CHECK(cudaEventRecord(end_, stream_)); }

double CudaTimer::seconds() const {
  DTB_CUDA_CHECK(cudaEventSynchronize(end_));
  float ms = 0.0f;
  DTB_CUDA_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
  return double(ms) / 1e3;
}

}  // namespace dtb
