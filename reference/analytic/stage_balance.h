// Stage balancing: which layers each pipeline stage holds, chosen from measured per-part
// compute times so that the slowest stage is as fast as it can be. The first stage also
// carries the embedding and the last the LM head and the loss, so an even split of the layers
// leaves those two stages slower (the article dtbench is built from [docs/claims.md#the-article], §5.3: per-stage compute
// monitored and layers moved between stages; Megatron-LM's --decoder-first/last-pipeline-
// num-layers and DeepSpeed's partition_method set such splits by hand or by parameter count).
#pragma once
#include <vector>

#include "reference/parallel/pipeline_schedule.h"

namespace dtb {

/// Per-micro-batch compute seconds of each part of the model, by pass: the embedding (part 0),
/// layers 0..L-1 (parts 1..L) and the head (part L + 1), each with its forward, its whole
/// backward and the part of that backward a zero-bubble schedule runs as W. From
/// PartTimes (reference/parallel/parallel_gpt.h) divided by the micro-batches timed.
struct PartCosts {
  std::vector<double> forward, backward, weight;  // L + 2 entries each
  int layers() const { return int(forward.size()) - 2; }
  double total(int part) const { return forward[size_t(part)] + backward[size_t(part)]; }
};

/// The split (p entries, each >= 1, summing to L) of layers 0..L-1 into p consecutive stages
/// that minimises the largest stage cost forward + backward, stage 0's including the embedding
/// and stage p - 1's the head: the bottleneck that sets a 1F1B step (m + p - 1 of its F + B).
/// Exact: dynamic programming over the cut points, O(p L^2); among equal optima the one whose
/// earlier stages hold fewer layers. Errors: InputError for p < 1, p > L, or costs that are
/// not three lists of L + 2 finite values >= 0 (L >= 1).
std::vector<int> balance_stages(const PartCosts& costs, int p);

/// Each stage's StageCost (forward, backward, weight: its parts' sums) under the split `layers`
/// (p entries summing to L), for simulate_pipeline. Errors: InputError for a split that does not
/// sum to L or has an entry below 1.
std::vector<StageCost> stage_costs(const PartCosts& costs, const std::vector<int>& layers);

}  // namespace dtb
