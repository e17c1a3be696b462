// `dtb_kernel_bench`: the op microbenchmarks of ops_bench.cc, standalone (Google Benchmark's
// command line: --benchmark_filter, --benchmark_format=json, ...).
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
