// ColumnParallelLinear / RowParallelLinear against the full single-rank linear (CPU ops),
// the f / g mappings' communication, sharding-invariant initialisation and the
// divisibility errors. Multi-rank binary: runs at 2 and 4 ranks, TP groups of 2 and 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/error.h"
#include "reference/model/gpt.h"
#include "reference/model/rng.h"
#include "reference/parallel/tensor_parallel.h"

namespace dtb {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

std::vector<float> randn(const char* name, size_t n, uint64_t seed = 11) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(random_normal(seed, stream_id(name), i));
  return v;
}

/// ||a - b|| / ||b|| in double.
double rel_err(const float* a, const float* b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), r += double(b[i]) * b[i];
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

std::vector<float> host(const Tensor& t) {
  std::vector<float> h(size_t(t.numel()));
  std::memcpy(h.data(), t.raw(), t.bytes());
  return h;
}

/// Rows [r0, r1) x columns [c0, c1) of a row-major (rows, cols) matrix.
std::vector<float> slice(const std::vector<float>& m, int cols, int r0, int r1, int c0, int c1) {
  std::vector<float> s;
  for (int i = r0; i < r1; ++i)
    for (int j = c0; j < c1; ++j) s.push_back(m[size_t(i) * cols + j]);
  return s;
}

/// Tolerance of a relative norm error between two float32 evaluations of the same
/// products whose sums of length K are grouped differently (one rank's BLAS order vs tp
/// partial sums added by the all-reduce). Each evaluation's error is, with random-sign
/// terms, about u sqrt(K) relative (Higham & Mary 2019, probabilistic bound with a small
/// constant); two evaluations and a factor 2 of margin give 4 u sqrt(K), plus 4 u for the
/// products and the bias add. Measured errors are 0 to ~1e-7.
double tolerance(int K) { return 4 * kU * (std::sqrt(double(K)) + 1); }

struct Group {
  std::unique_ptr<Communicator> world, tp;
};
/// TP groups of `tp` consecutive ranks (Megatron's order); null tp when the world has
/// fewer ranks than that or does not divide.
Group tp_group(int tp) {
  Group g;
  g.world = make_mpi_world();
  const int n = g.world->size(), r = g.world->rank();
  if (n < tp || n % tp != 0) return g;
  g.tp = g.world->split(r / tp, r % tp, "tp");
  return g;
}

class TensorParallel : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallel, ColumnParallelMatchesTheFullLinear) {
  const int tp = GetParam();
  Group g = tp_group(tp);
  if (!g.tp) GTEST_SKIP() << "needs a world divisible into TP groups of " << tp;
  const int N = 7, C = 12, OC = 8 * tp;
  CpuDevice dev;
  CpuOps<float> ops;
  const LinearInit init{0.3, 0.1, 5};
  ColumnParallelLinear<float> layer(ops, dev, *g.tp, "col", C, OC, init);
  ASSERT_EQ(layer.local_out_features(), OC / tp);
  const int lo = layer.local_out_features(), o0 = layer.out_offset();

  // The full layer on this rank alone, with the full tensors the shards come from.
  std::vector<float> W(size_t(OC) * C), b(OC);
  init_parameter_slice(W.data(), "col.weight", OC, C, 0, OC, 0, C, init.weight_std, init.seed);
  init_parameter_slice(b.data(), "col.bias", 1, OC, 0, 1, 0, OC, init.bias_std, init.seed);
  const auto x = randn("x", size_t(N) * C), dout = randn("dout", size_t(N) * OC);
  std::vector<float> y(size_t(N) * OC), dx(size_t(N) * C, 0.f), dW(W.size(), 0.f), db(OC, 0.f);
  cpu::matmul_forward(y.data(), x.data(), W.data(), b.data(), N, C, OC);
  cpu::matmul_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), N, C, OC);

  std::vector<float> out(size_t(N) * lo);
  layer.forward(out.data(), x.data(), N);
  EXPECT_EQ(layer.comm_stats().calls, 0) << "f forward is the identity";
  EXPECT_LE(rel_err(out.data(), slice(y, OC, 0, N, o0, o0 + lo).data(), out.size()), tolerance(C));

  const auto dout_r = slice(dout, OC, 0, N, o0, o0 + lo);
  std::vector<float> dinp(size_t(N) * C, 123.f);  // overwritten, not accumulated into
  layer.backward(dinp.data(), dout_r.data(), x.data(), N);
  EXPECT_EQ(layer.comm_stats().calls, 1) << "f backward all-reduces dx once";
  EXPECT_EQ(layer.comm_stats().bytes, size_t(N) * C * sizeof(float));
  EXPECT_LE(rel_err(dinp.data(), dx.data(), dx.size()), tolerance(OC));
  EXPECT_LE(rel_err(host(layer.weight_grad()).data(), slice(dW, C, o0, o0 + lo, 0, C).data(), size_t(lo) * C),
            tolerance(N));
  EXPECT_LE(rel_err(host(layer.bias_grad()).data(), db.data() + o0, size_t(lo)), tolerance(N));
}

TEST_P(TensorParallel, RowParallelMatchesTheFullLinear) {
  const int tp = GetParam();
  Group g = tp_group(tp);
  if (!g.tp) GTEST_SKIP() << "needs a world divisible into TP groups of " << tp;
  const int N = 9, C = 8 * tp, OC = 10;
  CpuDevice dev;
  CpuOps<float> ops;
  const LinearInit init{0.3, 0.1, 6};
  RowParallelLinear<float> layer(ops, dev, *g.tp, "row", C, OC, init);
  const int lc = layer.local_in_features(), c0 = layer.in_offset();
  ASSERT_EQ(lc, C / tp);

  std::vector<float> W(size_t(OC) * C), b(OC);
  init_parameter_slice(W.data(), "row.weight", OC, C, 0, OC, 0, C, init.weight_std, init.seed);
  init_parameter_slice(b.data(), "row.bias", 1, OC, 0, 1, 0, OC, init.bias_std, init.seed);
  const auto x = randn("x", size_t(N) * C), dout = randn("dout", size_t(N) * OC);
  std::vector<float> y(size_t(N) * OC), dx(size_t(N) * C, 0.f), dW(W.size(), 0.f), db(OC, 0.f);
  cpu::matmul_forward(y.data(), x.data(), W.data(), b.data(), N, C, OC);
  cpu::matmul_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), N, C, OC);

  const auto x_r = slice(x, C, 0, N, c0, c0 + lc);
  std::vector<float> out(size_t(N) * OC);
  layer.forward(out.data(), x_r.data(), N);
  EXPECT_EQ(layer.comm_stats().calls, 1) << "g forward all-reduces the output once";
  EXPECT_EQ(layer.comm_stats().bytes, size_t(N) * OC * sizeof(float));
  EXPECT_LE(rel_err(out.data(), y.data(), y.size()), tolerance(C));
  // The output is replicated: bitwise the same on every TP rank (one all-reduce result).
  std::vector<float> root = out;
  g.tp->broadcast(root.data(), root.size(), DType::f32, 0);
  EXPECT_EQ(std::memcmp(root.data(), out.data(), out.size() * sizeof(float)), 0);

  std::vector<float> dinp(size_t(N) * lc, 123.f);
  layer.backward(dinp.data(), dout.data(), x_r.data(), N);
  EXPECT_EQ(layer.comm_stats().calls, 1) << "g backward is the identity";
  EXPECT_LE(rel_err(dinp.data(), slice(dx, C, 0, N, c0, c0 + lc).data(), dinp.size()), tolerance(OC));
  EXPECT_LE(rel_err(host(layer.weight_grad()).data(), slice(dW, C, 0, OC, c0, c0 + lc).data(), size_t(OC) * lc),
            tolerance(N));
  // db = column sums of the replicated dout: the full db, summed in the same order.
  EXPECT_EQ(host(layer.bias_grad()), db);

  // Gradients accumulate across backward calls; zero_grad clears them.
  layer.backward(nullptr, dout.data(), x_r.data(), N);
  const auto db2 = host(layer.bias_grad());
  for (int o = 0; o < OC; ++o) EXPECT_FLOAT_EQ(db2[o], 2 * db[o]);
  layer.zero_grad();
  for (float v : host(layer.weight_grad())) ASSERT_EQ(v, 0.f);
}

TEST_P(TensorParallel, ShardsAreSlicesOfTheFullInitialisation) {
  const int tp = GetParam();
  Group g = tp_group(tp);
  if (!g.tp) GTEST_SKIP() << "needs a world divisible into TP groups of " << tp;
  const int C = 6, OC = 4 * tp;
  CpuDevice dev;
  CpuOps<float> ops;
  const LinearInit init{0.02, 0.5, 9};
  ColumnParallelLinear<float> col(ops, dev, *g.tp, "fc", C, OC, init);
  RowParallelLinear<float> row(ops, dev, *g.tp, "proj", OC, C, init);
  std::vector<float> W(size_t(OC) * C), b(OC), P(size_t(C) * OC), pb(C);
  init_parameter_slice(W.data(), "fc.weight", OC, C, 0, OC, 0, C, init.weight_std, init.seed);
  init_parameter_slice(b.data(), "fc.bias", 1, OC, 0, 1, 0, OC, init.bias_std, init.seed);
  init_parameter_slice(P.data(), "proj.weight", C, OC, 0, C, 0, OC, init.weight_std, init.seed);
  init_parameter_slice(pb.data(), "proj.bias", 1, C, 0, 1, 0, C, init.bias_std, init.seed);
  const int o0 = col.out_offset(), lo = col.local_out_features();
  EXPECT_EQ(host(col.weight()), slice(W, C, o0, o0 + lo, 0, C));
  EXPECT_EQ(host(col.bias()), slice(b, OC, 0, 1, o0, o0 + lo));
  const int c0 = row.in_offset(), lc = row.local_in_features();
  EXPECT_EQ(host(row.weight()), slice(P, OC, 0, C, c0, c0 + lc));
  EXPECT_EQ(host(row.bias()), pb);
  EXPECT_EQ(col.weight().category(), MemCategory::param);
  EXPECT_EQ(col.weight_grad().category(), MemCategory::grad);
}

TEST_P(TensorParallel, Fp8ShardsQuantizeAsTheWholeLinear) {
  // Each recipe on a column-parallel and a row-parallel linear, against the whole FP8 linear on
  // this rank (reference/training/fp8_linear.h, no reduction). The amaxes reduced over TP make
  // every code and scale the whole tensor's, so each GEMM whose reduction dimension is not
  // sharded is bitwise the whole's slice: the column's fprop and wgrad, the row's dgrad and
  // wgrad. The column's dgrad and the row's fprop sum their reduction dimension in tp parts: the
  // same exact products grouped differently, within tolerance(K) (the float analysis above:
  // every FP8 product is exact in float). The delayed recipe runs a step, its update (the
  // shard's amaxes reduced over TP), then the compared step. Sizes: C = 128 tp and OC = 128 tp,
  // so the blockwise recipe's 128-wide tiles and blocks do not cross a shard.
  const int tp = GetParam();
  Group g = tp_group(tp);
  if (!g.tp) GTEST_SKIP() << "needs a world divisible into TP groups of " << tp;
  const int N = 8, C = 128 * tp, OC = 128 * tp;
  CpuOps<float> ops;
  CommStats stats;
  ColumnParallelLinear<float> col(ops, *g.tp, "col", C, OC, &stats);
  RowParallelLinear<float> row(ops, *g.tp, "row", C, OC, &stats, BiasAtTp1::after_gemm);
  const auto x = randn("x", size_t(N) * C), dout = randn("dout", size_t(N) * OC);
  std::vector<float> W = randn("W", size_t(OC) * C), b = randn("b", size_t(OC));
  for (float& v : W) v *= 0.02f;
  const AmaxReduce over_tp = [&](float* a, size_t n) { g.tp->all_reduce(a, a, n, DType::f32, ReduceOp::max); };
  for (Fp8Recipe r : {Fp8Recipe::delayed, Fp8Recipe::current, Fp8Recipe::blockwise, Fp8Recipe::mxfp8}) {
    SCOPED_TRACE(to_string(r));
    Fp8Settings s;
    s.recipe = r;
    s.delayed.amax_history_len = 2;
    const int steps = r == Fp8Recipe::delayed ? 2 : 1;
    // The whole linear.
    Fp8LinearState whole(2);
    std::vector<float> y(size_t(N) * OC), dx(size_t(N) * C), dW(W.size());
    for (int step = 0; step < steps; ++step) {
      if (step > 0) fp8_update({&whole}, s);
      std::fill(dx.begin(), dx.end(), 0.f), std::fill(dW.begin(), dW.end(), 0.f);
      fp8_fprop<float>(ops, s, whole, y.data(), x.data(), W.data(), b.data(), N, C, OC);
      fp8_bprop<float>(ops, s, whole, dx.data(), dW.data(), nullptr, dout.data(), x.data(), W.data(), N, C, OC);
    }
    // Column-parallel: W's rows [o0, o0 + lo), dout's columns likewise.
    {
      const int o0 = col.out_offset(), lo = col.local_out_features();
      const auto w = slice(W, C, o0, o0 + lo, 0, C), bb = slice(b, OC, 0, 1, o0, o0 + lo),
                 dy = slice(dout, OC, 0, N, o0, o0 + lo);
      Fp8LinearState st(2);
      std::vector<float> out(size_t(N) * lo), dinp(size_t(N) * C), dw(w.size());
      for (int step = 0; step < steps; ++step) {
        if (step > 0) fp8_update({&st}, s, over_tp);
        std::fill(dw.begin(), dw.end(), 0.f);
        col.forward(out.data(), x.data(), N, w.data(), bb.data(), nullptr, {&s, &st});
        col.backward(dinp.data(), dy.data(), x.data(), N, w.data(), dw.data(), nullptr, nullptr, {&s, &st});
      }
      EXPECT_EQ(out, slice(y, OC, 0, N, o0, o0 + lo)) << "column fprop";
      EXPECT_EQ(dw, slice(dW, C, o0, o0 + lo, 0, C)) << "column wgrad";
      EXPECT_LE(rel_err(dinp.data(), dx.data(), dx.size()), tolerance(OC)) << "column dgrad";
    }
    // Row-parallel: W's columns [c0, c0 + lc), x's likewise; dout whole.
    {
      const int c0 = row.in_offset(), lc = row.local_in_features();
      const auto w = slice(W, C, 0, OC, c0, c0 + lc), xr = slice(x, C, 0, N, c0, c0 + lc);
      Fp8LinearState st(2);
      std::vector<float> out(size_t(N) * OC), dinp(size_t(N) * lc), dw(w.size());
      for (int step = 0; step < steps; ++step) {
        if (step > 0) fp8_update({&st}, s, over_tp);
        std::fill(dw.begin(), dw.end(), 0.f);
        row.forward(out.data(), xr.data(), N, w.data(), b.data(), nullptr, {&s, &st});
        row.backward(dinp.data(), dout.data(), xr.data(), N, w.data(), dw.data(), nullptr, nullptr, {&s, &st});
      }
      EXPECT_LE(rel_err(out.data(), y.data(), y.size()), tolerance(C)) << "row fprop";
      EXPECT_EQ(dinp, slice(dx, C, 0, N, c0, c0 + lc)) << "row dgrad";
      EXPECT_EQ(dw, slice(dW, C, 0, OC, c0, c0 + lc)) << "row wgrad";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, TensorParallel, ::testing::Values(2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

TEST(TensorParallelInit, MatchesGptInitParams) {
  // The full-tensor draw is gpt_init_params' own: GPT-2's MLP weight "fcw" (4C, C), L = 1.
  GptConfig cfg;
  cfg.L = 1, cfg.C = 8, cfg.NH = 2, cfg.T = 4, cfg.V = 256;
  std::vector<float> params(gpt_num_params(cfg));
  gpt_init_params(params.data(), cfg, 42);
  for (const auto& p : gpt_param_layout(cfg)) {
    if (p.name != "fcw") continue;
    const int OC = 4 * cfg.C, C = cfg.C;
    std::vector<float> mine(size_t(OC) * C);
    init_parameter_slice(mine.data(), "fcw", OC, C, 0, OC, 0, C, 0.02, 42);
    EXPECT_EQ(std::memcmp(mine.data(), params.data() + p.offset, mine.size() * sizeof(float)), 0);
    // A column slice too (RowParallelLinear's shard): element by element.
    std::vector<float> cols(size_t(OC) * 3);
    init_parameter_slice(cols.data(), "fcw", OC, C, 0, OC, 5, 8, 0.02, 42);
    for (int i = 0; i < OC; ++i)
      for (int j = 0; j < 3; ++j) ASSERT_EQ(cols[size_t(i) * 3 + j], params[p.offset + size_t(i) * C + 5 + j]);
  }
}

TEST(TensorParallelMappings, ConjugatePairCommunicateInOppositeDirections) {
  auto world = make_mpi_world();
  CpuOps<float> ops;
  const int n = world->size(), r = world->rank();
  const float sum = float(n * (n + 1) / 2);  // exact: small integers
  auto fill = [&] { return std::vector<float>(5, float(r + 1)); };
  CommStats st;
  // f = copy_to: identity forward, all-reduce backward.
  auto a = fill();
  copy_to_tensor_parallel_region<float>(Pass::forward, ops, *world, a.data(), a.size(), &st);
  EXPECT_EQ(a, fill());
  EXPECT_EQ(st.calls, 0);
  copy_to_tensor_parallel_region<float>(Pass::backward, ops, *world, a.data(), a.size(), &st);
  EXPECT_EQ(a, std::vector<float>(5, sum));
  EXPECT_EQ(st.calls, 1);
  EXPECT_EQ(st.bytes, 5 * sizeof(float));
  // g = reduce_from: all-reduce forward, identity backward.
  auto c = fill();
  reduce_from_tensor_parallel_region<float>(Pass::backward, ops, *world, c.data(), c.size(), &st);
  EXPECT_EQ(c, fill());
  EXPECT_EQ(st.calls, 1);
  reduce_from_tensor_parallel_region<float>(Pass::forward, ops, *world, c.data(), c.size(), &st);
  EXPECT_EQ(c, std::vector<float>(5, sum));
  EXPECT_EQ(st.calls, 2);
  EXPECT_GE(st.seconds, 0.0);
  st.reset();
  EXPECT_EQ(st.calls, 0);
}

TEST(TensorParallelErrors, RefuseASplitDimensionNotDivisibleByTp) {
  auto world = make_mpi_world();
  const int tp = world->size();  // 2 or 4 here
  CpuDevice dev;
  CpuOps<float> ops;
  const int bad = 2 * tp + 1;
  try {
    ColumnParallelLinear<float> col(ops, dev, *world, "fc1", 8, bad, LinearInit{});
    ADD_FAILURE() << "no InputError for OC = " << bad;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("OC = " + std::to_string(bad)), std::string::npos) << m;
    EXPECT_NE(m.find("tensor-parallel size " + std::to_string(tp)), std::string::npos) << m;
  }
  try {
    RowParallelLinear<float> row(ops, dev, *world, "fc2", bad, 8, LinearInit{});
    ADD_FAILURE() << "no InputError for C = " << bad;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("C = " + std::to_string(bad)), std::string::npos) << m;
    EXPECT_NE(m.find("fc2"), std::string::npos) << m;
  }
  // The dimension that is not split may be anything.
  EXPECT_NO_THROW(ColumnParallelLinear<float>(ops, dev, *world, "ok1", bad, 2 * tp, LinearInit{}));
  EXPECT_NO_THROW(RowParallelLinear<float>(ops, dev, *world, "ok2", 2 * tp, bad, LinearInit{}));
  EXPECT_THROW(ColumnParallelLinear<float>(ops, dev, *world, "z", 0, 2 * tp, LinearInit{}), InputError);
}

}  // namespace
}  // namespace dtb
