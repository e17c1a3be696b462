// Tests of the Llama block's CUDA ops (llama_ops.cu, attention.cu's gqa_attention_*) against
// their CPU twins (dtb::cpu, kernels/cpu/ops.h, themselves tested against finite differences)
// at several shapes, sizes not multiples of 32 and odd head sizes included. Written outputs
// are poisoned with NaN first; accumulate-into outputs start from random values. Without a
// usable GPU every test is skipped with the reason (ctest reports it skipped, not passed).
// Tolerances: ops_test_util.h's tol_fp32, and the reasons beside each.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_test_util.h"

namespace dtb::cuda {
namespace {

using namespace dtb::cuda::test_util;
using namespace dtb::cuda::ops_test_util;

struct RowShape {
  int N, C;
};
const RowShape kRowShapes[] = {{1, 1}, {5, 48}, {33, 100}, {64, 768}};

// rstd is a C-term sum of squares then a square root and reciprocal: tol_fp32(C); out two more
// products, and LayerNorm's 4 tol_fp32(C) (ops_test.cc) for the same chain.
TEST(CudaLlamaOps, RmsnormForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(21);
  Stream s;
  for (const RowShape sh : kRowShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << sh.N << " C=" << sh.C);
    const FVec inp = uniform(size_t(sh.N) * sh.C, rng, -2.f, 2.f), w = uniform(sh.C, rng, 0.5f, 1.5f);
    FVec out(inp.size()), rstd(sh.N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), 1e-5f, sh.N, sh.C);
    DevBuf<float> d_inp(inp), d_w(w), d_out(out.size()), d_rstd(rstd.size());
    d_out.poison();
    d_rstd.poison();
    rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_w.get(), 1e-5f, sh.N, sh.C, s);
    s.sync();
    EXPECT_LE(rel_err(d_rstd.download(), rstd), tol_fp32(sh.C));
    EXPECT_LE(rel_err(d_out.download(), out), 4 * tol_fp32(sh.C));
  }
}

// From the same (CPU) rstd: dinp a C-term mean then a difference and products, as LayerNorm's
// dinp (4 tol_fp32(C)); dweight N-term column sums (tol_fp32(N)).
TEST(CudaLlamaOps, RmsnormBackwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(22);
  Stream s;
  for (const RowShape sh : kRowShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << sh.N << " C=" << sh.C);
    const size_t n = size_t(sh.N) * sh.C;
    const FVec inp = uniform(n, rng, -2.f, 2.f), w = uniform(sh.C, rng, 0.5f, 1.5f), dout = uniform(n, rng);
    FVec out(n), rstd(sh.N), dinp = uniform(n, rng), dw = uniform(sh.C, rng);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), 1e-5f, sh.N, sh.C);
    DevBuf<float> d_inp(inp), d_w(w), d_dout(dout), d_rstd(rstd), d_dinp(dinp), d_dw(dw);
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), sh.N, sh.C);
    rmsnorm_backward(d_dinp.get(), d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(), d_rstd.get(), sh.N, sh.C, s);
    s.sync();
    EXPECT_LE(rel_err(d_dinp.download(), dinp), 4 * tol_fp32(sh.C));
    EXPECT_LE(rel_err(d_dw.download(), dw), tol_fp32(sh.N));
  }
}

// Elementwise: CUDA's expf (<= 2 ulp) against the CPU's clamped polynomial exp (a few ulp),
// then a reciprocal and two products: 32 u as GELU's forward (ops_test.cc); the backward's
// factor sig (1 + g e sig) cancels near silu's minimum, 128 u as GELU's backward.
TEST(CudaLlamaOps, SwigluMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(23);
  Stream s;
  for (const RowShape sh : kRowShapes) {  // N rows of F = C
    SCOPED_TRACE(testing::Message() << "N=" << sh.N << " F=" << sh.C);
    const size_t n = size_t(sh.N) * sh.C;
    const FVec inp = uniform(2 * n, rng, -6.f, 6.f), dout = uniform(n, rng);
    FVec out(n), dinp = uniform(2 * n, rng);
    cpu::swiglu_forward(out.data(), inp.data(), sh.N, sh.C);
    DevBuf<float> d_inp(inp), d_dout(dout), d_out(n), d_dinp(dinp);
    d_out.poison();
    cpu::swiglu_backward(dinp.data(), inp.data(), dout.data(), sh.N, sh.C);
    swiglu_forward(d_out.get(), d_inp.get(), sh.N, sh.C, s);
    swiglu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), sh.N, sh.C, s);
    s.sync();
    EXPECT_LE(rel_err(d_out.download(), out), 32 * kU);
    EXPECT_LE(rel_err(d_dinp.download(), dinp), 128 * kU);
  }
}

// The same double angle and cos / sin rounded to float on both sides (they differ only where
// the two libms' doubles straddle a float rounding boundary), then the same two rounded
// products and one sum: equal but for such rare elements, 4 u. v must stay bitwise.
TEST(CudaLlamaOps, RopeMatchesCpuAndLeavesV) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(24);
  Stream s;
  struct Shape {
    int B, T, NH, KV, hs, pos0;
  };
  for (const Shape sh : {Shape{1, 1, 1, 1, 2, 0}, Shape{2, 7, 4, 2, 8, 5}, Shape{3, 33, 6, 3, 16, 1000},
                         Shape{1, 64, 8, 1, 64, 0}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " NH=" << sh.NH << " KV=" << sh.KV
                                    << " hs=" << sh.hs);
    const int W = (sh.NH + 2 * sh.KV) * sh.hs;
    const FVec x0 = uniform(size_t(sh.B) * sh.T * W, rng, -2.f, 2.f);
    for (int sign : {+1, -1}) {
      FVec want = x0;
      DevBuf<float> d_x(x0);
      if (sign > 0) {
        cpu::rope_forward(want.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0);
        rope_forward(d_x.get(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0, s);
      } else {
        cpu::rope_backward(want.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0);
        rope_backward(d_x.get(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0, s);
      }
      s.sync();
      const FVec got = d_x.download();
      EXPECT_LE(rel_err(got, want), 4 * kU) << (sign > 0 ? "forward" : "backward");
      size_t v_changed = 0;
      for (size_t r = 0; r < size_t(sh.B) * sh.T; r++)
        for (int j = (sh.NH + sh.KV) * sh.hs; j < W; j++) v_changed += got[r * W + j] != x0[r * W + j];
      EXPECT_EQ(v_changed, 0u);
    }
  }
}

// As attention_test.cc: q.k (hs terms), the softmax (T terms), att.v (T terms); the backward one
// more product along each path (twice the bound), and a key/value head's gradient sums its
// group's query heads (group more terms, within the T-term allowance for these shapes).
double attention_tol(int T, int hs) { return tol_fp32(hs) + 2 * tol_fp32(T); }

struct GqaShape {
  int B, T, NH, KV, hs;
};
const GqaShape kGqaShapes[] = {{1, 1, 2, 1, 4}, {2, 7, 4, 2, 8}, {1, 33, 6, 3, 16}, {2, 64, 8, 1, 8},
                               {2, 17, 3, 3, 5}};

TEST(CudaLlamaOps, GqaAttentionForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(25);
  Stream s;
  Gemm gemm;
  for (const GqaShape sh : kGqaShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " NH=" << sh.NH << " KV=" << sh.KV
                                    << " hs=" << sh.hs);
    const FVec qkv = uniform(size_t(sh.B) * sh.T * (sh.NH + 2 * sh.KV) * sh.hs, rng);
    FVec out(size_t(sh.B) * sh.T * sh.NH * sh.hs), att(size_t(sh.B) * sh.NH * sh.T * sh.T);
    cpu::gqa_attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs);
    DevBuf<float> d_qkv(qkv), d_out(out.size()), d_att(att.size());
    d_out.poison();
    d_att.poison();
    gqa_attention_forward(gemm, d_out.get(), d_att.get(), d_qkv.get(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, s);
    s.sync();
    EXPECT_LE(rel_err(d_out.download(), out), attention_tol(sh.T, sh.hs));
    EXPECT_LE(rel_err(d_att.download(), att), attention_tol(sh.T, sh.hs));
  }
}

TEST(CudaLlamaOps, GqaAttentionBackwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(26);
  Stream s;
  Gemm gemm;
  for (const GqaShape sh : kGqaShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " NH=" << sh.NH << " KV=" << sh.KV
                                    << " hs=" << sh.hs);
    const size_t n_att = size_t(sh.B) * sh.NH * sh.T * sh.T;
    const FVec qkv = uniform(size_t(sh.B) * sh.T * (sh.NH + 2 * sh.KV) * sh.hs, rng);
    const FVec dout = uniform(size_t(sh.B) * sh.T * sh.NH * sh.hs, rng);
    FVec out(dout.size()), att(n_att), scratch(n_att), dqkv = uniform(qkv.size(), rng);
    cpu::gqa_attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs);
    DevBuf<float> d_qkv(qkv), d_dout(dout), d_att(att), d_dqkv(dqkv), d_scratch(n_att);
    d_scratch.poison();
    cpu::gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), sh.B, sh.T,
                                sh.NH, sh.KV, sh.hs);
    gqa_attention_backward(gemm, d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_att.get(), sh.B, sh.T,
                           sh.NH, sh.KV, sh.hs, s);
    s.sync();
    EXPECT_LE(rel_err(d_dqkv.download(), dqkv), 2 * attention_tol(sh.T, sh.hs));
  }
}

}  // namespace
}  // namespace dtb::cuda
