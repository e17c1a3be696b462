// A test-only injected slowdown: the regression gate's power measurement (scripts/gate-power,
// docs/ci.md) slows one chosen measurement by a known factor and asks whether the gate sees it.
// Set through the environment variable DTB_INJECT_SLOWDOWN, never by a config key, and a
// report made with one carries it in context.injected_slowdown. What it emulates is code that does
// more CPU work: timed runs add work that takes a known time on an idle core (so that when the
// core is shared it is delayed as the real work is), counted runs (dtbench count) repeat the
// region's own work.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace dtb {

/// What to slow and by which factor (1: not at all). The targets are the three figures the
/// gate's power is measured on: a training step, a GEMM, a mid-size all_reduce.
struct InjectedSlowdown {
  double train_step = 1.0;  // the train suite's training steps; dtbench count's train_step region
  double gemm = 1.0;        // the gemm suite's GEMMs (Backend::time_gemm); dtbench count's gemm region
  double all_reduce = 1.0;  // the collectives suite's all_reduce rows of all_reduce_lo..hi bytes
  size_t all_reduce_lo = 0, all_reduce_hi = SIZE_MAX;
  bool any() const { return train_step != 1.0 || gemm != 1.0 || all_reduce != 1.0; }
  /// The all_reduce factor for a message of `bytes` (1 outside the band).
  double all_reduce_at(size_t bytes) const {
    return bytes >= all_reduce_lo && bytes <= all_reduce_hi ? all_reduce : 1.0;
  }
  /// The spec that parses back to this ("" when nothing is slowed).
  std::string to_string() const;
};

/// Parses "TARGET=FACTOR[,TARGET=FACTOR...]" with TARGET train_step, gemm or all_reduce, the
/// last optionally with a byte band "all_reduce=1.1@65536-1048576" (inclusive), FACTOR in
/// [1, 100]. "" gives no slowdown. Errors: InputError "DTB_INJECT_SLOWDOWN: <what>" for an
/// unknown or repeated target, a factor that is not a number in range, or a malformed band.
InjectedSlowdown parse_injected_slowdown(const std::string& spec);

/// parse_injected_slowdown of the environment variable DTB_INJECT_SLOWDOWN (unset: none).
InjectedSlowdown injected_slowdown_from_env();

/// Does CPU work that takes `seconds` on an idle core (nothing for seconds <= 0): a dependent
/// integer loop of seconds x its rate, the rate measured once per process as the fastest of 20
/// short trials. Not a wait on the clock: when the core is shared, the work is delayed as slower
/// code would be (a wait on the clock would end early after a preemption, or, ended by the
/// clock, hide how much work it stood for).
void spin_for(double seconds);

/// The extra work, seconds on an idle core, for one call of a repeated operation slowed by
/// `factor` that took `elapsed` seconds: (factor - 1) times the fastest call so far (`fastest`,
/// updated; start it at infinity), i.e. what the operation costs when it has the core to itself.
/// Not (factor - 1) x elapsed: on a shared core elapsed counts the time spent waiting for it, and
/// extra work sized by it would grow with the load (at half a core, twice the factor asked for).
double extra_seconds(double factor, double elapsed, double& fastest);

/// Runs `work` and then spin_for(extra_seconds(factor, its time, fastest)), so that repeated
/// calls take `factor` times as long on an idle core and do factor times the CPU work on a
/// loaded one (factor 1: just runs it).
template <typename F>
void slowed(double factor, double& fastest, F&& work);

}  // namespace dtb

#include <chrono>

template <typename F>
void dtb::slowed(double factor, double& fastest, F&& work) {
  if (factor == 1.0) {
    work();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  work();
  spin_for(extra_seconds(factor, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                         fastest));
}
