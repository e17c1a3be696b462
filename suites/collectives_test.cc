// Tests of the collectives suite, run by the multi-rank binary at 2 and 4 ranks: a small
// sweep through the registry on the world communicator and on a one-rank group, checked
// against nccl-tests' definitions written out here independently, and validate()'s errors;
// at 4 ranks on emulated nodes of 2, the hierarchical all_reduce rows beside the flat ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "kernels/comm/communicator.h"
#include "kernels/error.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

std::unique_ptr<Suite> make_suite() { return suite_registry().at("collectives")(); }

/// A quick section: up to 64 KiB, 2 iterations (1 above 16 KiB), 2 repetitions.
json small_section() {
  json s = make_suite()->defaults();
  s["max_bytes"] = 65536;
  s["warmup_iters"] = 1;
  s["iters"] = 2;
  s["repetitions"] = 2;
  s["max_bytes_per_batch"] = 16384;
  return s;
}

SuiteResult run_suite(Communicator& comm, const json& section, int emulated_ranks_per_node = 0) {
  auto suite = make_suite();
  suite->validate(section, json::object(), comm.size());
  const json config = {{"collectives", section}};
  CpuDevice device;
  SuiteContext ctx{comm, device, config, section};
  ctx.options.emulated_ranks_per_node = emulated_ranks_per_node;
  return suite->run(ctx);
}

// nccl-tests doc/PERFORMANCE.md, restated.
double expected_factor(const std::string& op, int n) {
  if (n == 1) return 0;
  if (op == "all_reduce" || op == "all_reduce_hierarchical") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(n - 1) / n;
  if (op == "all_to_allv") {  // rank r sends (r + j) mod n units to j: the share off the diagonal
    double off = 0, all = 0;
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < n; ++j) (r == j ? all : off) += (r + j) % n;
    return off / (off + all);
  }
  return 1;
}

/// Checks every record of a run of `section` on n ranks; returns records per (op, placement).
std::map<std::string, int> check_records(const SuiteResult& r, const json& section, int n) {
  std::map<std::string, int> per_case;
  std::set<std::string> names;
  const size_t ts = section["dtype"] == "f64" ? 8 : 4;
  for (const json& rec : r.benchmarks) {
    const std::string op = rec["op"], placement = rec["placement"], name = rec["name"];
    const size_t bytes = rec["bytes"], count = rec["count"];
    SCOPED_TRACE(name);
    EXPECT_TRUE(names.insert(name).second) << "duplicate record name";
    EXPECT_EQ(name, "collectives/" + op + "/bytes:" + std::to_string(bytes) +
                        "/placement:" + placement);
    EXPECT_EQ(rec["n_wrong"], 0);
    EXPECT_EQ(rec["world_size"], n);
    const bool split = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
    const size_t row = n == 1 ? 1 : size_t(n) * (n - 1) / 2;  // all_to_allv: units each rank sends
    EXPECT_EQ(bytes, count * ts * (op == "all_to_allv" ? row : split ? n : 1));
    EXPECT_LE(bytes, size_t(section["max_bytes"]));
    const double factor = expected_factor(op, n);
    EXPECT_DOUBLE_EQ(rec["bus_factor"].get<double>(), factor);
    const double algbw = rec["algbw_GBps"], busbw = rec["busbw_GBps"];
    EXPECT_GT(algbw, 0);
    if (factor > 0) EXPECT_DOUBLE_EQ(busbw / algbw, factor);
    else EXPECT_EQ(busbw, 0.0);
    const double median_us = rec["time_us"]["median"];
    EXPECT_NEAR(algbw, bytes / (median_us * 1e-6) / 1e9, 1e-9 * algbw);
    EXPECT_EQ(rec["real_time"].get<double>(), median_us);
    EXPECT_EQ(rec["time_unit"], "us");
    EXPECT_EQ(rec["time_us"]["n"], section["repetitions"]);
    const int64_t per_batch = section["max_bytes_per_batch"], iters = section["iters"];
    EXPECT_EQ(rec["iterations"],
              std::max<int64_t>(1, std::min<int64_t>(iters, per_batch / int64_t(bytes))));
    ++per_case[op + "/" + placement];
  }
  return per_case;
}

TEST(CollectivesSuite, SmallSweepOnTheWorld) {
  auto world = make_mpi_world();
  const int n = world->size();
  const json section = small_section();
  const SuiteResult r = run_suite(*world, section);
  const auto per_case = check_records(r, section, n);
  // 8 B .. 64 KiB doubling is 14 sizes; all_gather/reduce_scatter/all_to_all's per-rank count
  // is S / (4 n), at least 1, so sizes below 4n bytes merge into one; all_to_allv's unit is
  // S / (4 R), R = n(n-1)/2 (1 on one rank), likewise.
  std::set<size_t> split_bytes, v_bytes;
  const size_t row = n == 1 ? 1 : size_t(n) * (n - 1) / 2;
  for (size_t s = 8; s <= 65536; s *= 2) {
    split_bytes.insert(std::max<size_t>(1, s / (4 * n)) * 4 * n);
    v_bytes.insert(std::max<size_t>(1, s / (4 * row)) * 4 * row);
  }
  const int split_sizes = int(split_bytes.size()), v_sizes = int(v_bytes.size());
  const std::map<std::string, int> want = {
      {"all_reduce/out_of_place", 14},           {"all_reduce/in_place", 14},
      {"all_gather/out_of_place", split_sizes},  {"all_gather/in_place", split_sizes},
      {"reduce_scatter/out_of_place", split_sizes}, {"reduce_scatter/in_place", split_sizes},
      {"broadcast/out_of_place", 14},            {"broadcast/in_place", 14},
      {"sendrecv/out_of_place", 14},             {"sendrecv/in_place", 14},
      {"all_to_all/out_of_place", split_sizes},  {"all_to_allv/out_of_place", v_sizes}};  // no in-place form
  EXPECT_EQ(per_case, want);
  ASSERT_EQ(r.checks.size(), 12u);
  for (const Check& c : r.checks) {
    EXPECT_TRUE(c.passed) << c.name;
    EXPECT_EQ(c.value, 0) << c.name;
    EXPECT_EQ(c.tolerance, 0) << c.name;
  }
  EXPECT_EQ(r.checks[0].name, "collectives/all_reduce/out_of_place/n_wrong");
  EXPECT_EQ(r.data["world_size"], n);
  EXPECT_EQ(r.data["size_definitions"].size(), 7u);
}

TEST(CollectivesSuite, DoubleInPlaceOnly) {
  auto world = make_mpi_world();
  json section = small_section();
  section["ops"] = {"reduce_scatter", "all_reduce"};
  section["dtype"] = "f64";
  section["out_of_place"] = false;
  section["max_bytes"] = 4096;
  const SuiteResult r = run_suite(*world, section);
  const auto per_case = check_records(r, section, world->size());
  EXPECT_EQ(per_case.size(), 2u);
  EXPECT_EQ(per_case.count("all_reduce/in_place"), 1u);
  ASSERT_EQ(r.checks.size(), 2u);
  EXPECT_EQ(r.checks[0].name, "collectives/reduce_scatter/in_place/n_wrong");
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name;
}

// Emulated nodes of 2 at 4 ranks: all_reduce_hierarchical rows beside the flat ones, exact, with
// the ring model's cross-node bytes (flat 2(g-1)/g S = 1.5 S, hierarchical 2(N-1)/N S = S).
TEST(CollectivesSuite, HierarchicalRowsOnEmulatedNodes) {
  auto world = make_mpi_world();
  if (world->size() != 4) GTEST_SKIP() << "two nodes of two ranks need 4 ranks";
  json section = small_section();
  section["ops"] = {"all_reduce"};
  section["max_bytes"] = 4096;
  const SuiteResult r = run_suite(*world, section, 2);
  const auto per_case = check_records(r, section, 4);
  EXPECT_EQ(per_case.at("all_reduce/out_of_place"), per_case.at("all_reduce_hierarchical/out_of_place"));
  EXPECT_EQ(per_case.at("all_reduce/in_place"), per_case.at("all_reduce_hierarchical/in_place"));
  for (const json& rec : r.benchmarks) {
    SCOPED_TRACE(rec["name"].get<std::string>());
    const double bytes = rec["bytes"];
    EXPECT_EQ(rec["nodes"], 2);
    EXPECT_EQ(rec["ranks_per_node"], 2);
    EXPECT_EQ(rec["nodes_emulated"], true);
    EXPECT_DOUBLE_EQ(rec["cross_node_bytes"].get<double>(), rec["op"] == "all_reduce" ? 1.5 * bytes : bytes);
  }
  ASSERT_EQ(r.checks.size(), 4u);
  EXPECT_EQ(r.checks[2].name, "collectives/all_reduce_hierarchical/out_of_place/n_wrong");
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name;
}

// One rank: every op still runs and checks, and busbw is 0. Run by world rank 0 only (a
// group of its own, no collective over the world), so that one table is printed, not n.
TEST(CollectivesSuite, OneRankHasZeroBusbw) {
  auto world = make_mpi_world();
  if (world->rank() != 0) return;
  auto self = make_mpi_self();
  json section = small_section();
  section["max_bytes"] = 1024;
  const SuiteResult r = run_suite(*self, section);
  check_records(r, section, 1);
  EXPECT_FALSE(r.benchmarks.empty());
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name;
  EXPECT_EQ(r.data["world_size"], 1);
}

TEST(CollectivesSuite, ValidateRejectsBadSections) {
  auto suite = make_suite();
  const json good = suite->defaults();
  EXPECT_NO_THROW(suite->validate(good, json::object(), 4));
  const std::vector<std::pair<std::string, json>> bad = {
      {"ops", {"all_reduce", "alltoall"}}, {"ops", json::array()}, {"min_bytes", 2},
      {"min_bytes", 1 << 27},              {"step_factor", 1},     {"iters", 0},
      {"repetitions", 0},                  {"warmup_iters", -1},   {"max_bytes_per_batch", 0},
      {"dtype", "bf16"},                   {"max_bytes", int64_t(1) << 40}};
  for (const auto& [key, value] : bad) {
    json s = good;
    s[key] = value;
    EXPECT_THROW(suite->validate(s, json::object(), 4), InputError) << key << " = " << value;
  }
  json neither = good;
  neither["in_place"] = false;
  neither["out_of_place"] = false;
  EXPECT_THROW(suite->validate(neither, json::object(), 4), InputError);
  try {
    json s = good;
    s["ops"] = {"alltoall"};
    suite->validate(s, json::object(), 4);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("alltoall"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtb
