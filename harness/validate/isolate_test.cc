// Tests of the fault isolation in rounds (harness/validate/isolate.h) over synthetic pair
// figures: one slow node, one slow link, no fault, two slow nodes in different groups, and the
// schedules it measures by.
#include "harness/validate/isolate.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "harness/validate/links.h"

namespace dtb {
namespace {

// n ranks, one per node: every pair at 2 GB/s with a +-5 % healthy spread; a slow rank's pairs
// and a slow link at 0.25 GB/s (1 Gbit/s shaping against about 2 GB/s on the test cluster).
struct Cluster {
  int n;
  std::set<int> slow_ranks;
  std::set<std::pair<int, int>> slow_links;
  mutable int measured = 0;
  double operator()(int a, int b) const {
    ++measured;
    if (slow_ranks.count(a) || slow_ranks.count(b) || slow_links.count({std::min(a, b), std::max(a, b)})) return 0.25;
    return 2.0 * (1.0 + 0.05 * ((a + b) % 3 - 1));
  }
};

// Runs the isolation to its check, as level long does (threshold 0.5: kLinkThresholds.link).
ValidateCheck isolate(const Cluster& c, Isolation* out = nullptr) {
  Isolation iso = isolation_start(c.n, 0.5);
  const PairFigure fig = [&](int a, int b) { return c(a, b); };
  while (!iso.pending.empty()) isolation_judge_round(iso, fig);
  isolation_confirm(iso, fig);
  std::vector<std::string> nodes;
  for (int r = 0; r < c.n; ++r) nodes.push_back("h" + std::to_string(r));
  const ValidateCheck check = isolation_check(iso, nodes, nodes);
  if (out) *out = iso;
  return check;
}

int total(const ValidateCheck& c, const char* key) { return c.values["totals"][key].get<int>(); }

TEST(ValidateIsolate, OneSlowNodeInEightInLogRoundsAndFewerTests) {
  Isolation iso;
  const ValidateCheck c = isolate({8, {5}, {}}, &iso);
  EXPECT_EQ(c.status, "fail") << c.detail;
  EXPECT_EQ(c.ranks, std::vector<int>({5}));
  EXPECT_EQ(c.nodes, std::vector<std::string>({"h5"}));
  EXPECT_TRUE(c.values["slow_links"].empty()) << c.detail;
  // Groups of 4, split into pairs, then the confirmations: log2(8) = 3 rounds of bisection at most.
  EXPECT_LE(total(c, "rounds"), 3) << c.detail;
  EXPECT_LT(total(c, "tests"), 28) << c.detail;
  EXPECT_LT(total(c, "pair_transfers"), 28) << c.detail;  // every pair would be 28 transfers
  EXPECT_EQ(total(c, "all_pairs"), 28);
  EXPECT_FALSE(iso.rounds[0][0].failed);  // the healthy half is not tested further
  EXPECT_TRUE(iso.rounds[0][1].failed);
  EXPECT_EQ(iso.rounds.size(), 2u);
}

TEST(ValidateIsolate, OneSlowLinkIsNamedAsAPairNoNode) {
  // 1-2: inside group {0..3}'s ring and across its halves; 0-3: that ring's closing pair; 0-1: a
  // half's own pair, so its ranks are confirmed with known-good partners.
  for (const auto& link : {std::pair<int, int>{1, 2}, std::pair<int, int>{0, 3}, std::pair<int, int>{0, 1}}) {
    const ValidateCheck c = isolate({8, {}, {link}});
    EXPECT_EQ(c.status, "fail") << c.detail;
    EXPECT_TRUE(c.nodes.empty() && c.ranks.empty()) << c.detail;
    ASSERT_EQ(c.values["slow_links"].size(), 1u) << c.detail;
    EXPECT_EQ(c.values["slow_links"][0]["ranks"], nlohmann::json({link.first, link.second}));
    EXPECT_LT(total(c, "tests"), 28);
  }
  // 3-4 joins the two groups: on no ring, so not seen (what round 1 cannot see, docs/validate.md).
  EXPECT_EQ(isolate({8, {}, {{3, 4}}}).status, "pass");
}

TEST(ValidateIsolate, GroupAllReduceBlamesOnlyTheConfirmedNode) {
  // The groups' all-reduce check names nodes 2 and 3 (one group); the isolation confirmed 2 alone.
  const ValidateCheck iso = isolate({4, {2}, {}});
  std::vector<std::string> nodes = {"h0", "h1", "h2", "h3"};
  EXPECT_EQ(nodes_slow_by_pairs(iso, nodes), std::vector<std::string>({"h2"}));
  ValidateCheck group{"groups", "fail", "slow", {"h2", "h3"}, {2, 3}, nlohmann::json::object(), {}};
  cross_check_group(group, nodes_slow_by_pairs(iso, nodes), nodes, iso.name + ": " + iso.detail);
  EXPECT_EQ(group.nodes, std::vector<std::string>({"h2"}));
  EXPECT_EQ(group.ranks, std::vector<int>({2}));
}

TEST(ValidateIsolate, NoFaultIsOneRoundNothingNamed) {
  for (int n : {3, 4, 8, 16, 33}) {
    const ValidateCheck c = isolate({n, {}, {}});
    EXPECT_EQ(c.status, "pass") << n << ": " << c.detail;
    EXPECT_TRUE(c.nodes.empty() && c.ranks.empty());
    EXPECT_EQ(total(c, "rounds"), 1) << n;
    EXPECT_EQ(total(c, "confirmations"), 0) << n;
    EXPECT_EQ(total(c, "pair_transfers"), n) << n;  // one ring of n pairs over the groups
  }
}

TEST(ValidateIsolate, TwoSlowNodesInDifferentGroups) {
  const ValidateCheck c = isolate({16, {2, 13}, {}});
  EXPECT_EQ(c.status, "fail") << c.detail;
  EXPECT_EQ(c.ranks, std::vector<int>({2, 13})) << c.detail;
  EXPECT_TRUE(c.values["slow_links"].empty()) << c.detail;
  EXPECT_LT(total(c, "tests"), 120);
}

TEST(ValidateIsolate, FourNodesOneSlow) {
  // The test cluster's case: one ring of 4, its halves, the failed half's two ranks confirmed.
  const ValidateCheck c = isolate({4, {2}, {}});
  EXPECT_EQ(c.status, "fail") << c.detail;
  EXPECT_EQ(c.nodes, std::vector<std::string>({"h2"})) << c.detail;
  EXPECT_TRUE(c.values["slow_links"].empty()) << c.detail;
  EXPECT_EQ(total(c, "tests"), 5);  // 1 + 2 group rings, 2 confirmations: fewer than 6 pairs
}

TEST(ValidateIsolate, NoKnownGoodPartnerNamesNoNode) {
  // Four slow links, one in each half of each group: every last group failed, so no rank is
  // known good, nothing can be confirmed, and the check fails naming no node.
  const ValidateCheck c = isolate({8, {}, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}});
  EXPECT_EQ(c.status, "fail") << c.detail;
  EXPECT_TRUE(c.nodes.empty()) << c.detail;
}

TEST(ValidateIsolate, GroupsAndSchedules) {
  EXPECT_EQ(isolation_start(8, 0.5).pending, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(isolation_start(5, 0.5).pending.size(), 1u);
  EXPECT_EQ(isolation_start(16, 0.5).pending.size(), 4u);
  EXPECT_EQ(ring_pairs({4, 5}), (std::vector<std::pair<int, int>>{{4, 5}}));
  EXPECT_EQ(ring_pairs({1, 2, 3}).size(), 3u);
  const auto rounds = disjoint_rounds(ring_pairs({0, 1, 2, 3, 4}));
  EXPECT_EQ(rounds.size(), 3u);  // an odd ring needs three rounds of disjoint pairs
  for (const auto& r : rounds) {
    std::set<int> seen;
    for (const auto& [a, b] : r) EXPECT_TRUE(seen.insert(a).second && seen.insert(b).second);
  }
}

}  // namespace
}  // namespace dtb
