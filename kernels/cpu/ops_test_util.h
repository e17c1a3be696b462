// What the tests of the CPU ops (ops_test.cc, attention_test.cc, crossentropy_test.cc)
// share: random inputs, central finite differences and their tolerance, the accumulation
// check, bitwise comparison, and the vocabulary splits of the shard tests. Test code only.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

namespace dtb::cpu::test {

using Vec = std::vector<double>;
using FVec = std::vector<float>;
using Rng = std::mt19937_64;

inline constexpr double kEpsF = std::numeric_limits<float>::epsilon();  // 2^-23
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline Vec uniform(size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Rounded to float and back, so float and double runs see identical inputs and any
// difference is the float computation's own rounding.
inline Vec uniform_f(size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  Vec v = uniform(n, rng, lo, hi);
  for (double& x : v) x = double(float(x));
  return v;
}

inline std::vector<int32_t> tokens(size_t n, int V, Rng& rng) {
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = dist(rng);
  return t;
}

inline FVec to_float(const Vec& v) { return FVec(v.begin(), v.end()); }

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Central differences of `loss` w.r.t. x (restored afterwards) against the analytic `grad`:
// returns max |g_fd - g| / max(1, max |g|) over every element, or over `max_samples` random
// ones when x is larger.
inline double fd_rel_err(Vec& x, const Vec& grad, const std::function<double()>& loss, Rng& rng,
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

inline void report(const char* what, double err, double tol) {
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
inline constexpr double kFdTol = 1e-6;

// ---------------------------------------------------------------- accumulation

// Backward twice from zero must give 2x one call. Each gradient element is a sum of <= ~10
// terms; the second call re-adds the same terms onto the first result, so the two can differ
// only by rounding: <= ~10 eps_double |g| ~ 2e-15 |g|. 1e-13 is far above that and far
// below the 100% error of a backward that writes instead of accumulating.
inline constexpr double kAccumTol = 1e-13;

inline double accum_err(const std::function<void(std::vector<Vec*>)>& backward, std::vector<Vec> once) {
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

// ---------------------------------------------------------------- tensor-parallel shards

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
inline const std::vector<std::vector<int>> kVocabSplits = {
    {0, 128, 256}, {0, 64, 128, 192, 256}, {0, 11, 22, 33}, {0, 1, 21, 33}};

inline std::string split_name(const std::vector<int>& b) {
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
inline std::vector<int32_t> shard_ids(const std::vector<int>& bounds, size_t n, Rng& rng) {
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

}  // namespace dtb::cpu::test
