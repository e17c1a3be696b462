// Tests of kernels/cuda/cuda_ops.cc (CudaOps, the Ops interface on one GPU): the sharded
// ops chained through the interface compose to the unsharded CPU ops.
// Without a usable GPU every test is skipped with the reason. Tolerances: ops_test_util.h.
#include "kernels/cuda/cuda_ops.h"

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
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/ops_test_util.h"

namespace dtb::cuda {
namespace {

using namespace dtb::cuda::test_util;
using namespace dtb::cuda::ops_test_util;

// The shard ops chained on the GPU through the Ops interface (CudaOps), the all-reduces on
// the host, against the unsharded CPU cross-entropy and encoder: checks the forwarding and
// that the pieces compose.
TEST(CudaOps, ShardOpsThroughTheInterfaceComposeToTheUnshardedOps) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(17);
  CudaDevice dev;
  Gemm gemm;
  CudaOps cuda_ops(dev, gemm);
  Ops<float>& ops = cuda_ops;
  const int B = 1, T = 7, N = B * T, C = 65, V = 100;
  const std::vector<int> bounds = {0, 33, 66, 100};
  const int R = int(bounds.size()) - 1;
  const auto tok = ids(N, V, rng), tgt = ids(N, V, rng);
  const FVec wte = uniform(size_t(V) * C, rng), wpe = uniform(size_t(T) * C, rng);
  const FVec logits = uniform(size_t(N) * V, rng, -5.0f, 5.0f);
  DevBuf<int32_t> d_tok(tok), d_tgt(tgt);

  // Embedding: the shards' outputs (wpe on rank 0 only) summed on the host in rank order are
  // encoder_forward's, bitwise (every other term is an exact 0).
  FVec emb(size_t(N) * C, 0.0f), want_emb(emb.size());
  cpu::encoder_forward(want_emb.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  DevBuf<float> d_wpe(wpe), d_out(emb.size());
  for (int r = 0; r < R; r++) {
    DevBuf<float> d_wte(
        FVec(wte.begin() + size_t(bounds[r]) * C, wte.begin() + size_t(bounds[r + 1]) * C));
    d_out.poison();
    ops.embedding_shard_forward(d_out.get(), d_tok.get(), d_wte.get(),
                                r == 0 ? d_wpe.get() : nullptr, B, T, C, bounds[r], bounds[r + 1]);
    ops.synchronize();
    const FVec part = d_out.download();
    for (size_t i = 0; i < emb.size(); i++) emb[i] += part[i];
  }
  EXPECT_EQ(rel_err(emb, want_emb), 0.0);

  // Cross-entropy: max, all-reduce MAX, sums, all-reduce SUM, forward; against the full op.
  FVec want_losses(N), want_probs(size_t(N) * V);
  cpu::crossentropy_forward(want_losses.data(), want_probs.data(), logits.data(), tgt.data(), N, V);
  auto shard_of = [&](int r) {
    const int Vl = bounds[r + 1] - bounds[r];
    FVec out(size_t(N) * Vl);
    for (int n = 0; n < N; n++) {
      std::copy_n(logits.begin() + size_t(n) * V + bounds[r], Vl, out.begin() + size_t(n) * Vl);
    }
    return out;
  };
  FVec maxes(N, -std::numeric_limits<float>::infinity()), sums(2 * size_t(N), 0.0f);
  DevBuf<float> d_max(N), d_sums(2 * size_t(N));
  for (int r = 0; r < R; r++) {
    DevBuf<float> d_l(shard_of(r));
    ops.crossentropy_shard_max(d_max.get(), d_l.get(), N, bounds[r + 1] - bounds[r]);
    ops.synchronize();
    const FVec m = d_max.download();
    for (int n = 0; n < N; n++) maxes[n] = std::max(maxes[n], m[n]);
  }
  d_max.upload(maxes);
  for (int r = 0; r < R; r++) {
    DevBuf<float> d_l(shard_of(r));
    ops.crossentropy_shard_sums(d_sums.get(), d_l.get(), d_max.get(), d_tgt.get(), N,
                                bounds[r + 1] - bounds[r], bounds[r]);
    ops.synchronize();
    const FVec part = d_sums.download();
    for (size_t i = 0; i < sums.size(); i++) sums[i] += part[i];
  }
  d_sums.upload(sums);
  FVec losses, probs(want_probs.size());
  DevBuf<float> d_losses(N);
  for (int r = 0; r < R; r++) {
    const int Vl = bounds[r + 1] - bounds[r];
    DevBuf<float> d_l(shard_of(r)), d_probs(size_t(N) * Vl);
    d_losses.poison();
    d_probs.poison();
    ops.crossentropy_shard_forward(d_losses.get(), d_probs.get(), d_l.get(), d_max.get(),
                                   d_sums.get(), N, Vl);
    ops.synchronize();
    const FVec p = d_probs.download();
    for (int n = 0; n < N; n++)
      std::copy_n(p.begin() + size_t(n) * Vl, Vl, probs.begin() + size_t(n) * V + bounds[r]);
    const FVec l = d_losses.download();
    if (r == 0) losses = l;
    EXPECT_EQ(std::memcmp(l.data(), losses.data(), N * sizeof(float)), 0);  // every rank's the same
  }
  // V-term sums in another order (and split over shards), as CrossEntropyMatchesCpu.
  EXPECT_LE(rel_err(probs, want_probs), tol_fp32(V));
  EXPECT_LE(rel_err(losses, want_losses), tol_fp32(V));
}

}  // namespace
}  // namespace dtb::cuda
