// Tests of reference/analytic/planner.h: the enumeration counted by hand on a small case, the rejections
// (batch, memory), the ranking, and that a candidate's numbers are predict_step's and the MFU
// formula's (worked below), so that dropping a dimension, a ZeRO stage or the memory check fails.
#include "reference/analytic/planner.h"
#include "reference/analytic/step_time_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/error.h"

namespace dtb {
namespace {

// Round rates (step_time_test_util.h): 1 GFLOP/s, 1 GB/s, collectives of 2 and 4 ranks.
PlannerHardware round_hardware(double memory_bytes) { return test::round_planner_hardware(memory_bytes); }

// L 4, C 8, NH 4, T 16, V 100 on 4 GPUs; 8 sequences of 16 tokens, one per micro-batch.
PlanRequest small_request() {
  PlanRequest r;
  r.model = GptConfig{.L = 4, .C = 8, .NH = 4, .T = 16, .V = 100};
  r.gpus = 4;
  r.global_batch = 8;
  r.micro_batch_size = 1;
  r.precision = Precision::fp32;
  r.only_1f1b = true;  // the counts below are 1F1B's; plan_schedules_test.cc counts the schedules
  return r;
}

// By hand: tp in {1, 2, 4} (dividing 4 and NH 4); pp dividing 4 / tp and L 4; dp the rest:
// (1,1,4) (1,2,2) (1,4,1) (2,1,2) (2,2,1) (4,1,1). Per layout: ZeRO 0-3 at dp > 1 (else 0 only),
// 3 recompute choices, sequence parallelism off/on at tp > 1:
// 4*3 + 4*3 + 1*3 + 4*3*2 + 1*3*2 + 1*3*2 = 12 + 12 + 3 + 24 + 6 + 6 = 63.
TEST(Planner, EnumeratesEveryLayoutCountedByHand) {
  const std::vector<PlanCandidate> all = plan_layouts(small_request(), round_hardware(1e18));
  EXPECT_EQ(all.size(), 63u);
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](const PlanCandidate& c) { return c.feasible; }));
  int zero3 = 0, sp = 0, full = 0;
  for (const PlanCandidate& c : all) {
    EXPECT_EQ(c.input.layout.world(), 4);
    EXPECT_EQ(c.input.layout.schedule, "1f1b");
    EXPECT_EQ(c.input.micro_batches, 8 / c.input.layout.dp);
    if (c.input.zero.stage == 3) ++zero3;
    if (c.input.layout.sequence_parallel) ++sp;
    if (c.input.recompute == Recompute::full) ++full;
  }
  EXPECT_EQ(zero3, 3 + 3 + 6);  // (1,1,4), (1,2,2), (2,1,2) x recompute (x sp)
  EXPECT_EQ(sp, 24 / 2 + 6 / 2 + 6 / 2);
  EXPECT_EQ(full, 63 / 3);
  // Fixing dimensions keeps only theirs: tp 2 -> 24 + 6; tp 2, zero 1 -> (2,1,2)'s 6.
  PlanRequest r = small_request();
  r.tp = 2;
  EXPECT_EQ(plan_layouts(r, round_hardware(1e18)).size(), 30u);
  r.zero_stage = 1;
  EXPECT_EQ(plan_layouts(r, round_hardware(1e18)).size(), 6u);
}

// Meta's split of Llama 3 405B (Dubey et al. 2024 Sec. 3.3.2): 126 layers on 16 stages, one layer
// fewer on the first and the last: 7 + 14 x 8 + 7 = 126. The same rule elsewhere: 10 on 4 is
// ceil 3 each less one off each end (2, 3, 3, 2); 7 on 3 (2, 3, 2); 9 on 4 takes three off,
// first, last, then second (2, 2, 3, 2); an even split is left empty.
TEST(Planner, EndsLightSplitIsMetasRule) {
  std::vector<int> meta(16, 8);
  meta.front() = meta.back() = 7;
  EXPECT_EQ(ends_light_split(126, 16), meta);
  EXPECT_EQ(ends_light_split(10, 4), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(ends_light_split(7, 3), (std::vector<int>{2, 3, 2}));
  EXPECT_EQ(ends_light_split(9, 4), (std::vector<int>{2, 2, 3, 2}));
  EXPECT_TRUE(ends_light_split(6, 3).empty());
  EXPECT_THROW(ends_light_split(3, 4), InputError);
}

// A Llama model (L 3, C 8, NH 2, KV 1, F 16) on 4 GPUs at s = 8, 4 sequences. By hand: tp in
// {1, 2} (dividing NH 2; KV 1 replicated at tp 2); cp dividing 4 / tp with 2 cp dividing 8; pp
// dividing 4 / (tp cp), at most L = 3 (3 % 2 != 0: split 1 + 2, the first stage lighter):
// (tp,cp,pp,dp) (1,1,1,4) (1,1,2,2) (1,2,1,2) (1,2,2,1) (1,4,1,1) (2,1,1,2) (2,1,2,1) (2,2,1,1).
// ZeRO 0-3 where dp cp > 1, 3 recomputes, SP at tp 2: 5 x 12 + 24 + 6 + 24 = 114 candidates
// (counted with the rejected: the count does not depend on the memory plan).
TEST(Planner, EnumeratesContextParallelAndUnevenSplitsForLlama) {
  PlanRequest r = small_request();
  r.model = GptConfig{.L = 3, .C = 8, .NH = 2, .T = 8, .V = 100};
  r.model.arch = ModelArch::llama;
  r.model.num_kv_heads = 1;
  r.model.ffn_hidden = 16;
  r.global_batch = 4;
  const std::vector<PlanCandidate> all = plan_layouts(r, round_hardware(1e18));
  EXPECT_EQ(all.size(), 114u);
  int cp4 = 0, split = 0;
  for (const PlanCandidate& c : all) {
    const ParallelLayout& l = c.input.layout;
    EXPECT_EQ(l.world(), 4);
    if (l.cp == 4) ++cp4;
    if (!l.pipeline_layers.empty()) {
      ++split;
      EXPECT_EQ(l.pipeline_layers, (std::vector<int>{1, 2}));
    }
  }
  EXPECT_EQ(cp4, 12);
  EXPECT_EQ(split, 12 + 12 + 6);  // (1,1,2,2), (1,2,2,1), (2,1,2,1)
  // A fixed --cp keeps its layouts only: cp 2 -> (1,2,1,2) (1,2,2,1) (2,2,1,1) = 12 + 12 + 24.
  r.cp = 2;
  EXPECT_EQ(plan_layouts(r, round_hardware(1e18)).size(), 48u);
  // GPT-2 enumerates cp 1 only unless fixed (small_request's 63 candidates, as counted above).
  EXPECT_EQ(plan_layouts(small_request(), round_hardware(1e18)).size(), 63u);
  r.cp = 4, r.seq_len = 6;  // 2 cp = 8 does not divide s = 6
  try {
    plan_layouts(r, round_hardware(1e18));
    ADD_FAILURE() << "--cp 4 at --seq 6 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--cp 4 needs 2 cp = 8 to divide --seq 6 (each sequence is cut into 2 cp chunks)");
  }
}

// The vocabulary is padded per tp to a multiple of 128 tp (Megatron-LM): 100 -> 128 at tp 1 and
// 2 (256), 512 at tp 4.
TEST(Planner, PadsTheVocabularyPerTp) {
  EXPECT_EQ(padded_vocab(50257, 1), 50304);
  EXPECT_EQ(padded_vocab(50257, 2), 50432);
  EXPECT_EQ(padded_vocab(50257, 8), 51200);
  EXPECT_EQ(padded_vocab(51200, 8), 51200);
  for (const PlanCandidate& c : plan_layouts(small_request(), round_hardware(1e18)))
    EXPECT_EQ(c.input.model.V, c.input.layout.tp == 4 ? 512 : c.input.layout.tp == 2 ? 256 : 128);
}

// A batch that dp x micro-batch size does not divide, and a memory limit just under the largest
// plan, are rejected with their reasons; the rejected sort after the feasible.
TEST(Planner, RejectsWithTheReason) {
  PlanRequest r = small_request();
  r.global_batch = 2;  // dp 4 does not divide it: (1,1,4)'s 12 candidates
  std::vector<PlanCandidate> all = plan_layouts(r, round_hardware(1e18));
  int batch = 0;
  for (const PlanCandidate& c : all)
    if (!c.feasible) {
      ++batch;
      EXPECT_EQ(c.input.layout.dp, 4);
      EXPECT_NE(c.rejected.find("global batch 2 is not divisible by dp 4"), std::string::npos) << c.rejected;
    }
  EXPECT_EQ(batch, 12);

  all = plan_layouts(small_request(), round_hardware(1e18));
  double most = 0, least = 1e300;
  for (const PlanCandidate& c : all) most = std::max(most, c.device_bytes), least = std::min(least, c.device_bytes);
  ASSERT_GT(most, least);
  const double limit = (most + least) / 2;
  const long over = std::count_if(all.begin(), all.end(), [&](const PlanCandidate& c) { return c.device_bytes > limit; });
  ASSERT_GT(over, 0);
  all = plan_layouts(small_request(), round_hardware(limit));
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](const PlanCandidate& c) { return !c.feasible; }), over);
  bool seen_rejected = false;
  for (const PlanCandidate& c : all) {
    if (!c.feasible) {
      seen_rejected = true;
      EXPECT_EQ(c.rejected_kind, "out of device memory");
      EXPECT_GT(c.device_bytes, limit);
      EXPECT_EQ(c.rejected.rfind("needs ", 0), 0u) << c.rejected;
    }
    EXPECT_FALSE(seen_rejected && c.feasible) << "a feasible candidate after a rejected one";
  }
}

// A layout the reference trainer refuses is a rejection, not an error: sequence parallelism over
// tp 4 of micro-batches of 6 tokens (6 % 4 != 0) -> (4,1,1)'s 3 sp candidates; tp 2 divides 6.
TEST(Planner, LayoutsTheTrainerRefusesAreRejected) {
  PlanRequest r = small_request();
  r.seq_len = 6;
  const std::vector<PlanCandidate> all = plan_layouts(r, round_hardware(1e18));
  int refused = 0;
  for (const PlanCandidate& c : all)
    if (!c.feasible) {
      ++refused;
      EXPECT_EQ(c.rejected_kind, "refused by the reference trainer");
      EXPECT_TRUE(c.input.layout.sequence_parallel && c.input.layout.tp == 4) << c.name();
      EXPECT_NE(c.rejected.find("sequence_parallel"), std::string::npos) << c.rejected;
    }
  EXPECT_EQ(refused, 3);
}

// The ranking and each candidate's numbers: the step is predict_step's of its input, tokens/s
// G s / step, and MFU by hand: N = V C + T C + L (12 C^2 + 13 C) + 2 C with the unpadded V 100 =
// 800 + 128 + 4 (768 + 104) + 16 = 4432 parameters; 6 N + 12 L C s = 26592 + 6144 = 32736 FLOPs
// per token; MFU = 32736 x tokens/s / (4 GPUs x 2e9 FLOP/s fp32).
TEST(Planner, BestLayoutIsPredictStepsAndMfuByHand) {
  const PlanRequest r = small_request();
  const PlannerHardware hw = round_hardware(1e18);
  const std::vector<PlanCandidate> all = plan_layouts(r, hw);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].terms.step_s, all[i].terms.step_s);
  const PlanCandidate& best = all.front();
  const StepTimeTerms t = predict_step(best.input, hw.hw);
  EXPECT_EQ(best.terms.step_s, t.step_s);
  EXPECT_EQ(best.terms.pipeline_s, t.pipeline_s);
  EXPECT_DOUBLE_EQ(best.tokens_per_s, 8.0 * 16 / t.step_s);
  EXPECT_DOUBLE_EQ(best.mfu, 32736.0 * best.tokens_per_s / (4 * 2e9));
  EXPECT_DOUBLE_EQ(model_flops_per_token(r.model, 16), 32736.0);
  // Its memory is the reference trainer's plan of the same configuration.
  PlanConfig pc;
  pc.model = best.input.model, pc.layout = best.input.layout, pc.zero = best.input.zero;
  pc.precision = r.precision, pc.recompute = best.input.recompute, pc.seq_len = 16;
  EXPECT_EQ(best.device_bytes, double(plan_busiest_rank(pc).device_total()));
}

TEST(Planner, NamesLayoutsInTheSweepSpelling) {
  PlanCandidate c;
  c.input.layout.tp = 2, c.input.layout.pp = 2, c.input.layout.dp = 2;
  c.input.zero.stage = 1, c.input.recompute = Recompute::selective, c.input.layout.sequence_parallel = true;
  EXPECT_EQ(c.name(), "TP2xPP2xDP2:zero1:selective:sp");
  c = PlanCandidate{};
  EXPECT_EQ(c.name(), "DP1");
  c.input.layout.tp = 8, c.input.recompute = Recompute::full;
  EXPECT_EQ(c.name(), "TP8:full");
}

// GPT-3's batches (Table 2.1) in sequences of 2048, rounded up to a multiple of gpus x b.
TEST(Planner, DefaultGlobalBatch) {
  const GptConfig g175{96, 12288, 96, 2048, 50257}, g10{32, 5120, 40, 2048, 50257}, g3{36, 2560, 20, 2048, 50257};
  EXPECT_EQ(default_global_batch(g175, 2048, 8, 1), 1536);
  EXPECT_EQ(default_global_batch(g175, 2048, 1024, 1), 2048);
  EXPECT_EQ(default_global_batch(g10, 2048, 8, 1), 1024);   // 6.7B's 2M tokens
  EXPECT_EQ(default_global_batch(g3, 2048, 32, 1), 512);    // 2.7B's 1M tokens
  EXPECT_EQ(default_global_batch(g3, 1024, 32, 1), 1024);   // the same tokens at half the length
  EXPECT_EQ(default_global_batch(g3, 2048, 48, 2), 576);    // 512 up to a multiple of 96
}

TEST(Planner, RefusesRequestsNoLayoutCanSatisfy) {
  auto refuses = [](PlanRequest r, const std::string& what) {
    try {
      plan_layouts(r, round_hardware(1e18));
      ADD_FAILURE() << "accepted; expected: " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  PlanRequest r = small_request();
  r.gpus = 0;
  refuses(r, "--gpus must be >= 1");
  r = small_request(), r.gpus = 6, r.tp = 4;
  refuses(r, "--tp 4 does not divide --gpus 6");
  r = small_request(), r.tp = 2, r.pp = 2, r.dp = 2;
  refuses(r, "--tp x --pp x --dp = 8 does not divide --gpus 4");
  r = small_request(), r.tp = 1, r.pp = 1, r.dp = 2;
  refuses(r, "--tp x --pp x --dp = 2 is not --gpus 4");
  r = small_request(), r.zero_stage = 4;
  refuses(r, "--zero-stage must be 0-3");
  r = small_request(), r.dp = 1, r.zero_stage = 2;
  refuses(r, "needs dp > 1");
  // Every layout the fixed sizes leave has dp 1: the ZeRO stage is the reason, not the heads.
  r = small_request(), r.tp = 4, r.zero_stage = 3;
  refuses(r, "--zero-stage 3 needs dp > 1 (ZeRO shards over the DP ranks): --tp 4 on --gpus 4 leaves dp 1");
  r = small_request(), r.pp = 4, r.zero_stage = 1;
  refuses(r, "--pp 4 on --gpus 4 leaves dp 1");
  r = small_request(), r.gpus = 1, r.global_batch = 1, r.zero_stage = 1;
  refuses(r, "--zero-stage 1 needs dp > 1 (ZeRO shards over the DP ranks): --gpus 1 leaves dp 1");
  r = small_request(), r.seq_len = 17;
  refuses(r, "--seq 17");
  r = small_request(), r.model.moe.num_experts = 4, r.model.moe.topk = 1;
  refuses(r, "MoE");
}

// A request that passes validation but leaves no layout: the reason names the fixed value no
// layout meets (it said "tp must divide --gpus and the heads" whatever was fixed).
TEST(Planner, NamesTheFixedValueNoLayoutMeets) {
  auto none = [](PlanRequest r, const std::string& want) {
    EXPECT_TRUE(plan_layouts(r, round_hardware(1e18)).empty());
    EXPECT_EQ(no_layout_reason(r), want);
  };
  PlanRequest r = small_request();
  r.model.NH = 2, r.tp = 4;
  none(r, "--tp 4 does not divide the model's 2 heads");
  r = small_request(), r.model.L = 3, r.pp = 4;  // GPT-2 takes an uneven split, not more stages than layers
  none(r, "--pp 4 is more stages than the model's 3 layers");
  r = small_request(), r.model.L = 1, r.tp = 1, r.dp = 2;
  none(r, "--tp 1 x --dp 2 on --gpus 4 leaves pp = 2, more stages than the model's 1 layers");
  r = small_request(), r.model.NH = 1, r.model.C = 8, r.pp = 1, r.dp = 2;
  none(r, "--pp 1 x --dp 2 on --gpus 4 leaves tp = 2, which does not divide the model's 1 heads");
  r = small_request(), r.model.NH = 1, r.model.L = 1, r.dp = 1;
  none(r, "--dp 1 on --gpus 4 leaves tp x pp = 4, and no tp dividing the model's 1 heads times a pp of at most its 1 "
          "layers makes 4");
}

}  // namespace
}  // namespace dtb
