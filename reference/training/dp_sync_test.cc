// Stale-gradient DP (with DC-ASGD's delay compensation) and DiLoCo's local steps in the
// parallel trainer (reference/training/dp_sync.h) against their sequential one-rank references
// (reference/training/trainer.cc train): the same recipe, implemented twice. Runs in the multi-rank
// binary: DP over the world (2 or 4 ranks), in double.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/training/dp_sync.h"
#include "reference/parallel/parallel_test_util.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/model/test_dataset.h"
#include "reference/training/trainer.h"

namespace dtb {
namespace {

const GptConfig kModel{2, 32, 4, 16, 256};

struct SyncRun {
  std::vector<double> losses, grad_norms, params;
  double dp_bytes = 0;
  int adam_steps = 0;
};

// 8 steps of 4 sequences per DP rank in 2 micro-batches; lr 1e-2 so that the recipes move the
// weights apart measurably within 8 steps.
TrainConfig config(int world) {
  TrainConfig cfg;
  cfg.steps = 8;
  cfg.global_batch = 4 * world;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  cfg.adamw.lr = 1e-2f;
  cfg.grad_clip = 1.0;  // on: each recipe's norm feeds its update
  return cfg;
}

// Recipe `d` over `world` DP ranks: DiLoCo's replicas are the ranks.
DpSync recipe(int world, DpSync d = {}) {
  d.replicas = d.local_steps > 0 ? world : 1;
  return d;
}

// The parallel trainer on DP = the world, ZeRO 0, the full parameters gathered on every rank.
template <typename T>
SyncRun parallel_run(const TrainConfig& cfg, const DpSync& sync, Communicator& w) {
  CpuDevice dev;
  ParallelLayout l;
  l.dp = w.size();
  OwnedGroups og = make_parallel_groups(w, l);
  ParallelGroups g{w, *og.tp, *og.dp, *og.pp};
  ParallelGpt<T> m(kModel, l, w.rank(), dev, *og.tp);
  ZeroEngine<T> engine(m, ZeroConfig{}, *og.dp, cfg.adamw);
  engine.load(m.initial_params(cfg.seed));
  const TrainRun r = parallel_train(m, engine, test_data(), cfg, sync, g);
  return {r.losses, r.grad_norms, m.gather(engine.full_params(), w), double(engine.comm_stats().bytes),
          engine.steps_taken()};
}

// The sequential reference: the single-rank Gpt<double> on every rank alone.
SyncRun reference_run(const TrainConfig& cfg, const DpSync& sync) {
  CpuDevice dev;
  Gpt<double> m(kModel, dev);
  m.init(cfg.seed);
  auto self = make_mpi_self();
  const TrainRun r = train(m, test_data(), cfg, sync, *self);
  return {r.losses, r.grad_norms, {m.params(), m.params() + m.num_params()}, 0, 0};
}

// The bounds of Zero.StagesAgreeWithZeroZeroOverEightAdamSteps (parallel_trainer_test.cc), whose
// analysis holds here: the two implementations differ by the order of the DP sums (the
// gradient's, the loss's, DiLoCo's weight average), ~1e-16 relative in double; 8 Adam steps
// (lr 1e-2) move a parameter by at most ~1e-16 / (sqrt(v) + eps) x lr per step from that; the
// compensation term and the outer step (eta 0.7, Nesterov mu 0.9: |update| <= 1.6 eta |Delta|)
// are elementwise and carry the same relative rounding. So 1e-10 (loss, norm) and 1e-9
// (parameters) hold with room, while a wrong recipe errs by 1e-4 or more (RecipesDifferFromSynchronousTraining; measured: the
// two implementations agree to 3e-16 in the loss and 1.3e-14 in the parameters at 2 and 4 ranks).
void expect_agree(const SyncRun& par, const SyncRun& ref) {
  ASSERT_EQ(par.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_LE(std::fabs(par.losses[s] - ref.losses[s]), 1e-10 * ref.losses[s]) << "step " << s;
    if (std::isnan(ref.grad_norms[s])) {
      EXPECT_TRUE(std::isnan(par.grad_norms[s])) << "step " << s;
    } else {
      EXPECT_LE(std::fabs(par.grad_norms[s] - ref.grad_norms[s]), 1e-10 * ref.grad_norms[s]) << "step " << s;
    }
  }
  EXPECT_LE(rel_diff(par.params, ref.params), 1e-9);
}

TEST(DpSync, StaleGradientsMatchTheSequentialReference) {
  auto w = make_mpi_world();
  for (int k : {1, 2})
    for (double lambda : {0.0, 1.0}) {
      SCOPED_TRACE("staleness " + std::to_string(k) + " lambda " + std::to_string(lambda));
      const TrainConfig cfg = config(w->size());
      const DpSync d = recipe(w->size(), {.staleness = k, .delay_compensation = lambda});
      const SyncRun par = parallel_run<double>(cfg, d, *w), ref = reference_run(cfg, d);
      expect_agree(par, ref);
      for (int s = 0; s < cfg.steps; ++s) EXPECT_EQ(std::isnan(ref.grad_norms[s]), s < k) << "step " << s;
      EXPECT_EQ(par.adam_steps, cfg.steps - k);  // no update before step k
      // One async all-reduce of the N-element gradient per step, all counted.
      EXPECT_EQ(par.dp_bytes, double(cfg.steps) * double(par.params.size()) * sizeof(double));
    }
}

TEST(DpSync, LocalStepsMatchTheSequentialReference) {
  auto w = make_mpi_world();
  for (int H : {2, 4}) {
    SCOPED_TRACE("local steps " + std::to_string(H));
    const TrainConfig cfg = config(w->size());
    const DpSync d = recipe(w->size(), {.local_steps = H});
    const SyncRun par = parallel_run<double>(cfg, d, *w), ref = reference_run(cfg, d);
    expect_agree(par, ref);
    EXPECT_EQ(par.adam_steps, cfg.steps);
    // One all-reduce of the N weights per outer step, nothing else over DP.
    EXPECT_EQ(par.dp_bytes, double(cfg.steps / H) * double(par.params.size()) * sizeof(double));
  }
}

// Staleness 0 is synchronous training, bitwise, whatever the other (unused) fields say.
TEST(DpSync, StalenessZeroIsBitwiseSynchronous) {
  auto w = make_mpi_world();
  const TrainConfig cfg = config(w->size());
  const DpSync sync = recipe(w->size());
  DpSync zero = sync;
  zero.staleness = 0;
  zero.outer_lr = 0.3;
  zero.outer_momentum = 0.5;
  zero.replicas = w->size();
  ASSERT_TRUE(sync.synchronous() && zero.synchronous());
  const SyncRun a = parallel_run<float>(cfg, sync, *w), b = parallel_run<float>(cfg, zero, *w);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  EXPECT_EQ(a.params, b.params);
  const SyncRun ra = reference_run(cfg, sync), rb = reference_run(cfg, zero);
  EXPECT_EQ(ra.losses, rb.losses);
  EXPECT_EQ(ra.params, rb.params);
}

// Each recipe moves training measurably away from synchronous DP (and compensation away from
// plain staleness), by far more than expect_agree's bounds: a test suite that passed with a
// recipe silently off would be worthless.
TEST(DpSync, RecipesDifferFromSynchronousTraining) {
  auto w = make_mpi_world();
  const int n = w->size();
  const TrainConfig cfg = config(n);
  const SyncRun sync = reference_run(cfg, recipe(n));
  auto differ = [](const SyncRun& a, const SyncRun& b) { return rel_diff(a.params, b.params); };
  for (int k : {1, 2}) {
    const SyncRun plain = parallel_run<double>(cfg, recipe(n, {.staleness = k}), *w);
    const SyncRun dc = parallel_run<double>(cfg, recipe(n, {.staleness = k, .delay_compensation = 1.0}), *w);
    EXPECT_GT(differ(plain, sync), 1e-4) << "staleness " << k;
    EXPECT_GT(differ(dc, plain), 1e-6) << "staleness " << k << ": compensation";
  }
  for (int H : {2, 4}) EXPECT_GT(differ(parallel_run<double>(cfg, recipe(n, {.local_steps = H}), *w), sync), 1e-4);
}

// The recipes' refusals, each in one line naming the key and value.
TEST(DpSync, RefusesWhatIsNotARecipe) {
  auto bad = [](DpSync d, int steps = 8) {
    TrainConfig cfg = config(4);
    cfg.steps = steps;
    EXPECT_THROW(validate_dp_sync(d, Precision::fp32, cfg, "train"), InputError);
  };
  bad({.staleness = -1});
  bad({.local_steps = -1});
  bad({.staleness = 1, .local_steps = 2});
  bad({.delay_compensation = 0.1});
  bad({.staleness = 1, .delay_compensation = -0.1});
  bad({.local_steps = 2, .outer_lr = 0});
  bad({.local_steps = 2, .outer_momentum = 1.0});
  bad({.local_steps = 3}, 8);
  const DpSync stale = recipe(4, {.staleness = 1});
  EXPECT_NO_THROW(validate_dp_sync(stale, Precision::bf16, config(4), "train"));
  EXPECT_THROW(validate_dp_sync(stale, Precision::fp16, config(4), "train"), InputError);
  ParallelLayout tp2;
  tp2.tp = 2, tp2.dp = 2;
  EXPECT_THROW(validate_dp_sync_layout(stale, tp2, ZeroConfig{}, "train"), InputError);
  ZeroConfig z1;
  z1.stage = 1;
  ParallelLayout dp4;
  dp4.dp = 4;
  EXPECT_THROW(validate_dp_sync_layout(stale, dp4, z1, "train"), InputError);
  DpSync local = recipe(4, {.local_steps = 2});
  local.replicas = 2;
  EXPECT_THROW(validate_dp_sync_layout(local, dp4, ZeroConfig{}, "train"), InputError);
  std::string what;
  try {
    validate_dp_sync(recipe(4, {.staleness = -1}), Precision::fp32, config(4), "train");
  } catch (const InputError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("train.staleness = -1"), std::string::npos) << what;
}

}  // namespace
}  // namespace dtb
