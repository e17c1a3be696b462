// Config parsing and validation: defaults from every suite, unknown keys with the nearest
// name, types, integer ranges and nesting depth checked; see config.h.
#include "harness/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "harness/source_dir.h"
#include "kernels/error.h"
#include "suites/suite.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

using nlohmann::json;
namespace fs = std::filesystem;

std::string config_dir() { return std::string(source_dir()) + "/harness/configs"; }

std::vector<std::string> config_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(config_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError(what + " file not found or unreadable: " + printable(path));
  if (fs::is_directory(st)) throw InputError(what + " " + printable(path) + " is a directory, not a file");
  if (!fs::is_regular_file(st)) throw InputError(what + " " + printable(path) + " is not a regular file");
  if (fs::file_size(path, ec) > max_bytes)
    throw InputError(what + " " + printable(path) + " is over " + std::to_string(max_bytes >> 20) + " MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + " file not found or unreadable: " + printable(path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError("error reading " + what + " " + printable(path));
  return ss.str();
}

std::string read_config_text(const std::string& name_or_path) {
  if (name_or_path.empty()) throw InputError("--config is empty");
  std::error_code ec;
  const bool is_path = fs::exists(name_or_path, ec) || name_or_path.find('/') != std::string::npos ||
                       name_or_path.ends_with(".json");
  std::string path = is_path ? name_or_path : config_dir() + "/" + name_or_path + ".json";
  if (!is_path && !fs::exists(path, ec)) {
    const std::string near = nearest_name(name_or_path, config_names());
    throw InputError("unknown config '" + printable(name_or_path) + "'" +
                     (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                     "; named configs are listed by 'dtbench list'");
  }
  return read_input_file(path, "config", size_t(16) << 20);
}

json parse_json_input(const std::string& text, const std::string& what) {
  // Nothing legitimate nests past 16 (a report's config section is 4 deep).
  constexpr int kMaxDepth = 64;
  // The open objects and arrays, outermost first: an object's keys so far and its current key
  // (a key given twice in one object is refused: nlohmann keeps the last, silently).
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
  };
  std::vector<Frame> open;
  auto path = [&](const std::string& last) {
    std::string p;  // "a.b[].c": an array's elements as []
    for (size_t i = 0; i + 1 < open.size(); ++i) p += open[i].object ? (p.empty() ? "" : ".") + open[i].key : "[]";
    return p.empty() ? last : p + "." + last;
  };
  try {
    return json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth > kMaxDepth) throw InputError(what + " nests deeper than 64 levels");
      using E = json::parse_event_t;
      if (event == E::object_start || event == E::array_start) {
        open.push_back({event == E::object_start, {}, {}});
      } else if (event == E::object_end || event == E::array_end) {
        if (!open.empty()) open.pop_back();
      } else if (event == E::key && !open.empty()) {
        const std::string k = parsed.get<std::string>();
        if (!open.back().keys.insert(k).second)
          throw InputError(what + ": key '" + printable(path(k), 80) + "' appears twice in one object (JSON keeps "
                           "only one of them)");
        open.back().key = k;
      }
      return true;
    });
  } catch (const json::parse_error& e) {
    std::string msg = e.what();
    throw InputError("malformed JSON in " + what + ": " + msg.substr(msg.find(':') + 2));
  } catch (const json::exception& e) {  // out_of_range: a number beyond double's range (1e400)
    std::string msg = e.what();
    throw InputError(what + ": " + msg.substr(msg.find(']') + 2));
  }
}

void check_utf8(const std::string& s, const std::string& what) {
  try {
    (void)json(s).dump();
  } catch (const json::type_error&) {
    throw InputError(what + " '" + printable(s, 60) + "' is not valid UTF-8");
  }
}

std::string apply_sweep(const std::string& text, const std::string& layouts) {
  json j;
  try {
    j = parse_json_input(text, "config");
  } catch (const InputError&) {
    return text;
  }
  if (!j.is_object()) return text;
  j["suites"] = json::array({"sweep"});
  if (!layouts.empty()) {
    check_utf8(layouts, "--sweep");
    json list = json::array();
    size_t start = 0;
    for (size_t i = 0; i <= layouts.size(); ++i)
      if (i == layouts.size() || layouts[i] == ',') {
        if (i == start) throw InputError("--sweep: an empty layout in '" + printable(layouts, 60) + "'");
        list.push_back(layouts.substr(start, i - start));
        start = i + 1;
      }
    if (!j.contains("sweep") || !j["sweep"].is_object()) j["sweep"] = json::object();
    j["sweep"]["layouts"] = list;
  }
  return j.dump();
}

void check_file_stem(const std::string& s, const std::string& what) {
  const bool ok = !s.empty() && s.size() <= 64 && s[0] != '.' &&
                  std::all_of(s.begin(), s.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                  });
  if (!ok)
    throw InputError(what + " '" + printable(s) + "' must be 1-64 letters, digits, '.', '_' or '-', " +
                     "not starting with '.'");
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  for (const auto& c : candidates) {
    // The distance is at least the length difference: a long word (a pasted value) costs
    // nothing instead of |word| x |c| steps.
    if ((word.size() > c.size() ? word.size() - c.size() : c.size() - word.size()) > limit) continue;
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best_d <= limit ? best : "";
}

namespace {

json top_defaults() {
  json d = {{"name", "custom"},
            {"description", ""},
            {"suites", {"collectives", "train"}},
            {"seed", 1234},
            {"data", "/usr/share/games/fortunes/cookie"},
            {"output_dir", "results"},
            {"backend", "cpu"},
            {"comm_timeout_s", 300.0},
            {"model", model_defaults(2, 64, 4, 64, 256, true)}};
  for (const auto& [name, factory] : suite_registry()) d[name] = factory()->defaults();
  return d;
}

// A value for a message: short, printable, never the whole of a huge or deep value.
std::string short_value(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "a list";
  if (v.is_string()) return "\"" + printable(v.get<std::string>(), 40) + "\"";
  return v.dump();
}

std::string type_name(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "true or false";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "a number or null";
}

// True when `v` may stand where the default `d` stands: same JSON type, an integer where
// a number is expected, null or a number where the default is null (an optional number, e.g.
// model.moe_expert_capacity_factor), and every list element of the default's element type.
bool type_fits(const json& v, const json& d) {
  if (d.is_null()) return v.is_null() || v.is_number();
  if (d.is_number_float()) return v.is_number();
  if (d.is_number_integer() || d.is_number_unsigned())
    return v.is_number_integer() || v.is_number_unsigned();
  if (d.is_array()) {
    if (!v.is_array()) return false;
    if (d.empty()) return true;
    return std::all_of(v.begin(), v.end(), [&](const json& e) { return type_fits(e, d.front()); });
  }
  return v.type() == d.type();
}

// Merges `user` over `defaults`, rejecting unknown keys and wrong types. `where` is the
// dotted path for messages ("" at the top).
json merge(const json& defaults, const json& user, const std::string& where) {
  if (!user.is_object())
    throw InputError("config" + (where.empty() ? "" : " key '" + where + "'") + " must be an object");
  json out = defaults;
  std::vector<std::string> names;
  for (const auto& [k, v] : defaults.items()) names.push_back(k);
  for (const auto& [k, v] : user.items()) {
    const std::string path = where.empty() ? printable(k) : where + "." + printable(k);
    if (!defaults.contains(k)) {
      const std::string near = nearest_name(k, names);
      throw InputError("unknown config key '" + path + "'" +
                       (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    }
    const json& d = defaults[k];
    if (d.is_object()) {
      out[k] = merge(d, v, path);
    } else if (!type_fits(v, d)) {
      throw InputError("config key '" + path + "' must be " + type_name(d) + ", got " + short_value(v));
    } else if (v.is_number_integer() || v.is_number_unsigned()) {
      // Integers beyond 2^53 are not exact in most JSON readers, and none is needed here.
      const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= (uint64_t(1) << 53)
                                               : std::llabs(v.get<int64_t>()) <= (int64_t(1) << 53);
      if (!fits) throw InputError("config key '" + path + "' = " + v.dump() + " is out of range");
      out[k] = v;
    } else {
      out[k] = v;
    }
  }
  return out;
}

// A GPT-2 model's section without the Llama keys and a dense model's without the MoE keys (their
// defaults merged in): the config a run prints and reports is then the one it was before either
// existed, so reports and the regression gate's baselines stay comparable. A key set by the user
// that the model does not use has no effect: refused. An unknown arch is gpt_config_from_json's.
void drop_unused_model_keys(json& model, const json& user_model, const std::string& where) {
  auto user_set = [&](const std::string& k) { return user_model.is_object() && user_model.contains(k); };
  static const char* const kLlamaKeys[] = {"arch", "num_kv_heads", "ffn_hidden_size", "rope_theta", "norm_eps"};
  const std::string arch = model.value("arch", std::string("gpt2"));
  if (arch == "gpt2")
    for (const char* k : kLlamaKeys) {
      if (std::string(k) != "arch" && user_set(k))
        throw InputError("config key '" + where + "." + k + "' is a Llama option but " + where +
                         ".arch is \"gpt2\" (set it to \"llama\")");
      model.erase(k);
    }
  if (model.value("num_experts", 0) != 0) return;
  const json dense = to_json(GptConfig{}), all = model_defaults(2, 64, 4, 64, 256, true);  // dense keys; all keys
  for (const auto& [k, v] : all.items()) {
    if (dense.contains(k) || std::find(std::begin(kLlamaKeys), std::end(kLlamaKeys), k) != std::end(kLlamaKeys))
      continue;
    if (k != "num_experts" && user_set(k))
      throw InputError("config key '" + where + "." + k + "' is set but " + where + ".num_experts is 0 (a dense model)");
    model.erase(k);
  }
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (out.empty() || s.back() == ',' || std::find(out.begin(), out.end(), "") != out.end())
    throw InputError("--suites '" + printable(s) + "' has an empty suite name");
  return out;
}

}  // namespace

json parse_config(const std::string& text, const std::string& origin,
                  const std::string& suites_override, const std::string& data_override,
                  const WorldInfo& world, const std::string& backend_override) {
  const json user = parse_json_input(text, "config " + origin);
  // The overrides come from the command line, where any bytes may stand; the config they
  // go into is dumped (sent to the ranks, written in the report) and must stay UTF-8.
  check_utf8(suites_override, "--suites");
  check_utf8(data_override, "--data");
  check_utf8(backend_override, "--backend");
  json cfg = merge(top_defaults(), user, "");
  drop_unused_model_keys(cfg["model"], user.value("model", json::object()), "model");
  for (auto& [name, section] : cfg.items())  // a suite's own model (conformance.model): MoE or Llama keys too
    if (section.is_object() && section.contains("model") && section["model"].is_object() &&
        section["model"].contains("num_experts")) {
      const json us = user.value(name, json::object());
      drop_unused_model_keys(section["model"], us.is_object() ? us.value("model", json::object()) : json::object(),
                          name + ".model");
    }
  // train.expert_parallel is an MoE model's key too: a dense model's config has none (as before MoE).
  if (cfg["model"].value("num_experts", 0) == 0 && cfg.contains("train") && cfg["train"].is_object()) {
    const json utrain = user.value("train", json::object());
    const std::string ep = spelling(LayoutKey::ep).config_key;
    if (utrain.is_object() && utrain.contains(ep))
      throw InputError("config key 'train." + ep + "' is set but model.num_experts is 0 (a dense model)");
    cfg["train"].erase(ep);
  }
  // train.context_parallel and cp_comm_type: absent unless set (their absence is CP 1, "p2p":
  // the config of a run without context parallelism is the one it was before CP).
  if (cfg.contains("train") && cfg["train"].is_object()) {
    const json utrain = user.value("train", json::object());
    for (LayoutKey k : {LayoutKey::cp, LayoutKey::cp_comm_type})
      if (!utrain.is_object() || !utrain.contains(spelling(k).config_key)) cfg["train"].erase(spelling(k).config_key);
  }
  // train.fp8 (docs/fp8.md): the FP8 recipe's section, only under train.precision "fp8" (a run in
  // another precision has none, as before FP8), there read whole and written back with every key
  // the recipe takes (Transformer Engine's defaults filled in; the delayed keys only for delayed).
  if (cfg.contains("train") && cfg["train"].is_object() && cfg["train"].contains("fp8")) {
    json& t = cfg["train"];
    const json utrain = user.value("train", json::object());
    const bool set = utrain.is_object() && utrain.contains("fp8");
    const std::string precision = t.value("precision", std::string());
    if (precision != "fp8") {
      if (set)
        throw InputError("config key 'train.fp8' is set but train.precision is \"" + printable(precision, 40) +
                         "\" (set it to \"fp8\")");
      t.erase("fp8");
    } else {
      t["fp8"] = fp8_settings_json(fp8_settings_from_json(set ? utrain.at("fp8") : json::object(), "train.fp8"));
    }
  }
  if (!suites_override.empty()) cfg["suites"] = split_names(suites_override);
  for (const auto& s : cfg["suites"])
    if (s.get<std::string>().empty()) throw InputError("config key 'suites' has an empty name");
  if (!data_override.empty()) cfg["data"] = data_override;
  if (!backend_override.empty()) {  // before the suites validate: their checks depend on it
    if (backend_override != "cpu" && backend_override != "cuda")
      throw InputError("unknown backend '" + printable(backend_override) + "' (cpu or cuda)");
    cfg["backend"] = backend_override;
  }

  std::vector<std::string> known;
  for (const auto& [name, f] : suite_registry()) known.push_back(name);
  if (cfg["suites"].empty()) throw InputError("no suites selected");
  std::vector<std::string> seen;
  for (const auto& s : cfg["suites"]) {
    const std::string name = s.get<std::string>();
    if (!suite_registry().contains(name)) {
      const std::string near = nearest_name(name, known);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InputError("unknown suite '" + printable(name, 60) + "'" +
                       (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; suites: " + list);
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end())
      throw InputError("suite '" + printable(name, 60) + "' selected twice");
    seen.push_back(name);
  }
  if (cfg["seed"].get<int64_t>() < 0) throw InputError("config key 'seed' must be >= 0");
  if (cfg["data"].get<std::string>().empty()) throw InputError("config key 'data' is empty");
  if (cfg["output_dir"].get<std::string>().empty())
    throw InputError("config key 'output_dir' is empty");
  check_file_stem(cfg["name"], "config key 'name'");
  if (cfg["backend"] != "cpu" && cfg["backend"] != "cuda")
    throw InputError("config key 'backend' must be \"cpu\" or \"cuda\", got " + short_value(cfg["backend"]));
  number_in_range(cfg, "comm_timeout_s", "comm_timeout_s", 1.0, 86400.0);
  gpt_config_from_json(cfg["model"]);  // range-checked even when no suite trains
  for (const auto& name : seen)
    suite_registry().at(name)()->validate(cfg[name], cfg, world);
  return cfg;
}

void check_ranks_per_node(int n, int world_size) {
  if (n < 1) throw InputError("--ranks-per-node must be positive, got " + std::to_string(n));
  if (world_size % n != 0)
    throw InputError("--ranks-per-node " + std::to_string(n) + " does not divide the " + std::to_string(world_size) +
                     " ranks");
}

std::string emulated_nodes_note(int n) {
  return n > 0 ? ", emulated nodes of " + std::to_string(n) + " ranks (for tests)" : "";
}

}  // namespace dtb
