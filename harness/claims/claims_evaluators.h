// The evaluators of `dtbench claims` (harness/claims/claims.h), one function per kind of claim:
// (the entry's inputs, its tolerance, what a report measured) -> the row's computed figures,
// measured column and verdict. Internal to the claims files (harness/claims/*.cc); adding an
// evaluator is one function, in the file of its family, and one line (its name, function and
// inputs) in claims_table.cc's table.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/printf.h>
#include <nlohmann/json.hpp>

#include "harness/claims/claims.h"
#include "reference/model/gpt.h"

namespace dtb::claims_impl {

/// What a report measured, as the evaluators read it (claims.cc measured_from).
struct Measured {
  bool have = false;
  // all_reduce, out of place: the largest message and the next smaller one.
  double ar_bytes = 0, ar_busbw = 0, ar_time_us = 0, ar_small_bytes = 0, ar_small_time_us = 0;
  int ar_ranks = 0;
  std::vector<nlohmann::json> pipeline, overlap, recompute;
  std::vector<nlohmann::json> checkpoint_interval;  // the checkpoint suite's checkpoint/interval/save:* records
  std::vector<nlohmann::json> comm_efficiency;      // the comm_efficiency suite's records
};

/// The measured column when no report was given.
extern const char* const kNoReport;

/// Fills r's computed, measured, verdict, why and values from the entry's inputs `in` and its
/// relative tolerance `tol`. Errors: InputError naming a missing or mistyped input.
using Evaluator = std::function<void(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r)>;

/// printf-style formatting through the fmt library (no fixed buffer to overflow).
template <typename... Args>
std::string fmt(const char* f, const Args&... args) {
  return ::fmt::sprintf(f, args...);
}

/// The number input `key` of an entry. Errors: InputError naming a missing or mistyped input.
double num(const nlohmann::json& in, const char* key);
/// The string input `key` of an entry. Errors: InputError naming a missing or mistyped input.
std::string string_input(const nlohmann::json& in, const char* key);
/// Whether `value` is within the relative tolerance `tol` of `claimed`: |value - claimed| <= tol |claimed|.
bool within(double value, double claimed, double tol);
/// The named model `name` (harness/memory_cli.h named_models). Errors: InputError naming it and
/// the named models.
GptConfig model_named(const std::string& name);
/// GB as the claims use it (harness/claims/claims.h): 1e9 bytes.
constexpr double kGB = 1e9;

/// The evaluators, one per kind of claim: about memory in claims_memory.cc, about time,
/// communication and the pipeline in claims_evaluators.cc, the others where said; the table in
/// claims_table.cc names each with its inputs.
void model_states(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void optimizer_ratio(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void dp_allreduce(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void bubble(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void gpu_only(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void weight_share(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void zero_savings(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void offload(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void overlap(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void per_gpu(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void recompute(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void fp16_comm(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void energy(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void moe_memory(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void zero_bubble(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void checkpoint_interval(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
/// Claim 20's (claims_comm.cc): stale gradients' throughput gain.
void stale_gradients(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
/// Scale claims (claims_scale.cc), on the planner and a published hardware file: a layout's
/// speed-up over pure data parallelism, and claim 14's bubble at a real batch.
void parallelism_speedup(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);
void bubble_at_scale(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r);

/// What one input of an evaluator may hold, checked when the catalog is loaded (so that an
/// evaluator reads only sane values): text (any string, or one of `values`), a number in
/// (lo, hi] (open_lo) or [lo, hi], or an integer in [lo, hi].
struct InputSpec {
  enum class Type { text, number, integer } type = Type::number;
  double lo = 0, hi = 0;
  bool open_lo = false;
  std::vector<std::string> values{};  // text: the values allowed (empty: any string)
  /// "" when `v` fits, else what it must be ("an integer in [1, 1048576]", "one of depth").
  std::string check(const nlohmann::json& v) const;
};

/// An evaluator and every input it reads, each with what it may hold: a catalog entry giving
/// any other input, or one outside its spec, is refused (a misspelt optional input would
/// otherwise be ignored and its default used; a zero would divide).
struct EvaluatorEntry {
  Evaluator run;
  std::map<std::string, InputSpec> inputs;
};

/// Evaluator name (the catalog's "evaluator") -> its function and inputs (claims_table.cc).
const std::map<std::string, EvaluatorEntry>& evaluators();

}  // namespace dtb::claims_impl
