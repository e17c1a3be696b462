// Tensor, pipeline and data parallelism of the reference GPT against the single-rank model
// (reference/parallel_gpt.h, parallel_trainer.h). Runs in the multi-rank binary: every
// layout whose size is the world size (2 or 4 ranks) is checked.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/device.h"
#include "reference/parallel_trainer.h"
#include "reference/trainer.h"

namespace dtb {
namespace {

Dataset test_data() {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "It was the best of times, it was the worst of times, it was the age of wisdom, "
            "it was the age of foolishness. ";
  Dataset d;
  d.path = "inline";
  d.bytes.assign(text.begin(), text.end());
  return d;
}

// 4 layers (PP 4, or PP 2 with 2 virtual stages), 4 heads (TP 4), V 256 (divisible by 4).
const GptConfig kModel{4, 32, 4, 16, 256};

std::unique_ptr<Communicator> world() { return make_mpi_world(); }

double rel_diff(const std::vector<double>& a, const std::vector<double>& ref) {
  double s = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - ref[i]) * (a[i] - ref[i]), r += ref[i] * ref[i];
  return std::sqrt(s / r);
}

// The single-rank model's step-0 gradient and loss, every rank computing it alone.
template <typename T>
std::vector<double> baseline_grads(const TrainConfig& cfg, double* loss) {
  CpuDevice dev;
  Gpt<T> m(kModel, dev);
  m.init(cfg.seed);
  auto self = make_mpi_self();
  *loss = compute_gradients(m, test_data(), cfg, 0, *self);
  return {m.grads(), m.grads() + m.num_params()};
}

struct Result {
  std::vector<double> grads;
  double loss = 0, replica_diff = 0;
};

template <typename T>
Result layout_grads(const ParallelLayout& layout, const TrainConfig& cfg, Communicator& w) {
  CpuDevice dev;
  OwnedGroups og = make_parallel_groups(w, layout);
  ParallelGroups g{w, *og.tp, *og.dp, *og.pp};
  ParallelGpt<T> m(kModel, layout, w.rank(), dev, *og.tp);
  m.init(cfg.seed);
  Result r;
  r.loss = parallel_compute_gradients(m, test_data(), cfg, 0, g);
  r.grads = m.gather(m.grads(), w);
  r.replica_diff = m.replica_max_diff(m.grads(), w);
  return r;
}

// Every layout of n ranks worth checking, as "tp dp pp schedule v".
std::vector<ParallelLayout> layouts_of(int n) {
  std::vector<ParallelLayout> out;
  auto add = [&](int tp, int dp, int pp, const char* sched, int v) {
    ParallelLayout l;
    l.tp = tp, l.dp = dp, l.pp = pp, l.schedule = sched, l.virtual_stages = v;
    if (l.world() == n) out.push_back(l);
  };
  for (const char* s : {"gpipe", "1f1b"}) add(1, 1, n, s, 1);
  add(1, 1, 2, "interleaved", 2);
  add(n, 1, 1, "1f1b", 1);
  add(1, n, 1, "1f1b", 1);
  add(2, 2, 1, "1f1b", 1);
  add(2, 1, 2, "1f1b", 1);
  add(1, 2, 2, "1f1b", 1);
  add(1, 2, 2, "interleaved", 2);
  return out;
}

std::string describe(const ParallelLayout& l) {
  return "tp" + std::to_string(l.tp) + " dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " " +
         l.schedule + " v" + std::to_string(l.virtual_stages);
}

// With one rank, every op is gpt.cc's with the same arguments in the same order:
// the loss and gradient are bitwise the single-rank model's.
TEST(ParallelGpt, OneRankIsBitwiseTheBaseline) {
  auto self = make_mpi_self();
  TrainConfig cfg;
  cfg.global_batch = 4;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  double base_loss = 0;
  const std::vector<double> base = baseline_grads<float>(cfg, &base_loss);
  // Also two chunks on the one rank under the interleaved schedule: chunk 0 hands its
  // output to chunk 1 locally, and every parameter still accumulates its micro-batches in
  // the baseline's order (the tied wte: head of micro-batch 0, its embedding, then 1's).
  ParallelLayout two_chunks;
  two_chunks.schedule = "interleaved";
  two_chunks.virtual_stages = 2;
  for (const ParallelLayout& l : {ParallelLayout{}, two_chunks}) {
    SCOPED_TRACE(describe(l));
    const Result r = layout_grads<float>(l, cfg, *self);
    EXPECT_EQ(r.loss, base_loss);
    ASSERT_EQ(r.grads.size(), base.size());
    for (size_t i = 0; i < base.size(); ++i) ASSERT_EQ(r.grads[i], base[i]) << "element " << i;
  }
}

// Every layout's step-0 gradient and loss against the single-rank model's, in double: the
// two compute the same sums grouped differently (per TP shard, per micro-batch, per DP
// rank, then added), so each element differs by roundings of u = 1.1e-16 times the sizes
// of its terms, at most a few hundred of them: a relative norm difference of ~1e-14. The
// bound 1e-11 leaves three orders of magnitude; a wrong shard, a missing reduction or an
// average by the wrong count errs by 1e-3 or more. Copies of a replicated tensor (TP,
// DP, the tied embedding) must hold bitwise equal gradients.
TEST(ParallelGpt, EveryLayoutMatchesTheSingleRankGradient) {
  auto w = world();
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.micro_batches = 4;
  cfg.seq_len = 16;
  double base_loss = 0;
  const std::vector<double> base = baseline_grads<double>(cfg, &base_loss);
  const auto layouts = layouts_of(w->size());
  ASSERT_FALSE(layouts.empty());
  for (const ParallelLayout& l : layouts) {
    if (cfg.global_batch % (l.dp * cfg.micro_batches) || cfg.micro_batches % l.pp) continue;
    SCOPED_TRACE(describe(l));
    const Result r = layout_grads<double>(l, cfg, *w);
    EXPECT_LE(std::fabs(r.loss - base_loss), 1e-11 * base_loss);
    EXPECT_LE(rel_diff(r.grads, base), 1e-11);
    EXPECT_EQ(r.replica_diff, 0.0);
  }
}

// The tied-embedding trap: with PP 2, 4 micro-batches and 1F1B (and DP 2 x PP 2 on 4
// ranks), the input embedding's copy (first stage) and the LM head's (last stage) must both
// hold the sum of both uses after the step — bitwise equal to each other — and equal the
// baseline's wte gradient. float32: the two sums group 4 micro-batches' terms differently,
// each element off by a few roundings (u = 6e-8); 1e-6 relative bounds the norm of that.
TEST(ParallelGpt, TiedEmbeddingCopiesHoldTheSameSummedGradient) {
  auto w = world();
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.micro_batches = 4;
  cfg.seq_len = 16;
  ParallelLayout l;
  l.pp = 2;
  l.dp = w->size() / 2;
  double base_loss = 0;
  const std::vector<double> base = baseline_grads<float>(cfg, &base_loss);
  CpuDevice dev;
  OwnedGroups og = make_parallel_groups(*w, l);
  ParallelGroups g{*w, *og.tp, *og.dp, *og.pp};
  ParallelGpt<float> m(kModel, l, w->rank(), dev, *og.tp);
  m.init(cfg.seed);
  parallel_compute_gradients(m, test_data(), cfg, 0, g);
  ASSERT_NE(m.wte_grad(), nullptr);  // both stages hold wte
  const size_t n = m.wte_numel();
  std::vector<float> mine(m.wte_grad(), m.wte_grad() + n), other(n);
  const int peer = og.pp->rank() == 0 ? 1 : 0;
  og.pp->sendrecv(mine.data(), other.data(), n, DType::f32, peer, peer);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(mine[i], other[i]) << "wte grad element " << i;
  const size_t wte_n = size_t(kModel.V) * kModel.C;  // wte is first in the full layout
  std::vector<double> got(mine.begin(), mine.end()), want(base.begin(), base.begin() + wte_n);
  EXPECT_LE(rel_diff(got, want), 1e-6);
}

// Training: a few AdamW steps of TP 2 x PP 2 (or TP 2 / PP 2 on 2 ranks) in double follow
// the single-rank run: per-step losses within 1e-10 relative (the 1e-14 gradient
// differences above, passed through a few Adam updates, whose m / sqrt(v) is a ratio of
// smooth functions of the gradient for every element whose gradient is not ~0).
TEST(ParallelGpt, TrainingFollowsTheSingleRankRun) {
  auto w = world();
  TrainConfig cfg;
  cfg.steps = 3;
  cfg.global_batch = 4;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  ParallelLayout l;
  l.tp = 2;
  l.pp = w->size() / 2;
  CpuDevice dev;
  Gpt<double> base(kModel, dev);
  base.init(cfg.seed);
  auto self = make_mpi_self();
  const TrainRun ref = train(base, test_data(), cfg, *self);
  OwnedGroups og = make_parallel_groups(*w, l);
  ParallelGroups g{*w, *og.tp, *og.dp, *og.pp};
  ParallelGpt<double> m(kModel, l, w->rank(), dev, *og.tp);
  m.init(cfg.seed);
  const TrainRun run = parallel_train(m, test_data(), cfg, g);
  for (int s = 0; s < cfg.steps; ++s) EXPECT_LE(std::fabs(run.losses[s] - ref.losses[s]), 1e-10 * ref.losses[s]);
  EXPECT_EQ(m.replica_max_diff(m.params(), *w), 0.0);
}

}  // namespace
}  // namespace dtb
