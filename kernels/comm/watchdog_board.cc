// The communication watchdog's board (kernels/comm/watchdog_board.h): reading a slot whole, and a
// rank publishing its groups' names.
#include "kernels/comm/watchdog_board.h"

#include <cstring>

namespace dtb::watchdog {

SlotView read_slot(const Slot& s) {
  for (;;) {
    SlotView v;
    const uint32_t v1 = s.version.load(std::memory_order_acquire);
    v.active = s.active.load(std::memory_order_relaxed);
    v.op = s.op.load(std::memory_order_relaxed);
    v.peer = s.peer.load(std::memory_order_relaxed);
    v.group = s.group.load(std::memory_order_relaxed);
    v.t_ns = s.t_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint32_t v2 = s.version.load(std::memory_order_relaxed);
    if (v1 == v2 && (v1 & 1u) == 0) {
      v.version = v1;
      return v;
    }
  }
}

std::string name_in(const Slot& s, uint64_t id) {
  for (const GroupName& g : s.names) {
    if (g.id.load(std::memory_order_acquire) != id) continue;
    char copy[kNameBytes];
    std::memcpy(copy, g.name, kNameBytes);
    copy[kNameBytes - 1] = 0;
    if (g.id.load(std::memory_order_acquire) == id) return copy;
  }
  return "";
}

void publish_name(Slot& s, uint64_t id, const std::string& name) {
  for (const GroupName& g : s.names)
    if (g.id.load(std::memory_order_relaxed) == id) return;
  GroupName& g = s.names[s.next_name.fetch_add(1, std::memory_order_relaxed) % kGroupSlots];
  g.id.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::strncpy(g.name, name.c_str(), kNameBytes - 1);
  g.id.store(id, std::memory_order_release);
}

}  // namespace dtb::watchdog
