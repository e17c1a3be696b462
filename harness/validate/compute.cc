// The compute probe of `dtbench validate` (see compute.h).
#include "harness/validate/compute.h"

#include <cblas.h>

#include "harness/validate/faults.h"

namespace dtb {

std::pair<double, double> ComputeProbe::measure(double factor) {
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  auto triad = [&] {
    for (size_t i = 0; i < m; ++i) z[i] = x[i] + 3.0f * y[i];
  };
  gemm();  // warm-up (OpenBLAS's buffers, the caches)
  const double tg = best_seconds(3, factor, gemm);
  triad();
  const double tt = best_seconds(3, factor, triad);
  return {2.0 * n * n * double(n) / tg / 1e9, 12.0 * double(m) / tt / 1e9};
}

}  // namespace dtb
