// Tests of kernels/cuda/half_ops (CudaHalfOps<H>, H = bf16 and fp16) against HalfCpuOps<H>
// (kernels/cpu/half_ops.h) on the same H inputs: memory and copies, the embeddings,
// LayerNorm, the elementwise ops and AdamW; the GEMM-backed ops and the cross-entropy are in
// half_ops_gemm_test.cc. Written outputs are poisoned first (all-ones bytes: NaN in both H
// types and in float), so an element an op forgets fails; accumulate-into outputs start from
// random values, so a write where an accumulate belongs fails. Tolerances: the error
// analysis of half_ops_test_util.h over the fp32 bounds of ops_test_util.h. Without a usable
// GPU every test is skipped with the reason.
#include "kernels/cuda/half_ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/half_ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/half_ops_test_env.h"
#include "kernels/cuda/half_ops_test_util.h"
#include "kernels/cuda/ops_test_util.h"
#include "kernels/tensor.h"

namespace dtb::cuda {
namespace {

using namespace dtb::cuda::test_util;
using namespace dtb::cuda::ops_test_util;
using namespace dtb::cuda::half_test_util;

template <typename H>
class CudaHalfOpsTest : public testing::Test {};
TYPED_TEST_SUITE(CudaHalfOpsTest, HalfTypes, HalfName);

TYPED_TEST(CudaHalfOpsTest, TwoByteTensorsZeroAndCopies) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  Ops<H>& ops = e.gpu;
  EXPECT_EQ(ops.backend(), "cuda");
  std::mt19937 rng(1);
  const size_t n = 1001;
  const std::vector<H> x = hrand<H>(n, rng);
  Tensor t = Tensor::empty(e.dev, {int64_t(n)}, dtype_of<H>(), MemCategory::activation);
  EXPECT_EQ(t.bytes(), 2 * n);
  EXPECT_EQ(e.dev.stats().bytes(Tier::device, MemCategory::activation), 2 * n);
  ops.copy_from_host(t.data<H>(), x.data(), t.bytes());
  std::vector<H> back(n);
  ops.copy_to_host(back.data(), t.data<H>(), t.bytes());
  EXPECT_TRUE(same_bits(back, x));
  ops.zero(t.data<H>(), n - 1);  // n - 1 elements of 2 bytes: the last one stays
  ops.copy_to_host(back.data(), t.data<H>(), t.bytes());
  for (size_t i = 0; i + 1 < n; i++) ASSERT_EQ(back[i].bits, 0) << i;
  EXPECT_EQ(back[n - 1].bits, x[n - 1].bits);
  // The async copies, through pinned host tensors of H.
  Tensor host = Tensor::empty(e.dev, {int64_t(n)}, dtype_of<H>(), MemCategory::workspace, Tier::host);
  std::copy(x.begin(), x.end(), host.data<H>());
  ops.wait_copy(ops.copy_from_host_async(t.data<H>(), host.data<H>(), t.bytes()));
  Tensor host2 = Tensor::empty(e.dev, {int64_t(n)}, dtype_of<H>(), MemCategory::workspace, Tier::host);
  ops.copy_to_host_async(host2.data<H>(), t.data<H>(), t.bytes());
  ops.wait_copies();
  EXPECT_TRUE(same_bits(std::vector<H>(host2.data<H>(), host2.data<H>() + n), x));
}

TYPED_TEST(CudaHalfOpsTest, ScratchIsAccountedWorkspaceAndReused) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(2);
  const size_t n = 4097;
  DevBuf<H> d_in(hrand<H>(n, rng)), d_out(n);
  settle();
  e.gpu.gelu_forward(d_out.get(), d_in.get(), n);  // two slots of n floats
  e.gpu.synchronize();
  EXPECT_EQ(e.gpu.scratch_bytes(), 2 * n * sizeof(float));
  EXPECT_EQ(e.dev.stats().bytes(Tier::device, MemCategory::workspace), e.gpu.scratch_bytes());
  const size_t mallocs = e.dev.malloc_calls();
  e.gpu.gelu_forward(d_out.get(), d_in.get(), n);
  e.gpu.gelu_forward(d_out.get(), d_in.get(), n / 2);
  e.gpu.synchronize();
  EXPECT_EQ(e.dev.malloc_calls(), mallocs);  // the steady state allocates nothing
  EXPECT_EQ(e.gpu.scratch_bytes(), 2 * n * sizeof(float));
}

TYPED_TEST(CudaHalfOpsTest, CudaBackendHasBothHalfOps) {
  DTB_NEED_GPU();
  std::unique_ptr<Backend> b = make_cuda_backend(0);
  ASSERT_NE(b->bf16_ops(), nullptr);
  ASSERT_NE(b->fp16_ops(), nullptr);
  EXPECT_EQ(b->bf16_ops()->backend(), "cuda");
  EXPECT_EQ(b->fp16_ops()->backend(), "cuda");
  b->set_matmul_precision("tf32");  // the float ops' setting; the half ops keep their own
  EXPECT_EQ(b->bf16_ops()->backend(), "cuda");
}

// One IEEE add per element in the same order on both sides: bitwise.
TYPED_TEST(CudaHalfOpsTest, EncoderMatchesCpuBitwise) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(3);
  struct Shape { int B, T, C, V, first; };  // tokens in [first, V)
  for (const Shape sh : {Shape{1, 1, 1, 1, 0}, Shape{2, 5, 48, 11, 0}, Shape{3, 33, 72, 7, 0},
                         Shape{2, 9, 20, 50, 20}}) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C << " V=" << sh.V);
    const size_t BT = size_t(sh.B) * sh.T, n = BT * sh.C;
    std::vector<int32_t> tok = ids(BT, sh.V - sh.first, rng);
    for (int32_t& t : tok) t += sh.first;
    const auto wte = hrand<H>(size_t(sh.V) * sh.C, rng), wpe = hrand<H>(size_t(sh.T) * sh.C, rng);
    const auto dout = hrand<H>(n, rng);
    std::vector<H> out(n), dwte = hrand<H>(wte.size(), rng), dwpe = hrand<H>(wpe.size(), rng);
    DevBuf<int32_t> d_tok(tok);
    DevBuf<H> d_wte(wte), d_wpe(wpe), d_out(n), d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
    d_out.poison();
    settle();
    e.cpu.encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), sh.B, sh.T, sh.C);
    e.cpu.encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), sh.B, sh.T, sh.C);
    e.gpu.encoder_forward(d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), sh.B, sh.T, sh.C);
    e.gpu.encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.get(), sh.B, sh.T, sh.C);
    e.gpu.synchronize();
    EXPECT_TRUE(same_bits(d_out.download(), out));
    EXPECT_TRUE(same_bits(d_dwte.download(), dwte));  // rows no token touched unchanged too
    EXPECT_TRUE(same_bits(d_dwpe.download(), dwpe));
  }
}

TYPED_TEST(CudaHalfOpsTest, EmbeddingShardMatchesCpuBitwise) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(4);
  const int B = 2, T = 7, C = 9, V = 20;
  const size_t BT = size_t(B) * T, n = BT * C;
  struct Case { int v_begin, v_end, tok_hi; bool with_pe; };  // tokens in [0, tok_hi)
  for (const Case c : {Case{0, 7, V, true}, Case{7, 20, V, false}, Case{10, 20, 5, true}}) {
    SCOPED_TRACE(testing::Message() << "shard [" << c.v_begin << ", " << c.v_end << ") tokens < " << c.tok_hi);
    const auto tok = ids(BT, c.tok_hi, rng);
    const size_t rows = size_t(c.v_end - c.v_begin);
    const auto wte = hrand<H>(rows * C, rng), wpe = hrand<H>(size_t(T) * C, rng), dout = hrand<H>(n, rng);
    std::vector<H> out(n), dwte = hrand<H>(rows * C, rng), dwpe = hrand<H>(size_t(T) * C, rng);
    DevBuf<int32_t> d_tok(tok);
    DevBuf<H> d_wte(wte), d_wpe(wpe), d_out(n), d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
    d_out.poison();
    settle();
    const H* pe = c.with_pe ? wpe.data() : nullptr;
    H* dpe = c.with_pe ? dwpe.data() : nullptr;
    e.cpu.embedding_shard_forward(out.data(), tok.data(), wte.data(), pe, B, T, C, c.v_begin, c.v_end);
    e.cpu.embedding_shard_backward(dwte.data(), dpe, dout.data(), tok.data(), B, T, C, c.v_begin, c.v_end);
    e.gpu.embedding_shard_forward(d_out.get(), d_tok.get(), d_wte.get(), c.with_pe ? d_wpe.get() : nullptr, B, T,
                                  C, c.v_begin, c.v_end);
    e.gpu.embedding_shard_backward(d_dwte.get(), c.with_pe ? d_dwpe.get() : nullptr, d_dout.get(), d_tok.get(), B,
                                   T, C, c.v_begin, c.v_end);
    e.gpu.synchronize();
    EXPECT_TRUE(same_bits(d_out.download(), out));
    EXPECT_TRUE(same_bits(d_dwte.download(), dwte));
    EXPECT_TRUE(same_bits(d_dwpe.download(), dwpe));
  }
}

TYPED_TEST(CudaHalfOpsTest, LayerNormMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(5);
  for (const auto& [N, C] : {std::pair{1, 1}, std::pair{7, 768}, std::pair{65, 33}, std::pair{130, 96}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    const size_t n = size_t(N) * C;
    const auto inp = hrand<H>(n, rng, 0.0f, 2.0f), w = hrand<H>(C, rng), b = hrand<H>(C, rng);
    const auto dout = hrand<H>(n, rng);
    std::vector<H> out(n), dinp = hrand<H>(n, rng), dw = hrand<H>(C, rng), db = hrand<H>(C, rng);
    FVec mean(N), rstd(N);
    DevBuf<H> d_inp(inp), d_w(w), d_b(b), d_out(n), d_dout(dout), d_dinp(dinp), d_dw(dw), d_db(db);
    DevBuf<float> d_mean(N), d_rstd(N);
    d_out.poison();
    d_mean.poison();
    d_rstd.poison();
    settle();
    e.cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    e.gpu.layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C);
    e.gpu.synchronize();
    // Bounds of CudaOps.LayerNormForwardMatchesCpu (ops_test.cc), plus one H rounding.
    EXPECT_LE(rel_err(d_mean.download(), mean), tol_fp32(C));
    EXPECT_LE(rel_err(d_rstd.download(), rstd), tol_fp32(C));
    EXPECT_LE(excess(d_out.download(), out), half_tol<H>(4 * tol_fp32(C)));

    // Backward from the CPU's mean and rstd (the same inputs on both sides).
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    settle();
    e.cpu.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                             rstd.data(), N, C);
    e.gpu.layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                             d_mean.get(), d_rstd.get(), N, C);
    e.gpu.synchronize();
    EXPECT_LE(excess(d_dinp.download(), dinp), half_tol<H>(4 * tol_fp32(C)));
    EXPECT_LE(excess(d_dw.download(), dw), half_tol<H>(tol_fp32(N)));
    EXPECT_LE(excess(d_db.download(), db), half_tol<H>(tol_fp32(N)));
  }
}

TYPED_TEST(CudaHalfOpsTest, GeluMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(6);
  for (const size_t n : {size_t(33), size_t(1000), size_t(4097)}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const auto inp = hrand<H>(n, rng, -5.0f, 5.0f), dout = hrand<H>(n, rng);
    std::vector<H> out(n), dinp = hrand<H>(n, rng);
    DevBuf<H> d_inp(inp), d_dout(dout), d_out(n), d_dinp(dinp);
    d_out.poison();
    settle();
    e.cpu.gelu_forward(out.data(), inp.data(), n);
    e.cpu.gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    e.gpu.gelu_forward(d_out.get(), d_inp.get(), n);
    e.gpu.gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n);
    e.gpu.synchronize();
    // Bounds of CudaOps.GeluMatchesCpu: 32u and 128u (tanhf, FMA), plus one H rounding.
    EXPECT_LE(excess(d_out.download(), out), half_tol<H>(32 * kU));
    EXPECT_LE(excess(d_dinp.download(), dinp), half_tol<H>(128 * kU));
  }
}

// residual_forward, add_bias, scale: one IEEE add or multiply per element, the same on both
// sides: bitwise (fp16's overflow to inf included).
TYPED_TEST(CudaHalfOpsTest, ResidualBiasAndScaleMatchCpuBitwise) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(7);
  for (const auto& [N, OC] : {std::pair{1, 1}, std::pair{7, 65}, std::pair{33, 130}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " OC=" << OC);
    const size_t n = size_t(N) * OC;
    const auto a = hrand<H>(n, rng), b = hrand<H>(n, rng), bias = hrand<H>(OC, rng);
    std::vector<H> sum(n), biased = hrand<H>(n, rng), scaled = hrand<H>(n, rng), big = scaled;
    DevBuf<H> d_a(a), d_b(b), d_bias(bias), d_sum(n), d_biased(biased), d_scaled(scaled), d_big(big);
    d_sum.poison();
    settle();
    e.cpu.residual_forward(sum.data(), a.data(), b.data(), n);
    e.cpu.add_bias(biased.data(), bias.data(), N, OC);
    e.cpu.scale(scaled.data(), 0.37f, n);
    e.cpu.scale(big.data(), 1e5f, n);  // fp16: most values overflow to inf
    e.gpu.residual_forward(d_sum.get(), d_a.get(), d_b.get(), n);
    e.gpu.add_bias(d_biased.get(), d_bias.get(), N, OC);
    e.gpu.scale(d_scaled.get(), 0.37f, n);
    e.gpu.scale(d_big.get(), 1e5f, n);
    e.gpu.residual_forward(d_a.get(), d_a.get(), d_b.get(), n);  // out aliasing a
    e.gpu.synchronize();
    EXPECT_TRUE(same_bits(d_sum.download(), sum));
    EXPECT_TRUE(same_bits(d_a.download(), sum));
    EXPECT_TRUE(same_bits(d_biased.download(), biased));
    EXPECT_TRUE(same_bits(d_scaled.download(), scaled));
    EXPECT_TRUE(same_bits(d_big.download(), big));
  }
}

// Each step starts both sides from the same (CPU) state, so each compares one step on equal
// inputs; bound of CudaOps.AdamWMatchesCpu (tol_fp32(4): ~10 ops, FMA) plus one H rounding.
TYPED_TEST(CudaHalfOpsTest, AdamWMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(8);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  for (const size_t n : {size_t(33), size_t(1000), size_t(4099)}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::vector<H> param = hrand<H>(n, rng);
    FVec m(n, 0.0f), v(n, 0.0f);
    DevBuf<H> d_param(n), d_grad(n);
    DevBuf<float> d_m(n), d_v(n);
    for (int t = 1; t <= 3; t++) {
      const auto grad = hrand<H>(n, rng);
      d_param.upload(param);
      d_m.upload(m);
      d_v.upload(v);
      d_grad.upload(grad);
      settle();
      e.cpu.adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hp, t);
      e.gpu.adamw_update(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, hp, t);
      e.gpu.synchronize();
      EXPECT_LE(excess(d_param.download(), param), half_tol<H>(tol_fp32(4))) << "t=" << t;
      EXPECT_LE(rel_err(d_m.download(), m), tol_fp32(4)) << "t=" << t;
      EXPECT_LE(rel_err(d_v.download(), v), tol_fp32(4)) << "t=" << t;
    }
  }
}

TYPED_TEST(CudaHalfOpsTest, AdamWMasterMatchesCpu) {
  using H = TypeParam;
  DTB_NEED_GPU();
  Env<H> e;
  std::mt19937 rng(9);
  AdamWParams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  const size_t n = 4099;
  for (const float grad_scale : {1.0f, 1.0f / 1024.0f, 0.37f}) {
    SCOPED_TRACE(testing::Message() << "grad_scale=" << grad_scale);
    const std::vector<H> param0 = hrand<H>(n, rng);
    std::vector<H> param = param0;
    FVec master = widen(param0), m(n, 0.0f), v(n, 0.0f);
    DevBuf<H> d_param(n), d_grad(n);
    DevBuf<float> d_master(n), d_m(n), d_v(n);
    for (int t = 1; t <= 3; t++) {
      const auto grad = hrand<H>(n, rng, -1000.0f, 1000.0f);  // a loss-scaled gradient
      d_param.poison();
      d_master.upload(master);
      d_m.upload(m);
      d_v.upload(v);
      d_grad.upload(grad);
      settle();
      e.cpu.adamw_update_master(param.data(), master.data(), grad.data(), m.data(), v.data(), n, hp, t,
                                grad_scale);
      e.gpu.adamw_update_master(d_param.get(), d_master.get(), d_grad.get(), d_m.get(), d_v.get(), n, hp, t,
                                grad_scale);
      e.gpu.synchronize();
      const FVec g_master = d_master.download();
      const std::vector<H> g_param = d_param.download();
      EXPECT_LE(rel_err(g_master, master), tol_fp32(4)) << "t=" << t;
      EXPECT_LE(rel_err(d_m.download(), m), tol_fp32(4)) << "t=" << t;
      EXPECT_LE(rel_err(d_v.download(), v), tol_fp32(4)) << "t=" << t;
      EXPECT_LE(excess(g_param, param), half_tol<H>(tol_fp32(4))) << "t=" << t;
      std::vector<H> rounded(n);  // param is the GPU's own master rounded once
      for (size_t i = 0; i < n; i++) rounded[i] = H(g_master[i]);
      EXPECT_TRUE(same_bits(g_param, rounded)) << "t=" << t;
    }
  }
}

}  // namespace
}  // namespace dtb::cuda
