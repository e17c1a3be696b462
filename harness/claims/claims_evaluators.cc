// The evaluators of `dtbench claims` (harness/claims/claims_evaluators.h) about time, communication
// and the pipeline: each claim's arithmetic on dtbench's ring and pipeline formulas and its
// verdict; and the inputs' readers every evaluator file shares. The memory claims are in
// claims_memory.cc, the scale claims in claims_scale.cc, the communication-efficiency one in claims_comm.cc.
#include "harness/claims/claims_evaluators.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/printf.h>

#include "harness/memory_cli.h"
#include "kernels/comm/ring.h"
#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/checkpoint/checkpoint_interval.h"
#include "reference/layout/layout_spec.h"
#include "reference/parallel/pipeline_schedule.h"

namespace dtb::claims_impl {

const char* const kNoReport = "not measured: no report (dtbench claims --report FILE)";

double num(const nlohmann::json& in, const char* key) {
  if (!in.contains(key) || !in[key].is_number()) throw InputError(std::string("claims: input '") + key + "' missing or not a number");
  return in[key].get<double>();
}

std::string string_input(const nlohmann::json& in, const char* key) {
  if (!in.contains(key) || !in[key].is_string()) throw InputError(std::string("claims: input '") + key + "' missing or not a string");
  return in[key].get<std::string>();
}

bool within(double value, double claimed, double tol) { return std::abs(value - claimed) <= tol * std::abs(claimed); }

GptConfig model_named(const std::string& name) {
  for (const NamedModel& m : named_models())
    if (m.name == name) return m.cfg;
  std::string names;
  for (const NamedModel& m : named_models()) names += (names.empty() ? "" : ", ") + m.name;
  throw InputError("claims: unknown model '" + name + "' (named models: " + names + ")");
}

namespace {
using nlohmann::json;
}  // namespace

// ---- the evaluators: (entry inputs, tolerance, measurements) -> the row ----

// Claim 4: DP keeps per-GPU memory; all-reduce of P fp32 gradients on n GPUs under t.
void dp_allreduce(const json& in, double tol, const Measured& ms, ClaimResult& r) {
  const GptConfig m = model_named(string_input(in, "model"));
  const double P = double(gpt_num_params(m));
  const int n = int(num(in, "gpus"));
  const double limit_s = num(in, "time_s"), busbw = num(in, "busbw_GBps"), inter = num(in, "internode_busbw_GBps");
  const double s1 = zero_model_states(P, Precision::fp32, 0, 1).total(Tier::device);
  const double sn = zero_model_states(P, Precision::fp32, 0, n).total(Tier::device);
  const double S = 4.0 * P, factor = ring_all_reduce_factor(n);  // ring all-reduce: t = S 2(n-1)/n / busbw
  const double t = factor * S / (busbw * kGB), t_inter = factor * S / (inter * kGB), need = factor * S / limit_s / kGB;
  r.computed = fmt("model states at DP %d = DP 1 (%.1f GB, no ZeRO); fp32 grads %.2f GB: %.1f ms at busbw %.0f GB/s "
                   "(NVLink), %.0f ms at %.0f GB/s (between nodes)",
                   n, sn / kGB, S / kGB, 1e3 * t, busbw, 1e3 * t_inter, inter);
  r.values = {{"states_dp1_bytes", s1}, {"states_dpn_bytes", sn}, {"grad_bytes", S}, {"time_nvlink_s", t},
              {"time_internode_s", t_inter}, {"busbw_needed_GBps", need}};
  if (ms.ar_bytes > 0) {
    const double here = factor * S / (ms.ar_busbw * kGB);
    r.measured = fmt("all_reduce busbw here %.2f GB/s at the report's largest size (%.4g MiB, %d ranks): the %.2f GB "
                     "would take %.2f s (an upper bound: larger messages reach a higher busbw)",
                     ms.ar_busbw, ms.ar_bytes / 1048576.0, ms.ar_ranks, S / kGB, here);
    r.values["time_here_s"] = here;
  } else {
    r.measured = ms.have ? "not measured: the report has no collectives all_reduce records" : kNoReport;
  }
  (void)tol;
  const bool mem_ok = s1 == sn;
  r.verdict = mem_ok && t <= limit_s ? "holds only if" : "differs";
  r.why = fmt("memory: exactly (plain DP replicates everything); the %.0f ms needs busbw >= %.0f GB/s, i.e. the %d GPUs "
              "on one NVLink domain, not across nodes",
              1e3 * limit_s, need, n);
}

// Claims 5 and 14: the pipeline bubble (p - 1) / (m + p - 1) against a bound.
void bubble(const json& in, double, const Measured& ms, ClaimResult& r) {
  const double bound = num(in, "bubble");
  const int p = int(num(in, "stages"));
  // bubble(p, m) < bound  <=>  m > (p - 1) (1 - bound) / bound
  const double m_min = (p - 1) * (1.0 - bound) / bound;
  const int m_need = int(std::floor(m_min)) + 1;
  const double at = pipeline_bubble_theory("1f1b", p, m_need, 1);
  r.values = {{"stages", p}, {"bound", bound}, {"micro_batches_needed", m_need}, {"bubble_at_needed", at}};
  if (in.value("kind", "") == "depth") {
    // "beyond p stages the bubble exceeds the bound": true for every deeper pipeline only
    // when m is fixed at the value that puts p exactly at the bound.
    // p is the last depth at or under the bound and p + 1 the first over it: bubble(p, m) <=
    // bound <= ... iff m >= (p-1)(1-b)/b, and bubble(p+1, m) > bound iff m < p (1-b)/b.
    const int m_edge = int(std::ceil(m_min - 1e-9));
    const int m_last = int(std::ceil(p * (1.0 - bound) / bound - 1e-9)) - 1;
    r.computed = fmt("1F1B / GPipe bubble (p-1)/(m+p-1) > %.0f%% iff m < %.0f (p - 1): at p = %d it takes m < %d; "
                     "with m = 4p it is (p-1)/(5p-1) < 20%% at any depth",
                     100 * bound, (1.0 - bound) / bound, p + 1, int(std::ceil((p) * (1.0 - bound) / bound)));
    r.values["m_where_p_is_the_edge"] = m_edge;
    r.verdict = "holds only if";
    r.values["m_last"] = m_last;
    r.why = fmt("only with m = %d to %d micro-batches (m = %d: p = %d at %.0f%%, p = %d at %.0f%%); the bubble depends "
                "on m against p, not on depth: keep m >= %.0f (p - 1)",
                m_edge, m_last, m_edge, p, 100 * pipeline_bubble_theory("1f1b", p, m_edge, 1), p + 1,
                100 * pipeline_bubble_theory("1f1b", p + 1, m_edge, 1), (1.0 - bound) / bound);
  } else {
    r.computed = fmt("bubble (p-1)/(m+p-1) < %.0f%% iff m > %.0f (p - 1): p = %d needs m >= %d (%.1f%%); interleaved "
                     "with v chunks divides the bubble's m term by v",
                     100 * bound, (1.0 - bound) / bound, p, m_need, 100 * at);
    r.verdict = "holds only if";
    r.why = fmt("\"enough\" means m >= %.0f (p - 1) + 1 micro-batches per step (p = %d: %d), a global batch that large",
                (1.0 - bound) / bound, p, m_need);
  }
  if (!ms.pipeline.empty()) {
    // The deepest pipeline the report ran, 1F1B where it ran it, over its micro-batch counts.
    int pmax = 0;
    bool one_f_one_b = false;
    for (const json& b : ms.pipeline) pmax = std::max(pmax, b.value("p", 0));
    for (const json& b : ms.pipeline) one_f_one_b |= b.value("p", 0) == pmax && b.value("schedule", "") == "1f1b";
    const std::string sched = one_f_one_b ? "1f1b" : ms.pipeline.front().value("schedule", "?");
    std::vector<const json*> rows;
    for (const json& b : ms.pipeline)
      if (b.value("p", 0) == pmax && b.value("schedule", "") == sched &&
          b.value(field_key(LayoutKey::virtual_stages), 1) == 1)
        rows.push_back(&b);
    std::sort(rows.begin(), rows.end(), [](const json* a, const json* b) { return a->value("m", 0) < b->value("m", 0); });
    std::string s;
    for (const json* b : rows)
      s += fmt("%sm %d: %.3f (theory %.3f)", s.empty() ? "" : "; ", b->value("m", 0), (*b)["bubble_measured"].get<double>(),
               b->value("bubble_theory", 0.0));
    r.measured = fmt("pipeline suite, %s p %d: ", sched.c_str(), pmax) + s;
  } else {
    r.measured = ms.have ? "not measured: the report has no pipeline records" : kNoReport;
  }
}

// Claim 6 (and 13): a GPU-only measurement; the analytic part.
void gpu_only(const json& in, double, const Measured&, ClaimResult& r) {
  const std::string what = string_input(in, "what");
  r.verdict = "cannot measure here";
  r.measured = "needs " + string_input(in, "needs");
  if (what == "ffn_tp") {
    const double t1 = num(in, "time_1_ms"), tn = num(in, "time_n_ms");
    const int n = int(num(in, field_key(LayoutKey::tp)));
    r.computed = fmt("speedup %.2fx of an ideal %dx (%.0f%% efficiency): %.2f ms over the ideal %.2f ms is TP's two "
                     "all-reduces and launch overhead", t1 / tn, n, 100 * t1 / tn / n, tn - t1 / n, t1 / n);
    r.values = {{"speedup", t1 / tn}, {"efficiency", t1 / tn / n}, {"overhead_ms", tn - t1 / n}};
    r.why = "plausible for one NVLink node (compute scales by n; two activation all-reduces per FFN); not measurable on "
            "this CPU-only machine";
  } else {
    const double fp32 = num(in, "fp32_tflops"), tf32 = num(in, "tf32_tflops"), bf16 = num(in, "bf16_tflops");
    const double claimed = num(in, "speedup");
    r.computed = fmt("A100 peaks: bf16 %.0f TF/s = %.0fx fp32 (%.1f), %.0fx TF32 (%.0f)", bf16, bf16 / fp32, fp32,
                     bf16 / tf32, tf32);
    r.values = {{"peak_ratio_fp32", bf16 / fp32}, {"peak_ratio_tf32", bf16 / tf32}, {"claimed", claimed}};
    r.why = fmt("%.0fx lies between the peak ratios over TF32 (%.0fx) and strict fp32 (%.0fx): it depends on whether fp32 "
                "matmuls run as TF32 and on how much of the step is memory- or communication-bound; the CPU backend "
                "computes half types in fp32",
                claimed, bf16 / tf32, bf16 / fp32);
  }
}

// Claim 10: overlapping gradient communication with compute gains 15-20%.
void overlap(const json& in, double, const Measured& ms, ClaimResult& r) {
  const double lo = num(in, "gain_low"), hi = num(in, "gain_high");
  if (lo > hi) throw InputError(fmt("claims: input 'gain_low' (%g) exceeds 'gain_high' (%g)", lo, hi));
  // A step of compute c and exposed communication k runs in c + k; fully overlapped in
  // max(c, k) = c (k <= c): gain (c + k) / c - 1 = k / c; as a share f of the step, f / (1 - f).
  r.computed = fmt("a gain g hides communication that was g/(1+g) of the step: %.0f-%.0f%% gain needs %.0f-%.0f%% of "
                   "the step in exposed gradient communication (and that much compute to hide it under)",
                   100 * lo, 100 * hi, 100 * lo / (1 + lo), 100 * hi / (1 + hi));
  r.values = {{"comm_share_low", lo / (1 + lo)}, {"comm_share_high", hi / (1 + hi)}};
  if (!ms.overlap.empty()) {
    double best = 0;
    for (const json& b : ms.overlap) best = std::max(best, b["gain"].get<double>());
    r.measured = fmt("overlap suite: best gain %.1f%% over %zu settings", 100 * (best - 1), ms.overlap.size());
    r.values["measured_gain"] = best - 1;
  } else {
    r.measured = ms.have ? "not measured: the report has no overlap records" : kNoReport;
  }
  r.verdict = "holds only if";
  r.why = fmt("communication is %.0f-%.0f%% of the step before overlapping; with a fast interconnect (little to hide) "
              "or a communication-bound step (nothing to hide it under) the gain is smaller",
              100 * lo / (1 + lo), 100 * hi / (1 + hi));
}

// Claim 15: fp16 gradient communication halves the bandwidth.
void fp16_comm(const json& in, double, const Measured& ms, ClaimResult& r) {
  const double bytes_fp32 = num(in, "bytes_fp32"), bytes_fp16 = num(in, "bytes_fp16");
  r.computed = fmt("bytes on the wire: %.0f -> %.0f per element (x%.2f); time halves only where the transfer is "
                   "bandwidth-bound (t = alpha + S/B, S/B >> alpha)",
                   bytes_fp32, bytes_fp16, bytes_fp16 / bytes_fp32);
  r.values = {{"byte_ratio", bytes_fp16 / bytes_fp32}};
  if (ms.ar_small_time_us > 0) {
    const double bytes_ratio = ms.ar_small_bytes / ms.ar_bytes, time_ratio = ms.ar_small_time_us / ms.ar_time_us;
    r.measured = fmt("all_reduce here: %.4g MiB in %.0f us, %.4g MiB (x%.2f the bytes) in %.0f us (x%.2f the time)",
                     ms.ar_bytes / 1048576.0, ms.ar_time_us, ms.ar_small_bytes / 1048576.0, bytes_ratio,
                     ms.ar_small_time_us, time_ratio);
    r.values["bytes_ratio_here"] = bytes_ratio;
    r.values["time_ratio_here"] = time_ratio;
  } else {
    r.measured = ms.have ? "not measured: the report has no all_reduce at two sizes" : kNoReport;
  }
  r.verdict = "holds";
  r.why = "the bytes halve exactly; the time too for large gradients (bandwidth-bound), less for small messages "
          "(latency-bound); the reduction itself must then be done in fp16 or the sum rounded";
}

// Claim 16: the electricity bill of a long run.
void energy(const json& in, double tol, const Measured&, ClaimResult& r) {
  const double mw = num(in, "megawatts"), days = num(in, "days"), price = num(in, "usd_per_kwh"),
               claimed = num(in, "usd"), gpus = num(in, "gpus"), tdp = num(in, "gpu_tdp_w"),
               peak = num(in, "gpu_peak_tflops"), P = num(in, "params"), tokens = num(in, "tokens");
  const double kwh = mw * 1e3 * days * 24, usd = kwh * price;
  const double gpu_mw = gpus * tdp / 1e6, flops = 6 * P * tokens, days_at_peak = flops / (gpus * peak * 1e12) / 86400;
  auto dollars = [](double x) {  // $648,000
    std::string d = fmt("%.0f", x);
    for (int i = int(d.size()) - 3; i > 0; i -= 3) d.insert(size_t(i), ",");
    return "$" + d;
  };
  r.computed = fmt("%.0f MW x %.0f days x 24 h = %.3g kWh x $%.2f = %s; %.0f GPUs at %.0f W are %.1f MW alone; "
                   "6 N D = %.3g FLOPs take %.1f days at their peak, so %.0f days is %.1f%% MFU",
                   mw, days, kwh, price, dollars(usd).c_str(), gpus, tdp, gpu_mw, flops, days_at_peak, days,
                   100 * days_at_peak / days);
  r.values = {{"kwh", kwh}, {"usd", usd}, {"gpu_megawatts", gpu_mw}, {"flops", flops}, {"days_at_peak", days_at_peak},
              {"implied_mfu", days_at_peak / days}};
  const bool arithmetic = within(usd, claimed, tol);
  r.verdict = arithmetic && gpu_mw <= mw ? "holds" : (arithmetic ? "holds only if" : "differs");
  r.why = arithmetic ? fmt("the arithmetic holds; the inputs do not fit together: the GPUs alone draw %.1f MW at TDP, "
                           "and the training compute fits in %.0f days at 40%% MFU",
                           gpu_mw, days_at_peak / 0.4)
                     : "the arithmetic gives " + dollars(usd);
}

// Claim 18: ZB-H1 (Qi et al. 2024) against 1F1B, by the zero-communication simulation of both
// schedules (reference/parallel/pipeline_schedule.h) with T_F = T_B = T_W, and with a lighter W; the
// measured column from the pipeline suite's records of both at the deepest p they share.
void zero_bubble(const json& in, double tol, const Measured& ms, ClaimResult& r) {
  const int p = int(num(in, "stages")), m = int(num(in, "micro_batches"));
  const double claimed = num(in, "ratio");
  auto idle = [&](const std::string& s, double tb, double tw) {
    const PipelineSimulation x = simulate_pipeline(s, p, m, 1, 1.0, tb, tw);
    return std::pair{x.idle[0], *std::max_element(x.peak_in_flight.begin(), x.peak_in_flight.end())};
  };
  const auto [one_idle, one_peak] = idle("1f1b", 2.0, 0.0);
  const auto [zb_idle, zb_peak] = idle("zb-h1", 2.0, 1.0);
  const auto [light_one, light_one_peak] = idle("1f1b", 1.5, 0.0);  // W half of B: T_W = T_F / 2
  const auto [light_zb, light_zb_peak] = idle("zb-h1", 1.5, 0.5);
  const double ratio = one_idle / zb_idle, light = light_one / light_zb;
  r.values = {{"stages", p}, {"micro_batches", m}, {"idle_ratio", ratio}, {"idle_ratio_light_w", light},
              {"peak_1f1b", one_peak}, {"peak_zb_h1", zb_peak}};
  (void)light_one_peak, (void)light_zb_peak;
  r.computed = fmt("p %d, m %d, T_F = T_B = T_W: idle per stage 1F1B %.0f T_F, ZB-H1 %.0f T_F (%.2fx less; bubble over "
                   "compute (p-1)/m = %.3f vs (p-1)/(3m) = %.3f); with T_W = T_F / 2 only %.2fx less; most micro-batches "
                   "held: %g on 1F1B's first stage (p - stage on the others), %g on every ZB-H1 stage",
                   p, m, one_idle, zb_idle, ratio, one_idle / (3.0 * m), zb_idle / (3.0 * m), light, one_peak, zb_peak);
  r.verdict = within(ratio, claimed, tol) && zb_peak == one_peak ? "holds only if" : "differs";
  r.why = fmt("a third of the idle time when W costs as much as F and B (%.2fx with W half as long); the same peak as "
              "1F1B's busiest stage, but every stage now holds p micro-batches, and the output gradients W waits "
              "for are held too (dtbench's GPT: 1.28-1.35x 1F1B's peak activations, docs/zero-bubble.md)",
              light);
  // Measured: the pipeline suite's zb-h1 and 1f1b rows at the deepest p and the largest m both ran.
  std::map<std::pair<int, int>, std::map<std::string, double>> rows;  // (p, m) -> schedule -> bubble
  for (const json& b : ms.pipeline)
    if (b.contains("bubble_measured") && b.value(field_key(LayoutKey::virtual_stages), 1) == 1)
      rows[{b.value("p", 0), b.value("m", 0)}][b.value("schedule", "")] = b["bubble_measured"].get<double>();
  const std::pair<int, int>* best = nullptr;
  for (const auto& [k, v] : rows)
    if (v.count("zb-h1") && v.count("1f1b")) best = &k;  // ordered: the last is the deepest, largest m
  if (best) {
    const auto& v = rows[*best];
    auto over_compute = [](double b) { return b / (1 - b); };  // idle / step -> idle / compute
    r.measured = fmt("pipeline suite, p %d m %d: bubble 1F1B %.3f, ZB-H1 %.3f (idle over compute %.2fx less)",
                     best->first, best->second, v.at("1f1b"), v.at("zb-h1"),
                     over_compute(v.at("1f1b")) / over_compute(v.at("zb-h1")));
  } else {
    r.measured = ms.have ? "not measured: the report has no zb-h1 and 1f1b pipeline records" : kNoReport;
  }
}

// Claim 19: hourly checkpoints against a failure about every M hours (the article, §5.1), by
// Young's interval sqrt(2 delta M) and the first-order lost share delta / tau + tau / 2M
// (reference/checkpoint/checkpoint_interval.h): the save cost for which the interval is optimal, the range of
// costs for which it loses at most (1 + tol) x the optimum's share, and the measured column from the
// checkpoint suite's blocking save (its delta; its Young interval at the claim's M).
void checkpoint_interval(const json& in, double tol, const Measured& ms, ClaimResult& r) {
  const double M = num(in, "mtbf_hours") * 3600.0, tau = num(in, "interval_hours") * 3600.0;
  const double best_delta = tau * tau / (2.0 * M);  // tau = sqrt(2 delta M)
  // (x + 1/x) / 2 <= 1 + tol with x = tau / tau_opt: tau_opt within tau / x of tau; delta ~ tau_opt^2.
  const double x = 1.0 + tol + std::sqrt((1.0 + tol) * (1.0 + tol) - 1.0);
  const double lo = best_delta / (x * x), hi = best_delta * x * x;
  const double share = checkpoint_overhead_share(tau, best_delta, M);
  r.values = {{"mtbf_hours", M / 3600}, {"interval_hours", tau / 3600}, {"optimal_for_save_s", best_delta},
              {"save_s_low", lo}, {"save_s_high", hi}, {"lost_share", share}};
  r.computed = fmt("at M = %g h, an interval of %g h is Young's optimum sqrt(2 delta M) for a save of delta = %.1f s "
                   "(losing %.2f%% of the run: delta / tau + tau / 2M); within %.0f%% of the optimum's loss for "
                   "saves of %.1f to %.1f s",
                   M / 3600, tau / 3600, best_delta, 100 * share, 100 * tol, lo, hi);
  r.verdict = "holds only if";
  r.why = fmt("the optimal interval grows as the square root of the save's cost: hourly fits saves of %.0f-%.0f s at "
              "M = %g h; Meta's 419 interruptions in 54 days (M = 3.1 h) would put a %.0f s save's optimum at %.0f min",
              lo, hi, M / 3600, best_delta, young_interval_s(best_delta, 3.1 * 3600) / 60);
  const json* block = nullptr;
  for (const json& b : ms.checkpoint_interval)
    if (b.value("save", "") == "blocking") block = &b;
  if (block && !((*block)["save_cost_ms"].get<double>() > 0)) {  // a paired difference: noise can put it <= 0
    r.measured = fmt("checkpoint suite: a blocking save cost %.3f ms here, within the noise of the steps around "
                     "it: no interval to derive",
                     (*block)["save_cost_ms"].get<double>());
  } else if (block) {
    const double d = (*block)["save_cost_ms"].get<double>() / 1e3;
    const double opt = young_interval_s(d, M);
    r.measured = fmt("checkpoint suite: a blocking save costs %.3f s here; Young's interval at M = %g h is %.0f s, and "
                     "%g h loses %.2fx the optimum's share",
                     d, M / 3600, opt, tau / 3600,
                     checkpoint_overhead_share(tau, d, M) / checkpoint_overhead_share(opt, d, M));
  } else {
    r.measured = ms.have ? "not measured: the report has no checkpoint suite records" : kNoReport;
  }
}

}  // namespace dtb::claims_impl
