#include "kernels/cpu/fp8_gemm.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/ops_common.h"
#include "kernels/error.h"

namespace dtb::cpu {

namespace {

constexpr int kTile = 128, kMx = 32;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// Columns per scale along K and rows per scale for a granularity (per_tensor: the whole matrix).
int k_span(Fp8Scaling s, int cols) {
  switch (s) {
    case Fp8Scaling::per_tensor: return cols;
    case Fp8Scaling::tile_1x128:
    case Fp8Scaling::block_128x128: return kTile;
    case Fp8Scaling::mx_1x32: return kMx;
  }
  return cols;
}
int row_span(Fp8Scaling s, int rows) {
  return s == Fp8Scaling::per_tensor ? rows : s == Fp8Scaling::block_128x128 ? kTile : 1;
}

}  // namespace

float Fp8Matrix::scale_inv_at(int r, int c) const {
  const int ks = k_span(scaling, cols), rs = row_span(scaling, rows);
  return scale_inv[size_t(r / rs) * size_t(ceil_div(cols, ks)) + size_t(c / ks)];
}

Fp8Counts fp8_count(const float* x, const Fp8Matrix& q) {
  Fp8Counts c;
  // The magnitude from which the cast clamps (fp8_max plus half its ulp: 464, 61440).
  const float clamp_from = half_detail::bit_cast<float>(fp8_detail::spec(q.format).saturate_from);
  for (int r = 0; r < q.rows; ++r)
    for (int k = 0; k < q.cols; ++k) {
      const size_t i = size_t(r) * size_t(q.cols) + size_t(k);
      const float v = x[i];
      ++c.values;
      if (v == 0.0f) {
        ++c.zeros;
      } else if (std::isinf(v)) {
        ++c.saturated;  // the cast clamps an infinity to the largest finite value
      } else if (std::isfinite(v)) {
        if ((q.q[i] & 0x7fu) == 0) ++c.flushed;
        // |v| at its scale (1 / the multiplier: a power of two for the block recipes, 1 / the
        // caller's scale rounded once per tensor) where the cast clamps it.
        if (std::fabs(v) / q.scale_inv_at(r, k) >= clamp_from) ++c.saturated;
      }
    }
  return c;
}

Fp8Matrix fp8_quantize(const float* x, int rows, int cols, Fp8Format format, Fp8Scaling scaling, float scale) {
  DTB_CHECK(rows >= 1 && cols >= 1,
            "fp8_quantize: a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  Fp8Matrix m;
  m.rows = rows, m.cols = cols, m.format = format, m.scaling = scaling;
  m.q.resize(size_t(rows) * cols);
  const int ks = k_span(scaling, cols), rs = row_span(scaling, rows);
  const int kb = ceil_div(cols, ks), rb = ceil_div(rows, rs);
  m.scale_inv.resize(size_t(rb) * kb);
  if (scaling == Fp8Scaling::mx_1x32) m.e8m0.resize(m.scale_inv.size());
  DTB_CHECK(scaling != Fp8Scaling::per_tensor || (scale > 0.0f && std::isfinite(scale)),
            "fp8_quantize: the per-tensor scale " + std::to_string(scale) + " is not positive and finite");
  for (int bi = 0; bi < rb; ++bi)
    for (int bk = 0; bk < kb; ++bk) {
      const int r0 = bi * rs, r1 = std::min(rows, r0 + rs), c0 = bk * ks, c1 = std::min(cols, c0 + ks);
      const size_t idx = size_t(bi) * kb + bk;
      if (scaling == Fp8Scaling::mx_1x32) {  // rs = 1: one row's block
        const size_t at = size_t(r0) * cols + c0;
        m.e8m0[idx] = mxfp8_quantize_block(&m.q[at], &x[at], size_t(c1 - c0), format);
        m.scale_inv[idx] = e8m0_bits_to_float(m.e8m0[idx]);
        continue;
      }
      float s = scale;
      if (scaling != Fp8Scaling::per_tensor) {
        float amax = 0.0f;
        for (int r = r0; r < r1; ++r)
          amax = std::fmax(amax, fp8_amax(&x[size_t(r) * cols + c0], size_t(c1 - c0)));
        s = fp8_scale_from_amax(amax, fp8_max(format), true, 0.0f, std::numeric_limits<float>::max());
      }
      for (int r = r0; r < r1; ++r)
        for (int c = c0; c < c1; ++c)
          m.q[size_t(r) * cols + c] = float_to_fp8_bits(x[size_t(r) * cols + c] * s, format);
      m.scale_inv[idx] = 1.0f / s;
    }
  return m;
}

int fp8_gemm_k_block(Fp8Scaling a, Fp8Scaling w, int K) {
  auto tiled = [](Fp8Scaling s) { return s == Fp8Scaling::tile_1x128 || s == Fp8Scaling::block_128x128; };
  if (a == Fp8Scaling::per_tensor && w == Fp8Scaling::per_tensor) return K;
  if (tiled(a) && tiled(w) && !(a == Fp8Scaling::block_128x128 && w == Fp8Scaling::block_128x128)) return kTile;
  if (a == Fp8Scaling::mx_1x32 && w == Fp8Scaling::mx_1x32) return kMx;
  return 0;
}

namespace {

// One row of out: out_row[o] = sum over the K-blocks, ascending, of partial[o] * (sa_b * sw[b][o]),
// partial[o] the block's products a_k * w_k summed over k ascending, from zero. The loops run over o
// innermost, each o its own accumulator: each output is summed in exactly fp8_gemm_nt's documented
// order (no reassociation, and no contraction: this file is compiled with -ffp-contract=off), so the
// AVX2 clone, which computes eight outputs a vector, rounds as the baseline, which computes them
// one by one (and as the scalar loop this replaced: Fp8Gemm.AccumulatesInTheDocumentedOrder).
// ar: the row's K codes as floats; wt: W's codes as floats, K × OC (transposed); sw: per block, OC
// scale_invs of W; sa: per block, the row's scale_inv; partial: OC floats of scratch.
DTB_VECTOR_CLONES void gemm_row(float* __restrict out_row, const float* __restrict ar, const float* __restrict wt,
                              const float* __restrict sw, const float* __restrict sa, float* __restrict partial,
                              int K, int OC, int block) {
  for (int o = 0; o < OC; ++o) out_row[o] = 0.0f;
  for (int k0 = 0, b = 0; k0 < K; k0 += block, ++b) {
    const int k1 = std::min(K, k0 + block);
    for (int o = 0; o < OC; ++o) partial[o] = 0.0f;
    for (int k = k0; k < k1; ++k) {
      const float x = ar[k];
      const float* __restrict wk = wt + size_t(k) * size_t(OC);
      for (int o = 0; o < OC; ++o) partial[o] += x * wk[o];
    }
    const float* __restrict swb = sw + size_t(b) * size_t(OC);
    const float sab = sa[b];
    for (int o = 0; o < OC; ++o) out_row[o] += partial[o] * (sab * swb[o]);
  }
}

}  // namespace

void fp8_gemm_nt(float* out, const Fp8Matrix& a, const Fp8Matrix& w) {
  DTB_CHECK(a.cols == w.cols,
            "fp8_gemm_nt: K differs (" + std::to_string(a.cols) + " and " + std::to_string(w.cols) + ")");
  const int block = fp8_gemm_k_block(a.scaling, w.scaling, a.cols);
  DTB_CHECK(block != 0, std::string("fp8_gemm_nt: no FP8 GEMM pairs ") + to_string(a.scaling) + " with " +
                            to_string(w.scaling));
  DTB_CHECK(a.format == Fp8Format::e4m3 || w.format == Fp8Format::e4m3,
            "fp8_gemm_nt: no FP8 GEMM takes two E5M2 operands");
  const int K = a.cols, N = a.rows, OC = w.rows, blocks = ceil_div(K, block);
  // The codes as floats (exact), once: A's rows as they are, W transposed (K × OC), W's scale_invs per
  // block and output, A's per row and block.
  std::vector<float> av(a.q.size()), wt(w.q.size()), sw(size_t(blocks) * size_t(OC)), sa(static_cast<size_t>(blocks));
  for (size_t i = 0; i < av.size(); ++i) av[i] = fp8_bits_to_float(a.q[i], a.format);
  for (int o = 0; o < OC; ++o)
    for (int k = 0; k < K; ++k)
      wt[size_t(k) * size_t(OC) + size_t(o)] = fp8_bits_to_float(w.q[size_t(o) * size_t(K) + size_t(k)], w.format);
  for (int b = 0; b < blocks; ++b)
    for (int o = 0; o < OC; ++o) sw[size_t(b) * size_t(OC) + size_t(o)] = w.scale_inv_at(o, b * block);
  std::vector<float> partial(static_cast<size_t>(OC));
  for (int n = 0; n < N; ++n) {
    for (int b = 0; b < blocks; ++b) sa[size_t(b)] = a.scale_inv_at(n, b * block);
    gemm_row(out + size_t(n) * size_t(OC), &av[size_t(n) * size_t(K)], wt.data(), sw.data(), sa.data(),
             partial.data(), K, OC, block);
  }
}

namespace {

std::vector<float> transposed(const float* x, int rows, int cols) {
  std::vector<float> t(size_t(rows) * size_t(cols));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c) * size_t(rows) + size_t(r)] = x[size_t(r) * size_t(cols) + size_t(c)];
  return t;
}

Fp8Matrix quantize(const float* x, int rows, int cols, const Fp8Operand& o) {
  return fp8_quantize(x, rows, cols, o.format, o.scaling, o.scale);
}

void check_linear(int N, int C, int OC) {
  DTB_CHECK(N >= 1 && C >= 1 && OC >= 1, "fp8 linear: N " + std::to_string(N) + ", C " + std::to_string(C) +
                                             ", OC " + std::to_string(OC) + " (each must be >= 1)");
}

}  // namespace

void fp8_linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                        const Fp8Operand& x, const Fp8Operand& w) {
  check_linear(N, C, OC);
  fp8_gemm_nt(out, quantize(inp, N, C, x), quantize(weight, OC, C, w));
  if (bias)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[size_t(n) * size_t(OC) + size_t(o)] += bias[o];
}

void fp8_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC, const Fp8Operand& dy, const Fp8Operand& x,
                         const Fp8Operand& w) {
  check_linear(N, C, OC);
  DTB_CHECK(!dinp || weight, "fp8_linear_backward: dinp without the weight");
  DTB_CHECK(!dweight || inp, "fp8_linear_backward: dweight without the input");
  if (dinp) {  // dgrad: (N x OC) . (C x OC)^T
    const std::vector<float> wt = transposed(weight, OC, C);
    std::vector<float> t(size_t(N) * size_t(C));
    fp8_gemm_nt(t.data(), quantize(dout, N, OC, dy), quantize(wt.data(), C, OC, w));
    for (size_t i = 0; i < t.size(); ++i) dinp[i] += t[i];
  }
  if (dweight) {  // wgrad: (OC x N) . (C x N)^T
    const std::vector<float> gt = transposed(dout, N, OC), xt = transposed(inp, N, C);
    std::vector<float> t(size_t(OC) * size_t(C));
    fp8_gemm_nt(t.data(), quantize(gt.data(), OC, N, dy), quantize(xt.data(), C, N, x));
    for (size_t i = 0; i < t.size(); ++i) dweight[i] += t[i];
  }
  if (dbias)
    for (int o = 0; o < OC; ++o) {
      float s = 0.0f;
      for (int n = 0; n < N; ++n) s += dout[size_t(n) * size_t(OC) + size_t(o)];
      dbias[o] += s;
    }
}

}  // namespace dtb::cpu
