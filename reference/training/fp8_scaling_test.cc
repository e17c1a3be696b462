// Tests of the delayed-scaling update (reference/training/fp8_scaling.h) on sequences worked by
// hand from Transformer Engine's formulas (its delayed_scaling.cu and the fp8_delayed_scaling
// documentation): the roll, the window's max against the most recent, the margin, the tensor that
// was not quantized, a non-finite or tiny amax, the reduced amax, and the refusals.
#include "reference/training/fp8_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.h"

namespace dtb {
namespace {

TEST(Fp8DelayedScaling, WindowMaxOverAHandWorkedSequence) {
  // L = 4, "max", margin 0, E4M3 (448). Each step records one amax, then updates:
  //   step amax  history before update   after the roll       window max  scale
  //   1    2     [2, 0, 0, 0]            [0, 0, 0, 2]         2           224
  //   2    8     [8, 0, 0, 2]            [0, 0, 2, 8]         8           56
  //   3    1     [1, 0, 2, 8]            [0, 2, 8, 1]         8           56
  //   4    0.5   [0.5, 2, 8, 1]          [0, 8, 1, 0.5]       8           56 (2, the oldest, drops)
  //   5    0.25  [0.25, 8, 1, 0.5]       [0, 1, 0.5, 0.25]    8           56 (8 is still in the window)
  //   6    0.25  [0.25, 1, 0.5, 0.25]    [0, 0.5, 0.25, 0.25] 1           448
  const Fp8DelayedScalingConfig cfg{.margin = 0, .amax_history_len = 4, .amax_compute_algo = AmaxComputeAlgo::max};
  Fp8TensorScaling t(4);
  EXPECT_EQ(t.scale, 1.0f);
  const std::vector<float> amax{2, 8, 1, 0.5f, 0.25f, 0.25f}, scale{224, 56, 56, 56, 56, 448};
  const std::vector<std::vector<float>> history{{0, 0, 0, 2}, {0, 0, 2, 8}, {0, 2, 8, 1}, {0, 8, 1, 0.5f},
                                                {0, 1, 0.5f, 0.25f}, {0, 0.5f, 0.25f, 0.25f}};
  for (size_t i = 0; i < amax.size(); ++i) {
    t.record(amax[i]);
    t.update(cfg, Fp8Format::e4m3);
    EXPECT_EQ(t.amax_history, history[i]) << "step " << i + 1;
    EXPECT_EQ(t.scale, scale[i]) << "step " << i + 1;
    EXPECT_EQ(t.scale_inv, 1.0f / scale[i]) << "step " << i + 1;
  }
}

TEST(Fp8DelayedScaling, MostRecentMarginAndTheFormatsMax) {
  // "most_recent": FP8_MAX / the step's own amax; margin 1 halves it; E5M2's 57344.
  const Fp8DelayedScalingConfig recent{.margin = 0, .amax_history_len = 4,
                                       .amax_compute_algo = AmaxComputeAlgo::most_recent};
  Fp8TensorScaling t(4);
  for (auto [a, s] : {std::pair{2.0f, 224.0f}, {8.0f, 56.0f}, {1.0f, 448.0f}, {0.5f, 896.0f}}) {
    t.record(a);
    t.update(recent, Fp8Format::e4m3);
    EXPECT_EQ(t.scale, s) << a;
  }
  const Fp8DelayedScalingConfig margin{.margin = 1, .amax_history_len = 2, .amax_compute_algo = AmaxComputeAlgo::max};
  Fp8TensorScaling u(2);
  u.record(7.0f);
  u.update(margin, Fp8Format::e5m2);
  EXPECT_EQ(u.scale, 57344.0f / 2 / 7.0f);
  // Several quantizations in a step (micro-batches): the staging slot keeps their max.
  Fp8TensorScaling v(2);
  for (float a : {3.0f, 5.0f, 4.0f}) v.record(a);
  EXPECT_EQ(v.amax_history[0], 5.0f);
  v.update(margin, Fp8Format::e4m3);
  EXPECT_EQ(v.scale, 224.0f / 5.0f);
}

TEST(Fp8DelayedScaling, UnusedNonFiniteTinyAndReduced) {
  const Fp8DelayedScalingConfig cfg{.margin = 0, .amax_history_len = 3, .amax_compute_algo = AmaxComputeAlgo::max};
  Fp8TensorScaling t(3);
  t.record(4.0f);
  t.update(cfg, Fp8Format::e4m3);
  ASSERT_EQ(t.scale, 112.0f);
  // Not quantized this step (staging slot 0, nothing reduced): no roll, the scale stays.
  t.update(cfg, Fp8Format::e4m3);
  EXPECT_EQ(t.amax_history, (std::vector<float>{0, 0, 4}));
  EXPECT_EQ(t.scale, 112.0f);
  // An infinite amax: it rolls in, the window's max is inf, so the scale stays as it was.
  t.record(std::numeric_limits<float>::infinity());
  t.update(cfg, Fp8Format::e4m3);
  EXPECT_EQ(t.amax_history, (std::vector<float>{0, 4, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(t.scale, 112.0f);
  // A NaN reduced amax: non-zero, so the history rolls it in; "max" skips it (fmaxf), "most_recent"
  // takes it and keeps the scale.
  Fp8TensorScaling n(2), m(2);
  n.record(2.0f), m.record(2.0f);
  n.update({.margin = 0, .amax_history_len = 2, .amax_compute_algo = AmaxComputeAlgo::max}, Fp8Format::e4m3, NAN);
  m.update({.margin = 0, .amax_history_len = 2, .amax_compute_algo = AmaxComputeAlgo::most_recent}, Fp8Format::e4m3,
           NAN);
  EXPECT_EQ(n.amax_history[0], 0.0f);
  EXPECT_TRUE(std::isnan(n.amax_history[1]));
  EXPECT_EQ(n.scale, 1.0f);  // the window {0, NaN}: max 0, so the scale stays 1
  EXPECT_EQ(m.scale, 1.0f);
  // The reduced amax over the group wins over the local one.
  Fp8TensorScaling r(3);
  r.record(1.0f);
  r.update(cfg, Fp8Format::e4m3, 16.0f);
  EXPECT_EQ(r.amax_history, (std::vector<float>{0, 0, 16}));
  EXPECT_EQ(r.scale, 28.0f);
  // A tiny amax whose quotient overflows float: FLT_MAX.
  Fp8TensorScaling tiny(1);
  tiny.record(1e-40f);
  tiny.update({.margin = 0, .amax_history_len = 1, .amax_compute_algo = AmaxComputeAlgo::max}, Fp8Format::e4m3);
  EXPECT_EQ(tiny.scale, std::numeric_limits<float>::max());
  EXPECT_EQ(tiny.amax_history, std::vector<float>{0.0f});  // TE zeroes a one-slot history after the update
}

TEST(Fp8DelayedScaling, RefusesBadSettings) {
  EXPECT_THROW(validate_fp8_delayed_scaling({.margin = -1}), InputError);
  EXPECT_THROW(validate_fp8_delayed_scaling({.margin = 0, .amax_history_len = 0}), InputError);
  EXPECT_NO_THROW(validate_fp8_delayed_scaling({}));
  EXPECT_EQ(parse_amax_compute_algo("most_recent", "k"), AmaxComputeAlgo::most_recent);
  try {
    parse_amax_compute_algo("mean", "train.fp8.amax_compute_algo");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train.fp8.amax_compute_algo = 'mean'"), std::string::npos) << e.what();
  }
}

// The recipes' settings: Transformer Engine's defaults per recipe, each operand's format and
// granularity written out by hand from TE's recipe classes, and every refusal.
TEST(Fp8Settings, TransformerEngineDefaults) {
  using J = nlohmann::json;
  const Fp8Settings d = fp8_settings_from_json(J::object(), "train.fp8");
  EXPECT_EQ(d.recipe, Fp8Recipe::delayed);
  EXPECT_EQ(d.fp8_format, Fp8FormatChoice::hybrid);  // DelayedScaling(fp8_format=Format.HYBRID)
  EXPECT_EQ(d.delayed.margin, 0);
  EXPECT_EQ(d.delayed.amax_history_len, 1024);
  EXPECT_EQ(d.delayed.amax_compute_algo, AmaxComputeAlgo::max);
  EXPECT_EQ(fp8_settings_from_json(J{{"recipe", "current"}}, "f").fp8_format, Fp8FormatChoice::hybrid);
  EXPECT_EQ(fp8_settings_from_json(J{{"recipe", "blockwise"}}, "f").fp8_format, Fp8FormatChoice::e4m3);
  EXPECT_EQ(fp8_settings_from_json(J{{"recipe", "mxfp8"}}, "f").fp8_format, Fp8FormatChoice::e4m3);
  const Fp8Settings m = fp8_settings_from_json(J{{"recipe", "delayed"}, {"fp8_format", "e4m3"}, {"margin", 2},
                                                 {"amax_history_len", 16}, {"amax_compute_algo", "most_recent"}},
                                               "f");
  EXPECT_EQ(m.fp8_format, Fp8FormatChoice::e4m3);
  EXPECT_EQ(m.delayed.margin, 2);
  EXPECT_EQ(m.delayed.amax_history_len, 16);
  EXPECT_EQ(m.delayed.amax_compute_algo, AmaxComputeAlgo::most_recent);
  // Written and read back: the same settings.
  for (const Fp8Settings& s : {d, m, fp8_settings_from_json(J{{"recipe", "mxfp8"}, {"fp8_format", "hybrid"}}, "f")}) {
    const Fp8Settings back = fp8_settings_from_json(fp8_settings_json(s), "f");
    EXPECT_EQ(back.recipe, s.recipe);
    EXPECT_EQ(back.fp8_format, s.fp8_format);
    EXPECT_EQ(back.delayed.margin, s.delayed.margin);
    EXPECT_EQ(back.delayed.amax_history_len, s.delayed.amax_history_len);
    EXPECT_EQ(back.delayed.amax_compute_algo, s.delayed.amax_compute_algo);
  }
  EXPECT_FALSE(fp8_settings_json(fp8_settings_from_json(J{{"recipe", "current"}}, "f")).contains("margin"));
}

TEST(Fp8Settings, EachOperandsFormatAndGranularity) {
  using S = Fp8Scaling;
  constexpr Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  struct Row {
    Fp8Recipe recipe;
    Fp8FormatChoice format;
    Fp8Format input, weight, grad;
    S in_s, w_s, g_s;
  };
  const Fp8FormatChoice H = Fp8FormatChoice::hybrid, E = Fp8FormatChoice::e4m3;
  for (const Row& r : {Row{Fp8Recipe::delayed, H, e4, e4, e5, S::per_tensor, S::per_tensor, S::per_tensor},
                       Row{Fp8Recipe::delayed, E, e4, e4, e4, S::per_tensor, S::per_tensor, S::per_tensor},
                       Row{Fp8Recipe::current, H, e4, e4, e5, S::per_tensor, S::per_tensor, S::per_tensor},
                       Row{Fp8Recipe::blockwise, E, e4, e4, e4, S::tile_1x128, S::block_128x128, S::tile_1x128},
                       Row{Fp8Recipe::blockwise, H, e4, e4, e5, S::tile_1x128, S::block_128x128, S::tile_1x128},
                       Row{Fp8Recipe::mxfp8, E, e4, e4, e4, S::mx_1x32, S::mx_1x32, S::mx_1x32},
                       Row{Fp8Recipe::mxfp8, H, e4, e4, e5, S::mx_1x32, S::mx_1x32, S::mx_1x32}}) {
    Fp8Settings s;
    s.recipe = r.recipe, s.fp8_format = r.format;
    const std::string what = std::string(to_string(r.recipe)) + " " + to_string(r.format);
    const Fp8Operand x = fp8_operand(s, Fp8Role::input, 3.0f), w = fp8_operand(s, Fp8Role::weight, 5.0f),
                     g = fp8_operand(s, Fp8Role::grad_output, 7.0f);
    EXPECT_EQ(x.format, r.input) << what;
    EXPECT_EQ(w.format, r.weight) << what;
    EXPECT_EQ(g.format, r.grad) << what;
    EXPECT_EQ(x.scaling, r.in_s) << what;
    EXPECT_EQ(w.scaling, r.w_s) << what;
    EXPECT_EQ(g.scaling, r.g_s) << what;
    const bool per_tensor = r.in_s == S::per_tensor;
    EXPECT_EQ(x.scale, per_tensor ? 3.0f : 1.0f) << what;
    EXPECT_EQ(g.scale, per_tensor ? 7.0f : 1.0f) << what;
  }
}

TEST(Fp8Settings, RefusedInOneLineNamingTheKey) {
  using J = nlohmann::json;
  const std::vector<std::pair<J, std::string>> bad = {
      {J{{"amax_history_length", 16}}, "train.fp8: unknown key 'amax_history_length' (keys: recipe, fp8_format"},
      {J{{"recipe", "tensorwise"}}, "train.fp8.recipe: 'tensorwise' is not one of delayed, current, blockwise, mxfp8"},
      {J{{"recipe", 3}}, "train.fp8.recipe: must be a string"},
      {J{{"fp8_format", "e5m2"}}, "train.fp8.fp8_format: 'e5m2' is not one of hybrid, e4m3"},
      {J{{"recipe", "current"}, {"margin", 1}}, "train.fp8.margin: belongs to the delayed recipe"},
      {J{{"recipe", "mxfp8"}, {"amax_history_len", 4}}, "train.fp8.amax_history_len: belongs to the delayed recipe"},
      {J{{"margin", "1"}}, "train.fp8.margin: must be an integer"},
      {J{{"margin", 1.5}}, "train.fp8.margin: must be an integer"},
      {J{{"amax_history_len", 0}}, "train.fp8: fp8 amax_history_len = 0 must be in [1, 2^20]"},
      {J{{"margin", 65}}, "train.fp8: fp8 margin = 65 must be in [0, 64]"},
      {J{{"amax_history_len", int64_t(1) << 40}}, "train.fp8.amax_history_len: out of range"},
      {J{{"amax_compute_algo", "mean"}}, "train.fp8.amax_compute_algo: 'mean' is not one of max, most_recent"},
      {J::array(), "train.fp8: must be an object"},
  };
  for (const auto& [j, want] : bad) {
    try {
      fp8_settings_from_json(j, "train.fp8");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const InputError& e) {
      const std::string got = e.what();
      EXPECT_EQ(got.rfind(want, 0), 0u) << j.dump() << " -> " << got;
      EXPECT_EQ(got.find('\n'), std::string::npos) << got;
    }
  }
}

}  // namespace
// A suite's list of recipe sections: each read as "<path>[i]", a recipe listed twice refused.
TEST(Fp8Settings, ListsNameTheEntryAndRefuseARepeatedRecipe) {
  using J = nlohmann::json;
  const std::vector<Fp8Settings> two =
      fp8_settings_list_from_json(J::parse(R"([{"recipe": "delayed", "margin": 1}, {"recipe": "mxfp8"}])"), "s.fp8");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].delayed.margin, 1);
  EXPECT_EQ(two[1].recipe, Fp8Recipe::mxfp8);
  EXPECT_TRUE(fp8_settings_list_from_json(J::array(), "s.fp8").empty());
  const std::vector<std::pair<J, std::string>> bad = {
      {J{{"recipe", "delayed"}}, "s.fp8: must be a list of FP8 recipe sections"},
      {J::parse(R"([{"recipe": "current"}, {"recipe": "current", "fp8_format": "e4m3"}])"),
       "s.fp8[1]: recipe current is listed twice (s.fp8[0]); its row is named after it"},
      {J::parse(R"([{"recipe": "current"}, {"margin": 2, "recipe": "mxfp8"}])"), "s.fp8[1].margin: belongs to"},
  };
  for (const auto& [j, want] : bad) {
    try {
      fp8_settings_list_from_json(j, "s.fp8");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << j.dump() << " -> " << e.what();
    }
  }
}

}  // namespace dtb
