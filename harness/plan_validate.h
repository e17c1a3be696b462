// `dtbench plan --validate FILE`: the step-time model (reference/analytic/step_time_model.h) judged
// against published training runs (harness/plan_validation.json; docs/plan.md#the-published-set):
// the set read strictly, each row's fixed layout predicted and its memory planned, the error per
// row, the MAPE and the worst rows, and the papers' published comparisons between layouts. Not the
// sweep's measured-against-predicted check (suites/sweep.cc), which judges the model on this machine.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/layout/layout_spec.h"
#include "reference/model/gpt.h"

namespace dtb {

/// The set shipped with the source tree: harness/plan_validation.json.
inline constexpr const char* kPublishedSetFile = "harness/plan_validation.json";

/// One published run: the model (L, C, NH, V; T = seq_len), the layout as a layout spec
/// ("TP8xPP8:interleaved:v3:full": tp, pp, dp, schedule, virtual stages, ZeRO, recompute, sp),
/// the batch, and the published figure as printed with its unit and FLOP convention. step_s is
/// the iteration time in seconds derived from it (published_step_s).
struct ValidationRow {
  std::string id, source, stack, hardware, layout_text, unit, flop_convention, assumptions;
  GptConfig model{};
  LayoutSpec layout{};
  int seq_len = 0, gpus = 0, global_batch = 0, micro_batch_size = 1;
  double published = 0;  // as printed: TFLOP/s per GPU, or seconds per iteration
  double step_s = 0;     // seconds per iteration, derived (and checked against the conversion)
};

/// A candidate layout of a "best" comparison.
struct ValidationCandidate {
  std::string label, layout_text;
  LayoutSpec layout{};
  int micro_batch_size = 1;
};

/// A comparison the paper publishes. kind "best": the candidates (one model, batch and GPU
/// count) and the one the paper found fastest; kind "factor": two rows of the set and the ratio of
/// their per-GPU throughputs in the source's convention (numerator's over denominator's), met
/// when the predicted ratio is within `tolerance` (a fraction) of the published one.
struct ValidationComparison {
  std::string id, kind, source, assumptions, hardware, winner, numerator, denominator;
  std::string stack;  // best: the stack profile its candidates are priced under (reference/analytic/stack_profile.h)
  GptConfig model{};
  int seq_len = 0, gpus = 0, global_batch = 0;
  std::vector<ValidationCandidate> candidates;
  double tolerance = 0;
};

struct ValidationSet {
  std::vector<ValidationRow> rows;
  std::vector<ValidationComparison> comparisons;
};

/// FLOPs of one iteration by Narayanan et al. 2021 (arXiv 2104.04473) Eq. 3:
/// F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h)), B sequences of s tokens, l layers, hidden h,
/// vocabulary V; it counts the forward recomputed under activation recomputation (4 passes of
/// 24 B s l h^2). Pure; no errors.
double narayanan_eq3_flops(double batch, double seq, double layers, double hidden, double vocab);

/// A row's iteration time, seconds, from its published figure in its convention:
/// "narayanan2021_eq3" with unit "tflops_per_gpu": narayanan_eq3_flops / (gpus x TFLOP/s x 1e12);
/// "none" with unit "s_per_iteration": the figure itself. Errors: InputError for another pair.
double published_step_s(const ValidationRow& r);

/// The set from its JSON document, strictly: every key required (but "assumptions", optional),
/// no other (the nearest valid name), each of its type, ids unique, a layout spec that
/// parse_layout_spec takes and whose world is the row's GPUs, a step_s within 0.1 % of
/// published_step_s, a factor's rows present. Errors: InputError "<where>: <dotted path>: <what>".
ValidationSet validation_set_from_json(const nlohmann::json& j, const std::string& where);

/// Reads `path` (at most 4 MiB; a duplicated key refused by parse_json_input) and parses it.
/// Errors: InputError for a missing or unreadable file, malformed JSON, validation_set_from_json's.
ValidationSet load_validation_set(const std::string& path);

/// One row judged: the predicted step (predict_step, seconds), its signed error against the
/// derived step (a fraction), TFLOP/s per GPU in the row's convention (0 for "none"), and the
/// busiest rank's device bytes (plan_busiest_rank) against the hardware's memory.
struct RowVerdict {
  double predicted_s = 0, error = 0, predicted_tflops = 0, device_bytes = 0, device_memory_bytes = 0;
  bool memory_ok = false;
  std::string memory_refused;  // the memory model's refusal of the layout, "" when it planned it
};

/// One comparison judged: per candidate the predicted step (seconds); the predicted winner
/// (the fastest); for a factor, the published and predicted ratios; whether they agree.
struct ComparisonVerdict {
  std::vector<double> step_s;
  std::string predicted_winner;
  double published_factor = 0, predicted_factor = 0;
  bool agree = false;
};

struct ValidationResult {
  std::vector<RowVerdict> rows;
  std::vector<ComparisonVerdict> comparisons;
  double mape = 0, max_abs_error = 0;  // fractions over the rows
  std::vector<int> worst;              // row indices by |error|, largest first (at most 3)
};

/// A "best" comparison's verdict from its candidates' predicted steps (seconds, candidates'
/// order); a "factor" one's from the set's rows and their verdicts. Pure. Errors: none.
ComparisonVerdict judge_comparison(const ValidationComparison& c, const std::vector<double>& step_s,
                                   const ValidationSet& set, const std::vector<RowVerdict>& rows);

/// MAPE, the largest |error| and the three worst rows of `r.rows` (filled in place).
void summarize_errors(ValidationResult& r);

/// Every row and, unless rows_only, every comparison of `set` predicted on its hardware file
/// (resolve_hardware_file) at fp16 or the row's precision. Errors: InputError from the hardware
/// file or predict_step (a layout the step-time model does not cover).
ValidationResult evaluate_validation_set(const ValidationSet& set, bool rows_only = false);

/// The --validate document: file, rows (published, derived and predicted step, error, TFLOP/s,
/// memory), mape, max_abs_error, worst, comparisons. And its text report.
nlohmann::json validation_json(const ValidationSet& set, const ValidationResult& r, const std::string& file);
std::string validation_text(const nlohmann::json& v);

/// The line every plan prints: the model's error on the shipped set, computed now
/// ({file, rows, mape, max_abs_error, worst: {id, error}, seconds}), or {file, unavailable: why} when
/// the set cannot be read or priced (no error is raised: a plan does not fail for want of it).
nlohmann::json published_set_error();
std::string published_set_error_text(const nlohmann::json& e);

}  // namespace dtb
