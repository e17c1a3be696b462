// The cross-node byte counts of kernels/comm/hierarchical_communicator.h on hand-worked cases
// (the ring model: a ring all-reduce over g ranks sends 2(g-1)/g * S per rank; a link counts
// when its ends are on different nodes; the busiest node's bytes).
#include <gtest/gtest.h>

#include "kernels/comm/hierarchical_communicator.h"

namespace dtb {
namespace {

TEST(CrossNodeBytes, TwoNodesOfTwo) {
  // 4 ranks, nodes {0,1} {2,3}, 1000 f32 (S = 4000 B). Flat ring 0-1-2-3-0: links 1->2 and 3->0
  // cross, one per node, each 2*3/4*S = 6000 B. Hierarchical: rings {0,2} and {1,3} on
  // shards of 500 elements (2000 B), each rank sends 2*1/2*2000 = 2000 B; node 0 sends on both
  // rings: 4000 B = 2(N-1)/N * S.
  const auto nodes = consecutive_nodes(4, 2);
  EXPECT_EQ(nodes, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(cross_node_bytes_flat(nodes, 1000, 4), 6000.0);
  EXPECT_DOUBLE_EQ(cross_node_bytes_hierarchical(nodes, 1000, 4), 4000.0);
}

TEST(CrossNodeBytes, RemainderOnLocalRankZero) {
  // 8 ranks in two nodes of 4, 1003 f32 (S = 4012 B): shards of 250, remainder 3 on local 0's
  // ring: 2*1/2*(253*4) + 3 * 2*1/2*(250*4) = 1012 + 3000 = 4012 B = S. Flat: 2*7/8*4012.
  const auto nodes = consecutive_nodes(8, 4);
  EXPECT_DOUBLE_EQ(cross_node_bytes_hierarchical(nodes, 1003, 4), 4012.0);
  EXPECT_DOUBLE_EQ(cross_node_bytes_flat(nodes, 1003, 4), 2.0 * 7 / 8 * 4012);
}

TEST(CrossNodeBytes, OneNodeSendsNothingAcross) {
  const auto nodes = consecutive_nodes(4, 4);
  EXPECT_DOUBLE_EQ(cross_node_bytes_flat(nodes, 1000, 4), 0.0);
  EXPECT_DOUBLE_EQ(cross_node_bytes_hierarchical(nodes, 1000, 4), 0.0);
}

TEST(CrossNodeBytes, OneRankPerNodeIsTheFlatRing) {
  // Every rank its own node: the hierarchical all-reduce is the flat one (stage 2 alone).
  const auto nodes = consecutive_nodes(4, 1);
  EXPECT_DOUBLE_EQ(cross_node_bytes_flat(nodes, 1000, 2), 2.0 * 3 / 4 * 2000);
  EXPECT_DOUBLE_EQ(cross_node_bytes_hierarchical(nodes, 1000, 2), 2.0 * 3 / 4 * 2000);
}

TEST(CrossNodeBytes, RoundRobinPlacement) {
  // Nodes {0,2} {1,3} (ranks dealt round robin): every flat ring link crosses, node 0 sends on
  // 0->1 and 2->3: 2 * 6000 = 12000 B. Hierarchical rings {0,1} and {2,3}: node 0 sends
  // 2000 B on each: 4000 B, as for consecutive nodes.
  const std::vector<int> nodes = {0, 1, 0, 1};
  EXPECT_DOUBLE_EQ(cross_node_bytes_flat(nodes, 1000, 4), 12000.0);
  EXPECT_DOUBLE_EQ(cross_node_bytes_hierarchical(nodes, 1000, 4), 4000.0);
}

}  // namespace
}  // namespace dtb
