// Expert parallelism of the reference MoE GPT against the single-rank model (reference/model/moe.h,
// parallel_gpt.h, zero.h, process_grid.h). Runs in the multi-rank binary: every expert-parallel
// layout of the world's size (2 or 4 ranks) is checked, alone and with PP and ZeRO, in double.
// Two bugs users met are among what these tests catch: expert gradients twice their value at
// expert parallelism 2 (DeepSpeed PR #5259: summed over the expert-data-parallel group but
// scaled by its size instead of the DP group's) and a gradient norm that under-counts experts
// (Megatron-LM PR #5916: expert parameters counted on one group only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "reference/parallel/parallel_test_util.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/model/test_dataset.h"
#include "reference/training/trainer.h"

namespace dtb {
namespace {

// 4 layers, MoE in layers 0 and 2 (moe_layer_freq 2: dense 1 and 3 between), 4 experts top-2
// (EP 4 holds one each), capacity factor 1 (tokens are dropped: asserted below), both losses.
GptConfig moe_model() {
  GptConfig m{4, 32, 4, 16, 256};
  m.moe.num_experts = 4, m.moe.topk = 2, m.moe.capacity_factor = 1.0;
  m.moe.aux_loss_coeff = 0.01, m.moe.z_loss_coeff = 1e-3;
  m.moe_layer_freq = 2;
  return m;
}

// The MoE Llama of the same shape (Mixtral's SwiGLU experts, no biases; KV 2 of NH 4, dense F 48,
// expert F 40): moe_layer_config.
GptConfig moe_llama() {
  GptConfig m = moe_model();
  m.arch = ModelArch::llama, m.num_kv_heads = 2, m.ffn_hidden = 48, m.moe.ffn_hidden = 40;
  return m;
}

TrainConfig small_batch() {
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  return cfg;
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& ref, size_t begin, size_t end) {
  double s = 0, r = 0;
  for (size_t i = begin; i < end; ++i) s += (a[i] - ref[i]) * (a[i] - ref[i]), r += ref[i] * ref[i];
  return std::sqrt(s / r);
}

// [begin, end) of the experts' tensors (expfcw .. expprojb, or the Llama's expfcw, expprojw) in
// the full flat layout: the layout's last ones.
std::pair<size_t, size_t> expert_range(const GptConfig& m) {
  size_t begin = 0, end = 0;
  for (const ParamTensor& t : gpt_param_layout(m)) {
    if (t.name == "expfcw") begin = t.offset;
    end = t.offset + t.numel;
  }
  return {begin, end};
}

struct Case {
  std::string name;
  ParallelLayout layout;
  int stage = 0;
};

// Every expert-parallel layout of n ranks worth checking.
std::vector<Case> cases_of(int n) {
  std::vector<Case> out;
  auto add = [&](int dp, int ep, int pp, const char* sched, int v, int stage, int tp = 1) {
    Case c;
    c.layout.tp = tp, c.layout.dp = dp, c.layout.ep = ep, c.layout.pp = pp, c.layout.schedule = sched;
    c.layout.virtual_stages = v;
    c.stage = stage;
    c.name = "TP" + std::to_string(tp) + " DP" + std::to_string(dp) + " EP" + std::to_string(ep) + " PP" +
             std::to_string(pp) + " " + sched + " v" + std::to_string(v) + " zero" + std::to_string(stage);
    if (c.layout.world() == n) out.push_back(c);
  };
  add(2, 2, 1, "1f1b", 1, 0);
  add(2, 2, 1, "1f1b", 1, 2);
  add(4, 2, 1, "1f1b", 1, 0);  // expert-data-parallel groups of 2
  add(4, 4, 1, "1f1b", 1, 0);  // one expert per rank
  for (int stage : {1, 2, 3}) add(4, 2, 1, "1f1b", 1, stage);
  add(2, 2, 2, "1f1b", 1, 0);
  add(2, 2, 2, "interleaved", 2, 0);
  add(2, 2, 2, "1f1b", 1, 2);
  // With TP the MoE layer is replicated over the TP group (router and experts owned by TP rank 0).
  add(2, 2, 1, "1f1b", 1, 0, 2);
  add(2, 2, 1, "1f1b", 1, 2, 2);
  return out;
}

// The single-rank step-0 gradient (parallel_test_util.h's baseline_grads), and the tokens the
// first MoE layer dropped in it.
template <typename T>
std::vector<double> baseline_grads_dropping(const GptConfig& model, const TrainConfig& cfg, double* loss, int* dropped) {
  CpuDevice dev;
  Gpt<T> m(model, dev);
  m.init(cfg.seed);
  auto self = make_mpi_self();
  *loss = compute_gradients(m, test_data(), cfg, 0, *self);
  *dropped = m.moe_routing(0).dropped;
  return {m.grads(), m.grads() + m.num_params()};
}

using Result = LayoutGrads;

// Step 0's gradient of `model` on a case's layout, gathered to every rank, and the norm the
// optimizer step computes (each element counted once over the grid): parallel_test_util.h's.
template <typename T>
Result layout_grads(const GptConfig& model, const Case& c, const TrainConfig& cfg, Communicator& w,
                    Recompute recompute = Recompute::none) {
  ParallelLayout l = c.layout;
  l.micro_batches = cfg.micro_batches;
  validate_layout(l, model, cfg.global_batch, w.size());
  ZeroConfig z;
  z.stage = c.stage;
  return dtb::layout_grads<T>(model, l, cfg, w, z, recompute);
}

// With one rank the sharded model runs gpt.cc's ops with the same arguments in the same order,
// the MoE layer's included (moe_forward with no expert-parallel group): bitwise equal.
TEST(ExpertParallel, OneRankIsBitwiseTheGptModel) {
  auto self = make_mpi_self();
  const TrainConfig cfg = small_batch();
  for (const GptConfig& model : {moe_model(), moe_llama()}) {
    SCOPED_TRACE(to_string(model.arch));
    double base_loss = 0;
    const std::vector<double> base = baseline_grads<float>(model, cfg, &base_loss);
    const Result r = layout_grads<float>(model, Case{"one rank", ParallelLayout{}, 0}, cfg, *self);
    EXPECT_EQ(r.loss, base_loss);
    ASSERT_EQ(r.grads.size(), base.size());
    for (size_t i = 0; i < base.size(); ++i) ASSERT_EQ(r.grads[i], base[i]) << "element " << i;
  }
}

// Every expert-parallel layout's step-0 loss and gradient against the single-rank model's, in
// double. The two compute the same sums grouped differently (per micro-batch, per DP rank, an
// expert's rows from several ranks in one call), so an element differs by roundings of
// u = 1.1e-16 times its terms' sizes, a few hundred at most: ~1e-14 relative. The bound 1e-11
// leaves three orders of magnitude; the expert gradients are held to it alone, where doubling
// them (DeepSpeed #5259) errs by 1, a wrong expert's rows or a missed dispatch by O(1). The norm
// (each element once: experts on their expert-data-parallel rank 0, every shard at ZeRO 2-3)
// sums the same squares in another order: 1e-12; an expert shard counted on one group only
// (Megatron-LM #5916) or twice changes it by 5e-3 or more (measured). Replicated copies (the router and the
// dense tensors over DP, each expert over its expert-data-parallel group) must be bitwise equal.
// The MoE Llama (SwiGLU experts) takes every layout too, under the same bounds: a wrong shard of
// an expert's gate and up rows, or an expert gradient not reduced over its expert-data-parallel
// group, errs by O(1).
void every_layout_matches(const GptConfig& model) {
  auto w = make_mpi_world();
  const TrainConfig cfg = small_batch();
  double base_loss = 0;
  int dropped = 0;
  const std::vector<double> base = baseline_grads_dropping<double>(model, cfg, &base_loss, &dropped);
  EXPECT_GT(dropped, 0);  // capacity drops are part of what every layout must reproduce
  double sq = 0;
  for (double x : base) sq += x * x;
  const double base_norm = std::sqrt(sq);
  const auto [e0, e1] = expert_range(model);
  const auto cases = cases_of(w->size());
  ASSERT_FALSE(cases.empty());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Result r = layout_grads<double>(model, c, cfg, *w);
    if (w->rank() == 0)
      std::printf("ep %s %s: loss %.1e, gradient %.1e, experts' %.1e, norm %.1e (relative to one rank)\n", to_string(model.arch), c.name.c_str(),
                  std::fabs(r.loss - base_loss) / base_loss, rel_diff(r.grads, base, 0, base.size()),
                  rel_diff(r.grads, base, e0, e1), std::fabs(r.grad_norm - base_norm) / base_norm);
    EXPECT_LE(std::fabs(r.loss - base_loss), 1e-11 * base_loss);
    EXPECT_LE(rel_diff(r.grads, base, 0, base.size()), 1e-11);
    EXPECT_LE(rel_diff(r.grads, base, e0, e1), 1e-11) << "the experts' gradients";
    EXPECT_LE(std::fabs(r.grad_norm - base_norm), 1e-12 * base_norm);
    EXPECT_EQ(r.replica_diff, 0.0);
  }
}
TEST(ExpertParallel, EveryLayoutMatchesTheSingleRankGradientAndNorm) { every_layout_matches(moe_model()); }
TEST(ExpertParallel, MoeLlamaEveryLayoutMatchesTheSingleRankGradientAndNorm) { every_layout_matches(moe_llama()); }

// Training with clipping through the layout runner follows the single-rank run, in double: the
// losses (the MoE balance and z losses of every stage included) within 1e-10 after three AdamW
// steps (the step-0 differences of ~1e-14 grow through AdamW's normalisation, far below this),
// the final parameters alike, every replica bitwise equal.
TEST(ExpertParallel, ClippedTrainingFollowsTheSingleRankRun) {
  auto w = make_mpi_world();
  const GptConfig model = moe_model();
  TrainConfig cfg = small_batch();
  cfg.steps = 3;
  cfg.grad_clip = 0.05;
  CpuDevice dev;
  Gpt<double> base(model, dev);
  base.init(cfg.seed);
  auto self = make_mpi_self();
  const TrainRun ref = train(base, test_data(), cfg, DpSync{}, *self);
  const std::vector<double> ref_params(base.params(), base.params() + base.num_params());
  for (const Case& c : cases_of(w->size())) {
    SCOPED_TRACE(c.name);
    // The runner trains in fp32; the double model is driven the same way by hand.
    CpuDevice d;
    ParallelLayout l = c.layout;
    l.micro_batches = cfg.micro_batches;
    OwnedGroups og = make_parallel_groups(*w, l);
    ParallelGroups g{*w, *og.tp, *og.dp, *og.pp, og.pp_backward.get(), og.ep.get(), og.expert_dp.get()};
    ParallelGpt<double> m(model, l, w->rank(), d, *og.tp, nullptr, og.ep.get());
    ZeroConfig z;
    z.stage = c.stage;
    ZeroEngine<double> engine(m, z, *og.dp, cfg.adamw, og.expert_dp.get());
    engine.load(m.initial_params(cfg.seed));
    const TrainRun run = parallel_train(m, engine, test_data(), cfg, DpSync{}, g);
    ASSERT_EQ(run.losses.size(), ref.losses.size());
    for (int s = 0; s < cfg.steps; ++s) {
      EXPECT_GT(ref.grad_norms[size_t(s)], cfg.grad_clip);  // clipping is active
      EXPECT_LE(std::fabs(run.grad_norms[size_t(s)] - ref.grad_norms[size_t(s)]), 1e-10 * ref.grad_norms[size_t(s)]);
      EXPECT_LE(std::fabs(run.losses[size_t(s)] - ref.losses[size_t(s)]), 1e-10 * ref.losses[size_t(s)]);
    }
    const std::vector<double> p = engine.full_params();
    const std::vector<double> full = m.gather(p, *w);
    EXPECT_LE(rel_diff(full, ref_params, 0, full.size()), 1e-10);
    EXPECT_EQ(m.replica_max_diff(p, *w), 0.0);
  }
}

// Full recompute (each layer's input kept, the layer run again in backward: an MoE layer routes,
// dispatches and combines its tokens again) and selective recompute give bitwise the loss and
// gradient of keeping every activation, in every layout (the same ops on the same values; the
// expert-parallel ranks recompute the same micro-batch in the same schedule slot), and the
// runner counts a step's routing once under full recompute, as without it.
TEST(ExpertParallel, RecomputeIsBitwiseKeepingEveryActivation) {
  auto w = make_mpi_world();
  const GptConfig model = moe_model();
  const TrainConfig cfg = small_batch();
  for (const Case& c : cases_of(w->size())) {
    SCOPED_TRACE(c.name);
    const Result kept = layout_grads<float>(model, c, cfg, *w);
    for (Recompute rc : {Recompute::full, Recompute::selective}) {
      SCOPED_TRACE(std::string(to_string(rc)));
      const Result r = layout_grads<float>(model, c, cfg, *w, rc);
      EXPECT_EQ(r.loss, kept.loss);
      EXPECT_EQ(r.grad_norm, kept.grad_norm);
      ASSERT_EQ(r.grads.size(), kept.grads.size());
      size_t differ = 0;
      for (size_t i = 0; i < r.grads.size(); ++i) differ += r.grads[i] != kept.grads[i];
      EXPECT_EQ(differ, 0u) << "gradient elements not bitwise equal";
    }
  }
  if (w->size() % 2) return;  // the counts below: expert parallel 2
  TrainConfig two = cfg;
  two.steps = 2;
  ParallelLayout l;
  l.dp = w->size(), l.ep = 2;
  std::vector<std::vector<double>> counts[2];
  for (int i = 0; i < 2; ++i) {
    CpuDevice dev;
    counts[i] = run_layout({.model = model, .layout = {.l = l, .recompute = i ? Recompute::full : Recompute::none},
                            .train = two, .device = dev, .host = *w, .data = test_data()})
                    .moe_counts;
  }
  EXPECT_EQ(counts[1], counts[0]) << "full recompute counted the routing again";
}

// The runner's per-step routing counts (LayoutOutcome::moe_counts, what the moe suite reports):
// summed over ranks, every MoE layer's assignments of a step are the global batch's tokens times
// top-k, once (TP ranks repeat the tokens and must not count them again), and a layout with
// expert parallelism spends time in dispatch and combine.
TEST(ExpertParallel, TheRunnerCountsEachStepsAssignmentsOnce) {
  auto w = make_mpi_world();
  if (w->size() != 4) GTEST_SKIP() << "layouts of 4 ranks";
  const GptConfig model = moe_model();
  TrainConfig cfg = small_batch();
  cfg.steps = 2;
  const int E = model.moe.num_experts, Lm = num_moe_layers(model);
  for (const auto& [tp, dp, pp] : {std::tuple{1, 4, 1}, std::tuple{2, 2, 1}, std::tuple{1, 2, 2}}) {
    ParallelLayout l;
    l.tp = tp, l.dp = dp, l.pp = pp, l.ep = 2;
    SCOPED_TRACE("tp " + std::to_string(tp) + " dp " + std::to_string(dp) + " pp " + std::to_string(pp));
    CpuDevice dev;
    const LayoutOutcome out = run_layout({.model = model, .layout = {.l = l}, .train = cfg, .device = dev, .host = *w,
                                          .data = test_data()});
    ASSERT_EQ(out.moe_counts.size(), size_t(cfg.steps));
    ASSERT_EQ(out.moe_all_to_all_s.size(), size_t(cfg.steps));
    for (int s = 0; s < cfg.steps; ++s) {
      std::vector<double> c = out.moe_counts[size_t(s)];
      ASSERT_EQ(c.size(), size_t(Lm) * size_t(E + 1));
      w->all_reduce(c.data(), c.data(), c.size(), DType::f64, ReduceOp::sum);
      for (int i = 0; i < Lm; ++i) {
        double assigned = 0;
        for (int e = 0; e < E; ++e) assigned += c[size_t(i * (E + 1) + e)];
        EXPECT_EQ(assigned, double(cfg.global_batch) * cfg.seq_len * model.moe.topk) << "layer " << i;
        EXPECT_GT(c[size_t(i * (E + 1) + E)], 0.0) << "capacity factor 1 drops";
      }
      EXPECT_GT(out.moe_all_to_all_s[size_t(s)], 0.0);
    }
  }
}

// The layout runner composes expert parallelism (its groups, the engine's expert-data-parallel
// group) and refuses what does not divide, in one line naming the numbers.
TEST(ExpertParallel, TheLayoutRunnerTrainsItAndRefusesWhatDoesNotDivide) {
  auto w = make_mpi_world();
  if (w->size() != 4) GTEST_SKIP() << "a layout of 4 ranks";
  const GptConfig model = moe_model();
  TrainConfig cfg = small_batch();
  cfg.steps = 2;
  CpuDevice dev;
  ParallelLayout l;
  l.dp = 4, l.ep = 2;
  const LayoutOutcome out = run_layout({.model = model, .layout = {.l = l}, .train = cfg, .device = dev, .host = *w,
                                        .data = test_data(), .gather = true});
  EXPECT_EQ(out.losses.size(), 2u);
  EXPECT_EQ(out.replica_params, 0.0);
  auto refused = [&](ParallelLayout bad, const GptConfig& m, const std::string& what) {
    try {
      run_layout({.model = m, .layout = {.l = bad}, .train = cfg, .device = dev, .host = *w, .data = test_data()});
      ADD_FAILURE() << "not refused: " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  ParallelLayout three = l;
  three.ep = 3, three.dp = 4;
  refused(three, model, "expert_parallel = 3 does not divide data_parallel = 4");
  GptConfig six = model;
  six.moe.num_experts = 6;
  ParallelLayout four = l;
  four.ep = 4;
  refused(four, six, "model.num_experts = 6 experts are not divisible by expert_parallel = 4");
  GptConfig dense = model;
  dense.moe = dense_moe();
  refused(l, dense, "expert_parallel = 2 needs an MoE model");
}

}  // namespace
}  // namespace dtb
