// Tests of the memory model's fused attention (memory_model.h AttentionKernel::fused) against the
// materialized plan of the same configuration, term by term: what a fused kernel does not keep
// (each layer's (B, NHl, Tn, Tn) probabilities, the backward's datt, the recompute's matrix) and
// what it adds (the fp32 log-sum-exp per layer, flash-attn's backward softmax_d and dq_accum).
// Integer bytes: every check is exact.
#include <gtest/gtest.h>

#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/analytic/memory_model_test_util.h"

namespace dtb {
namespace {

using memory_model_test::small_plan;

// The shapes of small_plan (GPT-2 L8 C64 NH4, B = 2, Tn = 16) at tp 2, bf16: 2-byte activations.
struct Shape {
  uint64_t B = 2, Tn = 16, NHl = 2, Cl = 32, Tr = 128, ab = 2;
  uint64_t probs() const { return B * NHl * Tn * Tn; }         // one layer's probabilities, elements
  uint64_t lse() const { return B * Tn * NHl; }                // one layer's log-sum-exp, fp32
  uint64_t bwd_fp32() const { return B * NHl * Tr + B * Tr * Cl; }  // softmax_d + dq_accum, fp32
};

PlanConfig plan(Recompute r, AttentionKernel a) {
  PlanConfig c = small_plan(2, 2, 1, "1f1b", 1, 4);
  c.precision = Precision::bf16;
  c.recompute = r;
  c.attention = a;
  return c;
}

TEST(MemoryModelFused, RecomputeNoneKeepsTheLogSumExpInsteadOfTheProbabilities) {
  const Shape s;
  const PlanConfig m = plan(Recompute::none, AttentionKernel::materialized), f = plan(Recompute::none, AttentionKernel::fused);
  EXPECT_EQ(layer_activation_floats(m) - layer_activation_floats(f), s.probs() - s.lse());
  for (int pp = 0; pp < 2; ++pp) {
    const RankPlan rm = plan_rank(m, 0, pp), rf = plan_rank(f, 0, pp);
    const uint64_t layers = 4;  // L8 over pp 2
    for (size_t ch = 0; ch < rm.activation_set_bytes.size(); ++ch)
      EXPECT_EQ(rm.activation_set_bytes[ch] - rf.activation_set_bytes[ch], layers * (s.probs() * s.ab - s.lse() * 4));
    EXPECT_EQ(rm.activation_sets, rf.activation_sets);
    // Workspace: no datt (B, NHl, Tn, Tn) of T; flash-attn's fp32 softmax_d and dq_accum instead.
    EXPECT_EQ(int64_t(rm.workspace_bytes) - int64_t(rf.workspace_bytes),
              int64_t(s.probs() * s.ab) - int64_t(s.bwd_fp32() * 4));
    // Nothing else moves: model states equal.
    EXPECT_EQ(rm.mem.model_states(Tier::device), rf.mem.model_states(Tier::device));
  }
}

TEST(MemoryModelFused, RecomputeDropsTheMatricesAndKeepsOneRecomputedLogSumExp) {
  const Shape s;
  for (Recompute r : {Recompute::selective, Recompute::full}) {
    const PlanConfig m = plan(r, AttentionKernel::materialized), f = plan(r, AttentionKernel::fused);
    EXPECT_EQ(layer_activation_floats(m), layer_activation_floats(f)) << to_string(r);
    const RankPlan rm = plan_rank(m, 0, 0), rf = plan_rank(f, 0, 0);
    EXPECT_EQ(rm.activation_set_bytes, rf.activation_set_bytes) << to_string(r);
    // datt and the recompute's (B, NHl, Tn, Tn) buffer gone; softmax_d, dq_accum and the
    // recomputed layer's log-sum-exp in fp32.
    EXPECT_EQ(int64_t(rm.workspace_bytes) - int64_t(rf.workspace_bytes),
              int64_t(2 * s.probs() * s.ab) - int64_t((s.bwd_fp32() + s.lse()) * 4))
        << to_string(r);
  }
}

TEST(MemoryModelFused, SelectiveSavesOnlyTheLogSumExp) {
  // Under a fused kernel selective recompute has no probabilities left to drop: against recompute
  // none it saves each kept layer's fp32 log-sum-exp and spends one in the workspace.
  const Shape s;
  const PlanConfig n = plan(Recompute::none, AttentionKernel::fused), sel = plan(Recompute::selective, AttentionKernel::fused);
  EXPECT_EQ(layer_activation_floats(n) - layer_activation_floats(sel), s.lse());
  const RankPlan rn = plan_rank(n, 0, 0), rs = plan_rank(sel, 0, 0);
  EXPECT_EQ(rn.activation_set_bytes[0] - rs.activation_set_bytes[0], 4 * s.lse() * 4);
  EXPECT_EQ(rs.workspace_bytes - rn.workspace_bytes, s.lse() * 4);
}

TEST(MemoryModelFused, ContextParallelPassKeepsTheBlockOutputAndLogSumExpOnly) {
  // cp 2: Tn = 8 rows a rank, chunks of Tc = 4; on pipeline rank 1 (no wpe rows) the transient
  // workspace is the CP pass's: materialized (Tc Cl + 2 Tc^2 + Tc) e + Tc NHl 4, fused without the
  // block ops' 2 Tc^2 + Tc scratch.
  PlanConfig m = plan(Recompute::none, AttentionKernel::materialized);
  m.layout.cp = 2;
  PlanConfig f = m;
  f.attention = AttentionKernel::fused;
  const uint64_t Tc = 4, Cl = 32, NHl = 2, ab = 2;
  EXPECT_EQ(transient_workspace_bytes(m, 1), (Tc * Cl + 2 * Tc * Tc + Tc) * ab + Tc * NHl * 4);
  EXPECT_EQ(transient_workspace_bytes(f, 1), Tc * Cl * ab + Tc * NHl * 4);
  // The kept attention is the log-sum-exp under both (the CP path's already).
  EXPECT_EQ(layer_activation_floats(m), layer_activation_floats(f));
}

TEST(MemoryModelFused, ParsesItsName) {
  EXPECT_EQ(parse_attention_kernel("fused"), AttentionKernel::fused);
  EXPECT_EQ(parse_attention_kernel("materialized"), AttentionKernel::materialized);
  EXPECT_THROW(parse_attention_kernel("flash"), InputError);
  EXPECT_EQ(to_string(AttentionKernel::fused), "fused");
}

}  // namespace
}  // namespace dtb
