// The compute probe of `dtbench validate` (see compute.h).
#include "harness/validate/compute.h"

#include <cblas.h>

#include "harness/validate/faults.h"
#include "suites/gemm_rate.h"

namespace dtb {

void host_sgemm(int n, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

std::pair<double, double> ComputeProbe::measure(double factor) {
  // Timed here rather than by Backend::time_gemm (the gemm suite's): the best of the
  // repetitions on buffers touched once, each stretched by the fault inside the timing.
  auto gemm = [&] { host_sgemm(n, a.data(), b.data(), c.data()); };
  auto triad = [&] {
    for (size_t i = 0; i < m; ++i) z[i] = x[i] + 3.0f * y[i];
  };
  gemm();  // warm-up (OpenBLAS's buffers, the caches)
  const double tg = best_seconds(3, factor, gemm);
  triad();
  const double tt = best_seconds(3, factor, triad);
  return {gemm_flops(n, n, n) / tg / 1e9, 12.0 * double(m) / tt / 1e9};
}

}  // namespace dtb
