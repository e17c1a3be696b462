// Tests of CudaHalfOps<H>'s Llama-block ops (H = bf16 and fp16) against HalfCpuOps<H> on the
// same H inputs: RMSNorm, SwiGLU, rotary embeddings, grouped-query attention. Written outputs
// are poisoned first (NaN in H and float); accumulate-into outputs start from random values.
// Tolerances: half_ops_test_util.h's analysis (one H rounding step on each side, beyond it the
// fp32 kernels' difference) over the fp32 bounds of llama_ops_test.cc. Without a usable GPU
// every test is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/half_ops_test_env.h"
#include "kernels/cuda/half_ops_test_util.h"
#include "kernels/cuda/ops_test_util.h"

namespace dtb::cuda {
namespace {

using namespace dtb::cuda::test_util;
using namespace dtb::cuda::ops_test_util;
using namespace dtb::cuda::half_test_util;

template <typename H>
class CudaHalfLlamaOpsTest : public testing::Test {};
TYPED_TEST_SUITE(CudaHalfLlamaOpsTest, HalfTypes, HalfName);

TYPED_TEST(CudaHalfLlamaOpsTest, RmsnormMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(31);
  for (const auto& [N, C] : {std::pair{1, 1}, std::pair{7, 768}, std::pair{65, 33}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    const size_t n = size_t(N) * C;
    const auto inp = hrand<H>(n, rng, -2.0f, 2.0f), w = hrand<H>(C, rng, 0.5f, 1.5f), dout = hrand<H>(n, rng);
    std::vector<H> out(n), dinp = hrand<H>(n, rng), dw = hrand<H>(C, rng);
    FVec rstd(N);
    DevBuf<H> d_inp(inp), d_w(w), d_out(n), d_dout(dout), d_dinp(dinp), d_dw(dw);
    DevBuf<float> d_rstd(N);
    d_out.poison();
    d_rstd.poison();
    settle();
    e.cpu.rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), 1e-5f, N, C);
    e.gpu.rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_w.get(), 1e-5f, N, C);
    e.gpu.synchronize();
    // Bounds of CudaLlamaOps.RmsnormForwardMatchesCpu, plus one H rounding of out (rstd is A).
    EXPECT_LE(rel_err(d_rstd.download(), rstd), tol_fp32(C));
    EXPECT_LE(excess(d_out.download(), out), half_tol<H>(4 * tol_fp32(C)));

    d_rstd.upload(rstd);  // the backward from the same rstd on both sides
    settle();
    e.cpu.rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    e.gpu.rmsnorm_backward(d_dinp.get(), d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(), d_rstd.get(), N, C);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_dinp.download(), dinp), half_tol<H>(4 * tol_fp32(C)));
    EXPECT_LE(excess(d_dw.download(), dw), half_tol<H>(tol_fp32(N)));
  }
}

TYPED_TEST(CudaHalfLlamaOpsTest, SwigluMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(32);
  for (const auto& [N, F] : {std::pair{1, 1}, std::pair{9, 100}, std::pair{64, 768}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " F=" << F);
    const size_t n = size_t(N) * F;
    const auto inp = hrand<H>(2 * n, rng, -6.0f, 6.0f), dout = hrand<H>(n, rng);
    std::vector<H> out(n), dinp = hrand<H>(2 * n, rng);
    DevBuf<H> d_inp(inp), d_dout(dout), d_out(n), d_dinp(dinp);
    d_out.poison();
    settle();
    e.cpu.swiglu_forward(out.data(), inp.data(), N, F);
    e.cpu.swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    e.gpu.swiglu_forward(d_out.get(), d_inp.get(), N, F);
    e.gpu.swiglu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), N, F);
    e.gpu.synchronize();
    // CudaLlamaOps.SwigluMatchesCpu's fp32 bounds, plus one H rounding.
    EXPECT_LE(excess(d_out.download(), out), half_tol<H>(32 * kU));
    EXPECT_LE(excess(d_dinp.download(), dinp), half_tol<H>(128 * kU));
  }
}

TYPED_TEST(CudaHalfLlamaOpsTest, RopeMatchesCpuAndLeavesV) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(33);
  struct Shape {
    int B, T, NH, KV, hs, pos0;
  };
  for (const Shape sh : {Shape{1, 1, 1, 1, 2, 0}, Shape{2, 7, 4, 2, 8, 5}, Shape{3, 33, 6, 3, 16, 1000}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " NH=" << sh.NH << " KV=" << sh.KV);
    const int W = (sh.NH + 2 * sh.KV) * sh.hs;
    const auto x0 = hrand<H>(size_t(sh.B) * sh.T * W, rng, -2.0f, 2.0f);
    for (int sign : {+1, -1}) {
      std::vector<H> want = x0;
      DevBuf<H> d_x(x0);
      settle();
      if (sign > 0) {
        e.cpu.rope_forward(want.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0);
        e.gpu.rope_forward(d_x.get(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0);
      } else {
        e.cpu.rope_backward(want.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0);
        e.gpu.rope_backward(d_x.get(), sh.B, sh.T, sh.NH, sh.KV, sh.hs, sh.pos0, 10000.0);
      }
      e.gpu.synchronize();
      const auto got = d_x.download();
      EXPECT_LE(excess(got, want), half_tol<H>(4 * kU)) << (sign > 0 ? "forward" : "backward");
      size_t v_changed = 0;  // v's bits untouched
      for (size_t r = 0; r < size_t(sh.B) * sh.T; r++)
        for (int j = (sh.NH + sh.KV) * sh.hs; j < W; j++) v_changed += got[r * W + j].bits != x0[r * W + j].bits;
      EXPECT_EQ(v_changed, 0u);
    }
  }
}

// attention_test.cc's bound (q.k: hs terms, the softmax and att.v: T terms), plus one H rounding.
double attention_tol(int T, int hs) { return tol_fp32(hs) + 2 * tol_fp32(T); }

TYPED_TEST(CudaHalfLlamaOpsTest, GqaAttentionMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(34);
  struct Shape {
    int B, T, NH, KV, hs;
  };
  for (const Shape sh : {Shape{1, 1, 2, 1, 4}, Shape{2, 7, 4, 2, 8}, Shape{2, 64, 8, 1, 8}, Shape{2, 17, 3, 3, 5}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " NH=" << sh.NH << " KV=" << sh.KV);
    const size_t nq = size_t(sh.B) * sh.T * (sh.NH + 2 * sh.KV) * sh.hs, no = size_t(sh.B) * sh.T * sh.NH * sh.hs;
    const size_t na = size_t(sh.B) * sh.NH * sh.T * sh.T;
    const auto qkv = hrand<H>(nq, rng), dout = hrand<H>(no, rng);
    std::vector<H> out(no), att(na), scratch(na), dqkv = hrand<H>(nq, rng);
    DevBuf<H> d_qkv(qkv), d_out(no), d_att(na), d_dout(dout), d_dqkv(dqkv), d_scratch(na);
    d_out.poison();
    d_att.poison();
    d_scratch.poison();
    settle();
    e.cpu.gqa_attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.NH, sh.KV, sh.hs);
    e.gpu.gqa_attention_forward(d_out.get(), d_att.get(), d_qkv.get(), sh.B, sh.T, sh.NH, sh.KV, sh.hs);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_out.download(), out), half_tol<H>(attention_tol(sh.T, sh.hs)));
    EXPECT_LE(excess(d_att.download(), att), half_tol<H>(attention_tol(sh.T, sh.hs)));

    d_att.upload(att);  // the backward from the CPU's att on both sides
    settle();
    e.cpu.gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), sh.B, sh.T,
                                 sh.NH, sh.KV, sh.hs);
    e.gpu.gqa_attention_backward(d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_att.get(), sh.B, sh.T,
                                 sh.NH, sh.KV, sh.hs);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_dqkv.download(), dqkv), half_tol<H>(2 * attention_tol(sh.T, sh.hs)));
    const auto g_scratch = d_scratch.download();  // the caller's H scratch is not touched
    EXPECT_TRUE(std::all_of(g_scratch.begin(), g_scratch.end(), [](H h) { return h.bits == 0xFFFF; }));
  }
}

}  // namespace
}  // namespace dtb::cuda
