// Tests of HalfCpuOps<H>'s Llama-block and blockwise-attention ops (half_llama_ops.cc), H =
// bf16 and fp16. Each op twice: bitwise its recipe (the float kernel on the widened inputs,
// each H output rounded once, the A outputs rstd and lse not rounded; shapes crossing the
// conversion chunks, strided packed layouts for the blockwise ops), and within a derived
// error bound of the double kernel on the same (exactly widened) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/attention_block_test_util.h"
#include "kernels/cpu/half_ops.h"
#include "kernels/cpu/half_ops_test_util.h"
#include "kernels/cpu/ops.h"

namespace dtb {
namespace {

using namespace half_test;
using DVec = std::vector<double>;

// The error bounds. The half op's output is round_H(y_f), y_f the float kernel's result, so
// against the double kernel's y_d (whose own error, ~2^-53 relative, is below every term here):
//   |round_H(y_f) - y_d| <= |round_H(y_f) - y_f| + |y_f - y_d| <= u_H |y_d| + (1 + u_H) e_f + eta_H,
// with u_H the unit roundoff of H (round to nearest: 2^-8 for bf16's 8 significand bits, 2^-11
// for fp16's 11), eta_H half the spacing of H's subnormals (2^-25 for fp16, 2^-134 for bf16:
// the absolute error of a result that rounds below the smallest normal), and e_f >= |y_f - y_d|
// the float kernel's error, derived per op below to first order in u = 2^-24 (gamma_n ~ n u,
// Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Sec. 3.1). The A outputs
// (rstd, lse) are not rounded to H, so e_f alone bounds them: a rounding to H would be off by up
// to u_H relative, 2^16 (bf16) or 2^13 (fp16) times u.
constexpr double kU = 0x1p-24;
template <typename H>
constexpr double kUH = std::is_same_v<H, bf16> ? 0x1p-8 : 0x1p-11;
template <typename H>
constexpr double kEtaH = std::is_same_v<H, bf16> ? 0x1p-134 : 0x1p-25;

// |got[i] - want[i]| <= tol(i) for every i; else the count, the worst ratio and where.
template <typename X, typename Tol>
::testing::AssertionResult within(const std::vector<X>& got, const DVec& want, Tol tol) {
  size_t bad = 0, worst_i = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = std::abs(double(got[i]) - want[i]) / tol(i);
    if (!(r <= 1)) ++bad;
    if (!(r <= worst)) worst = r, worst_i = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess() << "worst |err| / bound " << worst;
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " outside the bound; worst |err| / bound "
                                       << worst << " at " << worst_i << ": got " << double(got[worst_i]) << ", want "
                                       << want[worst_i] << ", bound " << tol(worst_i);
}
// The H output's bound: u_H |y_d| + (1 + u_H) e_f(i) + eta_H.
template <typename H, typename Ef>
auto half_tol(const DVec& want, Ef e_f) {
  return [&want, e_f](size_t i) { return kUH<H> * std::abs(want[i]) + (1 + kUH<H>) * e_f(i) + kEtaH<H>; };
}

template <typename H>
DVec to_d(const std::vector<H>& v) {
  DVec d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = double(float(v[i]));
  return d;
}

template <typename H>
class HalfLlamaOps : public ::testing::Test {
 protected:
  HalfCpuOps<H> ops;
  Rng rng{7};
};
TYPED_TEST_SUITE(HalfLlamaOps, HalfTypes, HalfNames);

// ---- RMSNorm ----

TYPED_TEST(HalfLlamaOps, RmsnormIsTheFloatKernelRoundedOnce) {
  using H = TypeParam;
  Rng& rng = this->rng;
  for (int N : {6, 5000}) {  // 5000 rows of 16 cross the row chunks
    const int C = 16;
    const float eps = 1e-5f;
    SCOPED_TRACE("N " + std::to_string(N));
    const size_t NC = size_t(N) * C;
    const HVec<H> inp = rand_h<H>(NC, rng, -2.f, 2.f), w = rand_h<H>(C, rng, 0.5f, 1.5f);
    HVec<H> out = rand_h<H>(NC, rng);
    FVec rstd(N, -7.f);
    this->ops.rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), eps, N, C);
    FVec of(NC), rf(N), inpf = widen(inp), wf = widen(w);
    cpu::rmsnorm_forward<float>(of.data(), rf.data(), inpf.data(), wf.data(), eps, N, C);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));
    EXPECT_TRUE(same_bits(rstd, rf));  // A: not rounded to H

    const HVec<H> dout = rand_h<H>(NC, rng);
    HVec<H> dinp = rand_h<H>(NC, rng), dw = rand_h<H>(C, rng);
    FVec dinpf = widen(dinp), dwf = widen(dw), doutf = widen(dout);
    this->ops.rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    cpu::rmsnorm_backward<float>(dinpf.data(), dwf.data(), doutf.data(), inpf.data(), wf.data(), rf.data(), N, C);
    EXPECT_TRUE(same_bits(dinp, round_to<H>(dinpf)));
    EXPECT_TRUE(same_bits(dw, round_to<H>(dwf)));  // one rounding for all N rows' sum
  }
}

// RMSNorm's float error (C = 16 channels, N rows): the mean square sums C rounded squares (each
// term through <= C additions) and divides: (C + 2) u relative; + eps, sqrt and reciprocal halve
// it and add 2 u: rstd errs eps_r = (C/2 + 4) u relative; out = (x rstd) w two more roundings,
// (C/2 + 6) u. The backward, from the float rstd (eps_r): dinp += rstd (w d - xhat m), xhat = x
// rstd, m = mean(w d xhat): rstd enters three times (rstd, xhat, m), m's sum C + 5 roundings, the
// rest ~7: e_f <= (3 eps_r + (C + 12) u) M, M = |dinp0| + rstd (|w d| + |xhat| mean|w d xhat|)
// (the difference may cancel, so the bound is on the terms' magnitudes). dweight += sum over N
// rows of xhat d, in order: e_f <= (eps_r + (N + 4) u) (|dweight0| + sum |xhat d|).
TYPED_TEST(HalfLlamaOps, RmsnormAgreesWithTheDoubleKernel) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int N = 300, C = 16;
  const float eps = 1e-5f;
  const size_t NC = size_t(N) * C;
  const HVec<H> inp = rand_h<H>(NC, rng, -2.f, 2.f), w = rand_h<H>(C, rng, 0.5f, 1.5f), dout = rand_h<H>(NC, rng);
  HVec<H> out(NC), dinp = rand_h<H>(NC, rng), dw = rand_h<H>(C, rng);
  const DVec xd = to_d(inp), wd = to_d(w), dd = to_d(dout), dinp0 = to_d(dinp), dw0 = to_d(dw);
  FVec rstd(N);
  DVec od(NC), rd(N), dinpd = dinp0, dwd = dw0;
  this->ops.rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), eps, N, C);
  cpu::rmsnorm_forward<double>(od.data(), rd.data(), xd.data(), wd.data(), double(eps), N, C);
  const double eps_r = (C / 2.0 + 4) * kU;
  EXPECT_TRUE(within(out, od, half_tol<H>(od, [&](size_t i) { return (C / 2.0 + 6) * kU * std::abs(od[i]); })));
  EXPECT_TRUE(within(rstd, rd, [&](size_t n) { return eps_r * rd[n]; }));

  this->ops.rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
  cpu::rmsnorm_backward<double>(dinpd.data(), dwd.data(), dd.data(), xd.data(), wd.data(), rd.data(), N, C);
  DVec M(NC), S(C);
  for (int n = 0; n < N; ++n) {
    double m_abs = 0;
    for (int i = 0; i < C; ++i) m_abs += std::abs(wd[i] * dd[n * C + i] * xd[n * C + i] * rd[n]) / C;
    for (int i = 0; i < C; ++i) {
      const size_t j = size_t(n) * C + i;
      const double xhat = xd[j] * rd[n];
      M[j] = std::abs(dinp0[j]) + rd[n] * (std::abs(wd[i] * dd[j]) + std::abs(xhat) * m_abs);
      S[i] += std::abs(xhat * dd[j]);
    }
  }
  for (int i = 0; i < C; ++i) S[i] += std::abs(dw0[i]);
  EXPECT_TRUE(within(dinp, dinpd, half_tol<H>(dinpd, [&](size_t j) { return (3 * eps_r + (C + 12) * kU) * M[j]; })));
  EXPECT_TRUE(within(dw, dwd, half_tol<H>(dwd, [&](size_t i) { return (eps_r + (N + 4) * kU) * S[i]; })));
}

// ---- SwiGLU ----

TYPED_TEST(HalfLlamaOps, SwigluIsTheFloatKernelRoundedOnce) {
  using H = TypeParam;
  Rng& rng = this->rng;
  for (int N : {5, 3000}) {  // 3000 rows of 2F = 24 cross the row chunks
    const int F = 12;
    SCOPED_TRACE("N " + std::to_string(N));
    const HVec<H> inp = rand_h<H>(size_t(N) * 2 * F, rng, -4.f, 4.f), dout = rand_h<H>(size_t(N) * F, rng);
    HVec<H> out = rand_h<H>(size_t(N) * F, rng);  // garbage: forward writes
    this->ops.swiglu_forward(out.data(), inp.data(), N, F);
    FVec of(size_t(N) * F), inpf = widen(inp), doutf = widen(dout);
    cpu::swiglu_forward<float>(of.data(), inpf.data(), N, F);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));

    HVec<H> dinp = rand_h<H>(size_t(N) * 2 * F, rng);
    FVec dinpf = widen(dinp);
    this->ops.swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    cpu::swiglu_backward<float>(dinpf.data(), inpf.data(), doutf.data(), N, F);
    EXPECT_TRUE(same_bits(dinp, round_to<H>(dinpf)));
  }
}

// SwiGLU's float error per element (|gate| <= 4, no clamping): e = exp(-g) errs 4 u (the clamped
// float exp, kernels/cpu/ops_common.h), 1 + e and the reciprocal 2 u more, and e's error is
// scaled by e / (1 + e) <= 1: sig errs 6 u; g sig up two roundings: out e_f <= 8 u |out|. The
// backward: d gate += d up sig (1 + g e sig): e sig 11 u, times g 12 u, 1 + . may cancel (silu'
// has a zero near g = -1.28), so absolute: <= 14 u sig (1 + |g| e sig) before the two products
// and the accumulation: e_f <= 17 u (|dgate0| + |d up| sig (1 + |g| e sig)). d up += d g sig:
// e_f <= 9 u (|dup0| + |d g sig|).
TYPED_TEST(HalfLlamaOps, SwigluAgreesWithTheDoubleKernel) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int N = 200, F = 16;
  const HVec<H> inp = rand_h<H>(size_t(N) * 2 * F, rng, -4.f, 4.f), dout = rand_h<H>(size_t(N) * F, rng);
  HVec<H> out(size_t(N) * F), dinp = rand_h<H>(size_t(N) * 2 * F, rng);
  const DVec xd = to_d(inp), dd = to_d(dout), dinp0 = to_d(dinp);
  DVec od(size_t(N) * F), dinpd = dinp0;
  this->ops.swiglu_forward(out.data(), inp.data(), N, F);
  cpu::swiglu_forward<double>(od.data(), xd.data(), N, F);
  EXPECT_TRUE(within(out, od, half_tol<H>(od, [&](size_t i) { return 8 * kU * std::abs(od[i]); })));

  this->ops.swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
  cpu::swiglu_backward<double>(dinpd.data(), xd.data(), dd.data(), N, F);
  DVec S(dinpd.size());
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < F; ++i) {
      const size_t gi = size_t(n) * 2 * F + i, ui = gi + F;
      const double g = xd[gi], up = xd[ui], d = dd[size_t(n) * F + i], e = std::exp(-g), sig = 1 / (1 + e);
      S[gi] = 17 * kU * (std::abs(dinp0[gi]) + std::abs(d * up) * sig * (1 + std::abs(g) * e * sig));
      S[ui] = 9 * kU * (std::abs(dinp0[ui]) + std::abs(d * g * sig));
    }
  }
  EXPECT_TRUE(within(dinp, dinpd, half_tol<H>(dinpd, [&](size_t i) { return S[i]; })));
}

// ---- rotary embeddings ----

struct RopeShape {
  int B, Tn, NH, KV, hs, pos0;
};
// The second shape's sequences do not fit one chunk: several runs of positions per sequence.
constexpr RopeShape kRopeShapes[] = {{2, 7, 4, 2, 8, 5}, {2, 300, 8, 2, 32, 1000}};

TYPED_TEST(HalfLlamaOps, RopeIsTheFloatKernelRoundedOnceAndLeavesV) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const double theta = 10000.0;
  for (const RopeShape& s : kRopeShapes) {
    SCOPED_TRACE("T " + std::to_string(s.Tn));
    const size_t W = size_t(s.NH + 2 * s.KV) * s.hs, n = size_t(s.B) * s.Tn * W;
    for (bool forward : {true, false}) {
      SCOPED_TRACE(forward ? "forward" : "backward");
      const HVec<H> x0 = rand_h<H>(n, rng, -2.f, 2.f);
      HVec<H> x = x0;
      FVec xf = widen(x0);
      if (forward) {
        this->ops.rope_forward(x.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
        cpu::rope_forward<float>(xf.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
      } else {
        this->ops.rope_backward(x.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
        cpu::rope_backward<float>(xf.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
      }
      EXPECT_TRUE(same_bits(x, round_to<H>(xf)));
      size_t v_changed = 0;
      for (size_t r = 0; r < n / W; ++r)
        for (size_t j = size_t(s.NH + s.KV) * s.hs; j < W; ++j) v_changed += x[r * W + j].bits != x0[r * W + j].bits;
      EXPECT_EQ(v_changed, 0u) << "the v heads are not rotated";
    }
  }
}

// RoPE's float error per element: the angle is the same double in both kernels; cos and sin
// rounded to float err u each, the two products u, the sum u: e_f <= 3 u (|x1 cos| + |x2 sin|)
// for the pair's (x1, x2) (first order). The v heads are untouched: exact.
TYPED_TEST(HalfLlamaOps, RopeAgreesWithTheDoubleKernel) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const double theta = 10000.0;
  const RopeShape s = kRopeShapes[0];
  const int half = s.hs / 2;
  const size_t W = size_t(s.NH + 2 * s.KV) * s.hs, n = size_t(s.B) * s.Tn * W;
  for (bool forward : {true, false}) {
    SCOPED_TRACE(forward ? "forward" : "backward");
    HVec<H> x = rand_h<H>(n, rng, -2.f, 2.f);
    const DVec x0 = to_d(x);
    DVec xd = x0, S(n, 0.0);
    if (forward) {
      this->ops.rope_forward(x.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
      cpu::rope_forward<double>(xd.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
    } else {
      this->ops.rope_backward(x.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
      cpu::rope_backward<double>(xd.data(), s.B, s.Tn, s.NH, s.KV, s.hs, s.pos0, theta);
    }
    for (size_t r = 0; r < n / W; ++r) {
      const int t = int(r % size_t(s.Tn));
      for (int h = 0; h < s.NH + s.KV; ++h) {
        for (int i = 0; i < half; ++i) {
          const double a = double(s.pos0 + t) / std::pow(theta, double(2 * i) / double(s.hs));
          const size_t j1 = r * W + size_t(h) * s.hs + i, j2 = j1 + half;
          const double m = std::abs(x0[j1] * std::cos(a)) + std::abs(x0[j2] * std::sin(a));
          const double m2 = std::abs(x0[j2] * std::cos(a)) + std::abs(x0[j1] * std::sin(a));
          S[j1] = 3 * kU * m;
          S[j2] = 3 * kU * m2;
        }
      }
    }
    // S = 0 on the v heads, which the op leaves as they are (the bitwise test checks them exactly).
    EXPECT_TRUE(within(x, xd, half_tol<H>(xd, [&](size_t i) { return S[i]; })));
  }
}

// ---- grouped-query attention ----

struct GqaShape {
  int B, Tn, NH, KV, hs;
};

TYPED_TEST(HalfLlamaOps, GqaAttentionIsTheFloatKernelRoundedOnce) {
  using H = TypeParam;
  Rng& rng = this->rng;
  // The second shape's batch entries do not fit one chunk: several chunks per call.
  for (GqaShape s : {GqaShape{2, 8, 4, 2, 4}, GqaShape{6, 64, 4, 1, 8}}) {
    SCOPED_TRACE("B " + std::to_string(s.B) + " T " + std::to_string(s.Tn) + " KV " + std::to_string(s.KV));
    const size_t nq = size_t(s.B) * s.Tn * (s.NH + 2 * s.KV) * s.hs, no = size_t(s.B) * s.Tn * s.NH * s.hs;
    const size_t na = size_t(s.B) * s.NH * s.Tn * s.Tn;
    const HVec<H> qkv = rand_h<H>(nq, rng, -2.f, 2.f);
    HVec<H> out = rand_h<H>(no, rng), att = rand_h<H>(na, rng);
    this->ops.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.Tn, s.NH, s.KV, s.hs);
    FVec of(no), af(na), qkvf = widen(qkv);
    cpu::gqa_attention_forward<float>(of.data(), af.data(), qkvf.data(), s.B, s.Tn, s.NH, s.KV, s.hs);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));
    EXPECT_TRUE(same_bits(att, round_to<H>(af)));

    // Backward reads the stored (H) att, as a half model does.
    const HVec<H> dout = rand_h<H>(no, rng);
    HVec<H> dqkv = rand_h<H>(nq, rng), scratch(na);
    FVec dqkvf = widen(dqkv), doutf = widen(dout), attf = widen(att), scratchf(na);
    this->ops.gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.Tn,
                                     s.NH, s.KV, s.hs);
    cpu::gqa_attention_backward<float>(dqkvf.data(), scratchf.data(), doutf.data(), qkvf.data(), attf.data(), s.B,
                                       s.Tn, s.NH, s.KV, s.hs);
    EXPECT_TRUE(same_bits(dqkv, round_to<H>(dqkvf)));
  }
}

// Attention's float error: attention_block_test_util.h's AttentionBound for inputs in [-1, 1]
// (m = 0 merges; the double kernel's own, at u = 2^-53, added): every probability P relative
// eps_P, out E_out, dq E_dq, and a key/value head's dk, dv the sum over the query heads h of
// its group of g_hs E_dq and g_hs E_dv_per_g (g_hs = sum_t P_ts, the column sums). The
// backward of both kernels reads the same stored H probabilities.
TYPED_TEST(HalfLlamaOps, GqaAttentionAgreesWithTheDoubleKernel) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const GqaShape s{2, 16, 4, 2, 8};
  const int W = (s.NH + 2 * s.KV) * s.hs, group = s.NH / s.KV;
  const size_t nq = size_t(s.B) * s.Tn * W, no = size_t(s.B) * s.Tn * s.NH * s.hs;
  const size_t na = size_t(s.B) * s.NH * s.Tn * s.Tn;
  const HVec<H> qkv = rand_h<H>(nq, rng), dout = rand_h<H>(no, rng);
  HVec<H> out(no), att(na), dqkv = rand_h<H>(nq, rng), scratch(na);
  const DVec qd = to_d(qkv), dd = to_d(dout), dqkv0 = to_d(dqkv);
  DVec od(no), ad(na);
  this->ops.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.Tn, s.NH, s.KV, s.hs);
  cpu::gqa_attention_forward<double>(od.data(), ad.data(), qd.data(), s.B, s.Tn, s.NH, s.KV, s.hs);
  const cpu::test::AttentionBound ef = cpu::test::attention_bound(kU, s.hs, s.Tn, 0),
                                  ed = cpu::test::attention_bound(0x1p-53, s.hs, s.Tn, 0);
  EXPECT_TRUE(within(out, od, half_tol<H>(od, [&](size_t) { return ef.out + ed.out; })));
  EXPECT_TRUE(within(att, ad, half_tol<H>(ad, [&](size_t i) { return (ef.eps_p + ed.eps_p) * ad[i]; })));

  const DVec ah = to_d(att);
  DVec dqkvd = dqkv0, scratchd(na);
  this->ops.gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.Tn,
                                   s.NH, s.KV, s.hs);
  cpu::gqa_attention_backward<double>(dqkvd.data(), scratchd.data(), dd.data(), qd.data(), ah.data(), s.B, s.Tn,
                                      s.NH, s.KV, s.hs);
  const std::vector<double> g = cpu::test::column_sums(ah, s.B, s.NH, s.Tn);
  auto e_f = [&](size_t i) {
    const size_t bt = i / W, b = bt / s.Tn, t = bt % s.Tn;
    const int head = int(i % W) / s.hs;
    if (head < s.NH) return ef.dq + ed.dq;
    const int kv = (head - s.NH) % s.KV;
    double gs = 0;
    for (int h = kv * group; h < (kv + 1) * group; ++h) gs += g[(b * s.NH + h) * s.Tn + t];
    return head < s.NH + s.KV ? gs * (ef.dq + ed.dq) : gs * (ef.dv_per_g + ed.dv_per_g);
  };
  EXPECT_TRUE(within(dqkv, dqkvd, half_tol<H>(dqkvd, e_f)));
}

// ---- blockwise attention (context parallelism) ----

// A query block of Tq rows at qpos0 = Tq (a rank's second chunk) in a packed qkv (B, Tq, 3C),
// against three key blocks: its own rows (the diagonal, k and v strided in the packed qkv),
// a separate packed kv block (B, Tq, 2C) at positions [0, Tq) (all visible), and one at
// [2 Tq, 3 Tq) (the future: every score masked). Their results merged in that order; the
// backward of each block from the merged result.
TYPED_TEST(HalfLlamaOps, AttentionBlockOpsAreTheFloatKernelsRoundedOnce) {
  using H = TypeParam;
  Rng& rng = this->rng;
  struct Shape {
    int B, Tq, C, NH;
  };
  // The second shape's batch entries do not fit one chunk: several chunks per call.
  for (Shape s : {Shape{3, 8, 16, 4}, Shape{6, 64, 64, 4}}) {
    const int B = s.B, Tq = s.Tq, C = s.C, NH = s.NH, q0 = Tq;
    SCOPED_TRACE("B " + std::to_string(B) + " T " + std::to_string(Tq));
    const size_t rows = size_t(B) * Tq, no = rows * C, nl = rows * NH;
    const HVec<H> qkv = rand_h<H>(rows * 3 * C, rng, -2.f, 2.f), dout = rand_h<H>(no, rng);
    const HVec<H> kv_past = rand_h<H>(rows * 2 * C, rng, -2.f, 2.f), kv_future = rand_h<H>(rows * 2 * C, rng);
    const FVec qkvf = widen(qkv), pastf = widen(kv_past), futuref = widen(kv_future), doutf = widen(dout);
    struct KvBlock {
      const H* k;
      const float* kf;
      int stride, kpos0;
    };
    const KvBlock blocks[] = {{qkv.data() + C, qkvf.data() + C, 3 * C, q0},
                              {kv_past.data(), pastf.data(), 2 * C, 0},
                              {kv_future.data(), futuref.data(), 2 * C, 2 * Tq}};
    HVec<H> out(no);
    FVec lse(nl), lse_f(nl), scratch_f(size_t(2) * Tq * Tq + Tq);
    HVec<H> scratch(scratch_f.size());
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE("key block " + std::to_string(i));
      const KvBlock& kb = blocks[i];
      HVec<H> o = rand_h<H>(no, rng);  // garbage: forward writes (v follows k by C in both layouts)
      FVec l(nl, -7.f), of(no), lf(nl);
      this->ops.attention_block_forward(o.data(), l.data(), scratch.data(), qkv.data(), 3 * C, kb.k, kb.k + C,
                                        kb.stride, B, Tq, Tq, C, NH, q0, kb.kpos0);
      cpu::attention_block_forward<float>(of.data(), lf.data(), scratch_f.data(), qkvf.data(), 3 * C, kb.kf,
                                          kb.kf + C, kb.stride, B, Tq, Tq, C, NH, q0, kb.kpos0);
      EXPECT_TRUE(same_bits(o, round_to<H>(of)));
      EXPECT_TRUE(same_bits(l, lf));  // A: not rounded to H
      if (i == 0) {
        out = o;
        lse = l;
        lse_f = l;
        continue;
      }
      // The merge: float(out) and float(o) merged by the float kernel, out rounded once.
      FVec mf = widen(out), of2 = widen(o);
      const HVec<H> before = out;
      cpu::attention_merge<float>(mf.data(), lse_f.data(), of2.data(), l.data(), int(rows), C, NH);
      this->ops.attention_merge(out.data(), lse.data(), o.data(), l.data(), int(rows), C, NH);
      EXPECT_TRUE(same_bits(out, round_to<H>(mf)));
      EXPECT_TRUE(same_bits(lse, lse_f));
      if (i == 2) {
        EXPECT_TRUE(same_bits(out, before)) << "a fully masked block leaves the result bitwise";
      }
    }

    // The backward of each block from the merged result: dq in a packed dqkv (B, Tq, 3C), dk
    // and dv in its key block's layout, both accumulating from non-zero values.
    HVec<H> dqkv = rand_h<H>(rows * 3 * C, rng), dkv_past = rand_h<H>(rows * 2 * C, rng);
    HVec<H> dkv_future = rand_h<H>(rows * 2 * C, rng);
    FVec dqkvf = widen(dqkv), dpastf = widen(dkv_past), dfuturef = widen(dkv_future), outf = widen(out);
    H* dk[] = {dqkv.data() + C, dkv_past.data(), dkv_future.data()};
    float* dkf[] = {dqkvf.data() + C, dpastf.data(), dfuturef.data()};
    for (int i = 0; i < 3; ++i) {
      const KvBlock& kb = blocks[i];
      this->ops.attention_block_backward(dqkv.data(), dk[i], dk[i] + C, scratch.data(), dout.data(), out.data(),
                                         lse.data(), qkv.data(), 3 * C, kb.k, kb.k + C, kb.stride, B, Tq, Tq, C, NH,
                                         q0, kb.kpos0);
      cpu::attention_block_backward<float>(dqkvf.data(), dkf[i], dkf[i] + C, scratch_f.data(), doutf.data(),
                                           outf.data(), lse_f.data(), qkvf.data(), 3 * C, kb.kf, kb.kf + C,
                                           kb.stride, B, Tq, Tq, C, NH, q0, kb.kpos0);
      // Each block's call rounds once: the reference rounds after each call too (in place:
      // dk and dkf point into these buffers).
      for (FVec* f : {&dqkvf, &dpastf, &dfuturef})
        for (float& x : *f) x = float(H(x));
    }
    EXPECT_TRUE(same_bits(dqkv, round_to<H>(dqkvf)));
    EXPECT_TRUE(same_bits(dkv_past, round_to<H>(dpastf)));
    EXPECT_TRUE(same_bits(dkv_future, round_to<H>(dfuturef)));
  }
}

// The blockwise ops against the double kernels on one sequence (B = 1) of Tn rows, inputs in
// [-1, 1], packed qkv. The diagonal block over all Tn rows is whole causal attention: its
// float error is AttentionBound's with m = 1 (the backward's P = exp(score - lse) reads the
// forward's lse, whose error one merge's term covers); lse, in A, within eps_P absolute. The
// backward of both kernels reads the same stored H out (D = dout . out alike), each its own
// lse. The merge of the two key halves' results, from the same inputs in both kernels:
// lse' = hi + log1p(exp(lo - hi)) errs (|lo| + |hi| + |lse'| + 3) u <= (3 L + 3) u, L the
// largest |lse|; each weight e^(lse_i - lse') then (5 L + 5) u relative, the two products and
// the sum 2 u: e_f <= (5 L + 7) u (w1 |out1| + w2 |out2|) (std::exp within 2 u).
TYPED_TEST(HalfLlamaOps, AttentionBlockOpsAgreeWithTheDoubleKernels) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int Tn = 32, C = 32, NH = 4, hs = C / NH, half = Tn / 2;
  const size_t no = size_t(Tn) * C, nl = size_t(Tn) * NH;
  const HVec<H> qkv = rand_h<H>(no * 3, rng), dout = rand_h<H>(no, rng);
  const DVec qd = to_d(qkv), dd = to_d(dout);
  HVec<H> out(no), scratch(2 * size_t(Tn) * Tn + Tn);
  FVec lse(nl);
  DVec od(no), ld(nl), scratchd(scratch.size());
  this->ops.attention_block_forward(out.data(), lse.data(), scratch.data(), qkv.data(), 3 * C, qkv.data() + C,
                                    qkv.data() + 2 * C, 3 * C, 1, Tn, Tn, C, NH, 0, 0);
  cpu::attention_block_forward<double>(od.data(), ld.data(), scratchd.data(), qd.data(), 3 * C, qd.data() + C,
                                       qd.data() + 2 * C, 3 * C, 1, Tn, Tn, C, NH, 0, 0);
  const cpu::test::AttentionBound ef = cpu::test::attention_bound(kU, hs, Tn, 1),
                                  ed = cpu::test::attention_bound(0x1p-53, hs, Tn, 1);
  EXPECT_TRUE(within(out, od, half_tol<H>(od, [&](size_t) { return ef.out + ed.out; })));
  EXPECT_TRUE(within(lse, ld, [&](size_t) { return ef.eps_p + ed.eps_p; }));

  HVec<H> dqkv = rand_h<H>(no * 3, rng);
  DVec dqkvd = to_d(dqkv);
  const DVec oh = to_d(out);
  this->ops.attention_block_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, scratch.data(), dout.data(),
                                     out.data(), lse.data(), qkv.data(), 3 * C, qkv.data() + C, qkv.data() + 2 * C,
                                     3 * C, 1, Tn, Tn, C, NH, 0, 0);
  cpu::attention_block_backward<double>(dqkvd.data(), dqkvd.data() + C, dqkvd.data() + 2 * C, scratchd.data(),
                                        dd.data(), oh.data(), ld.data(), qd.data(), 3 * C, qd.data() + C,
                                        qd.data() + 2 * C, 3 * C, 1, Tn, Tn, C, NH, 0, 0);
  DVec att(size_t(NH) * Tn * Tn);
  cpu::attention_forward<double>(DVec(no).data(), att.data(), qd.data(), 1, Tn, C, NH);
  const std::vector<double> g = cpu::test::column_sums(att, 1, NH, Tn);
  auto e_f = [&](size_t i) {
    const size_t s = i / (3 * C);
    const int part = int(i % (3 * C)) / C, h = int(i % C) / hs;
    const double gs = g[size_t(h) * Tn + s];
    return part == 0 ? ef.dq + ed.dq : part == 1 ? gs * (ef.dq + ed.dq) : gs * (ef.dv_per_g + ed.dv_per_g);
  };
  EXPECT_TRUE(within(dqkv, dqkvd, half_tol<H>(dqkvd, e_f)));

  // The merge: the queries against keys [0, Tn/2) and against keys [Tn/2, Tn).
  HVec<H> o1(no), o2(no);
  FVec l1(nl), l2(nl);
  this->ops.attention_block_forward(o1.data(), l1.data(), scratch.data(), qkv.data(), 3 * C, qkv.data() + C,
                                    qkv.data() + 2 * C, 3 * C, 1, Tn, half, C, NH, 0, 0);
  const H* k2 = qkv.data() + size_t(half) * 3 * C + C;
  this->ops.attention_block_forward(o2.data(), l2.data(), scratch.data(), qkv.data(), 3 * C, k2, k2 + C, 3 * C, 1,
                                    Tn, half, C, NH, 0, half);
  DVec md = to_d(o1), lmd(l1.begin(), l1.end());
  const DVec o1d = to_d(o1), o2d = to_d(o2), l1d(l1.begin(), l1.end()), l2d(l2.begin(), l2.end());
  cpu::attention_merge<double>(md.data(), lmd.data(), o2d.data(), l2d.data(), Tn, C, NH);
  this->ops.attention_merge(o1.data(), l1.data(), o2.data(), l2.data(), Tn, C, NH);
  auto L = [&](size_t r) {  // the largest |lse| of row r's head (r = token * NH + head)
    return std::max({std::abs(l1d[r]), std::isinf(l2d[r]) ? 0.0 : std::abs(l2d[r]), std::abs(lmd[r])});
  };
  EXPECT_TRUE(within(l1, lmd, [&](size_t r) { return (3 * L(r) + 3) * kU; }));
  auto e_merge = [&](size_t i) {
    const size_t r = (i / C) * NH + (i % C) / hs;
    if (std::isinf(l2d[r])) return 0.0;  // every key of the second half masked: the row kept, exactly
    const double w1 = std::exp(l1d[r] - lmd[r]), w2 = std::exp(l2d[r] - lmd[r]);
    return (5 * L(r) + 7) * kU * (w1 * std::abs(o1d[i]) + w2 * std::abs(o2d[i]));
  };
  EXPECT_TRUE(within(o1, md, half_tol<H>(md, e_merge)));
}

}  // namespace
}  // namespace dtb
