// `dtb_kernel_bench`: the op microbenchmarks of ops_bench.cc, standalone (Google Benchmark's
// command line: --benchmark_filter, --benchmark_format=json, ...), with OpenBLAS's threads set
// up as dtbench sets them (set_blas_thread_timeout).
#include <benchmark/benchmark.h>

#include "kernels/cpu/blas_threads.h"

int main(int argc, char** argv) {
  dtb::set_blas_thread_timeout(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
