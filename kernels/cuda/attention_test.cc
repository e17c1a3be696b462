// Tests of kernels/cuda/attention.cu: forward and backward against the CPU twin
// (dtb::cpu::attention_*, kernels/cpu/ops.h) at several shapes, odd head sizes included.
// Written outputs are poisoned with NaN first; accumulate-into outputs start from random
// values. // Without a usable GPU every test is skipped with the reason. Tolerances: ops_test_util.h.
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

// Attention: out and att go through q.k (hs terms), the softmax (T terms) and att.v (T
// terms); relative errors add along the chain.
double attention_tol(int T, int hs) { return tol_fp32(hs) + 2 * tol_fp32(T); }

struct AttShape { int B, T, C, NH; };
// hs = 4, 8, 16, 48, 5 (odd: per-head pointers only 4-byte aligned), T up to 64.
const AttShape kAttShapes[] = {{1, 1, 8, 2}, {2, 7, 24, 3}, {1, 33, 64, 4}, {2, 64, 96, 2},
                               {2, 17, 15, 3}};

TEST(CudaOps, AttentionForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(7);
  Stream s;
  Gemm gemm;
  for (const AttShape sh : kAttShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C
                                    << " NH=" << sh.NH);
    const int hs = sh.C / sh.NH;
    const FVec qkv = uniform(size_t(sh.B) * sh.T * 3 * sh.C, rng);
    FVec out(size_t(sh.B) * sh.T * sh.C), att(size_t(sh.B) * sh.NH * sh.T * sh.T);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.C, sh.NH);
    DevBuf<float> d_qkv(qkv), d_out(out.size()), d_att(att.size());
    d_out.poison();
    d_att.poison();
    attention_forward(gemm, d_out.get(), d_att.get(), d_qkv.get(), sh.B, sh.T, sh.C, sh.NH, s);
    s.sync();
    const FVec g_att = d_att.download();
    EXPECT_LE(rel_err(d_out.download(), out), attention_tol(sh.T, hs));
    EXPECT_LE(rel_err(g_att, att), attention_tol(sh.T, hs));
    size_t nonzero_masked = 0;  // entries above the diagonal must be exactly 0
    for (size_t r = 0; r < size_t(sh.B) * sh.NH * sh.T; r++) {
      for (int t2 = int(r % sh.T) + 1; t2 < sh.T; t2++) nonzero_masked += g_att[r * sh.T + t2] != 0;
    }
    EXPECT_EQ(nonzero_masked, 0u);
  }
}

TEST(CudaOps, AttentionBackwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(8);
  Stream s;
  Gemm gemm;
  for (const AttShape sh : kAttShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << sh.B << " T=" << sh.T << " C=" << sh.C
                                    << " NH=" << sh.NH);
    const int hs = sh.C / sh.NH;
    const size_t n_att = size_t(sh.B) * sh.NH * sh.T * sh.T;
    const FVec qkv = uniform(size_t(sh.B) * sh.T * 3 * sh.C, rng);
    const FVec dout = uniform(size_t(sh.B) * sh.T * sh.C, rng);
    FVec out(dout.size()), att(n_att), scratch(n_att);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.C, sh.NH);
    FVec dqkv = uniform(qkv.size(), rng);
    DevBuf<float> d_qkv(qkv), d_dout(dout), d_att(att), d_dqkv(dqkv), d_scratch(n_att);
    d_scratch.poison();
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), sh.B,
                            sh.T, sh.C, sh.NH);
    attention_backward(gemm, d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_att.get(),
                       sh.B, sh.T, sh.C, sh.NH, s);
    s.sync();
    // One more product (T or hs terms) along each path than the forward: twice its bound.
    EXPECT_LE(rel_err(d_dqkv.download(), dqkv), 2 * attention_tol(sh.T, hs));
  }
}

}  // namespace
}  // namespace dtb::cuda
