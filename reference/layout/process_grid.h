// The process grid: rank <-> (tp, cp, dp, pp) coordinates in Megatron-Core's default order
// "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py, initialize_model_parallel's `order`; EP
// is carved out of DP here): TP fastest, then CP, then DP, then PP, so a TP group holds
// consecutive ranks and sits inside a node, and with cp = 1 every rank keeps its "tp-dp-pp"
// place; and the checks that refuse a layout that cannot work before any rank computes.
// The arithmetic is pure; make_parallel_groups splits a communicator into the groups.
//
// Worked example (Megatron's parallel_state docstring): 16 ranks, tp 2, pp 4, so dp 2.
//   TP groups [0,1] [2,3] ... [14,15]; DP groups [0,2] [1,3] [4,6] ... [13,15];
//   PP groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15].
// With context parallelism, 8 ranks, tp 2, cp 2, dp 2: TP groups [0,1] [2,3] [4,5] [6,7];
//   CP groups [0,2] [1,3] [4,6] [5,7]; DP groups [0,4] [1,5] [2,6] [3,7]; the data-and-context
//   groups (gradient reduction and ZeRO) [0,2,4,6] [1,3,5,7].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "kernels/comm/communicator.h"
#include "reference/model/gpt.h"

namespace dtb {

/// A training layout: the parallel sizes (tp * cp * dp * pp = world size), the
/// micro-batches per step and DP rank, and the pipeline schedule ("gpipe", "1f1b",
/// "interleaved", "zb-h1": reference/parallel/pipeline_schedule.h) with its model chunks per rank
/// (virtual_stages, interleaved only).
/// Expert parallelism (an MoE model only) is carved out of DP, as Megatron-LM's
/// --expert-model-parallel-size: ep divides dp, the ep consecutive DP ranks dp / ep = g form
/// expert-parallel group g (each holds E / ep of every MoE layer's experts: ep rank dp % ep),
/// and the dp / ep ranks with the same ep rank form an expert-data-parallel group, over which
/// the experts' gradients are reduced (every other parameter's over the whole DP group).
///
/// Sequence parallelism (Korthikanti et al. 2022 Sec. 4.2.2, Megatron-LM's
/// --sequence-parallel) is an option of TP: the LayerNorm and residual regions hold B Tn / tp
/// of a micro-batch's B Tn tokens per TP rank (block r of the tokens in (B, Tn) order: a
/// block of each sequence when B = 1, as Megatron splits the s of its [s, b, h] layout;
/// every op there is row-wise, so which rows a rank holds changes no value), and TP's
/// all-reduces become all-gathers and reduce-scatters (reference/parallel/tensor_parallel.h).
///
/// Context parallelism (Megatron-Core's --context-parallel-size and --cp-comm-type;
/// docs/context-parallel.md): every sequence's Tn tokens are cut into 2 cp chunks and CP rank r
/// holds chunks r and 2 cp - 1 - r (reference/parallel/context_parallel.h); attention meets the
/// other CP ranks' keys by a ring ("p2p") or an all-gather ("all_gather"). The CP ranks hold the
/// same parameters and partial gradients: gradients are reduced, and ZeRO shards, over the
/// data-and-context group of dp * cp ranks (Megatron's data-parallel-with-context-parallel group).
/// Under sequence parallelism SP's token blocks are blocks of a CP rank's own rows.
struct ParallelLayout {
  int tp = 1, dp = 1, pp = 1;
  int cp = 1;                           // context_parallel
  std::string cp_comm_type = "p2p";     // "p2p" or "all_gather" (context_parallel.h CpCommType)
  int ep = 1;  // expert_parallel
  bool sequence_parallel = false;
  int micro_batches = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  /// Layers per virtual stage (pp * virtual_stages entries, virtual-stage order, each >= 1,
  /// summing to the model's L), or empty for the even split L / (pp v). An uneven split
  /// balances stages whose extra work is not a layer: the first stage's embedding, the last
  /// stage's LM head and loss (Megatron-LM's --decoder-first/last-pipeline-num-layers and
  /// DeepSpeed's partition_method give the same freedom). stage_layers() reads it.
  std::vector<int> pipeline_layers{};
  /// tp * cp * dp * pp, in 64 bits: sizes from a config can overflow an int.
  int64_t world() const { return int64_t(tp) * cp * dp * pp; }
};

/// Layers of each virtual stage (pp * virtual_stages entries): layout.pipeline_layers, or L /
/// (pp v) each when it is empty. No validation (validate_layout refuses a split that does not
/// sum to L).
std::vector<int> stage_layers(const ParallelLayout& layout, int L);
/// The first global layer of virtual stage `vs` (0 <= vs <= pp v; pp v gives L): the sum of
/// stage_layers over the stages before it. Aborts for vs out of that range.
int stage_first_layer(const ParallelLayout& layout, int L, int vs);
/// Refuses, with an InputError naming the split, a `layers` that is not one entry >= 1 per each
/// of `nv` virtual stages summing to L (an empty split is the even one: not checked here).
void check_pipeline_layers(const std::vector<int>& layers, int64_t nv, int64_t L, const std::string& where);
/// A split written "3+1+2+2" (layout specs and record names; "even" for the empty split, which
/// parse_pipeline_layers does not take), and back. Errors: InputError naming the text when it is
/// not '+'-joined integers in [1, kMaxStageLayers].
std::string pipeline_layers_text(const std::vector<int>& layers);
std::vector<int> parse_pipeline_layers(const std::string& text);
/// The most layers one virtual stage may be given in a config or a manifest.
inline constexpr int kMaxStageLayers = 4096;

/// A rank's place in the grid.
struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
  int cp = 0;
  bool operator==(const GridCoord&) const = default;
};

/// A DP rank's expert-parallel rank (which E / ep experts it holds) and its rank in its
/// expert-data-parallel group.
inline int ep_rank(int dp_rank, const ParallelLayout& l) { return dp_rank % l.ep; }
inline int expert_dp_rank(int dp_rank, const ParallelLayout& l) { return dp_rank / l.ep; }

/// rank -> coordinates: tp = rank % tp, cp = (rank / tp) % cp, dp = (rank / (tp cp)) % dp,
/// pp = rank / (tp cp dp). Aborts for a rank outside [0, world).
GridCoord grid_coord(int rank, const ParallelLayout& layout);
/// coordinates -> rank = tp + tp_size (cp + cp_size (dp + dp_size pp)). Aborts for coordinates
/// out of range.
int grid_rank(const GridCoord& c, const ParallelLayout& layout);

/// The ranks of `rank`'s group along one dimension, in coordinate order (the group's own
/// rank order): TP varies tp, DP varies dp, PP varies pp, the other coordinates fixed.
std::vector<int> tp_group(int rank, const ParallelLayout& layout);
std::vector<int> dp_group(int rank, const ParallelLayout& layout);
std::vector<int> pp_group(int rank, const ParallelLayout& layout);
/// The CP group (cp varies), and the data-and-context group (cp and dp vary, in rank order: cp
/// fastest), over which gradients are reduced and ZeRO shards (Megatron's
/// data-parallel-with-context-parallel group; the DP group when cp = 1).
std::vector<int> cp_group(int rank, const ParallelLayout& layout);
std::vector<int> dp_cp_group(int rank, const ParallelLayout& layout);
/// The expert-parallel group (the ep DP ranks with the same dp / ep) and the
/// expert-data-parallel group (the dp / ep DP ranks with the same dp % ep), in their rank order.
std::vector<int> ep_group(int rank, const ParallelLayout& layout);
std::vector<int> expert_dp_group(int rank, const ParallelLayout& layout);

/// The communicators of one rank's groups TP, DP and PP
/// groups, each in its coordinate order, and the whole world. Not owned.
struct ParallelGroups {
  Communicator& world;
  Communicator& tp;
  Communicator& dp;
  Communicator& pp;
  /// The PP group again, for the backward direction's messages (activation gradients), or
  /// null to use `pp` for both. NCCL runs a communicator's sends and receives in issue order
  /// on one stream, so with one communicator a 1F1B rank's queued forward send could wait
  /// behind a backward receive and deadlock; one communicator per direction keeps each
  /// direction's messages in order and the two independent (MPI needs neither).
  Communicator* pp_backward = nullptr;
  /// The expert-parallel and expert-data-parallel groups (layout.ep > 1), or null: with
  /// ep = 1 every rank holds all experts and they reduce over `dp`.
  Communicator* ep = nullptr;
  Communicator* expert_dp = nullptr;
  /// The CP group (layout.cp > 1), or null.
  Communicator* cp = nullptr;
};

/// The groups of one rank, owned: what make_parallel_groups splits.
struct OwnedGroups {
  std::unique_ptr<Communicator> tp, dp, pp, pp_backward, ep, expert_dp;
  /// layout.cp > 1: the CP group and the data-and-context group (dp_cp_group); null otherwise.
  std::unique_ptr<Communicator> cp, dp_cp;
};
/// Builds this rank's TP, DP and PP groups (and the PP group again for the backward
/// direction; with layout.ep > 1 the expert-parallel and expert-data-parallel groups, null
/// otherwise) by splitting `world` for `layout`: colour = the coordinates that stay fixed,
/// key = the one that varies, so each group's rank order is its coordinate order (the lists
/// of tp_group / dp_group / pp_group). Collective over `world`; `world.size()` must be
/// layout.world() (validate_layout).
OwnedGroups make_parallel_groups(Communicator& world, const ParallelLayout& layout);

/// Refuses, with an InputError naming the numbers, a layout that cannot train `model` on
/// `world_size` ranks with `global_batch` sequences per step: sizes below 1; tp * dp * pp
/// != world_size; heads (NH) or vocabulary (V) not divisible by tp; layers (L) not
/// divisible by pp * virtual_stages (an even split: pipeline_layers empty); global batch not divisible by dp * micro_batches; an
/// unknown schedule; context_parallel below 1, a cp_comm_type other than "p2p" or "all_gather",
/// or (seq_len > 0) a seq_len that 2 * context_parallel does not divide; virtual_stages != 1 outside "interleaved"; pipeline_layers (when given)
/// without pp * virtual_stages entries, an entry below 1, or a sum other than L; and for "interleaved",
/// virtual_stages < 2 or micro_batches not a multiple of pp (Narayanan et al. 2021, as
/// Megatron-LM requires); expert_parallel below 1, above 1 on a dense model, not dividing dp
/// or the experts (num_experts); sequence_parallel with tensor_parallel 1, with an MoE model, or
/// (seq_len > 0: the tokens per sequence trained) with a micro-batch's B seq_len / cp tokens (a CP
/// rank's) not divisible by tensor_parallel; schedule zb-h1 with an MoE model or sequence_parallel.
void validate_layout(const ParallelLayout& layout, const GptConfig& model, int global_batch, int world_size,
                     int seq_len = 0);

}  // namespace dtb
