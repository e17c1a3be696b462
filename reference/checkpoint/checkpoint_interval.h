// The optimal checkpoint interval for a job whose failures arrive at random (exponential,
// mean time between failures M) and whose checkpoint costs delta seconds of progress:
// Young (1974), "A first order approximation to the optimum checkpoint interval", CACM
// 17(9); Daly (2006), "A higher order estimate of the optimum checkpoint interval for
// restart dumps", FGCS 22(3), eq. (37). Seconds throughout; intervals count compute time
// between checkpoints. Not here: restart time (Daly's R; it does not move the optimum).
#pragma once
#include <cmath>

namespace dtb {

/// Young's interval sqrt(2 delta M), seconds.
inline double young_interval_s(double delta_s, double mtbf_s) { return std::sqrt(2.0 * delta_s * mtbf_s); }

/// Daly's higher-order interval: sqrt(2 delta M) [1 + (1/3) sqrt(delta / 2M) + (1/9) (delta / 2M)]
/// - delta for delta < 2M, else M. Seconds.
inline double daly_interval_s(double delta_s, double mtbf_s) {
  if (delta_s >= 2.0 * mtbf_s) return mtbf_s;
  const double x = delta_s / (2.0 * mtbf_s);
  return young_interval_s(delta_s, mtbf_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - delta_s;
}

/// The first-order share of wall time lost with a checkpoint every `tau_s` of compute:
/// the checkpoints' delta / tau plus the work redone after a failure, on average half an
/// interval per failure, tau / 2M (Young's model; at tau = sqrt(2 delta M) it is sqrt(2 delta / M)).
inline double checkpoint_overhead_share(double tau_s, double delta_s, double mtbf_s) {
  return delta_s / tau_s + tau_s / (2.0 * mtbf_s);
}

}  // namespace dtb
