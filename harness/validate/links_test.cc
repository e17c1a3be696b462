// Tests of validate's pair verdicts over synthetic pair matrices: pairs/links (a slow link, a
// slow rank, a missing figure, link classes; harness/validate/links.h), the group all-reduce's
// cross-check with the pairs, and the pair injection's parser (faults.h).
#include "harness/validate/links.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "harness/validate/faults.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

// n ranks, one per node ("h<r>"), every pair at `fast` GB/s (a healthy spread of +-10 % by
// pair, as 1.5-2.2 GB/s on a real cluster), then `slow` pairs set to `to`.
std::vector<double> matrix(int n, double fast, const std::vector<std::pair<int, int>>& slow, double to) {
  std::vector<double> m(size_t(n * n), 0.0);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) m[size_t(a * n + b)] = fast * (1.0 + 0.05 * ((a + b) % 3 - 1));
  for (const auto& [a, b] : slow) m[size_t(a * n + b)] = m[size_t(b * n + a)] = to;
  return m;
}

std::vector<std::string> hosts(int n) {
  std::vector<std::string> h;
  for (int r = 0; r < n; ++r) h.push_back("h" + std::to_string(r));
  return h;
}

// The cluster: h1 <-> h2 shaped, 0.031 against about 2 GB/s: the pair is named, both
// hosts with it, and no node (the nodes stay accepted; the check fails the run).
TEST(ValidateLinks, OneSlowPairIsALinkNotANode) {
  const ValidateCheck c = links_check(matrix(4, 2.0, {{1, 2}}, 0.031), hosts(4), hosts(4), 2);
  EXPECT_EQ(c.status, "fail");
  EXPECT_TRUE(c.nodes.empty()) << "a slow link must not make a node defective";
  EXPECT_EQ(c.ranks, (std::vector<int>{1, 2}));
  ASSERT_EQ(c.values["slow_links"].size(), 1u) << c.detail;
  const json& l = c.values["slow_links"][0];
  EXPECT_EQ(l["ranks"], json({1, 2}));
  EXPECT_EQ(l["hosts"], json({"h1", "h2"}));
  EXPECT_DOUBLE_EQ(l["GBps"].get<double>(), 0.031);
  EXPECT_GT(l["median_GBps"].get<double>(), 1.5);
  EXPECT_TRUE(c.values["slow_ranks"].empty());
  EXPECT_NE(c.detail.find("rank 1 (h1) - rank 2 (h2): 0.031 GB/s"), std::string::npos) << c.detail;
}

// One slow host (h3 at a quarter with every partner): a node fault for the per-rank metric; its
// healthy partners' links are not blamed, and nodes_slow_by_pairs names it alone.
TEST(ValidateLinks, OneSlowRankIsANodeFaultAndItsPartnersLinksAreNotBlamed) {
  const ValidateCheck c = links_check(matrix(4, 2.0, {{0, 3}, {1, 3}, {2, 3}}, 0.5), hosts(4), hosts(4), 2);
  EXPECT_EQ(c.status, "pass") << c.detail;
  EXPECT_TRUE(c.values["slow_links"].empty()) << c.values.dump();
  EXPECT_EQ(c.values["slow_ranks"], json({3}));
  EXPECT_EQ(nodes_slow_by_pairs(c, hosts(4)), (std::vector<std::string>{"h3"}));
  EXPECT_NE(c.detail.find("rank 3 (h3) slow with 3 of its 3 partners"), std::string::npos) << c.detail;
  // Only one of the slow rank's pairs crosses the link threshold (noise), the others are 30-40 %
  // down: still the rank, not the link (the node threshold is looser).
  std::vector<double> m = matrix(4, 2.0, {{0, 3}}, 0.8);
  m[1 * 4 + 3] = m[3 * 4 + 1] = 1.2, m[2 * 4 + 3] = m[3 * 4 + 2] = 1.4;
  const ValidateCheck noisy = links_check(m, hosts(4), hosts(4), 2);
  EXPECT_EQ(noisy.status, "pass") << noisy.detail;
  EXPECT_EQ(noisy.values["slow_ranks"], json({3}));
  // A larger cluster: still the one host, none of its 7 partners.
  const ValidateCheck big =
      links_check(matrix(8, 2.0, {{0, 5}, {1, 5}, {2, 5}, {3, 5}, {4, 5}, {5, 6}, {5, 7}}, 0.3), hosts(8), hosts(8), 2);
  EXPECT_EQ(big.values["slow_ranks"], json({5}));
  EXPECT_TRUE(big.values["slow_links"].empty());
}

// A healthy spread is not a slow link; a pair without a figure (0, NaN) fails the check.
TEST(ValidateLinks, HealthyPassesAndAMissingFigureFails) {
  EXPECT_EQ(links_check(matrix(4, 2.0, {}, 0), hosts(4), hosts(4), 0).status, "pass");
  for (double bad : {0.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const ValidateCheck c = links_check(matrix(4, 2.0, {{0, 2}}, bad), hosts(4), hosts(4), 0);
    EXPECT_EQ(c.status, "fail") << bad;
    EXPECT_EQ(c.values["unmeasured"], json({"0-2"})) << bad;
  }
}

// Two ranks per node: the 2 intra-node pairs are too few to judge, the inter-node class is
// judged on its own (its slow pair named, the fast intra-node pairs not its reference).
TEST(ValidateLinks, ClassesAreJudgedApart) {
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  std::vector<double> m = matrix(4, 2.0, {{1, 2}}, 0.4);
  m[0 * 4 + 1] = m[1 * 4 + 0] = m[2 * 4 + 3] = m[3 * 4 + 2] = 20.0;  // intra-node, 10x the links
  const ValidateCheck c = links_check(m, nodes, {"x", "x", "x", "x"}, 1);
  EXPECT_EQ(c.status, "fail");
  ASSERT_EQ(c.values["slow_links"].size(), 1u) << c.detail;
  EXPECT_EQ(c.values["slow_links"][0]["class"], "inter-node");
  EXPECT_FALSE(c.values["classes"].contains("intra-node"));
  EXPECT_NE(c.detail.find("intra-node: 2 pairs, too few to judge"), std::string::npos) << c.detail;
}

// A group's all-reduce failing on both nodes of the group (4 nodes of one rank): with the pairs
// showing b slow, only b; with the pairs showing none slow, no node, the check still failing.
TEST(ValidateLinks, GroupFailureCrossCheckedWithPairs) {
  const std::vector<std::string> nodes = {"a", "b", "c", "d"};
  auto group_fail = [&] {
    ValidateCheck c{"groups/allreduce_busbw_GBps", "fail", "rank 0 0.1 GB/s, 92% below the median", {"a", "b"},
                    {0, 1}, json::object(), {}};
    c.node_detail = {{"a", "rank 0 0.1 GB/s"}, {"b", "rank 1 0.1 GB/s"}};
    c.node_status = {{"a", "fail"}, {"b", "fail"}};
    return c;
  };
  ValidateCheck one = group_fail();
  cross_check_group(one, {"b"}, nodes, "");
  EXPECT_EQ(one.status, "fail");
  EXPECT_EQ(one.nodes, (std::vector<std::string>{"b"}));
  EXPECT_EQ(one.ranks, (std::vector<int>{1}));
  EXPECT_FALSE(one.node_detail.count("a"));
  EXPECT_EQ(one.values["not_blamed"], json({"a"}));
  ValidateCheck none = group_fail();
  cross_check_group(none, {}, nodes, "no slow link");
  EXPECT_EQ(none.status, "fail") << "the group's failure is still reported";
  EXPECT_TRUE(none.nodes.empty() && none.ranks.empty());
  EXPECT_NE(none.detail.find("the pairs show none of its nodes slow, so no node is blamed"), std::string::npos);
  ValidateCheck passed = group_fail();
  passed.status = "pass";
  cross_check_group(passed, {}, nodes, "");
  EXPECT_EQ(passed.nodes.size(), 2u) << "a passing check is left alone";
}

TEST(ValidateLinks, PairInjectionParses) {
  const Injection i = parse_injection("1-2:comm:4", 4);
  EXPECT_EQ(i.rank, -1);
  EXPECT_DOUBLE_EQ(i.comm_factor(1, 2), 4.0);
  EXPECT_DOUBLE_EQ(i.comm_factor(2, 1), 4.0);
  EXPECT_DOUBLE_EQ(i.comm_factor(1, 3), 1.0);
  EXPECT_DOUBLE_EQ(i.comm_factor(0, 2), 1.0);
  EXPECT_DOUBLE_EQ(parse_injection("3:comm:2", 4).comm_factor(0, 3), 2.0);
  for (const char* bad : {"1-1:comm:2", "1-4:comm:2", "1-:comm:2", "1-2:compute:2", "1-2:hang", "1-x:comm:2", "1-2",
                          "1-2:comm", "1-2:comm:0.5", "1-2-3:comm:2"})
    EXPECT_THROW(parse_injection(bad, 4), InputError) << bad;
}

}  // namespace
}  // namespace dtb
