// Tests of the communication watchdog (watchdog.h), in the multi-rank binary at 2 and 4
// ranks. The watchdog runs with a short timeout and a handler that records its message
// instead of ending the process; one rank then comes late to a call (it sleeps, like a
// rank that computes too long) and the others' messages must name the group, the call and
// exactly that rank, as not arrived, and the ranks that did arrive. The end-to-end paths
// (a stopped rank ends the job with exit status 3; a killed rank, SIGTERM and SIGINT write
// the report) are in harness/fault_test.sh.
#include "kernels/comm/watchdog.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/comm/mpi_communicator.h"

namespace dtb {
namespace {

constexpr double kTimeout = 1.0;  // seconds; the late rank sleeps 3x as long
constexpr auto kLate = std::chrono::milliseconds(3000);

/// Starts the watchdog with kTimeout and a recording handler; stops it (collective) at the end.
class Watchdog : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = make_mpi_world();
    start_comm_watchdog(MPI_COMM_WORLD, kTimeout);
    set_timeout_handler([this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(m);
    });
  }
  void TearDown() override {
    set_timeout_handler({});
    world_->barrier();
    stop_comm_watchdog();
  }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  std::unique_ptr<Communicator> world_;
  std::mutex mu_;
  std::vector<std::string> messages_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(Watchdog, NamesTheRankThatDidNotArriveAtACollective) {
  Communicator& c = *world_;
  const int late = c.size() - 1;
  if (c.rank() == late) std::this_thread::sleep_for(kLate);
  float x = 1, y = 0;
  c.all_reduce(&x, &y, 1, DType::f32, ReduceOp::sum);
  EXPECT_EQ(y, float(c.size()));
  const auto m = messages();
  if (c.rank() == late) {
    EXPECT_TRUE(m.empty()) << m.front();  // it was never waiting
    return;
  }
  ASSERT_EQ(m.size(), 1u);  // reported once, though the call outlived several wakes
  std::string arrived;
  for (int r = 0; r < c.size(); ++r)
    if (r != late) arrived += (arrived.empty() ? "" : ",") + std::to_string(r);
  EXPECT_TRUE(contains(m[0], "all_reduce on group 'world' (world ranks ")) << m[0];
  EXPECT_TRUE(contains(m[0], "did not complete within 1.0 s on rank " + std::to_string(c.rank()))) << m[0];
  EXPECT_TRUE(contains(m[0], "not arrived: rank " + std::to_string(late) + " (pid ")) << m[0];
  EXPECT_TRUE(contains(m[0], "computing or hung")) << m[0];
  EXPECT_TRUE(contains(m[0], "; arrived: " + arrived)) << m[0];
}

TEST_F(Watchdog, NamesThePeerOfAReceiveAndWhereItWaits) {
  // Rank 1 waits in a barrier of a group without rank 0 while rank 0 waits to receive from
  // it: rank 0's message names rank 1 and the other group's call.
  Communicator& c = *world_;
  auto others = c.split(c.rank() == 0 ? 0 : 1, c.rank(), c.rank() == 0 ? "alone" : "others");
  float v = 7;
  if (c.rank() == 1) {
    if (c.size() > 2) {
      others->barrier();  // the other ranks of "others" arrive late
    } else {
      std::this_thread::sleep_for(kLate);
    }
    c.send(&v, 1, DType::f32, 0, 5);
  } else if (c.rank() == 0) {
    float got = 0;
    c.recv(&got, 1, DType::f32, 1, 5);
    EXPECT_EQ(got, v);
  } else {
    std::this_thread::sleep_for(kLate);
    others->barrier();
  }
  const auto m = messages();
  if (c.rank() != 0) return;
  ASSERT_EQ(m.size(), 1u);
  EXPECT_TRUE(contains(m[0], "recv on group 'world' (world ranks ")) << m[0];
  EXPECT_TRUE(contains(m[0], " from rank 1 did not complete within 1.0 s")) << m[0];
  if (c.size() > 2)
    EXPECT_TRUE(contains(m[0], "peer: rank 1 (pid ") && contains(m[0], ": in barrier on group 'others' for ")) << m[0];
  else
    EXPECT_TRUE(contains(m[0], "peer: rank 1 (pid ") && contains(m[0], "computing or hung")) << m[0];
}

TEST_F(Watchdog, QuietWhenEveryCallCompletesInTime) {
  Communicator& c = *world_;
  std::vector<float> x(1 << 16, 1.0f), y(1 << 16);
  for (int i = 0; i < 50; ++i) c.all_reduce(x.data(), y.data(), x.size(), DType::f32, ReduceOp::sum);
  auto h = c.all_gather_async(x.data(), y.data(), 4, DType::f32);
  h->wait();
  EXPECT_TRUE(messages().empty());
}

}  // namespace
}  // namespace dtb
