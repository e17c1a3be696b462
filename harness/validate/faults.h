// The test-only faults of `dtbench validate` (--inject: a rank's compute or transfers slowed,
// the rank hung, or its arithmetic corrupted in the SDC replay) and the timing helpers that
// apply them: a slowed rank spins inside the timed region, keeping its core busy as a slower
// device would. For tests only.
#pragma once
#include <algorithm>
#include <chrono>
#include <string>

namespace dtb {

/// A test-only fault: rank `rank` runs its compute measurements `compute` times slower (it
/// spins for (FACTOR - 1) x each timed repetition inside the timing), or its point-to-point
/// transfers `comm` times slower (both sides of each pair with it stretch every timed transfer
/// to FACTOR times the longer side's, as a link that many times slower would). Parsed from
/// "RANK:compute:FACTOR" or "RANK:comm:FACTOR" (FACTOR >= 1), "RANK:hang" (the rank stops in
/// level medium's compute check, for the per-check timeout), "RANK:sdc" (one bit of one GEMM
/// output flipped in that rank's SDC replay, harness/validate/sdc.h), or "A-B:comm:FACTOR" (only
/// the transfers between ranks A and B stretched, as one slow link between two healthy ranks;
/// A != B); InputError otherwise. Documented as for tests only.
struct Injection {
  int rank = -1;
  double compute = 1.0;
  double comm = 1.0;  // "RANK:comm:FACTOR": that rank's point-to-point transfers FACTOR times slower
  bool hang = false;  // "RANK:hang": that rank stops in its first compute step and never returns
  bool sdc = false;   // "RANK:sdc": that rank's SDC replay computes one wrong bit (sdc_replay's corrupt)
  int link_a = -1, link_b = -1;  // "A-B:comm:FACTOR": the transfers between A and B `comm` times slower
  /// The stretch of the transfers between ranks x and y (1: none).
  double comm_factor(int x, int y) const {
    if (link_a >= 0) return (x == link_a && y == link_b) || (x == link_b && y == link_a) ? comm : 1.0;
    return x == rank || y == rank ? comm : 1.0;
  }
};

Injection parse_injection(const std::string& spec, int world_size);

/// Spins until `until` (a slowed rank keeps its core busy, as a slower device would).
inline void spin_until(std::chrono::steady_clock::time_point until) {
  while (std::chrono::steady_clock::now() < until) {
  }
}

/// Seconds of steady_clock as its duration type.
inline std::chrono::steady_clock::duration steady_seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

/// The best (shortest) of `reps` timed runs of fn, seconds, each stretched to `factor` times
/// its length (the injected fault; 1: as measured).
template <typename F>
double best_seconds(int reps, double factor, F fn) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto dt = std::chrono::steady_clock::now() - t0;
    if (factor > 1) spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(dt * factor));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace dtb
