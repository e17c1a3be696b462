// Tests of the Llama block's CPU ops (kernels/cpu/llama_ops.cc and the grouped-query attention of
// attention.cc): every backward against central finite differences in double, accumulation,
// the forwards against loop-by-loop (or complex-number) definitions, the rotary embeddings'
// position offset, and grouped-query attention against multi-head attention on repeated heads.
#include <gtest/gtest.h>

#include <complex>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_test_util.h"

namespace dtb::cpu {
namespace {

using namespace dtb::cpu::test;

// ---------------------------------------------------------------- finite differences
// Tolerance kFdTol and its analysis: ops_test_util.h (smooth ops, O(1) inputs, |L| <~ 30).

TEST(LlamaFiniteDifference, Rmsnorm) {
  Rng rng(21);
  const int N = 10, C = 8;
  Vec inp = uniform(N * C, rng, -1.5, 2.5), w = uniform(C, rng, 0.5, 1.5), dout = uniform(N * C, rng);
  Vec out(N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), 1e-5, N, C);
    return dot(dout, out);
  };
  loss();
  Vec dinp(N * C, 0.0), dw(C, 0.0);
  rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
  const double err = std::max(fd_rel_err(inp, dinp, loss, rng), fd_rel_err(w, dw, loss, rng));
  report("fd check rmsnorm", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

TEST(LlamaFiniteDifference, Swiglu) {
  Rng rng(22);
  const int N = 6, F = 7;
  Vec inp = uniform(N * 2 * F, rng, -5.0, 5.0), dout = uniform(N * F, rng), out(N * F);
  auto loss = [&] {
    swiglu_forward(out.data(), inp.data(), N, F);
    return dot(dout, out);
  };
  Vec dinp(N * 2 * F, 0.0);
  swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
  // silu''' is bounded (<~ 0.5) and the up factor enters linearly: truncation ~1e-10.
  const double err = fd_rel_err(inp, dinp, loss, rng);
  report("fd check swiglu", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

// L = dout . rope(qkv) is linear in qkv: only rounding. pos0 = 5, theta 500000 (Llama 3's).
TEST(LlamaFiniteDifference, Rope) {
  Rng rng(23);
  const int B = 2, T = 4, NH = 4, KV = 2, hs = 6, W = (NH + 2 * KV) * hs;
  Vec qkv = uniform(B * T * W, rng), dout = uniform(B * T * W, rng);
  auto loss = [&] {
    Vec x = qkv;
    rope_forward(x.data(), B, T, NH, KV, hs, 5, 5e5);
    return dot(dout, x);
  };
  Vec g = dout;  // rope_backward works in place on the finished gradient
  rope_backward(g.data(), B, T, NH, KV, hs, 5, 5e5);
  const double err = fd_rel_err(qkv, g, loss, rng);
  report("fd check rope", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

// Grouped-query attention, 4 query heads on 2 key/value heads, at T = 5 and at T = 150 (three of
// the 64-position blocks): attention_test.cc's analysis holds.
class GqaT : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Blocks, GqaT, ::testing::Values(5, 150));

TEST_P(GqaT, FiniteDifference) {
  Rng rng(24);
  const int B = 2, T = GetParam(), NH = 4, KV = 2, hs = 4, W = (NH + 2 * KV) * hs;
  Vec qkv = uniform(B * T * W, rng, -1.5, 1.5), dout = uniform(B * T * NH * hs, rng);
  Vec out(B * T * NH * hs), att(B * NH * T * T);
  auto loss = [&] {
    gqa_attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KV, hs);
    return dot(dout, out);
  };
  loss();
  Vec dqkv(qkv.size(), 0.0), scratch(B * NH * T * T, kNaN);
  gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH, KV, hs);
  const double err = fd_rel_err(qkv, dqkv, loss, rng);
  report("fd check gqa attention", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

// ---------------------------------------------------------------- accumulation

TEST(LlamaBackward, Accumulates) {
  Rng rng(25);
  const int N = 6, C = 8, F = 5, B = 2, T = 5, NH = 4, KV = 2, hs = 2, W = (NH + 2 * KV) * hs;
  Vec x = uniform(N * C, rng), w = uniform(C, rng), dx = uniform(N * C, rng), out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1e-5, N, C);
  EXPECT_LE(accum_err([&](std::vector<Vec*> g) {
              rmsnorm_backward(g[0]->data(), g[1]->data(), dx.data(), x.data(), w.data(), rstd.data(), N, C);
            }, {Vec(N * C, 0.0), Vec(C, 0.0)}), kAccumTol);
  Vec gu = uniform(N * 2 * F, rng), dsw = uniform(N * F, rng);
  EXPECT_LE(accum_err([&](std::vector<Vec*> g) { swiglu_backward(g[0]->data(), gu.data(), dsw.data(), N, F); },
                      {Vec(N * 2 * F, 0.0)}), kAccumTol);
  Vec qkv = uniform(B * T * W, rng), dout = uniform(B * T * NH * hs, rng);
  Vec o(B * T * NH * hs), att(B * NH * T * T), scratch(B * NH * T * T);
  gqa_attention_forward(o.data(), att.data(), qkv.data(), B, T, NH, KV, hs);
  EXPECT_LE(accum_err([&](std::vector<Vec*> g) {
              gqa_attention_backward(g[0]->data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH,
                                     KV, hs);
            }, {Vec(qkv.size(), 0.0)}), kAccumTol);
}

// ---------------------------------------------------------------- forwards

// Against the definitions, summed in another order: agreement to ~C eps_double, hence 1e-13.
TEST(LlamaForward, RmsnormAndSwigluMatchDefinitions) {
  Rng rng(26);
  const int N = 4, C = 9, F = 5;
  Vec x = uniform(N * C, rng, -2.0, 3.0), w = uniform(C, rng), out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1e-5, N, C);
  for (int n = 0; n < N; n++) {
    double ms = 0;
    for (int c = 0; c < C; c++) ms += x[n * C + c] * x[n * C + c] / C;
    const double s = 1.0 / std::sqrt(ms + 1e-5);  // no mean subtracted, eps inside the sqrt
    EXPECT_NEAR(rstd[n], s, 1e-13);
    for (int c = 0; c < C; c++) EXPECT_NEAR(out[n * C + c], x[n * C + c] * s * w[c], 1e-13);
  }
  Vec gu = uniform(N * 2 * F, rng, -4.0, 4.0), sw(N * F);
  swiglu_forward(sw.data(), gu.data(), N, F);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < F; i++) {
      const double g = gu[n * 2 * F + i], u = gu[n * 2 * F + F + i];  // gate half first, then up
      EXPECT_NEAR(sw[n * F + i], g / (1 + std::exp(-g)) * u, 1e-13);
    }
}

// The rotate-half convention as complex numbers: channel i and i + hs/2 of a head are the real and
// imaginary parts of z, rotated to z e^{j p theta^(-2i/hs)}; q and k heads rotate, v heads do not.
TEST(LlamaForward, RopeIsRotateHalfAtTruePositions) {
  Rng rng(27);
  const int B = 2, T = 3, NH = 2, KV = 1, hs = 8, W = (NH + 2 * KV) * hs, pos0 = 7;
  const double theta = 1e4;
  const Vec x = uniform(B * T * W, rng);
  Vec y = x;
  rope_forward(y.data(), B, T, NH, KV, hs, pos0, theta);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH + 2 * KV; h++)
        for (int i = 0; i < hs / 2; i++) {
          const size_t o = (size_t(b) * T + t) * W + size_t(h) * hs;
          std::complex<double> z(x[o + i], x[o + i + hs / 2]);
          if (h < NH + KV) z *= std::polar(1.0, (pos0 + t) * std::pow(theta, -2.0 * i / hs));
          EXPECT_NEAR(y[o + i], z.real(), 1e-15) << b << " " << t << " " << h << " " << i;
          EXPECT_NEAR(y[o + i + hs / 2], z.imag(), 1e-15) << b << " " << t << " " << h << " " << i;
        }
}

// Context parallelism's need: rows [pos0, pos0 + Tn) of a sequence rotated on their own, with
// pos0, are bitwise those rows of the whole sequence rotated from 0.
TEST(LlamaForward, RopeChunkWithOffsetIsBitwiseTheWholeSequence) {
  Rng rng(28);
  const int T = 12, NH = 4, KV = 2, hs = 4, W = (NH + 2 * KV) * hs, pos0 = 8;
  const Vec x = uniform(T * W, rng);
  std::vector<float> whole(x.begin(), x.end()), chunk(x.begin() + pos0 * W, x.end());
  rope_forward(whole.data(), 1, T, NH, KV, hs, 0, 5e5);
  rope_forward(chunk.data(), 1, T - pos0, NH, KV, hs, pos0, 5e5);
  expect_bitwise_eq("chunk", chunk, std::vector<float>(whole.begin() + pos0 * W, whole.end()));
}

// Grouped-query attention is multi-head attention with each key/value head repeated for its
// NH/KV query heads: the forward bitwise (the same products on the same values), dq bitwise,
// and a key/value head's gradient the sum of its copies' (the same G = 3 terms added in another
// order: a few eps_double relative, hence 1e-14).
TEST(LlamaForward, GqaIsMultiHeadOnRepeatedHeads) {
  Rng rng(29);
  const int B = 2, T = 70, NH = 6, KV = 2, hs = 4, W = (NH + 2 * KV) * hs, C = NH * hs, G = NH / KV;
  const Vec qkv = uniform(B * T * W, rng, -1.5, 1.5), dout = uniform(B * T * C, rng);
  Vec mha(B * T * 3 * C);  // q as is; head h's k and v from key/value head h / G
  for (int r = 0; r < B * T; r++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < hs; i++) {
        mha[r * 3 * C + h * hs + i] = qkv[r * W + h * hs + i];
        mha[r * 3 * C + C + h * hs + i] = qkv[r * W + (NH + h / G) * hs + i];
        mha[r * 3 * C + 2 * C + h * hs + i] = qkv[r * W + (NH + KV + h / G) * hs + i];
      }
  Vec o1(B * T * C), a1(B * NH * T * T), o2(B * T * C), a2(B * NH * T * T), s(B * NH * T * T);
  gqa_attention_forward(o1.data(), a1.data(), qkv.data(), B, T, NH, KV, hs);
  attention_forward(o2.data(), a2.data(), mha.data(), B, T, C, NH);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(a1, a2);
  Vec d1(qkv.size(), 0.0), d2(mha.size(), 0.0);
  gqa_attention_backward(d1.data(), s.data(), dout.data(), qkv.data(), a1.data(), B, T, NH, KV, hs);
  attention_backward(d2.data(), s.data(), dout.data(), mha.data(), a2.data(), B, T, C, NH);
  for (int r = 0; r < B * T; r++)
    for (int i = 0; i < hs; i++) {
      for (int h = 0; h < NH; h++) EXPECT_EQ(d1[r * W + h * hs + i], d2[r * 3 * C + h * hs + i]);
      for (int g = 0; g < KV; g++) {
        double dk = 0, dv = 0;
        for (int h = g * G; h < (g + 1) * G; h++) {
          dk += d2[r * 3 * C + C + h * hs + i];
          dv += d2[r * 3 * C + 2 * C + h * hs + i];
        }
        EXPECT_NEAR(d1[r * W + (NH + g) * hs + i], dk, 1e-14 * std::max(1.0, std::abs(dk)));
        EXPECT_NEAR(d1[r * W + (NH + KV + g) * hs + i], dv, 1e-14 * std::max(1.0, std::abs(dv)));
      }
    }
}

}  // namespace
}  // namespace dtb::cpu
