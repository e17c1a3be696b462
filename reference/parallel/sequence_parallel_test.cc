// Sequence parallelism (Korthikanti et al. 2022; reference/parallel/tensor_parallel.h's
// sequence-parallel mappings, ParallelGpt under layout.sequence_parallel) against the
// single-rank model, in the multi-rank binary (2 and 4 ranks).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "reference/parallel/parallel_test_util.h"
#include "reference/parallel/tensor_parallel.h"

namespace dtb {
namespace {

// 4 layers (PP 2), 4 heads (TP 2 or 4), V 256.
const GptConfig kModel{4, 32, 4, 16, 256};

std::string describe(const ParallelLayout& l, int zero, Recompute r) {
  return "tp" + std::to_string(l.tp) + " dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " zero" +
         std::to_string(zero) + " recompute " + std::string(to_string(r));
}

// The sequence-parallel layouts of n ranks: TP over all of them, and TP 2 with DP 2 or PP 2.
std::vector<ParallelLayout> sp_layouts(int n) {
  std::vector<ParallelLayout> out;
  auto add = [&](int tp, int dp, int pp) {
    ParallelLayout l;
    l.tp = tp, l.dp = dp, l.pp = pp, l.sequence_parallel = true;
    if (l.world() == n && kModel.NH % tp == 0) out.push_back(l);
  };
  add(n, 1, 1);
  add(2, 2, 1);
  add(2, 1, 2);
  return out;
}

// g-bar and its conjugate move whole rank blocks: small integers, so every sum is exact.
// Forward gather: rank r's block r of the full buffer; backward: block r of the sum over
// ranks. reduce-scatter's forward is the gather's backward and the other way round.
TEST(SequenceParallel, MappingsGatherAndReduceScatterRankBlocks) {
  auto w = make_mpi_world();
  const int n = w->size(), r = w->rank();
  const size_t block = 6;
  CpuOps<float> ops;
  std::vector<float> local(block), full(block * size_t(n));
  for (size_t i = 0; i < block; ++i) local[i] = float(100 * r + int(i));
  gather_from_sequence_parallel_region<float>(Pass::forward, ops, *w, full.data(), local.data(), block);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < block; ++i) ASSERT_EQ(full[size_t(q) * block + i], float(100 * q + int(i)));
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(r + 1) * float(i);  // rank r's partial: (r + 1) i
  gather_from_sequence_parallel_region<float>(Pass::backward, ops, *w, full.data(), local.data(), block);
  const float ranks_sum = float(n * (n + 1) / 2);  // sum over ranks of (r + 1)
  for (size_t i = 0; i < block; ++i) ASSERT_EQ(local[i], ranks_sum * float(size_t(r) * block + i));
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(r + 1) * float(i);
  reduce_scatter_to_sequence_parallel_region<float>(Pass::forward, ops, *w, full.data(), local.data(), block);
  for (size_t i = 0; i < block; ++i) ASSERT_EQ(local[i], ranks_sum * float(size_t(r) * block + i));
  for (size_t i = 0; i < block; ++i) local[i] = float(-r);
  reduce_scatter_to_sequence_parallel_region<float>(Pass::backward, ops, *w, full.data(), local.data(), block);
  for (int q = 0; q < n; ++q) ASSERT_EQ(full[size_t(q) * block], float(-q));
}

// Every sequence-parallel layout's step-0 gradient and loss against the single-rank model's,
// in double, under ZeRO 0 and 1 and full recompute: the sums are grouped differently (each
// LayerNorm's weight and bias gradients over a TP rank's rows, then over TP, per
// micro-batch), each element off by roundings of u = 1.1e-16 times its few hundred terms: a
// relative norm difference of ~1e-14, as for every other layout (parallel_trainer_test.cc's
// bound 1e-11). Without the LayerNorm gradients' sum over TP (Megatron-LM #1446) each TP rank
// holds only its rows' share of them: the gradient errs by 5e-3 to 8e-3 relative (measured at
// 4 ranks, 2026-12-04) and the TP copies of every LayerNorm differ.
TEST(SequenceParallel, MatchesTheSingleRankGradient) {
  auto w = make_mpi_world();
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.micro_batches = 4;
  cfg.seq_len = 16;
  double base_loss = 0;
  const std::vector<double> base = baseline_grads<double>(kModel, cfg, &base_loss);
  ZeroConfig z1;
  z1.stage = 1;
  const auto layouts = sp_layouts(w->size());
  ASSERT_FALSE(layouts.empty());
  for (const ParallelLayout& l : layouts)
    for (const ZeroConfig& z : {ZeroConfig{}, z1})
      for (Recompute rc : {Recompute::none, Recompute::full}) {
        SCOPED_TRACE(describe(l, z.stage, rc));
        const LayoutGrads r = layout_grads<double>(kModel, l, cfg, *w, z, rc);
        EXPECT_LE(std::fabs(r.loss - base_loss), 1e-11 * base_loss);
        EXPECT_LE(rel_diff(r.grads, base), 1e-11);
        EXPECT_EQ(r.replica_diff, 0.0);
      }
}

// Recomputation runs the same ops, gathers and reduce-scatters on the same values: full and
// selective are bitwise none under sequence parallelism too (float).
TEST(SequenceParallel, RecomputeIsBitwiseNone) {
  auto w = make_mpi_world();
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  for (const ParallelLayout& l : sp_layouts(w->size())) {
    const LayoutGrads none = layout_grads<float>(kModel, l, cfg, *w);
    for (Recompute rc : {Recompute::selective, Recompute::full}) {
      SCOPED_TRACE(describe(l, 0, rc));
      const LayoutGrads r = layout_grads<float>(kModel, l, cfg, *w, ZeroConfig{}, rc);
      EXPECT_EQ(r.loss, none.loss);
      ASSERT_EQ(r.grads.size(), none.grads.size());
      size_t differ = 0;
      for (size_t i = 0; i < none.grads.size(); ++i) differ += r.grads[i] != none.grads[i];
      EXPECT_EQ(differ, 0u);
    }
  }
}

// The layout's rules: sequence parallelism needs TP above 1, a dense model and a micro-batch
// whose tokens divide over TP.
TEST(SequenceParallel, RefusesALayoutItCannotSplit) {
  ParallelLayout l;
  l.sequence_parallel = true;
  l.dp = 2;
  auto message = [&](const GptConfig& m, int seq_len) {
    try {
      validate_layout(l, m, 8, int(l.world()), seq_len);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(kModel, 16).find("sequence_parallel needs tensor_parallel > 1"), std::string::npos);
  l.tp = 2, l.dp = 1;
  EXPECT_EQ(message(kModel, 16), "");
  // 8 sequences in 8 micro-batches: one sequence of 3 tokens per micro-batch.
  l.micro_batches = 8;
  EXPECT_NE(message(kModel, 3).find("a micro-batch's 3 tokens (1 sequences x seq_len 3) are not divisible"),
            std::string::npos);
  l.micro_batches = 1;
  GptConfig moe = kModel;
  moe.moe.num_experts = 4;
  EXPECT_NE(message(moe, 16).find("with an MoE model"), std::string::npos);
}

}  // namespace
}  // namespace dtb
