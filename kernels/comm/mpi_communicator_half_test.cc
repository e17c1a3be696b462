// Tests of MpiCommunicator on the half types bf16 and fp16 (MpiHalf; their reductions are
// user-defined MPI operations in mpi_communicator.cc), run by the multi-rank binary at 2
// and 4 ranks: sums exact in any order (bitwise), sums that round (bitwise against the
// float-sum-then-round reference, and within the (ranks-1)-roundings bound), max/min with
// NaNs and signed zeros, and bit patterns that the non-reducing ops must carry unchanged. A
// rank's count of wrong elements is summed over the world with raw MPI.
#include "kernels/comm/mpi_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "kernels/comm/mpi_communicator_test_util.h"
#include "kernels/half.h"

namespace dtb {
namespace {

using namespace dtb::mpi_test;

// ---- Half types: bf16 and fp16 reductions (user-defined MPI operations) ----

/// A deterministic 64-bit hash of (a, b, c) (splitmix64's finaliser), for per-rank inputs.
uint64_t mix(uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b * 0xbf58476d1ce4e5b9ull + c * 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename H> constexpr uint16_t kNaN = std::is_same_v<H, bf16> ? 0x7fc0 : 0x7e00;
constexpr uint16_t kNegZero = 0x8000;

/// Lowest and highest exponent e of the exact inputs k * 2^e (|k| <= 8): the whole range,
/// subnormals included (bf16: 2^-133, fp16: 2^-24 is the smallest subnormal), up to where
/// 32 * 2^e (four ranks' worth) is still finite.
template <typename H> constexpr int kExactEmin = std::is_same_v<H, bf16> ? -133 : -24;
template <typename H> constexpr int kExactEmax = std::is_same_v<H, bf16> ? 120 : 10;

/// Rank r's element i for exact sums: k * 2^e, k in [-8, 8], e fixed per element. Every
/// partial sum over any subset of at most 4 ranks is j * 2^e with |j| <= 32, representable
/// in both formats (6 bits; subnormal ones are multiples of the smallest subnormal), so the
/// sum is exact in any order and equals the exact sum bitwise.
template <typename H> H exact_input(int r, size_t i) {
  const int k = int(mix(r, i, 1) % 17) - 8;
  const int e = kExactEmin<H> + int(i % size_t(kExactEmax<H> - kExactEmin<H> + 1));
  return H(float(std::ldexp(double(k), e)));
}

/// Rank r's element i for sums that round: sign * (1 + random fraction) * 2^e, e in
/// [-4, 4], rounded to H. Sums of such values round in most elements and never overflow.
template <typename H> H rounding_input(int r, size_t i) {
  const uint64_t h = mix(r, i, 2);
  const double v = std::ldexp(1 + double(h & 0xffffff) * 0x1p-24, int((h >> 24) % 9) - 4);
  return H(float((h >> 40) & 1 ? -v : v));
}

/// Rank r's element i for max/min: random bit patterns (NaNs, infs, subnormals included),
/// +0 or -0 on every rank in some elements, a NaN on every rank in others (canonical NaN
/// expected), a NaN on rank 0 only in others.
template <typename H> H minmax_input(int r, size_t i) {
  if (i % 13 == 5) return H::from_bits(r % 2 ? kNegZero : 0);
  if (i % 17 == 3) return H::from_bits(kNaN<H> | uint16_t(r % 2 ? 0x8000 : 1));
  if (i % 19 == 7 && r == 0) return H::from_bits(kNaN<H>);
  return H::from_bits(uint16_t(mix(r, i, 3)));
}

/// The correctly rounded sum of two half values: the float sum (exact or rounded at 24
/// bits, which is innocuous before rounding to 8 or 11) rounded to H; a NaN is canonical.
template <typename H> uint16_t half_sum(uint16_t a, uint16_t b) {
  const float s = float(H::from_bits(a)) + float(H::from_bits(b));
  return std::isnan(s) ? kNaN<H> : H(s).bits;
}

/// The expected max (is_max) or min of values over ranks, as bits: NaNs ignored (all NaN:
/// the canonical NaN), -0 below +0, otherwise the extreme input's bits.
template <typename H> uint16_t half_extreme(const std::vector<uint16_t>& xs, bool is_max) {
  bool any = false;
  uint16_t best = 0;
  for (uint16_t b : xs) {
    const float v = H::from_bits(b);
    if (std::isnan(v)) continue;
    const float w = H::from_bits(best);
    const bool better = !any || (is_max ? v > w : v < w) ||
                        (v == w && (is_max ? !std::signbit(v) : std::signbit(v)));
    if (better) best = b;
    any = true;
  }
  return any ? best : kNaN<H>;
}

/// Every result some combination tree of half_sum over the leaves gives (every order and
/// bracketing): for a set of leaves, the sums of a result of one part with a result of the
/// rest, over every split in two. The MPI result must be one of them.
template <typename H> std::set<uint16_t> tree_sums(const std::vector<uint16_t>& leaves) {
  const unsigned full = (1u << leaves.size()) - 1;
  std::map<unsigned, std::set<uint16_t>> memo;
  auto rec = [&](auto&& self, unsigned mask) -> const std::set<uint16_t>& {
    auto it = memo.find(mask);
    if (it != memo.end()) return it->second;
    std::set<uint16_t> out;
    if ((mask & (mask - 1)) == 0) {
      out.insert(leaves[std::countr_zero(mask)]);
    } else {
      const unsigned low = mask & -mask;
      for (unsigned a = (mask - 1) & mask; a; a = (a - 1) & mask) {
        if (!(a & low)) continue;  // each split once: the part with the lowest leaf
        const std::set<uint16_t> xs = self(self, a), ys = self(self, mask ^ a);
        for (uint16_t x : xs)
          for (uint16_t y : ys) out.insert(half_sum<H>(x, y));
      }
    }
    return memo[mask] = std::move(out);
  };
  return rec(rec, full);
}

/// 1 if `result` (count words) differs from rank 0's, on any rank (raw MPI on the world).
long differs_from_rank0(const std::vector<uint16_t>& result) {
  std::vector<uint16_t> first(result);
  MPI_Bcast(first.data(), int(first.size()), MPI_UINT16_T, 0, MPI_COMM_WORLD);
  return first != result;
}

template <typename H> std::vector<uint16_t> bits_of(const std::vector<H>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
  return b;
}

template <typename H> class MpiHalf : public ::testing::Test {
 protected:
  void SetUp() override { world_ = make_mpi_world(); }
  std::unique_ptr<Communicator> world_;
  static constexpr DType kType = dtype_of<H>();
};
using HalfTypes = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(MpiHalf, HalfTypes);

// Sums exact in any order: the result equals the exact sum bitwise, on every rank; send is
// untouched out of place.
TYPED_TEST(MpiHalf, AllReduceSumExact) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts)
    for (bool in_place : {false, true})
      for (bool async : {false, true}) {
        std::vector<H> send(count), recv(count, H::from_bits(0xffff));
        for (size_t i = 0; i < count; ++i) (in_place ? recv : send)[i] = exact_input<H>(me, i);
        const H* s = in_place ? recv.data() : send.data();
        run(async, [&] { c.all_reduce(s, recv.data(), count, this->kType, ReduceOp::sum); },
            [&] { return c.all_reduce_async(s, recv.data(), count, this->kType, ReduceOp::sum); });
        for (size_t i = 0; i < count; ++i) {
          double exact = 0;
          for (int r = 0; r < n; ++r) exact += float(exact_input<H>(r, i));
          wrong += recv[i].bits != H(float(exact)).bits;
          wrong += float(H(float(exact))) != exact;  // the test's premise: representable
        }
        if (!in_place)
          for (size_t i = 0; i < count; ++i) wrong += send[i].bits != exact_input<H>(me, i).bits;
        wrong += differs_from_rank0(bits_of(recv));
      }
  EXPECT_EQ(world_sum(wrong), 0);
}

// Sums that round, checked bitwise: ranks 0 and 1 contribute rounding values, ranks 2.. -0,
// which every sum leaves unchanged (x + -0 == x for every x, zeros and NaNs included), so
// the result is the one rounding of float(a0) + float(a1) on any number of ranks. Special
// elements: overflow to inf, inf + -inf (canonical NaN), NaN operands, +0 + -0 (+0).
TYPED_TEST(MpiHalf, AllReduceSumRoundsOnce) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int me = c.rank();
  const float big = std::is_same_v<H, bf16> ? 0x1.fep127f : 65504.0f;  // the largest value
  auto in = [&](int r, size_t i) -> H {
    if (r >= 2) return H::from_bits(kNegZero);
    switch (i % 11) {
      case 1: return H(big);                                       // big + big: inf
      case 2: return H(r == 0 ? INFINITY : -INFINITY);             // NaN
      case 3: return r == 0 ? H::from_bits(0x7fff) : H(1.0f);      // NaN + 1: NaN
      case 4: return H::from_bits(r == 0 ? 0 : kNegZero);          // +0
      default: return rounding_input<H>(r, i);
    }
  };
  long wrong = 0, rounded = 0;
  for (size_t count : kCounts)
    for (bool in_place : {false, true})
      for (bool async : {false, true}) {
        std::vector<H> send(count), recv(count, H::from_bits(0xffff));
        for (size_t i = 0; i < count; ++i) (in_place ? recv : send)[i] = in(me, i);
        const H* s = in_place ? recv.data() : send.data();
        run(async, [&] { c.all_reduce(s, recv.data(), count, this->kType, ReduceOp::sum); },
            [&] { return c.all_reduce_async(s, recv.data(), count, this->kType, ReduceOp::sum); });
        for (size_t i = 0; i < count; ++i) {
          const H a = in(0, i), b = in(1, i);
          const uint16_t want = half_sum<H>(a.bits, b.bits);
          wrong += recv[i].bits != want;
          rounded += double(float(H::from_bits(want))) != double(float(a)) + double(float(b));
        }
        wrong += differs_from_rank0(bits_of(recv));
      }
  EXPECT_EQ(world_sum(wrong), 0);
  EXPECT_GT(rounded, 0);  // the test's premise: some sums do round
  // Named cases: the largest value twice overflows to inf; inf + -inf is the canonical NaN;
  // +0 + -0 is +0.
  std::vector<H> x = {in(me, 1), in(me, 2), in(me, 4)};
  c.all_reduce(x.data(), x.data(), 3, this->kType, ReduceOp::sum);
  EXPECT_EQ(x[0].bits, (std::is_same_v<H, bf16> ? 0x7f80 : 0x7c00));  // +inf
  EXPECT_EQ(x[1].bits, kNaN<H>);
  EXPECT_EQ(x[2].bits, 0);
}

// Every rank contributes values that round: the result is bitwise the same on every rank,
// is the result of some combination tree of correctly rounded pairwise sums, and is within
// the bound of n-1 roundings. The bound: each of the n-1 pairwise sums of the tree is
// fl(p + q) = (p + q)(1 + d), |d| <= u (unit_roundoff; no overflow here, and a sum that
// falls below the normal range is exact, as both operands are multiples of the smallest
// subnormal), and each input x_i passes through at most n-1 of them (the depth of its leaf),
// so the result is sum_i x_i prod_{k<=depth_i}(1 + d_k) and
//   |result - exact| <= ((1 + u)^(n-1) - 1) * sum_i |x_i|
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2). For
// n = 2 it is the single rounding |d| (a0 + a1) <= u |a0 + a1|, also checked exactly above.
TYPED_TEST(MpiHalf, AllReduceSumWithinBound) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  const double u = unit_roundoff<H>(), bound_factor = std::pow(1 + u, n - 1) - 1;
  long wrong = 0, not_in_tree = 0, rounded = 0;
  for (size_t count : {size_t(1), size_t(1003), size_t(65541)})
    for (bool async : {false, true}) {
      std::vector<H> send(count), recv(count);
      for (size_t i = 0; i < count; ++i) send[i] = rounding_input<H>(me, i);
      run(async, [&] { c.all_reduce(send.data(), recv.data(), count, this->kType, ReduceOp::sum); },
          [&] {
            return c.all_reduce_async(send.data(), recv.data(), count, this->kType, ReduceOp::sum);
          });
      wrong += differs_from_rank0(bits_of(recv));
      for (size_t i = 0; i < count; ++i) {
        double exact = 0, abs_sum = 0;
        std::vector<uint16_t> leaves(n);
        for (int r = 0; r < n; ++r) {
          const H x = rounding_input<H>(r, i);
          leaves[r] = x.bits;
          exact += float(x);  // exact in double: |exponents| <= 4, at most 11 bits each
          abs_sum += std::fabs(float(x));
        }
        const double got = float(recv[i]);
        wrong += !(std::fabs(got - exact) <= bound_factor * abs_sum);
        rounded += got != exact;
        if (i < 2000) not_in_tree += tree_sums<H>(leaves).count(recv[i].bits) == 0;
      }
    }
  EXPECT_EQ(world_sum(wrong), 0);
  EXPECT_EQ(world_sum(not_in_tree), 0);
  EXPECT_GT(rounded, 0);
}

// max and min: NaNs ignored (all NaN: the canonical NaN), -0 below +0, infs and subnormals
// compared as values; the result is one of the inputs, bitwise, on every rank.
TYPED_TEST(MpiHalf, AllReduceMaxMin) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  long wrong = 0;
  for (size_t count : kCounts)
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min})
      for (bool in_place : {false, true})
        for (bool async : {false, true}) {
          std::vector<H> send(count), recv(count, H::from_bits(0x1234));
          for (size_t i = 0; i < count; ++i) (in_place ? recv : send)[i] = minmax_input<H>(me, i);
          const H* s = in_place ? recv.data() : send.data();
          run(async, [&] { c.all_reduce(s, recv.data(), count, this->kType, op); },
              [&] { return c.all_reduce_async(s, recv.data(), count, this->kType, op); });
          std::vector<uint16_t> xs(n);
          for (size_t i = 0; i < count; ++i) {
            for (int r = 0; r < n; ++r) xs[r] = minmax_input<H>(r, i).bits;
            wrong += recv[i].bits != half_extreme<H>(xs, op == ReduceOp::max);
          }
          wrong += differs_from_rank0(bits_of(recv));
        }
  EXPECT_EQ(world_sum(wrong), 0);
  // Named cases: max(+0, -0) = +0, min = -0; max(NaN, 1) = 1 whichever rank has the NaN.
  // (0x3c00 is a finite positive value in both formats: 1 in fp16, 2^-7 in bf16.)
  std::vector<H> z = {H::from_bits(me % 2 ? kNegZero : 0),
                      H::from_bits(me == n - 1 ? kNaN<H> : 0x3c00)};
  std::vector<H> zmax(2), zmin(2);
  c.all_reduce(z.data(), zmax.data(), 2, this->kType, ReduceOp::max);
  c.all_reduce(z.data(), zmin.data(), 2, this->kType, ReduceOp::min);
  EXPECT_EQ(zmax[0].bits, 0);
  EXPECT_EQ(zmin[0].bits, kNegZero);
  EXPECT_EQ(zmax[1].bits, 0x3c00);
  EXPECT_EQ(zmin[1].bits, 0x3c00);
}

// reduce_scatter: rank r gets block r reduced; exact sums bitwise, rounding sums (ranks 0
// and 1 only, the others -0) bitwise against one rounding, max against the extreme input.
// In place: recv = send + rank*count.
TYPED_TEST(MpiHalf, ReduceScatter) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  enum Kind { kExact, kRounding, kMax };
  auto in = [&](Kind k, int r, size_t j) -> H {
    if (k == kExact) return exact_input<H>(r, j);
    if (k == kRounding) return r < 2 ? rounding_input<H>(r, j) : H::from_bits(kNegZero);
    return minmax_input<H>(r, j);
  };
  long wrong = 0;
  for (size_t count : kCounts)
    for (Kind kind : {kExact, kRounding, kMax})
      for (bool in_place : {false, true})
        for (bool async : {false, true}) {
          const ReduceOp op = kind == kMax ? ReduceOp::max : ReduceOp::sum;
          std::vector<H> send(count * n), out(count, H::from_bits(0xffff));
          for (size_t j = 0; j < count * n; ++j) send[j] = in(kind, me, j);
          H* recv = in_place ? send.data() + me * count : out.data();
          run(async, [&] { c.reduce_scatter(send.data(), recv, count, this->kType, op); },
              [&] { return c.reduce_scatter_async(send.data(), recv, count, this->kType, op); });
          std::vector<uint16_t> xs(n);
          for (size_t i = 0; i < count; ++i) {
            const size_t j = me * count + i;
            for (int r = 0; r < n; ++r) xs[r] = in(kind, r, j).bits;
            uint16_t want = 0;
            if (kind == kMax) {
              want = half_extreme<H>(xs, true);
            } else if (kind == kRounding) {
              want = half_sum<H>(xs[0], xs[1]);
            } else {
              double exact = 0;
              for (int r = 0; r < n; ++r) exact += float(H::from_bits(xs[r]));
              want = H(float(exact)).bits;
            }
            wrong += recv[i].bits != want;
          }
          if (!in_place)
            for (size_t j = 0; j < count * n; ++j) wrong += send[j].bits != in(kind, me, j).bits;
        }
  EXPECT_EQ(world_sum(wrong), 0);
}

// The non-reducing ops carry half buffers as 16-bit words: every one of the 65536 patterns
// (NaNs with payloads, signalling-looking NaNs, -0, subnormals, infs) arrives unchanged
// through all_gather, broadcast (in place and out of place, async), send/recv, sendrecv
// and the async point-to-point forms.
TYPED_TEST(MpiHalf, NonReducingOpsKeepBits) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int n = c.size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t count = 65536;
  auto pattern = [](int r, size_t i) { return uint16_t(i + size_t(r) * 12345u); };
  auto make = [&](int r) {
    std::vector<H> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = H::from_bits(pattern(r, i));
    return v;
  };
  auto differs = [&](const H* got, int r) {
    long bad = 0;
    for (size_t i = 0; i < count; ++i) bad += got[i].bits != pattern(r, i);
    return bad;
  };
  long wrong = 0;
  const std::vector<H> mine = make(me);
  for (bool async : {false, true}) {
    std::vector<H> all(count * n);
    run(async, [&] { c.all_gather(mine.data(), all.data(), count, this->kType); },
        [&] { return c.all_gather_async(mine.data(), all.data(), count, this->kType); });
    for (int r = 0; r < n; ++r) wrong += differs(all.data() + r * count, r);
    for (int root = 0; root < n; ++root) {
      std::vector<H> buf = me == root ? make(root) : std::vector<H>(count);
      run(async, [&] { c.broadcast(buf.data(), count, this->kType, root); },
          [&] { return c.broadcast_async(buf.data(), count, this->kType, root); });
      wrong += differs(buf.data(), root);
    }
  }
  std::vector<H> out(count);
  c.broadcast(mine.data(), out.data(), count, this->kType, n - 1);
  wrong += differs(out.data(), n - 1);
  std::vector<H> got(count);
  c.sendrecv(mine.data(), got.data(), count, this->kType, next, prev, 5);
  wrong += differs(got.data(), prev);
  const int peer = me ^ 1;
  if (peer < n) {
    std::vector<H> in(count);
    if (me % 2 == 0) {
      c.send(mine.data(), count, this->kType, peer, 6);
      c.recv(in.data(), count, this->kType, peer, 6);
    } else {
      c.recv(in.data(), count, this->kType, peer, 6);
      c.send(mine.data(), count, this->kType, peer, 6);
    }
    wrong += differs(in.data(), peer);
  }
  std::vector<H> ain(count);
  auto hs = c.send_async(mine.data(), count, this->kType, next, 8);
  auto hr = c.recv_async(ain.data(), count, this->kType, prev, 8);
  hr->wait();
  hs->wait();
  wrong += differs(ain.data(), prev);
  wrong += differs(mine.data(), me);  // send buffers untouched
  EXPECT_EQ(world_sum(wrong), 0);
}

// A half reduction on a sub-group and on the self group (one rank: the input itself).
TYPED_TEST(MpiHalf, AllReduceOnSplitAndSelf) {
  using H = TypeParam;
  Communicator& c = *this->world_;
  const int me = c.rank();
  auto sub = c.split(me % 2, me, "parity");
  std::vector<H> x(1003), y(1003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = exact_input<H>(me, i);
  sub->all_reduce(x.data(), y.data(), x.size(), this->kType, ReduceOp::sum);
  long wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double exact = 0;
    for (int r = me % 2; r < c.size(); r += 2) exact += float(exact_input<H>(r, i));
    wrong += y[i].bits != H(float(exact)).bits;
  }
  auto self = make_mpi_self();
  self->all_reduce(x.data(), y.data(), x.size(), this->kType, ReduceOp::min);
  for (size_t i = 0; i < x.size(); ++i) wrong += y[i].bits != x[i].bits;
  EXPECT_EQ(world_sum(wrong), 0);
}

}  // namespace
}  // namespace dtb
