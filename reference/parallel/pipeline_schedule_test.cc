// Pipeline schedules and their simulation: the closed-form bubbles (Huang et al. 2019;
// Narayanan et al. 2021; Qi et al. 2024's ZB-H1), every (micro-batch, chunk) once per stage with
// forward before backward, the in-flight activation counts, and the refused arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/error.h"
#include "reference/parallel/pipeline_schedule.h"

namespace dtb {
namespace {

TEST(PipelineSimulation, BubbleOfTheIssueExample) {
  // t_f 1, t_b 2, p 4, m 8: idle (p-1)(t_f+t_b) = 9 of a makespan (m+p-1)(t_f+t_b) = 33.
  for (const char* s : {"gpipe", "1f1b"}) {
    const PipelineSimulation r = simulate_pipeline(s, 4, 8, 1, 1.0, 2.0);
    EXPECT_NEAR(r.bubble, 3.0 / 11.0, 1e-12) << s;
    EXPECT_NEAR(r.makespan, 33.0, 1e-12) << s;
    for (int st = 0; st < 4; ++st) EXPECT_NEAR(r.busy[size_t(st)], 24.0, 1e-12) << s;
  }
  const PipelineSimulation r = simulate_pipeline("interleaved", 4, 8, 2, 1.0, 2.0);
  EXPECT_NEAR(r.bubble, 3.0 / 19.0, 1e-12);
  EXPECT_NEAR(r.makespan, 19 * 1.5, 1e-12);
}

TEST(PipelineSimulation, MatchesTheoryForBalancedStages) {
  for (int p : {2, 4})
    for (int m : {4, 8, 16})
      for (auto [s, v] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2},
                          std::pair{"interleaved", 4}}) {
        const PipelineSimulation r = simulate_pipeline(s, p, m, v, 1.0, 2.0);
        const double want = double(p - 1) / ((std::string(s) == "interleaved" ? v * m : m) + p - 1);
        EXPECT_NEAR(r.bubble, want, 1e-12) << s << " p " << p << " m " << m << " v " << v;
        EXPECT_NEAR(pipeline_bubble_theory(s, p, m, v), want, 1e-15);
      }
}

TEST(PipelineSchedule, EveryStageRunsEachMicroBatchChunkOnceForwardFirst) {
  for (int p : {1, 2, 3, 4})
    for (int m : {1, 2, 4, 5, 8, 12})
      for (auto [s, v] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2},
                          std::pair{"interleaved", 3}}) {
        if (std::string(s) == "interleaved" && m % p != 0) continue;
        for (int st = 0; st < p; ++st) {
          const auto list = pipeline_schedule(s, p, m, v, st);
          ASSERT_EQ(list.size(), size_t(2 * m * v));
          std::map<std::pair<int, int>, int> seen;  // (mb, chunk) -> 1 after F, 2 after B
          for (const PipeAction& a : list) {
            ASSERT_GE(a.micro_batch, 0);
            ASSERT_LT(a.micro_batch, m);
            ASSERT_GE(a.chunk, 0);
            ASSERT_LT(a.chunk, v);
            int& state = seen[{a.micro_batch, a.chunk}];
            if (a.op == PipeOp::forward) {
              EXPECT_EQ(state, 0) << s << " duplicate forward";
              state = 1;
            } else {
              EXPECT_EQ(state, 1) << s << " backward without forward, or twice";
              state = 2;
            }
          }
          EXPECT_EQ(seen.size(), size_t(m * v));
        }
        EXPECT_NO_THROW(simulate_pipeline(s, p, m, v, 1.0, 1.0)) << s << " deadlocks";
      }
}

TEST(PipelineSchedule, OneFOneBWarmUpMatchesMegatron) {
  // p 4, m 8, stage 1: two warm-up forwards, then F2 B0 F3 B1 ..., then B6 B7.
  const auto l = pipeline_schedule("1f1b", 4, 8, 1, 1);
  EXPECT_EQ(l[0], (PipeAction{PipeOp::forward, 0, 0}));
  EXPECT_EQ(l[1], (PipeAction{PipeOp::forward, 1, 0}));
  EXPECT_EQ(l[2], (PipeAction{PipeOp::forward, 2, 0}));
  EXPECT_EQ(l[3], (PipeAction{PipeOp::backward, 0, 0}));
  EXPECT_EQ(l.back(), (PipeAction{PipeOp::backward, 7, 0}));
  // Interleaved p 2, v 2, stage 0: warm-up 2 + 2 = 4: (0,c0) (1,c0) (0,c1) (1,c1).
  const auto i = pipeline_schedule("interleaved", 2, 4, 2, 0);
  EXPECT_EQ(i[0], (PipeAction{PipeOp::forward, 0, 0}));
  EXPECT_EQ(i[1], (PipeAction{PipeOp::forward, 1, 0}));
  EXPECT_EQ(i[2], (PipeAction{PipeOp::forward, 0, 1}));
  EXPECT_EQ(i[3], (PipeAction{PipeOp::forward, 1, 1}));
  EXPECT_EQ(i[4], (PipeAction{PipeOp::forward, 2, 0}));
  EXPECT_EQ(i[5], (PipeAction{PipeOp::backward, 0, 1}));  // the first backward: last chunk
}

TEST(PipelineSimulation, InFlightMicroBatches) {
  for (int p : {2, 4})
    for (int m : {1, 2, 4, 8, 16}) {
      const PipelineSimulation g = simulate_pipeline("gpipe", p, m, 1, 1.0, 2.0);
      const PipelineSimulation f = simulate_pipeline("1f1b", p, m, 1, 1.0, 2.0);
      for (int st = 0; st < p; ++st) {
        EXPECT_EQ(g.peak_in_flight_chunks[size_t(st)], m);
        EXPECT_LE(f.peak_in_flight_chunks[size_t(st)], p);
        EXPECT_EQ(f.peak_in_flight_chunks[size_t(st)], std::min(p - st, m));
      }
      EXPECT_EQ(f.peak_in_flight_chunks[0], std::min(p, m));
      if (m % p) continue;
      // Interleaved: Megatron's activation penalty 1 + (p-1)/(p v) over p micro-batches.
      const PipelineSimulation i = simulate_pipeline("interleaved", p, m, 2, 1.0, 2.0);
      for (int st = 0; st < p; ++st) EXPECT_LE(i.peak_in_flight[size_t(st)], p + (p - 1) / 2.0 + 1e-12);
    }
}

TEST(PipelineSchedule, RefusesInvalidArguments) {
  EXPECT_THROW(pipeline_schedule("gpipe", 4, 0, 1, 0), InputError);
  EXPECT_THROW(pipeline_schedule("1f1b", 0, 4, 1, 0), InputError);
  EXPECT_THROW(pipeline_schedule("interleaved", 4, 6, 2, 0), InputError);
  EXPECT_THROW(pipeline_schedule("interleaved", 4, 8, 1, 0), InputError);
  EXPECT_THROW(pipeline_schedule("1f1b", 4, 8, 2, 0), InputError);
  EXPECT_THROW(pipeline_schedule("zb", 4, 8, 1, 0), InputError);
  EXPECT_THROW(pipeline_schedule("1f1b", 4, 8, 1, 4), InputError);
  EXPECT_THROW(simulate_pipeline("interleaved", 4, 6, 2, 1, 2), InputError);
  EXPECT_THROW(simulate_pipeline("1f1b", 4, 8, 1, 0, 2), InputError);
  EXPECT_THROW(pipeline_schedule("zb-h1", 4, 8, 2, 0), InputError);          // no virtual stages
  EXPECT_THROW(simulate_pipeline("zb-h1", 4, 8, 1, 1, 2, 2), InputError);    // W all of the backward
  EXPECT_THROW(simulate_pipeline("zb-h1", 4, 8, 1, 1, 2, -1), InputError);
}

}  // namespace
}  // namespace dtb

namespace dtb {
namespace {

// ZB-H1 (Qi et al. 2024): every stage runs each micro-batch's F, then its B, then its W, once;
// W's in micro-batch order (so each weight's gradient sums the micro-batches as 1F1B does); at
// most p micro-batches held (F done, W not) on every stage, 1F1B's most; and with T_F = T_B =
// T_W each stage idles (p - 1) T_F: the bubble (p - 1) / (3 m + p - 1) of the whole step, a
// third of 1F1B's idle time. The simulation is exact arithmetic on small integers here.
TEST(ZeroBubbleH1, EachStageRunsFThenBThenWInOrderHoldingAtMostP) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 16})
      for (int st = 0; st < p; ++st) {
        SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m) + " stage " + std::to_string(st));
        const auto list = pipeline_schedule("zb-h1", p, m, 1, st);
        ASSERT_EQ(list.size(), size_t(3 * m));
        std::vector<int> state(size_t(m), 0);  // 1 after F, 2 after B, 3 after W
        int next_w = 0, held = 0, most = 0;
        for (const PipeAction& a : list) {
          ASSERT_EQ(a.chunk, 0);
          int& s = state[size_t(a.micro_batch)];
          ASSERT_NE(a.op, PipeOp::backward);
          const int want = a.op == PipeOp::forward ? 0 : a.op == PipeOp::backward_input ? 1 : 2;
          EXPECT_EQ(s, want) << "micro-batch " << a.micro_batch;
          ++s;
          if (a.op == PipeOp::forward) ++held;
          if (a.op == PipeOp::backward_weight) {
            EXPECT_EQ(a.micro_batch, next_w++);
            --held;
          }
          most = std::max(most, held);
        }
        EXPECT_EQ(next_w, m);
        EXPECT_LE(most, p);
      }
}

TEST(ZeroBubbleH1, BubbleIsAThirdOf1F1BsIdleWithEqualPasses) {
  for (int p : {2, 3, 4, 8})
    for (int m : {4, 8, 16, 32}) {
      if (m < p) continue;  // the formula's steady state needs m >= p micro-batches
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const PipelineSimulation zb = simulate_pipeline("zb-h1", p, m, 1, 1.0, 2.0, 1.0);
      const PipelineSimulation one = simulate_pipeline("1f1b", p, m, 1, 1.0, 2.0);
      EXPECT_DOUBLE_EQ(zb.bubble, double(p - 1) / (3 * m + p - 1));
      EXPECT_DOUBLE_EQ(zb.bubble, pipeline_bubble_theory("zb-h1", p, m, 1));
      for (int s = 0; s < p; ++s) {
        EXPECT_DOUBLE_EQ(zb.idle[size_t(s)], p - 1.0);  // (p - 1)(T_F + T_B - T_W)
        EXPECT_DOUBLE_EQ(one.idle[size_t(s)], 3 * (p - 1.0));
      }
    }
}

// Unequal passes: each stage idles (p - 1)(T_F + T_B - T_W) while W is not longer than F or B,
// the case of a transformer layer (T_W about T_F about T_B); outside it (T_F 2, T_B 1, T_W 1.5;
// T_F 0.5, T_B 2, T_W 1.5) the simulation, not the closed form, gives this schedule's bubble.
TEST(ZeroBubbleH1, MatchesTheFormulaForUnequalPasses) {
  for (int p : {2, 4})
    for (int m : {8, 16})
      for (auto [tf, tb, tw] : {std::tuple{1.0, 1.5, 0.75}, std::tuple{1.0, 1.0, 0.5}, std::tuple{1.0, 2.0, 1.0},
                                std::tuple{2.0, 1.0, 1.0}}) {
        const PipelineSimulation r = simulate_pipeline("zb-h1", p, m, 1, tf, tb + tw, tw);
        EXPECT_NEAR(r.bubble, zb_h1_bubble_theory(p, m, tf, tb, tw), 1e-12)
            << "p " << p << " m " << m << " tf " << tf << " tb " << tb << " tw " << tw;
      }
}

}  // namespace
}  // namespace dtb
