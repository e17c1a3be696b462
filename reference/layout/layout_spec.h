// The parallel layout of a training run as one typed struct (LayoutSpec) and the one table of
// its spellings: config keys (tensor_parallel), --sweep / conformance layout specs (TP2),
// record names and fields (tp:2, "tp") and `dtbench memory` flags (--tp). Every parser of a
// layout key reads its spelling from the table; no other file names a layout key.
// Not the layout's rules (reference/layout/process_grid.h validate_layout, reference/zero/zero.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/model/gpt.h"
#include "reference/analytic/memory_model.h"
#include "reference/layout/process_grid.h"
#include "reference/training/fp8_scaling.h"
#include "reference/training/trainer.h"
#include "reference/zero/zero.h"

namespace dtb {

/// One dimension or option of a layout.
enum class LayoutKey {
  tp, pp, dp, ep, sequence_parallel, schedule, virtual_stages, pipeline_layers, micro_batches, zero_stage, offload, precision,
  recompute, comm_type, dp_allreduce, staleness, delay_compensation, local_steps, cp, cp_comm_type
};

/// How one layout key is spelled in each input and output form ("" where the form has none).
struct LayoutSpelling {
  LayoutKey key;
  const char* name;         // the enumerator's own name: "tp", "sequence_parallel" (dtbench list's key column)
  const char* config_key;   // a config section's key: "tensor_parallel"
  const char* spec_token;   // in a layout spec: a dimension's prefix "TP" (TP2), an option's prefix "zero" (zero2)
  const char* name_key;     // in a record name: "tp" (tp:2)
  const char* field_key;    // a record's JSON field: "tp", "zero_stage"
  const char* memory_flag;  // `dtbench memory`: "--tp"
};

/// The table: every LayoutKey once, in enum order.
const std::vector<LayoutSpelling>& layout_spellings();
/// The row of `k`.
const LayoutSpelling& spelling(LayoutKey k);
/// A record's JSON field of `k` (spelling(k).field_key): "tp", "zero_stage".
inline const char* field_key(LayoutKey k) { return spelling(k).field_key; }
/// A config section's key of `k` (spelling(k).config_key): "tensor_parallel", "zero_stage".
inline const char* config_key(LayoutKey k) { return spelling(k).config_key; }
/// The enumerator's own name (spelling(k).name: "tp", "sequence_parallel"): the key column of
/// layout_spellings_json.
inline const char* key_name(LayoutKey k) { return spelling(k).name; }
/// The table as JSON, for other languages (`dtbench list --layout-keys --json`): an array of one
/// object per key in enum order, {"key", "config_key", "spec_token", "name_key", "field_key",
/// "memory_flag"}, "" where the form has none.
nlohmann::json layout_spellings_json();

/// A layout with every per-layout setting, as every suite runs it (reference/layout/layout_runner.h
/// LayoutRunSpec::layout, the one copy): degrees, schedule, virtual stages, layer split, SP and EP
/// (l), ZeRO stage and offload (z; z.fp32_communication carries communication_data_type),
/// recompute, precision, the DP sync recipe and the hierarchical node size. `precision` is the
/// run's storage recipe (run_layout picks the trainer's element type by it).
struct LayoutSpec {
  ParallelLayout l{};
  ZeroConfig z{};
  Recompute recompute = Recompute::none;
  /// The precision recipe (Micikevicius et al. 2018): fp32, or bf16 / fp16 parameters,
  /// activations and gradients with fp32 accumulation, master weights and Adam moments
  /// (kernels/half.h, reference/zero/zero.h).
  Precision precision = Precision::fp32;
  /// The DP gradient all-reduce: 0 flat (the DP group's own); N > 0 hierarchical
  /// (kernels/comm/hierarchical_communicator.h) over nodes of N consecutive ranks of the layout
  /// (validate_dp_hierarchical, reference/layout/layout_runner.h, says which layouts it fits).
  int hier_node_ranks = 0;
  /// How the DP replicas keep in step (reference/training/trainer.h DpSync: staleness, delay_compensation,
  /// local_steps); its replicas field is the caller's to set (the layout's dp, for local steps).
  DpSync dp_sync{};
  /// FP8 linears (Transformer Engine's recipes, reference/training/fp8_scaling.h), or none: with a
  /// recipe the transformer layers' linears run their GEMMs on FP8 operands (ParallelGpt::set_fp8)
  /// and everything else keeps `precision`'s storage: bf16, as Transformer Engine's autocast over a
  /// bf16 model, or fp32. validate_fp8_layout (layout_validate.h) says where it runs.
  std::optional<Fp8Settings> fp8{};
};

/// A section's dp_allreduce key: "flat" (0) or "hierarchical" (node_ranks: the run's ranks per
/// node, real or emulated by --ranks-per-node: suite.h node_size). Errors: InputError
/// "<path>.dp_allreduce: ...".
int dp_allreduce_from_json(const nlohmann::json& section, const std::string& path, int node_ranks);

/// A section's zero_stage in [lo, hi]: the one reader of the key. Errors: InputError
/// "<path>.zero_stage = <v> is out of range [lo, hi]".
int zero_stage_from_json(const nlohmann::json& section, const std::string& path, int lo = 0, int hi = kMaxZeroStage);

/// A section's training layout: tensor_parallel, pipeline_parallel, data_parallel (0: the
/// world size / (tp pp)), expert_parallel (an MoE model's experts split over that many of the
/// DP ranks: process_grid.h), sequence_parallel (Megatron-LM's --sequence-parallel; absent:
/// false), schedule and virtual_stages, with the given micro-batches, refused unless it can
/// train `model` on `world_size` ranks with `global_batch` sequences of `seq_len` tokens
/// (validate_layout: divisibility of heads, vocabulary, layers, batch, a micro-batch's tokens
/// under sequence parallelism; product = world). Errors: InputError "<path>: <reason naming
/// the numbers>".
ParallelLayout parallel_layout_from_json(const nlohmann::json& section, const std::string& path,
                                         const GptConfig& model, int micro_batches, int global_batch, int world_size,
                                         int seq_len = 0);

/// A section's ZeRO keys, DeepSpeed's names: zero_stage (0-3), offload_optimizer ("none" or
/// "cpu"), reduce_bucket_size and allgather_bucket_size (elements, >= 1), overlap_comm.
/// Errors: InputError "<path>.<key>: <reason>" (validate_zero).
ZeroConfig zero_config_from_json(const nlohmann::json& section, const std::string& path);

/// A section's "recompute" key: none, selective or full; InputError "<path>.recompute: ..."
/// otherwise.
Recompute parse_recompute_key(const nlohmann::json& section, const std::string& path);

/// A section's "precision" key: fp32, bf16 or fp16, each setting *fp8 (when given) to none; or,
/// where the caller takes FP8 (`fp8` given: the train suite's section, whose `fp8` recipe section
/// the config reader fills in under precision "fp8" alone), "fp8": bf16 storage with the FP8
/// linears of *fp8 = fp8_settings_from_json(section.fp8 or {}, "<path>.fp8") (docs/fp8.md).
/// Errors: InputError "<path>.precision: '<p>' is not fp32, bf16 or fp16" (", fp16 or fp8" where
/// FP8 may stand), or fp8_settings_from_json's line.
Precision precision_from_json(const nlohmann::json& section, const std::string& path,
                              std::optional<Fp8Settings>* fp8 = nullptr);

/// Whether the backend named `backend` trains in bf16 / fp16 storage: "cpu" (HalfCpuOps)
/// and "cuda" (its Backend::bf16_ops / fp16_ops). By name, because a suite's validate()
/// has the config's "backend" key, not a Backend; run_layout refuses at run time a backend
/// whose half ops turn out null.
bool backend_has_half_ops(const std::string& backend);

/// Refuses `p` (bf16 or fp16; fp32 always passes) on a backend without half ops
/// (backend_has_half_ops). Errors: InputError "<key>: <p> needs a backend with bf16 and
/// fp16 ops; the <backend> backend has none".
void require_half_ops(const std::string& backend, Precision p, const std::string& key);

/// A section's "communication_data_type" (DeepSpeed's key: "auto", the gradients' type;
/// "fp32"; or the run's half type `p`): whether gradients are reduced in fp32 (never for an
/// fp32 run). Errors: InputError "<path>.communication_data_type: ...".
bool fp32_communication_from_json(const nlohmann::json& section, const std::string& path, Precision p);

/// A config section's whole layout, the config-key form's one parser: the parallel layout
/// (parallel_layout_from_json), the ZeRO keys (zero_config_from_json), recompute, precision
/// and communication_data_type (into z.fp32_communication), in that order. Errors: as theirs.
/// The rules across keys (zb-h1 with full recompute, DP sync, ...): layout_validate.h.
LayoutSpec layout_from_json(const nlohmann::json& section, const std::string& path, const GptConfig& model,
                            int micro_batches, int global_batch, int world_size, int seq_len = 0);

/// "TP2xPP2xDP2[:option...]" -> a layout: dimensions TP, DP, PP and EP (expert parallel, carved
/// out of DP: "DP4xEP2"; EP alone sets DP to it) in any order, each at most
/// once, case-insensitive, joined by 'x'; options a schedule (gpipe, 1f1b, interleaved, zb-h1; 1f1b
/// by default), "vN" virtual stages, "zeroN" the ZeRO stage, "offload" (offload_optimizer
/// cpu), "full" or "selective" recompute, "sp" (sequence parallel: "TP2xPP2:sp"), "hierN" (the
/// DP all-reduce hierarchical over nodes of N consecutive ranks: "DP4:hier2"), "staleK" (stale
/// gradients, K >= 1), "dc" (DC-ASGD delay compensation, lambda 0.1) or "dcX" (lambda X, e.g.
/// "dc0.5"; with staleK only), "localH" (DiLoCo local steps, H >= 1; not with staleK), each at
/// most once. Divisibility and the rules across options (zb-h1 with full recompute) are not
/// checked here (layout_validate.h validate_layout_spec). Errors: InputError "<path>: '<text>' <reason> (expected e.g. ...)".
LayoutSpec parse_layout_spec(const std::string& text, const std::string& path);

/// The lambda of a layout spec's "dc" option without a number (DC-ASGD's delay compensation).
constexpr double kDefaultDelayCompensation = 0.1;

/// When layout_spec_text writes the default schedule 1f1b (the parser's default when none is named).
enum class DefaultSchedule {
  alone,           // for a pipeline alone (PP > 1, no other dimension > 1, no other option): "PP2:1f1b"
                   // beside "PP2:gpipe", while "TP2xPP2" and "PP2:layers5+3" leave it implied
  every_pipeline,  // whenever PP > 1 ("TP2xPP2:1f1b"): the sweep's candidates, each schedule named
  never,           // never ("PP2"): the planner's candidate names
};

/// The form layout_spec_text writes; the default is the canonical form. The other forms are the
/// names some outputs printed before the canonical form existed, kept so that their record
/// names do not change.
struct SpecTextForm {
  DefaultSchedule schedule = DefaultSchedule::alone;
  bool fixed_dimension_order = false;  // TP, PP, DP, EP whatever EP is ("PP2xDP4xEP2", "DP2xEP2": the sweep)
  bool data_parallel_always = false;   // DP named even at size 1 ("TP2xDP1": the memory suite's cases)
  bool sp_last = false;                // "sp" after every other option ("TP2xDP2:zero1:full:sp": the planner)
};

/// The layout spec text of `s`, parse_layout_spec's inverse, every token from the spellings
/// table (spec_token). Canonical form: the dimensions > 1 joined by 'x' ("DP1" when all are 1),
/// in the order TP, PP, DP without experts, TP, DP, EP, PP with them (DP left implied by EP
/// when equal and PP is 1: "EP2", "TP2xEP2", "DP4xEP2", "DP2xEP2xPP2"); then the options,
/// joined by ':', in the order: the schedule (see DefaultSchedule), vN (N != 1),
/// layersA+B+.. (an uneven split), sp, zeroN (N > 0), offload, full or selective, hierN
/// (N > 0), staleK (K > 0), dc (lambda 0.1) or dcX (the shortest X that reads back), localH
/// (H > 0). parse_layout_spec(layout_spec_text(s)) equals s for every spec the parser makes,
/// and layout_spec_text(parse_layout_spec(t)) == t for a canonical t (every default
/// conformance layout is one: suites/conformance.h). Not written: precision and FP8, communication
/// type and the ZeRO buckets (a spec has none), micro-batches, DpSync's outer optimizer and
/// replicas. Errors: none.
std::string layout_spec_text(const LayoutSpec& s, const SpecTextForm& form = {});

/// Refuses a layout an MoE model (model.num_experts > 0) cannot train on yet, in one line
/// naming the setting: a non-CPU backend (moe.cc routes and gathers on the host). Every
/// precision, tensor parallelism and any recompute are accepted; the sizes' divisibility is
/// validate_layout's. A dense model passes. Errors: InputError "<path>: ...".
void validate_moe_layout(const LayoutSpec& s, const GptConfig& model, const std::string& backend,
                         const std::string& path);

/// The train suite's record name of a sharded layout: "tp:T/dp:D/pp:P/schedule:S", then
/// "/ep:E" (E > 1), "/sp:on" (sequence parallel), "/v:V" (interleaved), "/layers:A+B" (an uneven split),
/// "/zero:Z" (Z > 0), "/offload:cpu", "/recompute:R" (not none),
/// "/precision:P" (not fp32; FP8 linears: "/precision:fp8/fp8_recipe:R"), "/dp_allreduce:hierN" (hierarchical), "/stale:K" (K > 0), "/dc:X"
/// (lambda X > 0), "/local:H" (H > 0).
std::string layout_record_name(const LayoutSpec& s);

/// Sets a record's layout fields: tp, dp, pp, ep, sequence_parallel, schedule, virtual_stages,
/// pipeline_layers ([] for the even split), zero_stage,
/// offload_optimizer ("cpu" / "none"), recompute and precision ("fp8" with FP8 linears, and then
/// fp8_recipe, the recipe's name); a hierarchical DP all-reduce adds
/// dp_allreduce "hierarchical" and dp_allreduce_ranks_per_node N (absent: flat).
/// Under stale gradients or local steps (not synchronous) also staleness, delay_compensation and
/// local_steps.
void add_layout_fields(nlohmann::json& rec, const LayoutSpec& s);

/// A comparable printable form of each typed part (every field), for tests and messages.
nlohmann::json to_json(const ParallelLayout& l);
nlohmann::json to_json(const ZeroConfig& z);
nlohmann::json to_json(const DpSync& d);
nlohmann::json to_json(const LayoutSpec& s);

}  // namespace dtb
