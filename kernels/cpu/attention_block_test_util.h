// The error bound of blockwise causal attention against the whole-sequence op, shared by the
// block op's tests (attention_block_test.cc) and context parallelism's (reference/parallel/
// context_parallel_test.cc), and by the cp_attention suite's output check (suites/cp_attention.cc).
// Header-only; nothing here is linked into the trainer.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace dtb::cpu::test {

// Two evaluations of causal attention over Tn positions, head size hs, one whole (attention_forward /
// _backward) and one as key blocks merged by their log-sum-exp (m blocks at most per query row), on
// inputs with |q|, |k|, |v|, |dout| <= 1, differ by at most 2 E per element, E being one
// evaluation's worst-case error to first order in the unit roundoff u (gamma_n ~ n u, Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., Sec. 3.1):
//  - a score s = (q . k) / sqrt(hs) errs by <= (hs + 1) u sum|q_i k_i| / sqrt(hs) <= (hs + 1) sqrt(hs) u;
//    subtracting the row max or the lse adds (|s| + |shift|) u <= (2 sqrt(hs) + ln Tn) u; both are
//    absolute errors of an exponent, so relative errors of P = exp(.); exp itself 4 u (the clamped
//    float exp, kernels/cpu/ops_common.h); the normaliser of <= Tn terms Tn u, and its reciprocal
//    and product 2 u; a block's lse = max + log(sum) (|lse| + Tn + 2) u, |lse| <= sqrt(hs) + ln Tn;
//    each merge's logaddexp and weight e^(lse_i - lse) (3 |lse| + 8) u. Summed: eps_P, the
//    relative error of every effective probability P_ts (and an absolute bound of the lse's).
//  - out_t = sum_s P_ts v_s with sum_s P_ts = 1: E_out = eps_P + (Tn + 2 m) u (the sum over Tn
//    keys, then two products and a sum per merge).
//  - dv_s = sum_t P_ts dout_t: E_dv = g_s (eps_P + (Tn + m) u), g_s = sum_t P_ts the column sum of
//    the probabilities (m partial sums added: a ring's blocks or a reduce-scatter).
//  - dS_ts = P_ts (dP_ts - D_t), |dP|, |D| <= hs: dP = dout . v errs hs^2 u, D = dout . out errs
//    hs^2 u + hs E_out (attention_backward's D = sum_s att datt errs Tn hs u instead), the
//    difference and product 4 hs u, P's error 2 hs eps_P; dq_t = sum_s dS_ts k_s / sqrt(hs) over
//    <= Tn + m terms: E_dq = sqrt(hs) (2 eps_P + E_out + (2 hs + 3 Tn + 2 m + 4) u); dk_s sums
//    over queries instead, so E_dk = g_s E_dq.
// Worst-case, so measured errors sit one to three orders below it; a wrong merge or mask is off by
// O(1) (a plain sum of two blocks doubles an output; a missing key moves a probability by ~1/Tn).
struct AttentionBound {
  double eps_p = 0, out = 0, dq = 0, dv_per_g = 0;
};

inline AttentionBound attention_bound(double u, int hs, int Tn, int m) {
  const double r = std::sqrt(double(hs)), ln = std::log(double(Tn)), lse = r + ln;
  AttentionBound e;
  e.eps_p = ((hs + 1) * r + 2 * r + ln + 4 + Tn + 2 + (lse + Tn + 2) + m * (3 * lse + 8)) * u;
  e.out = e.eps_p + (Tn + 2.0 * m) * u;
  e.dq = r * (2 * e.eps_p + e.out + (2.0 * hs + 3.0 * Tn + 2.0 * m + 4) * u);
  e.dv_per_g = e.eps_p + (Tn + double(m)) * u;
  return e;
}

/// g[(b NH + h) Tn + s] = sum_t att[b, h, t, s]: the column sums of attention_forward's
/// probabilities att (B, NH, Tn, Tn).
template <typename X>
std::vector<double> column_sums(const std::vector<X>& att, int B, int NH, int Tn) {
  std::vector<double> g(size_t(B) * NH * Tn, 0.0);
  for (size_t bh = 0; bh < size_t(B) * NH; bh++)
    for (int t = 0; t < Tn; t++)
      for (int s = 0; s <= t; s++) g[bh * Tn + s] += double(att[(bh * Tn + t) * Tn + s]);
  return g;
}

/// Largest |a - b| / (2 E) over out (B, Tn, C): at most 1 when the two are within the bound.
template <typename X, typename Y>
double out_ratio(const std::vector<X>& a, const std::vector<Y>& b, const AttentionBound& e) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / (2 * e.out));
  return worst;
}

/// Largest |a - b| / (2 E) over a packed gradient dqkv (B, Tn, 3C), E per element as above,
/// g the column sums (column_sums).
template <typename X, typename Y>
double dqkv_ratio(const std::vector<X>& a, const std::vector<Y>& b, const std::vector<double>& g,
                  const AttentionBound& e, int B, int Tn, int C, int NH) {
  const int hs = C / NH;
  double worst = 0;
  for (int bt = 0; bt < B * Tn; bt++) {
    const int bb = bt / Tn, s = bt % Tn;
    for (int j = 0; j < 3 * C; j++) {
      const int part = j / C, h = (j % C) / hs;
      const double gs = g[(size_t(bb) * NH + h) * Tn + s];
      const double tol = 2 * (part == 0 ? e.dq : part == 1 ? gs * e.dq : gs * e.dv_per_g);
      const size_t i = size_t(bt) * 3 * C + j;
      worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / tol);
    }
  }
  return worst;
}

/// Largest |a - b| over all elements (reported beside the ratio).
template <typename X, typename Y>
double max_abs_diff(const std::vector<X>& a, const std::vector<Y>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

}  // namespace dtb::cpu::test
