// Tests of kernels/cuda/ops.cu: every CUDA op against its CPU twin (dtb::cpu, kernels/cpu/ops.h,
// itself tested against finite differences) on fresh random inputs, at several shapes
// including sizes that are not multiples of 32. Written outputs are poisoned with NaN
// (all-ones bytes) first, so an element the op forgets to write fails the comparison;
// accumulate-into outputs start from known random values and are compared after.
// Without a usable GPU every test is skipped with the reason. Tolerances: ops_test_util.h.
// Attention, cross-entropy and the Ops interface have their own files (attention_test.cc,
// crossentropy_test.cc, cuda_ops_test.cc).
#include "kernels/cuda/ops.cuh"

#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/ops_test_util.h"

namespace dtb::cuda {
namespace {

using namespace dtb::cuda::test_util;
using namespace dtb::cuda::ops_test_util;

TEST(CudaOps, EncoderForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(1);
  Stream s;
  struct Shape { int B, T, C, V; };
  for (const Shape sh : {Shape{1, 1, 1, 1}, Shape{2, 5, 48, 11}, Shape{3, 33, 72, 7},
                         Shape{1, 64, 100, 50}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C);
    const size_t n = size_t(sh.B) * sh.T * sh.C;
    const auto tok = ids(size_t(sh.B) * sh.T, sh.V, rng);
    const FVec wte = uniform(size_t(sh.V) * sh.C, rng), wpe = uniform(size_t(sh.T) * sh.C, rng);
    FVec want(n);
    cpu::encoder_forward(want.data(), tok.data(), wte.data(), wpe.data(), sh.B, sh.T, sh.C);
    DevBuf<int32_t> d_tok(tok);
    DevBuf<float> d_wte(wte), d_wpe(wpe), d_out(n);
    d_out.poison();
    encoder_forward(d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), sh.B, sh.T, sh.C, s);
    s.sync();
    EXPECT_EQ(rel_err(d_out.download(), want), 0.0);  // one IEEE add per element: exact
  }
}

TEST(CudaOps, EncoderBackwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(2);
  Stream s;
  struct Shape { int B, T, C, V; };
  // Small V: many tokens repeat, so the atomicAdd scatter collides.
  for (const Shape sh : {Shape{1, 1, 1, 1}, Shape{2, 5, 48, 3}, Shape{3, 33, 72, 7}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C);
    const auto tok = ids(size_t(sh.B) * sh.T, sh.V, rng);
    const FVec dout = uniform(size_t(sh.B) * sh.T * sh.C, rng);
    FVec dwte = uniform(size_t(sh.V) * sh.C, rng), dwpe = uniform(size_t(sh.T) * sh.C, rng);
    DevBuf<int32_t> d_tok(tok);
    DevBuf<float> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), sh.B, sh.T, sh.C);
    encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.get(), sh.B, sh.T, sh.C, s);
    s.sync();
    // dwte: up to B*T adds per element in atomic (arbitrary) order.
    EXPECT_LE(rel_err(d_dwte.download(), dwte), tol_fp32(double(sh.B) * sh.T));
    EXPECT_EQ(rel_err(d_dwpe.download(), dwpe), 0.0);  // same adds in the same (b) order
  }
}

TEST(CudaOps, LayerNormForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(3);
  Stream s;
  for (const auto& [N, C] : {std::pair{1, 1}, std::pair{7, 768}, std::pair{65, 33},
                            std::pair{130, 96}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    // Offset 1 so mean != 0: the (x - mean) of out then carries mean's rounding, ~|mean|/std
    // (~2x) larger relative to out; hence 4 tol_fp32(C) on out.
    const FVec inp = uniform(size_t(N) * C, rng, 0.0f, 2.0f);
    const FVec w = uniform(C, rng), b = uniform(C, rng);
    FVec out(size_t(N) * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                           C);
    DevBuf<float> d_inp(inp), d_w(w), d_b(b), d_out(out.size()), d_mean(N), d_rstd(N);
    d_out.poison();
    d_mean.poison();
    d_rstd.poison();
    layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(),
                      N, C, s);
    s.sync();
    EXPECT_LE(rel_err(d_mean.download(), mean), tol_fp32(C));
    EXPECT_LE(rel_err(d_rstd.download(), rstd), tol_fp32(C));
    EXPECT_LE(rel_err(d_out.download(), out), 4 * tol_fp32(C));
  }
}

TEST(CudaOps, LayerNormBackwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(4);
  Stream s;
  for (const auto& [N, C] : {std::pair{1, 1}, std::pair{7, 768}, std::pair{65, 33},
                            std::pair{130, 96}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    const FVec inp = uniform(size_t(N) * C, rng, 0.0f, 2.0f);
    const FVec w = uniform(C, rng), b = uniform(C, rng), dout = uniform(size_t(N) * C, rng);
    FVec out(size_t(N) * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                           C);
    FVec dinp = uniform(size_t(N) * C, rng), dw = uniform(C, rng), db = uniform(C, rng);
    DevBuf<float> d_inp(inp), d_w(w), d_dout(dout), d_mean(mean), d_rstd(rstd);
    DevBuf<float> d_dinp(dinp), d_dw(dw), d_db(db);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                       d_mean.get(), d_rstd.get(), N, C, s);
    s.sync();
    // dinp: two C-term means, then (g - mean - xhat*mean) cancels partly: 4 tol_fp32(C).
    EXPECT_LE(rel_err(d_dinp.download(), dinp), 4 * tol_fp32(C));
    EXPECT_LE(rel_err(d_dw.download(), dw), tol_fp32(N));  // N-term column sums
    EXPECT_LE(rel_err(d_db.download(), db), tol_fp32(N));
  }
}

TEST(CudaOps, GeluMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(5);
  Stream s;
  // n >= 33: with a single element the norm would be that element's, and near x = -5,
  // where 1 + tanh ~ 2e-7, tanhf's 2 ulp are a large part of it.
  for (const size_t n : {size_t(33), size_t(1000), size_t(4097)}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const FVec inp = uniform(n, rng, -5.0f, 5.0f), dout = uniform(n, rng);
    FVec out(n), dinp = uniform(n, rng);
    DevBuf<float> d_inp(inp), d_dout(dout), d_out(n), d_dinp(dinp);
    d_out.poison();
    cpu::gelu_forward(out.data(), inp.data(), n);
    cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    gelu_forward(d_out.get(), d_inp.get(), n, s);
    gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n, s);
    s.sync();
    // ~8 rounded ops and a tanh (<= 2 ulp) per element: a few u relative; 32u allows it.
    EXPECT_LE(rel_err(d_out.download(), out), 32 * kU);
    // Where tanh saturates, sech^2 = 1 - th^2 is a cancellation whose absolute error ~4u is
    // multiplied by 0.5 x s (1 + 0.134 x^2) ~ 10 at |x| = 5: up to ~40u on those elements.
    EXPECT_LE(rel_err(d_dinp.download(), dinp), 128 * kU);
  }
}

TEST(CudaOps, ResidualMatchesCpuAndMayAlias) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(6);
  Stream s;
  for (const size_t n : {size_t(1), size_t(31), size_t(100003)}) {
    const FVec a = uniform(n, rng), b = uniform(n, rng);
    FVec want(n);
    cpu::residual_forward(want.data(), a.data(), b.data(), n);
    DevBuf<float> d_a(a), d_b(b), d_out(n);
    d_out.poison();
    residual_forward(d_out.get(), d_a.get(), d_b.get(), n, s);
    residual_forward(d_a.get(), d_a.get(), d_b.get(), n, s);  // in place: a += b
    s.sync();
    EXPECT_EQ(rel_err(d_out.download(), want), 0.0);  // one IEEE add: exact
    EXPECT_EQ(rel_err(d_a.download(), want), 0.0);
  }
}

// ---- the sharded ops of tensor parallelism ----

// A vocabulary shard [v_begin, v_end) of V ids, with or without wpe / dwpe. Tokens are drawn
// from all of [0, V), so positions both inside and outside the shard occur.
struct EmbShard {
  int B, T, C, V, v_begin, v_end;
  bool with_pe;
};
const EmbShard kEmbShards[] = {
    {1, 1, 1, 1, 0, 1, true},       // the whole (one-id) vocabulary: encoder_forward
    {1, 7, 65, 100, 33, 66, true},  // N = 7, Vl = 33, C = 65, v_begin > 0
    {1, 7, 65, 100, 67, 100, false},
    {2, 5, 48, 11, 4, 9, false},
    {3, 33, 72, 7, 2, 5, true},           // many repeats of each id
    {3, 200, 33, 5, 1, 3, true},          // B*T = 600 > 256: the backward's position chunks
    {2, 300, 65, 1000, 100, 900, false},  // mostly distinct ids, over several chunks
    {2, 5, 8, 10, 4, 4, true},            // an empty shard: only wpe
};

TEST(CudaOps, EmbeddingShardForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(13);
  Stream s;
  for (const EmbShard sh : kEmbShards) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C << " V=" << sh.V << " shard=["
                 << sh.v_begin << "," << sh.v_end << ") wpe=" << sh.with_pe);
    const size_t n = size_t(sh.B) * sh.T * sh.C;
    const auto tok = ids(size_t(sh.B) * sh.T, sh.V, rng);
    const FVec wte = uniform(size_t(sh.v_end - sh.v_begin) * sh.C, rng);
    const FVec wpe = uniform(size_t(sh.T) * sh.C, rng);
    FVec want(n);
    cpu::embedding_shard_forward(want.data(), tok.data(), wte.data(),
                                 sh.with_pe ? wpe.data() : nullptr, sh.B, sh.T, sh.C, sh.v_begin,
                                 sh.v_end);
    DevBuf<int32_t> d_tok(tok);
    DevBuf<float> d_wte(wte), d_wpe(wpe), d_out(n);
    d_out.poison();
    embedding_shard_forward(d_out.get(), d_tok.get(), d_wte.get(),
                            sh.with_pe ? d_wpe.get() : nullptr, sh.B, sh.T, sh.C, sh.v_begin,
                            sh.v_end, s);
    s.sync();
    // One IEEE add per element (one term possibly an exact 0), the CPU's: exact.
    EXPECT_EQ(rel_err(d_out.download(), want), 0.0);
  }
}

TEST(CudaOps, EmbeddingShardBackwardMatchesCpuBitwise) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(14);
  Stream s;
  for (const EmbShard sh : kEmbShards) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C << " V=" << sh.V << " shard=["
                 << sh.v_begin << "," << sh.v_end << ") dwpe=" << sh.with_pe);
    const auto tok = ids(size_t(sh.B) * sh.T, sh.V, rng);
    const FVec dout = uniform(size_t(sh.B) * sh.T * sh.C, rng);
    FVec dwte = uniform(size_t(sh.v_end - sh.v_begin) * sh.C, rng),
         dwpe = uniform(size_t(sh.T) * sh.C, rng);
    const FVec dwpe0 = dwpe;
    DevBuf<int32_t> d_tok(tok);
    DevBuf<float> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
    cpu::embedding_shard_backward(dwte.data(), sh.with_pe ? dwpe.data() : nullptr, dout.data(),
                                  tok.data(), sh.B, sh.T, sh.C, sh.v_begin, sh.v_end);
    // A second GPU run from the same start (dwpe null there): the result may not depend on
    // the run.
    DevBuf<float> d_dwte2(d_dwte.download());
    embedding_shard_backward(d_dwte.get(), sh.with_pe ? d_dwpe.get() : nullptr, d_dout.get(),
                             d_tok.get(), sh.B, sh.T, sh.C, sh.v_begin, sh.v_end, s);
    embedding_shard_backward(d_dwte2.get(), nullptr, d_dout.get(), d_tok.get(), sh.B, sh.T, sh.C,
                             sh.v_begin, sh.v_end, s);
    s.sync();
    // Each row's adds in (b, t) order, as the CPU (no atomics): bitwise equal.
    const FVec g = d_dwte.download(), g2 = d_dwte2.download();
    EXPECT_EQ(rel_err(g, dwte), 0.0);
    EXPECT_TRUE(g.empty() || std::memcmp(g.data(), g2.data(), g.size() * sizeof(float)) == 0);
    // dwpe: the same adds in b order, exact; with dwpe null, untouched.
    EXPECT_EQ(rel_err(d_dwpe.download(), sh.with_pe ? dwpe : dwpe0), 0.0);
  }
}

TEST(CudaOps, AddBiasMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(15);
  Stream s;
  for (const auto& [N, OC] : {std::pair{1, 1}, std::pair{7, 65}, std::pair{33, 768}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " OC=" << OC);
    FVec out = uniform(size_t(N) * OC, rng);
    const FVec bias = uniform(OC, rng);
    DevBuf<float> d_out(out), d_bias(bias);
    cpu::add_bias(out.data(), bias.data(), N, OC);
    add_bias(d_out.get(), d_bias.get(), N, OC, s);
    s.sync();
    EXPECT_EQ(rel_err(d_out.download(), out), 0.0);  // one IEEE add: exact
  }
}

TEST(CudaOps, AdamWMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(10);
  Stream s;
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  // n >= 33: a lone element could cancel (param * decay ~ lr * update, b1 m ~ -(1-b1) g),
  // making its own relative error large; a norm over many elements is not affected.
  for (const size_t n : {size_t(33), size_t(1000), size_t(4099)}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    FVec param = uniform(n, rng), m(n, 0.0f), v(n, 0.0f);
    DevBuf<float> d_param(param), d_m(m), d_v(v), d_grad(n);
    for (int t = 1; t <= 3; t++) {
      const FVec grad = uniform(n, rng);
      d_grad.upload(grad);
      cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hp, t);
      adamw_update(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, hp, t, s);
      s.sync();
      // Elementwise, ~10 ops; FMA contraction moves each by <= 1 ulp, over 3 steps.
      EXPECT_LE(rel_err(d_param.download(), param), tol_fp32(4)) << "t=" << t;
      EXPECT_LE(rel_err(d_m.download(), m), tol_fp32(4)) << "t=" << t;
      EXPECT_LE(rel_err(d_v.download(), v), tol_fp32(4)) << "t=" << t;
    }
  }
}

// Reference f32 -> bf16, round to nearest even on the bits (NaN handled by the caller).
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
uint16_t f16_bits(float f) {
  const __half h = __float2half_rn(f);  // host implementation of the same conversion
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

TEST(CudaOps, CastRoundsToNearestEven) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(11);
  Stream s;
  const float inf = std::numeric_limits<float>::infinity();
  FVec x = {0.0f, -0.0f, 1.0f, -2.5f, inf, -inf, std::numeric_limits<float>::max(),
            1.0f + 0x1p-8f,       // bf16 tie between 1 and 1+2^-7: to even, 1
            1.0f + 3 * 0x1p-8f,   // bf16 tie: to even, 1+2^-6
            1.0f + 0x1p-11f,      // f16 tie between 1 and 1+2^-10: to even, 1
            65504.0f, 65520.0f,   // f16 max; the tie above it: to inf
            0x1p-24f, 0x1p-25f, 1.5f * 0x1p-25f,  // f16 subnormals: 1 ulp, tie to 0, 1 ulp
            0x1p-130f, std::numeric_limits<float>::denorm_min()};
  const FVec r = uniform(3000, rng);
  std::uniform_int_distribution<int> ex(-30, 30);
  for (float v : r) x.push_back(std::ldexp(v, ex(rng)));
  const size_t n = x.size();
  DevBuf<float> d_x(x), d_back(n);
  DevBuf<uint16_t> d_h(n);
  for (const DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(to_string(t)));
    d_h.poison();
    d_back.poison();
    cast(d_h.get(), t, d_x.get(), DType::f32, n, s);
    cast(d_back.get(), DType::f32, d_h.get(), t, n, s);
    s.sync();
    const auto h = d_h.download();
    const FVec back = d_back.download();
    size_t bad = 0, bad_back = 0;
    for (size_t i = 0; i < n; i++) {
      const uint16_t want = t == DType::bf16 ? bf16_bits(x[i]) : f16_bits(x[i]);
      bad += h[i] != want;
      float want_back;
      if (t == DType::bf16) {
        const uint32_t u = uint32_t(want) << 16;
        std::memcpy(&want_back, &u, 4);
      } else {
        __half_raw raw;
        raw.x = want;
        want_back = __half2float(__half(raw));
      }
      bad_back += std::memcmp(&back[i], &want_back, 4) != 0;
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(bad_back, 0u);
  }
  // NaN stays NaN both ways; equal types copy.
  const FVec nan1 = {std::numeric_limits<float>::quiet_NaN()};
  DevBuf<float> d_nan(nan1), d_nan_back(1), d_copy(n);
  DevBuf<uint16_t> d_nan_h(1);
  cast(d_nan_h.get(), DType::bf16, d_nan.get(), DType::f32, 1, s);
  cast(d_nan_back.get(), DType::f32, d_nan_h.get(), DType::bf16, 1, s);
  cast(d_copy.get(), DType::f32, d_x.get(), DType::f32, n, s);
  s.sync();
  EXPECT_TRUE(std::isnan(d_nan_back.download()[0]));
  EXPECT_EQ(std::memcmp(d_copy.download().data(), x.data(), n * 4), 0);
}

TEST(CudaOps, CountNonfiniteAddsToTheCounter) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  Stream s;
  const size_t n = 1000003;
  FVec x(n, 1.0f);
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[777] = -std::numeric_limits<float>::quiet_NaN();
  x[12345] = std::numeric_limits<float>::infinity();
  x[n - 1] = -std::numeric_limits<float>::infinity();
  x[5] = std::numeric_limits<float>::max();         // finite
  x[6] = std::numeric_limits<float>::denorm_min();  // finite
  DevBuf<float> d_x(x);
  DevBuf<unsigned int> count(std::vector<unsigned int>{3u});
  count_nonfinite(d_x.get(), n, count.get(), s);
  count_nonfinite(d_x.get(), 0, count.get(), s);  // nothing
  s.sync();
  EXPECT_EQ(count.download()[0], 3u + 4u);
}

TEST(CudaOps, GemmHelpersMatchHost) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(12);
  Stream s;
  const int N = 67, OC = 45;
  const FVec x = uniform(size_t(N) * OC, rng), bias = uniform(OC, rng), dst0 = uniform(OC, rng);
  DevBuf<float> d_x(x), d_bias(bias), d_dst(dst0);
  add_bias(d_x.get(), d_bias.get(), N, OC, s);
  column_sum_accumulate(d_dst.get(), d_bias.get(), 1, OC, s);  // dst += bias (one row)
  s.sync();
  FVec want = x, want_dst = dst0;
  for (size_t i = 0; i < want.size(); i++) want[i] += bias[i % OC];
  for (int o = 0; o < OC; o++) want_dst[o] += bias[o];
  EXPECT_EQ(rel_err(d_x.download(), want), 0.0);
  EXPECT_EQ(rel_err(d_dst.download(), want_dst), 0.0);

  // Column sums of x into dst0: N-term sums in row order (a fixed tree of 8 partials).
  d_x.upload(x);
  d_dst.upload(dst0);
  column_sum_accumulate(d_dst.get(), d_x.get(), N, OC, s);
  s.sync();
  want_dst = dst0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) want_dst[o] += x[size_t(n) * OC + o];
  EXPECT_LE(rel_err(d_dst.download(), want_dst), tol_fp32(N));

  // scale_matrix on 2 batches of (3, 5) with ld 7 and batch stride 25: only those elements.
  FVec c = uniform(50, rng);
  DevBuf<float> d_c(c);
  scale_matrix(d_c.get(), 3, 5, 7, 25, 2, 0.5f, s);
  s.sync();
  FVec want_c = c;
  for (int b = 0; b < 2; b++)
    for (int r = 0; r < 3; r++)
      for (int j = 0; j < 5; j++) want_c[b * 25 + r * 7 + j] *= 0.5f;
  EXPECT_EQ(rel_err(d_c.download(), want_c), 0.0);
  d_c.poison();  // beta 0 writes zeros without reading
  scale_matrix(d_c.get(), 5, 10, 10, 0, 1, 0.0f, s);
  s.sync();
  EXPECT_EQ(rel_err(d_c.download(), FVec(50, 0.0f)), 0.0);
}

}  // namespace
}  // namespace dtb::cuda
