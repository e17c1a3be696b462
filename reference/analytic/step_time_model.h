// The step-time model: one training step's time for a layout of a dense GPT, composed from a
// hardware description (GEMM rate, memory-bound ops' alpha-beta, each collective's alpha-beta
// per group size and link class, the pipeline's point-to-point alpha-beta) — measured on the
// machine at hand (suites/step_time_calibration.h) or written from published figures. Not here:
// measuring, memory (reference/analytic/memory_model.h), MoE layers. Both families: GPT-2 and
// Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU, untied head). Equations and sources:
// docs/plan.md.
// Legend: b sequences per micro-batch, s tokens per sequence, cp context-parallel ranks,
// sl = s / cp a CP rank's tokens, N = b sl rows, C channels, NH heads, KV key/value heads,
// hs = C / NH, F SwiGLU's width, V vocabulary, t = tp, p = pp, v virtual stages, m
// micro-batches, d = dp, g a group's ranks.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/model/gpt.h"
#include "reference/analytic/gemm_model.h"
#include "reference/analytic/memory_model.h"
#include "reference/analytic/stack_profile.h"
#include "reference/layout/process_grid.h"
#include "reference/zero/zero_config.h"

namespace dtb {

/// A cost linear in a size: alpha_s + size / per_s (Hockney's alpha-beta; per_s the bandwidth,
/// bytes/s, or a rate, FLOP/s). per_s <= 0 means the size costs nothing.
struct AlphaBeta {
  double alpha_s = 0;
  double per_s = 0;
  double time(double size) const { return alpha_s + (per_s > 0 ? size / per_s : 0.0); }
};

enum class LinkClass { intra_node, inter_node };

/// One collective fit: the all-reduce over groups of `group` ranks on `link`, in nccl-tests'
/// bus-bandwidth form: t(n bytes) = alpha_s + busbytes / per_s with busbytes = 2 (g-1)/g n
/// for an all-reduce and (g-1)/g n for a reduce-scatter or all-gather of n bytes in total
/// (nccl-tests doc/PERFORMANCE.md; a ring all-reduce is a reduce-scatter then an all-gather,
/// so the two halves share the all-reduce's latency and bus bandwidth).
struct CollectiveFit {
  int group = 2;
  LinkClass link = LinkClass::intra_node;
  AlphaBeta bus;
};

/// One protocol of NCCL's ring latency model (NVIDIA/nccl src/graph/tuning.cc,
/// ncclTopoTuneModel): an all-gather or reduce-scatter, which NCCL runs only as a ring, of g
/// ranks over n nodes takes base_s + (g - n) intra_step_s + (n - 1) inter_step_s (its g - 1 ring
/// steps, n - 1 of them crossing a node boundary) plus its bus bytes at busbw_fraction of the
/// link's bus bandwidth. Where the ring spans nodes NCCL prices some protocols differently (LL:
/// its intra-node step x 1.8, a quarter of the bandwidth instead of a third): the *_multi_node
/// figures, equal to the others when it does not. NCCL picks the fastest protocol per call (LL,
/// LL128, Simple); collective_seconds does too. Seconds; fractions in (0, 1].
struct RingProtocol {
  std::string name;
  double base_s = 0, intra_step_s = 0, inter_step_s = 0;
  double busbw_fraction = 1;  // of the CollectiveFit's bus bandwidth
  double intra_step_multi_node_s = 0, busbw_fraction_multi_node = 1;
};

/// The hardware as the model sees it. A plain struct: filled by a calibration run
/// (calibrate_step_time_hardware) or from a hardware file. Units: seconds, bytes, FLOP.
struct StepTimeHardware {
  /// GEMM: alpha_s a call's fixed cost, per_s its rate in FLOP/s, per precision
  /// (index int(Precision): fp32, bf16, fp16).
  std::array<AlphaBeta, 3> gemm{};
  /// Attention's core (QK^T, softmax, AV) the same way, FLOP/s.
  std::array<AlphaBeta, 3> attention{};
  /// A memory-bound op (LayerNorm, GELU, residual, embedding, loss, AdamW): alpha_s per call,
  /// per_s the bytes it reads and writes per second.
  AlphaBeta memory{};
  /// All-reduce fits, one per (group size, link class); lookups take the fit of the same link
  /// and the nearest group size at or above the one asked (the largest when none is).
  std::vector<CollectiveFit> collectives{};
  /// All-gathers and reduce-scatters priced by NCCL's ring latency model (RingProtocol), the
  /// fit's bus bandwidth kept and its alpha_s unused: their latency grows with the ranks and nodes
  /// of the ring, where an all-reduce's (a tree across nodes) grows with their log. Empty: they
  /// take the all-reduce fit's alpha_s, as a calibrated CPU machine measures them.
  std::vector<RingProtocol> ring_protocols{};
  AlphaBeta p2p_intra{}, p2p_inter{};  // a send/receive pair of n bytes: alpha_s + n / per_s
  AlphaBeta host_link{};  // a device-to-host or host-to-device copy of n bytes (ZeRO-Offload)
  /// The trainer's pass over the gradient on the host, n elements a second (per_s): the global
  /// norm's sum of squares (and under fp16 loss scaling the inf/NaN scan), after the held
  /// gradient is copied down over host_link (reference/zero/zero.h ZeroEngine::owned_grad_sq_norm).
  /// per_s 0: a trainer that reduces on the device, which the published hardware files assume.
  AlphaBeta host_pass{};
  int ranks_per_node = 0;               // consecutive ranks per node; 0: every rank on one node
  /// Ranks sharing one core: > 1 when a CPU machine runs more ranks than it has cores. Every
  /// time above is then measured with all ranks busy at once (the shared rate); a rank that
  /// waits yields its core (Open MPI's yield_when_idle, on when oversubscribed), so the others
  /// run faster meanwhile and a pipeline's bubble is filled with other ranks' work. 1 for
  /// devices, one rank each.
  double ranks_per_core = 1;
  /// Measured seconds of op instances by key (StepOp::key): where present they replace the
  /// rate formula (the machine at hand, timed at the layout's own shapes).
  std::map<std::string, double> op_seconds{};
  /// The ops run one after another (as a step runs them) over the sum of their own loops' times,
  /// at least 1: what a step's op-to-op switches cost beyond each op timed alone. A calibration
  /// has already multiplied op_seconds and the rates above by it; kept to be reported.
  double op_sequence_factor = 1;
  /// A GPU's GEMM and fused-attention shape model (gemm_model.h), from a hardware file that gives
  /// its figures: where present it prices GEMMs (and fused attention) by their shapes instead of
  /// the flat rates above; op_seconds still come first. Absent for a calibrated CPU machine.
  std::optional<GemmShapeModel> shape{};
};

/// What one step trains: the model, the layout (tp, cp, pp, dp, sp, schedule, virtual stages,
/// pipeline_layers; its micro_batches are ignored; cp_comm_type is priced as "p2p"), the batch, ZeRO (stage, offload, overlap), recompute,
/// precision, and which communication overlaps compute (StepOverlap: all off by default, as the
/// reference trainer runs; reference/analytic/stack_profile.h).
struct StepTimeInput {
  GptConfig model{};
  ParallelLayout layout{};
  int global_batch = 8;   // sequences per step over all DP ranks
  int micro_batches = 1;  // m, per DP rank
  int seq_len = 64;       // s
  ZeroConfig zero{};
  Recompute recompute = Recompute::none;
  Precision precision = Precision::fp32;
  StepOverlap overlap{};
  /// Attention's core: materialized prices the full square (4 b s^2 C/t forward) at the flat
  /// rate; fused, with a shape model, the causal fused kernel (fused_attention_seconds); without
  /// one, fused is priced as materialized (the op's shapes and keys are the same).
  AttentionKernel attention = AttentionKernel::materialized;
  /// The attention and hidden dropout rate the stack trains with (StackProfile::dropout; 0: none,
  /// as dtbench's reference trainer). Its time does not depend on the rate: > 0 adds the masks'
  /// passes (attention_dropout and dropout ops in stage_ops).
  double dropout = 0;
  /// Half-precision gradients accumulated into an fp32 main_grad buffer by a pass after each
  /// micro-batch's backward (StackProfile::main_grad_accumulation; false: the reference trainer and
  /// stacks that fuse it into the wgrad GEMM, Megatron-Core's --gradient-accumulation-fusion).
  bool main_grad_accumulation = false;
};

/// One compute op instance of a stage's micro-batch: its family, name and integer shape (what
/// a calibration needs to run it), the FLOPs (GEMMs, attention) or bytes (memory-bound ops) the
/// rate formula charges, and how many times it runs per micro-batch. key() names the shape.
struct StepOp {
  enum class Kind { gemm, attention, memory } kind = Kind::memory;
  std::string name;             // matmul_forward, attention_backward, layernorm_forward, ...
  std::array<int64_t, 4> dims{};  // the op's arguments in kernels/ops.h order (N, C, OC; B, T, C, NH; n)
  double flops = 0, bytes = 0;
  int count = 1;
  std::string key(Precision p) const;
};

/// The forward ops (forward = true) or backward ops of one micro-batch through virtual stage
/// `vs` (0..p v - 1) on one rank: its layers' ops at the TP shard's shapes (Megatron-LM's
/// column/row-parallel split of QKV, projection, FC1, FC2 and the vocabulary; for Llama
/// RMSNorm, qkv at the GQA width (NH/t + 2 max(1, KV/t)) hs, RoPE, gate and up in one
/// column-parallel GEMM of 2 F/t rows, SwiGLU, down row-parallel, no biases) on the CP rank's
/// N = b s/cp rows, attention's core at 1/cp of the full-square 4 b s^2 C/t FLOPs, the
/// embedding on virtual stage 0, the final norm, LM head and loss on the last. The backward includes
/// the forward again under full recompute and attention's forward under selective recompute.
/// Errors: InputError as validate_step_time_input.
std::vector<StepOp> stage_ops(const StepTimeInput& in, int vs, bool forward);

/// Every op a step of `in` runs (all stages, both passes, the optimizer), each shape once:
/// what a calibration times. Errors: as stage_ops.
std::vector<StepOp> step_ops(const StepTimeInput& in);

/// The terms of one step's predicted time, seconds. Per micro-batch terms are the busiest
/// virtual stage's; the step is pipeline_s + dp_exposed_s + optimizer_s + offload_s + scalars_s.
struct StepTimeTerms {
  double forward_compute_s = 0;   // per micro-batch, busiest stage: its forward ops
  double backward_compute_s = 0;  // per micro-batch, busiest stage: backward ops (+ recompute)
  double tp_comm_s = 0;           // per micro-batch, busiest stage: TP/SP collectives, both passes
  double cp_comm_s = 0;           // per micro-batch, busiest stage: CP ring sends not hidden under attention, both passes
  double p2p_s = 0;               // per micro-batch: one activation send/receive between stages
  double zero_mb_comm_s = 0;      // per micro-batch, busiest stage: ZeRO-3 gathers, ZeRO-2/3 reduce-scatters
  double pipeline_s = 0;          // the schedule's makespan of m micro-batches (simulate_pipeline)
  double bubble = 0;              // the simulated bubble fraction of pipeline_s
  double dp_comm_s = 0;           // the step's DP gradient reduction and parameter gather
  double dp_exposed_s = 0;        // the part of dp_comm_s not hidden under the backward
  double optimizer_s = 0;         // AdamW over the rank's share, zeroing the gradients, the norm's host pass
  double offload_s = 0;           // gradients to the host and parameters back (ZeRO-Offload)
  double scalars_s = 0;           // the step's scalar all-reduces over the world (loss, inf, norm)
  double step_s = 0;              // the sum above
};

/// Refuses, with an InputError naming the value, what the model does not cover: an MoE model,
/// sizes < 1, a batch that the layout does not divide (global_batch % (dp m), L % (p v) unless
/// pipeline_layers gives p v entries), heads or channels not divisible by tp, a Llama tp that
/// llama_tp_refusal refuses, a seq_len that 2 cp does not divide (cp > 1).
void validate_step_time_input(const StepTimeInput& in);

/// The predicted step time of `in` on `hw`, by term (docs/plan.md): each stage's per-micro-batch
/// forward and backward (its ops, from hw.op_seconds or the rate formulas, plus its TP
/// collectives, the CP ring's exposed part, point-to-point sends and ZeRO-3 gathers) run
/// through simulate_pipeline under the layout's schedule; then the gradient reduction over the
/// dp cp ranks (exposed), the optimizer, offload's transfers and the step's scalar reductions. Errors: InputError from validate_step_time_input, or when
/// `hw` lacks a rate the input needs (a GEMM rate <= 0 for its precision with no measured time,
/// no collective fit for a group > 1).
StepTimeTerms predict_step(const StepTimeInput& in, const StepTimeHardware& hw);

/// Seconds of `ops` on `hw` at precision `p` (each op's measured time or its rate formula, times
/// its count), the sum predict_step charges for a stage's pass. Errors: InputError when hw lacks a
/// rate an op needs (as predict_step). `a` prices attention's core (StepTimeInput::attention).
double ops_seconds(const std::vector<StepOp>& ops, const StepTimeHardware& hw, Precision p,
                   AttentionKernel a = AttentionKernel::materialized);

/// Seconds of the weight-gradient half of `backward_ops`' GEMMs: each matmul_backward does
/// 4 N C OC FLOPs, 2 N C OC of them dW = dY^T X (Megatron-LM's LinearWithGradAccumulation, the
/// W pass of Qi et al. 2024 Sec. 2), priced at half its time, or with hw.shape (and no measured
/// time) as the wgrad GEMM (C x N)(N x OC) at its own shape. What a zero-bubble schedule
/// defers as W (StageCost::weight). Errors: as ops_seconds.
double weight_grad_seconds(const std::vector<StepOp>& backward_ops, const StepTimeHardware& hw, Precision p);

/// Seconds of an all-reduce (or, with `half`, a reduce-scatter or all-gather) of `bytes` in
/// total over `group` ranks on `link` spanning `nodes` nodes, from hw's fits (CollectiveFit);
/// with `half` and hw.ring_protocols, the fastest protocol of NCCL's ring model (RingProtocol)
/// at the fit's bus bandwidth. 0 for group 1. Errors: InputError when hw has no fit of that link
/// class. `nodes` is clamped to [1, group].
double collective_seconds(const StepTimeHardware& hw, int group, LinkClass link, double bytes, bool half, int nodes);

/// The link a group of ranks spanning `span_ranks` consecutive ranks crosses: inter_node when
/// that is more than a node (ranks_per_node > 0), else intra_node.
LinkClass link_of(const StepTimeHardware& hw, int span_ranks);

/// The nodes that `group` ranks `stride` apart span: ceil((stride (group - 1) + 1) / ranks_per_node),
/// at most `group` (1 when ranks_per_node is 0: one node), the group starting on a node's first
/// rank (ranks placed consecutively ranks_per_node to a node, as link_of assumes). A TP group's
/// stride is 1, the data-and-context group's tp.
int group_nodes(const StepTimeHardware& hw, int group, int stride);

}  // namespace dtb
