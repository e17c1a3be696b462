// The communication watchdog's board (kernels/comm/watchdog.h): one slot per rank in its node's
// shared MPI window, where the rank says which call it is in (a seqlock around relaxed stores)
// and which group names it has; any rank on the node reads any slot. Not the watching, nor the
// messages: watchdog.cc and watchdog_text.h.
#pragma once
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dtb::watchdog {

/// The steady clock in nanoseconds: the slots' call start times.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int kGroupSlots = 64;    // group names a rank publishes (a ring: old ones overwritten)
constexpr int kNameBytes = 48;
constexpr int32_t kAsyncWait = 100;  // op + kAsyncWait: waiting on that op's async handle

/// A group name a rank publishes: `id` is written last (release), so a reader that sees
/// the same id before and after copying the name has a whole one.
struct GroupName {
  std::atomic<uint64_t> id{0};
  char name[kNameBytes] = {};
};

/// One rank's entry, in the node's shared window. `version` is a seqlock: odd while the
/// rank writes. `active` is 1 inside a call; after it, op, peer, group and t_ns still
/// describe that last call.
struct Slot {
  std::atomic<uint32_t> version{0};
  std::atomic<int32_t> active{0};
  std::atomic<int32_t> op{0};
  std::atomic<int32_t> peer{-1};
  std::atomic<int32_t> pid{0};
  /// The signal (SIGINT, SIGTERM) this rank is exiting on, 0 before: a rank the launcher
  /// ended after another died is not that rank (gone_peers).
  std::atomic<int32_t> ending_signal{0};
  std::atomic<uint64_t> group{0};
  std::atomic<int64_t> t_ns{0};
  std::atomic<uint32_t> next_name{0};
  GroupName names[kGroupSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the board's atomics must be lock-free to work across processes");

struct SlotView {
  int32_t active = 0, op = 0, peer = -1;
  uint64_t group = 0;
  int64_t t_ns = 0;
  uint32_t version = 0;
};

/// A consistent copy of slot `s` (retried while the rank writes it).
SlotView read_slot(const Slot& s);

/// The group name with id `id` that slot `s` published, or "" when it holds none.
std::string name_in(const Slot& s, uint64_t id);

/// Publishes `name` for group `id` in slot `s` (once; the oldest of kGroupSlots overwritten).
void publish_name(Slot& s, uint64_t id, const std::string& name);

/// Where every world rank is: the world rank of its node's first rank (the node's id),
/// its index on that node, its pid.
struct Place {
  int node = 0, local = 0, pid = 0;
};

struct Board {
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_Win win = MPI_WIN_NULL;
  std::vector<Slot*> local;    // by local index
  std::vector<Place> places;   // by world rank
  std::vector<std::string> hosts;  // hostname by world rank (gethostname, gathered at start)
  int world_rank = 0, world_size = 1;
  Slot* mine = nullptr;
};

}  // namespace dtb::watchdog
