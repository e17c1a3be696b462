// Run configuration: JSON (nlohmann/json), chosen by name (harness/configs/NAME.json) or
// path, merged over every suite's defaults and validated before any rank starts work:
// unknown keys are rejected with the nearest valid name, each value must have its
// default's JSON type, layouts must divide the world size. All errors are InputError.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "suites/suite.h"

namespace dtb {

/// Directory of the named configurations (harness/configs in the source tree).
std::string config_dir();
/// Names of the named configurations, sorted.
std::vector<std::string> config_names();

/// Reads the text of a config: `name_or_path` is a file path if it names an existing file
/// or contains '/' or ends in ".json", else a name in config_dir().
/// Errors: InputError when the file is missing or unreadable.
std::string read_config_text(const std::string& name_or_path);

/// Parses config text, fills defaults (top level and each suite's defaults()), applies
/// `suites_override` (comma-separated names, if non-empty), `data_override` and
/// `backend_override` ("cpu" or "cuda", if non-empty) before validating everything against
/// `world` (its size and ranks per node). Returns the complete config.
/// Errors: InputError with a one-line message naming the key and the problem.
nlohmann::json parse_config(const std::string& text, const std::string& origin,
                            const std::string& suites_override, const std::string& data_override,
                            const WorldInfo& world, const std::string& backend_override = "");

/// Throws InputError unless `s` is a safe file-name stem (run ids, config names):
/// 1-64 of [A-Za-z0-9._-], not starting with '.'. `what` names it in the message.
void check_file_stem(const std::string& s, const std::string& what);

// printable() (a value cut and escaped for a one-line message) is in kernels/error.h.

/// Edit distance (Levenshtein) and the closest of `candidates` to `word` ("" if none is
/// close enough to be a likely typo: distance > max(2, |word|/3)).
size_t edit_distance(const std::string& a, const std::string& b);
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace dtb
