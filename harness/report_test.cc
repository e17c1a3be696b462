// The report: statuses aggregated, checks flattened with their fraction of tolerance,
// files written atomically.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness/report.h"

namespace dtb {

TEST(Report, AggregatesSuitesChecksAndRecords) {
  SuiteOutcome a{"collectives", "passed", 1.0, "", {}};
  a.result.benchmarks.push_back(benchmark_record("collectives/x", 1, 1, 1e-6, 1e-6, "us"));
  a.result.checks.push_back(make_check("c1", 0.0, 0.0));
  SuiteOutcome b{"train", "failed", 2.0, "", {}};
  b.result.checks.push_back(make_check("c2", 2.0, 1.0, "why"));
  const auto r = make_report({{"world_size", 4}}, {a, b});
  EXPECT_EQ(r["benchmarks"].size(), 1u);
  ASSERT_EQ(r["checks"].size(), 2u);
  EXPECT_EQ(r["checks"][1]["suite"], "train");
  EXPECT_DOUBLE_EQ(r["checks"][1]["fraction_of_tolerance"].get<double>(), 2.0);
  EXPECT_FALSE(r["checks"][1]["passed"].get<bool>());
  EXPECT_EQ(r["suites"][0]["checks_passed"], 1);
  EXPECT_TRUE(r["suites"][0]["error"].is_null());
  EXPECT_FALSE(report_passed({a, b}));
  EXPECT_TRUE(report_passed({a}));
  SuiteOutcome e{"train", "error", 0.1, "boom", {}};
  EXPECT_FALSE(report_passed({a, e}));
  EXPECT_EQ(make_report({}, {e})["suites"][0]["error"], "boom");
}

TEST(Report, WritesAtomically) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / ("dtb_report_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "r.json").string();
  write_json_atomic(path, {{"a", 1}});
  write_json_atomic(path, {{"a", 2}});
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["a"], 2);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += (void(e), 1);
  EXPECT_EQ(files, 1);  // no temp file left behind
  EXPECT_THROW(write_json_atomic("/proc/dtb-nope/r.json", {}), std::runtime_error);
  fs::remove_all(dir);
}

}  // namespace dtb
