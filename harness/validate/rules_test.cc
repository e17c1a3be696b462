// Tests of validate's rules (harness/validate/rules.h): the fleet-median rule, baselines (the
// outliers removed, missing metrics failing), rules files parsed and refused, k_of and
// absolute bounds, and a rank without a valid figure (NaN, inf, 0) failing every rule.
#include "harness/validate/rules.h"

#include <gtest/gtest.h>

#include <limits>

#include <set>

#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

// Level medium's rule: below (1 - tol) x the median fails, below (1 - tol/2) warns. Ranks
// 100, 100, 100, 50 (median 100): rank 3 is 50% below, a failure at tol 0.3, naming node b.
TEST(ValidateMedium, FleetMedianRule) {
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  const ValidateCheck slow = fleet_median_check("compute/gemm_gflops", "GFLOP/s", {100, 100, 100, 50}, nodes, 0.3);
  EXPECT_EQ(slow.status, "fail");
  EXPECT_EQ(slow.ranks, std::vector<int>{3});
  EXPECT_EQ(slow.nodes, std::vector<std::string>{"b"});
  EXPECT_DOUBLE_EQ(slow.values["median"].get<double>(), 100.0);
  EXPECT_NE(slow.node_detail.at("b").find("rank 3 50 GFLOP/s, 50% below the median 100"), std::string::npos)
      << slow.node_detail.at("b");
  // 20% below: beyond half the tolerance (15%), within it: a warning.
  EXPECT_EQ(fleet_median_check("m", "u", {100, 100, 100, 80}, nodes, 0.3).status, "warn");
  EXPECT_EQ(fleet_median_check("m", "u", {100, 100, 95, 90}, nodes, 0.3).status, "pass");
  // The median of an even count is the mean of the middle two: {40, 100, 100, 100} -> 100.
  EXPECT_DOUBLE_EQ(fleet_median_check("m", "u", {40, 100, 100, 100}, nodes, 0.3).values["median"].get<double>(), 100.0);
}

// Baselines: the outlier (rank 3 at half speed) is removed before the median; a rank 50% below
// the baseline fails; a metric the baseline has and the run lacks fails as missing.
TEST(ValidateBaseline, OutliersRemovedAndMissingMetricsFail) {
  EXPECT_DOUBLE_EQ(baseline_value({100, 102, 98, 50}), 100.0);  // median of {98, 100, 102}
  EXPECT_DOUBLE_EQ(baseline_value({100, 100, 100, 100}), 100.0);
  EXPECT_DOUBLE_EQ(baseline_value({7}), 7.0);
  const json base = {{"kind", "validate-baseline"},
                     {"metrics", {{"compute/gemm_gflops", {{"value", 100.0}, {"unit", "GFLOP/s"}}},
                                  {"pairs/sendrecv_GBps", {{"value", 10.0}, {"unit", "GB/s"}}}}}};
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  const std::map<std::string, Metric> measured = {{"compute/gemm_gflops", {"GFLOP/s", {101, 99, 100, 50}}}};
  const auto checks = baseline_checks(base, measured, nodes, 0.3);
  ASSERT_EQ(checks.size(), 2u);
  const ValidateCheck& g = checks[0].name == "baseline/compute/gemm_gflops" ? checks[0] : checks[1];
  const ValidateCheck& p = checks[0].name == "baseline/pairs/sendrecv_GBps" ? checks[0] : checks[1];
  EXPECT_EQ(g.status, "fail");
  EXPECT_EQ(g.ranks, std::vector<int>{3});
  EXPECT_NE(g.node_detail.at("b").find("50% below the baseline 100"), std::string::npos) << g.node_detail.at("b");
  EXPECT_EQ(p.status, "fail");
  EXPECT_NE(p.detail.find("missing"), std::string::npos) << p.detail;
  EXPECT_TRUE(p.nodes.empty());  // about the run, not a node
}

// Rules files: the fixed vocabulary parses, and each mistake is named.
TEST(ValidateRules, ParseAndRefuse) {
  const json ok = {{"kind", "validate-rules"},
                   {"rules",
                    {{{"name", "gemm-base"}, {"type", "baseline_drop"}, {"metric", "compute/gemm_gflops"}, {"fail", 0.4}},
                     {{"name", "gemm-fleet"}, {"type", "fleet_drop"}, {"metric", "compute/gemm_gflops"}, {"fail", 0.4},
                      {"warn", 0.2}},
                     {{"name", "gemm-min"}, {"type", "min"}, {"metric", "compute/gemm_gflops"}, {"fail", 10}, {"warn", 20}},
                     {{"name", "gemm"}, {"type", "k_of"}, {"k", 2}, {"of", {"gemm-base", "gemm-fleet"}}}}}};
  const auto rules = parse_rules(ok, "r.json");
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[3].of, (std::vector<std::string>{"gemm-base", "gemm-fleet"}));
  EXPECT_DOUBLE_EQ(rules[1].warn, 0.2);
  auto with = [&](const json& rule) {
    json d = ok;
    d["rules"].push_back(rule);
    return d;
  };
  const std::vector<std::pair<json, std::string>> bad = {
      {json::array(), "not a validate rules file"},
      {with({{"name", "x"}, {"type", "median"}, {"metric", "compute/gemm_gflops"}, {"fail", 0.3}}), "type 'median'"},
      {with({{"name", "x"}, {"type", "min"}, {"metric", "compute/gflops"}, {"fail", 1}}), "unknown metric 'compute/gflops'"},
      {with({{"name", "x"}, {"type", "fleet_drop"}, {"metric", "compute/gemm_gflops"}, {"fail", 1.5}}), "fraction in (0, 1)"},
      {with({{"name", "x"}, {"type", "fleet_drop"}, {"metric", "compute/gemm_gflops"}, {"fail", 0.3}, {"warn", 0.5}}),
       "\"warn\" must be in (0, fail)"},
      {with({{"name", "x"}, {"type", "min"}, {"metric", "compute/gemm_gflops"}, {"fail", 10}, {"warn", 5}}), ">= its \"fail\""},
      {with({{"name", "x"}, {"type", "min"}, {"metric", "compute/gemm_gflops"}}), "numeric \"fail\""},
      {with({{"name", "gemm"}, {"type", "min"}, {"metric", "compute/gemm_gflops"}, {"fail", 1}}), "used twice"},
      {with({{"name", "x"}, {"type", "k_of"}, {"k", 3}, {"of", {"gemm-base", "gemm-fleet"}}}), "k 3 is not in [1, 2]"},
      {with({{"name", "x"}, {"type", "k_of"}, {"k", 1}, {"of", {"nope"}}}), "names no rule 'nope'"},
      {with({{"name", "x"}, {"type", "k_of"}, {"k", 1}, {"of", {"gemm"}}}), "another k_of"},
      {with({{"name", "x"}, {"type", "k_of"}, {"k", 2}, {"of", {"gemm-base", "gemm-base"}}}), "names 'gemm-base' twice"},
      {with({{"name", "x"}, {"type", "k_of"}, {"k", 1}, {"of", {"gemm-base"}}, {"fail", 1}}), "does not apply to a k_of"},
      {with({{"name", "x"}, {"type", "min"}, {"metric", "compute/gemm_gflops"}, {"fail", 1}, {"k", 1}}), "k_of rules only"},
      {{{"kind", "validate-rules"}, {"rules", json::array()}}, "no rules"},
      {with({{"name", "x"}, {"type", "min"}, {"metric", "compute/gemm_gflops"}, {"fail", 1}, {"limit", 2}}),
       "unknown key 'limit'"},
  };
  for (const auto& [doc, what] : bad) {
    try {
      parse_rules(doc, "r.json");
      ADD_FAILURE() << "accepted: " << doc.dump();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("r.json: ", 0), 0u) << e.what();
    }
  }
}

// k of these rules: rank 3 at half speed fails both the baseline drop and the fleet median, so
// the k_of (2 of 2) fails naming it; the whole fleet 45% below the baseline (a drift the
// baseline alone would flag on every rank) fails one rule of two and passes; the inputs give no
// verdict of their own. Absolute bounds: min fails below, max above.
TEST(ValidateRules, KOfAndBounds) {
  const json base = {{"kind", "validate-baseline"}, {"metrics", {{"compute/gemm_gflops", {{"value", 100.0}}}}}};
  const std::vector<ValidateRule> rules = {
      {"base", "baseline_drop", "compute/gemm_gflops", 0.4, -1, false, 0, {}},
      {"fleet", "fleet_drop", "compute/gemm_gflops", 0.4, -1, false, 0, {}},
      {"gemm", "k_of", "", 0, -1, false, 2, {"base", "fleet"}}};
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  auto run = [&](std::vector<double> v) {
    return evaluate_rules(rules, {{"compute/gemm_gflops", {"GFLOP/s", v, true}}}, base, nodes);
  };
  const auto slow = run({100, 98, 101, 50});
  ASSERT_EQ(slow.size(), 3u);
  EXPECT_EQ(slow[0].name, "base");
  EXPECT_FALSE(slow[0].counts);
  EXPECT_FALSE(slow[1].counts);
  EXPECT_EQ(slow[2].name, "gemm");
  EXPECT_EQ(slow[2].status, "fail");
  EXPECT_EQ(slow[2].ranks, std::vector<int>{3});
  EXPECT_EQ(slow[2].nodes, std::vector<std::string>{"b"});
  const std::string& d = slow[2].node_detail.at("b");
  EXPECT_NE(d.find("rank 3: 2 of 2 rules failed"), std::string::npos) << d;
  EXPECT_NE(d.find("50% below the baseline 100"), std::string::npos) << d;
  EXPECT_NE(d.find("below the median 99"), std::string::npos) << d;
  // A check that fails for one node's rank and warns for another's: each node gets its own.
  const auto mixed = evaluate_rules({{"fleet", "fleet_drop", "compute/gemm_gflops", 0.4, 0.2, true, 0, {}}},
                                    {{"compute/gemm_gflops", {"GFLOP/s", {100, 60, 100, 40}, true}}}, base, nodes);
  EXPECT_EQ(mixed[0].status, "fail");  // median 80: rank 1 25% below (warn), rank 3 50% below (fail)
  EXPECT_EQ(mixed[0].node_status.at("a"), "warn");
  EXPECT_EQ(mixed[0].node_status.at("b"), "fail");
  const auto drift = run({55, 54, 56, 55});
  EXPECT_EQ(drift[0].status, "fail");  // every rank 44-46% below the baseline
  EXPECT_EQ(drift[2].status, "pass") << drift[2].detail;
  // A bound: min 60 fails rank 3 at 50; max over a lower-is-better metric.
  const auto b = evaluate_rules({{"floor", "min", "compute/gemm_gflops", 60, 90, true, 0, {}}},
                                {{"compute/gemm_gflops", {"GFLOP/s", {100, 80, 100, 50}, true}}}, json(), nodes);
  EXPECT_EQ(b[0].status, "fail");
  EXPECT_EQ(b[0].ranks, (std::vector<int>{1, 3}));  // 80 < 90 warns, 50 < 60 fails
  EXPECT_NE(b[0].node_detail.at("a").find("rank 1 80 GFLOP/s < 90 (rule floor: warn"), std::string::npos)
      << b[0].node_detail.at("a");
  // Missing metric: the rule fails about the run, and so does the k_of that needs it.
  const auto missing = evaluate_rules(rules, {}, base, nodes);
  EXPECT_EQ(missing[0].status, "fail");
  EXPECT_TRUE(missing[0].nodes.empty());
  EXPECT_NE(missing[0].detail.find("missing"), std::string::npos);
  EXPECT_EQ(missing[2].status, "fail");
  EXPECT_NE(missing[2].detail.find("could not be judged"), std::string::npos) << missing[2].detail;
  // baseline_drop without a baseline is bad usage.
  EXPECT_THROW(evaluate_rules(rules, {{"compute/gemm_gflops", {"GFLOP/s", {1, 1, 1, 1}, true}}}, json(), nodes),
               InputError);
}

// A rank whose figure is NaN, infinite or (higher is better) 0 fails every kind of rule; NaN
// compares false with any threshold and passed before.
TEST(ValidateRules, NoFigureFailsClosed) {
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  const json base = {{"kind", "validate-baseline"}, {"metrics", {{"compute/gemm_gflops", {{"value", 100.0}}}}}};
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 0.0}) {
    const std::map<std::string, Metric> m = {{"compute/gemm_gflops", {"GFLOP/s", {100, 101, 99, bad}, true}}};
    for (const char* type : {"fleet_drop", "baseline_drop", "min", "max"}) {
      const ValidateRule r{"r", type, "compute/gemm_gflops", std::string(type) == "max" ? 1e9 : 0.3, -1, false, 0, {}};
      const ValidateCheck c = evaluate_rules({r}, m, base, nodes).front();
      EXPECT_EQ(c.status, "fail") << type << " " << bad;
      EXPECT_EQ(c.ranks, (std::vector<int>{3})) << type << " " << bad << ": " << c.detail;
    }
  }
  // Lower is better: 0 lateness is healthy, NaN is not.
  const std::map<std::string, Metric> late = {
      {"world/arrival_late_pct", {"%", {0, 0, 1, std::numeric_limits<double>::quiet_NaN()}, false}}};
  const ValidateCheck c = evaluate_rules({{"l", "max", "world/arrival_late_pct", 30, -1, false, 0, {}}}, late, json(), nodes).front();
  EXPECT_EQ(c.ranks, (std::vector<int>{3}));
}

// metrics/valid: whatever the rules name, a NaN or a zero rate anywhere fails, naming its rank.
TEST(ValidateRules, ValidFiguresCheckNamesTheRankWithoutAFigure) {
  const std::vector<std::string> nodes = {"a", "a", "b", "b"};
  std::map<std::string, Metric> m = {{"world/allreduce_busbw_GBps", {"GB/s", {5, 5, 5, 5}, true}},
                                     {"world/arrival_late_pct", {"%", {0, 0, 3, 1}, false}}};
  EXPECT_EQ(valid_figures_check(m, nodes).status, "pass");
  m["world/allreduce_busbw_GBps"].per_rank[2] = 0;
  m["world/arrival_late_pct"].per_rank[3] = std::numeric_limits<double>::quiet_NaN();
  const ValidateCheck c = valid_figures_check(m, nodes);
  EXPECT_EQ(c.status, "fail");
  EXPECT_EQ(c.ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(c.nodes, (std::vector<std::string>{"b"}));
  EXPECT_NE(c.detail.find("world/allreduce_busbw_GBps 0 (not positive)"), std::string::npos) << c.detail;
}

}  // namespace
}  // namespace dtb
