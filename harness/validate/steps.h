// The steps of a check in `dtbench validate`: the ranks' barrier between a check's turns and
// rounds, with the check's timeout, and the CheckTimeout that names the ranks (or the pair of
// a transfer) that did not arrive. Not the communication watchdog (kernels/comm/watchdog.h),
// which ends a collective call that never returns; these waits are polled and never block.
#pragma once
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/validate/format.h"
#include "kernels/error.h"

namespace dtb {

// A check that did not finish in time: rank 0 names the ranks that never arrived, or the two
// ranks of a transfer that did not complete (`pair`: "transfer between rank 1 and rank 3").
struct CheckTimeout {
  std::string check;
  std::vector<int> ranks;
  double seconds = 0;
  std::string pair;
};

// The ranks' barrier between the steps of a check (a turn, a round of pairs), with the check's
// timeout. Each rank sends its arrival to rank 0 and sleeps in naps growing from 0.1 to 5 ms until
// rank 0 releases it (MPI's own barrier spins, and on a host whose ranks take turns the spinning
// ranks would take the cores from the one being measured: rank 0's GEMM measured 31% low so; with
// 1 ms naps throughout, the waking ranks still made a measured rank late at the all-reduce). Rank 0 waits for
// every arrival at most `timeout_s` seconds from its own; then it throws CheckTimeout naming the
// ranks still missing. An arrival may report a partner whose transfer timed out (`stuck_with`);
// rank 0 then throws CheckTimeout naming the pair. A rank that rank 0 does not release within
// 2 x timeout + 10 s (rank 0 itself hung) ends with exit status 3 and one line. On a private
// duplicate of MPI_COMM_WORLD; the receives rank 0 leaves pending on a timeout stay valid (they
// are members, and the job ends right after).
class Steps {
 public:
  explicit Steps(double timeout_s) : timeout_(timeout_s) {
    DTB_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_) == MPI_SUCCESS, "MPI_Comm_dup failed");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  Steps(const Steps&) = delete;
  Steps& operator=(const Steps&) = delete;
  ~Steps() { MPI_Comm_free(&comm_); }
  double timeout() const { return timeout_; }
  std::chrono::steady_clock::time_point deadline() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_));
  }

  void arrive(const std::string& check, int stuck_with = -1) {
    int token = stuck_with + 2;  // 1: arrived; 2 + p: arrived, a transfer with rank p timed out
    if (rank_ != 0) {
      DTB_CHECK(MPI_Send(&token, 1, MPI_INT, 0, kArrive, comm_) == MPI_SUCCESS, "MPI_Send failed");
      MPI_Request req;
      DTB_CHECK(MPI_Irecv(&token, 1, MPI_INT, 0, kRelease, comm_, &req) == MPI_SUCCESS, "MPI_Irecv failed");
      const auto give_up = std::chrono::steady_clock::now() +
                           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(2 * timeout_ + 10));
      for (int done = 0, nap = 100;; nap = std::min(2 * nap, kMaxNapUs)) {
        DTB_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Test failed");
        if (done) return;
        if (std::chrono::steady_clock::now() > give_up) {
          std::fprintf(stderr, "dtbench: error: validate: rank %d: rank 0 did not release check %s within %s s\n", rank_,
                       check.c_str(), validate_detail::num_str(2 * timeout_ + 10).c_str());
          std::fflush(stderr);
          std::_Exit(3);
        }
        usleep(useconds_t(nap));
      }
    }
    req_.assign(size_t(size_ > 0 ? size_ - 1 : 0), MPI_REQUEST_NULL);
    tokens_.assign(req_.size(), 0);
    for (int r = 1; r < size_; ++r)
      DTB_CHECK(MPI_Irecv(&tokens_[size_t(r - 1)], 1, MPI_INT, r, kArrive, comm_, &req_[size_t(r - 1)]) == MPI_SUCCESS,
                "MPI_Irecv failed");
    const auto until = deadline();
    for (int all = 0, nap = 100;; nap = std::min(2 * nap, kMaxNapUs)) {
      DTB_CHECK(MPI_Testall(int(req_.size()), req_.data(), &all, MPI_STATUSES_IGNORE) == MPI_SUCCESS,
                "MPI_Testall failed");
      if (all) break;
      if (std::chrono::steady_clock::now() > until) {
        CheckTimeout t{check, {}, timeout_, ""};
        for (size_t i = 0; i < req_.size(); ++i) {
          int done = 0;
          MPI_Test(&req_[i], &done, MPI_STATUS_IGNORE);
          if (!done) t.ranks.push_back(int(i) + 1);
        }
        throw t;
      }
      usleep(useconds_t(nap));
    }
    // A transfer that timed out: name its two ranks (the lower-numbered reporter first).
    for (int r = 0; r < size_; ++r) {
      const int p = (r == 0 ? token : tokens_[size_t(r - 1)]) - 2;
      if (p >= 0) {
        CheckTimeout t{check, {std::min(r, p), std::max(r, p)}, timeout_, ""};
        t.pair = "a transfer between rank " + std::to_string(t.ranks[0]) + " and rank " + std::to_string(t.ranks[1]);
        throw t;
      }
    }
    for (int r = 1; r < size_; ++r)
      DTB_CHECK(MPI_Send(&token, 1, MPI_INT, r, kRelease, comm_) == MPI_SUCCESS, "MPI_Send failed");
  }

 private:
  static constexpr int kArrive = 11, kRelease = 12;
  static constexpr int kMaxNapUs = 5000;
  double timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> req_;
  std::vector<int> tokens_;
};

}  // namespace dtb
