// `dtbench memory`: plans a configuration's per-rank memory without running it
// (reference/analytic/memory_model.h), prints a per-stage breakdown by category and tier and where
// the usual rules of thumb differ from the exact accounting, or JSON with --json.
// With --params P: model states only, the ZeRO paper's four stages and DeepSpeed's estimators.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/model/gpt.h"

namespace CLI {
class App;  // <CLI/CLI.hpp> only in the files that build or read the options (why: harness/cli_text.h)
}

namespace dtb {

/// A layout a named model was trained with, as published: its sizes, the sequence and the
/// sequences per DP rank of a step, the reported BF16 MFU (a fraction) and the source.
struct PublishedLayout {
  int gpus = 0, tp = 1, cp = 1, pp = 1, dp = 1;
  int seq_len = 0;
  int seqs_per_dp = 0;
  double mfu = 0;
  std::string source;
};

/// A named model shape. Parameters: gpt_num_params (GPT-2: tied embedding, learned positions;
/// Llama: untied head, no position table). `plan_seq` is the sequence `dtbench plan` uses when
/// --seq is not given (0: T): 8192 for the Llama 3 models, whose T is the long-context phase's
/// 131072 (Dubey et al. 2024 Sec. 3.4: pre-training at 8K, then the context extended).
/// `plan_batch_tokens` is the global batch in tokens `dtbench plan` takes by default, with its
/// source (0: the planner's GPT-3 rule, default_global_batch): for the Llama 3 models the 405B's
/// published 16M tokens (Table 4), the only batch the paper gives, for all three. `published`
/// the layouts the model's authors trained with.
struct NamedModel {
  std::string name;
  GptConfig cfg;
  std::string source;  // where the shape comes from
  int plan_seq = 0;
  int64_t plan_batch_tokens = 0;
  std::string plan_batch_source{};  // where plan_batch_tokens comes from
  std::vector<PublishedLayout> published{};
};
/// gpt2-124m (L12 C768 NH12 T1024 V50257: 124,439,808), 1b (L20 C2048 NH16 T2048:
/// 1,114,290,176), 3b (L36 C2560 NH20 T2048: 2,966,259,200), 10b (L32 C5120 NH40 T2048:
/// 10,336,271,360), gpt3-175b (L96 C12288 NH96 T2048: 174,604,259,328); V 50257 (GPT-2's BPE);
/// moe-6b (L24 C2048 NH16 T2048, every layer 64 experts of hidden size 864, top-8:
/// 5,953,607,680 parameters, 1,193,353,216 active); llama3-8b (L32 C4096 NH32 KV8 F14336),
/// llama3-70b (L80 C8192 NH64 KV8 F28672), llama3-405b (L126 C16384 NH128 KV8 F53248), each V
/// 128256, T 131072, RoPE base 5e5 (Dubey et al. 2024, Table 3; 405B's batch of 16M tokens and
/// its Table 4 layouts).
const std::vector<NamedModel>& named_models();

/// The named model `name`. Errors: InputError "unknown model '<name>' (did you mean <nearest>?);
/// named models: ...".
const NamedModel& find_named_model(const std::string& name);

/// x with thousands separated by commas ("1,234,567").
std::string commas(uint64_t x);

/// The options of `dtbench memory`, as given (sentinels: 0 or empty = not given).
struct MemoryArgs {
  std::string model;
  int layers = 0, hidden = 0, heads = 0, vocab = 0, seq = 0;
  double params = -1;  // --params: paper-level mode when >= 0
  double largest_layer_params = -1;
  int tp = 1, pp = 1, dp = 1, virtual_stages = 1, micro_batches = 0, micro_batch_size = 1;
  int cp = 1;                      // --cp: context parallelism (docs/context-parallel.md)
  std::string cp_comm_type = "p2p";  // --cp-comm-type p2p | all_gather
  // A model by shape of the Llama family (model.arch, num_kv_heads, ffn_hidden_size; docs/models.md):
  // --arch llama, --kv-heads (0: NH), --ffn-hidden (0: Llama's rule from C).
  std::string arch = "gpt2";
  int kv_heads = 0, ffn_hidden = 0;
  int zero_stage = 0, gpus_per_node = 0;
  int num_experts = 0, moe_topk = 2, moe_ffn_hidden = 0, moe_layer_freq = 1, ep = 1;  // MoE (docs/moe.md)
  std::string schedule = "1f1b", offload = "none", precision = "fp32", recompute = "none";
  std::string attention = "materialized";  // --attention: materialized (the reference trainer) or fused
  std::string pipeline_layers;      // --pipeline-layers A+B+..: layers per virtual stage (empty: even)
  bool sequence_parallel = false;  // --sequence-parallel (with --tp > 1)
  bool json = false;
};

/// Adds the `memory` subcommand with its options bound to `args` (which must outlive `app`).
CLI::App* add_memory_subcommand(CLI::App& app, MemoryArgs& args);

/// The plan as JSON (the document --json prints). `sub` tells which options were given.
/// Errors: InputError naming the bad value (unknown model, with the nearest name; a layout
/// that does not divide; zero stage outside 0-3; offload with stage 0; sizes below 1).
nlohmann::json memory_plan_json(const CLI::App& sub, const MemoryArgs& args);
/// The human-readable report of a memory_plan_json document.
std::string memory_plan_text(const nlohmann::json& plan);

/// An MoE model's memory (mode "moe"; harness/memory_moe.cc): its total and active parameters, the
/// experts' share, and model states per rank under DP `a.dp`, expert parallelism `a.ep` (each rank
/// holds E/ep experts of every MoE layer) and ZeRO: the non-expert parameters sharded over the DP
/// ranks, the experts over their expert-data-parallel group (dp/ep ranks, as Megatron-LM), bytes per
/// parameter as zero_model_states; against a dense model of the total and one of the active count.
/// Activations are not planned. Errors: InputError when ep does not divide num_experts or dp, for
/// tp or pp above 1, and as zero_model_states.
nlohmann::json moe_plan_json(const GptConfig& m, const std::string& name, const MemoryArgs& a, nlohmann::json notes);
/// The text of a moe_plan_json document, without its rules of thumb and notes.
std::string moe_plan_text(const nlohmann::json& plan);

/// Runs the subcommand: prints the text report (or JSON) to stdout when `print`. Returns 0.
/// Errors: as memory_plan_json.
int cmd_memory(const CLI::App& sub, const MemoryArgs& args, bool print);

}  // namespace dtb
