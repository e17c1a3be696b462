// The test-only injected slowdown: its spec parses and refuses as documented, and slowed()
// makes work take the factor times as long.
#include "kernels/slowdown.h"

#include <chrono>
#include <cmath>
#include <gtest/gtest.h>

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
  EXPECT_DOUBLE_EQ(parse_injected_slowdown("all_reduce=2").all_reduce_at(8), 2.0);  // no band: every size
}

TEST(InjectedSlowdown, RefusesBadSpecsNamingThePart) {
  for (const char* bad : {"gemm", "gemm=", "gemm=x", "gemm=0.9", "gemm=101", "gemm=1.1,gemm=1.2", "matmul=1.1",
                          "all_reduce=1.1@5", "all_reduce=1.1@9-5", "all_reduce=1.1@a-b", "gemm=1.1,,train_step=2"}) {
    try {
      parse_injected_slowdown(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("DTB_INJECT_SLOWDOWN: "), std::string::npos) << e.what();
    }
  }
}

// The extra work follows the fastest call so far, not the last one: a call slowed by a shared
// core does not add more work.
TEST(InjectedSlowdown, ExtraWorkFollowsTheFastestCall) {
  double fastest = INFINITY;
  EXPECT_DOUBLE_EQ(extra_seconds(1.5, 2.0, fastest), 1.0);
  EXPECT_DOUBLE_EQ(extra_seconds(1.5, 1.0, fastest), 0.5);
  EXPECT_DOUBLE_EQ(extra_seconds(1.5, 3.0, fastest), 0.5);
  EXPECT_DOUBLE_EQ(fastest, 1.0);
}

// spin_for does work sized by the loop's fastest measured rate: on a core of its own it takes
// the time asked (at least that, bar timer noise: the rate is the fastest trial's) and, unless
// another process takes the core, not much more. 20 ms asked; the upper bound allows a loaded
// machine 5x.
TEST(InjectedSlowdown, SpinForTakesAboutTheTimeAsked) {
  using clock = std::chrono::steady_clock;
  spin_for(1e-3);  // the rate's measurement, once per process
  const auto t0 = clock::now();
  spin_for(0.02);
  const double took = std::chrono::duration<double>(clock::now() - t0).count();
  EXPECT_GE(took, 0.02 * 0.9);
  EXPECT_LT(took, 0.1);
}

// slowed(f, fastest, work) adds (f - 1) x the work's time: 2 ms of work slowed 1.5x takes about 3 ms.
TEST(InjectedSlowdown, SlowedTakesTheFactorTimesTheWork) {
  using clock = std::chrono::steady_clock;
  double worked = 0, fastest = INFINITY;
  const auto t0 = clock::now();
  slowed(1.5, fastest, [&] {
    const auto w0 = clock::now();
    while (clock::now() - w0 < std::chrono::milliseconds(2)) {
    }
    worked = std::chrono::duration<double>(clock::now() - w0).count();
  });
  const double total = std::chrono::duration<double>(clock::now() - t0).count();
  EXPECT_GE(total, 1.45 * worked);
  EXPECT_LT(total, 3.0 * worked + 0.05);
}

}  // namespace
}  // namespace dtb
