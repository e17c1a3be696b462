// The steps of a check in `dtbench validate` (see steps.h).
#include "harness/validate/steps.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "harness/validate/faults.h"
#include "harness/validate/format.h"

namespace dtb {
namespace {

constexpr int kArrive = 11, kRelease = 12;
constexpr int kMaxNapUs = 5000;

}  // namespace

Steps::Steps(Communicator& world, double timeout_s)
    : timeout_(timeout_s), comm_(world.split(0, world.rank(), "validate steps")) {}

Steps::~Steps() {
  for (auto& h : pending_) (void)h.release();  // abandoned on a timeout: never waited for
}

std::chrono::steady_clock::time_point Steps::deadline() const {
  return std::chrono::steady_clock::now() + steady_seconds(timeout_);
}

void Steps::arrive(const std::string& check, int stuck_with) {
  int token = stuck_with + 2;  // 1: arrived; 2 + p: arrived, a transfer with rank p timed out
  if (comm_->rank() != 0) {
    comm_->send(&token, 1, DType::i32, 0, kArrive);
    const auto release = comm_->recv_async(&token, 1, DType::i32, 0, kRelease);
    const auto give_up = std::chrono::steady_clock::now() + steady_seconds(2 * timeout_ + 10);
    for (int nap = 100;; nap = std::min(2 * nap, kMaxNapUs)) {
      if (release->test()) return;
      if (std::chrono::steady_clock::now() > give_up) {
        std::fprintf(stderr, "dtbench: error: validate: rank %d: rank 0 did not release check %s within %s s\n",
                     comm_->rank(), check.c_str(), validate_detail::num_str(2 * timeout_ + 10).c_str());
        std::fflush(stderr);
        std::_Exit(3);
      }
      usleep(useconds_t(nap));
    }
  }
  gather_arrivals(check, token);
  for (int r = 1; r < comm_->size(); ++r) comm_->send(&token, 1, DType::i32, r, kRelease);
}

// Rank 0: every other rank's arrival within the timeout, then no transfer reported stuck.
void Steps::gather_arrivals(const std::string& check, int token) {
  const int size = comm_->size();
  pending_.clear();
  tokens_.assign(size_t(size > 0 ? size - 1 : 0), 0);
  for (int r = 1; r < size; ++r) pending_.push_back(comm_->recv_async(&tokens_[size_t(r - 1)], 1, DType::i32, r, kArrive));
  const auto until = deadline();
  for (int nap = 100;; nap = std::min(2 * nap, kMaxNapUs)) {
    bool all = true;
    for (auto& h : pending_) all = h->test() && all;
    if (all) break;
    if (std::chrono::steady_clock::now() > until) {
      CheckTimeout t{check, {}, timeout_, ""};
      for (size_t i = 0; i < pending_.size(); ++i)
        if (!pending_[i]->test()) t.ranks.push_back(int(i) + 1);
      throw t;  // the pending receives stay MPI's (see ~Steps)
    }
    usleep(useconds_t(nap));
  }
  pending_.clear();
  // A transfer that timed out: name its two ranks (the lower-numbered reporter first).
  for (int r = 0; r < size; ++r) {
    const int p = (r == 0 ? token : tokens_[size_t(r - 1)]) - 2;
    if (p >= 0) {
      CheckTimeout t{check, {std::min(r, p), std::max(r, p)}, timeout_, ""};
      t.pair = "a transfer between rank " + std::to_string(t.ranks[0]) + " and rank " + std::to_string(t.ranks[1]);
      throw t;
    }
  }
}

}  // namespace dtb
