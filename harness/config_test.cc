// Config parsing and validation: defaults filled, unknown keys rejected with the nearest
// name, types and layouts checked. (The command-line half is harness/cli_test.sh.)
#include <gtest/gtest.h>

#include <map>

#include "harness/config.h"
#include "kernels/error.h"

namespace dtb {

static std::string error_of(const std::string& text, int world = 4, const std::string& suites = "") {
  try {
    parse_config(text, "test", suites, "", world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Every named config validates at the world size it is written for: 4 ranks, but the
// cluster cases (8 and 32 GPUs).
TEST(Config, NamedConfigsParseAtTheirWorldSize) {
  const std::map<std::string, int> world = {{"10b-tp2-pp2-dp2", 8}, {"3b-tp4-pp2-dp4-zero1", 32}};
  for (const auto& name : config_names()) {
    const int n = world.count(name) ? world.at(name) : 4;
    const auto cfg = parse_config(read_config_text(name), name, "", "", WorldInfo(n, n));
    EXPECT_TRUE(cfg.contains("train")) << name;
    EXPECT_TRUE(cfg["collectives"].contains("max_bytes")) << name;
  }
  EXPECT_FALSE(config_names().empty());
}

TEST(Config, DefaultsFilledAndOverridesApplied) {
  const auto cfg = parse_config(R"({"train": {"steps": 3}})", "t", "train", "/tmp/x.txt", 2);
  EXPECT_EQ(cfg["train"]["steps"], 3);
  EXPECT_EQ(cfg["train"]["micro_batches"], 2);  // default kept
  EXPECT_EQ(cfg["suites"], nlohmann::json({"train"}));
  EXPECT_EQ(cfg["data"], "/tmp/x.txt");
  EXPECT_DOUBLE_EQ(parse_config(R"({"train": {"lr": 1}})", "t", "", "", 1)["train"]["lr"].get<double>(), 1.0);
}

TEST(Config, Errors) {
  EXPECT_EQ(error_of(R"({"trian": {}})"), "unknown config key 'trian' (did you mean 'train'?)");
  EXPECT_EQ(error_of(R"({"train": {"step": 1}})"), "unknown config key 'train.step' (did you mean 'steps'?)");
  EXPECT_EQ(error_of(R"({"zzzzzzzz": 1})"), "unknown config key 'zzzzzzzz'");
  EXPECT_EQ(error_of(R"({"seed": "x"})"), "config key 'seed' must be an integer, got \"x\"");
  EXPECT_EQ(error_of(R"({"seed": -1})"), "config key 'seed' must be >= 0");
  EXPECT_NE(error_of(R"({"seed": )").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("{}", 4, "collectives,nosuch").find("unknown suite 'nosuch'"), std::string::npos);
  EXPECT_NE(error_of("{}", 4, "train,train").find("selected twice"), std::string::npos);
  // 16 sequences over 3 ranks x 2 micro-batches do not divide.
  EXPECT_NE(error_of("{}", 3).find("not divisible by data_parallel (3)"), std::string::npos);
  EXPECT_EQ(error_of("{}", 4), "");
}

TEST(Config, NearestName) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(nearest_name("colectives", {"collectives", "train"}), "collectives");
  EXPECT_EQ(nearest_name("xyz", {"collectives", "train"}), "");
}

TEST(Config, MissingNamedConfig) {
  EXPECT_THROW(read_config_text("defualt"), InputError);
  try {
    read_config_text("defualt");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'default'"), std::string::npos) << e.what();
  }
}

}  // namespace dtb
