// Slow links between nodes, emulated in time: a communicator whose collectives that cross
// nodes take at least as long as they would over links of a given bandwidth and latency.
// What the comm_efficiency suite (suites/comm_efficiency.cc) trains over, so that the cost of
// crossing nodes — a cluster's inter-node network, or links between regions — shows on one
// machine, and one node's links can be made slower than the rest.
//
// The model (per-rank links, "rails": one NIC per GPU, as in DGX/HGX nodes): every rank has
// its own link out of its node. A collective over a group is taken to run as a ring over the
// group's ranks in rank order (nccl-tests' bus factors): in an all-reduce each rank sends
// 2(g-1)/g x S bytes to the next rank, in a reduce-scatter or an all-gather (g-1)/g x S (S the
// full buffer), in a broadcast S. A rank whose next rank sits on another node sends those
// bytes over its link; the operation then takes at least
//     latency + max over such ranks r of bytes(r) / bandwidth(node of r),
// counted from when this rank entered it. An operation inside one node is not slowed.
// Blocking operations return no earlier than that; a non-blocking one's handle completes no
// earlier (the transfer is in flight while the caller computes, as on a real link). The wait
// sleeps, leaving the core to other ranks, as a rank waiting on its network does.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"

namespace dtb {

/// The emulated links out of each node. Bandwidths in GB/s (1e9 bytes per second), the
/// latency in seconds. A bandwidth of 0 means unlimited (no wait for the bytes).
struct LinkModel {
  double gbps = 0;          // every node's links
  double latency_s = 0;     // added once per operation that crosses nodes
  int slow_node = -1;       // this node's links run at slow_gbps instead; -1: none
  double slow_gbps = 0;
  /// The bandwidth of `node`'s links, GB/s (0: unlimited).
  double node_gbps(int node) const { return node == slow_node ? slow_gbps : gbps; }
};

/// Bytes each rank of a ring over `nodes.size()` ranks (group rank order; nodes[i] the node
/// of group rank i) sends over its link out of its node, when every rank sends
/// `bytes_per_rank` to the next: bytes_per_rank where the next rank is on another node, 0
/// otherwise. One rank alone sends nothing.
std::vector<double> ring_cross_node_bytes(const std::vector<int>& nodes, double bytes_per_rank);

/// What the emulated links did on this rank, summed over a group and the groups split from it.
struct LinkStats {
  double wait_s = 0;      // seconds operations were held for the links beyond their own time
  double sent_bytes = 0;  // bytes this rank sent over its link out of its node
};

/// A group whose collectives crossing nodes are stretched to the emulated links' time (see
/// the file comment). `inner` is the group (it must outlive this one); `node` this rank's
/// node. Collective over `inner` (one all_gather of the node ids). Its split() groups carry
/// the same links (their node ids gathered likewise), so a hierarchical all-reduce built by
/// splitting it crosses the emulated links in its cross-node stage only.
/// Point-to-point and all-to-all operations are forwarded unchanged.
/// Errors: those of `inner`; a negative bandwidth or latency aborts (validate the config first).
class EmulatedLinkCommunicator : public ForwardingCommunicator {
 public:
  /// `stats` (shared with the groups split from this one) collects what the links did; null: a
  /// new one.
  EmulatedLinkCommunicator(Communicator& inner, int node, const LinkModel& link,
                           std::shared_ptr<LinkStats> stats = nullptr);
  /// Takes ownership of `inner` (a split's result).
  EmulatedLinkCommunicator(std::unique_ptr<Communicator> inner, int node, const LinkModel& link,
                           std::shared_ptr<LinkStats> stats = nullptr);

  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override;
  void all_gather(const void* s, void* r, size_t n, DType t) override;
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override;
  void broadcast(void* b, size_t n, DType t, int root) override;
  void broadcast(const void* s, void* r, size_t n, DType t, int root) override;
  std::unique_ptr<CommHandle> all_reduce_async(const void* s, void* r, size_t n, DType t, ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const void* s, void* r, size_t n, DType t) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const void* s, void* r, size_t n, DType t, ReduceOp op) override;
  std::unique_ptr<CommHandle> broadcast_async(void* b, size_t n, DType t, int root) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  /// The nodes of the group's ranks, in rank order.
  const std::vector<int>& nodes() const { return nodes_; }
  /// What the links did on this rank since construction, this group and its splits together.
  const LinkStats& stats() const { return *stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  // The earliest completion of an operation whose ring sends bytes_per_rank per rank, begun now.
  Clock::time_point deadline(double bytes_per_rank);
  void hold_until(Clock::time_point t);
  std::unique_ptr<Communicator> owned_;
  LinkModel link_;
  std::vector<int> nodes_;
  std::shared_ptr<LinkStats> stats_;
  friend class LinkHandle;
};

}  // namespace dtb
