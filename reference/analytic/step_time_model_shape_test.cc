// Tests of the step-time model with a GEMM shape model (StepTimeHardware::shape): each GEMM op is
// priced by gemm_seconds at its own shape, the backward as its two GEMMs (dgrad and wgrad), fused
// attention by fused_attention_seconds, materialized attention and measured op times as without
// the shape model. The expected times are sums of the same functions in the same order, so the
// checks are equalities (EXPECT_DOUBLE_EQ).
#include "reference/analytic/step_time_model.h"

#include <gtest/gtest.h>

namespace dtb {
namespace {

StepTimeHardware shaped_hardware() {
  StepTimeHardware hw;
  hw.gemm[1] = {5e-6, 200e12};
  hw.attention[1] = {5e-6, 100e12};
  hw.memory = {3e-6, 1.6e12};
  hw.collectives = {{2, LinkClass::intra_node, {1e-5, 2e11}}};  // the TP 2 all-reduces
  GemmShapeModel g;
  g.sm_count = 108;
  g.tiles = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};
  g.peak_flops = {19.5e12, 312e12, 312e12};
  g.gemm_fraction = {0.8, 0.859, 0.859};
  g.l2_bytes_per_s = 7.2e12;
  g.memory_bytes_per_s = 1.6e12;
  g.gemm_alpha_s = {5e-6, 5e-6, 5e-6};
  g.attention_alpha_s = {5e-6, 5e-6, 5e-6};
  g.attention = {{64, 0.6, 0.5}, {128, 0.7, 0.6}};
  hw.shape = g;
  return hw;
}

// One stage (pp 1, tp 2), GPT-2 L2 C1024 NH8 (hs 128), 2 sequences of 1024 tokens per micro-batch.
StepTimeInput input(AttentionKernel a) {
  StepTimeInput in;
  in.model = GptConfig{.L = 2, .C = 1024, .NH = 8, .T = 1024, .V = 32768};
  in.layout.tp = 2;
  in.global_batch = 2;
  in.micro_batches = 1;
  in.seq_len = 1024;
  in.precision = Precision::bf16;
  in.attention = a;
  return in;
}

// The ops of `ops` priced by hand: GEMMs forward (N x C)(C x OC), backward dgrad (N x OC)(OC x C)
// plus wgrad (C x N)(N x OC); attention fused, or materialized as its batched GEMMs and softmax
// passes; memory ops by bytes.
double by_hand(const std::vector<StepOp>& ops, const StepTimeHardware& hw, AttentionKernel a) {
  const GemmShapeModel& g = *hw.shape;
  double t = 0;
  for (const StepOp& o : ops) {
    const auto& d = o.dims;
    double one = 0;
    if (o.kind == StepOp::Kind::gemm && o.name == "matmul_forward") one = gemm_seconds(g, d[0], d[2], d[1], Precision::bf16);
    else if (o.kind == StepOp::Kind::gemm)
      one = gemm_seconds(g, d[0], d[1], d[2], Precision::bf16) + gemm_seconds(g, d[1], d[2], d[0], Precision::bf16);
    else if (o.kind == StepOp::Kind::attention && a == AttentionKernel::fused)
      one = fused_attention_seconds(g, d[0], d[3], d[1], d[1], d[2] / d[3], true, o.name == "attention_forward",
                                    Precision::bf16);
    else if (o.kind == StepOp::Kind::attention)
      one = materialized_attention_seconds(g, d[0], d[3], d[1], d[1], d[2] / d[3], o.name == "attention_forward",
                                           Precision::bf16);
    else one = hw.memory.time(o.bytes);
    t += one * o.count;
  }
  return t;
}

TEST(StepTimeShape, EachGemmAtItsShapeAndTheBackwardAsDgradPlusWgrad) {
  const StepTimeHardware hw = shaped_hardware();
  for (AttentionKernel a : {AttentionKernel::fused, AttentionKernel::materialized}) {
    const StepTimeInput in = input(a);
    const StepTimeTerms t = predict_step(in, hw);
    EXPECT_DOUBLE_EQ(t.forward_compute_s, by_hand(stage_ops(in, 0, true), hw, a)) << to_string(a);
    EXPECT_DOUBLE_EQ(t.backward_compute_s, by_hand(stage_ops(in, 0, false), hw, a)) << to_string(a);
  }
}

TEST(StepTimeShape, FusedCausalAttentionIsCheaperThanTheMaterializedSquare) {
  const StepTimeHardware hw = shaped_hardware();
  const double fused = predict_step(input(AttentionKernel::fused), hw).forward_compute_s;
  const double mat = predict_step(input(AttentionKernel::materialized), hw).forward_compute_s;
  EXPECT_LT(fused, mat);
}

TEST(StepTimeShape, MeasuredOpSecondsStillComeFirst) {
  StepTimeHardware hw = shaped_hardware();
  const StepTimeInput in = input(AttentionKernel::fused);
  for (const StepOp& o : step_ops(in)) hw.op_seconds[o.key(in.precision)] = 1e-3;
  double want = 0;
  for (const StepOp& o : stage_ops(in, 0, true)) want += 1e-3 * o.count;
  EXPECT_DOUBLE_EQ(predict_step(in, hw).forward_compute_s, want);
}

}  // namespace
}  // namespace dtb
