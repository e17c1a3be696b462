// Tests of reference/analytic/stack_profile.h and of predict_step's overlap terms: each setting
// lowers its exposed term by what overlapped_exposed's equation says, on step_time_model_test.cc's
// round hardware (1 GFLOP/s, 1 GB/s, collectives and sends 10 us + 1 GB/s) and its tiny GPT (L 1,
// C 4, V 8, one sequence of 2 tokens, fp32: 316 parameters). The arithmetic is in the comments.
#include "reference/analytic/stack_profile.h"

#include <gtest/gtest.h>

#include "kernels/error.h"
#include "reference/analytic/step_time_model.h"
#include "reference/analytic/step_time_test_util.h"

namespace dtb {
namespace {

StepTimeHardware round_hardware(double gemm_rate = 1e9) { return test::round_step_hardware(gemm_rate); }
StepTimeInput tiny(int heads = 1) { return test::tiny_gpt(heads); }

// c = comm / k, w = compute / k; c + (k - 1) max(0, c - w).
TEST(StackProfile, OverlappedExposedIsTheFlowShopEquation) {
  EXPECT_DOUBLE_EQ(overlapped_exposed(10, 100, 10), 1);           // all but one piece hidden
  EXPECT_DOUBLE_EQ(overlapped_exposed(10, 4, 2), 5 + 1 * (5 - 2));  // partly: 8
  EXPECT_DOUBLE_EQ(overlapped_exposed(10, 100, 1), 10);            // one piece: nothing hides
  EXPECT_DOUBLE_EQ(overlapped_exposed(10, 0, 4), 10);              // no compute: nothing hides
  EXPECT_DOUBLE_EQ(overlapped_exposed(0, 5, 4), 0);
}

// DP 2, ZeRO 0: the all-reduce of 316 x 4 B, 10 us + 2 (1/2) 1264 ns = 11264 ns. Buckets of 100
// parameters: k = 4, c = 2816 ns, under the backward's 3424 ns (w = 856 ns): exposed 2816 + 3 x
// 1960 = 8696 ns. At a GEMM rate of 1 MFLOP/s the backward is long: one bucket exposed, 2816 ns.
// One bucket per layer (bucket_params 0, 1 layer): nothing hides.
TEST(StackProfile, GradReduceHidesBucketsUnderTheBackward) {
  StepTimeInput in = tiny();
  in.global_batch = 2, in.layout.dp = 2;
  const StepTimeTerms off = predict_step(in, round_hardware());
  EXPECT_NEAR(off.dp_comm_s, 11264e-9, 1e-15);
  EXPECT_EQ(off.dp_exposed_s, off.dp_comm_s);
  in.overlap.dp_grad_reduce = true, in.overlap.bucket_params = 100;
  const StepTimeTerms on = predict_step(in, round_hardware());
  EXPECT_NEAR(on.dp_exposed_s, 8696e-9, 1e-15);
  EXPECT_NEAR(off.step_s - on.step_s, 11264e-9 - 8696e-9, 1e-15);
  EXPECT_NEAR(predict_step(in, round_hardware(1e6)).dp_exposed_s, 2816e-9, 1e-15);
  in.overlap.bucket_params = 0;
  EXPECT_NEAR(predict_step(in, round_hardware()).dp_exposed_s, 11264e-9, 1e-15);
}

// ZeRO 3 over DP 2: 3 units (embedding, the layer, the head) gathered before the forward and the
// backward, g = 3 (10 us + chunk 4 / 3 / 2 ns) = rs + 20 us with rs = 10 us + chunk 4 / 2 ns the
// backward's reduce-scatter: off = 2 g + rs. Prefetched under a long compute (1 MFLOP/s GEMMs)
// one unit's gather per pass is exposed: on = g / 3 + (g / 3 + rs), 4 g / 3 less.
TEST(StackProfile, ParamGatherPrefetchHidesAllButTheFirstUnit) {
  StepTimeInput in = tiny();
  in.global_batch = 2, in.layout.dp = 2, in.zero.stage = 3;
  const double off = predict_step(in, round_hardware(1e6)).zero_mb_comm_s;
  const double rs = (off - 4e-5) / 3, g = rs + 2e-5;
  in.overlap.param_gather_prefetch = true;
  EXPECT_NEAR(predict_step(in, round_hardware(1e6)).zero_mb_comm_s, off - 4 * g / 3, 1e-15);
  // With the reduce-scatter bucketed too, it hides behind the same backward: g / 3 + (g + rs) / 3.
  in.overlap.dp_grad_reduce = true;
  EXPECT_NEAR(predict_step(in, round_hardware(1e6)).zero_mb_comm_s, g / 3 + (g + rs) / 3, 1e-15);
}

// TP 2 (NH 2): each pass's collectives in tp = 2 chunks, the first exposed: half when the GEMMs
// are long (1 MFLOP/s), all of it when they take no time (1e30 FLOP/s).
TEST(StackProfile, TpCommOverlapHidesUnderTheGemms) {
  StepTimeInput in = tiny(2);
  in.layout.tp = 2;
  const double off = predict_step(in, round_hardware(1e6)).tp_comm_s;
  ASSERT_GT(off, 0);
  in.overlap.tp_comm = true;
  EXPECT_NEAR(predict_step(in, round_hardware(1e6)).tp_comm_s, off / 2, 1e-15);
  in.overlap.tp_comm = false;
  const double fast = predict_step(in, round_hardware(1e30)).tp_comm_s;
  in.overlap.tp_comm = true;
  EXPECT_NEAR(predict_step(in, round_hardware(1e30)).tp_comm_s, fast, 1e-15);
}

// Interleaved (pp 2, v 2, L 4, m 2) with overlap_p2p_comm: each send (10 us + 32 ns) is shorter than
// its chunk's pass at 1 MFLOP/s, so the pipeline is what free sends give; 1F1B's sends stay.
TEST(StackProfile, P2pOverlapHidesInterleavedSends) {
  StepTimeInput in = tiny();
  in.model.L = 4, in.global_batch = 2, in.micro_batches = 2;
  in.layout.pp = 2, in.layout.virtual_stages = 2, in.layout.schedule = "interleaved";
  StepTimeHardware free_p2p = round_hardware(1e6);
  free_p2p.p2p_intra = free_p2p.p2p_inter = {0, 0};
  const double blocking = predict_step(in, round_hardware(1e6)).pipeline_s;
  in.overlap.pp_send = true;
  const double overlapped = predict_step(in, round_hardware(1e6)).pipeline_s;
  EXPECT_LT(overlapped, blocking);
  EXPECT_NEAR(overlapped, predict_step(in, free_p2p).pipeline_s, 1e-15);
  in.layout.virtual_stages = 1, in.layout.schedule = "1f1b";
  in.overlap.pp_send = false;
  const double one = predict_step(in, round_hardware(1e6)).pipeline_s;
  in.overlap.pp_send = true;
  EXPECT_EQ(predict_step(in, round_hardware(1e6)).pipeline_s, one);
}

// The scatter-gather (tp 2): 1/2 of the N C 4 = 32 B activation sent (10 us + 16 ns), then an
// all-gather of 32 B over 2 (10 us + 16 ns): 20032 ns instead of 10032 ns.
TEST(StackProfile, ScatterGatherSendsOneTpShardThenGathers) {
  StepTimeInput in = tiny(2);
  in.model.L = 2, in.layout.tp = 2, in.layout.pp = 2;
  EXPECT_NEAR(predict_step(in, round_hardware()).p2p_s, 10032e-9, 1e-15);
  in.overlap.pp_scatter_gather = true;
  EXPECT_NEAR(predict_step(in, round_hardware()).p2p_s, 20032e-9, 1e-15);
}

TEST(StackProfile, ProfilesAndRefusal) {
  EXPECT_EQ(stack_profiles().front().name, "dtbench");
  const StepOverlap d = find_stack_profile("dtbench").overlap;
  EXPECT_FALSE(d.dp_grad_reduce || d.param_gather_prefetch || d.tp_comm || d.pp_send || d.pp_scatter_gather);
  const StepOverlap mc = find_stack_profile("megatron-core").overlap;
  EXPECT_TRUE(mc.dp_grad_reduce && mc.param_gather_prefetch && mc.tp_comm && mc.pp_send);
  EXPECT_EQ(dp_bucket_count(mc, 175e9 / 96, 8, 1), 46);  // 1.82e9 / max(40M, 8M) -> 45.6 -> 46
  EXPECT_EQ(dp_bucket_count(find_stack_profile("fsdp2").overlap, 1e9, 8, 12), 12);  // one per layer
  EXPECT_TRUE(find_stack_profile("megatron-2021").overlap.pp_scatter_gather);
  try {
    find_stack_profile("deepspeed");
    FAIL() << "no refusal";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--stack deepspeed: not a known stack (dtbench, megatron-2021, megatron-core, fsdp2, deepspeed-zero3-2021)");
  }
}

}  // namespace
}  // namespace dtb

namespace dtb {
namespace {

// The prefetch limited to prefetch_params elements ahead (DeepSpeed's stage3_prefetch_bucket_size):
// of each 316 / 3-parameter unit, 1 element ahead is the share 3 / 316 of its gather, pre =
// g 3 / 316; the rest waits. Under a long compute each pass then exposes g - pre + pre / 3: in all
// 4 pre / 3 less than off instead of 4 g / 3.
TEST(StackProfile, PrefetchLimitedToItsElementsAhead) {
  StepTimeInput in = tiny();
  in.global_batch = 2, in.layout.dp = 2, in.zero.stage = 3;
  const double off = predict_step(in, round_hardware(1e6)).zero_mb_comm_s;
  const double rs = (off - 4e-5) / 3, g = rs + 2e-5, pre = g * 3 / 316;
  in.overlap.param_gather_prefetch = true, in.overlap.prefetch_params = 1;
  EXPECT_NEAR(predict_step(in, round_hardware(1e6)).zero_mb_comm_s, off - 4 * pre / 3, 1e-15);
  in.overlap.prefetch_params = 1000;  // more than a unit: a whole unit ahead
  EXPECT_NEAR(predict_step(in, round_hardware(1e6)).zero_mb_comm_s, off - 4 * g / 3, 1e-15);
}

// DeepSpeed 2021's per-tensor gathers: the tiny GPT's one stage holds 16 tensors (the layer's 12:
// ln1 w, b, qkv w, b, proj w, b, ln2 w, b, fc1 w, b, fc2 w, b; wte, wpe, ln_f w, b), gathered one
// by one, against 3 units (the layer, the embedding, the head). Collectives at 10 us and no
// bandwidth cost: 2 passes x (16 - 3) x 10 us more.
TEST(StackProfile, PerTensorGathersPayALatencyEach) {
  StepTimeInput in = tiny();
  in.global_batch = 2, in.layout.dp = 2, in.zero.stage = 3;
  StepTimeHardware hw = round_hardware(1e6);
  for (CollectiveFit& f : hw.collectives) f.bus.per_s = 0;
  const double units = predict_step(in, hw).zero_mb_comm_s;
  in.overlap.gather_per_tensor = true;
  EXPECT_NEAR(predict_step(in, hw).zero_mb_comm_s - units, 2 * 13 * 1e-5, 1e-15);
  // DeepSpeed's persistence threshold: tensors under 20 elements are never gathered (the norms
  // and biases, fc's 16 included, and proj w's 16). Gathered: qkv w 48, fc w 64, fcproj w 64,
  // wte 8 x 4 = 32, wpe 8 x 4 = 32: 5 against 3 units, 2 x 2 x 10 us more.
  in.overlap.param_persistence_threshold = 20;
  EXPECT_NEAR(predict_step(in, hw).zero_mb_comm_s - units, 2 * 2 * 1e-5, 1e-15);
  EXPECT_TRUE(find_stack_profile("deepspeed-zero3-2021").overlap.gather_per_tensor);
  EXPECT_EQ(find_stack_profile("deepspeed-zero3-2021").overlap.param_persistence_threshold, 100'000);
  EXPECT_FALSE(find_stack_profile("fsdp2").overlap.gather_per_tensor);
}

double op_bytes(const std::vector<StepOp>& ops, const std::string& name, int* count) {
  for (const StepOp& o : ops)
    if (o.name == name) return *count = o.count, o.bytes;
  return *count = 0, 0.0;
}

// Dropout (megatron-2021's 0.1): on the 1 x 1 x 2 x 2 materialized probabilities in fp32, the
// forward reads 4 x 4 B and writes them and a 1-byte mask: 4 x 9 = 36 B; the hidden dropout's
// mask after each of the two residual adds, N C = 2 x 4 = 8 B each; the backward reads the
// gradient and mask and writes it: 36 B and 8 x 9 = 72 B. Fused attention drops in the kernel.
TEST(StackProfile, DropoutAddsTheMasksPasses) {
  StepTimeInput in = tiny();
  int count = 0;
  EXPECT_EQ(op_bytes(stage_ops(in, 0, true), "dropout_forward", &count), 0.0);
  in.dropout = 0.1;
  EXPECT_EQ(op_bytes(stage_ops(in, 0, true), "attention_dropout_forward", &count), 36.0);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(op_bytes(stage_ops(in, 0, true), "dropout_forward", &count), 8.0);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(op_bytes(stage_ops(in, 0, false), "attention_dropout_backward", &count), 36.0);
  EXPECT_EQ(op_bytes(stage_ops(in, 0, false), "dropout_backward", &count), 72.0);
  in.recompute = Recompute::selective;  // the re-run attention drops again
  int n = 0;
  for (const StepOp& o : stage_ops(in, 0, false)) n += o.name == "attention_dropout_forward";
  EXPECT_EQ(n, 1);
  in.attention = AttentionKernel::fused;
  EXPECT_EQ(op_bytes(stage_ops(in, 0, true), "attention_dropout_forward", &count), 0.0);
  EXPECT_EQ(op_bytes(stage_ops(in, 0, true), "dropout_forward", &count), 8.0);
}

// megatron-2021's main_grad pass: each micro-batch's bf16 gradients of the stage's 316 parameters
// read (2 B) and added into fp32 main_grad (read and written, 8 B): 3160 B; none in fp32 or off.
TEST(StackProfile, MainGradAccumulationPass) {
  StepTimeInput in = tiny();
  in.precision = Precision::bf16, in.main_grad_accumulation = true;
  int count = 0;
  EXPECT_EQ(op_bytes(stage_ops(in, 0, false), "main_grad_accumulate", &count), 3160.0);
  in.precision = Precision::fp32;
  EXPECT_EQ(op_bytes(stage_ops(in, 0, false), "main_grad_accumulate", &count), 0.0);
  in.precision = Precision::bf16, in.main_grad_accumulation = false;
  EXPECT_EQ(op_bytes(stage_ops(in, 0, false), "main_grad_accumulate", &count), 0.0);
}

// The attention kernel a plan prices: --attention, else the stack's, else the hardware file's.
TEST(StackProfile, AttentionFromFlagThenStackThenHardware) {
  const auto mat = AttentionKernel::materialized, fused = AttentionKernel::fused;
  EXPECT_EQ(plan_attention(std::nullopt, find_stack_profile("dtbench"), fused), fused);
  EXPECT_EQ(plan_attention(std::nullopt, find_stack_profile("megatron-2021"), fused), mat);
  EXPECT_EQ(plan_attention(std::nullopt, find_stack_profile("megatron-core"), mat), fused);
  EXPECT_EQ(plan_attention(mat, find_stack_profile("megatron-core"), fused), mat);
}

}  // namespace
}  // namespace dtb
