// The analytic memory model: bytes per rank by category (kernels/device.h's MemCategory)
// and tier, without allocating anything, for any model size. Two levels:
//  1. paper-level model states for Ψ parameters (Rajbhandari et al. 2019, ZeRO, Fig. 1), and
//     DeepSpeed's and Megatron-LM's estimators as they are written, to compare against;
//  2. the exact per-rank plan of the reference trainer (reference/parallel_gpt.*): the same
//     tensors, ZeRO shards, activation sets and scratch the trainer allocates, so the memory
//     suite can compare it byte for byte with the Device accounting.
// Not the trainer: nothing here runs. Both families (GPT-2 and Llama, reference/model/gpt.h) and
// every layout the trainer runs but MoE and zb-h1: TP (Llama's KV heads sharded or shared), SP, PP,
// DP with ZeRO 0-3 and offload, and context parallelism (each CP rank's Tn / cp rows, ZeRO over
// the dp cp ranks, the CP attention's log-sum-exp, scratch and ring buffers).
// Shape legend as gpt.h / parallel_gpt.h: B sequences per micro-batch, Tn tokens (a CP rank's
// Tn / cp under context parallelism), BT = B Tn, Cl = C/tp, NHl = NH/tp, Vl = V/tp, KVl = Llama's KV
// heads per rank, Wq = QKV's rows per rank ((NHl + 2 KVl) hs; GPT-2 3 Cl), F1 and Fa = fc's rows
// and the activation's width per rank (GPT-2 4 Cl each; Llama 2 Fl and Fl, Fl = F/tp), Lc = a
// virtual stage's layers (L/(pp v), or layout.pipeline_layers' entry).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "reference/model/gpt.h"
#include "reference/layout/process_grid.h"
#include "reference/zero/zero_config.h"

namespace dtb {

/// Training precision recipe. fp32: fp32 weights, gradients and Adam moments, no master
/// copy (Adam updates the weights themselves). bf16 / fp16 (Micikevicius et al. 2018):
/// 16-bit weights and gradients, fp32 master weights and moments (the sharded trainer:
/// reference/zero/zero.h, kernels/half.h).
enum class Precision { fp32, bf16, fp16 };
/// The recipe of a run that stores T (run_layout's choice of T inverted): bf16, fp16, and fp32
/// for float (and the float64 oracle's double).
template <typename T>
constexpr Precision precision_of() {
  if constexpr (std::is_same_v<T, bf16>) return Precision::bf16;
  else if constexpr (std::is_same_v<T, fp16>) return Precision::fp16;
  else return Precision::fp32;
}
/// Activation recompute (Korthikanti et al. 2022): ParallelGpt::set_recompute.
enum class Recompute { none, full, selective };
/// Where the optimizer state and its fp32 working copies live (DeepSpeed offload_optimizer).
enum class Offload { none, cpu };
/// How attention's core runs. materialized: the reference trainer's kernels, which store each
/// layer's (B, NHl, Tn, Tn) probabilities for the backward and time the full square (the CPU
/// backend's, and the exact plan the memory suite checks). fused: a GPU's fused kernel
/// (FlashAttention-2, Dao 2023, arXiv 2307.08691 Sec. 3.1; Transformer Engine's and cuDNN's
/// fused attention), which keeps per row and head only the fp32 log-sum-exp of the softmax and
/// skips the causal square's blocks above the diagonal.
enum class AttentionKernel { materialized, fused };

std::string_view to_string(Precision p);
std::string_view to_string(Recompute r);
std::string_view to_string(Offload o);
std::string_view to_string(AttentionKernel a);
/// ZeroConfig::offload_optimizer as the memory model's Offload.
inline Offload offload_of(const ZeroConfig& z) { return z.offload_optimizer ? Offload::cpu : Offload::none; }
/// Parses "fp32" | "bf16" | "fp16" (and the others' names); InputError naming the choices.
Precision parse_precision(const std::string& s);
Recompute parse_recompute(const std::string& s);
Offload parse_offload(const std::string& s);
/// Parses "materialized" | "fused"; InputError "unknown attention kernel 'x' (materialized, fused)".
AttentionKernel parse_attention_kernel(const std::string& s);

/// Bytes per (tier, category): what Device::stats() reports, predicted.
template <typename Num>
struct MemoryBytes {
  std::array<std::array<Num, kNumMemCategories>, kNumTiers> b{};
  Num& at(Tier t, MemCategory c) { return b[int(t)][int(c)]; }
  Num get(Tier t, MemCategory c) const { return b[int(t)][int(c)]; }
  Num total(Tier t) const {
    Num s = 0;
    for (Num x : b[int(t)]) s += x;
    return s;
  }
  /// param + grad + master_param + optimizer_state on tier t.
  Num model_states(Tier t) const {
    return get(t, MemCategory::param) + get(t, MemCategory::grad) + get(t, MemCategory::master_param) +
           get(t, MemCategory::optimizer_state);
  }
};

// ---------------------------------------------------------------------------------------
// Level 1: paper-level model states (no layout detail).

/// Bytes per parameter of each model-state category, unsharded. fp32: param 4, grad 4,
/// master 0, Adam m + v 8 (16 in all). Mixed: param 2, grad 2, master 4, Adam 8 (ZeRO's
/// K = 12; 16 in all).
struct StateBytesPerParam {
  double param = 0, grad = 0, master_param = 0, optimizer_state = 0;
  double total() const { return param + grad + master_param + optimizer_state; }
};
StateBytesPerParam state_bytes_per_param(Precision p);

/// Model-state bytes per DP rank for psi parameters under ZeRO stage 0-3 over dp ranks
/// (ZeRO paper Sec. 5): stage 1 divides master + optimizer by dp, stage 2 also grads,
/// stage 3 also params. Offload cpu (stages 1-3): the optimizer state and the master copy
/// leave the device; the host holds the rank's shard of master (4 B/param, the fp32 copy
/// CPU Adam updates, also in fp32), Adam m + v (8) and fp32 grads (4).
/// Errors: InputError for psi < 0, dp < 1, a stage outside 0-3, offload with stage 0.
MemoryBytes<double> zero_model_states(double psi, Precision p, int zero_stage, int dp,
                                      Offload offload = Offload::none);

/// An MoE model's parameters (gpt.h's counts) split as the expert-parallel trainer stores them
/// (reference/parallel/parallel_moe.cc): `experts`, every MoE layer's E experts (fc, fc bias, proj, proj
/// bias); `non_expert`, the rest (embeddings, attention, LayerNorms, routers, dense FFNs);
/// `active`, what one token uses (its top-k experts). A dense model has experts = 0.
struct MoeParams {
  double total = 0, active = 0, experts = 0, non_expert = 0;
  /// Parameters one rank holds at expert parallel ep: the non-expert ones and E / ep of each
  /// layer's experts.
  double per_rank(int ep) const { return non_expert + experts / ep; }
};
MoeParams moe_params(const GptConfig& m);

/// Model-state bytes per rank of an MoE model over dp data-parallel ranks at expert parallel ep
/// (Megatron-LM's expert-data-parallel groups: ep divides dp): zero_model_states of the
/// non-expert parameters over dp ranks plus of the rank's experts (experts / ep) over its dp / ep
/// expert-data-parallel ranks, the group ZeRO shards and averages them over. Paper level: ZeRO
/// shards' padding not counted (exact at stage 0). Errors: InputError for ep < 1, ep not
/// dividing E or dp, and zero_model_states'.
MemoryBytes<double> moe_model_states(const GptConfig& m, Precision p, int zero_stage, int dp, int ep,
                                     Offload offload = Offload::none);

/// DeepSpeed's estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/stage_1_and_2.py),
/// bytes truncated with int() as there. Offload: gpu 2P, cpu P max(4 total_gpus, 16) f; no
/// offload: gpu 2P + int(18P / total_gpus), cpu 4P gpus_per_node f. `legacy` uses the
/// formula before DeepSpeed's change to 18, gpu 4P + int(16P / total_gpus), which is what
/// docs/code-docs/source/memory.rst still prints (t5-3b: 15.93GB).
struct DeepSpeedEstimate {
  double cpu_bytes = 0, gpu_bytes = 0;
};
DeepSpeedEstimate deepspeed_zero2_estimate(double total_params, int gpus_per_node, int num_nodes, bool cpu_offload,
                                           double additional_buffer_factor = 1.5, bool legacy = false);
/// DeepSpeed's estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py), with
/// largest_layer_memory = 4 largest_layer_params on the GPU in every case.
DeepSpeedEstimate deepspeed_zero3_estimate(double total_params, double largest_layer_params, int gpus_per_node,
                                           int num_nodes, bool cpu_offload, bool cpu_offload_params,
                                           bool zero_init, double additional_buffer_factor = 1.5);

/// Megatron-LM's theoretical weight + optimizer bytes (megatron/training/
/// theoretical_memory_usage.py) for this GPT: 12 L C^2 + 4 L C + 2 C transformer parameters
/// (no linear biases, no position table), tied embedding C V on the most loaded shard,
/// (layers / pp + embedding) / tp of them x 18 B/param, or 6 + 12/dp with the distributed
/// optimizer ("bf16 params, fp32 main grads, fp32 main params, fp32 Adam").
double megatron_weight_and_optimizer_bytes(const GptConfig& m, int tp, int pp, int dp, bool distributed_optimizer);

/// Korthikanti et al. 2022 Table 2: activation bytes of one transformer layer, 16-bit
/// activations with 1-byte dropout masks, s tokens, b sequences, h = C, a = NH, t = tp:
/// none: s b h (10 + 24/t + 5 a s/(h t)); selective: s b h (10 + 24/t); full: 2 s b h (the
/// layer's input). With sequence parallelism every term is divided by t: s b h (34/t +
/// 5 a s/(h t)) (eq. 4), s b h 34/t (eq. 6's selective recompute), and 2 s b h / t for full
/// recompute (derived here: the kept layer input is sharded too; Table 2 lists 2 s b h).
double korthikanti_layer_activation_bytes(const GptConfig& m, int seq, int micro_batch, int tp, Recompute r,
                                          bool sequence_parallel = false);

// ---------------------------------------------------------------------------------------
// Level 2: the reference trainer's exact plan.

/// What to plan: the model, the layout, the ZeRO stage, offload, precision, recompute, the
/// sequence length Tn (0 = model.T) and B sequences per micro-batch. The global batch is
/// B dp micro_batches.
struct PlanConfig {
  GptConfig model;
  ParallelLayout layout;
  ZeroConfig zero;  // the stage and offload_optimizer are planned; buckets and overlap are not
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  int seq_len = 0;
  int micro_batch_size = 1;
  /// materialized: the reference trainer's plan, byte for byte; fused: attention's core as a fused
  /// GPU kernel keeps it (layer_activation_floats, workspace_floats).
  AttentionKernel attention = AttentionKernel::materialized;
  int64_t global_batch() const { return int64_t(micro_batch_size) * layout.dp * layout.micro_batches; }
  int tokens() const { return seq_len > 0 ? seq_len : model.T; }
  /// The rows of each sequence one rank trains: tokens(), or its tokens() / cp under context
  /// parallelism (its two chunks, reference/parallel/context_parallel.h CpSplit).
  int local_tokens() const { return tokens() / (layout.cp > 0 ? layout.cp : 1); }
};

/// Throws InputError naming the value for a plan that cannot be trained: validate_gpt_config,
/// validate_layout (world = tp cp dp pp, global batch as above, 2 cp dividing the sequence),
/// llama_tp_refusal (a Llama model's tp against its KV heads and ffn_hidden_size),
/// validate_cp_layout's refusals (layout_validate.h: what context parallelism does not compose
/// with yet), zero stage outside 0-3, offload with stage 0, seq_len outside [1, T] (0 means T),
/// micro_batch_size < 1, schedule zb-h1, an MoE model (the sharded model has no MoE layers yet).
void validate_plan(const PlanConfig& c);

/// One parameter tensor a rank holds, in ParallelGpt's add_tensor order.
struct PlanTensor {
  std::string name;           // gpt.h's tensor name, e.g. "qkvw"
  int layer = -1;             // global layer, -1 outside the blocks
  uint64_t numel = 0;
  bool tp_replicated = false;  // LayerNorms, wpe, row-parallel biases: the same on every TP rank
  // (Llama's KV head shared by tp / KV ranks is a second "qkvw" tensor of its 2 hs rows, not
  // marked: the ranks sharing it are a part of the TP group, as ParallelGpt marks it.)
};

/// A ZeRO unit: tensors sharded together over the DP group (with context parallelism the
/// dp cp ranks of the data-and-context group), each rank holding shard = ceil(numel / (dp cp))
/// elements (the last rank's padded).
struct ZeroUnit {
  std::string name;  // "wte", "wpe", "layer.<l>", "lnf", "lmhead" (ParamUnit's names)
  uint64_t numel = 0, shard = 0;
};

/// The plan of one rank (every DP rank of a (tp, pp) position holds the same bytes).
struct RankPlan {
  int tp_rank = 0, pp_rank = 0;
  uint64_t N = 0;  // parameters held (Σ tensors)
  uint64_t S = 0;  // this rank's ZeRO shard elements (Σ units' shard)
  std::vector<PlanTensor> tensors;
  std::vector<ZeroUnit> units;
  std::vector<int> activation_sets;           // per chunk: the most (micro-batch) sets alive at once
  std::vector<uint64_t> activation_set_bytes;  // per chunk: bytes of one set
  uint64_t workspace_bytes = 0;  // its peak: the backward scratch and the transient below
  /// Of workspace_bytes, the peak of the buffers allocated and freed within one op: under
  /// context parallelism the CP attention's per-pass scratch or GPT-2's wpe rows (transient_workspace_bytes).
  uint64_t transient_workspace_bytes = 0;
  /// Context parallelism's ring (or all-gather) K/V and dK/dV blocks at their peak, in the
  /// backward (cp_comm_buffer_bytes): category comm_buffer, not in mem; a lower bound of its peak.
  uint64_t cp_comm_buffer_bytes = 0;
  MemoryBytes<uint64_t> mem;  // every category at its peak; comm_buffer not modelled (0)
  uint64_t device_total() const { return mem.total(Tier::device); }
};

/// Per chunk of pipeline rank `stage`, the most forwards whose backward has not run yet,
/// walking pipeline_schedule(schedule, p, m, v, stage) in order (a set is held from its forward
/// to its whole backward, or to its W under a zero-bubble schedule): the activation sets the
/// rank allocates (sets are pooled per chunk and reused). Errors: as pipeline_schedule.
std::vector<int> activation_sets_per_chunk(const std::string& schedule, int p, int m, int v, int stage);

/// The parameters of each rank as ParallelGpt's constructor adds them (Llama: no biases, no wpe,
/// RMSNorm weights, QKV by query and KV heads, SwiGLU's gate | up rows, the untied lmheadw on the
/// last stage), and their ZeRO units over dp ranks (pass dp cp under context parallelism).
std::vector<PlanTensor> plan_tensors(const GptConfig& m, const ParallelLayout& l, int tp_rank, int pp_rank);
std::vector<ZeroUnit> plan_zero_units(const std::vector<PlanTensor>& tensors, int dp);

/// Elements of one activation set of virtual stage `virtual_stage`'s chunk (floats; plus 2 BT
/// int32 token and target ids: its stage_layers count of layers, the head on the last), and of
/// the backward scratch held from the first forward (and Llama's shared-KV-head gradient
/// buffer, from construction), as ParallelGpt::acquire / ensure_scratch allocate them; full /
/// selective recompute as ParallelGpt keeps and recomputes them. Throws std::out_of_range
/// for a virtual stage outside [0, pp v) (a programming error: callers loop over the stages).
uint64_t activation_set_floats(const PlanConfig& c, int virtual_stage);
uint64_t workspace_floats(const PlanConfig& c);
/// Elements one transformer layer keeps per micro-batch: recompute none 6 R C + 2 s R +
/// BT (Wq + Cl + F1 + Fa) + the attention's (B NHl Tn^2 probabilities, or under context
/// parallelism or a fused kernel the B Tn NHl log-sum-exp); selective without the attention's;
/// full R C. workspace_floats under a fused kernel: no (B, NHl, Tn, Tn) buffers, and flash-attn's
/// fp32 backward scratch (softmax_d B NHl Tr, dq_accum B Tr Cl, Tr = Tn rounded up to 128) plus
/// under recompute the recomputed layer's log-sum-exp (docs/memory.md). s = 2
/// statistics per norm row (LayerNorm) or 1 (RMSNorm); GPT-2: 6 R C + 4 R + 12 BT Cl + B NHl Tn^2.
/// R = BT, or BT / tp under sequence parallelism (Korthikanti et al. 2022's 1/t on the
/// LayerNorm and residual regions).
uint64_t layer_activation_floats(const PlanConfig& c);
/// Bytes of the workspace buffers alive within one op only, at their largest, on pipeline rank
/// pp_rank: 0 without context parallelism; with it the CP attention pass's scratch (a block's
/// output, log-sum-exp and op scratch, and under grouped-query attention its K/V and dK/dV
/// repeated to the query heads), or on GPT-2's first stage wpe's (Tn, C) rows, the larger.
uint64_t transient_workspace_bytes(const PlanConfig& c, int pp_rank);
/// Bytes of context parallelism's K/V blocks at their peak (the backward's: p2p 4 blocks, all_gather
/// 2 + 2 cp, each B Tn 2 KVl hs elements); 0 without it.
uint64_t cp_comm_buffer_bytes(const PlanConfig& c);

/// The plan of the rank at (tp_rank, pp_rank): bytes per (tier, category) at their peaks.
/// Errors: validate_plan's InputError; ranks out of range.
RankPlan plan_rank(const PlanConfig& c, int tp_rank, int pp_rank);
/// One plan per pipeline stage (TP rank 0; every TP rank holds the same bytes).
std::vector<RankPlan> plan_stages(const PlanConfig& c);
/// The stage with the most device bytes (the first of equals).
RankPlan plan_busiest_rank(const PlanConfig& c);

}  // namespace dtb
