// The communication watchdog (see watchdog.h): a node-wide board of what each rank is
// doing (kernels/comm/watchdog_board.h), written with relaxed stores around every MPI call, and
// one thread per process that watches its own rank's call and takes SIGINT / SIGTERM; what it
// says about a stuck call is in kernels/comm/watchdog_text.h.
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

#include "kernels/comm/watchdog_board.h"
#include "kernels/comm/watchdog_text.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using namespace watchdog;

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

/// Seconds a rank whose timed-out call spans nodes waits for the launcher's signal before it
/// exits (see watch()): above `scripts/cluster mpirun`'s keepalive detection (about 7 s).
constexpr double kNodeLossGrace = 30.0;

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
