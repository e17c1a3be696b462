// The pipeline suite's bubble checks and the thread's run delay; see pipeline_verdict.h.
#include "suites/pipeline_verdict.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dtb {

RunDelay::RunDelay() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {
  if (fd_ >= 0 && now() < 0) ::close(fd_), fd_ = -1;
}

RunDelay::~RunDelay() {
  if (fd_ >= 0) ::close(fd_);
}

double RunDelay::now() const {
  if (fd_ < 0) return 0;
  // "<ns on the CPU> <ns runnable, waiting for a CPU> <timeslices>" (Documentation/scheduler/sched-stats.rst)
  char buf[96];
  const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  char* end = nullptr;
  std::strtoull(buf, &end, 10);
  const char* second = end;
  const unsigned long long wait_ns = std::strtoull(second, &end, 10);
  return end == second ? -1 : 1e-9 * double(wait_ns);
}

double disturbance_bound(double delay_s, double makespan_s) {
  if (!(delay_s > 0)) return 0.0;
  if (!(makespan_s > delay_s)) return 1.0;
  return std::min(1.0, delay_s / (makespan_s - delay_s));
}

int least_disturbed(const std::vector<BubbleRepetition>& reps) {
  int best = -1;
  for (int i = 0; i < int(reps.size()); ++i) {
    const BubbleRepetition& r = reps[size_t(i)];
    if (best < 0 || r.disturbance < reps[size_t(best)].disturbance ||
        (r.disturbance == reps[size_t(best)].disturbance && r.makespan_s < reps[size_t(best)].makespan_s))
      best = i;
  }
  return best;
}

Check bubble_check(const std::string& name, double simulated, const std::vector<BubbleRepetition>& reps,
                   double tolerance) {
  const int i = least_disturbed(reps);
  if (i < 0) return make_check(name, INFINITY, tolerance, "no repetition was measured");
  const BubbleRepetition& r = reps[size_t(i)];
  const double err = std::fabs(r.bubble - simulated), e = r.disturbance;
  char detail[640];
  std::snprintf(detail, sizeof detail,
                "|measured - simulated| bubble (idle / step time) of the least disturbed of %zu repetitions (number "
                "%d: ranks waited %.0f us for a CPU beyond %.0f us per action, bound on the bubble's shift %.4f); "
                "tolerance %.2g absolute: per-hand-off latency and timer error against >= 250 us actions; passed "
                "when value + shift <= %.2g, failed when value - shift > %.2g",
                reps.size(), i + 1, r.excess_s * 1e6, kDelayAllowanceS * 1e6, e, tolerance, tolerance, tolerance);
  Check c = make_check(name, err, tolerance, detail);
  if (err + e <= tolerance || !(err - e <= tolerance)) {  // decided (a NaN value fails)
    c.passed = err + e <= tolerance;
    return c;
  }
  char why[512];
  std::snprintf(why, sizeof why,
                "the machine was busy: in the least disturbed of %zu repetitions the ranks waited %.2f ms for a CPU "
                "(%.2f ms beyond %.0f us per action), which can move the bubble by up to %.3f; |measured - "
                "simulated| there, %.4f, could be within %.2f or not",
                reps.size(), r.harmful_s * 1e3, r.excess_s * 1e3, kDelayAllowanceS * 1e6, e, err, tolerance);
  return make_not_judged(c, why);
}

bool bubble_decided(double simulated, const std::vector<BubbleRepetition>& reps, double tolerance) {
  return bubble_check("", simulated, reps, tolerance).judged();
}

// The rounding of simulate_pipeline (reference/parallel/pipeline_schedule.cc) on balanced stages, whose
// exact bubble is the closed form (for every schedule and m this suite runs: pipeline_bubble_theory,
// zb_h1_bubble_theory where T_W <= min(T_F, T_B)). u = 2^-53, gamma(n) = n u / (1 - n u) (Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., Sec. 3.1); N = actions over all stages.
//  - Every completion time is a sum of positive action costs along one dependency chain (the max
//    of two ready times picks one computed value, and adds no rounding), at most N long: computed
//    as t (1 + theta), |theta| <= gamma(N); so is the makespan T, and each stage's busy time B_s
//    (a running sum of its <= N costs).
//  - idle_s = fl(T - B_s): |error| <= gamma(N) (T + B_s) + u idle_s (1 + gamma(N)) <= 2 gamma(N) T (1 + u)
//    + u idle_s, as B_s <= T; no cancellation bound is needed, the error is absolute in T.
//  - bubble = fl(sum_s idle_s / fl(p T)): the sum of p non-negative terms gamma(p - 1), the product
//    and the quotient u each. With I = sum idle_s <= p T, |b^ - b| <= sum |idle errors| / (p T) +
//    b (gamma(p - 1) + 2 u + gamma(N)) <= 3 gamma(N) + gamma(p + 2) + O(u^2) (b <= 1) <= gamma(3 N + p + 2)
//    (gamma(a) + gamma(b) <= gamma(a + b)).
//  - The closed form itself: (p - 1) / (v m + p - 1) is one rounded quotient of exact integers
//    (relative u); ZB-H1's (p - 1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W) + idle) rounds 3 times in
//    its idle, whose first sum can cancel by at most (T_F + T_B + T_W) / (T_F + T_B - T_W) <= 3 where
//    T_W <= min(T_F, T_B), so the idle is within 5 u relative, the denominator 6 u, the quotient u:
//    gamma(12) relative, <= gamma(12) absolute.
// The two bubbles are then within gamma(3 N + p + 2) + gamma(12); at the defaults' largest case
// (interleaved, p 4, m 16, v 2: N = 256) that is 8.7e-14. Measured on every default case (p 2 and 4;
// m 1 to 16) and on p 1-8, m 1-32, v 1-4 (suites/pipeline_verdict_test.cc): at most 4 % of it.
double closed_form_tolerance(int actions, int p) {
  auto gamma = [](double n) {
    const double nu = n * 0x1p-53;
    return nu / (1 - nu);
  };
  return gamma(3.0 * actions + p + 2) + gamma(12);
}

Check closed_form_check(const std::string& name, double simulated, double theory, int actions, int p) {
  return make_check(name, std::fabs(simulated - theory), closed_form_tolerance(actions, p),
                    "|simulated - closed form| bubble: the schedule's zero-communication simulation on balanced "
                    "stages against its closed form, exact up to rounding; tolerance gamma(3 N + p + 2) + gamma(12) "
                    "for N = " + std::to_string(actions) + " actions (suites/pipeline_verdict.cc)");
}

}  // namespace dtb
