// Tests of reference/analytic/step_time_model.h: each term on hand-worked cases (a 1-layer GPT, C 4, V 8,
// one sequence of 2 tokens, on a hardware of round rates), so that dropping or changing a term fails
// a test; the refusals. The arithmetic is in the comments.
#include "reference/analytic/step_time_model.h"
#include "reference/analytic/step_time_test_util.h"

#include <gtest/gtest.h>

#include "kernels/error.h"

namespace dtb {
namespace {

// Round rates (step_time_test_util.h): 1 GFLOP/s, 1 GB/s, collectives and sends 10 us + 1 GB/s.
StepTimeHardware round_hardware() { return test::round_step_hardware(); }

// L 1, C 4, NH 1, T 8, V 8; one sequence of s = 2 tokens: N = 2 rows, fp32 (4 bytes).
StepTimeInput tiny() { return test::tiny_gpt(); }

// Forward of one micro-batch, ns at 1 FLOP/ns and 1 B/ns:
//  GEMMs 2 N C OC: QKV 2*2*4*12 = 192, proj 64, FC1 256, FC2 256, head 2*2*4*8 = 128 -> 896;
//  attention 4 b s^2 C = 64;
//  memory: embedding 3 N C 4 = 96, 2 LayerNorms 2 N C 4 = 64 each, 2 residuals 3 N C 4 = 96 each,
//  GELU 2 (4 N C) 4 = 256, final LayerNorm 64, the vocabulary-parallel cross-entropy's max
//  N V 4 = 64, sums 64 and losses 2 N V 4 = 128 -> 992. Total 1952.
// Backward: GEMMs 2 x 896 = 1792, attention 128; memory: GELU 3 (4 N C) 4 = 384, LayerNorms
// 4 N C 4 = 128 x 3 = 384, the cleared gradient buffers of a layer (2 x N 4C, 2 x N C, N C,
// N 3C elements, 4 B each: 256 + 64 + 32 + 96 = 448) and of the head (2 x N C: 64), cross-entropy
// 128, embedding 96 -> 1504. Total 3424.
// Optimizer: 316 parameters (12 C^2 + 13 C + V C + T C + 2 C, gpt_num_params); zeroing 316 x 4 =
// 1264 B, AdamW 316 x (3 x 4 + 16) = 8848 B -> 10112; no host pass (host_pass.per_s 0).
// Step 1952 + 3424 + 10112 = 15488 ns.
TEST(StepTimeModel, SingleRankComputeAndOptimizerByHand) {
  const StepTimeTerms t = predict_step(tiny(), round_hardware());
  EXPECT_NEAR(t.forward_compute_s, 1952e-9, 1e-15);
  EXPECT_NEAR(t.backward_compute_s, 3424e-9, 1e-15);
  EXPECT_NEAR(t.optimizer_s, 10112e-9, 1e-15);
  EXPECT_EQ(t.tp_comm_s, 0);
  EXPECT_EQ(t.dp_comm_s, 0);
  EXPECT_EQ(t.scalars_s, 0);  // one rank: no reductions
  EXPECT_NEAR(t.pipeline_s, 1952e-9 + 3424e-9, 1e-15);
  EXPECT_NEAR(t.step_s, 15488e-9, 1e-15);
}

// The trainer's host pass over the gradient for its norm (host_pass, 1 element/ns): the held
// gradient copied down (316 x 4 B at 1 B/ns) and passed over (316 ns); at ZeRO 2 over DP 2 only
// the shard (158); under fp16 twice (the inf/NaN scan too).
TEST(StepTimeModel, GradientNormHostPass) {
  StepTimeHardware hw = round_hardware();
  const double base = predict_step(tiny(), hw).optimizer_s;
  hw.host_pass = {0, 1e9};
  EXPECT_NEAR(predict_step(tiny(), hw).optimizer_s - base, (1264 + 316) * 1e-9, 1e-15);
  StepTimeInput in = tiny();
  in.global_batch = 2, in.layout.dp = 2, in.zero.stage = 2;
  hw.host_pass = {0, 0};
  const double z2 = predict_step(in, hw).optimizer_s;
  hw.host_pass = {0, 1e9};
  EXPECT_NEAR(predict_step(in, hw).optimizer_s - z2, (632 + 158) * 1e-9, 1e-15);
  in.precision = Precision::fp16;
  hw.gemm[2] = hw.attention[2] = {0, 1e9};
  hw.host_pass = {0, 0};
  const double h0 = predict_step(in, hw).optimizer_s;
  hw.host_pass = {0, 1e9};
  EXPECT_NEAR(predict_step(in, hw).optimizer_s - h0, 2 * (316 + 158) * 1e-9, 1e-15);
}

// Micro-batches multiply the pipeline term: m = 2 of one sequence each is twice the compute.
TEST(StepTimeModel, MicroBatchesRepeatTheComputeWithoutPipeline) {
  StepTimeInput in = tiny();
  in.global_batch = 2, in.micro_batches = 2;
  EXPECT_NEAR(predict_step(in, round_hardware()).pipeline_s, 2 * (1952e-9 + 3424e-9), 1e-15);
}

// TP 2: each all-reduce of n bytes costs 10 us + 2 (1/2) n ns. Activations N C 4 = 32 B.
// Forward: 2 per layer + the embedding's (32 B) + the loss's max and sum (N 4 = 8 B):
// 5 x 10 us + (3 x 32 + 2 x 8) ns; backward: 2 per layer + the head's input gradient: 3 x 10 us
// + 3 x 32 ns. Under sequence parallelism each is an all-gather plus a reduce-scatter: twice
// the latency, the same bytes.
TEST(StepTimeModel, TensorParallelCollectivesByHand) {
  StepTimeInput in = tiny();
  in.model.NH = 2;
  in.layout.tp = 2;
  const StepTimeHardware hw = round_hardware();
  EXPECT_NEAR(predict_step(in, hw).tp_comm_s, 8e-5 + 208e-9, 1e-15);
  in.layout.sequence_parallel = true;
  EXPECT_NEAR(predict_step(in, hw).tp_comm_s, 16e-5 + 208e-9, 1e-15);
  // The scalar reductions: 3 all-reduces of 8 B over the 2 ranks.
  EXPECT_NEAR(predict_step(in, hw).scalars_s, 3 * (1e-5 + 8e-9), 1e-15);
}

// DP 2: ZeRO 0 all-reduces the 316 x 4 B gradient once: 10 us + 2 (1/2) 1264 ns; ZeRO 1 adds
// the parameter all-gather, 10 us + (1/2) 1264 ns, and AdamW runs on 158 parameters; ZeRO 2
// reduce-scatters each micro-batch's gradient inside the backward instead of the all-reduce.
TEST(StepTimeModel, DataParallelReductionByZeroStage) {
  StepTimeInput in = tiny();
  in.global_batch = 2;
  in.layout.dp = 2;
  const StepTimeHardware hw = round_hardware();
  EXPECT_NEAR(predict_step(in, hw).dp_comm_s, 1e-5 + 1264e-9, 1e-15);
  in.zero.stage = 1;
  const StepTimeTerms z1 = predict_step(in, hw);
  EXPECT_NEAR(z1.dp_comm_s, 2e-5 + 1264e-9 + 632e-9, 1e-15);
  EXPECT_NEAR(z1.optimizer_s, (1264 + 158 * 28) * 1e-9, 1e-15);
  in.zero.stage = 2;
  const StepTimeTerms z2 = predict_step(in, hw);
  EXPECT_NEAR(z2.dp_comm_s, 1e-5 + 632e-9, 1e-15);        // the gather only
  EXPECT_NEAR(z2.zero_mb_comm_s, 1e-5 + 632e-9, 1e-15);   // one reduce-scatter of the gradient
  EXPECT_NEAR(z2.step_s, z2.pipeline_s + z2.dp_exposed_s + z2.optimizer_s + z2.scalars_s, 1e-15);
  in.zero.stage = 3;  // + each of 3 units gathered (1/3 of the parameters) before forward and backward
  const StepTimeTerms z3 = predict_step(in, hw);
  EXPECT_NEAR(z3.zero_mb_comm_s, (1e-5 + 632e-9) + 2 * (3e-5 + 632e-9), 1e-15);
  EXPECT_EQ(z3.dp_comm_s, 0);
}

// PP 2 over L 2 with balanced stages (the head's GEMM measured as free, memory-bound ops and
// messages free): each stage's F is one layer's 832 ns (GEMMs 768 + attention 64), B 1664; 1F1B
// and GPipe take (m + p - 1)(F + B), bubble (p - 1) / (m + p - 1) = 1/5 for m = 4; interleaved
// over v = 2 (L 4): (p - 1) / (v m + p - 1) = 1/9.
TEST(StepTimeModel, PipelineBubbleOfBalancedStages) {
  StepTimeInput in = tiny();
  in.model.L = 2;
  in.global_batch = 4, in.micro_batches = 4;
  in.layout.pp = 2;
  StepTimeHardware hw = round_hardware();
  hw.memory = {0, 0};
  hw.p2p_intra = hw.p2p_inter = {0, 0};
  hw.op_seconds["matmul_forward:2x4x8:fp32"] = 0;
  hw.op_seconds["matmul_backward:2x4x8:fp32"] = 0;
  for (const char* s : {"1f1b", "gpipe"}) {
    in.layout.schedule = s;
    const StepTimeTerms t = predict_step(in, hw);
    EXPECT_NEAR(t.pipeline_s, 5 * (832 + 1664) * 1e-9, 1e-15) << s;
    EXPECT_NEAR(t.bubble, 0.2, 1e-12) << s;
  }
  in.model.L = 4, in.layout.schedule = "interleaved", in.layout.virtual_stages = 2;
  EXPECT_NEAR(predict_step(in, hw).bubble, 1.0 / 9, 1e-12);
  in.model.L = 2;
  // Two ranks a core: the schedule runs at twice the rate while the other stage waits, but the
  // ranks' work over the cores bounds it: max(5 (F + B) / 2, m (F + B)) = 4 (F + B); at m = 1 the
  // schedule's 2 (F + B) / 2 = F + B.
  in.layout.schedule = "1f1b", in.layout.virtual_stages = 1;
  hw.ranks_per_core = 2;
  EXPECT_NEAR(predict_step(in, hw).pipeline_s, 4 * (832 + 1664) * 1e-9, 1e-15);
  in.global_batch = 1, in.micro_batches = 1;
  EXPECT_NEAR(predict_step(in, hw).pipeline_s, (832 + 1664) * 1e-9, 1e-15);
  in.global_batch = 4, in.micro_batches = 4;
  hw.ranks_per_core = 1;
  // A message between stages (10 us) lengthens the step.
  hw.p2p_intra = hw.p2p_inter = {1e-5, 0};
  in.layout.schedule = "1f1b", in.layout.virtual_stages = 1;
  EXPECT_GT(predict_step(in, hw).pipeline_s, 5 * (832 + 1664) * 1e-9 + 1e-5);
}

// Recompute: full re-runs the layer's forward in the backward (832 ns of GEMMs and attention with
// memory free), selective only attention's core (64 ns); offload moves the shard twice.
TEST(StepTimeModel, RecomputeAndOffload) {
  StepTimeHardware hw = round_hardware();
  hw.memory = {0, 0};
  StepTimeInput in = tiny();
  const double base = predict_step(in, hw).backward_compute_s;
  in.recompute = Recompute::full;
  EXPECT_NEAR(predict_step(in, hw).backward_compute_s - base, 832e-9, 1e-15);
  in.recompute = Recompute::selective;
  EXPECT_NEAR(predict_step(in, hw).backward_compute_s - base, 64e-9, 1e-15);
  in.recompute = Recompute::none;
  in.global_batch = 2, in.layout.dp = 2, in.zero.stage = 1, in.zero.offload_optimizer = true;
  EXPECT_NEAR(predict_step(in, hw).offload_s, 2 * 158 * 4e-9, 1e-15);
}

// Measured op times replace the rate formula.
TEST(StepTimeModel, MeasuredOpTimesOverrideRates) {
  StepTimeHardware hw = round_hardware();
  const StepTimeTerms a = predict_step(tiny(), hw);
  hw.op_seconds["attention_forward:1x2x4x1:fp32"] = 1e-3;
  EXPECT_NEAR(predict_step(tiny(), hw).forward_compute_s - a.forward_compute_s, 1e-3 - 64e-9, 1e-15);
}

TEST(StepTimeModel, CollectiveLookupTakesTheNearestGroupAtOrAbove) {
  StepTimeHardware hw = round_hardware();
  hw.collectives = {{2, LinkClass::intra_node, {1e-5, 0}}, {8, LinkClass::intra_node, {3e-5, 0}}};
  EXPECT_EQ(collective_seconds(hw, 1, LinkClass::intra_node, 100, false, 1), 0);
  EXPECT_DOUBLE_EQ(collective_seconds(hw, 2, LinkClass::intra_node, 100, false, 1), 1e-5);
  EXPECT_DOUBLE_EQ(collective_seconds(hw, 4, LinkClass::intra_node, 100, false, 1), 3e-5);
  EXPECT_DOUBLE_EQ(collective_seconds(hw, 16, LinkClass::intra_node, 100, false, 1), 3e-5);
  EXPECT_THROW(collective_seconds(hw, 2, LinkClass::inter_node, 100, false, 1), InputError);
}

// NCCL's ring model for all-gathers and reduce-scatters (RingProtocol): g - n intra-node steps,
// n - 1 network steps, the fastest protocol; an all-reduce keeps its fit. Worked by hand: LL (1 us
// base, 0.05 us an intra-node step and 1/2 of the bandwidth in one node, 0.1 us and 1/4 across
// nodes, 1 us a network step) and Simple (10, 1, 10 us, all of it); 64 ranks on 8 nodes, fit
// 20 us + 0.1 GB/s; 8 ranks in one node, fit 10 us + 1 GB/s.
TEST(StepTimeModel, GathersTakeNcclsRingLatency) {
  StepTimeHardware hw = round_hardware();
  hw.ranks_per_node = 8;
  hw.collectives = {{8, LinkClass::intra_node, {1e-5, 1e9}}, {1024, LinkClass::inter_node, {2e-5, 1e8}}};
  const double small = 1000, big = 1e8, bus = 63.0 / 64;
  EXPECT_DOUBLE_EQ(collective_seconds(hw, 64, LinkClass::inter_node, small, true, 8), 2e-5 + bus * small / 1e8);
  hw.ring_protocols = {{"LL", 1e-6, 5e-8, 1e-6, 0.5, 1e-7, 0.25}, {"Simple", 1e-5, 1e-6, 1e-5, 1.0, 1e-6, 1.0}};
  // Small: LL, 1 + 56 x 0.1 + 7 x 1 us + 984.375 B at 25 MB/s.
  EXPECT_NEAR(collective_seconds(hw, 64, LinkClass::inter_node, small, true, 8), 13.6e-6 + bus * small / 2.5e7, 1e-18);
  // Large: Simple, 10 + 56 x 1 + 7 x 10 us + 98.4375 MB at 0.1 GB/s.
  EXPECT_NEAR(collective_seconds(hw, 64, LinkClass::inter_node, big, true, 8), 136e-6 + bus * big / 1e8, 1e-12);
  // One rank a node (a DP group tp = 8 apart): 63 network steps.
  EXPECT_NEAR(collective_seconds(hw, 64, LinkClass::inter_node, small, true, 64), 64e-6 + bus * small / 2.5e7, 1e-18);
  // One node: LL's one-node figures, 1 + 7 x 0.05 us + 875 B at 0.5 GB/s.
  EXPECT_NEAR(collective_seconds(hw, 8, LinkClass::intra_node, small, true, 1), 1.35e-6 + 875 / 5e8, 1e-18);
  // The all-reduce keeps the fit's alpha and bus bandwidth.
  EXPECT_DOUBLE_EQ(collective_seconds(hw, 64, LinkClass::inter_node, small, false, 8), 2e-5 + 2 * bus * small / 1e8);
}

TEST(StepTimeModel, GroupNodesFromTheStrideOfItsRanks) {
  StepTimeHardware hw = round_hardware();
  EXPECT_EQ(group_nodes(hw, 64, 1), 1);  // ranks_per_node 0: one node
  hw.ranks_per_node = 8;
  EXPECT_EQ(group_nodes(hw, 4, 1), 1);
  EXPECT_EQ(group_nodes(hw, 64, 1), 8);
  EXPECT_EQ(group_nodes(hw, 64, 2), 16);
  EXPECT_EQ(group_nodes(hw, 64, 8), 64);
  EXPECT_EQ(group_nodes(hw, 64, 16), 64);
  EXPECT_EQ(group_nodes(hw, 12, 1), 2);  // 8 + 4
  EXPECT_EQ(group_nodes(hw, 3, 3), 1);   // ranks 0, 3, 6: one node, as link_of(7) says
  EXPECT_EQ(group_nodes(hw, 4, 3), 2);   // ranks 0, 3, 6, 9
}

TEST(StepTimeModel, RefusesWhatItDoesNotModel) {
  const StepTimeHardware hw = round_hardware();
  StepTimeInput in = tiny();
  in.model.moe.num_experts = 4;
  EXPECT_THROW(predict_step(in, hw), InputError);
  in = tiny();
  in.layout.dp = 2;  // global batch 1 over 2 DP ranks
  EXPECT_THROW(predict_step(in, hw), InputError);
  in = tiny();
  in.layout.tp = 3;  // C 4
  EXPECT_THROW(predict_step(in, hw), InputError);
  in = tiny();
  in.layout.pp = 2;  // L 1
  EXPECT_THROW(predict_step(in, hw), InputError);
  StepTimeHardware none;
  EXPECT_THROW(predict_step(tiny(), none), InputError);  // no GEMM rate, no measured time
  in = tiny();
  in.global_batch = 2, in.layout.dp = 2;
  StepTimeHardware no_coll = round_hardware();
  no_coll.collectives.clear();
  EXPECT_THROW(predict_step(in, no_coll), InputError);
}

// A Llama layer (reference/model/llama_block.cc) on one rank: L 1, C 4, NH 2 heads of hs 2, KV 1,
// F 8, V 8, T 8; one sequence of s = 2 tokens (N = 2 rows), fp32. Forward, ns at 1 FLOP/ns, 1 B/ns:
//  GEMMs 2 N C OC: qkv at the GQA width (NH + 2 KV) hs = 8: 128, proj 64, gate and up (2F = 16)
//  256, down 128, untied head 2*2*4*8 = 128 -> 704; attention 4 b s^2 C = 64;
//  memory: embedding 3 N C 4 = 96, 2 RMSNorms 2 N C 4 = 64 each, RoPE over q and k (a read and a
//  write of N (2 + 1) hs elements: 2*2*3*2*4 = 96), 2 residuals 96 each, SwiGLU (reads 2F,
//  writes F: 3 N F 4 = 192), the final RMSNorm 64, cross-entropy 64 + 64 + 128 -> 1024. 1792.
// Backward: GEMMs 1408, attention 128; memory: cross-entropy 128, the head's cleared buffers 64,
//  the final RMSNorm 4 N C 4 = 128, SwiGLU (reads 3F, writes 2F: 5 N F 4 = 320), 2 RMSNorms 256,
//  RoPE 96, cleared buffers N F + 2 N F + 2 N C + N C + N (NH + 2 KV) hs = 16 + 32 + 16 + 8 + 16
//  = 88 elements x 4 = 352, embedding 96 -> 1440. 2976.
// Parameters, counted from the tensors (not from gpt_num_params' formula): wte and the untied
//  head 2 x 8 x 4 = 64, qkv 8 x 4 = 32, proj 16, gate/up/down 3 x 8 x 4 = 96, two RMSNorm
//  weights 8, the final one 4 -> 220. Optimizer: zeroing 880 B + AdamW 220 x 28 = 6160 -> 7040.
// Step 1792 + 2976 + 7040 = 11808 ns.
StepTimeInput tiny_llama() {
  StepTimeInput in = tiny();
  in.model = GptConfig{.L = 1, .C = 4, .NH = 2, .T = 8, .V = 8};
  in.model.arch = ModelArch::llama;
  in.model.num_kv_heads = 1;
  in.model.ffn_hidden = 8;
  return in;
}

TEST(StepTimeModel, LlamaLayerByHand) {
  const StepTimeTerms t = predict_step(tiny_llama(), round_hardware());
  EXPECT_NEAR(t.forward_compute_s, 1792e-9, 1e-15);
  EXPECT_NEAR(t.backward_compute_s, 2976e-9, 1e-15);
  EXPECT_NEAR(t.optimizer_s, 7040e-9, 1e-15);
  EXPECT_NEAR(t.step_s, 11808e-9, 1e-15);
  EXPECT_EQ(t.cp_comm_s, 0);
}

// Context parallelism on tiny() with s = 4 tokens over cp 2 (dp 1): each CP rank has sl = 2 rows,
// so every op but attention has tiny()'s shapes; attention is 4 b s^2 C / cp = 4*16*4/2 = 128
// forward (tiny()'s 64 + 64) and 256 backward (+ 128): forward 2016, backward 3552 ns.
// The ring: cp - 1 = 1 step a layer of K and V blocks, 2 KV hs sl b = 2*1*4*2 = 16 floats = 64 B:
// forward 10 us + 64 ns less the block's attention 128 / cp = 64 ns -> 10000 ns exposed; backward
// K/V and dK/dV, 128 B: 10 us + 128 ns less 256 / 2 = 128 -> 10000 ns. cp_comm 20000 ns.
// Gradients over the dp cp = 2 ranks: an all-reduce of 316 x 4 B, 10 us + 2 (1/2) 1264 ns = 11264.
// Scalars: 3 all-reduces of 8 B over the 2 ranks, 3 (10 us + 8 ns) = 30024. Optimizer 10112 as
// tiny()'s. Step 2016 + 3552 + 20000 + 11264 + 10112 + 30024 = 76968 ns.
TEST(StepTimeModel, ContextParallelTermsByHand) {
  StepTimeInput in = tiny();
  in.seq_len = 4;
  in.layout.cp = 2;
  const StepTimeTerms t = predict_step(in, round_hardware());
  EXPECT_NEAR(t.forward_compute_s, 2016e-9, 1e-15);
  EXPECT_NEAR(t.backward_compute_s, 3552e-9, 1e-15);
  EXPECT_NEAR(t.cp_comm_s, 20000e-9, 1e-15);
  EXPECT_NEAR(t.dp_comm_s, 11264e-9, 1e-15);
  EXPECT_NEAR(t.scalars_s, 30024e-9, 1e-15);
  EXPECT_NEAR(t.step_s, 76968e-9, 1e-15);
  // ZeRO-1 shards AdamW over the dp cp = 2 ranks: 158 parameters' update, 158 x 28 = 4424 B,
  // beside zeroing all 316 (1264 B) -> 5688 ns.
  in.zero.stage = 1;
  EXPECT_NEAR(predict_step(in, round_hardware()).optimizer_s, 5688e-9, 1e-15);
  // A ring with no latency: each step's send (64 ns forward, 128 backward) is no longer than the
  // block's attention (64, 128): hidden, nothing exposed.
  StepTimeHardware fast = round_hardware();
  fast.p2p_intra = {0, 1e9};
  in.zero.stage = 0;
  EXPECT_EQ(predict_step(in, fast).cp_comm_s, 0);
  // Selective recompute re-runs attention, and its ring, in the backward: + 10000 ns.
  in.recompute = Recompute::selective;
  EXPECT_NEAR(predict_step(in, round_hardware()).cp_comm_s, 30000e-9, 1e-15);
}

TEST(StepTimeModel, RefusesContextParallelSequencesNotIn2CpChunks) {
  StepTimeInput in = tiny();
  in.seq_len = 6;  // 2 cp = 4 does not divide it
  in.layout.cp = 2;
  try {
    predict_step(in, round_hardware());
    FAIL() << "seq_len 6 at cp 2 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("seq_len 6 is not divisible by 2 cp = 4"), std::string::npos) << e.what();
  }
  in = tiny_llama();
  in.layout.tp = 2;  // KV 1 < tp 2: the KV head replicated, accepted
  in.model.V = 8;
  EXPECT_NO_THROW(predict_step(in, round_hardware()));
  in.model.ffn_hidden = 6, in.layout.tp = 4;  // NH 2: refused (heads)
  EXPECT_THROW(predict_step(in, round_hardware()), InputError);
}

// step_ops lists each shape once, with the optimizer's ops: what a calibration times.
TEST(StepTimeModel, StepOpsAreUnique) {
  const std::vector<StepOp> ops = step_ops(tiny());
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t j = i + 1; j < ops.size(); ++j) EXPECT_NE(ops[i].key(Precision::fp32), ops[j].key(Precision::fp32));
  bool adam = false;
  for (const StepOp& o : ops) adam = adam || o.key(Precision::fp32) == "adamw_update:316:fp32";
  EXPECT_TRUE(adam);
}

}  // namespace
}  // namespace dtb
