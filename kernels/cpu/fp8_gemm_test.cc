// Tests of kernels/cpu/fp8_gemm.h: Transformer Engine's scale rule worked by hand; each
// granularity's quantization element by element against kernels/fp8.h's conversions and its
// tiles' scales against their own amax; the GEMM against the exact product of the quantized
// operands (in double) within the bound derived in fp8_gemm.h, and bitwise where every sum is
// exact; the pairing no recipe runs refused.
#include "kernels/cpu/fp8_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace dtb::cpu {
namespace {

constexpr Fp8Format kE4 = Fp8Format::e4m3, kE5 = Fp8Format::e5m2;

TEST(Fp8Gemm, ScaleFromAmaxAsTransformerEngine) {
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(fp8_scale_from_amax(3.0f, 448.0f, false, 0.0f, big), 448.0f / 3.0f);
  EXPECT_EQ(fp8_scale_from_amax(3.0f, 448.0f, true, 0.0f, big), 128.0f);  // 149.33 rounded down to 2^7
  EXPECT_EQ(fp8_scale_from_amax(0.5f, 448.0f, true, 0.0f, big), 512.0f);  // 896 -> 2^9
  EXPECT_EQ(fp8_scale_from_amax(0.0f, 448.0f, false, 0.0f, big), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(INFINITY, 448.0f, false, 0.0f, big), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(NAN, 448.0f, false, 0.0f, big), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(1e-3f, 448.0f, false, 1.0f, big), 448.0f);  // raised to epsilon
  EXPECT_EQ(fp8_scale_from_amax(1e-40f, 448.0f, false, 0.0f, big), big);    // 448 / 1e-40 overflows
  EXPECT_EQ(fp8_amax(std::vector<float>{1.0f, -7.0f, NAN, 2.0f}.data(), 4), 7.0f);
}

std::vector<float> random_matrix(int rows, int cols, std::mt19937& rng, float spread) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(size_t(rows) * cols);
  for (float& v : x) v = d(rng) * std::exp2(std::round(d(rng) * spread));  // magnitudes over 2^(+-3 spread)
  return x;
}

TEST(Fp8Gemm, QuantizeEachGranularity) {
  std::mt19937 rng(46);
  const int rows = 200, cols = 300;  // edge tiles: 300 = 2 x 128 + 44; 200 = 128 + 72
  const std::vector<float> x = random_matrix(rows, cols, rng, 2.0f);
  // Per tensor: the caller's scale, element by element.
  const Fp8Matrix t = fp8_quantize(x.data(), rows, cols, kE4, Fp8Scaling::per_tensor, 37.5f);
  ASSERT_EQ(t.scale_inv.size(), 1u);
  EXPECT_EQ(t.scale_inv[0], 1.0f / 37.5f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(t.q[i], float_to_fp8_bits(x[i] * 37.5f, kE4)) << i;
  // 1x128 tiles and 128x128 blocks: each scale the power of two from its own region's amax.
  for (Fp8Scaling s : {Fp8Scaling::tile_1x128, Fp8Scaling::block_128x128}) {
    const Fp8Matrix m = fp8_quantize(x.data(), rows, cols, kE5, s);
    const int rs = s == Fp8Scaling::tile_1x128 ? 1 : 128;
    ASSERT_EQ(m.scale_inv.size(), size_t((rows + rs - 1) / rs) * 3) << to_string(s);
    for (int r0 = 0; r0 < rows; r0 += rs)
      for (int c0 = 0; c0 < cols; c0 += 128) {
        float amax = 0.0f;
        for (int r = r0; r < std::min(rows, r0 + rs); ++r)
          for (int c = c0; c < std::min(cols, c0 + 128); ++c)
            amax = std::fmax(amax, std::fabs(x[size_t(r) * cols + c]));
        const float scale = std::exp2(std::floor(std::log2(57344.0 / amax)));
        ASSERT_EQ(m.scale_inv_at(r0, c0), 1.0f / scale) << to_string(s) << " " << r0 << "," << c0;
        for (int r = r0; r < std::min(rows, r0 + rs); ++r)
          for (int c = c0; c < std::min(cols, c0 + 128); ++c)
            ASSERT_EQ(m.q[size_t(r) * cols + c], float_to_fp8_bits(x[size_t(r) * cols + c] * scale, kE5));
      }
  }
  // MX: each 1x32 block as mxfp8_quantize_block, the last one 300 - 9 x 32 = 12 wide.
  const Fp8Matrix mx = fp8_quantize(x.data(), rows, cols, kE4, Fp8Scaling::mx_1x32);
  ASSERT_EQ(mx.e8m0.size(), size_t(rows) * 10);
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < 10; ++b) {
      const int w = std::min(32, cols - 32 * b);
      std::vector<uint8_t> q(static_cast<size_t>(w));
      const uint8_t e = mxfp8_quantize_block(q.data(), &x[size_t(r) * cols + 32 * b], size_t(w), kE4);
      ASSERT_EQ(mx.e8m0[size_t(r) * 10 + b], e);
      ASSERT_EQ(mx.scale_inv_at(r, 32 * b), e8m0_bits_to_float(e));
      for (int i = 0; i < w; ++i) ASSERT_EQ(mx.q[size_t(r) * cols + 32 * b + i], q[size_t(i)]);
    }
}

/// The multiplier of element (r, c) by the layout fp8_gemm.h documents, written here apart from
/// Fp8Matrix::scale_inv_at (which the GEMM uses).
double reference_scale_inv(const Fp8Matrix& m, int r, int c) {
  const int kb128 = (m.cols + 127) / 128, kb32 = (m.cols + 31) / 32;
  switch (m.scaling) {
    case Fp8Scaling::per_tensor: return m.scale_inv.at(0);
    case Fp8Scaling::tile_1x128: return m.scale_inv.at(size_t(r) * kb128 + size_t(c / 128));
    case Fp8Scaling::block_128x128: return m.scale_inv.at(size_t(r / 128) * kb128 + size_t(c / 128));
    case Fp8Scaling::mx_1x32: return std::ldexp(1.0, int(m.e8m0.at(size_t(r) * kb32 + size_t(c / 32))) - 127);
  }
  return NAN;
}
double reference_value(const Fp8Matrix& m, int r, int c) {
  return double(fp8_bits_to_float(m.q[size_t(r) * m.cols + c], m.format)) * reference_scale_inv(m, r, c);
}

/// Checks out = A W^T against the product of the quantized values (summed in double: its own error
/// about 2^-29 of the bound) within gamma_{B + ceil(K/B)} times sum |a w| (fp8_gemm.h's bound);
/// returns the largest error as a fraction of its bound.
double check_gemm(const Fp8Matrix& a, const Fp8Matrix& w) {
  const int N = a.rows, OC = w.rows, K = a.cols, B = fp8_gemm_k_block(a.scaling, w.scaling, K);
  std::vector<float> out(size_t(N) * OC);
  fp8_gemm_nt(out.data(), a, w);
  const double u = std::ldexp(1.0, -24), n = B + (K + B - 1) / B, gamma = n * u / (1 - n * u);
  double worst = 0;
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double exact = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = reference_value(a, i, k) * reference_value(w, o, k);
        exact += p, mag += std::fabs(p);
      }
      const double err = std::fabs(double(out[size_t(i) * OC + o]) - exact), bound = gamma * mag;
      EXPECT_LE(err, bound) << "out[" << i << "," << o << "] " << to_string(a.scaling) << " x " << to_string(w.scaling);
      if (bound > 0) worst = std::max(worst, err / bound);
    }
  return worst;
}

// fp8_count by hand. Per tensor, E4M3 at scale 2: 300 (600 >= 464: clamped, saturated), 230 (460:
// rounds to 448, not clamped), 2^-11 (2^-10, half E4M3's smallest subnormal 2^-9, ties to zero: flushed),
// 2^-10 (2^-9: kept), 0 (a zero), NaN (a value, nothing else). MXFP8, one block of 32 with amax 1:
// its E8M0 scale rounds 1/448 up to 2^-8, so nothing saturates, and +-2^-20 become 2^-12, below
// 2^-10: flushed.
TEST(Fp8Gemm, CountsSaturatedAndFlushedValues) {
  const float x[6] = {300.0f, 230.0f, 0x1p-11f, 0x1p-10f, 0.0f, std::nanf("")};
  const Fp8Matrix q = fp8_quantize(x, 1, 6, Fp8Format::e4m3, Fp8Scaling::per_tensor, 2.0f);
  const Fp8Counts c = fp8_count(x, q);
  EXPECT_EQ(c.values, 6);
  EXPECT_EQ(c.zeros, 1);
  EXPECT_EQ(c.saturated, 1);
  EXPECT_EQ(c.flushed, 1);
  std::vector<float> row(32, 0.5f);
  row[0] = 1.0f, row[1] = 0x1p-20f, row[2] = -0x1p-20f;
  const Fp8Matrix m = fp8_quantize(row.data(), 1, 32, Fp8Format::e4m3, Fp8Scaling::mx_1x32);
  const Fp8Counts d = fp8_count(row.data(), m);
  EXPECT_EQ(d.values, 32);
  EXPECT_EQ(d.zeros, 0);
  EXPECT_EQ(d.saturated, 0);
  EXPECT_EQ(d.flushed, 2);
}

// The recipes' operand pairings (granularity and format of A and of W).
struct Pair { Fp8Scaling a, w; Fp8Format fa, fw; };
const Pair kPairings[] = {Pair{Fp8Scaling::per_tensor, Fp8Scaling::per_tensor, kE4, kE4},
                          Pair{Fp8Scaling::per_tensor, Fp8Scaling::per_tensor, kE5, kE4},  // dgrad: E5M2 gradients
                          Pair{Fp8Scaling::tile_1x128, Fp8Scaling::block_128x128, kE4, kE4},
                          Pair{Fp8Scaling::block_128x128, Fp8Scaling::tile_1x128, kE4, kE5},
                          Pair{Fp8Scaling::tile_1x128, Fp8Scaling::tile_1x128, kE5, kE4},
                          Pair{Fp8Scaling::mx_1x32, Fp8Scaling::mx_1x32, kE4, kE4}};

// Both operands of a pairing, quantized: delayed-like per-tensor scales that are not powers of two
// (448 / amax of each operand).
std::pair<Fp8Matrix, Fp8Matrix> quantized(const Pair& p, const std::vector<float>& a, const std::vector<float>& w,
                                          int N, int OC, int K) {
  const float sa = 448.0f / fp8_amax(a.data(), a.size()), sw = 448.0f / fp8_amax(w.data(), w.size());
  return {fp8_quantize(a.data(), N, K, p.fa, p.a, sa), fp8_quantize(w.data(), OC, K, p.fw, p.w, sw)};
}

TEST(Fp8Gemm, WithinItsBoundForEveryRecipesPairing) {
  std::mt19937 rng(2412);
  const int N = 130, OC = 7, K = 300;  // A's 128x128 blocks in two block rows, K's last tiles partial
  const std::vector<float> a = random_matrix(N, K, rng, 3.0f), w = random_matrix(OC, K, rng, 3.0f);
  for (const Pair& p : kPairings) {
    const auto [qa, qw] = quantized(p, a, w, N, OC, K);
    const double worst = check_gemm(qa, qw);
    std::printf("fp8 gemm %s x %s: worst error %.3g of its bound\n", to_string(p.a), to_string(p.w), worst);
  }
}

// The documented order, written out one output at a time: per K-block, the products summed in float
// from zero over k ascending, then out += partial * (sa * sw), the blocks ascending. fp8_gemm_nt
// computes many outputs at once (and in its AVX2 clone eight a vector): each must round exactly so.
// N = 130 and OC = 137 reach the second row of 128x128 blocks of either operand and leave a
// remainder after any vector width; K = 300 a partial last block. (It checks the clone this CPU
// runs: the AVX2 one here.)
TEST(Fp8Gemm, AccumulatesInTheDocumentedOrder) {
  std::mt19937 rng(99);
  const int N = 130, OC = 137, K = 300;
  const std::vector<float> a = random_matrix(N, K, rng, 3.0f), w = random_matrix(OC, K, rng, 3.0f);
  for (const Pair& p : kPairings) {
    const auto [qa, qw] = quantized(p, a, w, N, OC, K);
    const int B = fp8_gemm_k_block(qa.scaling, qw.scaling, K);
    std::vector<float> out(size_t(N) * OC);
    fp8_gemm_nt(out.data(), qa, qw);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        volatile float acc = 0.0f;  // volatile: each operation rounded to float, none fused
        for (int k0 = 0; k0 < K; k0 += B) {
          volatile float partial = 0.0f;
          for (int k = k0; k < std::min(K, k0 + B); ++k) {
            const volatile float prod = fp8_bits_to_float(qa.q[size_t(n) * K + k], qa.format) *
                                        fp8_bits_to_float(qw.q[size_t(o) * K + k], qw.format);
            partial = partial + prod;
          }
          const volatile float scale = qa.scale_inv_at(n, k0) * qw.scale_inv_at(o, k0);
          const volatile float term = partial * scale;
          acc = acc + term;
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(out[size_t(n) * OC + o]), std::bit_cast<uint32_t>(float(acc)))
            << to_string(p.a) << " x " << to_string(p.w) << " out[" << n << "," << o << "] " << out[size_t(n) * OC + o]
            << " against " << float(acc);
      }
  }
}

TEST(Fp8Gemm, BitwiseWhereEverySumIsExact) {
  // Small integers (exact in E4M3) times a power of two that differs per row and per 128-column
  // tile (so each tile has its own scale, and a scale taken from the wrong tile shows), at scale 1
  // or power-of-two tile scales: every partial sum is an integer below 2^24 times a power of two,
  // so the GEMM equals the exact product bit for bit.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> v(-8, 8);
  const int N = 5, OC = 4, K = 384;
  std::vector<float> a(size_t(N) * K), w(size_t(OC) * K);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::ldexp(float(v(rng)), int(i / K + (i % K) / 128) % 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::ldexp(float(v(rng)), -2 + int((i % K) / 128));
  for (auto [sa, sw] : {std::pair{Fp8Scaling::per_tensor, Fp8Scaling::per_tensor},
                        {Fp8Scaling::tile_1x128, Fp8Scaling::block_128x128}}) {
    const Fp8Matrix qa = fp8_quantize(a.data(), N, K, kE4, sa), qw = fp8_quantize(w.data(), OC, K, kE4, sw);
    std::vector<float> out(size_t(N) * OC);
    fp8_gemm_nt(out.data(), qa, qw);
    for (int i = 0; i < N; ++i)
      for (int o = 0; o < OC; ++o) {
        double exact = 0;
        for (int k = 0; k < K; ++k) exact += double(a[size_t(i) * K + k]) * double(w[size_t(o) * K + k]);
        ASSERT_EQ(double(out[size_t(i) * OC + o]), exact) << to_string(sa) << " " << i << "," << o;
      }
  }
}

TEST(Fp8Gemm, PairingsNoRecipeRunsAbort) {
  EXPECT_EQ(fp8_gemm_k_block(Fp8Scaling::per_tensor, Fp8Scaling::per_tensor, 300), 300);
  EXPECT_EQ(fp8_gemm_k_block(Fp8Scaling::tile_1x128, Fp8Scaling::block_128x128, 300), 128);
  EXPECT_EQ(fp8_gemm_k_block(Fp8Scaling::mx_1x32, Fp8Scaling::mx_1x32, 300), 32);
  EXPECT_EQ(fp8_gemm_k_block(Fp8Scaling::block_128x128, Fp8Scaling::tile_1x128, 300), 128);
  EXPECT_EQ(fp8_gemm_k_block(Fp8Scaling::per_tensor, Fp8Scaling::tile_1x128, 300), 0);
  EXPECT_EQ(fp8_gemm_k_block(Fp8Scaling::block_128x128, Fp8Scaling::block_128x128, 300), 0);  // TE: not 2D by 2D
  const std::vector<float> x(64, 1.0f);
  const Fp8Matrix a = fp8_quantize(x.data(), 2, 32, kE4, Fp8Scaling::per_tensor),
                  w = fp8_quantize(x.data(), 2, 32, kE4, Fp8Scaling::mx_1x32),
                  g = fp8_quantize(x.data(), 2, 32, kE5, Fp8Scaling::per_tensor);
  std::vector<float> out(4);
  EXPECT_DEATH(fp8_gemm_nt(out.data(), a, w), "no FP8 GEMM pairs per_tensor with mx_1x32");
  EXPECT_DEATH(fp8_gemm_nt(out.data(), g, g), "no FP8 GEMM takes two E5M2 operands");
}

// The FP8 linear's three GEMMs. Reference: the float64 matmul of the same operands, written here.
struct Linear {
  int N, C, OC;
  std::vector<float> inp, weight, bias, dout;
};
struct Grads {
  std::vector<float> out, dinp, dweight, dbias;
};
Grads exact_linear(const Linear& l, const Grads& start) {
  Grads g = start;
  auto at = [](const std::vector<float>& v, int r, int c, int cols) { return double(v[size_t(r) * cols + c]); };
  for (int n = 0; n < l.N; ++n)
    for (int o = 0; o < l.OC; ++o) {
      double s = l.bias[size_t(o)];
      for (int c = 0; c < l.C; ++c) s += at(l.inp, n, c, l.C) * at(l.weight, o, c, l.C);
      g.out[size_t(n) * l.OC + o] = float(s);
    }
  for (int n = 0; n < l.N; ++n)
    for (int c = 0; c < l.C; ++c) {
      double s = g.dinp[size_t(n) * l.C + c];
      for (int o = 0; o < l.OC; ++o) s += at(l.dout, n, o, l.OC) * at(l.weight, o, c, l.C);
      g.dinp[size_t(n) * l.C + c] = float(s);
    }
  for (int o = 0; o < l.OC; ++o) {
    for (int c = 0; c < l.C; ++c) {
      double s = g.dweight[size_t(o) * l.C + c];
      for (int n = 0; n < l.N; ++n) s += at(l.dout, n, o, l.OC) * at(l.inp, n, c, l.C);
      g.dweight[size_t(o) * l.C + c] = float(s);
    }
    double s = g.dbias[size_t(o)];
    for (int n = 0; n < l.N; ++n) s += at(l.dout, n, o, l.OC);
    g.dbias[size_t(o)] = float(s);
  }
  return g;
}
Grads fp8_linear(const Linear& l, const Grads& start, Fp8Operand dy, Fp8Operand x, Fp8Operand w) {
  Grads g = start;
  fp8_linear_forward(g.out.data(), l.inp.data(), l.weight.data(), l.bias.data(), l.N, l.C, l.OC, x, w);
  fp8_linear_backward(g.dinp.data(), g.dweight.data(), g.dbias.data(), l.dout.data(), l.inp.data(), l.weight.data(),
                      l.N, l.C, l.OC, dy, x, w);
  return g;
}
std::vector<float> draw(size_t n, std::mt19937& rng, const std::vector<float>& values) {
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<float> v(n);
  for (float& x : v) x = values[pick(rng)];
  return v;
}

TEST(Fp8Linear, EveryRecipeExactOnRepresentableValues) {
  // Every value in {0, +-0.5, +-1, +-1.5, +-2, +-3} (at most 2 significant bits) times any of the
  // recipes' power-of-two scales is an E4M3 and an E5M2 code (3 * 128 = 384 <= 448; 3 * 2^14 =
  // 49152 <= 57344), so quantization is exact and each GEMM must equal the exact matmul: the
  // sums are multiples of 0.25 below 2^11, exact in float. A transposed operand, a wrong K or a
  // "=" for a "+=" changes the result; a wrong granularity does not (exact values quantize exactly
  // at any power-of-two scale): EachGemmQuantizesItsOperandsAlongItsK checks that. N = 130 and
  // C = 160 cross a 128-tile edge (wgrad's K is N, dgrad's OC, the forward's C); the accumulators
  // start non-zero.
  std::mt19937 rng(4646);
  const std::vector<float> vals = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 1.5f, -1.5f, 2.0f, -2.0f, 3.0f, -3.0f};
  Linear l{130, 160, 40, {}, {}, {}, {}};
  l.inp = draw(size_t(l.N) * l.C, rng, vals), l.weight = draw(size_t(l.OC) * l.C, rng, vals);
  l.bias = draw(size_t(l.OC), rng, vals), l.dout = draw(size_t(l.N) * l.OC, rng, vals);
  // out starts non-zero: the forward writes it.
  const Grads start{draw(size_t(l.N) * l.OC, rng, vals), draw(size_t(l.N) * l.C, rng, vals),
                    draw(size_t(l.OC) * l.C, rng, vals), draw(size_t(l.OC), rng, vals)};
  const Grads want = exact_linear(l, start);
  struct Recipe { const char* name; Fp8Operand dy, x, w; };
  for (const Recipe& r : {Recipe{"per-tensor", {kE5, Fp8Scaling::per_tensor, 4096.0f},
                                 {kE4, Fp8Scaling::per_tensor, 64.0f}, {kE4, Fp8Scaling::per_tensor, 128.0f}},
                          Recipe{"blockwise", {kE5, Fp8Scaling::tile_1x128}, {kE4, Fp8Scaling::tile_1x128},
                                 {kE4, Fp8Scaling::block_128x128}},
                          Recipe{"mxfp8", {kE5, Fp8Scaling::mx_1x32}, {kE4, Fp8Scaling::mx_1x32},
                                 {kE4, Fp8Scaling::mx_1x32}}}) {
    const Grads got = fp8_linear(l, start, r.dy, r.x, r.w);
    EXPECT_EQ(got.out, want.out) << r.name;
    EXPECT_EQ(got.dinp, want.dinp) << r.name;
    EXPECT_EQ(got.dweight, want.dweight) << r.name;
    EXPECT_EQ(got.dbias, want.dbias) << r.name;
  }
}

std::vector<float> transpose(const std::vector<float>& m, int rows, int cols) {
  std::vector<float> t(m.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c) * rows + r] = m[size_t(r) * cols + c];
  return t;
}

TEST(Fp8Linear, EachGemmQuantizesItsOperandsAlongItsK) {
  // Random values, so that the granularity and the format change the codes: each of the three
  // GEMMs equals fp8_gemm_nt of operands laid out and quantized here (transposes written in the
  // test; the quantizer and the GEMM are tested above on their own): forward x (N x C) with W
  // (OC x C); dgrad dout (N x OC) with W^T (C x OC); wgrad dout^T (OC x N) with x^T (C x N).
  std::mt19937 rng(99);
  const int N = 130, C = 150, OC = 140;  // every K crosses a 128-tile edge
  const std::vector<float> x = random_matrix(N, C, rng, 1.0f), w = random_matrix(OC, C, rng, 1.0f),
                           dy = random_matrix(N, OC, rng, 1.0f);
  struct Recipe { const char* name; Fp8Operand dy, x, w; };
  for (const Recipe& r : {Recipe{"per-tensor", {kE5, Fp8Scaling::per_tensor, 5000.0f},
                                 {kE4, Fp8Scaling::per_tensor, 30.0f}, {kE4, Fp8Scaling::per_tensor, 20.0f}},
                          Recipe{"blockwise", {kE5, Fp8Scaling::tile_1x128}, {kE4, Fp8Scaling::tile_1x128},
                                 {kE4, Fp8Scaling::block_128x128}},
                          Recipe{"mxfp8", {kE5, Fp8Scaling::mx_1x32}, {kE4, Fp8Scaling::mx_1x32},
                                 {kE4, Fp8Scaling::mx_1x32}}}) {
    auto q = [](const std::vector<float>& m, int rows, int cols, const Fp8Operand& o) {
      return fp8_quantize(m.data(), rows, cols, o.format, o.scaling, o.scale);
    };
    std::vector<float> out(size_t(N) * OC), want(out.size());
    fp8_linear_forward(out.data(), x.data(), w.data(), nullptr, N, C, OC, r.x, r.w);
    fp8_gemm_nt(want.data(), q(x, N, C, r.x), q(w, OC, C, r.w));
    EXPECT_EQ(out, want) << r.name << " forward";
    std::vector<float> dx(size_t(N) * C, 0.0f), dw(size_t(OC) * C, 0.0f), wdx(dx.size()), wdw(dw.size());
    fp8_linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC, r.dy, r.x, r.w);
    fp8_gemm_nt(wdx.data(), q(dy, N, OC, r.dy), q(transpose(w, OC, C), C, OC, r.w));
    fp8_gemm_nt(wdw.data(), q(transpose(dy, N, OC), OC, N, r.dy), q(transpose(x, N, C), C, N, r.x));
    EXPECT_EQ(dx, wdx) << r.name << " dgrad";
    EXPECT_EQ(dw, wdw) << r.name << " wgrad";
  }
}

TEST(Fp8Linear, PerTensorQuantizesEachOperandInItsFormat) {
  // Random values: each GEMM against the float64 product of operands quantized here element by
  // element (dout in E5M2 with its scale, inp and weight in E4M3 with theirs), within
  // gamma_{K+1} sum |a w| (fp8_gemm.h's bound for one block); quantizing dout as E4M3, or
  // the weight with the input's scale, moves a value by far more.
  std::mt19937 rng(8);
  Linear l{9, 40, 6, {}, {}, {}, {}};
  l.inp = random_matrix(l.N, l.C, rng, 2.0f), l.weight = random_matrix(l.OC, l.C, rng, 2.0f);
  l.bias = std::vector<float>(size_t(l.OC), 0.0f), l.dout = random_matrix(l.N, l.OC, rng, 2.0f);
  const Fp8Operand dy{kE5, Fp8Scaling::per_tensor, 57344.0f / fp8_amax(l.dout.data(), l.dout.size())},
      x{kE4, Fp8Scaling::per_tensor, 448.0f / fp8_amax(l.inp.data(), l.inp.size())},
      w{kE4, Fp8Scaling::per_tensor, 448.0f / fp8_amax(l.weight.data(), l.weight.size())};
  auto q = [](const std::vector<float>& v, const Fp8Operand& o) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = float(double(fp8_bits_to_float(float_to_fp8_bits(v[i] * o.scale, o.format), o.format)) / o.scale);
    return out;
  };
  Linear lq = l;
  lq.inp = q(l.inp, x), lq.weight = q(l.weight, w), lq.dout = q(l.dout, dy);
  const Grads zero{std::vector<float>(size_t(l.N) * l.OC), std::vector<float>(size_t(l.N) * l.C),
                   std::vector<float>(size_t(l.OC) * l.C), std::vector<float>(size_t(l.OC))};
  const Grads got = fp8_linear(l, zero, dy, x, w), want = exact_linear(lq, zero);
  // Elementwise: |got - want| <= (gamma_{K+1} + u) sum_k |a_k w_k| (the GEMM's bound, and want's
  // own rounding from float64 to float), the magnitudes from the same matmul of |values|.
  Linear la = lq;
  for (auto* v : {&la.inp, &la.weight, &la.dout})
    for (float& e : *v) e = std::fabs(e);
  const Grads mag = exact_linear(la, zero);
  auto close = [](const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& m, int K,
                  const char* what) {
    const double u = std::ldexp(1.0, -24), gamma = (K + 1) * u / (1 - (K + 1) * u);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_LE(std::fabs(double(a[i]) - double(b[i])), (gamma + u) * double(m[i])) << what << " " << i;
  };
  close(got.out, want.out, mag.out, l.C, "forward");
  close(got.dinp, want.dinp, mag.dinp, l.OC, "dgrad");
  close(got.dweight, want.dweight, mag.dweight, l.N, "wgrad");
  // dbias: the unquantized gradient's column sums in float, rows in ascending order.
  for (int o = 0; o < l.OC; ++o) {
    float sum = 0.0f;
    for (int n = 0; n < l.N; ++n) sum += l.dout[size_t(n) * l.OC + o];
    EXPECT_EQ(got.dbias[size_t(o)], sum) << o;
  }
}

TEST(Fp8Linear, InputPassThenWeightPassEqualsOneCall) {
  // A zero-bubble schedule's B (dinp only) then W (dweight and dbias only), bitwise one call's.
  std::mt19937 rng(11);
  const int N = 140, C = 150, OC = 33;
  const std::vector<float> inp = random_matrix(N, C, rng, 1.0f), weight = random_matrix(OC, C, rng, 1.0f),
                           dout = random_matrix(N, OC, rng, 1.0f);
  const Fp8Operand dy{kE5, Fp8Scaling::tile_1x128}, x{kE4, Fp8Scaling::tile_1x128}, w{kE4, Fp8Scaling::block_128x128};
  std::vector<float> di1(size_t(N) * C, 0.5f), dw1(size_t(OC) * C, 0.25f), db1(size_t(OC), 1.0f);
  std::vector<float> di2 = di1, dw2 = dw1, db2 = db1;
  fp8_linear_backward(di1.data(), dw1.data(), db1.data(), dout.data(), inp.data(), weight.data(), N, C, OC, dy, x, w);
  fp8_linear_backward(di2.data(), nullptr, nullptr, dout.data(), inp.data(), weight.data(), N, C, OC, dy, x, w);
  fp8_linear_backward(nullptr, dw2.data(), db2.data(), dout.data(), inp.data(), nullptr, N, C, OC, dy, x, w);
  EXPECT_EQ(di1, di2);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
}

}  // namespace
}  // namespace dtb::cpu
