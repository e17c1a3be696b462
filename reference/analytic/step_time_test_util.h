// The step-time model's and planner's tests' shared pieces (step_time_model_test.cc,
// stack_profile_test.cc, planner_test.cc, plan_schedules_test.cc): round hardware whose times can
// be worked by hand, and the tiny GPT they price.
#pragma once
#include "reference/analytic/planner.h"
#include "reference/analytic/step_time_model.h"

namespace dtb::test {

/// 1 FLOP/ns (gemm_rate FLOP/s) for fp32 GEMMs, 1 FLOP/ns for fp32 attention, 1 B/ns for
/// memory-bound ops, no latency; collectives 10 us + busbytes / 1 GB/s for groups of 2 and 4;
/// point-to-point 10 us + 1 GB/s; the host link 1 GB/s. fp32 rates only: a half precision has no
/// rate unless a test gives it one.
inline StepTimeHardware round_step_hardware(double gemm_rate = 1e9) {
  StepTimeHardware hw;
  hw.gemm[0] = {0, gemm_rate};
  hw.attention[0] = {0, 1e9};
  hw.memory = {0, 1e9};
  hw.collectives = {{2, LinkClass::intra_node, {1e-5, 1e9}}, {4, LinkClass::intra_node, {1e-5, 1e9}}};
  hw.p2p_intra = hw.p2p_inter = {1e-5, 1e9};
  hw.host_link = {0, 1e9};
  return hw;
}

/// round_step_hardware with every precision's GEMM and attention at 1 GFLOP/s, `memory_bytes` of
/// device memory and dense peaks of 2, 4 and 4 GFLOP/s (fp32, bf16, fp16).
inline PlannerHardware round_planner_hardware(double memory_bytes) {
  PlannerHardware h;
  h.hw = round_step_hardware();
  for (size_t p = 0; p < 3; ++p) h.hw.gemm[p] = h.hw.attention[p] = {0, 1e9};
  h.device_memory_bytes = memory_bytes;
  h.peak_flops = {2e9, 4e9, 4e9};
  return h;
}

/// L 1, C 4, NH `heads`, T 8, V 8; one sequence of s = 2 tokens (N = 2 rows), one micro-batch,
/// fp32: 316 parameters at one head.
inline StepTimeInput tiny_gpt(int heads = 1) {
  StepTimeInput in;
  in.model = GptConfig{.L = 1, .C = 4, .NH = heads, .T = 8, .V = 8};
  in.global_batch = 1;
  in.micro_batches = 1;
  in.seq_len = 2;
  return in;
}

}  // namespace dtb::test
