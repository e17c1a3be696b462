// Tests of kernels/cuda/half_ops (CudaHalfOps<H>, H = bf16 and fp16) against HalfCpuOps<H>:
// the linear layers (cuBLASLt on the H operands), attention (the fp32 path) and the
// cross-entropy ops, including a case large enough to run in several chunks of rows.
// Poisoning and accumulate checks as in half_ops_test.cc; tolerances from the analysis of
// half_ops_test_util.h. Without a usable GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
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
class CudaHalfGemmOpsTest : public testing::Test {};
TYPED_TEST_SUITE(CudaHalfGemmOpsTest, HalfTypes, HalfName);

// The linear layers, measured against mag = the same product on absolute values (as
// gemm_test.cc), elementwise. The exact result is a sum of K exact products (two H values
// multiply exactly in fp32) and one more term (the bias, or the accumulated gradient).
// HalfCpuOps's sgemm rounds to nearest: |c_f - exact| <= (K + 1) u mag. cuBLASLt's fp32
// accumulation on tensor cores may truncate instead of rounding (an error up to 2u per
// add): |g_f - exact| <= 2 (K + 1) u mag. So |g_f - c_f| <= 3 (K + 1) u mag, and the excess
// over one H rounding step (half_ops_test_util.h) is at most that in norm. One more (K + 1)
// covers mag's own fp32 rounding and the second-order terms of the sum bounds. An indexing,
// transpose or accumulate bug gives ~||C|| / ||mag|| >~ 1 / sqrt(K) >= 0.08 here.
double gemm_tol(int K) { return 3.0 * (K + 2) * kU; }

TYPED_TEST(CudaHalfGemmOpsTest, MatmulMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(11);
  struct Shape { int N, C, OC; bool optional; };  // optional: bias, dinp and dbias given
  for (const Shape sh : {Shape{1, 1, 1, true}, Shape{7, 64, 48, true}, Shape{33, 65, 17, false},
                         Shape{64, 96, 130, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << sh.N << " C=" << sh.C << " OC=" << sh.OC);
    const size_t nx = size_t(sh.N) * sh.C, nw = size_t(sh.OC) * sh.C, no = size_t(sh.N) * sh.OC;
    const auto x = hrand<H>(nx, rng), w = hrand<H>(nw, rng), b = hrand<H>(sh.OC, rng), dout = hrand<H>(no, rng);
    std::vector<H> out(no), dinp = hrand<H>(nx, rng), dw = hrand<H>(nw, rng), db = hrand<H>(sh.OC, rng);
    const auto dinp0 = dinp, dw0 = dw, db0 = db;
    const H* bias = sh.optional ? b.data() : nullptr;
    DevBuf<H> d_x(x), d_w(w), d_b(b), d_dout(dout), d_out(no), d_dinp(dinp), d_dw(dw), d_db(db);
    d_out.poison();
    settle();
    e.cpu.matmul_forward(out.data(), x.data(), w.data(), bias, sh.N, sh.C, sh.OC);
    e.cpu.matmul_backward(sh.optional ? dinp.data() : nullptr, dw.data(), sh.optional ? db.data() : nullptr,
                          dout.data(), x.data(), w.data(), sh.N, sh.C, sh.OC);
    e.gpu.matmul_forward(d_out.get(), d_x.get(), d_w.get(), sh.optional ? d_b.get() : nullptr, sh.N, sh.C, sh.OC);
    e.gpu.matmul_backward(sh.optional ? d_dinp.get() : nullptr, d_dw.get(), sh.optional ? d_db.get() : nullptr,
                          d_dout.get(), d_x.get(), d_w.get(), sh.N, sh.C, sh.OC);
    e.gpu.synchronize();
    // mag: the float ops on the absolute values.
    FVec m_out(no), m_dinp = abs_of(dinp0), m_dw = abs_of(dw0), m_db = abs_of(db0);
    const FVec ax = abs_of(x), aw = abs_of(w), ab = abs_of(b), ad = abs_of(dout);
    cpu::matmul_forward<float>(m_out.data(), ax.data(), aw.data(), sh.optional ? ab.data() : nullptr, sh.N, sh.C,
                               sh.OC);
    cpu::matmul_backward<float>(m_dinp.data(), m_dw.data(), m_db.data(), ad.data(), ax.data(), aw.data(), sh.N,
                                sh.C, sh.OC);
    EXPECT_LE(excess(d_out.download(), out, m_out), gemm_tol(sh.C)) << "out";
    EXPECT_LE(excess(d_dw.download(), dw, m_dw), gemm_tol(sh.N)) << "dweight";
    if (sh.optional) {
      EXPECT_LE(excess(d_dinp.download(), dinp, m_dinp), gemm_tol(sh.OC)) << "dinp";
      EXPECT_LE(excess(d_db.download(), db, m_db), gemm_tol(sh.N)) << "dbias";  // N-term column sums
    } else {  // null dinp and dbias: the buffers are not touched
      EXPECT_TRUE(same_bits(d_dinp.download(), dinp0));
      EXPECT_TRUE(same_bits(d_db.download(), db0));
    }
  }
}

// Attention: the fp32 kernels on both sides; bound of attention_test.cc (q.k: hs terms, the
// softmax and att.v: T terms each), plus one H rounding.
double attention_tol(int T, int hs) { return tol_fp32(hs) + 2 * tol_fp32(T); }

TYPED_TEST(CudaHalfGemmOpsTest, AttentionMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(12);
  struct Shape { int B, T, C, NH; };
  for (const Shape sh : {Shape{1, 1, 8, 2}, Shape{2, 7, 24, 3}, Shape{1, 33, 64, 4}, Shape{2, 64, 96, 2},
                         Shape{2, 17, 15, 3}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C << " NH=" << sh.NH);
    const int hs = sh.C / sh.NH;
    const size_t nq = size_t(sh.B) * sh.T * 3 * sh.C, no = size_t(sh.B) * sh.T * sh.C;
    const size_t na = size_t(sh.B) * sh.NH * sh.T * sh.T;
    const auto qkv = hrand<H>(nq, rng), dout = hrand<H>(no, rng);
    std::vector<H> out(no), att(na), scratch(na), dqkv = hrand<H>(nq, rng);
    DevBuf<H> d_qkv(qkv), d_out(no), d_att(na), d_dout(dout), d_dqkv(dqkv), d_scratch(na);
    d_out.poison();
    d_att.poison();
    d_scratch.poison();
    settle();
    e.cpu.attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.C, sh.NH);
    e.gpu.attention_forward(d_out.get(), d_att.get(), d_qkv.get(), sh.B, sh.T, sh.C, sh.NH);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_out.download(), out), half_tol<H>(attention_tol(sh.T, hs)));
    EXPECT_LE(excess(d_att.download(), att), half_tol<H>(attention_tol(sh.T, hs)));

    // Backward from the CPU's att (the same inputs on both sides).
    d_att.upload(att);
    settle();
    e.cpu.attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), sh.B, sh.T, sh.C,
                             sh.NH);
    e.gpu.attention_backward(d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_att.get(), sh.B, sh.T,
                             sh.C, sh.NH);
    e.gpu.synchronize();
    // One more product along each path than the forward: twice its bound (attention_test.cc).
    EXPECT_LE(excess(d_dqkv.download(), dqkv), half_tol<H>(2 * attention_tol(sh.T, hs)));
    const auto g_scratch = d_scratch.download();  // the caller's H scratch is not touched
    EXPECT_TRUE(std::all_of(g_scratch.begin(), g_scratch.end(), [](H h) { return h.bits == 0xFFFF; }));
  }
}

// H logits (N, V) uniform in [-5, 5), every third row shifted by +-300 as
// crossentropy_test.cc (exp overflows unless the max goes first).
template <typename H>
std::vector<H> logits_of(int N, int V, std::mt19937& rng) {
  FVec l = uniform(size_t(N) * V, rng, -5.0f, 5.0f);
  for (int n = 0; n < N; n += 3)
    for (int i = 0; i < V; i++) l[size_t(n) * V + i] += n % 2 ? -300.0f : 300.0f;
  return std::vector<H>(l.begin(), l.end());
}

// The full cross-entropy, forward and backward. Bounds of CudaOps.CrossEntropyMatchesCpu:
// probs and losses tol_fp32(V) (V-term sums), dlogits one subtract and multiply (bitwise).
// The last shape has N V > kChunk: the GPU runs it in chunks of 3 rows.
TYPED_TEST(CudaHalfGemmOpsTest, CrossEntropyMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(13);
  for (const auto& [N, V] : {std::pair{1, 1}, std::pair{5, 50257}, std::pair{37, 129}, std::pair{64, 1000},
                            std::pair{5, (1 << 22) + 3}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " V=" << V);
    const size_t nl = size_t(N) * V;
    const auto logits = logits_of<H>(N, V, rng);
    const auto tgt = ids(N, V, rng);
    std::vector<H> probs(nl), dlogits(nl);
    FVec losses(N);
    DevBuf<H> d_logits(logits), d_probs(nl), d_dlogits(nl);
    DevBuf<float> d_losses(N);
    DevBuf<int32_t> d_tgt(tgt);
    d_probs.poison();
    d_dlogits.poison();
    d_losses.poison();
    settle();
    e.cpu.crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
    e.gpu.crossentropy_forward(d_losses.get(), d_probs.get(), d_logits.get(), d_tgt.get(), N, V);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_probs.download(), probs), half_tol<H>(tol_fp32(V)));
    EXPECT_LE(rel_err(d_losses.download(), losses), tol_fp32(V));

    const float dloss = 1.0f / float(N);
    d_probs.upload(probs);  // the same input on both sides
    settle();
    e.cpu.crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, V);
    e.gpu.crossentropy_backward(d_dlogits.get(), d_probs.get(), d_tgt.get(), dloss, N, V);
    e.gpu.synchronize();
    EXPECT_TRUE(same_bits(d_dlogits.download(), dlogits));
  }
}

// The vocabulary-parallel steps on one shard, each from the CPU's results of the step
// before (the same inputs on both sides). Bounds of CudaOps.CrossEntropyShardStepsMatchCpu:
// max exact, sums tol_fp32(Vl) and the target logits exact, the forward (given the sums)
// tol_fp32(1), the backward bitwise. The last shape runs in chunks of rows on the GPU.
TYPED_TEST(CudaHalfGemmOpsTest, CrossEntropyShardStepsMatchCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(14);
  struct Shape { int N, Vl, v_begin, V; };
  for (const Shape sh : {Shape{1, 1, 0, 1}, Shape{7, 33, 33, 100}, Shape{37, 67, 0, 100},
                         Shape{5, (1 << 22) + 3, 1000, (1 << 22) + 2000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << sh.N << " Vl=" << sh.Vl << " v_begin=" << sh.v_begin);
    const int N = sh.N, Vl = sh.Vl;
    const size_t nl = size_t(N) * Vl;
    const auto logits = logits_of<H>(N, Vl, rng);
    auto tgt = ids(N, sh.V, rng);
    tgt[0] = sh.v_begin;  // one target surely inside the shard
    FVec maxes(N), sums(2 * size_t(N)), losses(N);
    std::vector<H> probs(nl), dlogits(nl);
    DevBuf<H> d_logits(logits), d_probs(nl), d_dlogits(nl);
    DevBuf<float> d_maxes(N), d_sums(2 * size_t(N)), d_losses(N);
    DevBuf<int32_t> d_tgt(tgt);
    d_maxes.poison();
    d_sums.poison();
    settle();
    e.cpu.crossentropy_shard_max(maxes.data(), logits.data(), N, Vl);
    e.gpu.crossentropy_shard_max(d_maxes.get(), d_logits.get(), N, Vl);
    e.gpu.synchronize();
    EXPECT_EQ(rel_err(d_maxes.download(), maxes), 0.0);  // a max is exact in any order

    d_maxes.upload(maxes);
    settle();
    e.cpu.crossentropy_shard_sums(sums.data(), logits.data(), maxes.data(), tgt.data(), N, Vl, sh.v_begin);
    e.gpu.crossentropy_shard_sums(d_sums.get(), d_logits.get(), d_maxes.get(), d_tgt.get(), N, Vl, sh.v_begin);
    e.gpu.synchronize();
    const FVec g_sums = d_sums.download();
    EXPECT_LE(rel_err(FVec(g_sums.begin(), g_sums.begin() + N), FVec(sums.begin(), sums.begin() + N)),
              tol_fp32(Vl));
    EXPECT_EQ(rel_err(FVec(g_sums.begin() + N, g_sums.end()), FVec(sums.begin() + N, sums.end())), 0.0);

    d_sums.upload(sums);
    d_probs.poison();
    d_losses.poison();
    settle();
    e.cpu.crossentropy_shard_forward(losses.data(), probs.data(), logits.data(), maxes.data(), sums.data(), N, Vl);
    e.gpu.crossentropy_shard_forward(d_losses.get(), d_probs.get(), d_logits.get(), d_maxes.get(), d_sums.get(), N,
                                     Vl);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_probs.download(), probs), half_tol<H>(tol_fp32(1)));
    EXPECT_LE(rel_err(d_losses.download(), losses), tol_fp32(1));

    const float dloss = 1.0f / float(N);
    d_probs.upload(probs);
    d_dlogits.poison();
    settle();
    e.cpu.crossentropy_shard_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, Vl, sh.v_begin);
    e.gpu.crossentropy_shard_backward(d_dlogits.get(), d_probs.get(), d_tgt.get(), dloss, N, Vl, sh.v_begin);
    e.gpu.synchronize();
    EXPECT_TRUE(same_bits(d_dlogits.download(), dlogits));
  }
}

}  // namespace
}  // namespace dtb::cuda
