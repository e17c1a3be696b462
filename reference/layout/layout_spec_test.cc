// The layout spec options of stale gradients and local steps (reference/layout/layout_spec.h): their
// spellings in a spec, a record name and a record's fields, and the specs refused. The spec text
// (layout_spec_text) as parse_layout_spec's inverse: on the default conformance layouts and on
// generated specs.
#include <gtest/gtest.h>

#include <random>

#include "kernels/error.h"
#include "reference/layout/layout_spec.h"
#include "suites/conformance.h"

namespace dtb {
namespace {

TEST(LayoutSpec, StaleDelayCompensationAndLocalStepsOptions) {
  const LayoutSpec s = parse_layout_spec("DP4:stale2:dc", "t");
  EXPECT_EQ(s.l.dp, 4);
  EXPECT_EQ(s.dp_sync.staleness, 2);
  EXPECT_EQ(s.dp_sync.delay_compensation, 0.1);  // dc alone: lambda 0.1
  EXPECT_EQ(layout_record_name(s), "tp:1/dp:4/pp:1/schedule:1f1b/stale:2/dc:0.1");
  EXPECT_EQ(parse_layout_spec("DP2:stale1:dc0.5", "t").dp_sync.delay_compensation, 0.5);
  const LayoutSpec l = parse_layout_spec("DP4:local4", "t");
  EXPECT_EQ(l.dp_sync.local_steps, 4);
  EXPECT_EQ(layout_record_name(l), "tp:1/dp:4/pp:1/schedule:1f1b/local:4");
  nlohmann::json rec;
  add_layout_fields(rec, l);
  EXPECT_EQ(rec.at("local_steps"), 4);
  EXPECT_EQ(rec.at("staleness"), 0);
  nlohmann::json sync;
  add_layout_fields(sync, parse_layout_spec("DP4", "t"));
  EXPECT_FALSE(sync.contains("staleness"));  // synchronous records are as before
  for (const char* bad : {"DP4:stale0", "DP4:local0", "DP4:dc", "DP4:stale1:local2", "DP4:stale1:dcx", "DP4:stale1:dc0",
                          "DP4:stale1:stale2"})
    EXPECT_THROW(parse_layout_spec(bad, "t"), InputError) << bad;
}

TEST(LayoutSpec, ContextParallelDimensionAndCommType) {
  const LayoutSpec s = parse_layout_spec("tp2xcp2:sp:all_gather", "t");
  EXPECT_EQ(s.l.tp, 2);
  EXPECT_EQ(s.l.cp, 2);
  EXPECT_EQ(s.l.dp, 1);
  EXPECT_EQ(s.l.world(), 4);
  EXPECT_EQ(s.l.cp_comm_type, "all_gather");
  EXPECT_EQ(layout_spec_text(s), "TP2xCP2:sp:all_gather");
  EXPECT_EQ(layout_record_name(s), "tp:2/dp:1/pp:1/schedule:1f1b/cp:2/cp_comm:all_gather/sp:on");
  EXPECT_EQ(layout_spec_text(parse_layout_spec("DP2xCP2xPP2", "t")), "CP2xPP2xDP2");
  EXPECT_EQ(layout_record_name(parse_layout_spec("CP2", "t")), "tp:1/dp:1/pp:1/schedule:1f1b/cp:2");
  nlohmann::json rec, plain;
  add_layout_fields(rec, parse_layout_spec("CP4", "t"));
  EXPECT_EQ(rec["cp"], 4);
  EXPECT_EQ(rec["cp_comm_type"], "p2p");
  add_layout_fields(plain, parse_layout_spec("TP2", "t"));
  EXPECT_FALSE(plain.contains("cp"));  // the records of every other layout as before
  for (const char* bad : {"CP2xCP2", "DP2:p2p", "CP2:p2p:all_gather"})
    EXPECT_THROW(parse_layout_spec(bad, "t"), InputError) << bad;
  const nlohmann::json section = {{"tensor_parallel", 1},  {"pipeline_parallel", 1}, {"data_parallel", 0},
                                  {"context_parallel", 2}, {"cp_comm_type", "all_gather"}, {"virtual_stages", 1},
                                  {"schedule", "1f1b"}};
  const ParallelLayout l = parallel_layout_from_json(section, "train", {4, 64, 4, 32, 256}, 1, 8, 4, 16);
  EXPECT_EQ(l.cp, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.cp_comm_type, "all_gather");
}

TEST(LayoutSpecText, DefaultConformanceLayoutsAreCanonical) {
  for (bool moe : {false, true})
    for (const std::string& t : default_conformance_layouts(moe)) {
      const LayoutSpec s = parse_layout_spec(t, "t");
      EXPECT_EQ(layout_spec_text(s), t);
      EXPECT_EQ(to_json(parse_layout_spec(layout_spec_text(s), "t")), to_json(s)) << t;
    }
}

// A canonical spec text drawn at random from the options the parser takes, each combination
// it accepts (zb-h1 without full, dc with staleK only, staleK or localH, at most 7), spelled here by hand
// so that the formatter is checked against an independent copy of the canonical form.
std::string random_canonical_spec(std::mt19937& rng) {
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  auto chance = [&](int pct) { return pick(100) < pct; };
  const int sizes[] = {1, 1, 1, 2, 3, 4, 8, 16};
  const int tp = sizes[pick(8)], pp = sizes[pick(8)], dp = sizes[pick(8)];
  const int ep = dp > 1 && chance(30) ? 2 + pick(dp - 1) : 1;
  std::vector<std::string> dims;
  auto dim = [&](const std::string& name, int n) { dims.push_back(name + std::to_string(n)); };
  if (tp > 1) dim("TP", tp);
  if (ep == 1) {
    if (pp > 1) dim("PP", pp);
    if (dp > 1) dim("DP", dp);
  } else {
    if (dp != ep || pp > 1) dim("DP", dp);
    dim("EP", ep);
    if (pp > 1) dim("PP", pp);
  }
  std::string text = dims.empty() ? "DP1" : dims[0];
  for (size_t i = 1; i < dims.size(); ++i) text += "x" + dims[i];
  const char* schedules[] = {"1f1b", "1f1b", "gpipe", "interleaved", "zb-h1"};  // the default twice as often
  const std::string schedule = schedules[pick(5)];
  std::vector<std::string> opts;
  const bool plain = chance(40);  // dimensions and a schedule only: "PP2:1f1b", "TP2xPP2", "DP4:gpipe"
  auto chance_opt = [&](int pct) { return !plain && chance(pct); };
  if (chance_opt(20)) opts.push_back("v" + std::to_string(2 + pick(9998)));
  if (chance_opt(20)) {
    std::string layers = "layers" + std::to_string(1 + pick(9));
    for (int n = pick(4); n > 0; --n) layers += "+" + std::to_string(1 + pick(9));
    opts.push_back(layers);
  }
  if (chance_opt(30)) opts.push_back("sp");
  if (chance_opt(40)) opts.push_back("zero" + std::to_string(1 + pick(3)));
  if (chance_opt(20)) opts.push_back("offload");
  const int recompute = plain ? 0 : pick(3);  // none, selective, full
  if (recompute == 1) opts.push_back("selective");
  if (recompute == 2 && schedule != "zb-h1") opts.push_back("full");
  if (chance_opt(20)) opts.push_back("hier" + std::to_string(1 + pick(64)));
  const int sync = plain ? 0 : pick(4);  // synchronous, staleK, staleK with dc, localH
  if (sync == 1 || sync == 2) opts.push_back("stale" + std::to_string(1 + pick(16)));
  if (sync == 2) {
    const char* lambdas[] = {"", "0.5", "2", "0.25", "1e-05", "0.125", "3.75", "1e+06"};
    opts.push_back(std::string("dc") + lambdas[pick(8)]);
  }
  if (sync == 3) opts.push_back("local" + std::to_string(1 + pick(500)));
  // The parser takes at most 7 options (8 ':'-separated parts): drop some, never staleK (dc needs it).
  while (opts.size() + (schedule != "1f1b") > 7) {
    const size_t i = size_t(pick(int(opts.size())));
    if (opts[i].rfind("stale", 0) != 0) opts.erase(opts.begin() + long(i));
  }
  const bool alone = pp > 1 && tp == 1 && dp == 1 && opts.empty();
  if (schedule != "1f1b" || alone) text += ":" + schedule;
  for (const std::string& o : opts) text += ":" + o;
  return text;
}

TEST(LayoutSpecText, RoundTripsGeneratedSpecs) {
  std::mt19937 rng(43);
  int alone = 0, experts = 0, lambdas = 0;  // how often the generator reached the rarer rules
  for (int i = 0; i < 1000; ++i) {
    const std::string t = random_canonical_spec(rng);
    alone += t.find(":1f1b") != std::string::npos;
    experts += t.find("EP") != std::string::npos;
    lambdas += t.find(":dc") != std::string::npos && !t.ends_with(":dc") && t.find(":dc:") == std::string::npos;
    LayoutSpec s;
    ASSERT_NO_THROW(s = parse_layout_spec(t, "t")) << t;
    EXPECT_EQ(layout_spec_text(s), t);
    EXPECT_EQ(to_json(parse_layout_spec(layout_spec_text(s), "t")), to_json(s)) << t;
  }
  EXPECT_GT(alone, 5);
  EXPECT_GT(experts, 50);
  EXPECT_GT(lambdas, 20);
}

// Every option kind at once (10 options, 11 parts) parses and prints back: the parser once
// refused more than 8 parts as "is not a layout".
TEST(LayoutSpecText, EveryOptionAtOnce) {
  for (const std::string t : {"PP4:interleaved:v2:layers1+3+3+1:sp:zero1:offload:full:hier2:stale1:dc",
                              "TP2xPP2xDP2:zb-h1:layers3+5:sp:zero3:offload:selective:hier4:local8"}) {
    const LayoutSpec s = parse_layout_spec(t, "t");
    EXPECT_EQ(layout_spec_text(s), t);
  }
  EXPECT_THROW(parse_layout_spec("TP2:zero1:zero2", "t"), InputError);  // a repeat, by name
}

TEST(LayoutSpecText, OtherForms) {
  const LayoutSpec moe = parse_layout_spec("DP4xEP2xPP2", "t");
  SpecTextForm sweep;
  sweep.schedule = DefaultSchedule::every_pipeline, sweep.fixed_dimension_order = true;
  EXPECT_EQ(layout_spec_text(moe, sweep), "PP2xDP4xEP2:1f1b");
  EXPECT_EQ(layout_spec_text(parse_layout_spec("EP2", "t"), sweep), "DP2xEP2");
  SpecTextForm memory;
  memory.data_parallel_always = true;
  EXPECT_EQ(layout_spec_text(parse_layout_spec("TP2:sp", "t"), memory), "TP2xDP1:sp");
  SpecTextForm planner;
  planner.schedule = DefaultSchedule::never, planner.sp_last = true;
  EXPECT_EQ(layout_spec_text(parse_layout_spec("PP2", "t"), planner), "PP2");
  EXPECT_EQ(layout_spec_text(parse_layout_spec("TP2xDP2:sp:zero1:full", "t"), planner), "TP2xDP2:zero1:full:sp");
  // Parsed in any order and case, printed in one.
  EXPECT_EQ(layout_spec_text(parse_layout_spec("dp2xtp2:zero1:sp", "t")), "TP2xDP2:sp:zero1");
}

}  // namespace
}  // namespace dtb
