// The conformance suite's FP8 rows (suites/conformance_fp8.cc; docs/fp8.md#the-conformance-suites-fp8-rows):
// every listed layout under each recipe of conformance.fp8 against its one-rank twin, within the FP8
// layout contract (suites/oracle.h fp8_twin_checks), and what they share with the rest of the suite
// (suites/conformance.cc, which defines the first group below).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "reference/layout/layout_runner.h"
#include "reference/model/gpt.h"
#include "reference/training/dp_sync.h"
#include "reference/training/fp8_scaling.h"
#include "reference/training/trainer.h"
#include "suites/suite.h"

namespace dtb::conformance {

/// The layouts a conformance section lists, as its parse (conformance.cc's Params) holds them: the
/// model, the recipe (steps, batch, micro-batches, optimizer), each layout's text and spec, and the
/// FP8 recipes of conformance.fp8 (empty: no FP8 rows).
struct Layouts {
  GptConfig model;
  TrainConfig base;
  std::vector<Fp8Settings> fp8;
  std::vector<std::string> names;  // as listed (the defaults when the list is empty)
  std::vector<LayoutSpec> specs;   // of `names`
};

// Shared with conformance.cc (defined there).

/// A layout's DP sync recipe as the trainer and the references take it: DiLoCo's replicas are its
/// DP ranks (stale gradients' and synchronous recipes' do not depend on the DP size).
DpSync recipe_of(const LayoutSpec& spec);
/// The record conformance/<text> of a layout of k ranks (schema: suites/conformance.schema.json):
/// its step times in ms (the slowest rank's per step), settings (precision `prec`, and fp8_recipe
/// where spec.fp8 is set), final loss, `dloss`, its checks' worst fraction and failures, and
/// `stage_peak`, the peak activation bytes per pipeline stage.
nlohmann::json layout_record(const std::string& text, const ParallelLayout& l, const LayoutSpec& spec, Precision prec,
                             int k, const std::vector<double>& step_s, const LayoutOutcome& out, double dloss,
                             double worst, size_t checks, int failed, const std::vector<double>& stage_peak);
/// Per step the slowest of the layout's k ranks' step times in seconds, and per pipeline stage the
/// largest peak activation bytes, on rank 0 of `world`. Collective over world.
struct LayoutTimes {
  std::vector<double> step_s, stage_peak;
};
LayoutTimes gather_layout_times(Communicator& world, const LayoutOutcome& out, int steps, int k, int pp);
/// `s` padded with spaces to n characters (the table's columns).
std::string pad(const std::string& s, size_t n);

// The FP8 rows (defined in conformance_fp8.cc).

/// Why layout li does not run FP8 recipe i (p.fp8[i]) on `backend` ("" when it does), naming
/// "conformance.fp8[i] on '<layout>'": the first of its layout-rule refusals (validate_fp8_layout's
/// among them: a tile straddling a shard, the current recipe under CP), or what the
/// FP8 layout contract does not cover (fp8_twin_uncovered: the current recipe under TP).
std::string fp8_skip_reason(const Layouts& p, size_t li, size_t i, const std::string& backend);

/// Refuses a recipe that no layout fitting `world_size` ranks runs (it would check nothing):
/// InputError "conformance.fp8[i]: recipe <r> runs on none of the layouts that fit <n> rank(s)
/// (<the first layout's reason>)".
void validate_fp8_rows(const Layouts& p, int world_size, const std::string& backend);

/// Runs every layout of `p` under each recipe of p.fp8 (FP8 linears over fp32 storage) for
/// kFp8TwinSteps steps with the parameters held (suites/oracle.h: the contract's regime), and its
/// one-rank twins (the recipe, and fp32, on rank 0 with the layout's micro-batches, each once) on
/// the CPU device `cpu`; on rank 0 appends to `res` the rows "conformance/<layout>:fp8:<recipe>"
/// (layout_record, dloss from the twin) and their checks (fp8_twin_checks, replicas bitwise), to
/// `skipped` each layout not run with its reason or needs_ranks, and to `table` each row's losses.
/// Collective over ctx.world.
void run_fp8_rows(SuiteContext& ctx, const Layouts& p, Device& cpu, const PrecisionOps& ops, SuiteResult& res,
                  nlohmann::json& skipped, nlohmann::json& table);

}  // namespace dtb::conformance
