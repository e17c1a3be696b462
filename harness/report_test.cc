// The report: statuses aggregated, checks flattened with their fraction of tolerance,
// files written atomically, and read back for the summary (`dtbench summary`): a real
// report's round trip, and malformed ones refused with one line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "harness/report.h"
#include "kernels/error.h"
#include "suites/host_load.h"

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

// A check that was not judged (a timing check on a busy machine) fails neither its suite nor the
// run: the suite's status is passed, the report counts it apart, the summary says so, and the
// run's exit status (report_passed, ReportSummary::passed) is 0.
TEST(Report, NotJudgedFailsNothing) {
  SuiteOutcome p{"pipeline", "", 8.9, "", {}};
  p.result.checks.push_back(make_check("pipeline/1f1b/p:2/m:4/in_flight", 2.0, 2.0));
  p.result.checks.push_back(
      make_not_judged(make_check("pipeline/1f1b/p:2/m:4/bubble", 0.07, 0.05), "the machine was busy: figures"));
  EXPECT_FALSE(p.result.checks[1].passed);
  EXPECT_FALSE(p.result.checks[1].failed());
  p.status = suite_status(p.result);
  EXPECT_EQ(p.status, "passed");
  p.host_load = host_load_json({[] {
    HostLoad h = host_load(17.5, 1.0, 8.9, 2, 4, 0.01);
    h.host = "vm";
    return h;
  }()});
  EXPECT_TRUE(report_passed({p}));
  const nlohmann::json r = make_report(nlohmann::json::object(), {p});
  EXPECT_EQ(r["checks"][1]["verdict"], "not_judged");
  EXPECT_EQ(r["checks"][1]["not_judged_reason"], "the machine was busy: figures");
  EXPECT_FALSE(r["checks"][1]["passed"].get<bool>());
  EXPECT_EQ(r["checks"][0]["verdict"], "passed");
  EXPECT_FALSE(r["checks"][0].contains("not_judged_reason"));
  EXPECT_EQ(r["suites"][0]["checks_not_judged"], 1);
  const ReportSummary s = read_report(r.dump(), "r.json");
  EXPECT_TRUE(s.passed());
  EXPECT_EQ(s.checks_failed, 0u);
  EXPECT_EQ(s.checks_not_judged, 1u);
  EXPECT_EQ(format_summary(s, "r.json"),
            "\nsuite          status     time (s)    checks\n"
            "pipeline       passed          8.9    1/2    (1 not judged)\n"
            "  other work on host vm: 1.85 of 2 cores' worth (this job's 4 ranks: 0.11) over 8.9 s\n"
            "checks: 1 passed, 0 failed, 1 not judged (the machine was busy)\nreport: r.json\n");
  EXPECT_EQ(suite_end_line(2, 2, p),
            "# [2/2] pipeline: passed in 8.9 s, 1/2 checks, 1 not judged (the machine was busy); other work on host "
            "vm: 1.85 of 2 cores' worth (this job's 4 ranks: 0.11) over 8.9 s");
  // A failed check beside it still fails the suite.
  p.result.checks.push_back(make_check("pipeline/1f1b/p:2/m:4/bubble_closed_form", 1e-3, 1e-13));
  EXPECT_EQ(suite_status(p.result), "failed");
}

// cuda_version and nccl_version come from the backend's inventory (null on the CPU backend's
// empty one), not a constant null.
TEST(Report, SoftwareVersionsFromTheBackendInventory) {
  const nlohmann::json cuda = software_versions({{"cuda_runtime_version", "12.4"}, {"nccl_version", "2.21.5"},
                                                 {"driver_version", "12.6"}});
  EXPECT_EQ(cuda, (nlohmann::json{{"cuda_version", "12.4"}, {"nccl_version", "2.21.5"}}));
  const nlohmann::json cpu = software_versions({});
  EXPECT_TRUE(cpu.at("cuda_version").is_null());
  EXPECT_TRUE(cpu.at("nccl_version").is_null());
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

namespace {

using nlohmann::json;

// Two suites the way a run leaves them: collectives passed with an all_reduce record,
// train failed with a data-parallel record whose loss diverged (NaN in memory, null on disk).
std::vector<SuiteOutcome> two_suites() {
  SuiteOutcome a{"collectives", "passed", 1.25, "", {}};
  for (const double busbw : {0.5, 2.5}) {
    json rec = benchmark_record("collectives/all_reduce/bytes:64/placement:in_place", 1, 1, 1e-6, 1e-6, "us");
    rec["op"] = "all_reduce";
    rec["bytes"] = busbw > 1 ? 1024 : 64;
    rec["busbw_GBps"] = busbw;
    a.result.benchmarks.push_back(rec);
  }
  a.result.checks.push_back(make_check("collectives/x", 0.0, 0.0));
  SuiteOutcome b{"train", "failed", 37.75, "", {}};
  json rec = benchmark_record("train/gpt/dp:2", 1, 1, 0.0343, 0.0343, "ms");
  rec["dp"] = 2;
  rec["tokens_per_s"] = 29860.0;
  rec["comm_fraction"] = 0.25;
  rec["final_loss"] = NAN;
  b.result.benchmarks.push_back(rec);
  b.result.checks.push_back(make_check("train/a", 0.0, 1.0));
  b.result.checks.push_back(make_check("train/b", 2.0, 1.0));
  return {a, b};
}

// The message read_report gives for `text` ("" when it reads).
std::string report_error(const std::string& text) {
  try {
    read_report(text, "r.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A valid report with one edit at a JSON pointer, as text.
std::string edited(const std::string& pointer, const json& value) {
  json r = make_report(json::object(), two_suites());
  r[json::json_pointer(pointer)] = value;
  return r.dump();
}

}  // namespace

TEST(ReportReader, RoundTripsWhatMakeReportWrites) {
  const json r = make_report({{"world_size", 2}}, two_suites());
  const ReportSummary s = read_report(r.dump(2), "r.json");
  ASSERT_EQ(s.suites.size(), 2u);
  EXPECT_EQ(s.suites[0].name, "collectives");
  EXPECT_EQ(s.suites[1].status, "failed");
  EXPECT_DOUBLE_EQ(s.suites[1].duration_s, 37.75);
  EXPECT_EQ(s.suites[1].checks_passed, 1);
  EXPECT_EQ(s.suites[1].checks_total, 2);
  EXPECT_FALSE(s.suites[0].error.has_value());
  EXPECT_EQ(s.checks, 3u);
  EXPECT_EQ(s.checks_failed, 1u);
  EXPECT_DOUBLE_EQ(s.peak_busbw_GBps, 2.5);
  EXPECT_DOUBLE_EQ(s.peak_busbw_bytes, 1024);
  ASSERT_EQ(s.train.size(), 1u);
  EXPECT_TRUE(std::isnan(s.train[0].final_loss));  // null on disk
  EXPECT_FALSE(s.passed());
  // The summary `dtbench run` prints, from the report in memory, is the one read back.
  const std::string text = format_summary(s, "r.json");
  EXPECT_EQ(format_summary(summarize_report(r, "run"), "r.json"), text);
  EXPECT_EQ(text,
            "\nsuite          status     time (s)    checks\n"
            "collectives    passed          1.2    1/1   \n"
            "train          failed         37.8    1/2   \n"
            "train: 29860 tokens/s over 2 ranks, step 34.3 ms (comm 25%), final loss nan\n"
            "all_reduce: peak busbw 2.50 GB/s at 1024 B\n"
            "checks: 2 passed, 1 failed\nreport: r.json\n");
}

TEST(ReportReader, PassedOnlyWithoutFailedOrErroredSuites) {
  auto suites = two_suites();
  suites[1].status = "skipped";
  EXPECT_TRUE(read_report(make_report(json::object(), suites).dump(), "r").passed());
  suites[1].status = "error";
  suites[1].error = "boom\n\x1b[31m";
  const ReportSummary s = read_report(make_report(json::object(), suites).dump(), "r");
  EXPECT_FALSE(s.passed());
  EXPECT_EQ(s.suites[1].error, "boom\n\x1b[31m");
  // A report's strings cannot drive the terminal.
  EXPECT_NE(format_summary(s, "r").find("  error: boom??[31m\n"), std::string::npos);
  EXPECT_TRUE(read_report(R"({"schema_version":6,"context":{},"benchmarks":[],"suites":[],"checks":[]})", "r").passed());
}

TEST(ReportReader, RefusesMalformedReportsWithOneLine) {
  EXPECT_EQ(report_error("{\"schema_version\": "),
            "malformed JSON in report r.json: syntax error while parsing value - unexpected end of input; "
            "expected '[', '{', or a literal");
  EXPECT_EQ(report_error(std::string(100, '[') + std::string(100, ']')), "report r.json nests deeper than 64 levels");
  EXPECT_EQ(report_error("[1]"), "report r.json: the top level must be an object, got [1]");
  EXPECT_EQ(report_error(edited("/schema_version", 1)),
            "report r.json: schema_version 1 is not 6, the version this dtbench reads");
  EXPECT_EQ(report_error(edited("/schema_version", "3")),
            "report r.json: schema_version \"3\" is not 6, the version this dtbench reads");
  EXPECT_EQ(report_error(R"({"schema_version": 6, "context": {}, "benchmarks": [], "checks": []})"),
            "report r.json: the top level has no 'suites'");
  EXPECT_EQ(report_error(edited("/context", json::array())), "report r.json: context must be an object");
  EXPECT_EQ(report_error(edited("/checks", json::object())), "report r.json: checks must be a list");
  EXPECT_EQ(report_error(edited("/suites/1", 3)), "report r.json: suites[1] must be an object");
  EXPECT_EQ(report_error(edited("/suites/1/status", "bogus")),
            "report r.json: suites[1].status must be passed, failed, error or skipped, got \"bogus\"");
  EXPECT_EQ(report_error(edited("/suites/0/checks_passed", 5)),
            "report r.json: suites[0] has checks_passed 5 + checks_not_judged 0 > checks_total 1");
  EXPECT_EQ(report_error(edited("/suites/0/checks_total", -1)),
            "report r.json: suites[0].checks_total must be an integer >= 0, got -1");
  EXPECT_EQ(report_error(edited("/suites/0/checks_total", 18446744073709551615u)),
            "report r.json: suites[0].checks_total must be an integer >= 0, got 18446744073709551615");
  EXPECT_EQ(report_error(edited("/suites/0/duration_s", "1")),
            "report r.json: suites[0].duration_s must be a number >= 0 or null, got \"1\"");
  EXPECT_EQ(report_error(edited("/suites/0/duration_s", -1)),
            "report r.json: suites[0].duration_s must be a number >= 0 or null, got -1");
  EXPECT_EQ(report_error(edited("/suites/0/error", 7)), "report r.json: suites[0].error must be a string or null");
  EXPECT_EQ(report_error(edited("/suites/0/name", "")), "report r.json: suites[0].name is empty");
  EXPECT_EQ(report_error(edited("/checks/2/passed", "no")), "report r.json: checks[2].passed must be true or false");
  EXPECT_EQ(report_error(edited("/checks/2/verdict", "maybe")),
            "report r.json: checks[2].verdict must be passed, failed or not_judged, got \"maybe\"");
  EXPECT_EQ(report_error(edited("/checks/2/verdict", "not_judged")), "");  // passed is false either way
  EXPECT_EQ(report_error(edited("/checks/1/verdict", "not_judged")),
            "report r.json: checks[1] has passed true with verdict not_judged");
  EXPECT_EQ(report_error(edited("/suites/0/checks_not_judged", -1)),
            "report r.json: suites[0].checks_not_judged must be an integer >= 0, got -1");
  EXPECT_EQ(report_error(edited("/suites/0/host_load", 3)), "report r.json: suites[0].host_load must be an object or null");
  EXPECT_EQ(report_error(edited("/suites/0/host_load", json{{"interval_s", 1}, {"other_cores", 0}, {"hosts", json::array({json{{"host", "h"}}})}})),
            "report r.json: suites[0].host_load.hosts[0] has no 'cpus'");
  EXPECT_EQ(report_error(edited("/benchmarks/1/busbw_GBps", "fast")),
            "report r.json: benchmarks[1].busbw_GBps must be a number >= 0 or null, got \"fast\"");
  EXPECT_EQ(report_error(edited("/benchmarks/0/op", 1)), "report r.json: benchmarks[0].op must be a string");
  EXPECT_EQ(report_error(edited("/benchmarks/2/dp", 0)),
            "report r.json: benchmarks[2].dp must be an integer >= 1, got 0");
  EXPECT_EQ(report_error(R"({"schema_version": 6, "context": {}, "benchmarks": [1e400]})"),
            "report r.json: number overflow parsing '1e400'");
  EXPECT_EQ(report_error(edited("/suites/0/data", nullptr)), "report r.json: suites[0].data must be an object");
}

TEST(ReportReader, ReadsFilesAndNamesTheMissingOne) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / ("dtb_report_reader." + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "r.json").string();
  write_json_atomic(path, make_report(json::object(), two_suites()));
  EXPECT_EQ(read_report_file(path).suites.size(), 2u);
  try {
    read_report_file((dir / "nope.json").string());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "report file not found or unreadable: " + (dir / "nope.json").string());
  }
  EXPECT_THROW(read_report_file(dir.string()), InputError);  // a directory
  fs::remove_all(dir);
}

// The report reader's regressions (harness/fuzz/regressions/report, replayed by
// scripts/fuzz): reports the summary printer in harness/main.cc threw nlohmann's
// type_error on (a null final_loss, which a diverged run writes; an "op" that is not a
// string). "" where the report reads.
TEST(ReportReader, FuzzRegressions) {
  const std::map<std::string, std::string> expected = {
      {"final-loss-null.json", ""},
      {"op-not-a-string.json", "report r.json: benchmarks[0].op must be a string"},
  };
  namespace fs = std::filesystem;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(std::string(DTB_SOURCE_DIR) + "/harness/fuzz/regressions/report")) {
    const std::string name = e.path().filename().string();
    ASSERT_TRUE(expected.count(name)) << name << ": a regression without its expected message here";
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(report_error(text.str()), expected.at(name)) << name;
    ++files;
  }
  EXPECT_EQ(files, expected.size());
}

}  // namespace dtb
