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

/// The text of the file at `path`, refused unless it is a readable regular file of at most
/// `max_bytes`. `what` names it in messages ("config", "report").
/// Errors: InputError "<what> file not found or unreadable: <path>", "<what> <path> is a
/// directory, not a file", "... is not a regular file", "... is over N MiB".
std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes);

/// Parses JSON that a user hands in (a config, a report), refusing nesting deeper than 64
/// levels while parsing (nlohmann's dump, comparison and copy recurse, so a deep document
/// would overflow the stack later) and a key given twice in one object, at any depth (RFC 8259
/// leaves duplicates' meaning open; nlohmann keeps the last one silently). `what` names the
/// input ("config quick", "report r.json"). Errors: InputError "malformed JSON in <what>:
/// <reason>", "<what> nests deeper than 64 levels", "<what>: key '<dotted path>' appears twice
/// in one object (...)", "<what>: <reason>" (a number beyond double's range).
nlohmann::json parse_json_input(const std::string& text, const std::string& what);

/// Throws InputError "<what> '<s, printable>' is not valid UTF-8" unless `s` is (a JSON
/// string must be; nlohmann's dump throws on anything else).
void check_utf8(const std::string& s, const std::string& what);

/// `dtbench run --sweep [LAYOUTS]`: the config text with suites = ["sweep"] and, when
/// `layouts` (comma-separated) is non-empty, sweep.layouts set to them. A text that is not
/// a JSON object, or that parse_json_input refuses, is returned as is (parse_config says
/// why). Errors: InputError for an empty layout or one that is not UTF-8.
std::string apply_sweep(const std::string& text, const std::string& layouts);

/// Reads the text of a config: `name_or_path` is a file path if it names an existing file
/// or contains '/' or ends in ".json", else a name in config_dir().
/// Errors: InputError when the file is missing or unreadable.
std::string read_config_text(const std::string& name_or_path);

/// `dtbench run --ranks-per-node N`, refused as `dtbench validate --ranks-per-node` refuses it
/// (harness/validate/command.cc): InputError "--ranks-per-node must be positive, got N" for
/// N < 1, "--ranks-per-node N does not divide the W ranks" otherwise.
void check_ranks_per_node(int n, int world_size);
/// ", emulated nodes of N ranks (for tests)" for N > 0 (run's and validate's first line), else "".
std::string emulated_nodes_note(int n);

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
