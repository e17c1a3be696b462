// Tests of HierarchicalCommunicator, run by the multi-rank binary at 2 and 4 ranks: its
// all_reduce bitwise equal to the flat MpiCommunicator's on integer-valued inputs (every
// summation order exact) for f32, f64, bf16, f16 and i32; counts 1, 3, 1000 and 1003 (not
// divisible by the ranks per node); sum, max and min; in place and out of place, blocking and
// async; on nodes of consecutive ranks (1, 2 and all ranks per node) and round-robin nodes;
// the other operations forwarded; uneven nodes refused. The cross-node byte formulas are
// tested on hand-worked cases in hierarchical_bytes_test.cc.
#include "kernels/comm/hierarchical_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/agreed_error.h"
#include "kernels/comm/mpi_communicator_test_util.h"
#include "kernels/half.h"

namespace dtb {
namespace {

using namespace dtb::mpi_test;

/// The node layouts a world of n ranks allows: name and this rank's node id.
struct NodeLayout {
  std::string name;
  int node;
};
std::vector<NodeLayout> layouts(int n, int me) {
  std::vector<NodeLayout> v = {{"1 per node", me}, {"one node", 0}};
  if (n % 2 == 0 && n > 2) v.push_back({"2 per node, consecutive", me / 2});
  if (n % 2 == 0 && n > 2) v.push_back({"2 per node, round robin", me % 2});
  return v;
}

template <typename T> class Hierarchical : public ::testing::Test {};
using Types = ::testing::Types<float, double, bf16, fp16, int32_t>;
TYPED_TEST_SUITE(Hierarchical, Types);

TYPED_TEST(Hierarchical, AllReduceEqualsFlatBitwise) {
  using T = TypeParam;
  constexpr DType dt = dtype_of<T>();
  auto world = make_mpi_world();
  const int n = world->size(), me = world->rank();
  long wrong = 0, cases = 0;
  for (const NodeLayout& nl : layouts(n, me)) {
    HierarchicalCommunicator h(*world, nl.node);
    for (size_t count : {size_t(1), size_t(3), size_t(1000), size_t(1003)})
      for (ReduceOp op : kOps)
        for (bool in_place : {false, true})
          for (bool async : {false, true}) {
            std::vector<T> send(count), recv(count, T(float(kSentinel))), flat(count);
            for (size_t i = 0; i < count; ++i) (in_place ? recv : send)[i] = input<T>(me, i);
            const std::vector<T> mine = in_place ? recv : send;
            world->all_reduce(mine.data(), flat.data(), count, dt, op);
            const T* s = in_place ? recv.data() : send.data();
            run(async, [&] { h.all_reduce(s, recv.data(), count, dt, op); },
                [&] { return h.all_reduce_async(s, recv.data(), count, dt, op); });
            const bool same = std::memcmp(recv.data(), flat.data(), count * sizeof(T)) == 0;
            wrong += !same;
            ++cases;
            EXPECT_TRUE(same) << nl.name << ", count " << count << ", op " << int(op) << (in_place ? ", in place" : "")
                              << (async ? ", async" : "");
            if (!in_place) {
              EXPECT_EQ(std::memcmp(send.data(), mine.data(), count * sizeof(T)), 0) << "send changed";
            }
          }
  }
  EXPECT_EQ(world_sum(wrong), 0) << "of " << cases << " cases per rank";
}

TEST(HierarchicalShape, NodesAndLocalRanks) {
  auto world = make_mpi_world();
  const int n = world->size(), me = world->rank();
  HierarchicalCommunicator one_each(*world, me);
  EXPECT_EQ(one_each.nodes(), n);
  EXPECT_EQ(one_each.ranks_per_node(), 1);
  HierarchicalCommunicator single(*world, 7);  // any id: one node
  EXPECT_EQ(single.nodes(), 1);
  EXPECT_EQ(single.ranks_per_node(), n);
  EXPECT_EQ(single.local_rank(), me);
  EXPECT_EQ(single.size(), n);
  EXPECT_EQ(single.rank(), me);
}

TEST(HierarchicalShape, ForwardsTheOtherOperations) {
  auto world = make_mpi_world();
  const int n = world->size(), me = world->rank();
  HierarchicalCommunicator h(*world, me / 2);  // n = 2: one node; n = 4: two nodes of 2
  std::vector<float> x = {float(me + 1)}, all(static_cast<size_t>(n));
  h.all_gather(x.data(), all.data(), 1, DType::f32);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[size_t(r)], float(r + 1));
  float b = me == 0 ? 42.0f : 0.0f;
  h.broadcast(&b, 1, DType::f32, 0);
  EXPECT_EQ(b, 42.0f);
}

TEST(HierarchicalShape, RefusesUnevenNodes) {
  auto world = make_mpi_world();
  const int n = world->size(), me = world->rank();
  if (n < 3) GTEST_SKIP() << "needs 3 or more ranks for two nodes of different sizes";
  const int node = me == n - 1 ? 1 : 0;  // n-1 ranks on node 0, one on node 1
  try {
    HierarchicalCommunicator h(*world, node);
    ADD_FAILURE() << "uneven nodes accepted";
  } catch (const AgreedInputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("every node must hold the same number"), std::string::npos) << what;
    EXPECT_NE(what.find("group 'world'"), std::string::npos) << what;
  }
  try {
    HierarchicalCommunicator h(*world, me == 0 ? -1 : 0);
    ADD_FAILURE() << "negative node id accepted";
  } catch (const AgreedInputError& e) {
    EXPECT_NE(std::string(e.what()).find("node id -1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtb
