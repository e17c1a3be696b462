// Google Benchmark microbenchmarks of the CPU ops at the reference model's shapes, with
// FLOP/s and byte/s counters. A benchmark, not a test: registered here, run standalone by
// `build/dtb_kernel_bench` (ops_bench_main.cc) or inside a run by the `kernels` suite
// (suites/kernels.cc), which folds them into the report.
// Shape legend as in ops.h: B batch, T sequence, C channels, NH heads, V vocabulary.
#include <benchmark/benchmark.h>
#include <cblas.h>

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
  dtb::AdamWParams hp;
  int t = 0;
  for (auto _ : st) {
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, ++t);
    benchmark::DoNotOptimize(p.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(28.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AdamW)->Arg(120576)->Arg(1 << 22);

// Peers for scripts/bench-peers (issue 9): the ceilings the ops above are compared with.
// Direct cblas_sgemm at the matmul shapes and the FFN shapes of bench-peers' configs (N =
// B T, C, OC = 4 C): out = inp w^T, no bias, beta 0 -- the matmul op's work without its op.
void BM_SgemmForward(benchmark::State& st) {
  const int N = int(st.range(0)), C = int(st.range(1)), OC = int(st.range(2));
  auto inp = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2);
  std::vector<float> out(size_t(N) * OC);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.f, inp.data(), C, w.data(), C, 0.f,
                out.data(), OC);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * N * C * OC, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SgemmForward)
    ->Args({1024, 64, 256})->Args({1024, 256, 1024})->Args({2048, 384, 1536})
    ->Args({512, 64, 256})->Args({2048, 256, 1024});

// The two sgemms of matmul_backward (dinp = dout w, dweight += dout^T inp), no bias sum.
void BM_SgemmBackward(benchmark::State& st) {
  const int N = int(st.range(0)), C = int(st.range(1)), OC = int(st.range(2));
  auto inp = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), dout = randn(size_t(N) * OC, 3);
  std::vector<float> dinp(size_t(N) * C), dw(size_t(OC) * C);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.f, dout.data(), OC, w.data(), C, 1.f,
                dinp.data(), C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.f, dout.data(), OC, inp.data(), C, 1.f,
                dw.data(), C);
    benchmark::DoNotOptimize(dw.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(4.0 * N * C * OC, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SgemmBackward)->Args({1024, 64, 256})->Args({1024, 256, 1024});

// STREAM's triad a = b + s c over arrays far larger than the last-level cache, one thread
// as the memory-bound ops run: 12 B per element (two reads, one write; STREAM's count).
void BM_StreamTriad(benchmark::State& st) {
  const size_t n = size_t(st.range(0));
  std::vector<float> a(n, 0.f), b(n, 1.f), c(n, 2.f);
  const float s = 3.f;
  for (auto _ : st) {
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  st.counters["bytes/s"] = benchmark::Counter(12.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_StreamTriad)->Arg(1 << 24);

// Memory-bound ops at sizes far beyond the cache, for their fraction of the triad's bytes/s
// (names avoid the families above so filters on them keep their matches). Bytes are what
// each op must move: reads plus writes, small per-row vectors not counted.
void BM_DramLayernorm(benchmark::State& st) {  // reads inp, writes out: 8 N C
  const int N = int(st.range(0)), C = int(st.range(1));
  auto inp = randn(size_t(N) * C, 1), w = randn(C, 2), b = randn(C, 3);
  std::vector<float> out(size_t(N) * C), mean(N), rstd(N);
  for (auto _ : st) {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(8.0 * N * C, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DramLayernorm)->Args({65536, 384});

void BM_DramGelu(benchmark::State& st) {  // reads inp, writes out: 8 n
  const size_t n = size_t(st.range(0));
  auto inp = randn(n, 1);
  std::vector<float> out(n);
  for (auto _ : st) {
    gelu_forward(out.data(), inp.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(8.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DramGelu)->Arg(1 << 24);

void BM_DramGeluBackward(benchmark::State& st) {  // reads inp and dout, writes dinp: 12 n
  const size_t n = size_t(st.range(0));
  auto inp = randn(n, 1), dout = randn(n, 2);
  std::vector<float> dinp(n);
  for (auto _ : st) {
    gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    benchmark::DoNotOptimize(dinp.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(12.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DramGeluBackward)->Arg(1 << 24);

// The softmax over the vocabulary inside crossentropy_forward: reads logits, writes probs,
// 8 N V (the GPT-2-shaped head: N = B T = 2048, V = 8192, 64 MiB each way).
void BM_DramSoftmax(benchmark::State& st) {
  const int N = int(st.range(0)), V = int(st.range(1));
  auto logits = randn(size_t(N) * V, 1);
  std::vector<float> probs(size_t(N) * V), losses(N);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 7919) % V;
  for (auto _ : st) {
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    benchmark::DoNotOptimize(probs.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(8.0 * N * V, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DramSoftmax)->Args({2048, 8192});

}  // namespace
