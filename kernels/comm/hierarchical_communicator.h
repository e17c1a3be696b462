// HierarchicalCommunicator: a group's all-reduce in two levels — inside each node, then across
// nodes — as Horovod's hierarchical allreduce and NCCL's tree / "2D" algorithms do; every other
// operation forwards to the wrapped group. With it, the bytes each operation sends over the links
// between nodes (the ring model below: cross_node_bytes_*). Not a backend: it composes the wrapped
// communicator's own operations and its split().
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"

namespace dtb {

/// The all-reduce of a group whose ranks sit on nodes, in three stages (Horovod's
/// NCCLHierarchicalAllreduce, horovod/common/ops/nccl_operations.cc; Jia et al. 2018, "Highly
/// scalable deep learning training system with mixed-precision", section 3.3; NCCL's 2D
/// hierarchical algorithm): with L ranks per node and N nodes,
///   1. reduce_scatter inside the node: local rank j holds the node's sum of shard j (S / L);
///   2. all_reduce across nodes among the N ranks with local index j, each on its shard;
///   3. all_gather inside the node: every rank holds the whole sum.
/// Only stage 2 crosses nodes, and it moves S / L per rank instead of S. A count not divisible
/// by L: the first floor(count / L) * L elements as above, the last count mod L (< L) elements
/// as Horovod does its remainder: all_reduce inside the node, all_reduce across nodes by local
/// rank 0 alone, broadcast inside the node from it — no padded copy, since a Communicator has no
/// allocator or device-to-device copy of its own. Results equal the flat all_reduce's wherever
/// every summation order gives the same value (small integers: bitwise); otherwise only the
/// summation order differs (half types round at each step of each stage, as the backend does).
/// Sum, max and min, every dtype, in place (send == recv) and out of place.
///
/// Nodes: ranks of the group with equal `node_id` form a node; every node must hold the same
/// number of the group's ranks. Local index = position among the node's ranks in group order;
/// the cross-node groups list the nodes in the order of their lowest group rank. Sub-groups come
/// from inner.split() (so a wrapper underneath, e.g. one that slows a link, stays in the path).
///
/// all_reduce_async runs the blocking form and returns a CompletedHandle (three dependent
/// stages; a backend's handle covers one call). Collective over `inner`, whose lifetime must
/// exceed this one's. Errors: construction throws AgreedInputError (every rank sees the same
/// gathered ids) naming the group when a node_id is negative or the nodes hold different
/// numbers of ranks; the wrapped operations' errors otherwise.
class HierarchicalCommunicator final : public ForwardingCommunicator {
 public:
  HierarchicalCommunicator(Communicator& inner, int node_id);
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  std::unique_ptr<CommHandle> all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                               ReduceOp op) override;
  int nodes() const { return nodes_; }
  int ranks_per_node() const { return local_size_; }
  int local_rank() const { return local_rank_; }

 private:
  int nodes_ = 1, local_size_ = 1, local_rank_ = 0;
  std::unique_ptr<Communicator> intra_, inter_;
};

/// The node of each of `ranks` ranks when nodes are blocks of `ranks_per_node` consecutive ranks
/// (rank / ranks_per_node: a launcher's block placement, and `--ranks-per-node`'s emulation).
std::vector<int> consecutive_nodes(int ranks, int ranks_per_node);

/// Bytes sent over links between nodes, per operation, leaving the busiest node, under the ring
/// model of nccl-tests' doc/PERFORMANCE.md: a ring all-reduce over g ranks sends
/// 2(g-1)/g * S bytes from each rank to the next (reduce-scatter then all-gather, each
/// (g-1)/g * S); a link counts when its two ends are on different nodes. `node_of[r]` is group
/// rank r's node (the ring in group-rank order), S = count * type_size.
/// Flat: one ring over all g ranks; a node sends 2(g-1)/g * S over each of its ring links that
/// leave it (one per node for consecutive nodes, N >= 2: 2(g-1)/g * S).
double cross_node_bytes_flat(const std::vector<int>& node_of, size_t count, size_t type_size);
/// Hierarchical (HierarchicalCommunicator): stages 1 and 3 stay inside nodes; stage 2 is one ring
/// per local index j over the N ranks with that index, each on shard = floor(count / L)
/// elements, and the remainder count mod L on local index 0's ring. A ring of N ranks sends
/// 2(N-1)/N * shard * type_size per rank. For consecutive nodes every node sends
/// 2(N-1)/N * S in all (L rings of S / L), against the flat ring's 2(g-1)/g * S. Aborts when the
/// nodes hold different numbers of ranks.
double cross_node_bytes_hierarchical(const std::vector<int>& node_of, size_t count, size_t type_size);

}  // namespace dtb
