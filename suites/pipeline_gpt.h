// The pipeline suite's cases on the reference GPT (the synthetic stages are suites/pipeline.cc):
// the model trained on p pipeline stages by the layout runner, each stage's forward, B and W
// times per micro-batch from the trace spans, the bubble measured against the schedule's
// simulation from those times and its closed form, the bytes sent point to point and the peak
// activation memory per stage against the plan; the stage balancer's split from measured
// per-part times (embedding and head included) with the bubble before and after; and the
// point-to-point sends overlapped with compute against waited at once.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/model/gpt.h"
#include "suites/suite.h"

namespace dtb {

/// The pipeline section's "gpt" subsection, typed (one parse for validate and run).
struct GptPipelineParams {
  GptConfig model;
  std::vector<int> stages;               // pipeline sizes p; [] runs no GPT case
  std::vector<std::string> schedules;    // gpipe, 1f1b, zb-h1 (one model chunk per rank)
  int micro_batches = 8, micro_batch_size = 2, seq_len = 64, steps = 3;
  bool balance = true;       // propose a split from the per-part times and run it
  bool blocking_p2p = true;  // also run the start split with each send waited at once
  /// The subsection with every key (defaults()' keys); InputError "pipeline.gpt.<key>: ..."
  /// for a bad value: a schedule outside gpipe/1f1b/zb-h1 or listed twice, a stage count
  /// below 1, sizes out of range, seq_len above the model's T.
  static GptPipelineParams parse(const nlohmann::json& s);
  static nlohmann::json defaults();
  nlohmann::json to_json() const;
};

/// Runs every (p, schedule) case of `o` on ranks 0..p-1 of ctx.world (the others wait) and
/// appends its records, checks and table lines to `res`; trace spans to ctx.spans from
/// `trace_step` on. Collective over ctx.world. Cases with p above the world size or the
/// model's L, or zb-h1 with fewer micro-batches than stages, are skipped with a record saying why.
void run_gpt_pipeline(SuiteContext& ctx, const GptPipelineParams& o, SuiteResult& res, int64_t& trace_step);

}  // namespace dtb
