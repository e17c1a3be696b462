// Communication overlap as the step-time model prices it (StepOverlap: which of a step's
// transfers run behind compute, and in how many pieces) and the named stack profiles that set
// it as a training stack does (dtbench's reference trainer, Megatron-LM 2021, Megatron-Core,
// PyTorch FSDP2). Settings only: the pricing is predict_step's (reference/analytic/
// step_time_model.cc), the equation overlapped_exposed's; sources in docs/plan.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/analytic/memory_model.h"

namespace dtb {

/// Which communication a step overlaps with compute. Every field off is what dtbench's reference
/// trainer does (reference/zero/zero.cc: the stage 0-1 gradient all-reduce in reduce_bucket_size
/// buckets after the backward, blocking; ZeRO-3 gathers blocking before each unit's use;
/// reference/parallel's TP collectives and pipeline sends blocking), and what the step-time model
/// priced before these settings existed. ZeroConfig::overlap_comm (the ZeRO-2/3 reduce-scatters
/// issued async, DeepSpeed's overlap_comm) is separate and unchanged.
struct StepOverlap {
  /// The DP gradient reduction (stage 0-1 all-reduce; stage 2-3 reduce-scatter) in buckets
  /// launched as the backward produces them, all but the last hidden under the rest of the
  /// backward (Megatron-Core's --overlap-grad-reduce; PyTorch DDP's bucketed hooks; FSDP2's
  /// per-module reduce-scatter on its own stream).
  bool dp_grad_reduce = false;
  /// The bucket, parameters: max(bucket_params, bucket_params_per_dp x the DP group's ranks)
  /// (Megatron-Core DistributedDataParallelConfig.bucket_size's default max(40e6, 1e6 dp)); 0:
  /// one bucket per transformer layer (FSDP2's per-module unit; NeMo: "chunked by the
  /// granularity of a Transformer layer").
  int64_t bucket_params = 0, bucket_params_per_dp = 0;
  /// Parameter all-gathers prefetched: ZeRO-3 / FSDP unit i+1's gather behind unit i's compute
  /// (forward and backward), and the distributed optimizer's (ZeRO 1-2) post-step all-gather
  /// behind the next forward (Megatron-Core's --overlap-param-gather).
  bool param_gather_prefetch = false;
  /// The most parameter elements a ZeRO-3 prefetch gathers ahead of use (DeepSpeed's
  /// stage3_prefetch_bucket_size, default 5e7: "maximum number of parameter elements to fetch ahead
  /// of use", deepspeed/runtime/zero/config.py); 0: a whole unit ahead (FSDP2, Megatron-Core).
  /// A unit larger than it is gathered that share early, the rest on use.
  int64_t prefetch_params = 0;
  /// ZeRO-3 gathers each parameter tensor with its own all-gather (DeepSpeed 2021's stage3.py
  /// fetch_sub_module: Init._all_gather(params, async_op=True), one torch.distributed.all_gather
  /// per parameter), each paying a collective's latency; false: one all-gather per unit (FSDP's
  /// flat parameter, dtbench's trainer's unit buffer).
  bool gather_per_tensor = false;
  /// With gather_per_tensor, tensors of fewer elements than this are never partitioned and never
  /// gathered (DeepSpeed's stage3_param_persistence_threshold, default 1e5: "do not partition
  /// parameters smaller than this threshold"; stage3.py's ds_persist), such as a layer's biases
  /// and norms; 0: every tensor is gathered. Their replicated bytes are left out of the memory plan.
  int64_t param_persistence_threshold = 0;
  /// TP collectives overlapped with the TP GEMMs (Megatron-Core --tp-comm-overlap, Transformer
  /// Engine userbuffers' ring exchange: each collective cut into tp chunks, one per TP rank, all
  /// but the first hidden under the chunked GEMM).
  bool tp_comm = false;
  /// Pipeline sends and receives behind the next compute (Megatron-Core's overlap_p2p_comm)
  /// instead of blocking.
  bool pp_send = false;
  /// The scatter-gather of inter-stage activations (Narayanan et al. 2021 Sec. 4.1): each of the
  /// tp ranks sends 1/tp of the activation, then an all-gather over the TP group rebuilds it.
  bool pp_scatter_gather = false;
};

/// A named training stack: its overlap settings, the attention kernel it runs, and where each was
/// read.
struct StackProfile {
  std::string name;
  StepOverlap overlap;
  std::string source;  // the code, flags and papers each setting follows
  /// The attention kernel the stack runs (memory and time), or none: the hardware file's
  /// attention_kernel (dtbench's reference trainer: materialized on the CPU, what a GPU file says).
  std::optional<AttentionKernel> attention{};
  /// The attention and hidden dropout rate the stack's models train with (StepTimeInput::dropout).
  double dropout = 0;
  /// Whether each micro-batch's half-precision gradients are added into fp32 main_grad by a
  /// separate pass (StepTimeInput::main_grad_accumulation).
  bool main_grad_accumulation = false;
};

/// The stacks `dtbench plan --stack` knows, "dtbench" (the default: all off) first.
const std::vector<StackProfile>& stack_profiles();

/// The profile called `name`. Errors: InputError "--stack NAME: not a known stack (dtbench,
/// megatron-2021, megatron-core, fsdp2, deepspeed-zero3-2021)".
const StackProfile& find_stack_profile(const std::string& name);

/// The attention kernel a plan prices (memory and time): `given` (dtbench plan --attention) when
/// set, else the stack's (megatron-2021 materialized, megatron-core fused, ...), else `hardware`
/// (the hardware file's attention_kernel). Pure.
AttentionKernel plan_attention(std::optional<AttentionKernel> given, const StackProfile& stack, AttentionKernel hardware);

/// Seconds of `comm_s` communication not hidden when it runs in `pieces` equal pieces beside
/// `compute_s` of compute cut the same way, each piece's transfer behind the next (or previous)
/// piece's compute on a separate stream, as a two-machine flow shop (Johnson 1954) with equal
/// jobs: c + (k - 1) max(0, c - w), c = comm_s / k, w = compute_s / k. One piece is always
/// exposed (the first gather before any compute; the last bucket after the backward); the
/// result is never below 0 nor above comm_s, and compute is never shortened. pieces < 1 is 1.
double overlapped_exposed(double comm_s, double compute_s, int64_t pieces);

/// The DP buckets of `params` gradient elements under `o` over a DP group of `dp` ranks,
/// transformer layers `layers` (the bucket count when bucket_params is 0): at least 1.
int64_t dp_bucket_count(const StepOverlap& o, double params, int dp, int layers);

/// "grad-reduce bucketed (40M params), param-gather prefetch, tp-comm overlap, p2p overlap" or
/// "none" : the settings for a plan's header.
std::string overlap_text(const StepOverlap& o);

}  // namespace dtb
