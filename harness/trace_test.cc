// Chrome trace export: the JSON parses, names one track per rank, and every complete
// event has ts, dur >= 0, a rank in range and an allowed name; spans survive the wire.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "harness/trace.h"

namespace dtb {
namespace {

using nlohmann::json;

// Three ranks' spans of two steps, starting at 100 s on the clock; rank 2 recorded none.
std::vector<std::vector<Span>> three_ranks() {
  std::vector<std::vector<Span>> per_rank(3);
  for (int r = 0; r < 2; ++r) {
    SpanRecorder rec(true);
    for (int s = 0; s < 2; ++s) {
      const double t = 100.0 + s + 0.125 * r;
      rec.add("compute.forward", s, t, t + 0.25);
      rec.add("compute.backward", s, t + 0.25, t + 0.5);
      rec.add("comm.all_reduce", s, t + 0.5, t + 0.75);
      rec.add("compute.optimizer", s, t + 0.75, t + 0.875);
      rec.add_step(s, t, t + 1.0);
    }
    per_rank[r] = rec.spans();
  }
  return per_rank;
}

TEST(Trace, ChromeTraceIsValidWithOneTrackPerRank) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / ("dtb_trace_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  const auto per_rank = three_ranks();
  write_chrome_trace(path, per_rank);
  std::ifstream in(path);
  const json t = json::parse(in);  // throws on malformed JSON
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  ASSERT_TRUE(t["traceEvents"].is_array());

  const auto names = span_names();
  const std::set<std::string> allowed(names.begin(), names.end());
  std::set<int> named_tracks;
  size_t complete = 0;
  double min_ts = 1e300;
  std::set<std::string> seen;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      const int tid = e["tid"];
      EXPECT_TRUE(named_tracks.insert(tid).second) << "two names for track " << tid;
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(tid));
    } else if (e["ph"] == "X") {
      ++complete;
      const int tid = e["tid"];
      EXPECT_GE(tid, 0);
      EXPECT_LT(tid, 3);
      EXPECT_EQ(e["pid"], 0);
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      const std::string name = e["name"];
      EXPECT_TRUE(allowed.count(name)) << name;
      EXPECT_EQ(e["cat"], name.substr(0, name.find('.')));
      EXPECT_TRUE(e["args"]["step"].is_number_integer());
      min_ts = std::min(min_ts, e["ts"].get<double>());
      seen.insert(name);
    }
  }
  EXPECT_EQ(named_tracks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(complete, per_rank[0].size() + per_rank[1].size());
  EXPECT_EQ(min_ts, 0.0);  // relative to the earliest span
  EXPECT_EQ(seen, (std::set<std::string>{"compute.forward", "compute.backward", "comm.all_reduce",
                                         "compute.optimizer", "idle"}));
  // Microseconds: rank 1's first forward starts 0.125 s after rank 0's and lasts 0.25 s.
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 1 && e["name"] == "compute.forward" && e["args"]["step"] == 0) {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 125000.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 250000.0);
    }
  fs::remove_all(dir);
}

TEST(Trace, EmptyRunStillNamesTracks) {
  const json t = make_chrome_trace(std::vector<std::vector<Span>>(2));
  int tracks = 0;
  for (const auto& e : t["traceEvents"]) {
    EXPECT_NE(e["ph"], "X");
    tracks += e["name"] == "thread_name";
  }
  EXPECT_EQ(tracks, 2);
}

TEST(Trace, SpansRoundTripThroughTheWireFormat) {
  const auto spans = three_ranks()[1];
  const std::vector<double> wire = spans_to_doubles(spans);
  ASSERT_EQ(wire.size(), 4 * spans.size());
  const std::vector<Span> back = spans_from_doubles(wire);
  ASSERT_EQ(back.size(), spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(back[i].name, spans[i].name);
    EXPECT_EQ(back[i].name.data(), spans[i].name.data());  // the same table entry
    EXPECT_EQ(back[i].step, spans[i].step);
    EXPECT_EQ(back[i].start_s, spans[i].start_s);
    EXPECT_EQ(back[i].end_s, spans[i].end_s);
  }
  EXPECT_THROW(spans_from_doubles({0.0, 1.0, 2.0}), std::runtime_error);
  EXPECT_THROW(spans_from_doubles({99.0, 0.0, 0.0, 1.0}), std::runtime_error);
  EXPECT_THROW(spans_from_doubles({-1.0, 0.0, 0.0, 1.0}), std::runtime_error);
  EXPECT_THROW(spans_from_doubles({0.5, 0.0, 0.0, 1.0}), std::runtime_error);
}

}  // namespace
}  // namespace dtb
