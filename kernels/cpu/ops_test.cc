// Tests of kernels/cpu/ops.cc: every backward against central finite differences in double,
// forwards against naive definitions and their invariants, float against double within
// rounding-error bounds (for every op, attention and cross-entropy included), AdamW against
// its formula, and the vocabulary-parallel embedding and the row-parallel bias against the
// unsharded ops. Each tolerance sits beside its test with the error analysis behind it.
// Attention and cross-entropy have their own files (attention_test.cc, crossentropy_test.cc).
#include "kernels/cpu/ops.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/ops_test_util.h"

namespace dtb::cpu {
namespace {

using namespace dtb::cpu::test;

// ---------------------------------------------------------------- finite differences

TEST(FiniteDifference, Encoder) {
  Rng rng(1);
  const int B = 2, T = 5, C = 8, V = 11;
  std::vector<int32_t> tok = tokens(B * T, V, rng);
  tok[7] = tok[1];  // a repeated token: its wte row must sum both positions' gradients
  Vec wte = uniform(V * C, rng), wpe = uniform(T * C, rng), dout = uniform(B * T * C, rng);
  Vec out(B * T * C);
  auto loss = [&] {
    encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(dout, out);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  // L is linear in wte and wpe: no truncation error, only the ~1e-10 rounding term.
  const double err = std::max(fd_rel_err(wte, dwte, loss, rng), fd_rel_err(wpe, dwpe, loss, rng));
  report("fd check encoder", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

TEST(FiniteDifference, Layernorm) {
  Rng rng(2);
  const int N = 10, C = 8;
  Vec inp = uniform(N * C, rng, -1.5, 2.5), w = uniform(C, rng, 0.5, 1.5), b = uniform(C, rng);
  Vec dout = uniform(N * C, rng), out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(dout, out);
  };
  loss();
  Vec dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  // Row std of U(-1.5, 2.5) is ~1.1, so rstd ~ 1 and L''' (powers of rstd) stays O(1..10).
  const double err = std::max({fd_rel_err(inp, dinp, loss, rng), fd_rel_err(w, dw, loss, rng),
                               fd_rel_err(b, db, loss, rng)});
  report("fd check layernorm", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

TEST(FiniteDifference, Matmul) {
  Rng rng(3);
  const int N = 7, C = 8, OC = 11;
  Vec inp = uniform(N * C, rng), w = uniform(OC * C, rng), b = uniform(OC, rng);
  Vec dout = uniform(N * OC, rng), out(N * OC);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(dout, out);
  };
  Vec dinp(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  // L is bilinear, so L''' = 0 along any single coordinate: only rounding, ~1e-10.
  const double err = std::max({fd_rel_err(inp, dinp, loss, rng), fd_rel_err(w, dw, loss, rng),
                               fd_rel_err(b, db, loss, rng)});
  report("fd check matmul", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

TEST(FiniteDifference, Gelu) {
  Rng rng(5);
  const size_t n = 64;
  Vec inp = uniform(n, rng, -5.0, 5.0), dout = uniform(n, rng), out(n);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return dot(dout, out);
  };
  Vec dinp(n, 0.0);
  gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  // gelu''' is bounded (~2 near 0) on [-5, 5]: truncation ~4e-11, rounding ~1e-10.
  const double err = fd_rel_err(inp, dinp, loss, rng);
  report("fd check gelu", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

// ---------------------------------------------------------------- accumulation

TEST(Backward, MatmulAccumulates) {
  Rng rng(7);
  const int N = 7, C = 8, OC = 11;
  Vec inp = uniform(N * C, rng), w = uniform(OC * C, rng), dout = uniform(N * OC, rng);
  auto bw = [&](std::vector<Vec*> g) {
    matmul_backward(g[0]->data(), g[1]->data(), g[2]->data(), dout.data(), inp.data(), w.data(),
                    N, C, OC);
  };
  EXPECT_LE(accum_err(bw, {Vec(N * C, 0.0), Vec(OC * C, 0.0), Vec(OC, 0.0)}), kAccumTol);
}

TEST(Backward, LayernormAccumulates) {
  Rng rng(8);
  const int N = 10, C = 8;
  Vec inp = uniform(N * C, rng), w = uniform(C, rng), b = uniform(C, rng);
  Vec dout = uniform(N * C, rng), out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  auto bw = [&](std::vector<Vec*> g) {
    layernorm_backward(g[0]->data(), g[1]->data(), g[2]->data(), dout.data(), inp.data(),
                       w.data(), mean.data(), rstd.data(), N, C);
  };
  EXPECT_LE(accum_err(bw, {Vec(N * C, 0.0), Vec(C, 0.0), Vec(C, 0.0)}), kAccumTol);
}

TEST(Backward, MatmulNullDinpAndBias) {
  Rng rng(10);
  const int N = 4, C = 6, OC = 5;
  Vec inp = uniform(N * C, rng), w = uniform(OC * C, rng), dout = uniform(N * OC, rng);
  Vec out(N * OC, kNaN), ref(N * OC), zero_bias(OC, 0.0);
  // No bias: out must be overwritten (the NaNs gone), equal to a zero bias.
  matmul_forward<double>(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  matmul_forward(ref.data(), inp.data(), w.data(), zero_bias.data(), N, C, OC);
  for (int i = 0; i < N * OC; i++) EXPECT_EQ(out[i], ref[i]) << i;
  Vec dw1(OC * C, 0.0), dw2(OC * C, 0.0), dinp(N * C, 0.0), db(OC, 0.0);
  matmul_backward<double>(nullptr, dw1.data(), nullptr, dout.data(), inp.data(), w.data(), N, C,
                          OC);
  matmul_backward(dinp.data(), dw2.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  for (int i = 0; i < OC * C; i++) EXPECT_EQ(dw1[i], dw2[i]) << i;
}

// A zero-bubble split: the input-gradient half (null dweight and dbias), then the weight half
// (null dinp and weight), accumulates bitwise what one call with all three does.
TEST(Backward, MatmulSplitIntoInputAndWeightHalvesIsBitwiseWhole) {
  Rng rng(11);
  const int N = 7, C = 6, OC = 5;
  Vec inp = uniform(N * C, rng), w = uniform(OC * C, rng), dout = uniform(N * OC, rng);
  Vec dinp1 = uniform(N * C, rng), dw1 = uniform(OC * C, rng), db1 = uniform(OC, rng);  // accumulated into
  Vec dinp2 = dinp1, dw2 = dw1, db2 = db1;
  matmul_backward(dinp1.data(), dw1.data(), db1.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  matmul_backward<double>(dinp2.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
  matmul_backward<double>(nullptr, dw2.data(), db2.data(), dout.data(), inp.data(), nullptr, N, C, OC);
  EXPECT_EQ(dinp1, dinp2);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
}

// ---------------------------------------------------------------- forwards

// Independent, loop-by-loop definitions. Sums in the same order as nothing in particular, so
// agreement is to rounding: ~n eps_double relative with n <= 16, hence 1e-13.
TEST(Forward, MatmulMatchesDefinition) {
  Rng rng(11);
  const int N = 5, C = 7, OC = 6;
  Vec inp = uniform(N * C, rng), w = uniform(OC * C, rng), b = uniform(OC, rng), out(N * OC);
  matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++) {
      double s = b[o];
      for (int c = 0; c < C; c++) s += inp[n * C + c] * w[o * C + c];  // torch Linear: W (OC, C)
      EXPECT_NEAR(out[n * OC + o], s, 1e-13);
    }
  }
}

TEST(Forward, LayernormMatchesDefinition) {
  Rng rng(12);
  const int N = 4, C = 9;
  Vec inp = uniform(N * C, rng, -2.0, 3.0), w = uniform(C, rng), b = uniform(C, rng);
  Vec out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  for (int n = 0; n < N; n++) {
    double m = 0, m2 = 0;
    for (int c = 0; c < C; c++) m += inp[n * C + c] / C;
    for (int c = 0; c < C; c++) m2 += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;
    const double s = 1.0 / std::sqrt(m2 + 1e-5);  // biased variance, eps inside the sqrt
    EXPECT_NEAR(mean[n], m, 1e-13);
    EXPECT_NEAR(rstd[n], s, 1e-13);
    for (int c = 0; c < C; c++) {
      EXPECT_NEAR(out[n * C + c], (inp[n * C + c] - m) * s * w[c] + b[c], 1e-13);
    }
  }
}


TEST(Gelu, Properties) {
  Rng rng(15);
  const size_t n = 200;
  Vec x = uniform(n, rng, -6.0, 6.0), neg(n), y(n), yn(n);
  for (size_t i = 0; i < n; i++) neg[i] = -x[i];
  gelu_forward(y.data(), x.data(), n);
  gelu_forward(yn.data(), neg.data(), n);
  for (size_t i = 0; i < n; i++) {
    // tanh is odd, so gelu(x) - gelu(-x) = x exactly in real arithmetic; rounding ~4 ulp of |x|.
    EXPECT_NEAR(y[i] - yn[i], x[i], 1e-14 * std::max(1.0, std::abs(x[i])));
    // The tanh form approximates the exact x * Phi(x) to within ~5e-4 (Hendrycks & Gimpel);
    // a wrong constant (e.g. missing sqrt(2/pi) or 0.044715) breaks this by > 1e-2.
    const double exact = 0.5 * x[i] * std::erfc(-x[i] / std::sqrt(2.0));
    EXPECT_NEAR(y[i], exact, 1e-3);
  }
  // Far out the derivative is 1 (x -> +inf) or 0 (x -> -inf): 1 exactly and 0 to within the
  // clamp's e^-80 (float; e^-700 double), once the exponent is clamped (the second term would
  // otherwise grow like x^3 e^-80).
  for (const double big : {1e6, 3e9, 1e13, 1e20}) {
    Vec xd = {big, -big}, dd(2, 0.0), ones = {1.0, 1.0};
    gelu_backward(dd.data(), xd.data(), ones.data(), 2);
    EXPECT_EQ(dd[0], 1.0) << big;
    EXPECT_GE(dd[1], 0.0) << big;
    EXPECT_LE(dd[1], std::exp(-700.0) * (1 + 1e-12)) << big;
    FVec xf = {float(big), float(-big)}, df(2, 0.0f), onesf = {1.0f, 1.0f};
    gelu_backward(df.data(), xf.data(), onesf.data(), 2);
    EXPECT_EQ(df[0], 1.0f) << big;
    EXPECT_GE(df[1], 0.0f) << big;
    EXPECT_LE(df[1], std::exp(-80.0f) * 1.0001f) << big;
  }
}

TEST(Residual, AddsInPlace) {
  Vec a = {1.0, -2.0, 3.5}, b = {0.25, 4.0, -3.5};
  residual_forward(a.data(), a.data(), b.data(), a.size());  // out aliases a
  EXPECT_EQ(a, (Vec{1.25, 2.0, 0.0}));
}

// ---------------------------------------------------------------- float vs double

// Largest |f - d| / bound over elements; asserts <= 1 where bound is the per-element
// rounding-error bound of the float computation.
void expect_within(const char* what, const FVec& f, const Vec& d, const Vec& bound) {
  double worst = 0;
  for (size_t i = 0; i < d.size(); i++) worst = std::max(worst, std::abs(f[i] - d[i]) / bound[i]);
  std::printf("float vs double %s: max err / bound %.3f\n", what, worst);
  EXPECT_LE(worst, 1.0) << what;
}

TEST(FloatVsDouble, Forwards) {
  Rng rng(17);
  const double u = kEpsF / 2;  // unit roundoff of float
  {  // encoder: one rounding of an (almost always exact in double) sum: |err| <= u |y|.
    const int B = 2, T = 8, C = 16, V = 20;
    std::vector<int32_t> tok = tokens(B * T, V, rng);
    Vec wte = uniform_f(V * C, rng), wpe = uniform_f(T * C, rng), d(B * T * C), bound(d.size());
    FVec f(d.size());
    encoder_forward(d.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    encoder_forward(f.data(), tok.data(), to_float(wte).data(), to_float(wpe).data(), B, T, C);
    for (size_t i = 0; i < d.size(); i++) bound[i] = u * std::abs(d[i]) + 1e-30;
    expect_within("encoder", f, d, bound);
  }
  {  // matmul: a dot product of C terms plus the bias, any summation order / FMA:
     // |err| <= gamma_{C+1} (|b| + sum |x w|) with gamma_n = n u / (1 - n u) (Higham 3.1).
    const int N = 16, C = 64, OC = 32;
    Vec inp = uniform_f(N * C, rng), w = uniform_f(OC * C, rng), b = uniform_f(OC, rng);
    Vec d(N * OC), bound(d.size());
    FVec f(d.size());
    matmul_forward(d.data(), inp.data(), w.data(), b.data(), N, C, OC);
    matmul_forward(f.data(), to_float(inp).data(), to_float(w).data(), to_float(b).data(), N, C,
                   OC);
    const double gamma = (C + 1) * u / (1 - (C + 1) * u);
    for (int n = 0; n < N; n++) {
      for (int o = 0; o < OC; o++) {
        double s = std::abs(b[o]);
        for (int c = 0; c < C; c++) s += std::abs(inp[n * C + c] * w[o * C + c]);
        bound[n * OC + o] = gamma * s;
      }
    }
    expect_within("matmul", f, d, bound);
  }
  {  // layernorm: mean and variance are sums of C terms, so mean carries <= C u max|x| and
     // rstd <= (C + 3) u relative; out = xhat * w + b adds 3 roundings. Per element:
     // |err| <= (C + 6) u (|xhat w| + |b|) + C u max|x| rstd |w|.
    const int N = 8, C = 64;
    Vec inp = uniform_f(N * C, rng, -1.0, 3.0), w = uniform_f(C, rng), b = uniform_f(C, rng);
    Vec d(N * C), md(N), rd(N), bound(d.size());
    FVec f(d.size()), mf(N), rf(N);
    layernorm_forward(d.data(), md.data(), rd.data(), inp.data(), w.data(), b.data(), N, C);
    layernorm_forward(f.data(), mf.data(), rf.data(), to_float(inp).data(), to_float(w).data(),
                      to_float(b).data(), N, C);
    const double xmax = max_abs(inp);
    for (int n = 0; n < N; n++) {
      for (int c = 0; c < C; c++) {
        const double xw = std::abs((inp[n * C + c] - md[n]) * rd[n] * w[c]);
        bound[n * C + c] =
            (C + 6) * u * (xw + std::abs(b[c])) + C * u * xmax * rd[n] * std::abs(w[c]);
      }
    }
    expect_within("layernorm", f, d, bound);
  }
  {  // attention: a score s = scale q.k has |err| <= hs u S (S = max over pairs of
     // scale sum|q k|) plus subtracting the max: u |s - max|; exp turns that absolute error
     // into relative error of the weight, normalising adds (T + 2) u, and out = att @ v adds
     // T u relative; the float exp (kernels/cpu/ops_common.h) errs <= 4 u relative. So |err| <=
     // (2 hs S + 2 |s|max + 2 T + 7) u max|v|, with 2x for exp/max.
    const int B = 2, T = 32, C = 64, NH = 4, hs = C / NH, C3 = 3 * C;
    Vec qkv = uniform_f(B * T * C3, rng), d(B * T * C), att_d(B * NH * T * T);
    FVec f(d.size()), att_f(att_d.size());
    attention_forward(d.data(), att_d.data(), qkv.data(), B, T, C, NH);
    attention_forward(f.data(), att_f.data(), to_float(qkv).data(), B, T, C, NH);
    double S = 0, vmax = 0;
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const double* row = qkv.data() + (b * T + t) * C3;
        for (int i = 0; i < C; i++) vmax = std::max(vmax, std::abs(row[2 * C + i]));
        for (int t2 = 0; t2 <= t; t2++) {
          for (int h = 0; h < NH; h++) {
            double s = 0;
            for (int i = 0; i < hs; i++) {
              s += std::abs(row[h * hs + i] * qkv[(b * T + t2) * C3 + C + h * hs + i]);
            }
            S = std::max(S, s / std::sqrt(double(hs)));
          }
        }
      }
    }
    const double tol = (2 * hs * S + 2 * 2 * S + 2 * T + 7) * u * vmax;
    expect_within("attention", f, d, Vec(d.size(), tol));
  }
  {  // gelu = x / (1 + e), e = exp(-2z) (kernels/cpu/ops.cc): z = s (x + c x^3) errs <= 3u
     // relative, so -2z errs <= 6u |z| absolute, a relative error of e of 6u|z|; the float exp
     // adds <= 4u, 1 + e, the reciprocal and the product u each. d gelu / d(ln e) =
     // -x sig (1 - sig) = -x sech^2(z) / 4 and |z sech^2 z| <= 0.45, so the exponent's error
     // costs <= 0.7 u |x| and the exp's <= u |x|; with the 3 roundings (<= |gelu| <= |x|
     // each) |err| <= 8 u |x| covers every step. Inputs to +-10 reach the clamp's side
     // (|2z| > 80 from |x| ~ 9.67), where float clamps the exponent at 80 and double at 700:
     // gelu then differs by <= |x| e^-80 < 2e-34, and the backward (below), which drops its
     // second term there, by <= e^-80 + 2|x| e^-80 s (1 + 3c x^2) < 5e-33: both under the
     // 1e-30 floor of the bounds.
    const size_t n = 100000;
    Vec x = uniform_f(n, rng, -10.0, 10.0), d(n), bound(n);
    FVec f(n);
    gelu_forward(d.data(), x.data(), n);
    gelu_forward(f.data(), to_float(x).data(), n);
    for (size_t i = 0; i < n; i++) bound[i] = 8 * u * std::abs(x[i]) + 1e-30;
    expect_within("gelu", f, d, bound);
    // The backward: grad = sig + 2 x e sig^2 z' (z' = s (1 + 3c x^2)). sig errs <= (6|z| + 6) u
    // relative (e as above, then 1 + e and the reciprocal), the second term <= (6|z| + 14) u
    // (e again, sig twice, 5 products, z' 2u); the sum and the += into dinp (0 here) add u of
    // each. So |err| <= (6|z| + 16) u (|sig| + |second term|), both taken in double.
    Vec dout = uniform_f(n, rng, -1.0, 1.0), dd(n, 0.0);
    FVec df(n, 0.0f);
    gelu_backward(dd.data(), x.data(), dout.data(), n);
    gelu_backward(df.data(), to_float(x).data(), to_float(dout).data(), n);
    const double s = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
    for (size_t i = 0; i < n; i++) {
      const double xi = double(float(x[i])), z = s * (xi + c * xi * xi * xi), e = std::exp(-2 * z);
      const double sig = 1 / (1 + e), t2 = 2 * xi * e * sig * sig * s * (1 + 3 * c * xi * xi);
      bound[i] = (6 * std::abs(z) + 16) * u * (std::abs(sig) + std::abs(t2)) * std::abs(dout[i]) + 1e-30;
    }
    expect_within("gelu backward", df, dd, bound);
    // Non-finite inputs stay non-finite (what loss scaling's overflow check looks for):
    // gelu(+inf) = inf, NaN -> NaN (and -inf -> -inf / e^80 = -inf).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    FVec special = {nan, std::numeric_limits<float>::infinity(), 0.0f, -0.0f}, out(4);
    gelu_forward(out.data(), special.data(), 4);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], std::numeric_limits<float>::infinity());
    EXPECT_EQ(out[2], 0.0f);
  }
  {  // crossentropy: l - max errs u |l - max| (in the exponent: relative in each term), the
     // float exp (kernels/cpu/ops_common.h) 4 u relative, the sum of V terms V u, log adds u |loss|.
     // |loss err| <= (V + 7 + 2 range + |loss|) u.
    const int N = 8, V = 50;
    Vec logits = uniform_f(N * V, rng, -4.0, 4.0), d(N), pd(N * V), bound(N);
    std::vector<int32_t> tgt = tokens(N, V, rng);
    FVec f(N), pf(N * V);
    crossentropy_forward(d.data(), pd.data(), logits.data(), tgt.data(), N, V);
    crossentropy_forward(f.data(), pf.data(), to_float(logits).data(), tgt.data(), N, V);
    for (int n = 0; n < N; n++) bound[n] = (V + 7 + 2 * 8.0 + std::abs(d[n])) * u;
    expect_within("crossentropy", f, d, bound);
  }
}

// ---------------------------------------------------------------- AdamW

// torch.optim.AdamW step in double, straight from the formula, for comparison.
struct AdamRef {
  double p, m = 0, v = 0;
  void step(double g, const AdamWParams& hp, int t) {
    const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2;
    p *= 1 - lr * double(hp.weight_decay);
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, t)), vhat = v / (1 - std::pow(b2, t));
    p -= lr * mhat / (std::sqrt(vhat) + double(hp.eps));
  }
};

TEST(AdamW, TwoStepsMatchFormula) {
  AdamWParams hp;
  hp.lr = 0.01f;
  hp.weight_decay = 0.1f;
  const double grads[2] = {0.2, -0.3};
  AdamRef ref{0.5};
  double p = 0.5, m = 0, v = 0;
  float pf = 0.5f, mf = 0, vf = 0;
  for (int t = 1; t <= 2; t++) {
    const double g = grads[t - 1];
    const float gf = float(g);
    ref.step(g, hp, t);
    adamw_update(&p, &g, &m, &v, 1, hp, t);
    adamw_update(&pf, &gf, &mf, &vf, 1, hp, t);
    // double: the same formula up to op order (1 / bc multiplied vs divided): a few ulps.
    EXPECT_NEAR(p, ref.p, 1e-15) << "step " << t;
    EXPECT_NEAR(m, ref.m, 1e-16) << "step " << t;
    EXPECT_NEAR(v, ref.v, 1e-17) << "step " << t;
    // float: ~10 roundings each <= u relative on |p| ~ 0.5 (float(0.2) vs 0.2 moves the
    // update only through g/sqrt(v), which Adam normalises away at step 1).
    EXPECT_NEAR(pf, ref.p, 10 * kEpsF) << "step " << t;
  }
  // Sanity independent of the formula: step 1 moves by ~lr against sign(g) (|mhat/sqrt(vhat)|
  // = 1), step 2 with the opposite gradient moves back by less than lr.
  AdamRef one{0.5};
  one.step(0.2, hp, 1);
  EXPECT_NEAR(one.p, 0.5 * (1 - 0.01 * 0.1) - 0.01, 1e-9);
}

TEST(AdamW, DecoupledWeightDecay) {
  AdamWParams hp;
  hp.lr = 0.05f;
  hp.weight_decay = 0.2f;
  Vec p = {1.5, -2.0, 0.0}, g(3, 0.0), m(3, 0.0), v(3, 0.0);
  const Vec p0 = p;
  adamw_update(p.data(), g.data(), m.data(), v.data(), p.size(), hp, 1);
  for (size_t i = 0; i < p.size(); i++) {
    // Decay never enters the moments (L2-in-the-gradient would make m = v != 0 here).
    EXPECT_EQ(m[i], 0.0);
    EXPECT_EQ(v[i], 0.0);
    EXPECT_NEAR(p[i], p0[i] * (1 - double(hp.lr) * double(hp.weight_decay)), 1e-15);
  }
}

// ---------------------------------------------------------------- tensor-parallel shards

// The vocabulary-parallel ops (Megatron-LM embedding and cross-entropy) against the
// unsharded ops, in float and double. Most identities here are bitwise: the same roundings
// of the same operands, or sums whose other terms are exact zeros. They are checked on the
// bit patterns, since == would also pass -0 for +0.

template <typename T>
class EmbeddingShard : public ::testing::Test {};
template <typename T>
class AddBias : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingShard, FloatAndDouble, TypeName);
TYPED_TEST_SUITE(AddBias, FloatAndDouble, TypeName);

// One shard holding the whole vocabulary, with wpe, is the encoder: the same sum we + pe per
// element. Backward adds the same dout rows in the same (b, t) order to the same starting
// gradients (non-zero, so a write instead of +=, or a lost repeated-token row, shows).
TYPED_TEST(EmbeddingShard, OneShardIsEncoder) {
  using T = TypeParam;
  Rng rng(18);
  const int B = 2, Tn = 5, C = 8, V = 11;
  std::vector<int32_t> tok = tokens(B * Tn, V, rng);
  tok[0] = 0;
  tok[1] = V - 1;
  tok[7] = tok[2];  // repeated token
  const std::vector<T> wte = cast<T>(uniform(V * C, rng)), wpe = cast<T>(uniform(Tn * C, rng));
  const std::vector<T> dout = cast<T>(uniform(B * Tn * C, rng));
  std::vector<T> out(B * Tn * C, T(kNaN)), want(B * Tn * C);  // NaN: forward must WRITE
  encoder_forward(want.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
  embedding_shard_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C, 0, V);
  expect_bitwise_eq("forward", out, want);

  const std::vector<T> dwte0 = cast<T>(uniform(V * C, rng)), dwpe0 = cast<T>(uniform(Tn * C, rng));
  std::vector<T> dwte = dwte0, dwpe = dwpe0, want_dwte = dwte0, want_dwpe = dwpe0;
  encoder_backward(want_dwte.data(), want_dwpe.data(), dout.data(), tok.data(), B, Tn, C);
  embedding_shard_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, Tn, C, 0, V);
  expect_bitwise_eq("backward dwte", dwte, want_dwte);
  expect_bitwise_eq("backward dwpe", dwpe, want_dwpe);
  // A null dwpe skips only the position gradient.
  std::vector<T> dwte_only = dwte0;
  embedding_shard_backward<T>(dwte_only.data(), nullptr, dout.data(), tok.data(), B, Tn, C, 0, V);
  expect_bitwise_eq("backward dwte, null dwpe", dwte_only, want_dwte);
}

// Shards compose into the encoder. Forward: summed over the shards in order (wpe given to
// shard 0 only), each element is pe + we with every other term an exact zero (x + 0 == x),
// so the sum is encoder_forward's we + pe bitwise. Backward: each wte row lives in exactly
// one shard and receives the same dout rows in the same order, so the shards' dwte side by
// side are encoder_backward's dwte; every shard's dwpe is its dwpe. Both start non-zero.
TYPED_TEST(EmbeddingShard, ShardsCompose) {
  using T = TypeParam;
  Rng rng(19);
  const int B = 2, Tn = 6, C = 8;
  for (const std::vector<int>& bounds : kVocabSplits) {
    SCOPED_TRACE(split_name(bounds));
    const int V = bounds.back(), S = int(bounds.size()) - 1;
    const std::vector<int32_t> tok = shard_ids(bounds, size_t(B) * Tn, rng);
    const std::vector<T> wte = cast<T>(uniform(size_t(V) * C, rng)),
                         wpe = cast<T>(uniform(Tn * C, rng));
    const std::vector<T> dout = cast<T>(uniform(B * Tn * C, rng));
    const std::vector<T> dwte0 = cast<T>(uniform(size_t(V) * C, rng)),
                         dwpe0 = cast<T>(uniform(Tn * C, rng));
    std::vector<T> want(B * Tn * C), want_dwte = dwte0, want_dwpe = dwpe0;
    encoder_forward(want.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
    encoder_backward(want_dwte.data(), want_dwpe.data(), dout.data(), tok.data(), B, Tn, C);

    std::vector<T> sum, dwte_cat;
    for (int r = 0; r < S; r++) {
      SCOPED_TRACE(::testing::Message() << "shard " << r);
      const int vb = bounds[r], ve = bounds[r + 1];
      const std::vector<T> shard(wte.begin() + size_t(vb) * C, wte.begin() + size_t(ve) * C);
      std::vector<T> out(B * Tn * C, T(kNaN));
      embedding_shard_forward(out.data(), tok.data(), shard.data(), r == 0 ? wpe.data() : nullptr,
                              B, Tn, C, vb, ve);
      if (r == 0) {
        sum = out;
      } else {
        for (size_t i = 0; i < sum.size(); i++) sum[i] += out[i];
      }
      std::vector<T> dwte(dwte0.begin() + size_t(vb) * C, dwte0.begin() + size_t(ve) * C),
          dwpe = dwpe0;
      embedding_shard_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, Tn, C, vb, ve);
      dwte_cat.insert(dwte_cat.end(), dwte.begin(), dwte.end());
      expect_bitwise_eq("dwpe of this shard", dwpe, want_dwpe);
    }
    expect_bitwise_eq("forward summed over shards", sum, want);
    expect_bitwise_eq("dwte concatenated over shards", dwte_cat, want_dwte);
  }
}

// add_bias: out + bias is one rounding, the same as the expected value's here, so exact for
// any values; rows past N are left alone. With small integers every partial sum is an exact
// integer (far below 2^24), so two calls add exactly 2 * bias: it accumulates, not writes.
TYPED_TEST(AddBias, AddsToEveryRowAndAccumulates) {
  using T = TypeParam;
  Rng rng(22);
  const int N = 5, OC = 7;  // N != OC: a row / column mix-up reads the wrong bias
  const std::vector<T> out0 = cast<T>(uniform((N + 1) * OC, rng)), bias = cast<T>(uniform(OC, rng));
  std::vector<T> out = out0, want = out0;
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++) want[n * OC + o] = out0[n * OC + o] + bias[o];
  }
  add_bias(out.data(), bias.data(), N, OC);
  expect_bitwise_eq("once", out, want);

  std::vector<T> iout(N * OC), ibias(OC), iwant(N * OC);
  for (int o = 0; o < OC; o++) ibias[o] = T(3 * o - 10);
  for (int i = 0; i < N * OC; i++) {
    iout[i] = T(i - 17);
    iwant[i] = T(i - 17 + 2 * (3 * (i % OC) - 10));
  }
  add_bias(iout.data(), ibias.data(), N, OC);
  add_bias(iout.data(), ibias.data(), N, OC);
  expect_bitwise_eq("twice", iout, iwant);
}

}  // namespace
}  // namespace dtb::cpu
