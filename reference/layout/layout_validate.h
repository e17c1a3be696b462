// The one validator of a layout (reference/layout/layout_spec.h LayoutSpec) against the model,
// the world and the recipe it would train: every rule a layout can break, each refusal with its
// one message. The rules themselves stay beside what they guard (validate_layout in
// process_grid.h, validate_zero in reference/zero/zero_config.h, validate_moe_layout in
// layout_spec.h, validate_dp_sync / validate_dp_sync_layout in reference/training/,
// validate_dp_hierarchical in layout_runner.h); the rules without another home are here
// (validate_schedule_recompute, dp_sync_checkpoint_refusal). Every suite that accepts a layout
// (train, conformance, sweep) and run_layout ask this file, so that each refusal is written once.
// Not here: parsing (layout_spec.h), the config keys' ranges (reference/json_keys.h).
#pragma once
#include <string>
#include <vector>

#include "reference/analytic/memory_model.h"
#include "reference/layout/layout_spec.h"
#include "reference/layout/process_grid.h"
#include "reference/model/gpt.h"
#include "reference/training/trainer.h"

namespace dtb {

/// The rule a refusal breaks, in the order layout_refusals checks them.
enum class LayoutRule {
  divisibility,  // validate_layout: sizes, heads, vocabulary, layers, batch, schedule, EP, SP
  zero,          // validate_zero: the ZeRO stage, buckets, offload
  schedule,      // validate_schedule_recompute: zb-h1 with full recompute
  moe,           // validate_moe_layout: what an MoE model cannot train on yet
  arch,          // validate_arch_layout: what a Llama model cannot train on yet
  dp_sync,       // validate_dp_sync and validate_dp_sync_layout: stale gradients, local steps
  checkpoint,    // dp_sync_checkpoint_refusal: stale gradients or local steps with checkpoints
  dp_allreduce,  // validate_dp_hierarchical: the hierarchical DP all-reduce
  cp,            // validate_cp_layout: what context parallelism does not compose with yet
  fp8,           // validate_fp8_layout: where the FP8 recipes run, and their tiles' alignment
};

/// "divisibility", "zero", "schedule", "moe", "arch", "dp_sync", "checkpoint", "dp_allreduce", "context_parallel",
/// "fp8".
const char* to_string(LayoutRule r);

/// One refusal: the rule, its reason as the rule's function words it ("global batch 6 is not
/// divisible by ...") and its message as the run prints it: the reason after
/// LayoutCheckContext::where's prefix ("train: global batch 6 ...").
struct LayoutRefusal {
  LayoutRule rule;
  std::string reason;
  std::string message;
};

/// What a layout is checked against besides itself.
struct LayoutCheckContext {
  int world = 0;         // ranks the layout runs on (validate_layout: tp x dp x pp must be it)
  int global_batch = 0;  // sequences per step over all DP ranks
  int seq_len = 0;       // tokens per sequence; 0: no sequence-parallel token check
  std::string backend = "cpu";  // the config's "backend" (validate_moe_layout)
  /// The run's recipe, which the DP sync rules read: steps, micro_batches, global_batch, loss
  /// scaling (validate_dp_sync, with the spec's dp_sync and precision).
  TrainConfig recipe{};
  int checkpoint_every = 0;     // saves every N steps (0: none): refused with stale gradients / local steps
  std::string resume_from{};    // a checkpoint to resume from ("": a fresh run): likewise
  /// The config section whose keys the messages name ("train" -> "train.staleness = 1 ...").
  std::string path = "train";
  /// The prefix of every message ("" -> path, and "<path>.dp_allreduce" for the hierarchical
  /// all-reduce): a conformance layout's "conformance.layouts: 'DP4:stale1'".
  std::string where{};
};

/// Every refusal of `s` (its l.micro_batches set) training `model` as `c` says, one per rule
/// broken (each rule's first problem), in LayoutRule order; empty when the layout can run.
/// A rule that needs an earlier one to hold is still checked (each is a pure function of its
/// arguments), so a layout with several problems reports them all. Every rank decides alike.
std::vector<LayoutRefusal> layout_refusals(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c);

/// Throws InputError with the first of layout_refusals' messages; returns when there is none.
/// The harness reports it and exits with status 2.
void validate_layout_spec(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c);

/// Refuses a Llama model (model.arch llama) wherever it cannot train yet: on a backend other than
/// the CPU, and on a tensor-parallel degree its KV heads or FFN do not shard to
/// (llama_tp_refusal). Errors: InputError llama_not_supported(...) or llama_tp_refusal's line
/// (reference/model/gpt.h). Nothing for GPT-2.
void validate_arch_layout(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c);

/// Refuses schedule zb-h1 with full recompute (the W pass needs the activations B used, which
/// full recompute does not keep). Errors: InputError "schedule zb-h1 with recompute full is not
/// supported (W needs the activations B used)".
void validate_schedule_recompute(const ParallelLayout& l, Recompute r);

/// Refuses, in one line naming the setting, what context parallelism (s.l.cp > 1) does not
/// compose with yet: an MoE model or expert_parallel, stale gradients or local steps, a backend
/// other than the CPU (no block ops there yet), schedule zb-h1 and the hierarchical DP
/// all-reduce. Checkpoints pass: the manifest records cp and each rank file indexes its ZeRO
/// shard over the data-and-context group, so a CP run saves and reshards as any other layout
/// (docs/checkpoints.md). cp = 1 passes. Errors: InputError.
void validate_cp_layout(const LayoutSpec& s, const GptConfig& model, const std::string& backend);

/// Refuses, in one line, FP8 linears (s.fp8 set) where they do not run: precision fp16 (the
/// recipes keep everything but the linears' GEMMs in bf16, as Transformer Engine's autocast over a
/// bf16 model, or in fp32, the sharp form the layout tests compare); a backend other than the CPU
/// (no FP8 GEMMs there yet); an MoE model (its experts are not FP8 linears); the current recipe under context parallelism (its per-GEMM scales
/// follow values the CP attention perturbs; the other recipes run under CP); stale
/// gradients and local steps; a Llama model whose KV heads are shared over TP ranks (tp > KV: each
/// rank's partial k/v gradient would be quantized before the sum); delayed-recipe settings out of
/// range (validate_fp8_delayed_scaling); and a layout under which a blockwise or MXFP8 tile would straddle
/// a shard or a split of the step's tokens (validate_fp8_shards, reference/training/fp8_linear.h,
/// with the tokens of one micro-batch on one rank: global_batch / (dp micro_batches) sequences of
/// seq_len / cp tokens, and under CP each of a sequence's 2 cp chunks, seq_len / (2 cp); seq_len 0
/// meaning model.T). Nothing without s.fp8. Errors: InputError
/// "fp8 recipe <r> ..." (docs/fp8.md).
void validate_fp8_layout(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c);

/// Why a non-synchronous `d` cannot run with checkpoints (the gradients in flight and DiLoCo's
/// outer state are not in a checkpoint): "<path>.staleness = K with <path>.checkpoint_every = N:
/// not supported (...)", or "... with <path>.resume_from = \"DIR\": ..."; "" when `d` is
/// synchronous or neither checkpoint_every > 0 nor resume_from is set.
std::string dp_sync_checkpoint_refusal(const DpSync& d, const std::string& path, int checkpoint_every,
                                       const std::string& resume_from);

}  // namespace dtb
