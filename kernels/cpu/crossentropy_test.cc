// Tests of the CPU cross-entropy ops (kernels/cpu/crossentropy.cc): the backward against
// central finite differences, losses and probabilities against their definitions, huge
// logits, and the vocabulary-parallel shards against the unsharded op (one shard bitwise;
// shards composed within the bound derived beside the test).
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/ops_test_util.h"

namespace dtb::cpu {
namespace {

using namespace dtb::cpu::test;

// ---------------------------------------------------------------- finite differences

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

// ---------------------------------------------------------------- forwards

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
  // e^-2e4 is 0 in float, and the float exp clamps its argument at -80 (kernels/cpu/ops_common.h):
  // the probability is at most e^-80, where -log(p) would give a loss of 80, not 2e4.
  EXPECT_LE(probs[3], std::exp(-80.0f) * 1.0001f);
}

// ---------------------------------------------------------------- tensor-parallel shards

template <typename T>
class CrossEntropyShard : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyShard, FloatAndDouble, TypeName);

// One shard (v_begin 0, Vl = V): the max, the same exp terms summed in the same order, the
// same products and log: crossentropy_forward and crossentropy_backward bitwise.
// V 37 and 1000: the sums run in blocks of 256 terms (kernels/cpu/ops_common.h, exp_shifted_blocks),
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

}  // namespace
}  // namespace dtb::cpu
