// Tests of kernels/cuda/crossentropy.cu: the cross-entropy and its vocabulary-parallel
// shards against the CPU twins (dtb::cpu, kernels/cpu/ops.h) at several vocabulary sizes
// and splits. Written outputs are poisoned with NaN first.
// Without a usable GPU every test is skipped with the reason. Tolerances: ops_test_util.h.
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

TEST(CudaOps, CrossEntropyMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(9);
  Stream s;
  for (const auto& [N, V] : {std::pair{1, 1}, std::pair{5, 50257}, std::pair{37, 129},
                            std::pair{64, 1000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " V=" << V);
    FVec logits = uniform(size_t(N) * V, rng, -5.0f, 5.0f);
    // Rows shifted by +-300: exp overflows (or every term underflows) unless the max is
    // subtracted first. (l - max stays exact: Sterbenz.)
    for (int n = 0; n < N; n += 3) {
      for (int i = 0; i < V; i++) logits[size_t(n) * V + i] += n % 2 ? -300.0f : 300.0f;
    }
    const auto tgt = ids(N, V, rng);
    FVec losses(N), probs(size_t(N) * V);
    cpu::crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
    DevBuf<float> d_logits(logits), d_losses(N), d_probs(probs.size()), d_dlogits(probs.size());
    DevBuf<int32_t> d_tgt(tgt);
    d_losses.poison();
    d_probs.poison();
    d_dlogits.poison();
    crossentropy_forward(d_losses.get(), d_probs.get(), d_logits.get(), d_tgt.get(), N, V, s);
    s.sync();
    // probs: exp (<= 2 ulp) times 1/sum (V terms); losses: log(sum) (V terms) minus l - max.
    EXPECT_LE(rel_err(d_probs.download(), probs), tol_fp32(V));
    EXPECT_LE(rel_err(d_losses.download(), losses), tol_fp32(V));

    // Backward from the CPU probs (same input on both sides): one multiply, exact.
    const float dloss = 1.0f / float(N);
    FVec dlogits(probs.size());
    cpu::crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, V);
    d_probs.upload(probs);
    crossentropy_backward(d_dlogits.get(), d_probs.get(), d_tgt.get(), dloss, N, V, s);
    s.sync();
    EXPECT_EQ(rel_err(d_dlogits.download(), dlogits), 0.0);
  }
}

// Cross-entropy over V ids split into shards at `bounds` (shard r = [bounds[r], bounds[r+1])).
// Each GPU op is compared with the CPU op on the same inputs; the all-reduces between the
// steps are done on the host (MAX; SUM in rank order) from the CPU's per-shard results.
struct CeSplit {
  int N, V;
  std::vector<int> bounds;
};

TEST(CudaOps, CrossEntropyShardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(16);
  Stream s;
  const std::vector<CeSplit> splits = {
      {1, 1, {0, 1}},                 // one shard: crossentropy_forward
      {7, 100, {0, 33, 66, 100}},     // Vl = 33, 33, 34
      {37, 129, {0, 64, 65, 129}},    // a one-id shard
      {5, 50257, {0, 25129, 50257}},  // GPT-2's vocabulary over two ranks
  };
  for (const CeSplit& sp : splits) {
    const int N = sp.N, V = sp.V, R = int(sp.bounds.size()) - 1;
    SCOPED_TRACE(testing::Message() << "N=" << N << " V=" << V << " shards=" << R);
    FVec logits = uniform(size_t(N) * V, rng, -5.0f, 5.0f);
    for (int n = 0; n < N; n += 3) {  // +-300 rows, as CrossEntropyMatchesCpu
      for (int i = 0; i < V; i++) logits[size_t(n) * V + i] += n % 2 ? -300.0f : 300.0f;
    }
    auto tgt = ids(N, V, rng);
    tgt[0] = 0;          // the first id of shard 0 ...
    tgt[N - 1] = V - 1;  // ... and the last of the last shard
    DevBuf<int32_t> d_tgt(tgt);
    // The shard's logits (N, Vl), copied out of the full rows.
    auto shard_of = [&](const FVec& full, int r) {
      const int b = sp.bounds[r], Vl = sp.bounds[r + 1] - b;
      FVec out(size_t(N) * Vl);
      for (int n = 0; n < N; n++) {
        std::copy_n(full.begin() + size_t(n) * V + b, Vl, out.begin() + size_t(n) * Vl);
      }
      return out;
    };
    // Step 1, and the host's all-reduce MAX.
    FVec maxes(N, -std::numeric_limits<float>::infinity());
    for (int r = 0; r < R; r++) {
      const int Vl = sp.bounds[r + 1] - sp.bounds[r];
      SCOPED_TRACE(testing::Message() << "max, shard " << r);
      const FVec l = shard_of(logits, r);
      FVec want(N);
      cpu::crossentropy_shard_max(want.data(), l.data(), N, Vl);
      DevBuf<float> d_l(l), d_max(N);
      d_max.poison();
      crossentropy_shard_max(d_max.get(), d_l.get(), N, Vl, s);
      s.sync();
      EXPECT_EQ(rel_err(d_max.download(), want), 0.0);  // a max is exact in any order
      for (int n = 0; n < N; n++) maxes[n] = std::max(maxes[n], want[n]);
    }
    // Step 2 from the global maxes, and the host's all-reduce SUM (rank order).
    FVec sums(2 * size_t(N), 0.0f);
    int in_shard = 0, outside = 0;
    for (int r = 0; r < R; r++) {
      const int v_begin = sp.bounds[r], Vl = sp.bounds[r + 1] - v_begin;
      SCOPED_TRACE(testing::Message() << "sums, shard " << r);
      for (int n = 0; n < N; n++)
        (tgt[n] >= v_begin && tgt[n] < v_begin + Vl ? in_shard : outside)++;
      const FVec l = shard_of(logits, r);
      FVec want(2 * size_t(N));
      cpu::crossentropy_shard_sums(want.data(), l.data(), maxes.data(), tgt.data(), N, Vl, v_begin);
      DevBuf<float> d_l(l), d_max(maxes), d_sums(want.size());
      d_sums.poison();
      crossentropy_shard_sums(d_sums.get(), d_l.get(), d_max.get(), d_tgt.get(), N, Vl, v_begin, s);
      s.sync();
      const FVec got = d_sums.download();
      // Vl-term sums of exp (<= 2 ulp each) in another order: tol_fp32(Vl).
      EXPECT_LE(rel_err(FVec(got.begin(), got.begin() + N), FVec(want.begin(), want.begin() + N)),
                tol_fp32(Vl));
      // The target's logit or 0: a copy, exact.
      EXPECT_EQ(rel_err(FVec(got.begin() + N, got.end()), FVec(want.begin() + N, want.end())), 0.0);
      for (size_t i = 0; i < sums.size(); i++) sums[i] += want[i];
    }
    if (R > 1) {  // targets inside and outside some shard were both exercised
      EXPECT_GT(in_shard, 0);
      EXPECT_GT(outside, 0);
    }
    // Step 3 from the global maxes and sums, and the backward from the CPU probs.
    const float dloss = 1.0f / float(N);
    for (int r = 0; r < R; r++) {
      const int v_begin = sp.bounds[r], Vl = sp.bounds[r + 1] - v_begin;
      SCOPED_TRACE(testing::Message() << "forward/backward, shard " << r);
      const FVec l = shard_of(logits, r);
      FVec losses(N), probs(size_t(N) * Vl);
      cpu::crossentropy_shard_forward(losses.data(), probs.data(), l.data(), maxes.data(),
                                      sums.data(), N, Vl);
      DevBuf<float> d_l(l), d_max(maxes), d_sums(sums), d_losses(N), d_probs(probs.size()),
          d_dlogits(probs.size());
      d_losses.poison();
      d_probs.poison();
      d_dlogits.poison();
      crossentropy_shard_forward(d_losses.get(), d_probs.get(), d_l.get(), d_max.get(),
                                 d_sums.get(), N, Vl, s);
      s.sync();
      // probs: exp (<= 2 ulp) times the same 1/sum, ~6u per element; losses: logf (<= 1 ulp)
      // of the same sum plus one add of a term of the same sign, ~3u. tol_fp32(1) = 20u.
      EXPECT_LE(rel_err(d_probs.download(), probs), tol_fp32(1));
      EXPECT_LE(rel_err(d_losses.download(), losses), tol_fp32(1));

      FVec dlogits(probs.size());
      cpu::crossentropy_shard_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, Vl,
                                       v_begin);
      d_probs.upload(probs);
      crossentropy_shard_backward(d_dlogits.get(), d_probs.get(), d_tgt.get(), dloss, N, Vl,
                                  v_begin, s);
      s.sync();
      EXPECT_EQ(rel_err(d_dlogits.download(), dlogits), 0.0);  // one multiply (and subtract): exact
    }
  }
}

}  // namespace
}  // namespace dtb::cuda
