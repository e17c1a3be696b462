// A test-only injected slowdown: the regression gate's power measurement (scripts/gate-power,
// docs/ci.md) slows one chosen measurement by a known factor and asks whether the gate sees it.
// Set through the environment variable DTB_INJECT_SLOWDOWN, never by a config key, and a
// report made with one carries it in context.injected_slowdown. What it emulates is code that does
// more CPU work: timed runs add CPU work in proportion to the CPU time the slowed operation used,
// counted runs (dtbench count) repeat the region's own work.
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

/// CPU seconds this thread has used (CLOCK_THREAD_CPUTIME_ID); wall seconds (CLOCK_MONOTONIC).
double thread_cpu_seconds();
double wall_seconds();

/// Busy-works until this thread has used `seconds` more CPU time (nothing for seconds <= 0):
/// extra work that a shared core delays as it delays the real work. Not a wait on the wall
/// clock: sized by wall time, extra work grows with the load (elapsed time counts the wait for
/// the core: 20 % asked for gave +350 % on a GEMM beside other work) and, ended by the clock,
/// it stops early after a preemption.
void spin_cpu(double seconds);

/// The extra CPU work, seconds, for one call of a repeated operation slowed by `factor` that used
/// `cpu` seconds of this thread's CPU time in `elapsed` seconds: (factor - 1) times the smaller
/// of its CPU time and the fastest call so far (`fastest`, updated; start it at infinity). The
/// CPU time is a compute call's work, whatever the load; a call that polls while it waits (an MPI
/// collective, a training step's gradient all-reduce) also burns CPU time waiting for its peers,
/// which the extra work of the peers' own slowdown would lengthen in turn (a 5 % slower 1 MiB
/// all_reduce measured +47 % beside other work), and the fastest call so far bounds that.
double extra_cpu_seconds(double factor, double cpu, double elapsed, double& fastest);

/// Runs `work` and then spin_cpu(extra_cpu_seconds(...)) for it: repeated calls do `factor` times
/// their CPU work (factor 1: just runs it). The calling thread's CPU time only: work done by other
/// threads (a multi-threaded BLAS) is not counted.
template <typename F>
void slowed(double factor, double& fastest, F&& work) {
  if (factor == 1.0) {
    work();
    return;
  }
  const double c0 = thread_cpu_seconds(), t0 = wall_seconds();
  work();
  spin_cpu(extra_cpu_seconds(factor, thread_cpu_seconds() - c0, wall_seconds() - t0, fastest));
}

}  // namespace dtb
