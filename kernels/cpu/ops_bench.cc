// Google Benchmark microbenchmarks of the CPU ops at the reference model's shapes, with
// FLOP/s and byte/s counters. A benchmark, not a test: registered here, run standalone by
// `build/dtb_kernel_bench` (ops_bench_main.cc) or inside a run by the `kernels` suite
// (suites/kernels.cc), which folds them into the report.
// Shape legend as in ops.h: B batch, T sequence, C channels, NH heads, V vocabulary.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu/ops.h"

namespace {

using namespace dtb::cpu;

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 0.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Matmul forward (N, C) x (OC, C)^T: 2 N C OC FLOPs.
void BM_MatmulForward(benchmark::State& st) {
  const int N = int(st.range(0)), C = int(st.range(1)), OC = int(st.range(2));
  auto inp = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), b = randn(OC, 3);
  std::vector<float> out(size_t(N) * OC);
  for (auto _ : st) {
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * N * C * OC, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatmulForward)->Args({1024, 64, 256})->Args({1024, 256, 1024})->Args({2048, 384, 1536});

// Matmul backward: dinp and dweight, 4 N C OC FLOPs.
void BM_MatmulBackward(benchmark::State& st) {
  const int N = int(st.range(0)), C = int(st.range(1)), OC = int(st.range(2));
  auto inp = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), dout = randn(size_t(N) * OC, 3);
  std::vector<float> dinp(size_t(N) * C), dw(size_t(OC) * C), db(OC);
  for (auto _ : st) {
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    benchmark::DoNotOptimize(dw.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(4.0 * N * C * OC, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatmulBackward)->Args({1024, 64, 256})->Args({1024, 256, 1024});

// Causal attention forward: about 2 B NH T^2 hs FLOPs for QK^T and AV each (the full
// T x T is computed), 4 B T^2 C in all.
void BM_AttentionForward(benchmark::State& st) {
  const int B = 8, T = int(st.range(0)), C = int(st.range(1)), NH = int(st.range(2));
  auto qkv = randn(size_t(B) * T * 3 * C, 1);
  std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
  for (auto _ : st) {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(4.0 * B * T * T * C, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionForward)->Args({64, 64, 4})->Args({256, 384, 6});

// LayerNorm forward over (N, C): reads and writes N C floats.
void BM_LayernormForward(benchmark::State& st) {
  const int N = int(st.range(0)), C = int(st.range(1));
  auto inp = randn(size_t(N) * C, 1), w = randn(C, 2), b = randn(C, 3);
  std::vector<float> out(size_t(N) * C), mean(N), rstd(N);
  for (auto _ : st) {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(8.0 * N * C, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LayernormForward)->Args({1024, 64})->Args({2048, 384});

// AdamW over n parameters: reads param, grad, m, v and writes param, m, v (28 B each).
void BM_AdamW(benchmark::State& st) {
  const size_t n = size_t(st.range(0));
  auto p = randn(n, 1), g = randn(n, 2);
  std::vector<float> m(n), v(n);
  AdamWParams hp;
  int t = 0;
  for (auto _ : st) {
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, ++t);
    benchmark::DoNotOptimize(p.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(28.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AdamW)->Arg(120576)->Arg(1 << 22);

}  // namespace
