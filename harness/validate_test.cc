// Tests of harness/validate's level quick: the checks over synthetic inventories (a rank with
// another CPU, a node with less memory or fewer ranks, expectations met and missed) and the
// --expect parser. The 4-rank run with emulated nodes is in harness/run_test.sh.
#include "harness/validate.h"

#include <gtest/gtest.h>

#include <set>

#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

// ranks x {node, cpu, cores, memory}: two emulated nodes of two ranks, all alike.
std::vector<json> fleet() {
  std::vector<json> inv;
  for (int r = 0; r < 4; ++r)
    inv.push_back({{"rank", r}, {"node", r < 2 ? "a" : "b"}, {"device", "cpu: X"}, {"cpu_model", "X"}, {"cores", 8},
                   {"memory_bytes", 64e9}, {"mpi_version", "mpi 1"}, {"blas_version", "blas 1"}, {"backend", "cpu"}});
  return inv;
}

const ValidateCheck& find(const std::vector<ValidateCheck>& cs, const std::string& name) {
  for (const ValidateCheck& c : cs)
    if (c.name == name) return c;
  throw std::runtime_error("no check " + name);
}

TEST(ValidateQuick, AHealthyFleetPasses) {
  const auto checks = quick_checks(fleet(), parse_expectations("nodes=2,ranks_per_node=2,device=x,cores=8,memory_gb=60"));
  for (const ValidateCheck& c : checks) EXPECT_EQ(c.status, "pass") << c.name << ": " << c.detail;
  EXPECT_EQ(checks.size(), 7u + 5u);  // 7 consistency checks, 5 expectations
}

TEST(ValidateQuick, TheOddRankAndNodeAreNamed) {
  auto inv = fleet();
  inv[3]["cpu_model"] = "Y";
  inv[2]["memory_bytes"] = 64e9 * 0.9;  // node b's first rank stands for the node: 10% less
  const auto checks = quick_checks(inv, {});
  const ValidateCheck& cpu = find(checks, "consistency/cpu_model");
  EXPECT_EQ(cpu.status, "fail");
  EXPECT_EQ(cpu.ranks, std::vector<int>{3});
  EXPECT_EQ(cpu.nodes, std::vector<std::string>{"b"});
  EXPECT_NE(cpu.detail.find("rank 3 (node b) has Y, the others X"), std::string::npos) << cpu.detail;
  const ValidateCheck& mem = find(checks, "consistency/memory");
  EXPECT_EQ(mem.status, "warn");  // 5% < 10% <= 20%
  EXPECT_EQ(mem.nodes, std::vector<std::string>{"b"});
  inv[2]["memory_bytes"] = 64e9 * 0.7;
  EXPECT_EQ(find(quick_checks(inv, {}), "consistency/memory").status, "fail");
}

TEST(ValidateQuick, UnevenNodesAndMissedExpectations) {
  auto inv = fleet();
  inv.push_back(inv[3]);
  inv[4]["rank"] = 4;  // node b now has 3 ranks
  const auto checks = quick_checks(inv, parse_expectations("nodes=3,cores=16,device=H200,gpus_per_node=8"));
  const ValidateCheck& rpn = find(checks, "consistency/ranks_per_node");
  EXPECT_EQ(rpn.status, "fail");  // 2 and 3: the tie goes to the first node's count
  EXPECT_EQ(rpn.nodes, std::vector<std::string>{"b"});
  EXPECT_EQ(find(checks, "expect/nodes").status, "fail");
  const ValidateCheck& cores = find(checks, "expect/cores");
  EXPECT_EQ(cores.status, "fail");
  EXPECT_EQ(cores.nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cores.node_detail.at("a"), "8, expected at least 16 cores");
  EXPECT_EQ(find(checks, "expect/device").ranks, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(find(checks, "expect/gpus_per_node").status, "fail");  // cpu backend: 0 GPUs
}

// GPU ranks: the driver, CUDA and NCCL versions must agree, and no two ranks of a node may share
// a device; without GPUs these checks are absent, not skipped.
TEST(ValidateQuick, GpuVersionsAndDeviceIds) {
  EXPECT_THROW(find(quick_checks(fleet(), {}), "consistency/driver_version"), std::runtime_error);
  auto inv = fleet();
  for (json& r : inv) {
    r["driver_version"] = "12.4", r["nccl_version"] = "2.21.5", r["cuda_runtime_version"] = "12.4";
    r["device_pci_bus_id"] = "0000:0" + std::to_string(r["rank"].get<int>() % 2) + ":00.0";
  }
  inv[2]["nccl_version"] = "2.18.1";
  inv[3]["device_pci_bus_id"] = inv[2]["device_pci_bus_id"];  // node b: ranks 2 and 3 on one GPU
  const auto checks = quick_checks(inv, {});
  EXPECT_EQ(find(checks, "consistency/driver_version").status, "pass");
  const ValidateCheck& nccl = find(checks, "consistency/nccl_version");
  EXPECT_EQ(nccl.status, "fail");
  EXPECT_EQ(nccl.ranks, std::vector<int>{2});
  const ValidateCheck& ids = find(checks, "consistency/device_ids");
  EXPECT_EQ(ids.status, "fail");
  EXPECT_EQ(ids.nodes, std::vector<std::string>{"b"});
  EXPECT_EQ(ids.ranks, (std::vector<int>{2, 3}));
}

TEST(ValidateQuick, UnreadableFieldsAreSkippedNotPassed) {
  auto inv = fleet();
  for (json& r : inv) r["cpu_model"] = nullptr;
  EXPECT_EQ(find(quick_checks(inv, {}), "consistency/cpu_model").status, "skip");
}

TEST(ValidateQuick, ExpectationsParse) {
  const auto e = parse_expectations("gpus_per_node=8,device=H200,memory_gb=1.5e3");
  EXPECT_EQ(e.at("device"), "H200");
  EXPECT_EQ(e.at("memory_gb"), "1.5e3");
  EXPECT_TRUE(parse_expectations("").empty());
  for (const char* bad : {"gpus=8", "nodes", "=3", "cores=", "cores=-1", "cores=many", "nodes=1,nodes=2", "nodes=1,"})
    EXPECT_THROW(parse_expectations(bad), InputError) << bad;
}

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

TEST(ValidateMedium, InjectionParses) {
  const Injection i = parse_injection("3:compute:2", 4);
  EXPECT_EQ(i.rank, 3);
  EXPECT_DOUBLE_EQ(i.compute, 2.0);
  EXPECT_EQ(parse_injection("", 4).rank, -1);
  for (const char* bad : {"4:compute:2", "-1:compute:2", "x:compute:2", "3:disk:2", "3:compute:0.5", "3:compute:", "3",
                          "3:compute"})
    EXPECT_THROW(parse_injection(bad, 4), InputError) << bad;
}

// Round-robin pairs: every pair exactly once, no rank twice in a round; n - 1 rounds for even
// n, n for odd (one rank sits each out).
TEST(ValidateLong, PairRoundsMeetEveryPairOnce) {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    const auto rounds = pair_rounds(n);
    std::set<std::pair<int, int>> met;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << "n " << n << ": a rank twice in a round";
        EXPECT_TRUE(met.insert({a, b}).second) << "n " << n << ": pair " << a << "," << b << " twice";
      }
    }
    EXPECT_EQ(met.size(), size_t(n * (n - 1) / 2)) << n;
    if (n > 1) {
      EXPECT_EQ(rounds.size(), size_t(n % 2 ? n : n - 1)) << n;
    }
  }
  const Injection c = parse_injection("2:comm:3", 4);
  EXPECT_EQ(c.rank, 2);
  EXPECT_DOUBLE_EQ(c.comm, 3.0);
  EXPECT_DOUBLE_EQ(c.compute, 1.0);
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

// Hockney's model recovers alpha and beta from exact points; fewer than two sizes: {0, 0}.
TEST(ValidateLong, AlphaBetaFit) {
  const double alpha = 5e-6, beta = 10e9;
  std::vector<std::pair<double, double>> pts;
  for (double n : {8.0, 65536.0, 4194304.0}) pts.emplace_back(n, alpha + n / beta);
  const auto [a, b] = fit_alpha_beta(pts);
  EXPECT_NEAR(a, alpha, 1e-12);  // exact data: rounding of ~1e-3 s sums, relative 1e-15
  EXPECT_NEAR(b, beta, beta * 1e-9);
  EXPECT_EQ(fit_alpha_beta({{8.0, 1e-6}}), (std::pair<double, double>{0, 0}));
  // 1% noise on the largest message (4 us of its 420): residuals are relative, so alpha moves by
  // about 1% of itself (the 8-byte point, t = alpha + 0.8 ns, pins it), not by the microseconds
  // an unweighted fit would shift it (it went negative so on a real sweep).
  pts.back().second *= 1.01;
  const auto [a1, b1] = fit_alpha_beta(pts);
  EXPECT_NEAR(a1, alpha, 0.05 * alpha);
  EXPECT_NEAR(b1, beta, 0.02 * beta);
  const Injection h = parse_injection("2:hang", 4);
  EXPECT_TRUE(h.hang);
  EXPECT_EQ(h.rank, 2);
  EXPECT_THROW(parse_injection("4:hang", 4), InputError);
}

}  // namespace
}  // namespace dtb
