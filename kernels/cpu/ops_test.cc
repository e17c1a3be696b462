// Tests of kernels/cpu/ops: every backward against central finite differences in double,
// forwards against naive definitions and their invariants (causality, softmax sums), float
// against double within rounding-error bounds, AdamW against its formula, and the vocabulary-
// parallel (tensor-parallel shard) ops against the unsharded ones. Each tolerance sits beside
// its test with the error analysis behind it.
#include "kernels/cpu/ops.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
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

// T = 150 spans three of the ops' 64-position blocks, the last one partial (kernels/cpu/ops.cc,
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

// Tolerances (u = 2^-53): a score sums hs products, |q k| <= 4, scaled by 1/sqrt(hs) = 1/2,
// so it errs <= hs u 16 / 2 = 32 u absolute, and subtracting the max adds u |s - max| <= 16 u:
// 48 u, a relative error of exp's result, which enters numerator and normaliser alike. exp and
// the normalisation over <= T terms add (T + 3) u relative; att <= 1, so |att err| <= (2 48 +
// T + 3) u per side, twice that between the two sides: tol_att = 2 (99 + T) u (T = 6: 2.4e-14,
// T = 150: 5.5e-14). out = sum att v with |v| <= 2 and sum att = 1: per side |err| <= 2 (99 +
// T) u + 2 T u, both sides: tol_out = 4 (99 + 2 T) u (T = 6: 4.7e-14; T = 150: 1.8e-13). T 150
// spans three of the op's 64-position blocks (kernels/cpu/ops.cc).
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

template <typename T>
void expect_bitwise_eq(const std::string& what, const std::vector<T>& got, const std::vector<T>& want);

// With OpenBLAS allowed 2 threads, attention runs its (batch, head) pairs on 2 threads, each
// pair's products on one OpenBLAS thread (kernels/cpu/ops.cc, for_each_head): the results
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
  // probability that is 0 in float, yet its loss 2e4 + log(1 + e^-2) is finite.
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
  // e^-2e4 is 0 in float, and the float exp clamps its argument at -80 (kernels/cpu/ops.cc):
  // the probability is at most e^-80, where -log(p) would give a loss of 80, not 2e4.
  EXPECT_LE(probs[3], std::exp(-80.0f) * 1.0001f);
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
     // T u relative; the float exp (kernels/cpu/ops.cc) errs <= 4 u relative. So |err| <=
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
     // float exp (kernels/cpu/ops.cc) 4 u relative, the sum of V terms V u, log adds u |loss|.
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
std::vector<T> cast(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Asserts got and want hold the same bit patterns; on failure reports how many elements
// differ and the first of them (in full precision).
template <typename T>
void expect_bitwise_eq(const std::string& what, const std::vector<T>& got,
                       const std::vector<T>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, size_t(0)) << what << ": " << bad << " of " << got.size()
                            << " elements differ, first [" << first << "] "
                            << std::setprecision(std::numeric_limits<T>::max_digits10) << got[first]
                            << " vs " << want[first];
}

// Vocabulary splits for the composition tests: shard r holds ids [b[r], b[r+1]). V = 256 in
// 2 and 4 equal shards (as Megatron splits), the odd V = 33 in 3 shards of 11, and 33 in
// unequal shards with a one-id shard (Vl = 1, where the max and sum loops run once).
const std::vector<std::vector<int>> kVocabSplits = {
    {0, 128, 256}, {0, 64, 128, 192, 256}, {0, 11, 22, 33}, {0, 1, 21, 33}};

std::string split_name(const std::vector<int>& b) {
  std::string s = "V=";
  s += std::to_string(b.back());
  s += " split";
  for (int x : b) {
    s += ' ';
    s += std::to_string(x);
  }
  return s;
}

// n ids in [0, V) (n > 2 * shards): the first and last id of every shard (where an
// off-by-one in a range test or offset shows), the last id of shard 0 twice (a repeated id,
// whose gradient rows must accumulate), the rest uniform; shuffled.
std::vector<int32_t> shard_ids(const std::vector<int>& bounds, size_t n, Rng& rng) {
  std::vector<int32_t> ids = tokens(n, bounds.back(), rng);
  size_t k = 0;
  for (size_t r = 0; r + 1 < bounds.size(); r++) {
    ids[k++] = bounds[r];
    ids[k++] = bounds[r + 1] - 1;
  }
  ids[k] = ids[1];
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

struct TypeName {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "float" : "double";
  }
};
using FloatAndDouble = ::testing::Types<float, double>;

template <typename T>
class EmbeddingShard : public ::testing::Test {};
template <typename T>
class CrossEntropyShard : public ::testing::Test {};
template <typename T>
class AddBias : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingShard, FloatAndDouble, TypeName);
TYPED_TEST_SUITE(CrossEntropyShard, FloatAndDouble, TypeName);
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

// One shard (v_begin 0, Vl = V): the max, the same exp terms summed in the same order, the
// same products and log: crossentropy_forward and crossentropy_backward bitwise.
// V 37 and 1000: the sums run in blocks of 256 terms (kernels/cpu/ops.cc, exp_shifted_blocks),
// so 1000 spans four blocks, the last partial.
TYPED_TEST(CrossEntropyShard, OneShardIsCrossEntropy) {
  using T = TypeParam;
  Rng rng(20);
  for (const int V : {37, 1000}) {
  SCOPED_TRACE("V = " + std::to_string(V));
  const int N = 9;
  const T dloss = T(0.37);
  const std::vector<T> logits = cast<T>(uniform(N * V, rng, -5.0, 5.0));
  std::vector<int32_t> tgt = tokens(N, V, rng);
  tgt[0] = 0;
  tgt[1] = V - 1;
  std::vector<T> want_losses(N), want_probs(N * V), want_d(N * V);
  crossentropy_forward(want_losses.data(), want_probs.data(), logits.data(), tgt.data(), N, V);
  crossentropy_backward(want_d.data(), want_probs.data(), tgt.data(), dloss, N, V);

  std::vector<T> maxes(N, T(kNaN)), sums(2 * N, T(kNaN)), losses(N, T(kNaN)), probs(N * V, T(kNaN));
  std::vector<T> d(N * V, T(kNaN));  // every output is WRITTEN: the NaNs must go
  crossentropy_shard_max(maxes.data(), logits.data(), N, V);
  crossentropy_shard_sums(sums.data(), logits.data(), maxes.data(), tgt.data(), N, V, 0);
  crossentropy_shard_forward(losses.data(), probs.data(), logits.data(), maxes.data(), sums.data(),
                             N, V);
  crossentropy_shard_backward(d.data(), probs.data(), tgt.data(), dloss, N, V, 0);
  for (int n = 0; n < N; n++) {
    const T* row = logits.data() + size_t(n) * V;
    EXPECT_EQ(maxes[n], *std::max_element(row, row + V)) << n;
    EXPECT_EQ(sums[N + n], row[tgt[n]]) << n;  // the target's logit
  }
  expect_bitwise_eq("losses", losses, want_losses);
  expect_bitwise_eq("probs", probs, want_probs);
  expect_bitwise_eq("dlogits", d, want_d);
  }
}

// Shards compose into crossentropy_forward / _backward on the gathered logits, with the two
// all-reduces emulated on the host (MAX, then SUM in shard order).
//
// Exact: the reduced max is the row max (max is exact in any order), so every term
// e_j = exp(l_j - max) is the same rounded number as in the reference; the target logit
// arrives as l_t + 0 + ... + 0 = l_t; every shard then computes the same losses; and the
// backward's (p - onehot) * dloss are the same products as crossentropy_backward's on the
// concatenated probs, hence bitwise.
//
// Not exact: s = sum_j e_j. The reference adds the V terms left to right; the shards add
// their Vl terms, then the S partial sums. Either order is a recursive summation of positive
// terms with error sum_k eps_k s_k, |eps_k| <= u (u = 2^-24 float, 2^-53 double), s_k <= s the
// partial sums: at most (V - 1) u relative, adversarially (Higham, Accuracy and Stability of
// Numerical Algorithms, Sec. 4.2). Modelling the eps_k as independent, zero-mean (uniform on
// [-u, u]), each order's relative error has standard deviation u sqrt(sum_k (s_k/s)^2 / 3)
// <= u sqrt(V / 3), and their difference <= u sqrt(2V / 3) ~ 0.8 u sqrt(V). We allow
// delta = 4 sqrt(V) u, ~5 standard deviations (the adversarial 2 (V - 1) u would be 3x to 8x
// looser at these V), and propagate it:
//   loss = log(s) - (l_t - max): d log(s) = ds / s, so delta relative in s is delta absolute
//     in the loss; log is within 1 ulp (<= 2 u |log s|) in each; the last subtraction rounds
//     once in each (u |loss|): |loss_shard - loss_ref| <= (4 sqrt(V) + 4 |log s| + 2 |loss|) u.
//   p = e_j * (1 / s): the reciprocals differ by delta plus a rounding in each, the products
//     round once in each: |p_shard - p_ref| <= (4 sqrt(V) + 4) u p.
// A wrong target, offset or normalisation errs by O(1), far beyond either.
template <typename T>
void check_crossentropy_split(const std::vector<int>& bounds, Rng& rng) {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  const int N = 12, V = bounds.back(), S = int(bounds.size()) - 1;
  const T dloss = T(0.37);
  const std::vector<T> logits = cast<T>(uniform(size_t(N) * V, rng, -4.0, 4.0));
  const std::vector<int32_t> tgt = shard_ids(bounds, N, rng);
  std::vector<T> want_losses(N), want_probs(size_t(N) * V), want_d(size_t(N) * V);
  crossentropy_forward(want_losses.data(), want_probs.data(), logits.data(), tgt.data(), N, V);

  // Each rank's slice of the logits, and its step 1.
  std::vector<std::vector<T>> shard(S);
  std::vector<T> maxes(N);
  for (int r = 0; r < S; r++) {
    const int vb = bounds[r], Vl = bounds[r + 1] - vb;
    int inside = 0;
    for (int n = 0; n < N; n++) {
      shard[r].insert(shard[r].end(), logits.begin() + size_t(n) * V + vb,
                      logits.begin() + size_t(n) * V + vb + Vl);
      inside += tgt[n] >= vb && tgt[n] < vb + Vl;
    }
    EXPECT_GT(inside, 0) << "shard " << r << " has no target";
    EXPECT_LT(inside, N) << "shard " << r << " has every target";
    std::vector<T> m(N, T(kNaN));
    crossentropy_shard_max(m.data(), shard[r].data(), N, Vl);
    for (int n = 0; n < N; n++) {
      maxes[n] = r == 0 ? m[n] : std::max(maxes[n], m[n]);  // all-reduce MAX
    }
  }
  // Step 2 and the SUM all-reduce.
  std::vector<T> sums;
  for (int r = 0; r < S; r++) {
    std::vector<T> s(2 * N, T(kNaN));
    crossentropy_shard_sums(s.data(), shard[r].data(), maxes.data(), tgt.data(), N,
                            bounds[r + 1] - bounds[r], bounds[r]);
    if (r == 0) {
      sums = s;
    } else {
      for (int i = 0; i < 2 * N; i++) sums[i] += s[i];
    }
  }
  for (int n = 0; n < N; n++) {
    const T* row = logits.data() + size_t(n) * V;
    EXPECT_EQ(maxes[n], *std::max_element(row, row + V)) << n;
    EXPECT_EQ(sums[N + n], row[tgt[n]]) << n;
  }
  // Step 3 and the backward on every rank.
  std::vector<T> losses0, probs_cat, d_cat;
  for (int r = 0; r < S; r++) {
    SCOPED_TRACE(::testing::Message() << "shard " << r);
    const int vb = bounds[r], Vl = bounds[r + 1] - vb;
    std::vector<T> losses(N, T(kNaN)), probs(size_t(N) * Vl, T(kNaN)), d(size_t(N) * Vl, T(kNaN));
    crossentropy_shard_forward(losses.data(), probs.data(), shard[r].data(), maxes.data(),
                               sums.data(), N, Vl);
    crossentropy_shard_backward(d.data(), probs.data(), tgt.data(), dloss, N, Vl, vb);
    if (r == 0) {
      losses0 = losses;
      probs_cat.assign(size_t(N) * V, T(kNaN));
      d_cat.assign(size_t(N) * V, T(kNaN));
    } else {
      expect_bitwise_eq("losses vs shard 0's", losses, losses0);
    }
    for (int n = 0; n < N; n++) {
      std::copy_n(probs.begin() + size_t(n) * Vl, Vl, probs_cat.begin() + size_t(n) * V + vb);
      std::copy_n(d.begin() + size_t(n) * Vl, Vl, d_cat.begin() + size_t(n) * V + vb);
    }
  }
  crossentropy_backward(want_d.data(), probs_cat.data(), tgt.data(), dloss, N, V);
  expect_bitwise_eq("dlogits concatenated", d_cat, want_d);

  double loss_err = 0, loss_ratio = 0, prob_ratio = 0;
  for (int n = 0; n < N; n++) {
    const double log_s = std::log(double(sums[n]));
    const double tol =
        (4 * std::sqrt(double(V)) + 4 * std::abs(log_s) + 2 * std::abs(double(want_losses[n]))) * u;
    const double err = std::abs(double(losses0[n]) - double(want_losses[n]));
    loss_err = std::max(loss_err, err);
    loss_ratio = std::max(loss_ratio, err / tol);
    for (int j = 0; j < V; j++) {
      const double p = want_probs[size_t(n) * V + j];
      const double pe = std::abs(double(probs_cat[size_t(n) * V + j]) - p);
      prob_ratio = std::max(prob_ratio, pe / ((4 * std::sqrt(double(V)) + 4) * u * p + 1e-300));
    }
  }
  std::printf("%s, %s: loss max err %.2f u (err / tol %.3f), probs err / tol %.3f\n",
              split_name(bounds).c_str(), std::is_same_v<T, float> ? "float" : "double",
              loss_err / u, loss_ratio, prob_ratio);
  EXPECT_LE(loss_ratio, 1.0) << "losses";
  EXPECT_LE(prob_ratio, 1.0) << "probs";
}

TYPED_TEST(CrossEntropyShard, ShardsCompose) {
  Rng rng(21);
  for (const std::vector<int>& bounds : kVocabSplits) {
    SCOPED_TRACE(split_name(bounds));
    check_crossentropy_split<TypeParam>(bounds, rng);
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
