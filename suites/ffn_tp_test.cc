// The ffn_tp suite through the registry on the whole world (2 and 4 ranks here), with a
// small section: every check passes, a record per (pass, tp) exists, and TP = 1 is its
// own baseline (speedup exactly 1).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/comm/communicator.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

TEST(FfnTpSuite, SmallRunPassesEveryCheckAndRecordsEveryTp) {
  auto world = make_mpi_world();
  ASSERT_TRUE(suite_registry().contains("ffn_tp"));
  auto suite = suite_registry().at("ffn_tp")();
  json s = suite->defaults();
  s["hidden"] = 32, s["tokens"] = 16, s["iters"] = 1, s["repetitions"] = 2, s["warmup"] = 1;
  const json config = {{"ffn_tp", s}};
  suite->validate(s, config, WorldInfo(world->size()));
  CpuDevice device;
  SuiteContext ctx{*world, device, config, config.at("ffn_tp")};
  const SuiteResult r = suite->run(ctx);

  // TP = 1, 2, ... up to the world size (a power of two here, dividing 32).
  std::vector<int> want_tps;
  for (int t = 1; t <= world->size(); t *= 2) want_tps.push_back(t);
  EXPECT_EQ(r.data.at("tp_sizes").get<std::vector<int>>(), want_tps);
  EXPECT_EQ(r.data.at("hidden"), 32);
  EXPECT_EQ(r.data.at("tokens"), 16);

  // Three checks per TP > 1, each passing with a sensible margin.
  EXPECT_EQ(r.checks.size(), 3 * (want_tps.size() - 1));
  for (const Check& c : r.checks) {
    EXPECT_TRUE(c.passed) << c.name << ": " << c.value << " > " << c.tolerance;
    EXPECT_LT(c.fraction(), 0.5) << c.name;
  }
  std::set<std::string> names;
  for (const Check& c : r.checks) names.insert(c.name);
  for (int t : want_tps) {
    if (t == 1) continue;
    for (const char* k : {"output", "input_grad", "weight_grad"})
      EXPECT_TRUE(names.contains("ffn_tp/" + std::string(k) + "/tp:" + std::to_string(t))) << k << " " << t;
  }

  ASSERT_EQ(r.benchmarks.size(), 2 * want_tps.size());
  for (int t : want_tps)
    for (const char* pass : {"forward", "forward_backward"}) {
      const std::string name =
          std::string("ffn_tp/pass:") + pass + "/tp:" + std::to_string(t) + "/hidden:32/tokens:16";
      const json* rec = nullptr;
      for (const json& b : r.benchmarks)
        if (b.at("name") == name) rec = &b;
      ASSERT_NE(rec, nullptr) << name;
      EXPECT_EQ(rec->at("time_ms").at("n"), 2);
      EXPECT_GT(rec->at("time_ms").at("median").get<double>(), 0.0);
      const double comm = rec->at("comm_fraction");
      EXPECT_GE(comm, 0.0);
      EXPECT_LE(comm, 1.0);
      if (t == 1) {
        EXPECT_EQ(rec->at("speedup").get<double>(), 1.0) << name;
        EXPECT_EQ(comm, 0.0) << "no TP communication at TP = 1";
      } else {
        EXPECT_GT(rec->at("speedup").get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(rec->at("efficiency").get<double>(), rec->at("speedup").get<double>() / t);
      }
    }
}

TEST(FfnTpSuite, ValidateRefusesOutOfRangeValues) {
  auto suite = suite_registry().at("ffn_tp")();
  json s = suite->defaults();
  s["hidden"] = 0;
  EXPECT_THROW(suite->validate(s, json::object(), WorldInfo(1)), InputError);
  s = suite->defaults();
  s["iters"] = 0;
  EXPECT_THROW(suite->validate(s, json::object(), WorldInfo(1)), InputError);
}

}  // namespace
}  // namespace dtb
