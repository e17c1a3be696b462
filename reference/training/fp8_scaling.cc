#include "reference/training/fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/error.h"

namespace dtb {

AmaxComputeAlgo parse_amax_compute_algo(const std::string& text, const std::string& key) {
  if (text == "max") return AmaxComputeAlgo::max;
  if (text == "most_recent") return AmaxComputeAlgo::most_recent;
  throw InputError(key + " = '" + printable(text, 40) + "': must be \"max\" or \"most_recent\"");
}

const char* to_string(AmaxComputeAlgo a) { return a == AmaxComputeAlgo::max ? "max" : "most_recent"; }

void validate_fp8_delayed_scaling(const Fp8DelayedScalingConfig& c) {
  if (c.margin < 0 || c.margin > 64)
    throw InputError("fp8 margin = " + std::to_string(c.margin) + " must be in [0, 64]");
  if (c.amax_history_len < 1 || c.amax_history_len > (1 << 20))
    throw InputError("fp8 amax_history_len = " + std::to_string(c.amax_history_len) + " must be in [1, 2^20]");
}

Fp8TensorScaling::Fp8TensorScaling(int history_len) {
  DTB_CHECK(history_len >= 1, "Fp8TensorScaling: an amax history of " + std::to_string(history_len) + " values");
  amax_history.assign(size_t(history_len), 0.0f);
}

void Fp8TensorScaling::record(float amax) { amax_history[0] = std::fmax(amax_history[0], amax); }

void Fp8TensorScaling::update(const Fp8DelayedScalingConfig& cfg, Fp8Format f, float reduced) {
  DTB_CHECK(amax_history.size() == size_t(cfg.amax_history_len),
            "Fp8TensorScaling::update: the history's length differs from the config's amax_history_len");
  std::vector<float>& h = amax_history;
  const size_t n = h.size();
  const float last = reduced != 0.0f ? reduced : h[0];
  float window_max = 0.0f;
  if (last != 0.0f) {  // TE's kernel_bulk: a tensor that was not quantized keeps its history
    for (size_t i = 0; i < n; ++i) {
      const float a = i + 1 < n ? h[i + 1] : last;
      window_max = std::fmax(window_max, a);
      h[i] = i > 0 ? a : 0.0f;
    }
  }
  const float amax = cfg.amax_compute_algo == AmaxComputeAlgo::most_recent ? last : window_max;
  // scaled_max = fp8_dtype_max * std::pow(2.f, -margin), in float as TE computes it.
  const float scaled_max = fp8_max(f) * std::pow(2.0f, -float(cfg.margin));
  float s = std::isfinite(amax) && amax > 0.0f ? scaled_max / amax : scale;
  if (std::isinf(s)) s = std::numeric_limits<float>::max();
  scale = s;
  scale_inv = 1.0f / s;
}

const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::delayed: return "delayed";
    case Fp8Recipe::current: return "current";
    case Fp8Recipe::blockwise: return "blockwise";
    case Fp8Recipe::mxfp8: return "mxfp8";
  }
  return "?";
}

const char* to_string(Fp8FormatChoice f) { return f == Fp8FormatChoice::hybrid ? "hybrid" : "e4m3"; }

Fp8Operand fp8_operand(const Fp8Settings& s, Fp8Role role, float scale) {
  Fp8Operand o;
  o.format = role == Fp8Role::grad_output && s.fp8_format == Fp8FormatChoice::hybrid ? Fp8Format::e5m2
                                                                                      : Fp8Format::e4m3;
  switch (s.recipe) {
    case Fp8Recipe::delayed:
    case Fp8Recipe::current: o.scaling = Fp8Scaling::per_tensor, o.scale = scale; break;
    case Fp8Recipe::blockwise:
      o.scaling = role == Fp8Role::weight ? Fp8Scaling::block_128x128 : Fp8Scaling::tile_1x128;
      break;
    case Fp8Recipe::mxfp8: o.scaling = Fp8Scaling::mx_1x32; break;
  }
  return o;
}

namespace {

const std::vector<std::string> kFp8Keys = {"recipe", "fp8_format", "margin", "amax_history_len", "amax_compute_algo"};

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string text_key(const nlohmann::json& s, const std::string& key, const std::string& path,
                     const std::vector<std::string>& allowed) {
  const nlohmann::json& v = s.at(key);
  if (!v.is_string()) throw InputError(path + "." + key + ": must be a string, one of " + list(allowed));
  const std::string t = v.get<std::string>();
  if (std::find(allowed.begin(), allowed.end(), t) == allowed.end())
    throw InputError(path + "." + key + ": '" + printable(t, 40) + "' is not one of " + list(allowed));
  return t;
}

int int_key(const nlohmann::json& s, const std::string& key, const std::string& path) {
  const nlohmann::json& v = s.at(key);
  if (!v.is_number_integer()) throw InputError(path + "." + key + ": must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < -(int64_t(1) << 30) || x > (int64_t(1) << 30)) throw InputError(path + "." + key + ": out of range");
  return int(x);
}

}  // namespace

Fp8Settings fp8_settings_from_json(const nlohmann::json& s, const std::string& path) {
  if (!s.is_object()) throw InputError(path + ": must be an object with the keys " + list(kFp8Keys));
  for (const auto& [k, v] : s.items())
    if (std::find(kFp8Keys.begin(), kFp8Keys.end(), k) == kFp8Keys.end())
      throw InputError(path + ": unknown key '" + printable(k, 40) + "' (keys: " + list(kFp8Keys) + ")");
  Fp8Settings out;
  if (s.contains("recipe")) {
    const std::string r = text_key(s, "recipe", path, {"delayed", "current", "blockwise", "mxfp8"});
    for (Fp8Recipe x : {Fp8Recipe::delayed, Fp8Recipe::current, Fp8Recipe::blockwise, Fp8Recipe::mxfp8})
      if (r == to_string(x)) out.recipe = x;
  }
  const bool delayed = out.recipe == Fp8Recipe::delayed;
  out.fp8_format = delayed || out.recipe == Fp8Recipe::current ? Fp8FormatChoice::hybrid : Fp8FormatChoice::e4m3;
  if (s.contains("fp8_format"))
    out.fp8_format = text_key(s, "fp8_format", path, {"hybrid", "e4m3"}) == "hybrid" ? Fp8FormatChoice::hybrid
                                                                                    : Fp8FormatChoice::e4m3;
  for (const char* k : {"margin", "amax_history_len", "amax_compute_algo"})
    if (s.contains(k) && !delayed)
      throw InputError(path + "." + k + ": belongs to the delayed recipe (its amax history), not to recipe '" +
                       to_string(out.recipe) + "'");
  if (s.contains("margin")) out.delayed.margin = int_key(s, "margin", path);
  if (s.contains("amax_history_len")) out.delayed.amax_history_len = int_key(s, "amax_history_len", path);
  if (s.contains("amax_compute_algo"))
    out.delayed.amax_compute_algo =
        parse_amax_compute_algo(text_key(s, "amax_compute_algo", path, {"max", "most_recent"}), path + ".amax_compute_algo");
  try {
    validate_fp8_delayed_scaling(out.delayed);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what());
  }
  return out;
}

nlohmann::json fp8_settings_json(const Fp8Settings& s) {
  nlohmann::json j = {{"recipe", to_string(s.recipe)}, {"fp8_format", to_string(s.fp8_format)}};
  if (s.recipe == Fp8Recipe::delayed) {
    j["margin"] = s.delayed.margin;
    j["amax_history_len"] = s.delayed.amax_history_len;
    j["amax_compute_algo"] = to_string(s.delayed.amax_compute_algo);
  }
  return j;
}

std::vector<Fp8Settings> fp8_settings_list_from_json(const nlohmann::json& f, const std::string& path) {
  if (!f.is_array())
    throw InputError(path + ": must be a list of FP8 recipe sections (docs/fp8.md), e.g. [{\"recipe\": \"delayed\"}]");
  std::vector<Fp8Settings> out;
  for (size_t i = 0; i < f.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    out.push_back(fp8_settings_from_json(f[i], at));
    for (size_t j = 0; j < i; ++j)
      if (out[j].recipe == out[i].recipe)
        throw InputError(at + ": recipe " + std::string(to_string(out[i].recipe)) + " is listed twice (" + path + "[" +
                         std::to_string(j) + "]); its row is named after it");
  }
  return out;
}

}  // namespace dtb
