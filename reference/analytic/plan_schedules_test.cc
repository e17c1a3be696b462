// Tests of reference/analytic/plan_schedules.h and of the schedules in the step-time model and the
// planner: which schedules a layout gets, ZB-H1's W priced from the backward GEMMs' weight half,
// interleaving's and ZB-H1's smaller bubble, the balancer's split for GPT-2 where pp does not
// divide L. Round rates as step_time_model_test.cc's (1 GFLOP/s, 1 GB/s).
#include "reference/analytic/plan_schedules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "reference/analytic/planner.h"
#include "reference/analytic/step_time_test_util.h"

namespace dtb {
namespace {

PlannerHardware round_hardware() { return test::round_planner_hardware(1e18); }

std::vector<std::string> names(const std::vector<ScheduleChoice>& v) {
  std::vector<std::string> out;
  for (const ScheduleChoice& c : v) out.push_back(c.schedule + std::to_string(c.virtual_stages));
  return out;
}

// GPT-3 175B's 96 layers on 12 stages: v 2, 4, 8 split them evenly (96 / 36 and 96 / 60, ... do
// not); m 6 is no multiple of 12 (no interleaving); full recompute has no ZB-H1; pp 1 only 1F1B.
TEST(PlanSchedules, ChoicesPerLayout) {
  using V = std::vector<std::string>;
  EXPECT_EQ(names(plan_schedule_choices(96, 12, 12, false)),
            (V{"1f1b1", "zb-h11", "interleaved2", "interleaved4", "interleaved8"}));
  EXPECT_EQ(names(plan_schedule_choices(96, 12, 6, false)), (V{"1f1b1", "zb-h11"}));
  EXPECT_EQ(names(plan_schedule_choices(96, 12, 12, true)), (V{"1f1b1", "interleaved2", "interleaved4", "interleaved8"}));
  EXPECT_EQ(names(plan_schedule_choices(96, 1, 12, false)), (V{"1f1b1"}));
  EXPECT_EQ(names(plan_schedule_choices(4, 2, 2, false)), (V{"1f1b1", "zb-h11", "interleaved2"}));  // v <= L / pp
}

StepTimeInput four_layers(const std::string& schedule, int v) {
  StepTimeInput in;
  in.model = GptConfig{.L = 4, .C = 4, .NH = 1, .T = 8, .V = 8};
  in.global_batch = 4, in.micro_batches = 4, in.seq_len = 2;
  in.layout.pp = 2, in.layout.schedule = schedule, in.layout.virtual_stages = v;
  return in;
}

// W: half of each backward GEMM (4 N C OC FLOPs, 2 N C OC of them dW). A layer's forward GEMMs
// (N 2, C 4) are QKV 192, proj 64, FC1 256, FC2 256 = 768 FLOPs; its backward's twice that, 1536;
// W half of it: 768 ns per layer at 1 GFLOP/s.
TEST(PlanSchedules, ZbH1WeightIsTheBackwardGemmsWeightHalf) {
  StepTimeInput in = four_layers("1f1b", 1);
  const double w = weight_grad_seconds(stage_ops(in, 0, false), round_hardware().hw, in.precision);
  EXPECT_NEAR(w, 2 * 768e-9, 1e-15);  // stage 0 holds 2 layers, no head
  // ZB-H1 with that W runs shorter than 1F1B (its bubble (p - 1)(F + B - W) vs (p - 1)(F + B)).
  const StepTimeTerms one = predict_step(in, round_hardware().hw);
  const StepTimeTerms zb = predict_step(four_layers("zb-h1", 1), round_hardware().hw);
  EXPECT_LT(zb.pipeline_s, one.pipeline_s);
  EXPECT_LT(zb.bubble, one.bubble);
}

// Interleaving (v 2) cuts the bubble: (p - 1) / (v m + p - 1) against (p - 1) / (m + p - 1) with
// equal stages; here the ends differ (embedding, head), so only the order is asserted. Sends cost
// nothing here: at 10 us each they outweigh this tiny model's microseconds of compute, and
// interleaving sends v times as often (the trade-off the plan prices with real sends).
TEST(PlanSchedules, InterleavedBubbleBelow1f1b) {
  StepTimeHardware hw = round_hardware().hw;
  hw.p2p_intra = hw.p2p_inter = {0, 0};
  const StepTimeTerms one = predict_step(four_layers("1f1b", 1), hw);
  const StepTimeTerms il = predict_step(four_layers("interleaved", 2), hw);
  EXPECT_LT(il.bubble, one.bubble);
  EXPECT_LT(il.pipeline_s, one.pipeline_s);
}

// GPT-2 L 3 on pp 2 (small_request's model: C 8, V 100 padded to 128, 16 tokens): the head
// (2 N C V = 32768 FLOPs and the cross-entropy's passes) outweighs a layer (24 N C^2 = 24576 and
// attention), the embedding is light, so the balancer puts 2 layers first: {2, 1}, where Meta's
// ends-light rule gives {1, 2}.
TEST(PlanSchedules, BalancerSplitsGpt2WherePpDoesNotDivide) {
  PlanRequest r;
  r.model = GptConfig{.L = 3, .C = 8, .NH = 4, .T = 16, .V = 100};
  r.gpus = 2, r.global_batch = 4, r.precision = Precision::fp32, r.pp = 2;
  const std::vector<PlanCandidate> all = plan_layouts(r, round_hardware());
  ASSERT_FALSE(all.empty());
  for (const PlanCandidate& c : all) EXPECT_EQ(c.input.layout.pipeline_layers, (std::vector<int>{2, 1})) << c.name();
  EXPECT_EQ(ends_light_split(3, 2), (std::vector<int>{1, 2}));
}

// Every schedule is enumerated (small_request's model L 4 on 4 GPUs, 8 sequences): at pp 2 (dp 2,
// m 4; tp 2 dp 1, m 8) 1F1B, ZB-H1 (not with full recompute) and interleaved v 2; the candidate's
// name shows it; 1F1B alone with only_1f1b.
TEST(PlanSchedules, PlannerEnumeratesEverySchedule) {
  PlanRequest r;
  r.model = GptConfig{.L = 4, .C = 8, .NH = 4, .T = 16, .V = 100};
  r.gpus = 4, r.global_batch = 8, r.precision = Precision::fp32;
  std::set<std::string> seen;
  int zb_full = 0;
  for (const PlanCandidate& c : plan_layouts(r, round_hardware())) {
    const ParallelLayout& l = c.input.layout;
    seen.insert(l.schedule + std::to_string(l.virtual_stages));
    if (l.schedule == "zb-h1" && c.input.recompute == Recompute::full) ++zb_full;
    if (l.schedule == "interleaved") EXPECT_NE(c.name().find(":interleaved:v2"), std::string::npos) << c.name();
    if (l.schedule == "zb-h1") EXPECT_NE(c.name().find(":zb-h1"), std::string::npos) << c.name();
    if (l.pp == 1) EXPECT_EQ(l.schedule, "1f1b");
  }
  EXPECT_EQ(seen, (std::set<std::string>{"1f1b1", "zb-h11", "interleaved2"}));
  EXPECT_EQ(zb_full, 0);
  r.only_1f1b = true;
  for (const PlanCandidate& c : plan_layouts(r, round_hardware())) EXPECT_EQ(c.input.layout.schedule, "1f1b");
}

}  // namespace
}  // namespace dtb
