// The evaluators of claims about communication-efficient training (harness/claims/claims_evaluators.h).
#include <algorithm>
#include <cmath>

#include "harness/claims/claims_evaluators.h"

namespace dtb::claims_impl {

// Claim 20 (the article's [docs/claims.md#the-article] §6.3): one or two steps of gradient delay gain about 20 % throughput,
// and delay compensation keeps the accuracy. A step of compute c whose gradient all-reduce takes
// k: synchronous DP runs in c + k, stale gradients overlap the reduction with the next steps'
// compute, max(c, k / s) for staleness s (s reductions in flight): gain (c + k) / max(c, k / s) - 1,
// at most k / c (k <= c). A gain g needs k >= g c: the reduction at least g of the compute.
// Measured: the comm_efficiency suite's stale rows against sync over the same links.
void stale_gradients(const nlohmann::json& in, double tol, const Measured& ms, ClaimResult& r) {
  const double g = num(in, "gain");
  r.computed = fmt("a gain of %.0f%% needs the gradient all-reduce to take at least %.0f%% of the compute "
                   "(gain = (c + k) / max(c, k / s) - 1 <= k / c)", 100 * g, 100 * g);
  r.values = {{"comm_to_compute_needed", g}};
  if (ms.comm_efficiency.empty()) {
    r.measured = ms.have ? "not measured: the report has no comm_efficiency records" : kNoReport;
    r.verdict = "holds only if";
    r.why = fmt("the all-reduce is at least %.0f%% of the compute (a slow or cross-region link); on a fast "
                "interconnect there is little to hide", 100 * g);
    return;
  }
  // The mean speed-up of the stale rows (k = 1, 2, with and without compensation) per link: one
  // method's best would pick the noise of a shared machine.
  double sum[2] = {0, 0}, dc_loss = NAN, plain_loss = NAN;
  int n[2] = {0, 0};
  for (const nlohmann::json& b : ms.comm_efficiency) {
    const std::string m = b.value("method", "");
    if (m.rfind("stale", 0) != 0) continue;
    const int slow = b.value("link", "") == "slow" ? 1 : 0;
    sum[slow] += b.value("speedup_vs_sync", 0.0), ++n[slow];
    if (slow) continue;
    const double dl = b.value("loss_vs_sync", NAN);
    if (m.find(":dc") != std::string::npos) dc_loss = std::isnan(dc_loss) ? dl : std::min(dc_loss, dl);
    else plain_loss = std::isnan(plain_loss) ? dl : std::min(plain_loss, dl);
  }
  const double gain_fast = n[0] ? sum[0] / n[0] - 1 : NAN, gain_slow = n[1] ? sum[1] / n[1] - 1 : NAN;
  r.measured = fmt("comm_efficiency suite: the stale methods' mean speed-up over sync %.1f%% (slow links, %d rows), "
                   "%.1f%% (fast, %d); tail loss - sync's: %+.4f compensated, %+.4f not",
                   100 * gain_slow, n[1], 100 * gain_fast, n[0], dc_loss, plain_loss);
  r.values["measured_gain_slow"] = gain_slow;
  r.values["measured_gain_fast"] = gain_fast;
  const bool slow_holds = gain_slow >= g * (1 - tol), fast_holds = gain_fast >= g * (1 - tol);
  r.verdict = slow_holds && fast_holds ? "holds" : slow_holds ? "holds only if" : "differs";
  r.why = slow_holds && !fast_holds
              ? "only over the slow links: over fast ones the all-reduce is too small a share of the step to hide"
              : slow_holds ? "the all-reduce is a large enough share of the step over both links"
                           : "the stale methods did not gain that much over sync here";
}

}  // namespace dtb::claims_impl
