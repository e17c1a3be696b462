// The layout planner: every layout tp x cp x pp x dp = N of a dense GPT or Llama model, each ZeRO stage, recompute
// and sequence-parallel choice, with its busiest rank's device bytes (reference/analytic/memory_model.h's
// exact plan of the reference trainer) and its predicted step (reference/analytic/step_time_model.h),
// tokens/s and MFU; the ones that cannot run are kept with the reason. Model code: no JSON, no
// files (harness/plan_cli.h prints it, harness/hardware_file.h reads the hardware).
// Legend: N GPUs, t = tp, c = cp, p = pp, d = dp, m micro-batches per DP rank, b the micro-batch size.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "reference/model/gpt.h"
#include "reference/analytic/memory_model.h"
#include "reference/analytic/step_time_model.h"

namespace dtb {

/// What the planner needs of a machine beyond the step-time model's rates.
struct PlannerHardware {
  StepTimeHardware hw;                // the rates predict_step prices with
  double device_memory_bytes = 0;     // one GPU's memory, bytes
  std::array<double, 3> peak_flops{};  // dense peak FLOP/s per precision (index int(Precision)), MFU's denominator
};

/// What to plan. 0 (tp, cp, pp, dp) or -1 (zero_stage) leaves a dimension free; a value fixes
/// it. A free cp is enumerated for Llama models only (1 for GPT-2).
struct PlanRequest {
  GptConfig model{};        // dense; its V as given (the planner pads it per tp)
  int gpus = 1;             // N
  int global_batch = 1;     // sequences per step over all DP ranks
  int micro_batch_size = 1;  // b, sequences per micro-batch
  int seq_len = 0;          // tokens per sequence (0: model.T)
  Precision precision = Precision::bf16;
  /// How attention runs, in the memory plan and the step time (memory_model.h AttentionKernel):
  /// `dtbench plan` takes --attention, else the --stack's kernel, else the hardware file's
  /// attention_kernel (plan_attention, stack_profile.h).
  AttentionKernel attention = AttentionKernel::materialized;
  int tp = 0, pp = 0, dp = 0;
  int cp = 0;
  int zero_stage = -1;
  /// Which communication every candidate overlaps with compute (a stack profile's settings,
  /// reference/analytic/stack_profile.h; default all off: dtbench's reference trainer).
  StepOverlap overlap{};
  double dropout = 0;  // the stack's dropout rate (StepTimeInput::dropout)
  bool main_grad_accumulation = false;  // the stack's (StepTimeInput::main_grad_accumulation)
  /// true: 1F1B alone, the reference trainer's default schedule (`dtbench plan --schedules 1f1b`);
  /// false: every schedule of plan_schedule_choices.
  bool only_1f1b = false;
  int tokens() const { return seq_len > 0 ? seq_len : model.T; }
};

/// One candidate: the step it would train, whether it can, and what it costs.
struct PlanCandidate {
  StepTimeInput input{};        // model (vocabulary padded), layout, batch, ZeRO, recompute, precision
  bool feasible = false;
  std::string rejected_kind;    // "" when feasible; else a short reason to group by ("out of memory", ...)
  std::string rejected;         // the reason with its numbers ("needs 96.3 GiB > 40.0 GiB")
  double device_bytes = 0;      // the busiest rank's device bytes (plan_busiest_rank), 0 when not planned
  StepTimeTerms terms{};        // predict_step's terms, seconds (zero when rejected before it)
  double tokens_per_s = 0;      // global_batch seq_len / step_s
  double mfu = 0;               // model_flops_per_token (unpadded model) x tokens/s / (N peak)
  /// The layout's name in the sweep's spelling with the choices after it:
  /// "TP2xPP2xDP2:zero1:selective:sp" (a dimension of 1 left out, "DP1" when all are 1).
  std::string name() const;
};

/// The vocabulary Megatron-LM trains at tp: V rounded up to a multiple of 128 tp
/// (--make-vocab-size-divisible-by 128, megatron/training/tokenizer's _vocab_size_with_padding).
int padded_vocab(int V, int tp);

/// The default global batch for a model, sequences: GPT-3's batch for the largest of its models
/// no larger than this one (Brown et al. 2020, Table 2.1: 0.5M tokens below 1.3B parameters, 1M
/// to 2.7B, 2M to 13B, 3.2M at 175B; as sequences of 2048 tokens 256, 512, 1024 and 1536, the
/// last Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh --global-batch-size), in
/// sequences of seq_len tokens, rounded up to a multiple of gpus x micro_batch_size so that every
/// dp divides it.
int default_global_batch(const GptConfig& model, int seq_len, int gpus, int micro_batch_size);

/// The largest GPU count, micro-batch size and global batch (sequences) a plan takes
/// (validate_plan_request).
inline constexpr int kMaxPlanGpus = 1 << 20, kMaxPlanMicroBatchSize = 1 << 16, kMaxPlanGlobalBatch = 1 << 20;

/// Refuses, with an InputError naming the value, a request no layout can satisfy: gpus < 1, a
/// batch or sequence size < 1 or seq_len > T; sizes past what any model trains (gpus over 2^20,
/// micro-batch size over 2^16, global batch over 2^20 sequences, L over 4096, C over 2^17, V over
/// 2^24: the plan's time grows with them and 12 L C^2 must fit int64), a fixed tp / pp / dp < 1 or not dividing gpus
/// (nor their product), a zero stage outside 0-3, a zero stage >= 1 where every layout has dp 1
/// (--dp 1, or the fixed tp x pp equal to gpus: "--zero-stage 3 needs dp > 1 (ZeRO shards over
/// the DP ranks): --tp 8 on --gpus 8 leaves dp 1"), an MoE model (the step-time model is dense
/// only), an invalid GptConfig.
void validate_plan_request(const PlanRequest& r);

/// Why plan_layouts(r) has no candidate at all (r passed validate_plan_request), naming the
/// fixed value no layout meets: "--tp 8 does not divide the model's 20 heads", "--pp 4 does not
/// divide the model's 6 layers", or what a fixed --dp leaves ("--tp 2 x --dp 2 on --gpus 8
/// leaves pp = 2, which does not divide the model's 3 layers"). Pure.
std::string no_layout_reason(const PlanRequest& r);

/// The layers of each of pp stages when pp does not divide L: every stage ceil(L / pp) layers,
/// less one layer from the stages at the ends, first and last alternately inwards, until they
/// sum to L; empty (the even split) when pp divides L. For Llama 3 405B's 126 layers on 16
/// stages: 7, 8 x 14, 7, Meta's split (Dubey et al. 2024 Sec. 3.3.2: one layer removed from the
/// first and the last stage, which hold the embedding and the head and loss). Errors: InputError
/// for pp < 1 or pp > L.
std::vector<int> ends_light_split(int L, int pp);

/// Every candidate of `r` on `hw`: each tp dividing N and NH (for Llama also passing
/// llama_tp_refusal), cp dividing N / tp (Llama: each with 2 cp dividing the sequence; GPT-2:
/// 1, or the fixed --cp), pp dividing N / (tp cp) and at most L (where it does not divide L, Llama
/// split by ends_light_split, GPT-2 by balanced_split), dp = N / (tp cp pp) (the fixed ones only
/// where given); ZeRO 0-3 (1-3 only at dp cp > 1), recompute none / selective / full, sequence
/// parallelism off and (at tp > 1) on; each schedule of plan_schedule_choices (1F1B; at pp > 1
/// ZB-H1 and interleaved at each v that splits the layers evenly), the non-1F1B ones only where
/// 1F1B's candidate fits in memory (they hold at least its activations); no offload; r.overlap's
/// communication overlap (default none: the reference trainer's). Rejected: m = global_batch / (dp b) not an integer;
/// a layout validate_plan refuses; the busiest rank's bytes above device_memory_bytes. The
/// memory plan runs before the step-time model, so a layout that does not fit is never priced
/// (the plan's pruning). Sorted feasible first by step time, then
/// the rejected by device bytes. Assumptions (docs/plan.md): the memory is the reference
/// trainer's plan (no framework or NCCL buffers, no fragmentation), the step overlaps only what
/// r.overlap says, TP groups stay inside a node when tp <= ranks_per_node.
/// Errors: validate_plan_request's InputError; predict_step's when the hardware lacks a rate.
std::vector<PlanCandidate> plan_layouts(const PlanRequest& r, const PlannerHardware& hw);

}  // namespace dtb
