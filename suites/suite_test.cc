// The suite registry and the record/check shapes every suite uses.
#include <gtest/gtest.h>

#include <cmath>

#include "suites/memory_guard.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {

TEST(SuiteRegistry, HoldsEverySuite) {
  // A suite file that the linker dropped (not in the OBJECT library) would be missing here.
  for (const char* name : {"collectives", "ffn_tp", "gemm", "pipeline", "train"}) {
    ASSERT_TRUE(suite_registry().contains(name)) << name;
    auto s = suite_registry().at(name)();
    EXPECT_EQ(s->name(), name);
    EXPECT_TRUE(s->defaults().is_object());
  }
}

TEST(BenchmarkRecord, GoogleBenchmarkShape) {
  const auto r = benchmark_record("collectives/all_reduce/bytes:8", 20, 5, 1.5e-6, 1.5e-6, "us");
  for (const char* k : {"name", "run_name", "run_type", "repetitions", "iterations", "real_time",
                        "cpu_time", "time_unit"})
    EXPECT_TRUE(r.contains(k)) << k;
  EXPECT_DOUBLE_EQ(r["real_time"].get<double>(), 1.5);
  EXPECT_EQ(r["time_unit"], "us");
  EXPECT_DOUBLE_EQ(benchmark_record("x", 1, 1, 0.25, 0.25, "ms")["real_time"].get<double>(), 250.0);
}

TEST(Check, PassesAtToleranceFailsAboveAndOnNaN) {
  EXPECT_TRUE(make_check("a", 1.0, 1.0).passed);
  EXPECT_FALSE(make_check("a", 1.0 + 1e-12, 1.0).passed);
  EXPECT_FALSE(make_check("a", NAN, 1.0).passed);
  EXPECT_DOUBLE_EQ(make_check("a", 0.5, 2.0).fraction(), 0.25);
  EXPECT_TRUE(make_check("exact", 0.0, 0.0).passed);
}

TEST(Stats, Summary) {
  const Summary s = summarize({4, 1, 3, 2});
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.stddev, std::sqrt(5.0 / 3.0), 1e-15);
  EXPECT_DOUBLE_EQ(summarize({7, 1, 3}).median, 3);
}

TEST(MemoryGuard, UnshardedStateIsTheModelsSixteenBytesPerParamPlusTheMargin) {
  // ZeRO's model states on one rank (Rajbhandari et al. 2020, Sec. 3.1: 2 + 2 + K = 16 B/param
  // mixed, 4 + 4 + 8 fp32), and the 4 B/param margin the GPT suites' guards add.
  GptConfig m;
  m.L = 2, m.C = 64, m.NH = 4, m.T = 32, m.V = 256;
  const double P = double(gpt_num_params(m));
  EXPECT_EQ(unsharded_training_state_bytes(m, 0.0), 16.0 * P);
  EXPECT_EQ(unsharded_training_state_bytes(m), 20.0 * P);
  TrainConfig t;
  t.global_batch = 4, t.seq_len = 16;
  // Per token and layer: 20 C floats and NH seq_len scores, 4 B each.
  EXPECT_EQ(fp32_step_activation_bytes(m, t), 4.0 * 4 * 16 * 2 * (20.0 * 64 + 4 * 16));
}

}  // namespace dtb
