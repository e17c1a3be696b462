// CpuDevice and the per-category, per-tier accounting every Device shares.
#include "kernels/device.h"

#include <unistd.h>

#include <new>

#include "kernels/error.h"

namespace dtb {

std::string_view to_string(MemCategory c) {
  switch (c) {
    case MemCategory::param: return "param";
    case MemCategory::grad: return "grad";
    case MemCategory::master_param: return "master_param";
    case MemCategory::optimizer_state: return "optimizer_state";
    case MemCategory::activation: return "activation";
    case MemCategory::comm_buffer: return "comm_buffer";
    case MemCategory::workspace: return "workspace";
  }
  return "?";
}

std::string_view to_string(Tier t) { return t == Tier::device ? "device" : "host"; }

size_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

void Device::reset_peaks() {
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
}

void Device::account_alloc(size_t bytes, MemCategory cat, Tier tier) {
  auto& cur = stats_.current[int(tier)][int(cat)];
  cur += bytes;
  if (cur > stats_.peak[int(tier)][int(cat)]) stats_.peak[int(tier)][int(cat)] = cur;
  auto& tot = stats_.current_total[int(tier)];
  tot += bytes;
  if (tot > stats_.peak_total[int(tier)]) stats_.peak_total[int(tier)] = tot;
}

void Device::account_free(size_t bytes, MemCategory cat, Tier tier) {
  auto& cur = stats_.current[int(tier)][int(cat)];
  DTB_CHECK(cur >= bytes, "memory accounting underflow in category " + std::string(to_string(cat)));
  cur -= bytes;
  stats_.current_total[int(tier)] -= bytes;
}

void* CpuDevice::allocate(size_t bytes, MemCategory cat, Tier tier) {
  void* p = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{64}, std::nothrow);
  DTB_CHECK(p != nullptr, "out of host memory allocating " + std::to_string(bytes) + " B of " +
                              std::string(to_string(cat)));
  account_alloc(bytes, cat, tier);
  return p;
}

void CpuDevice::deallocate(void* ptr, size_t bytes, MemCategory cat, Tier tier) {
  if (!ptr) return;
  ::operator delete(ptr, std::align_val_t{64});
  account_free(bytes, cat, tier);
}

}  // namespace dtb
