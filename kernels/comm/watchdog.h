// The communication watchdog: a collective or message that does not complete within the
// timeout ends the run with one line naming the group, the operation and the ranks that did
// not arrive, instead of hanging; SIGINT and SIGTERM end it after writing what finished.
//
// How it works, without slowing the calls it watches. Every rank publishes what it is
// doing — which operation, on which group, since when — in a node-wide shared-memory board
// (MPI_Win_allocate_shared over the ranks of the node): a few relaxed stores before and after
// each MPI call, no MPI call and no allocation. A watchdog thread per process (started once,
// it never calls MPI, so MPI stays at MPI_THREAD_FUNNELED, whose small-message latency
// MPI_THREAD_MULTIPLE would roughly double) wakes a few times a second; when its rank has
// been inside one call for longer than the timeout it reads the board: a rank of the group
// that sits in the same call on the same group has arrived; any other is named with what it
// is doing instead (another call on another group, computing, stopped, exited). Ranks on
// other nodes are not visible on this node's board: they are named with their host (the
// hostnames are gathered at start), "on other nodes, not visible from here: ranks 2,3 on dtbh2",
// and their own node's watchdogs say what they were doing. Then it runs the termination hook (run_termination_hook, kernels/
// error.h: the harness writes the report with the running suite marked as failed) and ends the process with exit status 3; the
// launcher (mpirun, srun) then ends the other ranks. When every rank it waits on is on another
// node (a node that may be gone, its link cut), it first waits up to 30 s for the launcher's
// signal: mpirun told of an exit would try to reach that node's daemon and wait minutes on TCP,
// while its keepalive finds the node lost and ends the job. This is PyTorch's NCCL watchdog design
// (ProcessGroupNCCL's watchdog thread, TORCH_NCCL_ASYNC_ERROR_HANDLING) applied to MPI.
//
// The same thread takes SIGINT and SIGTERM (blocked in every other thread by
// block_termination_signals(), which main() calls before MPI starts its own threads): it
// runs the termination hook and exits with 128 + the signal number. Open MPI's mpirun sends
// SIGTERM to every surviving rank when one rank dies (or it loses a node's daemon), so a killed
// rank's peers write their report this way; a rank inside a call when the signal comes adds
// that call and who had not arrived, as above (so a host whose ranks died is named).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/error.h"  // set_termination_hook, run_termination_hook: what runs before the end

namespace dtb {

/// The timeout before a config sets one (the config's comm_timeout_s default too), seconds.
inline constexpr double kDefaultCommTimeout = 300.0;

/// What a rank can be doing on the board. Names: comm_op_name().
enum class CommOp : int32_t {
  none = 0,
  all_reduce, all_gather, reduce_scatter, broadcast, send, recv, sendrecv, barrier,
  split, all_to_all, all_to_allv,
};
const char* comm_op_name(CommOp op);
/// The board's code for waiting on an async `op`'s handle ("all_reduce (async wait)").
inline CommOp async_wait(CommOp op) { return CommOp(int32_t(op) + 100); }

/// Blocks SIGINT and SIGTERM in the calling thread and so in every thread created after
/// it (MPI's own included); the watchdog thread takes them with sigtimedwait. Call first
/// thing in main(), before MPI_Init. Without a started watchdog the signals stay blocked,
/// so start_comm_watchdog() must follow for every command.
void block_termination_signals();

/// Builds the board over `world`'s nodes (collective: MPI_Comm_split_type, MPI_Allgather,
/// MPI_Win_allocate_shared) and starts the watchdog thread with `timeout_s` seconds (> 0).
/// Errors: aborts through fatal() when an MPI call fails.
void start_comm_watchdog(MPI_Comm world, double timeout_s);

/// Changes the timeout (seconds, > 0) of a started watchdog; takes effect at its next wake.
void set_comm_timeout(double timeout_s);
double comm_timeout();

/// Stops the thread and frees the board. Collective over the world (MPI_Win_free): call on
/// every rank before MPI_Finalize. A no-op when not started.
void stop_comm_watchdog();

/// For tests: instead of ending the process on a timeout, hand the message to `handler`
/// (in the watchdog thread) and keep waiting; the call is reported once. Empty: exit.
void set_timeout_handler(std::function<void(const std::string& message)> handler);

/// One MPI communicator as the board knows it: a 64-bit id from its name and world ranks
/// (equal on every member), its name and its members' world ranks.
struct CommGroupInfo {
  uint64_t id = 0;
  std::string name;
  std::vector<int> world_ranks;
};
/// The group of `comm` named `name`: world ranks through MPI_Group_translate_ranks (local),
/// registered on the board (when started) so that peers can name it.
CommGroupInfo describe_comm_group(MPI_Comm comm, const std::string& name);

/// Marks the calling rank as inside `op` on the group with id `group_id` (peer: the other rank of a send/recv, in
/// group ranks; -1 for collectives) for its lifetime. A few relaxed stores when the board is
/// up; nothing otherwise. Not nestable: the board holds one operation per rank.
class CommOpScope {
 public:
  CommOpScope(uint64_t group_id, CommOp op, int peer = -1);
  ~CommOpScope();
  CommOpScope(const CommOpScope&) = delete;
  CommOpScope& operator=(const CommOpScope&) = delete;

 private:
  bool active_ = false;
};

}  // namespace dtb
