// Tests of suites/bandwidth: nccl-tests' algbw/busbw definitions on worked numbers, and the
// timing engine on a known-duration operation. Single process, no MPI: the engine runs on
// LocalCommunicator, a one-rank Communicator whose collectives are copies.
#include "suites/bandwidth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/error.h"

namespace dtb {
namespace {

/// A world of one rank. Collectives copy send to recv; `max_floor` lets a test pretend a
/// slower rank exists: an all_reduce(max) of f64 raises every element to at least it.
class LocalCommunicator final : public Communicator {
 public:
  int barriers = 0, all_reduces = 0;
  double max_floor = 0;
  std::string* log = nullptr;  // when set, barrier() appends "B"

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "local"; }
  std::string backend() const override { return "local"; }
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    ++all_reduces;
    std::memmove(recv, send, count * dtype_size(dtype));
    if (dtype == DType::f64 && op == ReduceOp::max) {
      auto* x = static_cast<double*>(recv);
      for (size_t i = 0; i < count; ++i) x[i] = std::max(x[i], max_floor);
    }
  }
  void all_gather(const void* send, void* recv, size_t n, DType dtype) override {
    std::memmove(recv, send, n * dtype_size(dtype));
  }
  void reduce_scatter(const void* send, void* recv, size_t n, DType dtype, ReduceOp) override {
    std::memmove(recv, send, n * dtype_size(dtype));
  }
  void broadcast(void*, size_t, DType, int) override {}
  void broadcast(const void*, void*, size_t, DType, int) override {}
  void send(const void*, size_t, DType, int, int) override { FAIL() << "no peer"; }
  void recv(void*, size_t, DType, int, int) override { FAIL() << "no peer"; }
  void sendrecv(const void* send, void* recv, size_t n, DType dtype, int, int, int) override {
    std::memmove(recv, send, n * dtype_size(dtype));
  }
  void all_to_allv(const void* send, const std::vector<size_t>& sc, const std::vector<size_t>& sd, void* recv,
                   const std::vector<size_t>&, const std::vector<size_t>& rd, DType dtype) override {
    const size_t ts = dtype_size(dtype);
    std::memmove(static_cast<char*>(recv) + rd[0] * ts, static_cast<const char*>(send) + sd[0] * ts, sc[0] * ts);
  }
  void barrier() override {
    ++barriers;
    if (log) *log += "B";
  }
  std::unique_ptr<CommHandle> all_reduce_async(const void* s, void* r, size_t n, DType t,
                                               ReduceOp op) override {
    all_reduce(s, r, n, t, op);
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> all_gather_async(const void* s, void* r, size_t n,
                                               DType t) override {
    all_gather(s, r, n, t);
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> reduce_scatter_async(const void* s, void* r, size_t n, DType t,
                                                   ReduceOp op) override {
    reduce_scatter(s, r, n, t, op);
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> broadcast_async(void*, size_t, DType, int) override {
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> send_async(const void*, size_t, DType, int, int) override {
    ADD_FAILURE() << "no peer";
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommHandle> recv_async(void*, size_t, DType, int, int) override {
    ADD_FAILURE() << "no peer";
    return std::make_unique<Done>();
  }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    return std::make_unique<LocalCommunicator>();
  }

 private:
  struct Done final : CommHandle {
    void wait() override {}
    bool test() override { return true; }
  };
};

constexpr double kEps = 1e-9;

// nccl-tests all_gather: S is the gathered buffer. 1 GiB over 4 ranks in 10 ms.
TEST(Bandwidth, AllGatherFourRanksOneGiB) {
  const size_t per_rank = (size_t(1) << 30) / 4 / 4;  // fp32 elements sent by each rank
  const size_t s = bandwidth_bytes(CollectiveOp::all_gather, per_rank, 4, 4);
  EXPECT_EQ(s, 1073741824u);
  EXPECT_NEAR(algbw_GBps(s, 0.010), 107.3741824, kEps);
  EXPECT_NEAR(busbw_GBps(CollectiveOp::all_gather, s, 0.010, 4), 80.5306368, kEps);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_gather, 4), 0.75);
}

// nccl-tests reduce_scatter: S is the full input, recv count * type size * n.
TEST(Bandwidth, ReduceScatterEightRanks) {
  const size_t s = bandwidth_bytes(CollectiveOp::reduce_scatter, 1048576, 4, 8);
  EXPECT_EQ(s, 33554432u);
  EXPECT_NEAR(algbw_GBps(s, 0.001), 33.554432, kEps);
  EXPECT_NEAR(busbw_GBps(CollectiveOp::reduce_scatter, s, 0.001, 8), 29.360128, kEps);
}

// nccl-tests' alltoall.cu: S is each rank's whole send buffer (block * n), busbw = algbw (n-1)/n.
TEST(Bandwidth, AllToAllFourRanks) {
  const size_t s = bandwidth_bytes(CollectiveOp::all_to_all, 1048576, 4, 4);  // 1 Mi floats per peer
  EXPECT_EQ(s, 16777216u);
  EXPECT_NEAR(busbw_GBps(CollectiveOp::all_to_all, s, 0.001, 4), 16.777216 * 0.75, kEps);
}

// The uneven split: rank r sends (r + j) mod n units to rank j. At 4 ranks the rows are
// {0,1,2,3}, {1,2,3,0}, {2,3,0,1}, {3,0,1,2}: every rank sends and receives 6 units, and the
// diagonal (0, 2, 0, 2) keeps 4 of the 24 at home, so busbw/algbw = 20/24.
TEST(Bandwidth, AllToAllvSplit) {
  EXPECT_EQ(alltoallv_row_sum(4), 6u);
  EXPECT_EQ(alltoallv_row_sum(1), 1u);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_to_allv, 4), 20.0 / 24.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_to_allv, 2), 1.0);       // {0,1}, {1,0}
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_to_allv, 3), 2.0 / 3.0);  // diagonal 0, 2, 1 of 9
  EXPECT_EQ(bandwidth_bytes(CollectiveOp::all_to_allv, 10, 4, 4), 240u);
  const AlltoallvSplit s1 = alltoallv_split(4, 1, 10);
  EXPECT_EQ(s1.send_counts, (std::vector<size_t>{10, 20, 30, 0}));
  EXPECT_EQ(s1.send_displs, (std::vector<size_t>{0, 10, 30, 60}));
  EXPECT_EQ(s1.recv_counts, (std::vector<size_t>{10, 20, 30, 0}));  // column 1: w(i, 1) = (i + 1) mod 4
  const AlltoallvSplit s3 = alltoallv_split(4, 3, 10);
  EXPECT_EQ(s3.send_counts, (std::vector<size_t>{30, 0, 10, 20}));
  EXPECT_EQ(s3.recv_displs, (std::vector<size_t>{0, 30, 30, 40}));
  // What rank 1 sends to rank 3 is what rank 3 expects from rank 1.
  EXPECT_EQ(s1.send_counts[3], s3.recv_counts[1]);
  EXPECT_EQ(alltoallv_split(1, 0, 7).send_counts, (std::vector<size_t>{7}));
}

TEST(Bandwidth, OneRankHasZeroBusbw) {
  for (CollectiveOp op : all_collective_ops()) {
    EXPECT_EQ(bus_factor(op, 1), 0.0) << to_string(op);
    EXPECT_EQ(busbw_GBps(op, 1 << 20, 1e-3, 1), 0.0) << to_string(op);
  }
}

TEST(Bandwidth, BusFactors) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::reduce_scatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::sendrecv, 2), 1.0);
}

TEST(Bandwidth, BufferSizedOpsUseTheBuffer) {
  for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::broadcast,
                          CollectiveOp::sendrecv}) {
    EXPECT_EQ(bandwidth_bytes(op, 1000, 8, 4), 8000u) << to_string(op);
  }
  EXPECT_EQ(bandwidth_bytes(CollectiveOp::all_gather, 1000, 8, 4), 32000u);
}

TEST(Bandwidth, ParseRoundTripsAndRejectsUnknown) {
  for (CollectiveOp op : all_collective_ops()) {
    EXPECT_EQ(parse_collective_op(to_string(op)), op);
    EXPECT_FALSE(size_definition(op).empty());
  }
  EXPECT_THROW(parse_collective_op("allreduce"), InputError);
  EXPECT_THROW(parse_collective_op(""), InputError);
}

TEST(Bandwidth, IterationsForSize) {
  EXPECT_EQ(iterations_for_size(20, 8, 256u << 20), 20);
  EXPECT_EQ(iterations_for_size(20, 64u << 20, 256u << 20), 4);
  EXPECT_EQ(iterations_for_size(20, 1u << 30, 256u << 20), 1);  // never 0
  EXPECT_EQ(iterations_for_size(20, 13u << 20, 256u << 20), 19);
}

// The engine on an operation of known duration: a busy-wait of 2 ms on steady_clock. On a
// loaded machine a spin can overrun (descheduled past its end), so each spin also records
// how long it really took; every batch's per-iteration time must match that within 5%.
TEST(TimeIterations, MeasuresAKnownDuration) {
  LocalCommunicator comm;
  std::vector<double> spins;  // seconds, every call in order
  const auto spin = [&] {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    auto t = t0;
    while (t - t0 < std::chrono::milliseconds(2)) t = clock::now();
    spins.push_back(std::chrono::duration<double>(t - t0).count());
  };
  const int warmup = 1, iters = 5, reps = 5;
  const TimedResult r = time_iterations(comm, warmup, iters, reps, spin);
  ASSERT_EQ(r.per_iter_s.size(), size_t(reps));
  ASSERT_EQ(spins.size(), size_t(warmup + iters * reps));
  EXPECT_EQ(r.summary.n, reps);
  double worst = 0;
  for (int b = 0; b < reps; ++b) {
    double known = 0;
    for (int i = 0; i < iters; ++i) known += spins[warmup + b * iters + i];
    known /= iters;
    worst = std::max(worst, std::fabs(r.per_iter_s[b] - known) / known);
    EXPECT_NEAR(r.per_iter_s[b], known, 0.05 * known) << "batch " << b;
    EXPECT_GE(r.per_iter_s[b], 2e-3 * (1 - 1e-9)) << "a spin cannot end early";
  }
  std::printf("timed spin of 2 ms: median %.4f ms, worst batch off by %.2f%% (tol 5%%)\n",
              r.summary.median * 1e3, worst * 100);
}

TEST(TimeIterations, CallCountsAndOneReductionOutsideTheBatches) {
  LocalCommunicator comm;
  int calls = 0, barriers_when_called = -1;
  const auto op = [&] {
    ++calls;
    barriers_when_called = comm.barriers;
    EXPECT_EQ(comm.all_reduces, 0) << "reduction inside the timed batches";
  };
  const TimedResult r = time_iterations(comm, 3, 7, 4, op);
  EXPECT_EQ(calls, 3 + 7 * 4);
  EXPECT_EQ(comm.barriers, 4);           // one per batch
  EXPECT_EQ(barriers_when_called, 4);    // the last batch ran after its barrier
  EXPECT_EQ(comm.all_reduces, 1);
  EXPECT_EQ(r.per_iter_s.size(), 4u);
}

// Each batch's time is the max over ranks: a pretend rank that took 0.5 s per iteration wins.
TEST(TimeIterations, ReportsTheSlowestRank) {
  LocalCommunicator comm;
  comm.max_floor = 0.5;
  const TimedResult r = time_iterations(comm, 0, 2, 3, [] {});
  for (double t : r.per_iter_s) EXPECT_EQ(t, 0.5);
  EXPECT_EQ(r.summary.median, 0.5);
  EXPECT_EQ(r.summary.max, 0.5);
}

/// A device operation in flight, for the async engine: wait() appends "W" to the log (and
/// spins `wait_s`, the device work it stands for), the destructor appends "D".
class LoggedHandle final : public CommHandle {
 public:
  LoggedHandle(std::string& log, double wait_s) : log_(log), wait_s_(wait_s) {}
  ~LoggedHandle() override { log_ += "D"; }
  void wait() override {
    EXPECT_FALSE(waited_) << "a handle waited twice";
    waited_ = true;
    log_ += "W";
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < wait_s_) {
    }
  }
  bool test() override { return waited_; }

 private:
  std::string& log_;
  double wait_s_;
  bool waited_ = false;
};

// nccl-tests' loop: every launch of a batch before any wait ("LLLWWW", not "LWLWLW"), one
// device synchronize ("S") after the waits and one before the barrier, handles freed ("D")
// after the batch's end, warmup launched back to back too, and one reduction at the end.
TEST(TimeAsyncIterations, LaunchesBackToBackThenCompletesOnce) {
  std::string log;
  LocalCommunicator comm;
  comm.log = &log;
  int launches = 0;
  const auto launch = [&]() -> std::unique_ptr<CommHandle> {
    ++launches;
    log += "L";
    EXPECT_EQ(comm.all_reduces, 0) << "reduction inside the timed batches";
    return std::make_unique<LoggedHandle>(log, 0.0);
  };
  const TimedResult r = time_async_iterations(comm, [&] { log += "S"; }, 2, 3, 2, launch);
  EXPECT_EQ(launches, 2 + 3 * 2);
  EXPECT_EQ(log, "LLWWSDD"
                 "SBLLLWWWSDDD"
                 "SBLLLWWWSDDD");
  EXPECT_EQ(comm.barriers, 2);
  EXPECT_EQ(comm.all_reduces, 1);
  EXPECT_EQ(r.per_iter_s.size(), 2u);
}

// The time covers completion, not just the launches: launches are instant and each wait
// stands for 1 ms of device work, so a batch of 4 takes at least 4 ms, 1 ms per iteration.
// A timer stopped before the waits would read microseconds. (A lower bound only: a loaded
// machine can only make the spins longer.)
TEST(TimeAsyncIterations, TimesUntilEveryOperationCompleted) {
  std::string log;
  LocalCommunicator comm;
  const auto launch = [&]() -> std::unique_ptr<CommHandle> {
    return std::make_unique<LoggedHandle>(log, 1e-3);
  };
  const TimedResult r = time_async_iterations(comm, [] {}, 0, 4, 3, launch);
  for (double t : r.per_iter_s) EXPECT_GE(t, 1e-3);
}

TEST(TimeAsyncIterations, NoWarmupMeansNoWarmupBatch) {
  std::string log;
  LocalCommunicator comm;
  comm.log = &log;
  const auto launch = [&]() -> std::unique_ptr<CommHandle> {
    log += "L";
    return std::make_unique<LoggedHandle>(log, 0.0);
  };
  time_async_iterations(comm, [&] { log += "S"; }, 0, 1, 1, launch);
  EXPECT_EQ(log, "SBLWSD");
}

}  // namespace
}  // namespace dtb
