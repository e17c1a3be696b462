#include "reference/analytic/stage_balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "kernels/error.h"

namespace dtb {
namespace {

PartCosts uniform(int L, double layer, double emb, double head) {
  PartCosts c;
  for (auto* v : {&c.forward, &c.backward, &c.weight}) v->assign(size_t(L) + 2, 0.0);
  for (int l = 1; l <= L; ++l) c.forward[size_t(l)] = layer / 3, c.backward[size_t(l)] = 2 * layer / 3;
  c.forward[0] = emb / 3, c.backward[0] = 2 * emb / 3;
  c.forward[size_t(L) + 1] = head / 3, c.backward[size_t(L) + 1] = 2 * head / 3;
  return c;
}

double bottleneck(const PartCosts& c, const std::vector<int>& layers) {
  double worst = 0;
  for (const StageCost& s : stage_costs(c, layers)) worst = std::max(worst, s.forward + s.backward);
  return worst;
}

TEST(StageBalance, EqualLayersSplitEvenly) {
  EXPECT_EQ(balance_stages(uniform(8, 1, 0, 0), 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(balance_stages(uniform(8, 1, 0, 0), 1), (std::vector<int>{8}));
  EXPECT_EQ(balance_stages(uniform(4, 1, 0, 0), 4), (std::vector<int>{1, 1, 1, 1}));
}

TEST(StageBalance, HeadAndEmbeddingTakeLayersAway) {
  // Layers of 1 s, the head 3 s: [5, 3] and [6, 2] both have bottleneck 6; the earlier
  // stages take fewer layers among equals.
  EXPECT_EQ(balance_stages(uniform(8, 1, 0, 3), 2), (std::vector<int>{5, 3}));
  // The embedding 2 s and the head 2 s over 4 stages of 8 layers: 1 + 3 + 3 + 1 gives 3 each.
  EXPECT_EQ(balance_stages(uniform(8, 1, 2, 2), 4), (std::vector<int>{1, 3, 3, 1}));
  EXPECT_DOUBLE_EQ(bottleneck(uniform(8, 1, 2, 2), {1, 3, 3, 1}), 3.0);
  EXPECT_DOUBLE_EQ(bottleneck(uniform(8, 1, 2, 2), {2, 2, 2, 2}), 4.0);
}

TEST(StageBalance, MatchesExhaustiveSearch) {
  // Every composition of L into p parts, for random part costs: the DP's bottleneck is the least.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 5.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int L = 2 + trial % 7, p = 1 + trial % std::min(L, 4);
    PartCosts c;
    for (auto* v : {&c.forward, &c.backward, &c.weight}) v->assign(size_t(L) + 2, 0.0);
    for (int i = 0; i < L + 2; ++i) c.forward[size_t(i)] = u(rng), c.backward[size_t(i)] = u(rng);
    double best = 1e300;
    std::vector<int> split(size_t(p), 1);
    // Enumerate splits by cut positions 0 < c1 < ... < c(p-1) < L.
    std::vector<int> cuts(size_t(p) + 1);
    std::function<void(int, int)> rec = [&](int s, int from) {
      if (s == p) {
        std::vector<int> layers;
        for (int k = 0; k < p; ++k) layers.push_back((k == p - 1 ? L : cuts[size_t(k) + 1]) - cuts[size_t(k)]);
        if (std::all_of(layers.begin(), layers.end(), [](int n) { return n >= 1; }))
          best = std::min(best, bottleneck(c, layers));
        return;
      }
      for (int a = from; a < L; ++a) cuts[size_t(s)] = a, rec(s + 1, a + 1);
    };
    cuts[0] = 0;
    rec(1, 1);
    const std::vector<int> got = balance_stages(c, p);
    EXPECT_EQ(int(got.size()), p);
    EXPECT_NEAR(bottleneck(c, got), best, 1e-12) << "L " << L << " p " << p;
  }
}

TEST(StageBalance, StageCostsSumTheirParts) {
  PartCosts c = uniform(4, 3, 1.5, 6);
  c.weight.assign(6, 0.25);
  const std::vector<StageCost> s = stage_costs(c, {1, 3});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s[0].forward, (1.5 + 3) / 3);
  EXPECT_DOUBLE_EQ(s[0].backward, 2 * (1.5 + 3) / 3);
  EXPECT_DOUBLE_EQ(s[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(s[1].forward, (9 + 6) / 3);
  EXPECT_DOUBLE_EQ(s[1].weight, 1.0);
}

TEST(StageBalance, RefusesBadInput) {
  EXPECT_THROW(balance_stages(uniform(4, 1, 0, 0), 5), InputError);  // more stages than layers
  EXPECT_THROW(balance_stages(uniform(4, 1, 0, 0), 0), InputError);
  PartCosts c = uniform(4, 1, 0, 0);
  c.backward.pop_back();
  EXPECT_THROW(balance_stages(c, 2), InputError);
  c = uniform(4, 1, 0, 0);
  c.forward[2] = -1;
  EXPECT_THROW(balance_stages(c, 2), InputError);
  EXPECT_THROW(stage_costs(uniform(4, 1, 0, 0), {2, 1}), InputError);
  EXPECT_THROW(stage_costs(uniform(4, 1, 0, 0), {4, 0}), InputError);
}

TEST(StageBalance, UnequalStagesInTheSimulator) {
  // GPipe, p 2, m 1: F0, F1, B1, B0 in a row = 1 + 2 + 4 + 2.
  const PipelineSimulation g = simulate_pipeline("gpipe", 2, 1, 1, {StageCost{1, 2, 0}, StageCost{2, 4, 0}});
  EXPECT_DOUBLE_EQ(g.makespan, 9.0);
  // Equal StageCosts give the closed forms: 1F1B and GPipe (m + p - 1)(F + B) = 33 with bubble
  // 3 / 11 at p 4, m 8, F 1, B 2; ZB-H1 with F = B = W = 1 (a whole backward of 2) idles
  // (p - 1)(F + B - W) = 3 per stage
  // beside m (F + B + W) = 24 of work (Qi et al. 2024).
  for (const char* s : {"gpipe", "1f1b"}) {
    const PipelineSimulation a = simulate_pipeline(s, 4, 8, 1, std::vector<StageCost>(4, StageCost{1.0, 2.0, 0.0}));
    EXPECT_DOUBLE_EQ(a.makespan, 33.0) << s;
    EXPECT_DOUBLE_EQ(a.bubble, 3.0 / 11.0) << s;
  }
  const PipelineSimulation zb = simulate_pipeline("zb-h1", 4, 8, 1, std::vector<StageCost>(4, StageCost{1.0, 2.0, 1.0}));
  EXPECT_DOUBLE_EQ(zb.makespan, 27.0);
  EXPECT_DOUBLE_EQ(zb.bubble, 3.0 / 27.0);
  // 1F1B with m large is paced by its slowest stage: makespan ~ m (F + B) of it.
  const PipelineSimulation one =
      simulate_pipeline("1f1b", 2, 64, 1, {StageCost{1, 2, 0}, StageCost{2, 4, 0}});
  EXPECT_NEAR(one.makespan / (64 * 6.0), 1.0, 0.03);
  EXPECT_THROW(simulate_pipeline("1f1b", 2, 4, 1, {StageCost{1, 2, 0}}), InputError);
  EXPECT_THROW(simulate_pipeline("1f1b", 2, 4, 1, {StageCost{1, 2, 0}, StageCost{1, 2, 2}}), InputError);
}

}  // namespace
}  // namespace dtb
