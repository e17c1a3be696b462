// The pipeline suite's two bubble checks on synthetic stages (suites/pipeline.cc):
//  - bubble_closed_form: the simulated bubble against the schedule's closed form, exact up to
//    floating-point rounding (a bound derived here), so a schedule bug is caught whatever the load;
//  - bubble: the measured bubble against the simulation, judged on the least disturbed of the
//    repetitions, with a third outcome, not judged, where even that one waited for a CPU longer
//    than the tolerance's error analysis allows (the machine was busy).
// And the per-thread run delay (Linux schedstat) that measures that waiting.
#pragma once
#include <string>
#include <vector>

#include "suites/suite.h"

namespace dtb {

/// The thread's run delay: seconds it has spent runnable but waiting for a CPU
/// (/proc/thread-self/schedstat, its second field, ns; Linux with schedstats). Opened by the
/// thread that reads it (thread-self names the opener); about 0.4 us a read.
class RunDelay {
 public:
  RunDelay();
  ~RunDelay();
  RunDelay(const RunDelay&) = delete;
  RunDelay& operator=(const RunDelay&) = delete;
  /// False where the file cannot be read: now() is then always 0 and no delay is ever seen.
  bool available() const { return fd_ >= 0; }
  /// The run delay so far, seconds.
  double now() const;

 private:
  int fd_ = -1;
};

/// The scheduler delay each action may have within the bubble tolerance's error analysis
/// (suites/pipeline.cc run_case: a hand-off's cost, its polling receiver's wake-up included, is
/// ~5-50 us with ranks sharing cores): run delay up to this per action is the analysis's, the
/// rest of it the machine's.
inline constexpr double kDelayAllowanceS = 50e-6;

/// What one rank measured in one repetition, seconds: how late its actions ended for want of a CPU
/// (harmful_s: per action, the run delay since its input was last found missing, or since the
/// previous action ended, bounded by the action's lateness by the clock where it is known; see
/// suites/pipeline.cc StageRun::step), of it the part beyond kDelayAllowanceS per action (excess_s),
/// and how much its computes overran what they asked for (overrun_s, a figure for the report).
struct RankDelay {
  double harmful_s = 0, excess_s = 0, overrun_s = 0;
  int actions = 0;
  /// One action's harmful run delay, seconds: adds it, and its part beyond the allowance.
  void add_action(double harmful) {
    harmful_s += harmful, excess_s += harmful > kDelayAllowanceS ? harmful - kDelayAllowanceS : 0.0, ++actions;
  }
};

/// The bound on how far delays of `delay_s` seconds in all (summed over a pipeline's ranks) can
/// have moved a measured bubble whose makespan was `makespan_s`: delay / (makespan - delay),
/// capped at 1. Why: bubble = 1 - W / (p T) with W the stages' busy time and T the makespan.
/// Taking the delays out (modelled as extra time on the edges of the run's dependency graph)
/// shortens T by at most D and never lengthens it, and shrinks W by at most D (the part spent
/// inside compute spans), so W' / T' lies in [(W - D) / T, W / (T - D)] and, with W <= p T, the
/// bubble moves by at most D / (T - D).
double disturbance_bound(double delay_s, double makespan_s);

/// One repetition of a case, averaged over its pipelines (the world holds world / p of them).
struct BubbleRepetition {
  double bubble = 0;       // measured: mean over stages of idle / makespan
  double makespan_s = 0;   // mean over the pipelines
  double excess_s = 0;     // run delay beyond the allowance, summed over a pipeline's ranks
  double harmful_s = 0;    // harmful run delay, summed over a pipeline's ranks
  double overrun_s = 0;    // compute overrun, summed over a pipeline's ranks
  double disturbance = 0;  // mean over the pipelines of disturbance_bound(excess, makespan)
};

/// The index of the least disturbed repetition (ties: the shorter makespan), or -1 for none.
int least_disturbed(const std::vector<BubbleRepetition>& reps);

/// The measured-against-simulated bubble check `name` (tolerance 0.05: its error analysis is in
/// suites/pipeline.cc) on the least disturbed repetition r: value = |bubble_r - simulated|,
/// e = r's disturbance. The undisturbed value lies in [value - e, value + e]: passed when
/// value + e <= tolerance, failed when value - e > tolerance, otherwise not judged (the machine
/// was busy), the reason giving the figures. No repetitions: failed.
Check bubble_check(const std::string& name, double simulated, const std::vector<BubbleRepetition>& reps,
                   double tolerance);

/// Whether bubble_check on `reps` reaches a verdict (passed or failed): a case stops repeating
/// when it does (after its minimum repetitions), or at its maximum.
bool bubble_decided(double simulated, const std::vector<BubbleRepetition>& reps, double tolerance);

/// The most simulate_pipeline's bubble can differ from the exact value of its inputs, plus the
/// closed form's own rounding, for `actions` actions over p stages: gamma(3 actions + p + 2) +
/// gamma(12), gamma(n) = n u / (1 - n u), u = 2^-53. The analysis: pipeline_verdict.cc.
double closed_form_tolerance(int actions, int p);

/// The check `name` that the simulated bubble equals the closed form `theory` within
/// closed_form_tolerance(actions, p): deterministic, it fails on a schedule bug whatever the load.
Check closed_form_check(const std::string& name, double simulated, double theory, int actions, int p);

}  // namespace dtb
