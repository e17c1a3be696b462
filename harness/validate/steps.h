// The steps of a check in `dtbench validate`: the ranks' barrier between a check's turns and
// rounds, with the check's timeout, and the CheckTimeout that names the ranks (or the pair of
// a transfer) that did not arrive. Not the communication watchdog (kernels/comm/watchdog.h),
// which ends a collective call that never returns; these waits are polled and never block.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"

namespace dtb {

/// A check that did not finish in time: rank 0 names the ranks that never arrived, or the two
/// ranks of a transfer that did not complete (`pair`: "a transfer between rank 1 and rank 3").
struct CheckTimeout {
  std::string check;
  std::vector<int> ranks;
  double seconds = 0;
  std::string pair;
};

/// The ranks' barrier between the steps of a check (a turn, a round of pairs), with the
/// check's timeout. Each rank sends its arrival to rank 0 and sleeps in naps growing from 0.1
/// to 5 ms until rank 0 releases it (MPI's own barrier spins, and on a host whose ranks take
/// turns the spinning ranks would take the cores from the one being measured: rank 0's GEMM
/// measured 31% low so; with 1 ms naps throughout, the waking ranks still made a measured rank
/// late at the all-reduce). Rank 0 waits for every arrival at most `timeout_s` seconds from its
/// own; then it throws CheckTimeout naming the ranks still missing. An arrival may report a
/// partner whose transfer timed out (`stuck_with`); rank 0 then throws CheckTimeout naming the
/// pair. A rank that rank 0 does not release within 2 x timeout + 10 s (rank 0 itself hung)
/// ends with exit status 3 and one line. On a private split of the world (point-to-point
/// send_async/recv_async polled with test(), so no call stays on the watchdog's board while it
/// waits); the receives rank 0 leaves pending on a timeout are abandoned, not waited for (the
/// job ends right after).
class Steps {
 public:
  /// Collective over `world` (its split).
  Steps(Communicator& world, double timeout_s);
  Steps(const Steps&) = delete;
  Steps& operator=(const Steps&) = delete;
  ~Steps();
  double timeout() const { return timeout_; }
  /// Now plus the check's timeout: the deadline of a transfer started now.
  std::chrono::steady_clock::time_point deadline() const;
  /// The barrier of one step of `check`. Throws CheckTimeout on rank 0 (see the class).
  void arrive(const std::string& check, int stuck_with = -1);

 private:
  void gather_arrivals(const std::string& check, int token);
  double timeout_;
  std::unique_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<CommHandle>> pending_;  // rank 0: the arrivals it waits for
  std::vector<int> tokens_;
};

}  // namespace dtb
