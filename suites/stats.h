// Summary statistics of repeated measurements (seconds or any unit): n, median, min,
// max, mean, sample standard deviation, and the samples themselves in measurement order, so
// that a comparison (scripts/compare.py) can test whether two runs differ beyond noise; and a
// median robust to outliers (iterative MAD removal), for baselines; a prediction's MAPE and
// Kendall's tau against measurements.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtb {

struct Summary {
  int n = 0;
  double median = 0, min = 0, max = 0, mean = 0, stddev = 0;
  std::vector<double> samples;  // as measured, in order
};

/// The median of `xs`: the middle value, or the mean of the two middle values of an even
/// count; 0 for an empty input (as summarize's).
inline double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n == 0 ? 0.0 : n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

/// Mean absolute percentage error of `predicted` against `measured` (equal lengths, measured
/// values != 0): mean |p_i - m_i| / |m_i|, a fraction (0.1 = 10 %); 0 for empty inputs.
inline double mape(const std::vector<double>& predicted, const std::vector<double>& measured) {
  double s = 0;
  const size_t n = std::min(predicted.size(), measured.size());
  for (size_t i = 0; i < n; ++i) s += std::abs(predicted[i] - measured[i]) / std::abs(measured[i]);
  return n ? s / double(n) : 0.0;
}

/// Kendall's rank correlation tau-b of two equal-length series (Kendall 1945: ties in either
/// series shrink the denominator): (concordant - discordant) / sqrt((n0 - n1)(n0 - n2)) over
/// the n0 = n(n-1)/2 pairs, n1 and n2 the pairs tied in x and in y. In [-1, 1]; 0 when either
/// series is constant or has fewer than two values.
inline double kendall_tau(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  double conc = 0, disc = 0, tx = 0, ty = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double a = x[i] - x[j], b = y[i] - y[j];
      if (a == 0) tx += 1;
      if (b == 0) ty += 1;
      if (a * b > 0) conc += 1;
      if (a * b < 0) disc += 1;
    }
  const double n0 = double(n) * double(n - (n > 0)) / 2, den = std::sqrt((n0 - tx) * (n0 - ty));
  return den > 0 ? (conc - disc) / den : 0.0;
}

/// The median of `xs` after iterative outlier removal: values farther than k x max(MAD,
/// floor x |median|) from the median (MAD: the median absolute deviation) are dropped and the
/// median taken again, until nothing is dropped; then the median of what stays. The floor keeps
/// a tight cluster (MAD near 0) from dropping values that differ by noise alone. Deterministic
/// for the same inputs; 0 for an empty input. dtbench validate's baselines use k = 3, floor = 1%.
inline double median_without_outliers(std::vector<double> xs, double k = 3.0, double floor = 0.01) {
  for (;;) {
    const double m = median(xs);
    std::vector<double> dev;
    for (double x : xs) dev.push_back(std::abs(x - m));
    const double cut = k * std::max(median(dev), floor * std::abs(m));
    std::vector<double> kept;
    for (double x : xs)
      if (std::abs(x - m) <= cut) kept.push_back(x);
    if (kept.size() == xs.size() || kept.empty()) return m;
    xs = kept;
  }
}

/// Summarises `xs` (copied, so the caller's order is kept). Empty input gives n = 0 and zeros.
/// The median of an even count is the mean of the two middle values.
inline Summary summarize(std::vector<double> xs) {
  Summary s;
  s.n = int(xs.size());
  s.samples = xs;
  if (xs.empty()) return s;
  std::sort(xs.begin(), xs.end());
  s.min = xs.front();
  s.max = xs.back();
  const size_t h = xs.size() / 2;
  s.median = xs.size() % 2 ? xs[h] : 0.5 * (xs[h - 1] + xs[h]);
  double sum = 0;
  for (double x : xs) sum += x;
  s.mean = sum / xs.size();
  double ss = 0;
  for (double x : xs) ss += (x - s.mean) * (x - s.mean);
  s.stddev = xs.size() > 1 ? std::sqrt(ss / (xs.size() - 1)) : 0.0;
  return s;
}

/// {"n", "median", "min", "max", "mean", "stddev", "samples"}, each value multiplied by
/// `scale` (e.g. 1e6 for us).
inline nlohmann::json to_json(const Summary& s, double scale = 1.0) {
  std::vector<double> samples;
  for (double x : s.samples) samples.push_back(x * scale);
  return {{"n", s.n},           {"median", s.median * scale}, {"min", s.min * scale},
          {"max", s.max * scale}, {"mean", s.mean * scale},   {"stddev", s.stddev * scale},
          {"samples", samples}};
}

}  // namespace dtb
