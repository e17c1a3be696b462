// The communication watchdog (see watchdog.h): a node-wide board of what each rank is
// doing, written with relaxed stores around every MPI call, and one thread per process
// that watches its own rank's call and takes SIGINT / SIGTERM.
#include "kernels/comm/watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "kernels/error.h"

namespace dtb {
namespace {

int64_t now_ns() {
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

struct State {
  Board* board = nullptr;  // null until started
  std::atomic<double> timeout_s{300.0};
  std::atomic<bool> stop{false};
  std::thread thread;
  std::mutex mu;  // guards handler, groups
  std::function<void(const std::string&)> handler;
  std::map<uint64_t, CommGroupInfo> groups;  // this rank's groups, by id
};

State& state() {
  static State s;
  return s;
}

// Read by every CommOpScope: the calling rank's slot, or null when no board is up.
std::atomic<Slot*> g_slot{nullptr};

std::string op_text(int32_t op) {
  if (op >= kAsyncWait) return std::string(comm_op_name(CommOp(op - kAsyncWait))) + " (async wait)";
  return comm_op_name(CommOp(op));
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

std::string ranks_text(const std::vector<int>& r) {
  std::string out;
  for (size_t i = 0; i < r.size() && i < 16; ++i) {
    if (i) out += ',';
    out += std::to_string(r[i]);
  }
  if (r.size() > 16) out += ",... (" + std::to_string(r.size()) + " ranks)";
  return out;
}

/// The process state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z' zombie ...), or
/// 0 when the process is gone.
char process_state(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return 0;
  const size_t close = line.rfind(')');  // the command name may hold spaces
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

/// What world rank `w` is doing, as seen from this node's board, and whether it sits in
/// `op` on group `id`.
struct PeerState {
  bool arrived = false;
  std::string text;
};

PeerState peer_state(const Board& b, int w, uint64_t id, int32_t op, int64_t now) {
  const Place& p = b.places[size_t(w)];
  if (p.node != b.places[size_t(b.world_rank)].node) return {false, ""};  // another node: remote_text() names it
  const Slot& s = *b.local[size_t(p.local)];
  const SlotView v = read_slot(s);
  const char st = process_state(p.pid);
  const std::string who = "rank " + std::to_string(w) + " (pid " + std::to_string(p.pid);
  if (st == 0 || st == 'Z' || st == 'X') return {false, who + ": exited)"};
  if (st == 'T' || st == 't') return {false, who + ": stopped)"};
  const double ago = double(now - v.t_ns) * 1e-9;
  std::string gname = name_in(s, v.group);
  if (gname.empty()) gname = "?";
  if (v.active && v.group == id && v.op == op) return {true, "rank " + std::to_string(w)};
  if (v.active && v.group == id)
    return {false, who + ": in " + op_text(v.op) + " on the same group for " + seconds_text(ago) +
                       ", a mismatched call)"};
  if (v.active)
    return {false, who + ": in " + op_text(v.op) + " on group '" + gname + "' for " + seconds_text(ago) + ")"};
  if (v.t_ns == 0 || v.op == 0) return {false, who + ": computing or hung, no MPI call yet)"};
  return {false, who + ": computing or hung, no MPI call since its last one (" + op_text(v.op) + " on group '" +
                     gname + "') began " + seconds_text(ago) + " ago)"};
}

/// The ranks on this node whose process has exited or is stopped, as "; rank 2 (pid 5474)
/// had exited" (empty when none): what a signal from the launcher follows (Open MPI's mpirun
/// sends SIGTERM to every rank once one dies). Ranks that took a signal themselves (their
/// ending_signal set) are not named: they exited because the launcher ended them.
std::string gone_peers(const Board& b) {
  std::string out;
  for (int w = 0; w < b.world_size; ++w) {
    const Place& p = b.places[size_t(w)];
    if (w == b.world_rank || p.node != b.places[size_t(b.world_rank)].node) continue;
    if (b.local[size_t(p.local)]->ending_signal.load(std::memory_order_acquire) != 0) continue;  // ended by a signal
    const char st = process_state(p.pid);
    const std::string who = "rank " + std::to_string(w) + " (pid " + std::to_string(p.pid) + ")";
    if (st == 0 || st == 'Z' || st == 'X') out += "; " + who + " had exited";
    else if (st == 'T' || st == 't') out += "; " + who + " was stopped";
  }
  return out;
}

/// Ranks on other nodes, by host, as "ranks 2,3 on dtbh2, rank 4 on dtbh3": their processes and
/// calls are on their own node's board, so from this node they can only be named with their host
/// (from the hostnames gathered at start), not said to have arrived or not.
std::string remote_text(const Board& b, const std::vector<int>& ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int w : ranks) {
    const std::string& h = b.hosts[size_t(w)];
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) { return e.first == h; });
    if (it == by_host.end()) by_host.push_back({h, {w}});
    else it->second.push_back(w);
  }
  std::string out;
  for (const auto& [h, rs] : by_host)
    out += (out.empty() ? "" : ", ") + std::string(rs.size() > 1 ? "ranks " : "rank ") + ranks_text(rs) + " on " + h;
  return out;
}

/// This rank's call `v` as a sentence: "all_reduce on group 'world' (world ranks 0,1,2,3)"
/// and, for a send or receive, its peer.
std::string call_text(const CommGroupInfo& g, const SlotView& v) {
  const CommOp base = CommOp(v.op >= kAsyncWait ? v.op - kAsyncWait : v.op);
  std::string msg = op_text(v.op) + " on group '" + g.name + "' (world ranks " + ranks_text(g.world_ranks) + ")";
  const bool p2p = base == CommOp::send || base == CommOp::recv || base == CommOp::sendrecv;
  if (p2p && v.peer >= 0 && size_t(v.peer) < g.world_ranks.size())
    msg += (base == CommOp::recv ? " from rank " : base == CommOp::send ? " to rank " : " with rank ") +
           std::to_string(g.world_ranks[size_t(v.peer)]);
  return msg;
}

/// Who has not arrived at this rank's call `v` ("; not arrived: ...; on other nodes, not visible
/// from here: ...; arrived: ..." or, for a send or receive, "; peer: ..."): this node's ranks from
/// the board, other nodes' by host.
std::string arrivals_text(const Board& b, const CommGroupInfo& g, const SlotView& v) {
  const int64_t now = now_ns();
  const CommOp base = CommOp(v.op >= kAsyncWait ? v.op - kAsyncWait : v.op);
  const bool p2p = base == CommOp::send || base == CommOp::recv || base == CommOp::sendrecv;
  std::vector<std::string> missing;
  std::vector<int> arrived, remote;
  auto add = [&](int w, const PeerState& p) {
    if (p.arrived) arrived.push_back(w);
    else if (p.text.empty()) remote.push_back(w);
    else missing.push_back(p.text);
  };
  if (p2p && v.peer >= 0 && size_t(v.peer) < g.world_ranks.size()) {
    const int w = g.world_ranks[size_t(v.peer)];
    add(w, peer_state(b, w, 0, -1, now));  // a peer never "arrives" at a p2p call
  } else {
    for (int w : g.world_ranks) {
      if (w == b.world_rank) arrived.push_back(w);
      else add(w, peer_state(b, w, v.group, v.op, now));
    }
  }
  std::string msg;
  if (!missing.empty()) {
    msg += p2p ? "; peer: " : "; not arrived: ";
    for (size_t i = 0; i < missing.size(); ++i) msg += (i ? ", " : "") + missing[i];
  }
  if (!remote.empty())
    msg += (p2p ? "; peer: " : "; on other nodes, not visible from here: ") + remote_text(b, remote) +
           (p2p ? " (another node: not visible from here)" : "");
  if (!p2p) msg += "; arrived: " + (arrived.empty() ? std::string("none") : ranks_text(arrived));
  return msg;
}

/// Seconds a rank whose timed-out call spans nodes waits for the launcher's signal before it
/// exits (see watch()): above `scripts/cluster mpirun`'s keepalive detection (about 7 s).
constexpr double kNodeLossGrace = 30.0;

/// Whether every rank that keeps this rank's call `v` waiting is on another node (none of this
/// node's is missing, and one of another node's may be): then a lost node may be the cause.
bool waits_only_on_other_nodes(const Board& b, const CommGroupInfo& g, const SlotView& v) {
  const CommOp base = CommOp(v.op >= kAsyncWait ? v.op - kAsyncWait : v.op);
  const bool p2p = base == CommOp::send || base == CommOp::recv || base == CommOp::sendrecv;
  std::vector<int> waited;
  if (p2p && v.peer >= 0 && size_t(v.peer) < g.world_ranks.size()) waited.push_back(g.world_ranks[size_t(v.peer)]);
  else if (!p2p) waited = g.world_ranks;
  const int64_t now = now_ns();
  bool remote = false;
  for (int w : waited) {
    if (w == b.world_rank || w < 0 || w >= b.world_size) continue;
    const PeerState p = peer_state(b, w, v.group, v.op, now);
    if (p.text.empty() && !p.arrived) remote = true;
    else if (!p.arrived || p2p) return false;
  }
  return remote;
}

CommGroupInfo group_of(uint64_t id) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.groups.find(id);
  return it != st.groups.end() ? it->second : CommGroupInfo{};
}

/// The one-line timeout message for this rank's call `v`.
std::string timeout_message(const Board& b, const SlotView& v, double timeout_s) {
  const CommGroupInfo g = group_of(v.group);
  return call_text(g, v) + " did not complete within " + seconds_text(timeout_s) + " on rank " +
         std::to_string(b.world_rank) + arrivals_text(b, g, v);
}

/// What this rank was waiting for when a signal ended it: "; rank 0 on dtbh1 was in all_reduce
/// on group 'world' (...) for 1.2 s; not arrived: ..." (empty when it was not inside a call).
/// The ranks that had not arrived are where to look when the launcher ended the job because a
/// rank or a host was lost.
std::string waiting_text(const Board& b) {
  const SlotView v = read_slot(*b.mine);
  if (!v.active) return "";
  const CommGroupInfo g = group_of(v.group);
  return "; rank " + std::to_string(b.world_rank) + " on " + b.hosts[size_t(b.world_rank)] + " was in " +
         call_text(g, v) + " for " + seconds_text(double(now_ns() - v.t_ns) * 1e-9) + arrivals_text(b, g, v);
}

void watch(Board* b) {
  State& st = state();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  uint32_t reported = 1;  // the version of the call last reported (odd: none)
  while (!st.stop.load()) {
    const double timeout = st.timeout_s.load();
    const double period = std::min(1.0, std::max(0.05, timeout / 10));
    timespec ts{time_t(period), long((period - std::floor(period)) * 1e9)};
    siginfo_t info;
    const int sig = sigtimedwait(&set, &info, &ts);
    if (st.stop.load()) break;  // stop_comm_watchdog's wake-up (a SIGTERM to this thread)
    if (sig == SIGINT || sig == SIGTERM) {
      b->mine->ending_signal.store(sig, std::memory_order_release);  // before looking at the others
      const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      const std::string gone = gone_peers(*b);
      const std::string cause = (gone.empty()
                                     ? " (a signal to the job, or the launcher ending it after another rank failed)"
                                     : gone + " (the launcher ends the job when a rank exits)") +
                                waiting_text(*b);
      // The line first: a launcher that lost a node may exit before the report is written, and
      // what the rank prints after that is lost.
      if (b->world_rank == 0) {
        std::fprintf(stderr, "dtbench: error: ended by %s%s; the report keeps the suites that finished\n",
                     name.c_str(), cause.c_str());
        std::fflush(stderr);
      }
      run_termination_hook("ended by " + name + " while this suite ran" + cause);
      std::_Exit(128 + sig);
    }
    const SlotView v = read_slot(*b->mine);
    if (!v.active || v.version == reported) continue;
    if (double(now_ns() - v.t_ns) * 1e-9 <= timeout) continue;
    const std::string msg = timeout_message(*b, v, timeout);
    reported = v.version;
    std::function<void(const std::string&)> handler;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      handler = st.handler;
    }
    if (handler) {
      handler(msg);
      continue;
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    std::fprintf(stderr, "dtbench: error: rank %d %s: %s\n", b->world_rank, host, msg.c_str());
    std::fflush(stderr);
    run_termination_hook(msg);
    if (waits_only_on_other_nodes(*b, group_of(v.group), v)) {
      // A call across nodes may wait on a node that is gone (its link cut): a rank that exits
      // now makes mpirun tell that node's daemon to end the job, and mpirun then waits on it for
      // TCP's retransmission timeout (minutes). Waiting instead lets the launcher find the node
      // lost first (its keepalive) and end the job; a peer node that is alive ends it sooner.
      timespec grace{time_t(kNodeLossGrace), 0};
      siginfo_t info;
      sigtimedwait(&set, &info, &grace);
    } else if (b->world_rank != 0) {
      // Rank 0 writes the report; the other ranks waiting in the same call give its watchdog
      // a few wakes to name the call there before their exit makes the launcher end it.
      std::this_thread::sleep_for(std::chrono::duration<double>(1.0 + 3 * period));
    }
    std::_Exit(3);
  }
}

#define WD_MPI(expr, call)                                                                                   \
  do {                                                                                                       \
    const int rc_ = (expr);                                                                                  \
    DTB_CHECK(rc_ == MPI_SUCCESS, std::string("communication watchdog: ") + call + " failed (code " +        \
                                      std::to_string(rc_) + ")");                                            \
  } while (0)

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
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

}  // namespace

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::none: return "none";
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::all_gather: return "all_gather";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::sendrecv: return "sendrecv";
    case CommOp::barrier: return "barrier";
    case CommOp::split: return "split";
    case CommOp::all_to_all: return "all_to_all";
    case CommOp::all_to_allv: return "all_to_allv";
  }
  return "?";
}

void block_termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void start_comm_watchdog(MPI_Comm world, double timeout_s) {
  State& st = state();
  DTB_CHECK(st.board == nullptr, "communication watchdog started twice");
  DTB_CHECK(timeout_s > 0, "communication watchdog: timeout " + std::to_string(timeout_s) + " s is not > 0");
  st.timeout_s = timeout_s;
  auto* b = new Board;
  WD_MPI(MPI_Comm_rank(world, &b->world_rank), "MPI_Comm_rank");
  WD_MPI(MPI_Comm_size(world, &b->world_size), "MPI_Comm_size");
  WD_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, b->world_rank, MPI_INFO_NULL, &b->node_comm),
         "MPI_Comm_split_type");
  int local = 0, local_size = 1, leader = b->world_rank;
  WD_MPI(MPI_Comm_rank(b->node_comm, &local), "MPI_Comm_rank");
  WD_MPI(MPI_Comm_size(b->node_comm, &local_size), "MPI_Comm_size");
  WD_MPI(MPI_Bcast(&leader, 1, MPI_INT, 0, b->node_comm), "MPI_Bcast");
  int mine[3] = {leader, local, int(getpid())};
  std::vector<int> all(size_t(3 * b->world_size));
  WD_MPI(MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, world), "MPI_Allgather");
  b->places.resize(size_t(b->world_size));
  for (int r = 0; r < b->world_size; ++r) b->places[size_t(r)] = {all[size_t(3 * r)], all[size_t(3 * r + 1)], all[size_t(3 * r + 2)]};
  char host[kNameBytes] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(size_t(kNameBytes) * size_t(b->world_size));
  WD_MPI(MPI_Allgather(host, kNameBytes, MPI_CHAR, hosts.data(), kNameBytes, MPI_CHAR, world), "MPI_Allgather");
  for (int r = 0; r < b->world_size; ++r) {
    const char* h = &hosts[size_t(kNameBytes) * size_t(r)];
    b->hosts.emplace_back(h, strnlen(h, kNameBytes - 1));
  }
  void* base = nullptr;
  WD_MPI(MPI_Win_allocate_shared(MPI_Aint(sizeof(Slot)), 1, MPI_INFO_NULL, b->node_comm, &base, &b->win),
         "MPI_Win_allocate_shared");
  b->mine = new (base) Slot;
  b->mine->pid.store(int32_t(getpid()));
  WD_MPI(MPI_Barrier(b->node_comm), "MPI_Barrier");  // every slot constructed
  b->local.resize(size_t(local_size));
  for (int i = 0; i < local_size; ++i) {
    MPI_Aint size = 0;
    int disp = 0;
    void* p = nullptr;
    WD_MPI(MPI_Win_shared_query(b->win, i, &size, &disp, &p), "MPI_Win_shared_query");
    b->local[size_t(i)] = static_cast<Slot*>(p);
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    for (const auto& [id, g] : st.groups) publish_name(*b->mine, id, g.name);
  }
  st.board = b;
  st.stop = false;
  g_slot.store(b->mine);
  // The thread is born with SIGINT and SIGTERM blocked (a thread inherits its creator's
  // mask), so stop_comm_watchdog's wake-up can never take the default action, even in a
  // program that did not call block_termination_signals() and stops it at once.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  st.thread = std::thread(watch, b);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void set_comm_timeout(double timeout_s) {
  DTB_CHECK(timeout_s > 0, "communication watchdog: timeout " + std::to_string(timeout_s) + " s is not > 0");
  state().timeout_s = timeout_s;
}

double comm_timeout() { return state().timeout_s.load(); }

void stop_comm_watchdog() {
  State& st = state();
  if (!st.board) return;
  st.stop = true;
  if (st.thread.joinable()) {
    pthread_kill(st.thread.native_handle(), SIGTERM);  // ends its sigtimedwait now (blocked: no default action)
    st.thread.join();
  }
  g_slot.store(nullptr);
  Board* b = st.board;
  st.board = nullptr;
  WD_MPI(MPI_Win_free(&b->win), "MPI_Win_free");
  WD_MPI(MPI_Comm_free(&b->node_comm), "MPI_Comm_free");
  delete b;
}

void set_timeout_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().handler = std::move(handler);
}

CommGroupInfo describe_comm_group(MPI_Comm comm, const std::string& name) {
  CommGroupInfo g;
  g.name = name;
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  WD_MPI(MPI_Comm_group(comm, &mine), "MPI_Comm_group");
  WD_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  int n = 0;
  WD_MPI(MPI_Group_size(mine, &n), "MPI_Group_size");
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[size_t(i)] = i;
  g.world_ranks.resize(size_t(n));
  WD_MPI(MPI_Group_translate_ranks(mine, n, ranks.data(), world, g.world_ranks.data()), "MPI_Group_translate_ranks");
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  uint64_t h = fnv1a(name.data(), name.size(), 1469598103934665603ull);
  h = fnv1a(g.world_ranks.data(), g.world_ranks.size() * sizeof(int), h);
  g.id = h == 0 ? 1 : h;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.groups[g.id] = g;
  if (Slot* s = g_slot.load()) publish_name(*s, g.id, name);
  return g;
}

CommOpScope::CommOpScope(uint64_t group_id, CommOp op, int peer) {
  Slot* s = g_slot.load(std::memory_order_relaxed);
  if (!s) return;
  active_ = true;
  const uint32_t v = s->version.load(std::memory_order_relaxed);
  s->version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s->op.store(int32_t(op), std::memory_order_relaxed);
  s->peer.store(peer, std::memory_order_relaxed);
  s->group.store(group_id, std::memory_order_relaxed);
  s->t_ns.store(now_ns(), std::memory_order_relaxed);
  s->active.store(1, std::memory_order_relaxed);
  s->version.store(v + 2, std::memory_order_release);
}

CommOpScope::~CommOpScope() {
  if (!active_) return;
  Slot* s = g_slot.load(std::memory_order_relaxed);
  if (!s) return;
  const uint32_t v = s->version.load(std::memory_order_relaxed);
  s->version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s->active.store(0, std::memory_order_relaxed);
  s->version.store(v + 2, std::memory_order_release);
}

}  // namespace dtb
