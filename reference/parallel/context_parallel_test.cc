// Context parallelism's attention core (reference/parallel/context_parallel.h) against the
// single-rank whole-sequence attention_forward / attention_backward, in the multi-rank binary
// (2 and 4 ranks: CP groups of 1, 2 and 4), p2p ring and all-gather, float and double; the causal
// work per rank; and three put-back bugs shown failing: the merge without the log-sum-exp
// correction, chunk positions without their offset, dK/dV not returned to their owner.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_block_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/error.h"
#include "reference/parallel/context_parallel.h"

namespace dtb {
namespace {

using cpu::test::AttentionBound;

struct Shape {
  int B = 2, Tn = 24, C = 12, NH = 3;  // Tn 24: chunks of 12, 6, 3 at CP 1, 2, 4
};

// The same inputs on every rank: U(-1, 1) rounded to float (the bound's |x| <= 1), so float and
// double runs see identical values.
std::vector<double> inputs(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = double(float(u(rng)));
  return v;
}

// CP groups of `cp` consecutive ranks; null when the world does not divide into them.
std::unique_ptr<Communicator> cp_group(Communicator& world, int cp) {
  if (world.size() % cp != 0) return nullptr;
  return world.split(world.rank() / cp, world.rank() % cp, "cp");
}

// One precision's full single-rank attention and its CP counterpart, gathered to the full layout.
template <typename T>
struct CpRun {
  std::vector<T> out, dqkv;          // whole-sequence op (B, Tn, C), (B, Tn, 3C)
  std::vector<T> cp_out, cp_lse, cp_dqkv;  // CP, gathered: (B, Tn, C), (B, Tn, NH), (B, Tn, 3C)
  std::vector<double> g;             // the probabilities' column sums (the bound's g_s)
  CpAttentionStats stats;
};

template <typename T>
CpRun<T> run(Communicator& group, const Shape& s, CpCommType type, CpFault fault = CpFault::none) {
  const int C = s.C, NH = s.NH, Tn = s.Tn, B = s.B;
  const std::vector<double> qkv_d = inputs(size_t(B) * Tn * 3 * C, 31), dout_d = inputs(size_t(B) * Tn * C, 32);
  const std::vector<T> qkv(qkv_d.begin(), qkv_d.end()), dout(dout_d.begin(), dout_d.end());
  CpRun<T> r;
  std::vector<T> att(size_t(B) * NH * Tn * Tn), scratch(att.size());
  r.out.resize(dout.size());
  r.dqkv.assign(qkv.size(), T(0));
  cpu::attention_forward(r.out.data(), att.data(), qkv.data(), B, Tn, C, NH);
  cpu::attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH);
  r.g = cpu::test::column_sums(att, B, NH, Tn);

  CpuOps<T> ops;
  CpuDevice dev;
  const CpSplit split = make_cp_split(group.size(), group.rank(), Tn);
  const int Tl = split.local_len();
  std::vector<T> lqkv(size_t(B) * Tl * 3 * C), ldout(size_t(B) * Tl * C), lout(ldout.size()),
      llse(size_t(B) * Tl * NH), ldqkv(lqkv.size(), T(0));
  cp_scatter_rows(ops, split, lqkv.data(), qkv.data(), B, 3 * C);
  cp_scatter_rows(ops, split, ldout.data(), dout.data(), B, C);
  const CpAttention<T> cpa{ops, dev, group, split, type, &r.stats, fault};
  context_parallel_attention_forward(cpa, lout.data(), llse.data(), lqkv.data(), B, C, NH);
  context_parallel_attention_backward(cpa, ldqkv.data(), ldout.data(), lqkv.data(), lout.data(), llse.data(), B, C, NH);
  r.cp_out.resize(r.out.size());
  r.cp_lse.resize(size_t(B) * Tn * NH);
  r.cp_dqkv.resize(r.dqkv.size());
  cp_gather_rows(ops, dev, group, split, r.cp_out.data(), lout.data(), B, C);
  cp_gather_rows(ops, dev, group, split, r.cp_lse.data(), llse.data(), B, NH);
  cp_gather_rows(ops, dev, group, split, r.cp_dqkv.data(), ldqkv.data(), B, 3 * C);
  return r;
}

template <typename T>
AttentionBound bound(const Shape& s, int cp) {
  // At most 2 cp key chunks merged per query row.
  return cpu::test::attention_bound(std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53, s.C / s.NH, s.Tn, 2 * cp);
}

struct Ratios {
  double out, dqkv;
};
template <typename T>
Ratios ratios(const CpRun<T>& r, const Shape& s, int cp) {
  const AttentionBound e = bound<T>(s, cp);
  return {cpu::test::out_ratio(r.cp_out, r.out, e),
          cpu::test::dqkv_ratio(r.cp_dqkv, r.dqkv, r.g, e, s.B, s.Tn, s.C, s.NH)};
}

class ContextParallel : public ::testing::TestWithParam<int> {};

template <typename T>
void check_against_full(Communicator& group, const Shape& s, const char* name) {
  const int cp = group.size();
  const CpRun<T> p2p = run<T>(group, s, CpCommType::p2p), ag = run<T>(group, s, CpCommType::all_gather);
  for (const CpRun<T>* r : {&p2p, &ag}) {
    const Ratios q = ratios(*r, s, cp);
    if (group.rank() == 0)
      std::printf("CP%d %s %s: out max err %.2e (%.4f of bound), dqkv max err %.2e (%.4f of bound)\n", cp, name,
                  r == &p2p ? "p2p" : "all_gather", cpu::test::max_abs_diff(r->cp_out, r->out), q.out,
                  cpu::test::max_abs_diff(r->cp_dqkv, r->dqkv), q.dqkv);
    EXPECT_LE(q.out, 1.0) << name;
    EXPECT_LE(q.dqkv, 1.0) << name;
  }
  // Same pairs in the same order: out, lse and dq bitwise; dk, dv the same partial sums added in
  // another order (the bound above holds them).
  EXPECT_EQ(p2p.cp_out, ag.cp_out) << name;
  EXPECT_EQ(p2p.cp_lse, ag.cp_lse) << name;
  int dq_differ = 0;
  for (size_t i = 0; i < p2p.cp_dqkv.size(); i++)
    if ((i / s.C) % 3 == 0 && p2p.cp_dqkv[i] != ag.cp_dqkv[i]) dq_differ++;
  EXPECT_EQ(dq_differ, 0) << name;
  if (group.rank() == 0)
    std::printf("CP%d %s p2p vs all_gather: out, lse, dq bitwise; dk/dv max diff %.2e\n", cp, name,
                cpu::test::max_abs_diff(p2p.cp_dqkv, ag.cp_dqkv));
}

TEST_P(ContextParallel, MatchesWholeSequenceAttention) {
  auto world = make_mpi_world();
  auto group = cp_group(*world, GetParam());
  if (!group) GTEST_SKIP() << "needs a world divisible into CP groups of " << GetParam();
  const Shape s;
  check_against_full<float>(*group, s, "float");
  check_against_full<double>(*group, s, "double");
  // double "tight": the worst-case bound is ~1e-13 here; measured ~1e-16.
  const CpRun<double> r = run<double>(*group, s, CpCommType::p2p);
  EXPECT_LT(cpu::test::max_abs_diff(r.cp_out, r.out), 1e-14);
  EXPECT_LT(cpu::test::max_abs_diff(r.cp_dqkv, r.dqkv), 1e-14);
}

// Grouped-query attention (NH 4 query heads on KV 2 key/value heads): CP with only the KV heads on
// the ring, repeated to the query heads where a block is attended and their dK/dV summed back,
// against the whole-sequence gqa_attention_forward / backward, double, p2p and all-gather; the
// ring's bytes are those of the KV heads (3 cp - 2 sends of a rank's K/V block under p2p:
// cp - 1 in forward, cp - 1 K/V and cp dK/dV in backward).
TEST_P(ContextParallel, GroupedQueryMatchesWholeSequence) {
  auto world = make_mpi_world();
  auto group = cp_group(*world, GetParam());
  if (!group) GTEST_SKIP() << "needs a world divisible into CP groups of " << GetParam();
  const int B = 2, Tn = 24, NH = 4, KV = 2, hs = 3, C = NH * hs, W = (NH + 2 * KV) * hs, cp = group->size();
  const std::vector<double> qkv = inputs(size_t(B) * Tn * W, 41), dout = inputs(size_t(B) * Tn * C, 42);
  std::vector<double> out(dout.size()), att(size_t(B) * NH * Tn * Tn), scratch(att.size()), dqkv(qkv.size(), 0.0);
  cpu::gqa_attention_forward(out.data(), att.data(), qkv.data(), B, Tn, NH, KV, hs);
  cpu::gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, NH, KV, hs);
  CpuOps<double> ops;
  CpuDevice dev;
  const CpSplit split = make_cp_split(cp, group->rank(), Tn);
  const int Tl = split.local_len();
  for (CpCommType type : {CpCommType::p2p, CpCommType::all_gather}) {
    std::vector<double> lqkv(size_t(B) * Tl * W), ldout(size_t(B) * Tl * C), lout(ldout.size()),
        llse(size_t(B) * Tl * NH), ldqkv(lqkv.size(), 0.0);
    cp_scatter_rows(ops, split, lqkv.data(), qkv.data(), B, W);
    cp_scatter_rows(ops, split, ldout.data(), dout.data(), B, C);
    CpAttentionStats stats;
    const CpAttention<double> cpa{ops, dev, *group, split, type, &stats};
    context_parallel_attention_forward(cpa, lout.data(), llse.data(), lqkv.data(), B, C, NH, KV);
    context_parallel_attention_backward(cpa, ldqkv.data(), ldout.data(), lqkv.data(), lout.data(), llse.data(), B, C,
                                        NH, KV);
    std::vector<double> cp_out(out.size()), cp_dqkv(dqkv.size());
    cp_gather_rows(ops, dev, *group, split, cp_out.data(), lout.data(), B, C);
    cp_gather_rows(ops, dev, *group, split, cp_dqkv.data(), ldqkv.data(), B, W);
    // As MatchesWholeSequenceAttention's double check: the worst-case bound is ~1e-13 here.
    EXPECT_LT(cpu::test::max_abs_diff(cp_out, out), 1e-14);
    EXPECT_LT(cpu::test::max_abs_diff(cp_dqkv, dqkv), 1e-14);
    const double kv_bytes = double(B) * Tl * 2 * KV * hs * sizeof(double);
    if (type == CpCommType::p2p) EXPECT_EQ(double(stats.bytes_sent), cp > 1 ? (3 * cp - 2) * kv_bytes : 0.0);
  }
}

// Every rank attends the same number of unmasked scores: chunk i meets i whole chunks and its own
// diagonal, so ranks r and 2cp-1-r together meet 2cp-1 whole chunks and two diagonals, Tn (Tn + 1)
// / (2 cp) scores each (a contiguous split would give rank r (2r + 1) Tn^2 / (2 cp^2) roughly:
// the last rank 2cp - 1 times the first's). Per pass (B rows and NH heads call the same pairs).
TEST_P(ContextParallel, CausalWorkIsEqualOnEveryRank) {
  auto world = make_mpi_world();
  const int cp = GetParam();
  auto group = cp_group(*world, cp);
  if (!group) GTEST_SKIP() << "needs a world divisible into CP groups of " << cp;
  const Shape s;
  for (CpCommType type : {CpCommType::p2p, CpCommType::all_gather}) {
    const CpRun<float> r = run<float>(*group, s, type);
    // Forward and backward each meet the same pairs: halve the counts for one pass.
    std::vector<double> d(size_t(3 * cp)), m = {double(r.stats.blocks_computed / 2),
                                                 double(r.stats.blocks_skipped / 2), double(r.stats.scores / 2)};
    group->all_gather(m.data(), d.data(), 3, DType::f64);
    const double contiguous_first = double(s.Tn / cp) * (s.Tn / cp + 1) / 2;  // rank 0's scores, contiguous split
    const double contiguous_last = contiguous_first + double(cp - 1) * (s.Tn / cp) * (s.Tn / cp);
    if (group->rank() == 0) {
      std::printf("CP%d %s per rank and pass: blocks computed/skipped, scores per (b, h):", cp,
                  to_string(type).c_str());
      for (int q = 0; q < cp; q++) std::printf(" [%g %g %g]", d[3 * q], d[3 * q + 1], d[3 * q + 2]);
      std::printf("; contiguous split: %g to %g; bytes sent by rank 0 (fwd+bwd): %zu\n", contiguous_first,
                  contiguous_last, r.stats.bytes_sent);
    }
    for (int q = 0; q < cp; q++) {
      // Of 4 cp pairs: chunk r meets r + 1 key chunks, chunk 2cp-1-r 2cp - r: 2cp + 1 in all.
      EXPECT_EQ(d[3 * q], 2 * cp + 1) << "rank " << q;
      EXPECT_EQ(d[3 * q + 1], 2 * cp - 1) << "rank " << q;
      EXPECT_EQ(d[3 * q + 2], double(s.Tn) * (s.Tn + 1) / (2 * cp)) << "rank " << q;
    }
    const size_t kv_bytes = size_t(s.B) * (s.Tn / cp) * 2 * s.C * sizeof(float);
    // p2p: cp - 1 K/V steps forward, cp - 1 K/V and cp dK/dV steps backward (0 at CP 1).
    const size_t p2p_bytes = cp == 1 ? 0 : kv_bytes * size_t(3 * cp - 2);
    EXPECT_EQ(r.stats.bytes_sent, type == CpCommType::p2p ? p2p_bytes : kv_bytes * size_t(3 * (cp - 1)));
  }
}

// The put-back bugs, each shown to break the comparison by orders of magnitude over its bound.
TEST_P(ContextParallel, PutBackBugsFail) {
  auto world = make_mpi_world();
  const int cp = GetParam();
  auto group = cp_group(*world, cp);
  if (!group || cp < 2) GTEST_SKIP() << "needs CP groups of " << cp << " >= 2";
  const Shape s;
  const Ratios ok = ratios(run<float>(*group, s, CpCommType::p2p), s, cp);
  const Ratios plain = ratios(run<float>(*group, s, CpCommType::p2p, CpFault::merge_without_lse), s, cp);
  const Ratios offset = ratios(run<float>(*group, s, CpCommType::p2p, CpFault::no_chunk_offset), s, cp);
  const Ratios owner = ratios(run<float>(*group, s, CpCommType::p2p, CpFault::dkv_not_returned), s, cp);
  const Ratios offset_ag = ratios(run<float>(*group, s, CpCommType::all_gather, CpFault::no_chunk_offset), s, cp);
  if (group->rank() == 0)
    std::printf("CP%d put-back bugs, error as a fraction of the bound (out, dqkv): correct %.3g %.3g; merge as a "
                "plain sum %.3g %.3g; no chunk offset %.3g %.3g (all_gather %.3g %.3g); dK/dV not returned %.3g "
                "%.3g\n",
                cp, ok.out, ok.dqkv, plain.out, plain.dqkv, offset.out, offset.dqkv, offset_ag.out, offset_ag.dqkv,
                owner.out, owner.dqkv);
  EXPECT_LE(ok.out, 1.0);
  EXPECT_GT(plain.out, 100.0);
  EXPECT_GT(offset.out, 100.0);
  EXPECT_GT(offset_ag.out, 100.0);
  EXPECT_LE(owner.out, 1.0) << "the forward is untouched by the backward's bug";
  EXPECT_GT(owner.dqkv, 100.0);
}

INSTANTIATE_TEST_SUITE_P(Cp, ContextParallel, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return "cp" + std::to_string(i.param); });

// The split: Megatron's worked order, the local/global maps, the row moves, the refusal.
TEST(ContextParallelSplit, ChunksPositionsAndRefusal) {
  const CpSplit r0 = make_cp_split(2, 0, 8), r1 = make_cp_split(2, 1, 8);
  std::vector<int> p0, p1;
  for (int t = 0; t < r0.local_len(); t++) p0.push_back(r0.global_position(t)), p1.push_back(r1.global_position(t));
  EXPECT_EQ(p0, (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(p1, (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(make_cp_split(4, 1, 16).chunk(1), 6);
  // Scatter then place on every rank's split gives the full tensor back, bitwise.
  CpuOps<float> ops;
  const int B = 2, Tn = 16, W = 3, cp = 4;
  std::vector<float> full(size_t(B) * Tn * W), back(full.size(), -1.f);
  for (size_t i = 0; i < full.size(); i++) full[i] = float(i);
  for (int q = 0; q < cp; q++) {
    const CpSplit sp = make_cp_split(cp, q, Tn);
    std::vector<float> local(size_t(B) * sp.local_len() * W);
    cp_scatter_rows(ops, sp, local.data(), full.data(), B, W);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < sp.local_len(); t++)
        EXPECT_EQ(local[(size_t(b) * sp.local_len() + t) * W], full[(size_t(b) * Tn + sp.global_position(t)) * W]);
    cp_place_rows(ops, sp, back.data(), local.data(), B, W);
  }
  EXPECT_EQ(back, full);
  try {
    make_cp_split(2, 0, 10);
    ADD_FAILURE() << "10 tokens over 2 * 2 chunks accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    EXPECT_NE(m.find("10"), std::string::npos) << m;
    EXPECT_NE(m.find("2 * context parallel size = 4"), std::string::npos) << m;
  }
  EXPECT_THROW(make_cp_split(0, 0, 8), InputError);
  EXPECT_THROW(make_cp_split(2, 2, 8), InputError);
}

}  // namespace
}  // namespace dtb
