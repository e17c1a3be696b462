// Tests of the CPU attention ops (kernels/cpu/attention.cc): the backward against central
// finite differences in double, accumulation, the forward against its loop-by-loop
// definition, the causal mask, and threads bitwise as one. Float against double for every
// op is in ops_test.cc (FloatVsDouble).
#include "kernels/cpu/ops.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/ops_test_util.h"

namespace dtb::cpu {
namespace {

using namespace dtb::cpu::test;

// ---------------------------------------------------------------- finite differences

// T = 150 spans three of the ops' 64-position blocks, the last one partial (kernels/cpu/attention.cc,
// kAttBlock): the products run per block up to the diagonal. There L sums 2400 products, |L|
// <= ~300, so rounding gives ~7e-9 relative: kFdTol still holds with two orders of margin.
class AttentionT : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Blocks, AttentionT, ::testing::Values(5, 150));

TEST_P(AttentionT, FiniteDifference) {
  Rng rng(4);
  const int B = 2, T = GetParam(), C = 8, NH = 2;
  // U(-1.5, 1.5) gives scaled scores up to ~+-4, so the softmax is far from uniform and the
  // gradient's softmax path matters; L''' stays O(10).
  Vec qkv = uniform(B * T * 3 * C, rng, -1.5, 1.5), dout = uniform(B * T * C, rng);
  Vec out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(dout, out);
  };
  loss();
  Vec dqkv(qkv.size(), 0.0), scratch(B * NH * T * T, kNaN);  // NaN: scratch must not be read
  attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                     NH);
  const double err = fd_rel_err(qkv, dqkv, loss, rng);
  report("fd check attention", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

// ---------------------------------------------------------------- accumulation

TEST(Backward, AttentionAccumulates) {
  Rng rng(9);
  const int B = 2, T = 5, C = 8, NH = 2;
  Vec qkv = uniform(B * T * 3 * C, rng), dout = uniform(B * T * C, rng);
  Vec out(B * T * C), att(B * NH * T * T), scratch(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  auto bw = [&](std::vector<Vec*> g) {
    attention_backward(g[0]->data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                       NH);
  };
  EXPECT_LE(accum_err(bw, {Vec(qkv.size(), 0.0)}), kAccumTol);
}

// ---------------------------------------------------------------- forwards

// so it errs <= hs u 16 / 2 = 32 u absolute, and subtracting the max adds u |s - max| <= 16 u:
// 48 u, a relative error of exp's result, which enters numerator and normaliser alike. exp and
// the normalisation over <= T terms add (T + 3) u relative; att <= 1, so |att err| <= (2 48 +
// T + 3) u per side, twice that between the two sides: tol_att = 2 (99 + T) u (T = 6: 2.4e-14,
// T = 150: 5.5e-14). out = sum att v with |v| <= 2 and sum att = 1: per side |err| <= 2 (99 +
// T) u + 2 T u, both sides: tol_out = 4 (99 + 2 T) u (T = 6: 4.7e-14; T = 150: 1.8e-13). T 150
// spans three of the op's 64-position blocks (kernels/cpu/attention.cc).
TEST_P(AttentionT, MatchesDefinition) {
  Rng rng(13);
  const int B = 2, T = GetParam() == 5 ? 6 : GetParam(), C = 12, NH = 3, hs = C / NH;
  const double u = 0x1p-53, tol_att = 2 * (99 + T) * u, tol_out = 4 * (99 + 2 * T) * u;
  Vec qkv = uniform(B * T * 3 * C, rng, -2.0, 2.0), out(B * T * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(b * T + t) * 3 * C + part * C + h * hs + i];
  };
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        Vec p(t + 1);
        double z = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          double s = 0;
          for (int i = 0; i < hs; i++) s += at(b, t, 0, h, i) * at(b, t2, 1, h, i);
          p[t2] = std::exp(s / std::sqrt(double(hs)));
          z += p[t2];
        }
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int t2 = 0; t2 <= t; t2++) o += p[t2] / z * at(b, t2, 2, h, i);
          EXPECT_NEAR(out[(b * T + t) * C + h * hs + i], o, tol_out);
        }
        for (int t2 = 0; t2 <= t; t2++) {
          EXPECT_NEAR(att[((b * NH + h) * T + t) * T + t2], p[t2] / z, tol_att);
        }
      }
    }
  }
}

TEST(Attention, CausalMask) {
  Rng rng(14);
  const int B = 2, T = 7, C = 8, NH = 2, C3 = 3 * C;
  Vec qkv = uniform(B * T * C3, rng, -2.0, 2.0), out(B * T * C), att(B * NH * T * T, kNaN);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int r = 0; r < B * NH * T; r++) {
    const int t = r % T;
    double sum = 0;
    for (int t2 = 0; t2 < T; t2++) {
      if (t2 > t) {
        EXPECT_EQ(att[r * T + t2], 0.0) << "row " << r << " col " << t2;
      }
      sum += att[r * T + t2];
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);  // <= T terms of rounding, ~T eps_double
  }
  // Changing every input at positions > t leaves outputs at positions <= t bit-identical:
  // the masked weights are exact zeros, and x + 0 * finite == x exactly.
  for (int t = 0; t + 1 < T; t++) {
    Vec q2 = qkv, out2(out.size()), att2(att.size());
    for (int b = 0; b < B; b++) {
      for (int i = (b * T + t + 1) * C3; i < (b + 1) * T * C3; i++) q2[i] += 0.5;
    }
    attention_forward(out2.data(), att2.data(), q2.data(), B, T, C, NH);
    for (int b = 0; b < B; b++) {
      for (int i = 0; i < (t + 1) * C; i++) EXPECT_EQ(out[b * T * C + i], out2[b * T * C + i]);
      // ... and the perturbation is real: the next position does see it.
      EXPECT_NE(out[(b * T + t + 1) * C], out2[(b * T + t + 1) * C]);
    }
  }
}

// With OpenBLAS allowed 2 threads, attention runs its (batch, head) pairs on 2 threads, each
// pair's products on one OpenBLAS thread (kernels/cpu/attention.cc, for_each_head): the results
// must be bitwise those of 1 thread, in float, forward and backward, across 4 blocks (the
// last partial). Big enough to be threaded: 2 B NH T^2 hs = 3.1e7 flops >= the 2e7 cut.
TEST(Attention, TwoThreadsBitwiseAsOne) {
  Rng rng(15);
  const int B = 4, T = 200, C = 96, NH = 3;
  const FVec qkv = to_float(uniform(B * T * 3 * C, rng, -2.0, 2.0)), dout = to_float(uniform(B * T * C, rng));
  auto run = [&](int threads, FVec& out, FVec& dqkv) {
    openblas_set_num_threads(threads);
    FVec att(B * NH * T * T), scratch(B * NH * T * T);
    out.assign(B * T * C, 0.0f);
    dqkv.assign(qkv.size(), 0.0f);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  };
  const int saved = openblas_get_num_threads();
  FVec out1, d1, out2, d2;
  run(1, out1, d1);
  run(2, out2, d2);
  EXPECT_EQ(openblas_get_num_threads(), 2);  // the region restores OpenBLAS's count
  openblas_set_num_threads(saved);
  expect_bitwise_eq("attention forward, 2 threads", out2, out1);
  expect_bitwise_eq("attention backward, 2 threads", d2, d1);
}

}  // namespace
}  // namespace dtb::cpu
