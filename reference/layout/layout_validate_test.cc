// The one validator of a layout (reference/layout/layout_validate.h): each rule's refusal with its
// one message, the prefixes a suite gives them, and every refusal of a layout with several problems.
#include <gtest/gtest.h>

#include "kernels/error.h"
#include "reference/layout/layout_validate.h"

namespace dtb {
namespace {

const GptConfig kModel{4, 64, 4, 32, 256};  // L, C, NH, T, V

// A layout spec as the suites parse it, with the recipe's micro-batches.
LayoutSpec spec(const std::string& text) {
  LayoutSpec s = parse_layout_spec(text, "t");
  s.l.micro_batches = 1;
  if (s.dp_sync.local_steps > 0) s.dp_sync.replicas = s.l.dp;
  return s;
}

LayoutCheckContext context(int world) {
  LayoutCheckContext c;
  c.world = world;
  c.global_batch = 8;
  c.seq_len = 16;
  c.recipe.global_batch = 8;
  c.recipe.micro_batches = 1;
  c.recipe.steps = 8;
  return c;
}

std::vector<LayoutRule> rules(const std::vector<LayoutRefusal>& r) {
  std::vector<LayoutRule> out;
  for (const LayoutRefusal& x : r) out.push_back(x.rule);
  return out;
}

// The only refusal of `s`, which must break `rule`; its message.
std::string only(LayoutRule rule, const LayoutSpec& s, const LayoutCheckContext& c, const GptConfig& m = kModel) {
  const std::vector<LayoutRefusal> r = layout_refusals(s, m, c);
  EXPECT_EQ(rules(r), std::vector<LayoutRule>{rule}) << to_string(rule);
  return r.empty() ? "" : r.front().message;
}

TEST(LayoutValidate, AcceptsLayoutsThatFit) {
  for (const char* ok : {"DP2", "TP2", "PP2:zb-h1", "PP2:full", "DP2:zero2:offload", "DP2:stale1:dc", "DP2:local2",
                         "TP2:sp"})
    EXPECT_TRUE(layout_refusals(spec(ok), kModel, context(2)).empty()) << ok;
  EXPECT_TRUE(layout_refusals(spec("DP4:hier2"), kModel, context(4)).empty());
  EXPECT_NO_THROW(validate_layout_spec(spec("DP2"), kModel, context(2)));
}

TEST(LayoutValidate, EachRuleRefusesWithItsOneMessage) {
  EXPECT_EQ(only(LayoutRule::divisibility, spec("TP3"), context(3)),
            "train: model.NH = 4 heads are not divisible by tensor_parallel = 3");
  EXPECT_EQ(only(LayoutRule::divisibility, spec("DP2:sp"), context(2)),
            "train: sequence_parallel needs tensor_parallel > 1 (it splits the TP group's replicated regions)");
  LayoutSpec z = spec("DP2");
  z.z.stage = 4;
  EXPECT_EQ(only(LayoutRule::zero, z, context(2)), "train: zero_stage must be 0-3, got 4");
  EXPECT_EQ(only(LayoutRule::schedule, spec("PP2:zb-h1:full"), context(2)),
            "train: schedule zb-h1 with recompute full is not supported (W needs the activations B used)");
  GptConfig moe = kModel;
  moe.moe.num_experts = 4;
  LayoutSpec half = spec("DP2");
  half.precision = Precision::bf16;
  EXPECT_TRUE(layout_refusals(half, moe, context(2)).empty());  // an MoE model trains in bf16 and fp16 too
  LayoutCheckContext gpu = context(2);
  gpu.backend = "cuda";
  EXPECT_EQ(only(LayoutRule::moe, spec("DP2"), gpu, moe),
            "train: model.num_experts = 4: MoE layers run on the CPU backend only so far, not cuda");
  EXPECT_NE(only(LayoutRule::dp_sync, spec("TP2:stale1"), context(2)).find("train.staleness = 1 with tensor_parallel = 2"),
            std::string::npos);
  LayoutCheckContext ck = context(2);
  ck.checkpoint_every = 2;
  EXPECT_EQ(only(LayoutRule::checkpoint, spec("DP2:local2"), ck),
            "train.local_steps = 2 with train.checkpoint_every = 2: not supported (the in-flight gradients and outer "
            "state are not checkpointed)");
  ck.checkpoint_every = 0;
  ck.resume_from = "ck/step-2";
  EXPECT_EQ(only(LayoutRule::checkpoint, spec("DP2:stale1"), ck),
            "train.staleness = 1 with train.resume_from = \"ck/step-2\": not supported (the in-flight gradients and "
            "outer state are not checkpointed)");
  EXPECT_EQ(only(LayoutRule::dp_allreduce, spec("DP2:hier2"), context(2)),
            "train.dp_allreduce: hierarchical DP all-reduce over nodes of 2 ranks: the layout's 2 ranks are one node "
            "(nothing crosses nodes)");
}

// A suite's prefix (conformance names the layout) goes before every message, the DP sync ones
// keeping their keys under the section's path; `reason` is the rule's own text.
TEST(LayoutValidate, WherePrefixesEveryMessage) {
  LayoutCheckContext c = context(2);
  c.path = "conformance";
  c.where = "conformance.layouts: 'TP2:stale1'";
  const std::vector<LayoutRefusal> r = layout_refusals(spec("TP2:stale1"), kModel, c);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].message.rfind("conformance.layouts: 'TP2:stale1': conformance.staleness = 1 with tensor_parallel = 2", 0),
            0u)
      << r[0].message;
  EXPECT_EQ(r[0].reason.rfind("conformance.staleness = 1 with tensor_parallel = 2", 0), 0u) << r[0].reason;
  c.where = "conformance.layouts: 'DP2:hier2'";
  EXPECT_EQ(layout_refusals(spec("DP2:hier2"), kModel, c).at(0).message.rfind(c.where + ": hierarchical DP", 0), 0u);
}

// A layout with several problems reports every rule it breaks, in LayoutRule order; the throwing
// form says the first.
// Context parallelism: what it composes with passes; each setting it does not compose with yet
// is refused in one line naming it.
TEST(LayoutValidate, ContextParallelRefusals) {
  for (const char* ok : {"CP2", "CP2:all_gather", "CP2:full", "CP2:selective", "CP2:zero3"})
    EXPECT_TRUE(layout_refusals(spec(ok), kModel, context(2)).empty()) << ok;
  for (const char* ok : {"TP2xCP2:sp", "CP2xPP2", "CP2xDP2:zero3", "CP4"})
    EXPECT_TRUE(layout_refusals(spec(ok), kModel, context(4)).empty()) << ok;
  LayoutCheckContext odd = context(2);
  odd.seq_len = 18;
  EXPECT_EQ(only(LayoutRule::divisibility, spec("CP2"), odd),
            "train: seq_len 18 is not divisible by 2 x context_parallel = 4 (each CP rank holds two of 2 x "
            "context_parallel equal chunks of every sequence)");
  LayoutSpec half = spec("CP2");  // the half recipes have the block ops
  half.precision = Precision::bf16;
  EXPECT_TRUE(layout_refusals(half, kModel, context(2)).empty());
  LayoutCheckContext cuda = context(2);
  cuda.backend = "cuda";
  EXPECT_EQ(only(LayoutRule::cp, spec("CP2"), cuda),
            "train: context_parallel = 2 with the cuda backend (the block attention ops are on the CPU only so far) "
            "is not supported yet");
  EXPECT_EQ(only(LayoutRule::cp, spec("CP2xPP2:zb-h1"), context(4)),
            "train: context_parallel = 2 with schedule zb-h1 is not supported yet");
  EXPECT_EQ(rules(layout_refusals(spec("CP2xDP2:stale1"), kModel, context(4))).back(), LayoutRule::cp);
  EXPECT_EQ(layout_refusals(spec("CP2xDP2:stale1"), kModel, context(4)).back().message,
            "train: context_parallel = 2 with stale gradients (staleness = 1) is not supported yet");
  // Checkpoints are not refused: the manifest records cp and the ZeRO shards are indexed over
  // the data-and-context group (harness/run_test.sh saves at CP 2 and resumes at CP 1).
  LayoutCheckContext ck = context(2);
  ck.checkpoint_every = 2;
  EXPECT_TRUE(layout_refusals(spec("CP2"), kModel, ck).empty());
  ck.checkpoint_every = 0;
  ck.resume_from = "ck/step-2";
  EXPECT_TRUE(layout_refusals(spec("CP2:zero3"), kModel, ck).empty());
  GptConfig moe = kModel;
  moe.moe.num_experts = 4;
  EXPECT_EQ(only(LayoutRule::cp, spec("CP2"), context(2), moe),
            "train: context_parallel = 2 with an MoE model (model.num_experts = 4, expert_parallel = 1) is not "
            "supported yet");
}

// FP8 linears (LayoutSpec::fp8): where they run (fp32 or bf16 storage, the CPU, a dense model,
// checkpoints too) and the tile recipes' alignment to shards and to a micro-batch's tokens
// (validate_fp8_shards); nothing without a recipe.
TEST(LayoutValidate, Fp8Refusals) {
  auto with = [](const std::string& text, Fp8Recipe r, Precision p = Precision::bf16) {
    LayoutSpec s = spec(text);
    s.precision = p;
    Fp8Settings f;
    f.recipe = r;
    s.fp8 = f;
    return s;
  };
  for (Fp8Recipe r : {Fp8Recipe::delayed, Fp8Recipe::current}) {
    EXPECT_TRUE(layout_refusals(with("TP2", r), kModel, context(2)).empty()) << to_string(r);
    EXPECT_TRUE(layout_refusals(with("DP2", r, Precision::fp32), kModel, context(2)).empty()) << to_string(r);
  }
  EXPECT_EQ(only(LayoutRule::fp8, with("DP2", Fp8Recipe::current, Precision::fp16), context(2)),
            "train: fp8 recipe current with precision fp16 is not supported (FP8 keeps bf16, or fp32, everywhere "
            "else)");
  LayoutCheckContext cuda = context(2);
  cuda.backend = "cuda";
  EXPECT_EQ(only(LayoutRule::fp8, with("DP2", Fp8Recipe::delayed), cuda),
            "train: fp8 recipe delayed on the cuda backend is not supported yet (FP8 GEMMs on the CPU only)");
  GptConfig moe = kModel;
  moe.moe.num_experts = 4;
  EXPECT_EQ(only(LayoutRule::fp8, with("DP2", Fp8Recipe::delayed), context(2), moe),
            "train: fp8 recipe delayed with an MoE model (model.num_experts = 4) is not supported yet (its experts "
            "are not FP8 linears)");
  LayoutCheckContext ck = context(2);
  ck.checkpoint_every = 2;
  for (Fp8Recipe r : {Fp8Recipe::delayed, Fp8Recipe::current})  // the amax histories are saved
    EXPECT_TRUE(layout_refusals(with("DP2", r), kModel, ck).empty()) << to_string(r);
  // MXFP8's 32-wide blocks: C / tp = 32 fits at TP 2; the micro-batch of 8 / 2 sequences of 16
  // tokens is 64 tokens, whole blocks; at DP 4 with 2 micro-batches a rank's is 16 tokens.
  EXPECT_TRUE(layout_refusals(with("TP2", Fp8Recipe::mxfp8), kModel, context(2)).empty());
  EXPECT_TRUE(layout_refusals(with("DP2", Fp8Recipe::mxfp8), kModel, context(2)).empty());
  LayoutSpec dp4 = with("DP4", Fp8Recipe::mxfp8);
  dp4.l.micro_batches = 2;
  const std::string msg = only(LayoutRule::fp8, dp4, context(4));
  EXPECT_NE(msg.find("train: fp8 recipe mxfp8: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("= 16 "), std::string::npos) << msg;
  // Blockwise's 128-wide tiles: C / tp = 32 straddles them.
  EXPECT_NE(only(LayoutRule::fp8, with("TP2", Fp8Recipe::blockwise), context(2)).find("fp8 recipe blockwise"),
            std::string::npos);
  EXPECT_TRUE(layout_refusals(spec("TP2"), kModel, context(2)).empty());  // no recipe: nothing to check
  // Context parallelism: the delayed recipe; MXFP8's 32-token blocks straddle the chunks of 16 / 4
  // tokens a CP rank holds two of; not yet the current recipe.
  EXPECT_TRUE(layout_refusals(with("CP2", Fp8Recipe::delayed), kModel, context(2)).empty());
  EXPECT_NE(only(LayoutRule::fp8, with("CP2", Fp8Recipe::mxfp8), context(2))
                .find("a sequence's context-parallel chunk (seq_len / (2 context_parallel)) = 4 is not a multiple"),
            std::string::npos);
  EXPECT_EQ(only(LayoutRule::fp8, with("CP2", Fp8Recipe::current), context(2)),
            "train: fp8 recipe current with context_parallel = 2 is not supported yet (its per-GEMM scales follow "
            "values the CP attention perturbs, and no contract bounds how far a flipped FP8 value moves them; the "
            "delayed, blockwise and mxfp8 recipes run under CP)");
  // Not yet: the DP sync recipes, a Llama model's KV heads shared over TP ranks; delayed settings
  // out of range.
  const std::vector<LayoutRefusal> stale = layout_refusals(with("DP2:stale1", Fp8Recipe::delayed), kModel, context(2));
  ASSERT_FALSE(stale.empty());
  EXPECT_EQ(stale.back().message, "train: fp8 recipe delayed with stale gradients or local steps is not supported "
                                  "yet (the delayed recipe reduces its amaxes over DP every step)");
  GptConfig llama = kModel;
  llama.arch = ModelArch::llama, llama.num_kv_heads = 2, llama.ffn_hidden = 128;
  EXPECT_TRUE(layout_refusals(with("TP2", Fp8Recipe::current), llama, context(2)).empty());
  EXPECT_EQ(only(LayoutRule::fp8, with("TP4", Fp8Recipe::current), context(4), llama),
            "train: fp8 recipe current with tensor_parallel = 4 above model.num_kv_heads = 2 is not supported yet "
            "(a shared KV head's gradient would be quantized before its sum over the ranks sharing it)");
  LayoutSpec history = with("DP2", Fp8Recipe::delayed);
  history.fp8->delayed.amax_history_len = 0;
  EXPECT_NE(only(LayoutRule::fp8, history, context(2)).find("train: fp8 recipe delayed: "), std::string::npos);
}

TEST(LayoutValidate, ReportsEveryProblemOfALayout) {
  LayoutSpec s = spec("TP3xPP2:zb-h1:full:stale1:hier2");
  s.z.stage = 4;
  s.precision = Precision::bf16;
  GptConfig moe = kModel;
  moe.moe.num_experts = 4;
  LayoutCheckContext c = context(6);
  c.checkpoint_every = 1;
  c.backend = "cuda";  // the MoE rule's refusal (an MoE model on a non-CPU backend)
  const std::vector<LayoutRefusal> r = layout_refusals(s, moe, c);
  EXPECT_EQ(rules(r), (std::vector<LayoutRule>{LayoutRule::divisibility, LayoutRule::zero, LayoutRule::schedule,
                                                LayoutRule::moe, LayoutRule::dp_sync, LayoutRule::checkpoint,
                                                LayoutRule::dp_allreduce}));
  try {
    validate_layout_spec(s, moe, c);
    ADD_FAILURE() << "no refusal thrown";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), r.front().message);
  }
}

}  // namespace
}  // namespace dtb
