// Tests of kernels/cpu/ops: every backward against central finite differences in double,
// forwards against naive definitions and their invariants (causality, softmax sums), float
// against double within rounding-error bounds, and AdamW against its formula. Each
// tolerance sits beside its test with the error analysis behind it.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace dtb::cpu {
namespace {

using Vec = std::vector<double>;
using FVec = std::vector<float>;
using Rng = std::mt19937_64;

constexpr double kEpsF = std::numeric_limits<float>::epsilon();  // 2^-23
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Vec uniform(size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Rounded to float and back, so float and double runs see identical inputs and any
// difference is the float computation's own rounding.
Vec uniform_f(size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  Vec v = uniform(n, rng, lo, hi);
  for (double& x : v) x = double(float(x));
  return v;
}

std::vector<int32_t> tokens(size_t n, int V, Rng& rng) {
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = dist(rng);
  return t;
}

FVec to_float(const Vec& v) { return FVec(v.begin(), v.end()); }

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Central differences of `loss` w.r.t. x (restored afterwards) against the analytic `grad`:
// returns max |g_fd - g| / max(1, max |g|) over every element, or over `max_samples` random
// ones when x is larger.
double fd_rel_err(Vec& x, const Vec& grad, const std::function<double()>& loss, Rng& rng,
                  size_t max_samples = 400) {
  constexpr double h = 1e-5;
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  if (idx.size() > max_samples) {
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(max_samples);
  }
  double err = 0;
  for (size_t i : idx) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double xp = x[i], lp = loss();
    x[i] = x0 - h;
    const double xm = x[i], lm = loss();
    x[i] = x0;
    err = std::max(err, std::abs((lp - lm) / (xp - xm) - grad[i]));  // xp - xm: the step taken
  }
  return err / std::max(1.0, max_abs(grad));
}

void report(const char* what, double err, double tol) {
  std::printf("%s: max rel err %.2e (tol %.0e)\n", what, err, tol);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", err);
  ::testing::Test::RecordProperty("max_rel_err", buf);
}

// Finite-difference tolerance, shared by the FiniteDifference tests. L = sum(dout * y) is a
// sum of <= ~250 products of O(1) values, so |L| <= ~30. With h = 1e-5 the truncation error
// is h^2/6 |L'''| ~ 2e-11 |L'''| (L''' is O(1..10) for these smooth ops with O(1) inputs) and
// the rounding error is ~ eps_double |L| / h ~ 2.2e-16 * 30 / 1e-5 ~ 7e-10. So a correct
// gradient shows <~ 1e-9 relative error; 1e-6 leaves three orders of margin while a wrong
// term (missing path, wrong scale) shows up at 1e-3 or more.
constexpr double kFdTol = 1e-6;

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

TEST(FiniteDifference, Attention) {
  Rng rng(4);
  const int B = 2, T = 5, C = 8, NH = 2;
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

TEST(FiniteDifference, CrossEntropy) {
  Rng rng(6);
  const int N = 7, V = 11;
  const double dloss = 0.37;
  Vec logits = uniform(N * V, rng, -3.0, 3.0), probs(N * V), losses(N);
  std::vector<int32_t> tgt = tokens(N, V, rng);
  auto loss = [&] {
    crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
    return dloss * std::accumulate(losses.begin(), losses.end(), 0.0);
  };
  loss();
  Vec dlogits(N * V);
  crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, V);
  // Log-sum-exp has derivatives bounded by small constants: truncation ~1e-11, rounding ~1e-10.
  const double err = fd_rel_err(logits, dlogits, loss, rng);
  report("fd check crossentropy", err, kFdTol);
  EXPECT_LE(err, kFdTol);
}

// ---------------------------------------------------------------- accumulation

// Backward twice from zero must give 2x one call. Each gradient element is a sum of <= ~10
// terms; the second call re-adds the same terms onto the first result, so the two can differ
// only by rounding: <= ~10 eps_double |g| ~ 2e-15 |g|. 1e-13 is far above that and far
// below the 100% error of a backward that writes instead of accumulating.
constexpr double kAccumTol = 1e-13;

double accum_err(const std::function<void(std::vector<Vec*>)>& backward, std::vector<Vec> once) {
  std::vector<Vec> twice = once;
  std::vector<Vec*> p1, p2;
  for (size_t i = 0; i < once.size(); i++) {
    p1.push_back(&once[i]);
    p2.push_back(&twice[i]);
  }
  backward(p1);
  backward(p2);
  backward(p2);
  double err = 0;
  for (size_t i = 0; i < once.size(); i++) {
    EXPECT_GT(max_abs(once[i]), 0.0) << "gradient " << i << " is all zero";
    for (size_t j = 0; j < once[i].size(); j++) {
      err = std::max(err, std::abs(twice[i][j] - 2 * once[i][j]) / std::max(1.0, max_abs(once[i])));
    }
  }
  return err;
}

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

TEST(Forward, AttentionMatchesDefinition) {
  Rng rng(13);
  const int B = 2, T = 6, C = 12, NH = 3, hs = C / NH;
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
          EXPECT_NEAR(out[(b * T + t) * C + h * hs + i], o, 1e-13);
        }
        for (int t2 = 0; t2 <= t; t2++) {
          EXPECT_NEAR(att[((b * NH + h) * T + t) * T + t2], p[t2] / z, 1e-14);
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
}

TEST(Residual, AddsInPlace) {
  Vec a = {1.0, -2.0, 3.5}, b = {0.25, 4.0, -3.5};
  residual_forward(a.data(), a.data(), b.data(), a.size());  // out aliases a
  EXPECT_EQ(a, (Vec{1.25, 2.0, 0.0}));
}

TEST(CrossEntropy, LossesAndProbs) {
  Rng rng(16);
  const int N = 6, V = 13;
  Vec logits = uniform(N * V, rng, -5.0, 5.0), probs(N * V), losses(N);
  std::vector<int32_t> tgt = tokens(N, V, rng);
  crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
  for (int n = 0; n < N; n++) {
    double sum = 0;
    for (int i = 0; i < V; i++) sum += probs[n * V + i];
    EXPECT_NEAR(sum, 1.0, 1e-14);  // V terms, ~V eps_double
    // Both sides carry a few ulps of log / exp error: ~1e-15 absolute for losses <= ~12.
    EXPECT_NEAR(losses[n], -std::log(probs[n * V + tgt[n]]), 1e-13);
  }
  Vec dlogits(N * V, kNaN);  // backward WRITES: NaNs must be overwritten
  crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), 0.5, N, V);
  for (int n = 0; n < N; n++) {
    double sum = 0;
    for (int i = 0; i < V; i++) {
      EXPECT_NEAR(dlogits[n * V + i], 0.5 * (probs[n * V + i] - (i == tgt[n])), 1e-16);
      sum += dlogits[n * V + i];
    }
    EXPECT_NEAR(sum, 0.0, 1e-14);  // probs sum to 1, so each row of the gradient sums to 0
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  // Rows built so the answer is known in closed form: logits {1e4, 1e4 - 2, -1e4, ...}.
  // loss(target 0) = log(1 + e^-2); target 1: 2 + log(1 + e^-2); a -1e4 target has a
  // probability that underflows to 0 in float, yet its loss 2e4 + log(1 + e^-2) is finite.
  const int V = 5;
  FVec logits(3 * V, -1e4f), probs(3 * V), losses(3);
  for (int n = 0; n < 3; n++) {
    logits[n * V] = 1e4f;
    logits[n * V + 1] = 1e4f - 2.0f;
  }
  std::vector<int32_t> tgt = {0, 1, 3};
  crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), 3, V);
  const double l1p = std::log1p(std::exp(-2.0));
  const double want[3] = {l1p, 2.0 + l1p, 2e4 + l1p};
  for (int n = 0; n < 3; n++) {
    EXPECT_TRUE(std::isfinite(losses[n]));
    // float: a few eps_float relative, plus the rounding of 1e4 - 2 (exact in float).
    EXPECT_NEAR(losses[n], want[n], 4 * kEpsF * std::max(1.0, want[n]));
  }
  for (float p : probs) EXPECT_TRUE(std::isfinite(p));
  EXPECT_EQ(probs[3], 0.0f);  // e^-2e4 underflows: the case -log(p) could not handle
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
     // T u relative. So |err| <= (2 hs S + 2 |s|max + 2 T + 4) u max|v|, with 2x for exp/max.
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
    const double tol = (2 * hs * S + 2 * 2 * S + 2 * T + 4) * u * vmax;
    expect_within("attention", f, d, Vec(d.size(), tol));
  }
  {  // gelu: x^3, the tanh argument and tanh (libm, <= 2 ulp) each err a few u relative; since
     // |a sech^2(a)| <= 0.45 and |gelu| <= |x|, |err| <= 8 u |x| covers every step.
    const size_t n = 1000;
    Vec x = uniform_f(n, rng, -6.0, 6.0), d(n), bound(n);
    FVec f(n);
    gelu_forward(d.data(), x.data(), n);
    gelu_forward(f.data(), to_float(x).data(), n);
    for (size_t i = 0; i < n; i++) bound[i] = 8 * u * std::abs(x[i]) + 1e-30;
    expect_within("gelu", f, d, bound);
  }
  {  // crossentropy: l - max errs u |l - max| (in the exponent: relative in each term), the
     // sum of V terms V u, log adds u |loss|. |loss err| <= (V + 4 + 2 range + |loss|) u.
    const int N = 8, V = 50;
    Vec logits = uniform_f(N * V, rng, -4.0, 4.0), d(N), pd(N * V), bound(N);
    std::vector<int32_t> tgt = tokens(N, V, rng);
    FVec f(N), pf(N * V);
    crossentropy_forward(d.data(), pd.data(), logits.data(), tgt.data(), N, V);
    crossentropy_forward(f.data(), pf.data(), to_float(logits).data(), tgt.data(), N, V);
    for (int n = 0; n < N; n++) bound[n] = (V + 4 + 2 * 8.0 + std::abs(d[n])) * u;
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

}  // namespace
}  // namespace dtb::cpu
