// The test-only injected slowdown: its spec parses and refuses as documented, and slowed()
// makes work take the factor times as long.
#include "kernels/slowdown.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/error.h"

namespace dtb {
namespace {

TEST(InjectedSlowdown, ParsesEachTargetAndTheBand) {
  EXPECT_FALSE(parse_injected_slowdown("").any());
  const InjectedSlowdown s = parse_injected_slowdown("train_step=1.1,gemm=1.2,all_reduce=1.05@65536-1048576");
  EXPECT_DOUBLE_EQ(s.train_step, 1.1);
  EXPECT_DOUBLE_EQ(s.gemm, 1.2);
  EXPECT_DOUBLE_EQ(s.all_reduce, 1.05);
  EXPECT_DOUBLE_EQ(s.all_reduce_at(65536), 1.05);
  EXPECT_DOUBLE_EQ(s.all_reduce_at(1048576), 1.05);
  EXPECT_DOUBLE_EQ(s.all_reduce_at(65535), 1.0);
  EXPECT_DOUBLE_EQ(s.all_reduce_at(1048577), 1.0);
  EXPECT_EQ(parse_injected_slowdown(s.to_string()).to_string(), s.to_string());
  EXPECT_EQ(parse_injected_slowdown("gemm=1.1").to_string(), "gemm=1.1");
  EXPECT_DOUBLE_EQ(parse_injected_slowdown("all_reduce=2").all_reduce_at(8), 2.0);  // no band: every size
}

TEST(InjectedSlowdown, RefusesBadSpecsNamingThePart) {
  for (const char* bad : {"gemm", "gemm=", "gemm=x", "gemm=0.9", "gemm=101", "gemm=1.1,gemm=1.2", "matmul=1.1",
                          "all_reduce=1.1@5", "all_reduce=1.1@9-5", "all_reduce=1.1@a-b", "gemm=1.1,,train_step=2",
                          "gemm=0x2", "gemm= 2", "gemm=2 ", "gemm=1e1", "gemm=+2", "gemm=1.1,", "gemm=.5", "gemm=2.",
                          "gemm=nan", "gemm=inf", "gemm=1e400"}) {
    try {
      parse_injected_slowdown(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("DTB_INJECT_SLOWDOWN: "), std::string::npos) << e.what();
    }
  }
}

// spin_cpu uses the CPU time asked for (the thread's own clock), however long that takes.
TEST(InjectedSlowdown, SpinCpuUsesTheCpuTimeAsked) {
  const double c0 = thread_cpu_seconds();
  spin_cpu(0.02);
  const double used = thread_cpu_seconds() - c0;
  EXPECT_GE(used, 0.02);
  EXPECT_LT(used, 0.025);  // the last clock reading past the end: microseconds over
}

// The extra work is (f - 1) x the smaller of the call's CPU time and the fastest call's time:
// a compute call's CPU time; for a call that mostly waited (CPU time near its elapsed time, far
// above the fastest), no more than the fastest call.
TEST(InjectedSlowdown, ExtraWorkIsBoundedByTheFastestCall) {
  double fastest = INFINITY;
  EXPECT_DOUBLE_EQ(extra_cpu_seconds(1.5, 1.0, 1.2, fastest), 0.5);  // compute: its CPU time
  EXPECT_DOUBLE_EQ(fastest, 1.2);
  EXPECT_DOUBLE_EQ(extra_cpu_seconds(1.5, 8.0, 9.0, fastest), 0.6);  // waited: the fastest call's
  EXPECT_DOUBLE_EQ(extra_cpu_seconds(1.5, 0.4, 0.5, fastest), 0.2);
  EXPECT_DOUBLE_EQ(fastest, 0.5);
}

// slowed(f, fastest, work) does (f - 1) x the work's CPU time more: 4 ms of CPU work slowed 1.5x
// uses 6 ms of CPU time.
TEST(InjectedSlowdown, SlowedDoesTheFactorTimesTheWork) {
  double worked = 0, fastest = INFINITY;
  const double c0 = thread_cpu_seconds();
  slowed(1.5, fastest, [&] {
    const double w0 = thread_cpu_seconds();
    while (thread_cpu_seconds() - w0 < 0.004) {
    }
    worked = thread_cpu_seconds() - w0;
  });
  const double total = thread_cpu_seconds() - c0;
  EXPECT_GE(total, 1.5 * worked);
  EXPECT_LT(total, 1.5 * worked + 0.002);
}

}  // namespace
}  // namespace dtb
