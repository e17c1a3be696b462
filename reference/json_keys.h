// Typed readers of a JSON config section's values, each refusing with one InputError line that
// names the key's path ("train.steps = 0 is out of range [1, 1000000]"): what every suite's
// Params::parse and the layout's readers (reference/layout/layout_spec.h) use.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dtb {

/// An integer config value section[key] in [lo, hi], or InputError naming `path` (e.g.
/// "train.steps"). Errors: nlohmann's out_of_range if the key is absent (callers merge defaults).
int64_t int_in_range(const nlohmann::json& section, const std::string& key, const std::string& path,
                     int64_t lo, int64_t hi);
/// A number config value section[key] in [lo, hi] (finite), or InputError naming `path`.
double number_in_range(const nlohmann::json& section, const std::string& key, const std::string& path,
                       double lo, double hi);

}  // namespace dtb
