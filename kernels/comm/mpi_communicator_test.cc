// Tests of MpiCommunicator, and of StagedCommunicator over it, run by the multi-rank binary
// at 2 and 4 ranks. Every op (the all-to-alls out of place only, as their contract),
// blocking and async, in place and out of place, f32 and f64, checked exactly: inputs are
// small integers, so every sum is exact in any order. The half types are in
// mpi_communicator_half_test.cc. A rank's count of wrong elements is summed over the world
// (with raw MPI, not the communicator under test), so rank 0, the only one that prints,
// reports a failure wherever it happened.
#include "kernels/comm/mpi_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/comm/mpi_communicator_test_util.h"
#include "kernels/comm/staged_communicator.h"

namespace dtb {
namespace {

using namespace dtb::mpi_test;

// An element type, and whether the world is the MPI communicator itself or a
// StagedCommunicator over it (kernels/comm/staged_communicator.h) on the CPU backend, whose
// buffers then pass through its host staging (memcpy here, cudaMemcpy on a GPU): every test
// below runs on both, so the staged form keeps every op's semantics and in-place layouts.
template <typename E, bool S> struct Case {
  using T = E;
  static constexpr bool staged = S;
};

template <typename C> class MpiTyped : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = make_mpi_world();
    if (C::staged) world_ = std::make_unique<StagedCommunicator>(std::move(world_), *cpu_);
  }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  std::unique_ptr<Communicator> world_;
  static constexpr DType kType = dtype_of<typename C::T>();
};
using Types = ::testing::Types<Case<float, false>, Case<double, false>, Case<float, true>, Case<double, true>>;
TYPED_TEST_SUITE(MpiTyped, Types);

TEST(Mpi, WorldAndSelf) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto world = make_mpi_world();
  EXPECT_EQ(world->rank(), rank);
  EXPECT_EQ(world->size(), size);
  EXPECT_EQ(world->name(), "world");
  EXPECT_EQ(world->backend(), "mpi");
  auto self = make_mpi_self();
  EXPECT_EQ(self->rank(), 0);
  EXPECT_EQ(self->size(), 1);
  EXPECT_EQ(self->name(), "self");
  std::vector<double> x = {1, 2, 3}, y(3);
  self->all_reduce(x.data(), y.data(), 3, DType::f64, ReduceOp::sum);
  EXPECT_EQ(y, x);
  world->barrier();
}

TYPED_TEST(MpiTyped, AllReduce) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts)
    for (ReduceOp op : kOps)
      for (bool in_place : {false, true})
        for (bool async : {false, true}) {
          std::vector<T> send(count), recv(count, T(kSentinel));
          for (size_t i = 0; i < count; ++i) (in_place ? recv : send)[i] = input<T>(me, i);
          const T* s = in_place ? recv.data() : send.data();
          run(async, [&] { c.all_reduce(s, recv.data(), count, this->kType, op); },
              [&] { return c.all_reduce_async(s, recv.data(), count, this->kType, op); });
          for (size_t i = 0; i < count; ++i) wrong += recv[i] != reduced<T>(op, n, i);
          if (!in_place)
            for (size_t i = 0; i < count; ++i) wrong += send[i] != input<T>(me, i);
        }
  EXPECT_EQ(world_sum(wrong), 0);
}

TYPED_TEST(MpiTyped, AllGather) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts)
    for (bool in_place : {false, true})
      for (bool async : {false, true}) {
        std::vector<T> send(count), recv(count * n, T(kSentinel));
        T* s = in_place ? recv.data() + me * count : send.data();
        for (size_t i = 0; i < count; ++i) s[i] = input<T>(me, i);
        run(async, [&] { c.all_gather(s, recv.data(), count, this->kType); },
            [&] { return c.all_gather_async(s, recv.data(), count, this->kType); });
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) wrong += recv[r * count + i] != input<T>(r, i);
      }
  EXPECT_EQ(world_sum(wrong), 0);
}

// In place: recv = send + rank*count; only rank's block is defined afterwards.
TYPED_TEST(MpiTyped, ReduceScatter) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (bool in_place : {false, true})
        for (bool async : {false, true}) {
          std::vector<T> send(count * n), out(count, T(kSentinel));
          for (size_t j = 0; j < count * n; ++j) send[j] = input<T>(me, j);
          T* recv = in_place ? send.data() + me * count : out.data();
          run(async, [&] { c.reduce_scatter(send.data(), recv, count, this->kType, op); },
              [&] { return c.reduce_scatter_async(send.data(), recv, count, this->kType, op); });
          for (size_t i = 0; i < count; ++i) wrong += recv[i] != reduced<T>(op, n, me * count + i);
          if (!in_place)
            for (size_t j = 0; j < count * n; ++j) wrong += send[j] != input<T>(me, j);
        }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Even all-to-all: block j of send to rank j, block i of recv from rank i.
TYPED_TEST(MpiTyped, AllToAll) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts) {
    std::vector<T> send(count * n), recv(count * n, T(kSentinel));
    for (size_t j = 0; j < send.size(); ++j) send[j] = input<T>(me, j);
    c.all_to_all(send.data(), recv.data(), count, this->kType);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) wrong += recv[r * count + i] != input<T>(r, me * count + i);
    for (size_t j = 0; j < send.size(); ++j) wrong += send[j] != input<T>(me, j);
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Uneven all-to-all as a router makes it: rank r sends ((r + 2j) mod 3) * unit elements to rank
// j (some blocks empty); sent blocks one element apart (so packed displacements would read the
// wrong elements) and received blocks too (so the gaps must keep the sentinel).
TYPED_TEST(MpiTyped, AllToAllvUnevenWithGaps) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t unit : {size_t(1), size_t(1003)})
    for (bool async : {false, true}) {
      auto sent = [&](int r, int j) { return size_t((r + 2 * j) % 3) * unit; };
      std::vector<size_t> sc(n), rc(n), sd(n), rd(n);
      for (int j = 0; j < n; ++j) sc[j] = sent(me, j), rc[j] = sent(j, me);
      for (int i = 1; i < n; ++i) sd[i] = sd[i - 1] + sc[i - 1] + 1, rd[i] = rd[i - 1] + rc[i - 1] + 1;  // gaps
      std::vector<T> send(sd[n - 1] + sc[n - 1]), recv(rd[n - 1] + rc[n - 1] + 1, T(kSentinel));
      for (size_t j = 0; j < send.size(); ++j) send[j] = input<T>(me, j);
      run(async, [&] { c.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd, this->kType); },
          [&] { return c.all_to_allv_async(send.data(), sc, sd, recv.data(), rc, rd, this->kType); });
      std::vector<bool> filled(recv.size(), false);
      for (int i = 0; i < n; ++i) {
        size_t from = 0;  // where rank i's block for me starts in its send buffer (gaps included)
        for (int j = 0; j < me; ++j) from += sent(i, j) + 1;
        for (size_t t = 0; t < rc[i]; ++t) {
          wrong += recv[rd[i] + t] != input<T>(i, from + t);
          filled[rd[i] + t] = true;
        }
      }
      for (size_t j = 0; j < recv.size(); ++j) wrong += !filled[j] && recv[j] != T(kSentinel);
    }
  EXPECT_EQ(world_sum(wrong), 0);
}

TYPED_TEST(MpiTyped, Broadcast) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  long wrong = 0;
  for (size_t count : kCounts)
    for (int root = 0; root < c.size(); ++root)
      for (bool async : {false, true}) {
        std::vector<T> buf(count, T(kSentinel));
        if (c.rank() == root)
          for (size_t i = 0; i < count; ++i) buf[i] = input<T>(root, i);
        run(async, [&] { c.broadcast(buf.data(), count, this->kType, root); },
            [&] { return c.broadcast_async(buf.data(), count, this->kType, root); });
        for (size_t i = 0; i < count; ++i) wrong += buf[i] != input<T>(root, i);
      }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Out of place (ncclBroadcast): the root's send lands in every recv; send is untouched.
TYPED_TEST(MpiTyped, BroadcastOutOfPlace) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  long wrong = 0;
  for (size_t count : kCounts)
    for (int root = 0; root < c.size(); ++root) {
      std::vector<T> send(count, T(kSentinel)), recv(count, T(kSentinel));
      if (c.rank() == root)
        for (size_t i = 0; i < count; ++i) send[i] = input<T>(root, i);
      c.broadcast(send.data(), recv.data(), count, this->kType, root);
      for (size_t i = 0; i < count; ++i) {
        wrong += recv[i] != input<T>(root, i);
        wrong += send[i] != (c.rank() == root ? input<T>(root, i) : T(kSentinel));
      }
    }
  EXPECT_EQ(world_sum(wrong), 0);
}

// In place: the buffer is sent to rank+1 and replaced by what rank-1 sent.
TYPED_TEST(MpiTyped, SendRecvRingInPlace) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts) {
    std::vector<T> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = input<T>(me, i);
    c.sendrecv(buf.data(), buf.data(), count, this->kType, (me + 1) % n, (me + n - 1) % n, 9);
    for (size_t i = 0; i < count; ++i) wrong += buf[i] != input<T>((me + n - 1) % n, i);
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// nccl-tests' sendrecv: a ring shift, each rank sends to rank+1 and receives from rank-1.
TYPED_TEST(MpiTyped, SendRecvRing) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  long wrong = 0;
  for (size_t count : kCounts) {
    std::vector<T> send(count), recv(count, T(kSentinel));
    for (size_t i = 0; i < count; ++i) send[i] = input<T>(me, i);
    c.sendrecv(send.data(), recv.data(), count, this->kType, next, prev, 7);
    for (size_t i = 0; i < count; ++i) wrong += recv[i] != input<T>(prev, i);
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// sendrecv_async as the context-parallel ring uses it: the shift of SendRecvRing, posted, then
// completed once by wait() and once by polling test(); the handle stays complete after. Twice in
// a row with the same tag: the second round's messages must not match the first's receives.
TYPED_TEST(MpiTyped, SendRecvAsyncRing) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  long wrong = 0;
  for (size_t count : kCounts) {
    for (int polled = 0; polled < 2; ++polled) {
      std::vector<T> send(count), recv(count, T(kSentinel));
      for (size_t i = 0; i < count; ++i) send[i] = input<T>(me, i);
      auto h = c.sendrecv_async(send.data(), recv.data(), count, this->kType, next, prev, 13);
      if (polled) {
        while (!h->test()) std::this_thread::yield();
        wrong += !h->test();
      }
      h->wait();
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != input<T>(prev, i);
    }
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Blocking send/recv in pairs (0,1), (2,3): even ranks send first, then receive the reply.
TYPED_TEST(MpiTyped, SendRecvPairs) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int me = c.rank(), peer = me ^ 1;
  long wrong = 0;
  if (peer < c.size()) {
    for (size_t count : kCounts) {
      std::vector<T> out(count), in(count, T(kSentinel));
      for (size_t i = 0; i < count; ++i) out[i] = input<T>(me, i);
      if (me % 2 == 0) {
        c.send(out.data(), count, this->kType, peer, 3);
        c.recv(in.data(), count, this->kType, peer, 4);
      } else {
        c.recv(in.data(), count, this->kType, peer, 3);
        c.send(out.data(), count, this->kType, peer, 4);
      }
      for (size_t i = 0; i < count; ++i) wrong += in[i] != input<T>(peer, i);
    }
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Non-blocking point-to-point in a ring: each rank posts a send to rank+1 and a recv from
// rank-1, then polls both handles with test() until they report completion.
TYPED_TEST(MpiTyped, AsyncSendRecvRingPolled) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  long wrong = 0;
  for (size_t count : kCounts) {
    std::vector<T> send(count), recv(count, T(kSentinel));
    for (size_t i = 0; i < count; ++i) send[i] = input<T>(me, i);
    auto hs = c.send_async(send.data(), count, this->kType, next, 11);
    auto hr = c.recv_async(recv.data(), count, this->kType, prev, 11);
    bool sent = false, received = false;
    while (!(sent && received)) {
      if (!sent) sent = hs->test();
      if (!received) received = hr->test();
      std::this_thread::yield();
    }
    wrong += !hs->test() + !hr->test();  // stays true
    hs->wait();                          // returns at once after test() was true
    hr->wait();
    for (size_t i = 0; i < count; ++i) wrong += recv[i] != input<T>(prev, i);
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// A recv posted before the matching send exists: odd ranks post their recv, then every rank
// synchronises (so the recv is pending before the send is issued), then even ranks send.
// Two messages with different tags are posted in reverse order and still match by tag.
TYPED_TEST(MpiTyped, AsyncRecvPostedBeforeSend) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int me = c.rank(), peer = me ^ 1;
  const bool paired = peer < c.size();
  const size_t count = 65541;  // past the eager size: a rendezvous send
  std::vector<T> a(count), b(count), ra(count, T(kSentinel)), rb(count, T(kSentinel));
  for (size_t i = 0; i < count; ++i) a[i] = input<T>(me, i), b[i] = input<T>(me + 5, i);
  std::unique_ptr<CommHandle> hra, hrb;
  if (paired && me % 2 == 1) {
    hrb = c.recv_async(rb.data(), count, this->kType, peer, 22);
    hra = c.recv_async(ra.data(), count, this->kType, peer, 21);
  }
  long wrong = 0;
  if (hra) wrong += hra->test() + hrb->test();  // nothing was sent yet
  MPI_Barrier(MPI_COMM_WORLD);
  if (paired && me % 2 == 0) {
    auto ha = c.send_async(a.data(), count, this->kType, peer, 21);
    auto hb = c.send_async(b.data(), count, this->kType, peer, 22);
    while (!ha->test() || !hb->test()) std::this_thread::yield();
  }
  if (hra) {
    while (!hra->test()) std::this_thread::yield();
    hrb->wait();
    for (size_t i = 0; i < count; ++i)
      wrong += (ra[i] != input<T>(peer, i)) + (rb[i] != input<T>(peer + 5, i));
  }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Several async collectives in flight at once, completed in reverse order.
TYPED_TEST(MpiTyped, AsyncOverlapped) {
  using T = typename TypeParam::T;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  const size_t count = 4099;
  std::vector<T> a(count), b(count), g(count * n, T(kSentinel));
  for (size_t i = 0; i < count; ++i) a[i] = b[i] = input<T>(me, i);
  auto ha = c.all_reduce_async(a.data(), a.data(), count, this->kType, ReduceOp::sum);
  auto hg = c.all_gather_async(b.data(), g.data(), count, this->kType);
  hg->wait();
  ha->wait();
  long wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += a[i] != reduced<T>(ReduceOp::sum, n, i);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) wrong += g[r * count + i] != input<T>(r, i);
  EXPECT_EQ(world_sum(wrong), 0);
}

TEST(Mpi, Int32AllReduceAndHalfGather) {
  auto c = make_mpi_world();
  const int n = c->size(), me = c->rank();
  std::vector<int32_t> x = {me, 1, -me};
  c->all_reduce(x.data(), x.data(), 3, DType::i32, ReduceOp::sum);
  long wrong = (x[0] != n * (n - 1) / 2) + (x[1] != n) + (x[2] != -n * (n - 1) / 2);
  // bf16 travels as 2-byte words: bit patterns arrive unchanged.
  std::vector<uint16_t> mine = {uint16_t(0x3f80 + me), 0xffff}, all(2 * n, 0);
  c->all_gather(mine.data(), all.data(), 2, DType::bf16);
  for (int r = 0; r < n; ++r) wrong += (all[2 * r] != 0x3f80 + r) + (all[2 * r + 1] != 0xffff);
  EXPECT_EQ(world_sum(wrong), 0);
}

// Two halves (colour = rank < n/2), each with a collective of its own; key orders ranks.
TEST(Mpi, SplitIntoHalves) {
  auto world = make_mpi_world();
  const int n = world->size(), me = world->rank(), half = n / 2;
  ASSERT_GE(n, 2);
  const int color = me < half ? 0 : 1;
  auto sub = world->split(color, me, color == 0 ? "low" : "high");
  long wrong = 0;
  wrong += sub->size() != (color == 0 ? half : n - half);
  wrong += sub->rank() != (color == 0 ? me : me - half);
  wrong += sub->name() != (color == 0 ? "low" : "high");
  double x = me, sum = 0;
  sub->all_reduce(&x, &sum, 1, DType::f64, ReduceOp::sum);
  const int first = color == 0 ? 0 : half, last = color == 0 ? half : n;
  double expected = 0;
  for (int r = first; r < last; ++r) expected += r;
  wrong += sum != expected;
  // Reversed keys reverse the order within a group.
  auto rev = world->split(color, -me, "reversed");
  wrong += rev->rank() != (last - 1 - me);
  std::vector<double> g(rev->size());
  rev->all_gather(&x, g.data(), 1, DType::f64);
  for (int i = 0; i < rev->size(); ++i) wrong += g[i] != double(last - 1 - i);
  EXPECT_EQ(world_sum(wrong), 0);
}

// A staged world's sub-groups are staged too (their buffers are device buffers as well),
// named as asked, backend "mpi-staged"; a sub-group's all-reduce sums its ranks alone.
TEST(Staged, SplitStaysStaged) {
  auto cpu = make_cpu_backend();
  StagedCommunicator world(make_mpi_world(), *cpu);
  EXPECT_EQ(world.backend(), "mpi-staged");
  EXPECT_EQ(world.name(), "world");
  const int n = world.size(), me = world.rank(), half = n / 2;
  const int color = me < half ? 0 : 1;
  auto sub = world.split(color, me, "part");
  long wrong = sub->backend() != "mpi-staged" || sub->name() != "part";
  double x = me, sum = 0;
  sub->all_reduce(&x, &sum, 1, DType::f64, ReduceOp::sum);
  double expected = 0;
  for (int r = color == 0 ? 0 : half; r < (color == 0 ? half : n); ++r) expected += r;
  wrong += sum != expected;
  EXPECT_EQ(world_sum(wrong), 0);
}

}  // namespace
}  // namespace dtb
