// Tests of harness/plan_validate.h: Narayanan et al.'s Eq. 3 on a row worked by hand, the strict
// reader's refusals (each naming the key), MAPE and the worst rows, and the comparisons' verdicts
// on a synthetic set. The shipped set's numbers are checked by harness/plan_validate_test.sh.
#include "harness/plan_validate.h"

#include <gtest/gtest.h>

#include "harness/config.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

// Narayanan et al. 2021 Table 1, the 1T row: B 3072, s 2048, l 128, h 25600, V 51200.
// s / (6 h) = 2048 / 153600 = 1/75 and V / (16 l h) = 51200 / 52428800 = 1/1024 exactly.
TEST(PlanValidate, Eq3OnTheTrillionRowByHand) {
  const double base = 96.0 * 3072 * 2048 * 128 * 25600.0 * 25600.0;  // 5.0665e19
  const double f = base * (1 + 1.0 / 75 + 1.0 / 1024);
  EXPECT_DOUBLE_EQ(narayanan_eq3_flops(3072, 2048, 128, 25600, 51200), f);
  ValidationRow r;
  r.model = GptConfig{128, 25600, 160, 2048, 51200};
  r.seq_len = 2048, r.gpus = 3072, r.global_batch = 3072, r.published = 163;
  r.unit = "tflops_per_gpu", r.flop_convention = "narayanan2021_eq3";
  EXPECT_NEAR(published_step_s(r), f / (3072 * 163e12), 1e-9);  // 102.63 s
  EXPECT_NEAR(published_step_s(r), 102.63, 0.01);
  r.unit = "s_per_iteration", r.flop_convention = "none", r.published = 94.42;
  EXPECT_EQ(published_step_s(r), 94.42);
  r.unit = "tflops_per_gpu";
  EXPECT_THROW(published_step_s(r), InputError);
}

// A one-row, two-comparison set that the reader takes.
json small_set() {
  const double step = narayanan_eq3_flops(8, 64, 2, 64, 256) / (4 * 100e12);
  json row = {{"id", "r1"}, {"source", "a paper, Table 1"}, {"stack", "megatron-2021"}, {"hardware", "a100-80gb"},
              {"model", {{"L", 2}, {"C", 64}, {"NH", 4}, {"V", 256}}}, {"seq_len", 64}, {"gpus", 4},
              {"layout", "TP2xDP2:full"}, {"micro_batch_size", 1}, {"global_batch", 8}, {"precision", "fp16"},
              {"published", 100}, {"unit", "tflops_per_gpu"}, {"flop_convention", "narayanan2021_eq3"},
              {"step_s", step}};
  json row2 = row;
  row2["id"] = "r2", row2["published"] = 50, row2["step_s"] = 2 * step;
  json best = {{"id", "c1"}, {"kind", "best"}, {"source", "a figure"}, {"stack", "megatron-2021"}, {"hardware", "a100-80gb"},
               {"model", {{"L", 2}, {"C", 64}, {"NH", 4}, {"V", 256}}}, {"seq_len", 64}, {"gpus", 4},
               {"global_batch", 8}, {"precision", "fp16"},
               {"candidates", {{{"label", "a"}, {"layout", "DP4"}, {"micro_batch_size", 1}},
                               {{"label", "b"}, {"layout", "TP4"}, {"micro_batch_size", 2}}}},
               {"winner", "b"}};
  json factor = {{"id", "c2"}, {"kind", "factor"}, {"source", "a table"}, {"numerator", "r1"}, {"denominator", "r2"},
                 {"tolerance", 0.15}};
  return {{"description", "d"}, {"flop_conventions", json::object()}, {"rows", {row, row2}},
          {"comparisons", {best, factor}}};
}

std::string refusal(const json& j) {
  try {
    validation_set_from_json(j, "set.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(taken)";
}

TEST(PlanValidate, ReaderTakesTheSmallSet) {
  const ValidationSet s = validation_set_from_json(small_set(), "set.json");
  ASSERT_EQ(s.rows.size(), 2u);
  EXPECT_EQ(s.rows[0].layout.l.tp, 2);
  EXPECT_EQ(s.rows[0].layout.l.dp, 2);
  EXPECT_EQ(s.rows[0].layout.recompute, Recompute::full);
  EXPECT_EQ(s.rows[0].layout.precision, Precision::fp16);
  ASSERT_EQ(s.comparisons.size(), 2u);
  EXPECT_EQ(s.comparisons[0].candidates[1].micro_batch_size, 2);
}

TEST(PlanValidate, ReaderRefusesEachMalformedEntryNamingIt) {
  json j = small_set();
  j["rows"][0]["publishd"] = 1;
  EXPECT_EQ(refusal(j), "set.json: rows[0].publishd: unknown key (did you mean published?)");
  j = small_set();
  j["rows"][1].erase("step_s");
  EXPECT_EQ(refusal(j), "set.json: rows[1].step_s: missing");
  j = small_set();
  j["rows"][1]["id"] = "r1";
  EXPECT_EQ(refusal(j), "set.json: rows[1].id: 'r1' appears twice");
  j = small_set();
  j["rows"][0]["step_s"] = 1.01 * j["rows"][0]["step_s"].get<double>();
  EXPECT_NE(refusal(j).find("set.json: rows[0].step_s: "), std::string::npos) << refusal(j);
  j = small_set();
  j["rows"][0]["gpus"] = 8;
  EXPECT_NE(refusal(j).find("rows[0].layout: 'TP2xDP2:full' spans 4 GPUs, not gpus 8"), std::string::npos) << refusal(j);
  j = small_set();
  j["rows"][0]["gpus"] = "4";
  EXPECT_NE(refusal(j).find("rows[0].gpus: must be an integer"), std::string::npos) << refusal(j);
  j = small_set();
  j["rows"][1]["stack"] = "deepspeed";
  EXPECT_NE(refusal(j).find("rows[1].stack: --stack deepspeed: not a known stack"), std::string::npos) << refusal(j);
  j = small_set();
  j["comparisons"][0].erase("stack");
  EXPECT_NE(refusal(j).find("comparisons[0].stack"), std::string::npos) << refusal(j);
  j = small_set();
  j["comparisons"][0]["winner"] = "c";
  EXPECT_EQ(refusal(j), "set.json: comparisons[0].winner: 'c' is none of the candidates' labels");
  j = small_set();
  j["comparisons"][1]["denominator"] = "r3";
  EXPECT_EQ(refusal(j), "set.json: comparisons[1].denominator: 'r3' is no row of the set");
  j = small_set();
  j["comparisons"][1]["kind"] = "ratio";
  EXPECT_EQ(refusal(j), "set.json: comparisons[1].kind: 'ratio' is neither best nor factor");
  j = small_set();
  j["comparisons"][0]["global_batch"] = 6;  // not divisible by dp 4 x 1
  EXPECT_NE(refusal(j).find("comparisons[0].candidates[0].global_batch: 6 is not divisible"), std::string::npos)
      << refusal(j);
  // A key given twice in one object: parse_json_input refuses it before the reader sees it.
  EXPECT_THROW(parse_json_input(R"({"rows": [], "rows": []})", "set.json"), InputError);
}

TEST(PlanValidate, MapeAndWorstRows) {
  ValidationResult r;
  for (double e : {0.1, -0.3, 0.05, 0.2}) {
    RowVerdict v;
    v.error = e;
    r.rows.push_back(v);
  }
  summarize_errors(r);
  EXPECT_DOUBLE_EQ(r.mape, (0.1 + 0.3 + 0.05 + 0.2) / 4);
  EXPECT_DOUBLE_EQ(r.max_abs_error, 0.3);
  EXPECT_EQ(r.worst, (std::vector<int>{1, 3, 0}));
}

TEST(PlanValidate, ComparisonVerdictsOnASyntheticSet) {
  const ValidationSet s = validation_set_from_json(small_set(), "set.json");
  const ValidationComparison& best = s.comparisons[0];
  EXPECT_TRUE(judge_comparison(best, {2.0, 1.0}, s, {}).agree);  // b fastest, as published
  const ComparisonVerdict lost = judge_comparison(best, {1.0, 2.0}, s, {});
  EXPECT_FALSE(lost.agree);
  EXPECT_EQ(lost.predicted_winner, "a");
  // Published: r1 100 TFLOP/s over r2 50 on the same GPUs: factor 2. Predicted steps 1 and 2.2
  // give 2.2 (10 % off: within 15 %); 1 and 2.4 give 2.4 (20 % off).
  const ValidationComparison& factor = s.comparisons[1];
  RowVerdict a, b;
  a.predicted_s = 1, b.predicted_s = 2.2;
  ComparisonVerdict v = judge_comparison(factor, {}, s, {a, b});
  EXPECT_NEAR(v.published_factor, 2.0, 1e-12);
  EXPECT_NEAR(v.predicted_factor, 2.2, 1e-12);
  EXPECT_TRUE(v.agree);
  b.predicted_s = 2.4;
  v = judge_comparison(factor, {}, s, {a, b});
  EXPECT_NEAR(v.predicted_factor, 2.4, 1e-12);
  EXPECT_FALSE(v.agree);
}

}  // namespace
}  // namespace dtb
