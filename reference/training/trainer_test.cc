// Data parallelism and gradient accumulation divide once, by the global token count
// (docs/numerics.md). Runs in the multi-rank binary (2 and 4 ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "reference/model/test_dataset.h"
#include "reference/training/trainer.h"

namespace dtb {
namespace {

double norm(const float* g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  return std::sqrt(s);
}

double rel_diff(const float* a, const float* b, size_t n) {
  double s = 0, r = 0;
  for (size_t i = 0; i < n; ++i) s += std::pow(double(a[i]) - b[i], 2), r += double(b[i]) * b[i];
  return std::sqrt(s / r);
}

const GptConfig kModel{2, 32, 4, 16, 256};

// kModel with both FFNs mixtures of 4 experts, top-2, capacity factor 1 (tokens dropped), both losses.
GptConfig moe_model() {
  GptConfig m = kModel;
  m.moe.num_experts = 4, m.moe.topk = 2, m.moe.capacity_factor = 1.0;
  m.moe.aux_loss_coeff = 0.01, m.moe.z_loss_coeff = 1e-3;
  return m;
}

// Gradient of step 0 for a config on a communicator, in float32; *dropped: the MoE assignments
// the last micro-batch's first layer dropped.
std::vector<float> grads_of(const TrainConfig& cfg, Communicator& comm, double* loss = nullptr,
                            const GptConfig& model = kModel, int* dropped = nullptr) {
  CpuDevice dev;
  Gpt<float> m(model, dev);
  m.init(cfg.seed);
  const Dataset data = test_data();
  const double l = compute_gradients(m, data, cfg, 0, comm);
  if (loss) *loss = l;
  if (dropped) *dropped = m.moe_routing(0).dropped;
  return {m.grads(), m.grads() + m.num_params()};
}

// Tolerance 1e-6 for both traps: the runs compute the same float32 sums grouped
// differently (per micro-batch or per rank, then added), so each gradient element
// differs by a few roundings, u = 6e-8 each, relative to its magnitude; the norm ratio and
// the relative norm difference average these to ~1e-7. A double division gives a ratio of
// 0.25, a missing one 4.0.
constexpr double kTol = 1e-6;

TEST(GradientAccumulation, FourMicroBatchesOfTwoEqualOneBatchOfEight) {
  auto self = make_mpi_self();
  TrainConfig one;
  one.global_batch = 8;
  one.micro_batches = 1;
  one.seq_len = 16;
  TrainConfig four = one;
  four.micro_batches = 4;
  double l1 = 0, l4 = 0;
  const auto g1 = grads_of(one, *self, &l1);
  const auto g4 = grads_of(four, *self, &l4);
  const double ratio = norm(g4.data(), g4.size()) / norm(g1.data(), g1.size());
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("grad accumulation 4x2 vs 1x8: norm ratio %.9f, rel diff %.2e (tol %.0e)\n", ratio,
                rel_diff(g4.data(), g1.data(), g1.size()), kTol);
  EXPECT_NEAR(ratio, 1.0, kTol);
  EXPECT_LE(rel_diff(g4.data(), g1.data(), g1.size()), kTol);
  EXPECT_NEAR(l4, l1, kTol * l1);
}

TEST(DataParallel, GradientEqualsSingleRankWithWholeBatch) {
  auto world = make_mpi_world();
  auto self = make_mpi_self();
  TrainConfig cfg;
  cfg.global_batch = 8;  // at 4 ranks: 2 sequences per rank; averaging twice gives 0.25
  cfg.micro_batches = 1;
  cfg.seq_len = 16;
  ASSERT_EQ(8 % world->size(), 0);
  double ldp = 0, l1 = 0;
  const auto gdp = grads_of(cfg, *world, &ldp);
  const auto g1 = grads_of(cfg, *self, &l1);
  const double ratio = norm(gdp.data(), gdp.size()) / norm(g1.data(), g1.size());
  const double diff = rel_diff(gdp.data(), g1.data(), g1.size());
  if (world->rank() == 0)
    std::printf("dp=%d x %d seqs vs 1 rank x 8: norm ratio %.9f, rel diff %.2e (tol %.0e)\n",
                world->size(), 8 / world->size(), ratio, diff, kTol);
  EXPECT_NEAR(ratio, 1.0, kTol);
  EXPECT_LE(diff, kTol);
  EXPECT_NEAR(ldp, l1, kTol * l1);
}

TEST(DataParallel, TrainingMatchesSingleRankAndReplicasAgree) {
  auto world = make_mpi_world();
  auto self = make_mpi_self();
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.micro_batches = 2;  // 8 / dp sequences per rank split in two
  cfg.seq_len = 16;
  cfg.steps = 5;
  cfg.adamw.lr = 1e-3f;
  const Dataset data = test_data();
  CpuDevice dev;
  Gpt<float> dp(kModel, dev), one(kModel, dev);
  dp.init(cfg.seed);
  one.init(cfg.seed);
  const TrainRun rdp = train(dp, data, cfg, DpSync{}, *world);
  TrainConfig single = cfg;
  single.micro_batches = 1;
  const TrainRun r1 = train(one, data, single, DpSync{}, *self);
  // Five steps of float32 Adam from identical weights: the runs differ by rounding only.
  // Adam's update is about lr in size whatever the gradient's, so a rounding-level
  // gradient difference moves a weight by at most ~lr * (relative gradient difference)
  // per step; the loss then differs by far less than 1e-4 relative.
  for (int s = 0; s < cfg.steps; ++s) EXPECT_NEAR(rdp.losses[s], r1.losses[s], 1e-4 * r1.losses[s]) << s;
  EXPECT_LT(rdp.losses.back(), rdp.losses.front());  // it learns
  // Every run records the global gradient norm at every step, without clipping too; step 0's is
  // the norm of the step-0 gradient (kTol's argument: the same sums grouped differently).
  ASSERT_EQ(rdp.grad_norms.size(), size_t(cfg.steps));
  ASSERT_EQ(r1.grad_norms.size(), size_t(cfg.steps));
  const std::vector<float> g0 = grads_of(single, *self);
  const double n0 = norm(g0.data(), g0.size());
  EXPECT_NEAR(r1.grad_norms[0], n0, kTol * n0);
  EXPECT_NEAR(rdp.grad_norms[0], n0, kTol * n0);
  // Every DP replica holds the same parameters, bit for bit.
  std::vector<float> root(dp.params(), dp.params() + dp.num_params());
  world->broadcast(root.data(), root.size(), DType::f32, 0);
  int same = std::equal(root.begin(), root.end(), dp.params());
  world->all_reduce(&same, &same, 1, DType::i32, ReduceOp::min);
  EXPECT_EQ(same, 1);
}

// The MoE model routes each sequence as one group (reference/model/moe.h), so neither the micro-batch
// count nor the DP size changes a routing decision, a drop or a balance loss: the gradients differ
// by rounding only, as the dense model's, and kTol's argument holds (the router's and the losses'
// gradients are double sums rounded once). Routing the whole call as one group instead (capacity
// and balance over a micro-batch, Megatron-LM's default) fails both comparisons.
TEST(DataParallel, MoeGradientEqualsSingleRankAtAnyMicroBatchesAndRanks) {
  auto world = make_mpi_world();
  auto self = make_mpi_self();
  TrainConfig cfg;
  cfg.global_batch = 8;
  cfg.seq_len = 16;
  double l1 = 0, l4 = 0, ldp = 0;
  int dropped = 0;
  const auto g1 = grads_of(cfg, *self, &l1, moe_model(), &dropped);
  EXPECT_GT(dropped, 0);  // capacity factor 1 drops here: the test covers dropping
  TrainConfig four = cfg;
  four.micro_batches = 4;
  const auto g4 = grads_of(four, *self, &l4, moe_model());
  const auto gdp = grads_of(cfg, *world, &ldp, moe_model());
  const double d4 = rel_diff(g4.data(), g1.data(), g1.size()), ddp = rel_diff(gdp.data(), g1.data(), g1.size());
  if (world->rank() == 0)
    std::printf("MoE: 4 micro-batches vs 1, rel diff %.2e; dp=%d vs 1 rank, %.2e (tol %.0e)\n", d4, world->size(),
                ddp, kTol);
  EXPECT_LE(d4, kTol);
  EXPECT_LE(ddp, kTol);
  EXPECT_NEAR(l4, l1, kTol * l1);
  EXPECT_NEAR(ldp, l1, kTol * l1);
}

}  // namespace
}  // namespace dtb
