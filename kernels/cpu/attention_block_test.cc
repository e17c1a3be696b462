// Tests of blockwise causal attention (kernels/cpu/attention_block.cc): queries and keys cut into
// blocks of uneven sizes, the key blocks visited in shuffled orders and merged by their
// log-sum-exp, equal the whole-sequence attention_forward / attention_backward within the bound
// of attention_block_test_util.h, in double and in float; fully masked blocks and the merge's
// exact cases are bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_block_test_util.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_test_util.h"

namespace dtb::cpu {
namespace {

using namespace dtb::cpu::test;

struct Span {
  int begin, len;
};

// Blocks of the given lengths laid end to end.
std::vector<Span> spans(const std::vector<int>& lens) {
  std::vector<Span> s;
  int p = 0;
  for (int n : lens) s.push_back({p, n}), p += n;
  return s;
}

struct Shape {
  int B, Tn, C, NH;
};

// Forward, then backward, of causal attention as (query block) x (key block) pairs, every pair
// called (fully masked ones too), the key blocks in `order` for each query block, merged into
// out (B, Tn, C), lse (B, Tn, NH). Per batch row: a block of rows is contiguous only within it.
template <typename T>
void blocked_attention(std::vector<T>& out, std::vector<T>& lse, std::vector<T>& dqkv, const std::vector<T>& qkv,
                       const std::vector<T>& dout, const Shape& s, const std::vector<Span>& qb,
                       const std::vector<Span>& kb) {
  const int C = s.C, NH = s.NH, C3 = 3 * C, Tn = s.Tn;
  out.assign(size_t(s.B) * Tn * C, T(0));
  lse.assign(size_t(s.B) * Tn * NH, -std::numeric_limits<T>::infinity());
  dqkv.assign(qkv.size(), T(0));
  std::vector<T> bout(size_t(Tn) * C), blse(size_t(Tn) * NH), scratch(2 * size_t(Tn) * Tn + Tn);
  for (int b = 0; b < s.B; b++) {
    const T* x = qkv.data() + size_t(b) * Tn * C3;
    for (const Span& q : qb) {
      const size_t ro = size_t(b) * Tn + q.begin;
      for (const Span& k : kb) {
        attention_block_forward(bout.data(), blse.data(), scratch.data(), x + size_t(q.begin) * C3, C3,
                                x + size_t(k.begin) * C3 + C, x + size_t(k.begin) * C3 + 2 * C, C3, 1, q.len, k.len,
                                C, NH, q.begin, k.begin);
        attention_merge(out.data() + ro * C, lse.data() + ro * NH, bout.data(), blse.data(), q.len, C, NH);
      }
    }
    T* dx = dqkv.data() + size_t(b) * Tn * C3;
    for (const Span& q : qb) {
      const size_t ro = size_t(b) * Tn + q.begin;
      for (const Span& k : kb) {
        attention_block_backward(dx + size_t(q.begin) * C3, dx + size_t(k.begin) * C3 + C,
                                 dx + size_t(k.begin) * C3 + 2 * C, scratch.data(), dout.data() + ro * C,
                                 out.data() + ro * C, lse.data() + ro * NH, x + size_t(q.begin) * C3, C3,
                                 x + size_t(k.begin) * C3 + C, x + size_t(k.begin) * C3 + 2 * C, C3, 1, q.len, k.len,
                                 C, NH, q.begin, k.begin);
      }
    }
  }
}

// lse (B, Tn, NH) by its definition, in double.
Vec lse_by_definition(const Vec& qkv, const Shape& s) {
  const int C = s.C, NH = s.NH, hs = C / NH, Tn = s.Tn;
  Vec lse(size_t(s.B) * Tn * NH);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < Tn; t++) {
        double z = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          double d = 0;
          for (int i = 0; i < hs; i++)
            d += qkv[(size_t(b) * Tn + t) * 3 * C + h * hs + i] * qkv[(size_t(b) * Tn + t2) * 3 * C + C + h * hs + i];
          z += std::exp(d / std::sqrt(double(hs)));
        }
        lse[(size_t(b) * Tn + t) * NH + h] = std::log(z);
      }
  return lse;
}

// Uneven query blocks (one of a single row) and key blocks, several key orders.
TEST(AttentionBlock, KeyBlocksInAnyOrderMergeToFullAttention) {
  Rng rng(21);
  const Shape s{2, 24, 12, 3};
  const int hs = s.C / s.NH;
  const Vec qkv = uniform_f(size_t(s.B) * s.Tn * 3 * s.C, rng), dout = uniform_f(size_t(s.B) * s.Tn * s.C, rng);
  // The whole-sequence op in double and in float: the reference of each precision.
  Vec out_d(dout.size()), att_d(size_t(s.B) * s.NH * s.Tn * s.Tn), dqkv_d(qkv.size(), 0.0), scr_d(att_d.size());
  attention_forward(out_d.data(), att_d.data(), qkv.data(), s.B, s.Tn, s.C, s.NH);
  attention_backward(dqkv_d.data(), scr_d.data(), dout.data(), qkv.data(), att_d.data(), s.B, s.Tn, s.C, s.NH);
  const FVec qkv_f = to_float(qkv), dout_f = to_float(dout);
  FVec out_f(dout.size()), att_f(att_d.size()), dqkv_f(qkv.size(), 0.f), scr_f(att_d.size());
  attention_forward(out_f.data(), att_f.data(), qkv_f.data(), s.B, s.Tn, s.C, s.NH);
  attention_backward(dqkv_f.data(), scr_f.data(), dout_f.data(), qkv_f.data(), att_f.data(), s.B, s.Tn, s.C, s.NH);
  const std::vector<double> g = column_sums(att_d, s.B, s.NH, s.Tn);
  const Vec lse_ref = lse_by_definition(qkv, s);

  const std::vector<Span> qb = spans({7, 1, 10, 6});
  std::vector<Span> kb = spans({5, 7, 1, 8, 3});
  const int m = int(kb.size());
  const AttentionBound ed = attention_bound(0x1p-53, hs, s.Tn, m), ef = attention_bound(0x1p-24, hs, s.Tn, m);
  for (int order = 0; order < 4; order++) {
    if (order == 1) std::reverse(kb.begin(), kb.end());
    if (order >= 2) std::shuffle(kb.begin(), kb.end(), rng);
    Vec out, lse, dqkv;
    blocked_attention(out, lse, dqkv, qkv, dout, s, qb, kb);
    FVec outf, lsef, dqkvf;
    blocked_attention(outf, lsef, dqkvf, qkv_f, dout_f, s, qb, kb);
    const double ro = out_ratio(out, out_d, ed), rg = dqkv_ratio(dqkv, dqkv_d, g, ed, s.B, s.Tn, s.C, s.NH);
    const double rof = out_ratio(outf, out_f, ef), rgf = dqkv_ratio(dqkvf, dqkv_f, g, ef, s.B, s.Tn, s.C, s.NH);
    std::printf("order %d: double out %.2e (%.3f of bound) dqkv %.2e (%.3f); float out %.2e (%.3f) dqkv %.2e (%.3f)\n",
                order, max_abs_diff(out, out_d), ro, max_abs_diff(dqkv, dqkv_d), rg, max_abs_diff(outf, out_f), rof,
                max_abs_diff(dqkvf, dqkv_f), rgf);
    EXPECT_LE(ro, 1.0);
    EXPECT_LE(rg, 1.0);
    EXPECT_LE(rof, 1.0);
    EXPECT_LE(rgf, 1.0);
    EXPECT_LE(max_abs_diff(lse, lse_ref), ed.eps_p);
    EXPECT_LE(max_abs_diff(lsef, lse_ref), ef.eps_p);
    EXPECT_LT(max_abs_diff(out, out_d), 1e-14);  // double: "tight", ~1e-16 measured
    EXPECT_LT(max_abs_diff(dqkv, dqkv_d), 1e-13);
  }
}

// A block whose every key lies after every query: out 0, lse -inf; merging it leaves the result
// bitwise as it was, and its backward adds nothing. Rows of a partly masked block whose keys all
// lie ahead get -inf too. And B > 1 in one call is the per-row calls, bitwise.
TEST(AttentionBlock, FullyMaskedBlocksAreExactNoOps) {
  Rng rng(22);
  const int B = 2, Tq = 4, Tk = 5, C = 8, NH = 2;
  const Vec q = uniform(size_t(B) * Tq * C, rng), kv = uniform(size_t(B) * Tk * 2 * C, rng);
  const Vec dout = uniform(size_t(B) * Tq * C, rng);
  Vec out(size_t(B) * Tq * C, kNaN), lse(size_t(B) * Tq * NH, kNaN), scratch(2 * Tq * Tk + Tq);
  // Queries at 10..13, keys at 14..18: every score masked.
  attention_block_forward(out.data(), lse.data(), scratch.data(), q.data(), C, kv.data(), kv.data() + C, 2 * C, B, Tq,
                          Tk, C, NH, 10, 14);
  for (double x : out) EXPECT_EQ(x, 0.0);
  for (double x : lse) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
  Vec acc = uniform(out.size(), rng), acc_lse = uniform(lse.size(), rng);
  const Vec acc0 = acc, lse0 = acc_lse;
  attention_merge(acc.data(), acc_lse.data(), out.data(), lse.data(), B * Tq, C, NH);
  EXPECT_EQ(acc, acc0);
  EXPECT_EQ(acc_lse, lse0);
  // ... and merged into the empty start (out 0, lse -inf) a block comes through bitwise.
  Vec empty(acc.size(), 0.0), empty_lse(lse.size(), -std::numeric_limits<double>::infinity());
  attention_merge(empty.data(), empty_lse.data(), acc0.data(), lse0.data(), B * Tq, C, NH);
  EXPECT_EQ(empty, acc0);
  EXPECT_EQ(empty_lse, lse0);
  Vec dq(q.size(), 0.5), dkv(kv.size(), 0.25);
  const Vec dq0 = dq, dkv0 = dkv;
  attention_block_backward(dq.data(), dkv.data(), dkv.data() + C, scratch.data(), dout.data(), acc0.data(),
                           lse0.data(), q.data(), C, kv.data(), kv.data() + C, 2 * C, B, Tq, Tk, C, NH, 10, 14);
  EXPECT_EQ(dq, dq0);
  EXPECT_EQ(dkv, dkv0);

  // Queries at 10..13, keys at 12..16: rows 0 and 1 see keys 12.. only from row 2 on.
  attention_block_forward(out.data(), lse.data(), scratch.data(), q.data(), C, kv.data(), kv.data() + C, 2 * C, B, Tq,
                          Tk, C, NH, 10, 12);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tq; t++)
      for (int h = 0; h < NH; h++) {
        const double l = lse[(size_t(b) * Tq + t) * NH + h];
        if (t < 2) {
          EXPECT_EQ(l, -std::numeric_limits<double>::infinity());
        } else {
          EXPECT_TRUE(std::isfinite(l));
        }
      }
  Vec out1(out.size()), lse1(lse.size());
  for (int b = 0; b < B; b++)
    attention_block_forward(out1.data() + size_t(b) * Tq * C, lse1.data() + size_t(b) * Tq * NH, scratch.data(),
                            q.data() + size_t(b) * Tq * C, C, kv.data() + size_t(b) * Tk * 2 * C,
                            kv.data() + size_t(b) * Tk * 2 * C + C, 2 * C, 1, Tq, Tk, C, NH, 10, 12);
  EXPECT_EQ(out1, out);
  EXPECT_EQ(lse1, lse);
}

}  // namespace
}  // namespace dtb::cpu
