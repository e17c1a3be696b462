// EmulatedLinkCommunicator (kernels/comm/emulated_link.h): the ring's cross-node bytes, that an
// operation crossing nodes takes at least the links' time and one inside a node is not held,
// that results are the inner group's, and that split() groups keep the links.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <vector>

#include "kernels/comm/emulated_link.h"
#include "kernels/comm/mpi_communicator.h"

namespace dtb {
namespace {

TEST(EmulatedLink, RingCrossNodeBytes) {
  // Two nodes of two: ranks 1 (-> 2) and 3 (-> 0) send across.
  EXPECT_EQ(ring_cross_node_bytes({0, 0, 1, 1}, 10.0), (std::vector<double>{0, 10, 0, 10}));
  // Alternating nodes: every link crosses.
  EXPECT_EQ(ring_cross_node_bytes({0, 1, 0, 1}, 3.0), (std::vector<double>{3, 3, 3, 3}));
  EXPECT_EQ(ring_cross_node_bytes({0, 0}, 5.0), (std::vector<double>{0, 0}));
  EXPECT_EQ(ring_cross_node_bytes({4}, 5.0), (std::vector<double>{0}));
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Nodes of two consecutive ranks; node 1's links at a tenth of the others'.
TEST(EmulatedLink, CrossingOperationsTakeTheLinksTime) {
  auto world = make_mpi_world();
  const int n = world->size(), me = world->rank();
  if (n < 4) GTEST_SKIP() << "needs 4 ranks (2 nodes of 2)";
  const LinkModel link{.gbps = 0.1, .latency_s = 1e-3, .slow_node = 1, .slow_gbps = 0.01};
  EmulatedLinkCommunicator c(*world, me / 2, link);
  for (int r = 0; r < n; ++r) EXPECT_EQ(c.nodes()[size_t(r)], r / 2);
  const size_t count = 25000;  // 100 kB of f32
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = float(me + 1);
  // A ring all-reduce sends 2(n-1)/n x 100 kB per rank; the slow node's crossing rank (3) at
  // 0.01 GB/s sets the time.
  const double expect = 1e-3 + 2.0 * (n - 1) / n * 1e5 / 1e7;
  const double t = seconds_of([&] { c.all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum); });
  EXPECT_GE(t, expect);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], float(n * (n + 1) / 2)) << i;
  EXPECT_EQ(c.stats().sent_bytes, me % 2 == 1 ? 2.0 * (n - 1) / n * 1e5 : 0.0);
  // The handle of a non-blocking one completes no earlier.
  const double ta = seconds_of([&] { c.all_reduce_async(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum)->wait(); });
  EXPECT_GE(ta, expect);
  // Inside a node nothing crosses: not held.
  auto node = c.split(me / 2, me, "node");
  auto* en = dynamic_cast<EmulatedLinkCommunicator*>(node.get());
  ASSERT_NE(en, nullptr);
  const LinkStats before = c.stats();
  en->all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum);
  EXPECT_EQ(c.stats().wait_s, before.wait_s);  // the split shares the parent's stats
  EXPECT_EQ(c.stats().sent_bytes, before.sent_bytes);
  // Across nodes (the ranks with the same local index), every link crosses.
  auto across = c.split(me % 2, me, "across");
  auto* ea = dynamic_cast<EmulatedLinkCommunicator*>(across.get());
  ASSERT_NE(ea, nullptr);
  const int g = ea->size();
  const double t2 = seconds_of([&] { ea->all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum); });
  EXPECT_GE(t2, 1e-3 + 2.0 * (g - 1) / g * 1e5 / 1e7);
  EXPECT_EQ(c.stats().sent_bytes - before.sent_bytes, 2.0 * (g - 1) / g * 1e5);
}

}  // namespace
}  // namespace dtb
