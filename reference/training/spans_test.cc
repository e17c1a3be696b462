// SpanRecorder: scoped spans nest and sequence on the clock, idle fills exactly the
// uncovered time of a step, a disabled recorder records nothing, breakdowns sum.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/timer.h"
#include "reference/training/spans.h"

namespace dtb {
namespace {

TEST(Spans, ScopesNestAndSequence) {
  SpanRecorder rec(true);
  const double t0 = now_seconds();
  {
    auto step = rec.step_scope(3);
    {
      auto outer = rec.scope("compute.backward", 3);
      auto inner = rec.scope("comm.all_reduce", 3);  // nested: ends first
      inner.end();
      inner.end();  // a second end does nothing
    }
    auto opt = rec.scope("compute.optimizer", 3);
  }  // opt ends, then the step window
  const double t1 = now_seconds();
  const auto& s = rec.spans();
  ASSERT_GE(s.size(), 3u);
  EXPECT_EQ(s[0].name, "comm.all_reduce");
  EXPECT_EQ(s[1].name, "compute.backward");
  EXPECT_EQ(s[2].name, "compute.optimizer");
  for (const Span& x : s) {
    EXPECT_EQ(x.step, 3);
    EXPECT_LE(t0, x.start_s);
    EXPECT_LE(x.start_s, x.end_s);
    EXPECT_LE(x.end_s, t1);
  }
  EXPECT_LE(s[1].start_s, s[0].start_s);  // inner within outer
  EXPECT_LE(s[0].end_s, s[1].end_s);
  EXPECT_LE(s[1].end_s, s[2].start_s);  // then in sequence
  for (size_t i = 3; i < s.size(); ++i) EXPECT_EQ(s[i].name, "idle");
  EXPECT_GT(rec.step_seconds(3), 0.0);
  EXPECT_EQ(rec.step_seconds(4), 0.0);
}

TEST(Spans, IdleFillsExactlyTheUncoveredTimeOfAStep) {
  SpanRecorder rec(true);
  // Step 1's window is [0, 10]; busy: [1, 3] and [2, 4] overlap, [6, 7], and one starting
  // before the window ([-1, 0.5]) is clipped. Another step's span inside is ignored.
  rec.add("compute.forward", 1, -1.0, 0.5);
  rec.add("compute.forward", 1, 1.0, 3.0);
  rec.add("comm.all_reduce", 1, 2.0, 4.0);
  rec.add("compute.optimizer", 1, 6.0, 7.0);
  rec.add("compute.backward", 2, 8.0, 9.0);
  rec.add_step(1, 0.0, 10.0);
  std::vector<std::pair<double, double>> idle;
  for (const Span& s : rec.spans())
    if (s.name == "idle") {
      EXPECT_EQ(s.step, 1);
      idle.emplace_back(s.start_s, s.end_s);
    }
  EXPECT_EQ(idle, (std::vector<std::pair<double, double>>{{0.5, 1.0}, {4.0, 6.0}, {7.0, 10.0}}));
  // A fully covered step has no idle; an empty one is all idle.
  rec.add("compute.forward", 5, 20.0, 21.0);
  rec.add_step(5, 20.0, 21.0);
  rec.add_step(6, 30.0, 32.0);
  const auto b5 = rec.breakdown(5), b6 = rec.breakdown(6);
  EXPECT_EQ(b5.count("idle"), 0u);
  EXPECT_EQ(b6.size(), 1u);
  EXPECT_DOUBLE_EQ(b6.at("idle"), 2.0);
}

TEST(Spans, BreakdownSumsToTheStep) {
  SpanRecorder rec(true);
  rec.add("compute.forward", 0, 0.25, 1.0);
  rec.add("compute.backward", 0, 1.0, 2.5);
  rec.add("compute.forward", 0, 2.5, 3.0);  // a second micro-batch
  rec.add("comm.all_reduce", 0, 3.5, 4.0);
  rec.add("compute.optimizer", 0, 4.0, 4.5);
  rec.add_step(0, 0.0, 5.0);
  const auto b = rec.breakdown(0);
  EXPECT_DOUBLE_EQ(b.at("compute.forward"), 1.25);
  EXPECT_DOUBLE_EQ(b.at("compute.backward"), 1.5);
  EXPECT_DOUBLE_EQ(b.at("comm.all_reduce"), 0.5);
  EXPECT_DOUBLE_EQ(b.at("compute.optimizer"), 0.5);
  EXPECT_DOUBLE_EQ(b.at("idle"), 0.25 + 0.5 + 0.5);
  double sum = 0;
  for (const auto& [name, sec] : b) sum += sec;
  EXPECT_DOUBLE_EQ(sum, rec.step_seconds(0));
  EXPECT_TRUE(rec.breakdown(1).empty());
  rec.clear();
  EXPECT_TRUE(rec.spans().empty());
  EXPECT_EQ(rec.step_seconds(0), 0.0);
}

TEST(Spans, DisabledRecorderRecordsNothing) {
  SpanRecorder rec;  // disabled by default
  EXPECT_FALSE(rec.enabled());
  {
    auto step = rec.step_scope(0);
    auto f = rec.scope("compute.forward", 0);
  }
  rec.add("compute.forward", 0, 0.0, 1.0);
  rec.add_step(0, 0.0, 2.0);
  EXPECT_TRUE(rec.spans().empty());
  EXPECT_TRUE(rec.breakdown(0).empty());
  EXPECT_EQ(rec.spans().capacity(), 0u);  // nothing allocated
  auto none = span_scope(nullptr, "compute.forward", 0);  // a null recorder is inert too
  none.end();
}

TEST(Spans, NamesAreAFixedTable) {
  const auto names = span_names();
  for (const char* n : {"compute.forward", "compute.backward", "compute.optimizer", "comm.all_reduce", "idle"})
    EXPECT_GE(span_name_index(n), 0) << n;
  EXPECT_EQ(span_name_index("compute.nosuch"), -1);
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(span_name_index(names[i]), int(i));
}

TEST(SpansDeathTest, UnknownOrIdleNamesAbort) {
  SpanRecorder rec(true);
  EXPECT_DEATH(rec.scope("compute.nosuch", 0), "not a recordable span name");
  EXPECT_DEATH(rec.add("idle", 0, 0.0, 1.0), "not a recordable span name");
}

}  // namespace
}  // namespace dtb
