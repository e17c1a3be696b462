// The ZB-H1 schedule (Qi et al. 2024; reference/parallel/pipeline_schedule.h) on the reference GPT: the
// backward split into B and W (ParallelGpt::backward_input / backward_weight) runs the whole
// backward's ops on the same operands, the W's in micro-batch order, so every loss, the step-0
// gradient and the final parameters are bitwise 1F1B's. Multi-rank binary (2 and 4 ranks).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "reference/model/test_dataset.h"

namespace dtb {
namespace {

// 4 layers (PP 2 or 4), 4 heads (TP 2), V 256.
const GptConfig kModel{4, 32, 4, 16, 256};

struct Case {
  std::string name;
  int tp, dp, pp, zero;
  Recompute recompute = Recompute::none;
  Precision precision = Precision::fp32;
};

LayoutOutcome run(const Case& c, const std::string& schedule, Communicator& w) {
  TrainConfig cfg;
  cfg.steps = 4;
  cfg.global_batch = 8;
  cfg.micro_batches = 8 / c.dp;  // m >= p on every layout here
  cfg.seq_len = 16;
  cfg.adamw.lr = 1e-2f;
  ParallelLayout l;
  l.tp = c.tp, l.dp = c.dp, l.pp = c.pp, l.schedule = schedule;
  ZeroConfig z;
  z.stage = c.zero;
  CpuDevice dev;
  const Dataset data = test_data();
  return run_layout({.model = kModel, .layout = {.l = l, .z = z, .recompute = c.recompute, .precision = c.precision},
                     .train = cfg, .device = dev, .host = w, .data = data, .gather = true});
}

size_t differing(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(ZeroBubble, TrainsBitwiseAs1F1B) {
  auto w = make_mpi_world();
  const std::vector<Case> all = {
      {"PP2", 1, 1, 2, 0},
      {"PP2 selective", 1, 1, 2, 0, Recompute::selective},
      {"PP2 bf16", 1, 1, 2, 0, Recompute::none, Precision::bf16},
      {"PP4", 1, 1, 4, 0},
      {"PP2xDP2 zero1", 1, 2, 2, 1},
      {"PP2xDP2 zero2", 1, 2, 2, 2},
      {"PP2xDP2 zero3", 1, 2, 2, 3},
      {"TP2xPP2", 2, 1, 2, 0},
  };
  int ran = 0;
  for (const Case& c : all) {
    if (c.tp * c.dp * c.pp != w->size()) continue;
    SCOPED_TRACE(c.name);
    const LayoutOutcome one = run(c, "1f1b", *w);
    const LayoutOutcome zb = run(c, "zb-h1", *w);
    EXPECT_EQ(zb.losses, one.losses);
    if (w->rank() == 0) {
      ASSERT_FALSE(one.grads0.empty());
      EXPECT_EQ(differing(zb.grads0, one.grads0), 0u);
      EXPECT_EQ(differing(zb.params, one.params), 0u);
    }
    EXPECT_EQ(zb.replica_grads0, 0.0);
    EXPECT_EQ(zb.replica_params, 0.0);
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// What ZB-H1 does not take yet, refused before any rank computes: full recompute (W needs the
// activations B used), sequence parallelism, an MoE model, virtual stages.
TEST(ZeroBubble, RefusesWhatItDoesNotSplit) {
  auto w = make_mpi_world();
  if (w->size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  auto message = [&](const Case& c, const std::string& schedule) {
    try {
      run(c, schedule, *w);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({"PP2 full", 1, 1, 2, 0, Recompute::full}, "zb-h1").find("schedule zb-h1 with recompute full"),
            std::string::npos);
  ParallelLayout l;
  l.tp = 2, l.schedule = "zb-h1", l.sequence_parallel = true;
  auto refused = [&](const ParallelLayout& lay, const GptConfig& m) {
    try {
      validate_layout(lay, m, 8, int(lay.world()), 16);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(l, kModel).find("zb-h1 with sequence_parallel"), std::string::npos);
  l.sequence_parallel = false, l.tp = 1, l.dp = 2;
  GptConfig moe = kModel;
  moe.moe.num_experts = 2;
  EXPECT_NE(refused(l, moe).find("zb-h1 with an MoE model"), std::string::npos);
  l.virtual_stages = 2;
  EXPECT_NE(refused(l, kModel).find("virtual_stages = 2 needs schedule \"interleaved\""), std::string::npos);
}

}  // namespace
}  // namespace dtb
