// Every suite's validation and run read its config keys alike: for each registered suite, each
// key of its section is perturbed (numbers up and down, other strings and tokens, lists
// shortened and repeated), and dtbench's validation (parse_config, which runs the suite's
// validate()) is compared with the typed Params its run() starts from (Suite::params_json).
#include <gtest/gtest.h>

#include <map>

#include "harness/config.h"
#include "kernels/error.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

const WorldInfo kWorld(4, 4, RunOptions{true});  // --force: memory estimates warn, never refuse

// Values to try in place of the default `d` (of the same JSON type, so that only the suite's
// own rules can refuse them).
std::vector<json> variants(const json& d) {
  std::vector<json> out;
  if (d.is_boolean()) {
    out.push_back(!d.get<bool>());
  } else if (d.is_number_integer() || d.is_number_unsigned()) {
    const int64_t v = d.get<int64_t>();
    for (int64_t x : {v + 1, v - 1, 2 * v, v / 2, int64_t(0), int64_t(1), int64_t(2), int64_t(3), int64_t(-1)})
      if (x != v) out.push_back(x);
  } else if (d.is_number()) {
    const double v = d.get<double>();
    for (double x : {2 * v, v / 2, 0.0, 1.0, 0.5, -1.0})
      if (x != v) out.push_back(x);
  } else if (d.is_string()) {
    for (const char* x : {"bogus", "fp32", "bf16", "fp16", "tf32", "gpipe", "1f1b", "interleaved", "none", "cpu", "full",
                          "selective", "auto", "dynamic", "f64", "latest", "x"})
      if (d.get<std::string>() != x) out.push_back(x);
  } else if (d.is_array()) {
    if (d.empty()) {
      for (const char* x : {"DP4", "TP2xDP2", "DP2", "bogus"}) out.push_back(json::array({x}));
    } else {
      json drop = d, twice = d;
      drop.erase(drop.begin());
      twice.push_back(d.front());
      out.push_back(drop);
      out.push_back(twice);
      out.push_back(json::array({d.back()}));
    }
  }
  return out;
}

// Sections that a key needs to matter (one that changes nothing in the default section).
const std::map<std::string, json> kContext = {
    {"train.communication_data_type", {{"precision", "bf16"}}},  // fp32 always reduces in fp32
    // Its MoE keys exist in an MoE model only (a dense model's are dropped), which trains in fp32.
    {"conformance.model", {{"model", {{"num_experts", 4}}}, {"precisions", {"fp32"}}}},
};
// Keys that need a model section: expert_parallel is an MoE model's (a dense config has none).
const std::map<std::string, json> kModelContext = {{"train.expert_parallel", {{"num_experts", 4}}}};
json g_model = json::object();  // the model section of the key being checked
// Keys no valid value of which changes the typed parameters at this world, and why.
const std::map<std::string, std::string> kNoEffect = {
    {"train.data_parallel", "0 means world / (tp pp), the only size that validates"},
};

// The run config of `suite` with `section` over its defaults; InputError when refused.
json config_with(const std::string& suite, const json& section) {
  json cfg = {{"suites", {suite}}, {suite, section}};
  if (!g_model.empty()) cfg["model"] = g_model;
  return parse_config(cfg.dump(), "test", "", "", kWorld);
}

// The typed parameters of `section` in config `cfg`, or null when the parse refuses it.
json params_or_null(const Suite& s, const json& section, const json& cfg) {
  try {
    return s.params_json(section, cfg, kWorld);
  } catch (const InputError&) {
    return nullptr;
  }
}

// Checks one key path (top-level key, or "model.L" inside an object) of a suite.
void check_key(const Suite& s, const std::string& name, const json& context, const std::vector<std::string>& path) {
  const json base_cfg = config_with(name, context);
  const json p0 = s.params_json(base_cfg[name], base_cfg, kWorld);
  json::json_pointer ptr;
  for (const auto& k : path) ptr /= k;
  const std::string where = name + "." + ptr.to_string().substr(1);
  int accepted = 0, changed = 0;
  // A key that stays absent unless set (train.context_parallel, cp_comm_type: a run without it
  // keeps the config it had) varies around its default.
  const json base_value = base_cfg[name].contains(ptr) ? base_cfg[name].at(ptr) : s.defaults().at(ptr);
  for (const json& v : variants(base_value)) {
    json user = context;
    user[ptr] = v;
    json section = base_cfg[name];
    section[ptr] = v;
    bool valid = true;
    json cfg;
    try {
      cfg = config_with(name, user);
    } catch (const InputError&) {
      valid = false;
    }
    const json p = params_or_null(s, section, base_cfg);
    // validate() is the parse plus checks: what it accepts the run parses alike, and what
    // the parse refuses validate() refuses.
    if (p.is_null()) {
      EXPECT_FALSE(valid) << where << " = " << v.dump() << ": validate() accepts what the run's parse refuses";
      continue;
    }
    if (!valid) continue;
    ++accepted;
    EXPECT_EQ(s.params_json(cfg[name], cfg, kWorld), p) << where << " = " << v.dump();
    if (p != p0) ++changed;
  }
  if (accepted > 0 && !kNoEffect.contains(where)) {
    EXPECT_GT(changed, 0) << where << ": " << accepted << " accepted value(s) and none changes the run's typed "
                          << "parameters: the key is read outside Params::parse, or not at all";
  }
}

TEST(SuiteParams, ValidationAndRunReadEveryKeyAlike) {
  ASSERT_FALSE(suite_registry().empty());
  for (const auto& [name, factory] : suite_registry()) {
    const auto suite = factory();
    const json d = suite->defaults();
    const json cfg = config_with(name, json::object());
    ASSERT_FALSE(suite->params_json(cfg[name], cfg, kWorld).is_null()) << name;
    for (const auto& [key, value] : d.items()) {
      const std::string where = name + "." + key;
      const json context = kContext.contains(where) ? kContext.at(where) : json::object();
      g_model = kModelContext.contains(where) ? kModelContext.at(where) : json::object();
      if (value.is_object()) {
        for (const auto& [sub, unused] : value.items()) check_key(*suite, name, context, {key, sub});
      } else {
        check_key(*suite, name, context, {key});
      }
      g_model = json::object();
    }
  }
}

}  // namespace
}  // namespace dtb
