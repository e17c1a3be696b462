// HierarchicalCommunicator and the cross-node byte counts (kernels/comm/hierarchical_communicator.h).
#include "kernels/comm/hierarchical_communicator.h"

#include <algorithm>
#include <map>

#include "kernels/agreed_error.h"
#include "kernels/comm/ring.h"
#include "kernels/error.h"

namespace dtb {

namespace {

/// Dense node indices in the order of each node's lowest rank, and each node's ranks in order.
struct NodeMap {
  std::vector<int> index_of;                 // per rank: its node's dense index
  std::vector<std::vector<int>> members;     // per node: its ranks, ascending
};

NodeMap map_nodes(const std::vector<int>& node_of) {
  NodeMap m;
  std::map<int, int> dense;
  for (int id : node_of) {
    auto [it, added] = dense.try_emplace(id, int(m.members.size()));
    if (added) m.members.emplace_back();
    m.index_of.push_back(it->second);
  }
  for (size_t r = 0; r < node_of.size(); ++r) m.members[size_t(m.index_of[r])].push_back(int(r));
  return m;
}

/// "" when every node holds the same number of ranks, else why not (the first two that differ).
std::string uneven(const NodeMap& m, const std::vector<int>& node_of) {
  for (const auto& mem : m.members)
    if (mem.size() != m.members[0].size())
      return "node " + std::to_string(node_of[size_t(m.members[0][0])]) + " holds " +
             std::to_string(m.members[0].size()) + " of the group's ranks, node " +
             std::to_string(node_of[size_t(mem[0])]) + " holds " + std::to_string(mem.size());
  return "";
}

/// Bytes a node sends over ring links that leave it, the busiest node's, for rings over
/// `rings` (each a list of group ranks in ring order) sending `per_rank` bytes each.
double busiest_node(const std::vector<int>& node_of, const std::vector<std::vector<int>>& rings,
                    const std::vector<double>& per_rank) {
  std::map<int, double> out;
  for (size_t k = 0; k < rings.size(); ++k) {
    const auto& ring = rings[k];
    for (size_t i = 0; i < ring.size(); ++i) {
      const int a = node_of[size_t(ring[i])], b = node_of[size_t(ring[(i + 1) % ring.size()])];
      if (a != b) out[a] += per_rank[k];
    }
  }
  double most = 0;
  for (const auto& [node, bytes] : out) most = std::max(most, bytes);
  return most;
}

/// Bytes each rank of a ring all-reduce over g ranks sends: 2(g-1)/g * bytes (0 for g = 1).
double ring_all_reduce_per_rank(size_t g, double bytes) { return g < 2 ? 0.0 : ring_all_reduce_factor(double(g)) * bytes; }

}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(Communicator& inner, int node_id) : ForwardingCommunicator(inner) {
  const int n = inner.size(), me = inner.rank();
  std::vector<int> ids(size_t(n), 0);
  inner.all_gather(&node_id, ids.data(), 1, DType::i32);
  const std::string g = "hierarchical all-reduce over group '" + inner.name() + "'";
  for (int r = 0; r < n; ++r)
    if (ids[size_t(r)] < 0)
      throw AgreedInputError(g + ": rank " + std::to_string(r) + " has node id " + std::to_string(ids[size_t(r)]) +
                             " (must be >= 0)");
  const NodeMap m = map_nodes(ids);
  if (const std::string why = uneven(m, ids); !why.empty())
    throw AgreedInputError(g + ": every node must hold the same number of the group's ranks; " + why);
  nodes_ = int(m.members.size());
  local_size_ = int(m.members[0].size());
  const auto& mine = m.members[size_t(m.index_of[size_t(me)])];
  local_rank_ = int(std::find(mine.begin(), mine.end(), me) - mine.begin());
  // Inside the node, ordered by group rank; across nodes, the ranks of one local index, ordered
  // by group rank (= by node, nodes in the order of their lowest rank).
  intra_ = inner_.split(m.index_of[size_t(me)], me, inner.name() + ":intra_node");
  inter_ = inner_.split(local_rank_, me, inner.name() + ":inter_node");
}

void HierarchicalCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  const size_t L = size_t(local_size_), ts = dtype_size(dtype);
  if (L == 1) return inter_->all_reduce(send, recv, count, dtype, op);  // one rank per node: stage 2 alone
  const size_t shard = count / L, body = shard * L, rest = count - body;
  const auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  if (shard > 0) {
    char* mine = r + size_t(local_rank_) * shard * ts;
    intra_->reduce_scatter(send, mine, shard, dtype, op);  // in place when send == recv (NCCL's layout)
    inter_->all_reduce(mine, mine, shard, dtype, op);
    intra_->all_gather(mine, recv, shard, dtype);  // in place: send == recv + rank * shard
  }
  if (rest > 0) {  // Horovod's remainder: the node's sum, across nodes on local rank 0, back to the node
    intra_->all_reduce(s + body * ts, r + body * ts, rest, dtype, op);
    if (local_rank_ == 0) inter_->all_reduce(r + body * ts, r + body * ts, rest, dtype, op);
    intra_->broadcast(r + body * ts, rest, dtype, 0);
  }
}

std::unique_ptr<CommHandle> HierarchicalCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                                       DType dtype, ReduceOp op) {
  all_reduce(send, recv, count, dtype, op);
  return std::make_unique<CompletedHandle>();
}

std::vector<int> consecutive_nodes(int ranks, int ranks_per_node) {
  DTB_CHECK(ranks >= 1 && ranks_per_node >= 1, "consecutive_nodes: ranks and ranks_per_node must be >= 1");
  std::vector<int> node_of(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) node_of[size_t(r)] = r / ranks_per_node;
  return node_of;
}

double cross_node_bytes_flat(const std::vector<int>& node_of, size_t count, size_t type_size) {
  std::vector<int> ring(node_of.size());
  for (size_t r = 0; r < ring.size(); ++r) ring[r] = int(r);
  return busiest_node(node_of, {ring}, {ring_all_reduce_per_rank(ring.size(), double(count * type_size))});
}

double cross_node_bytes_hierarchical(const std::vector<int>& node_of, size_t count, size_t type_size) {
  const NodeMap m = map_nodes(node_of);
  DTB_CHECK(uneven(m, node_of).empty(), "cross_node_bytes_hierarchical: " + uneven(m, node_of));
  const size_t L = m.members[0].size(), N = m.members.size();
  const size_t shard = L == 1 ? count : count / L, rest = L == 1 ? 0 : count - shard * L;
  std::vector<std::vector<int>> rings(L);
  std::vector<double> per_rank(L);
  for (size_t j = 0; j < L; ++j) {
    for (const auto& mem : m.members) rings[j].push_back(mem[j]);
    per_rank[j] = ring_all_reduce_per_rank(N, double((shard + (j == 0 ? rest : 0)) * type_size));
  }
  return busiest_node(node_of, rings, per_rank);
}

}  // namespace dtb
