// The process grid: rank <-> (tp, dp, pp) coordinates in Megatron-LM's order "tp-dp-pp"
// (TP fastest, then DP, then PP), so a TP group holds consecutive ranks and sits inside a
// node; and the checks that refuse a layout that cannot work before any rank computes.
// Pure arithmetic: the harness builds one Communicator per group from these rank lists.
//
// Worked example (Megatron's parallel_state docstring): 16 ranks, tp 2, pp 4, so dp 2.
//   TP groups [0,1] [2,3] ... [14,15]; DP groups [0,2] [1,3] [4,6] ... [13,15];
//   PP groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "reference/gpt.h"

namespace dtb {

/// A training layout: the three parallel sizes (tp * dp * pp = world size), the
/// micro-batches per step and DP rank, and the pipeline schedule ("gpipe", "1f1b",
/// "interleaved") with its model chunks per rank (virtual_stages, interleaved only).
struct ParallelLayout {
  int tp = 1, dp = 1, pp = 1;
  int micro_batches = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  /// tp * dp * pp, in 64 bits: sizes from a config can overflow an int.
  int64_t world() const { return int64_t(tp) * dp * pp; }
};

/// A rank's place in the grid.
struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
  bool operator==(const GridCoord&) const = default;
};

/// rank -> coordinates: tp = rank % tp, dp = (rank / tp) % dp, pp = rank / (tp dp).
/// Aborts for a rank outside [0, world).
GridCoord grid_coord(int rank, const ParallelLayout& layout);
/// coordinates -> rank = tp + tp_size (dp + dp_size pp). Aborts for coordinates out of range.
int grid_rank(const GridCoord& c, const ParallelLayout& layout);

/// The ranks of `rank`'s group along one dimension, in coordinate order (the group's own
/// rank order): TP varies tp, DP varies dp, PP varies pp, the other coordinates fixed.
std::vector<int> tp_group(int rank, const ParallelLayout& layout);
std::vector<int> dp_group(int rank, const ParallelLayout& layout);
std::vector<int> pp_group(int rank, const ParallelLayout& layout);

/// Refuses, with an InputError naming the numbers, a layout that cannot train `model` on
/// `world_size` ranks with `global_batch` sequences per step: sizes below 1; tp * dp * pp
/// != world_size; heads (NH) or vocabulary (V) not divisible by tp; layers (L) not
/// divisible by pp * virtual_stages; global batch not divisible by dp * micro_batches; an
/// unknown schedule; virtual_stages != 1 outside "interleaved"; and for "interleaved",
/// virtual_stages < 2 or micro_batches not a multiple of pp (Narayanan et al. 2021, as
/// Megatron-LM requires).
void validate_layout(const ParallelLayout& layout, const GptConfig& model, int global_batch, int world_size);

}  // namespace dtb
