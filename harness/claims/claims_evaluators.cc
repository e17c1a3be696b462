// The evaluators of `dtbench claims`: each claim's arithmetic on dtbench's memory model and
// pipeline formulas, and its verdict (harness/claims/claims_evaluators.h).
#include "harness/claims/claims_evaluators.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include <fmt/printf.h>

#include "harness/memory_cli.h"
#include "kernels/comm/ring.h"
#include "kernels/error.h"
#include "reference/checkpoint/checkpoint_interval.h"
#include "reference/analytic/memory_model.h"
#include "reference/parallel/pipeline_schedule.h"
#include "reference/layout/layout_spec.h"

namespace dtb::claims_impl {

const char* const kNoReport = "not measured: no report (dtbench claims --report FILE)";

double num(const nlohmann::json& in, const char* key) {
  if (!in.contains(key) || !in[key].is_number()) throw InputError(std::string("claims: input '") + key + "' missing or not a number");
  return in[key].get<double>();
}

namespace {

using nlohmann::json;
constexpr double kGB = 1e9;

GptConfig model_named(const std::string& name) {
  for (const NamedModel& m : named_models())
    if (m.name == name) return m.cfg;
  std::string names;
  for (const NamedModel& m : named_models()) names += (names.empty() ? "" : ", ") + m.name;
  throw InputError("claims: unknown model '" + name + "' (named models: " + names + ")");
}

// The vocabulary padded to a multiple of 128 tp, as Megatron-LM's
// --make-vocab-size-divisible-by 128 does for tensor parallelism (GPT-2's 50257 -> 50304 at tp 1).
GptConfig padded_for_tp(GptConfig m, int tp) {
  const int q = 128 * tp;
  m.V = (m.V + q - 1) / q * q;
  return m;
}

std::string str(const json& in, const char* key) {
  if (!in.contains(key) || !in[key].is_string()) throw InputError(std::string("claims: input '") + key + "' missing or not a string");
  return in[key].get<std::string>();
}
// The entry's "seq", which the model's positions bound. Errors: InputError naming it.
double seq_within(const json& in, const GptConfig& m) {
  const double seq = num(in, "seq");
  if (seq > m.T) throw InputError(fmt("claims: input 'seq' (%g) exceeds the model's %d positions", seq, m.T));
  return seq;
}
bool within(double value, double claimed, double tol) { return std::abs(value - claimed) <= tol * std::abs(claimed); }

// dtbench's trainer keeps layer_activation_floats per layer and micro-batch plus the
// embedding output and the head (memory_model.cc); bytes at `bytes_per` B a float.
double activation_bytes(const GptConfig& m, int batch, int seq, Recompute r, double bytes_per) {
  PlanConfig c;
  c.model = m;
  c.micro_batch_size = batch;
  c.seq_len = seq;
  c.recompute = r;
  return bytes_per * double(activation_set_floats(c, 0));  // pp 1: virtual stage 0 is the last
}

}  // namespace

// ---- the evaluators: (entry inputs, tolerance, measurements) -> the row ----

// Claims 1 and 2: model states and activations of a P-parameter model "in fp32 with Adam".
void model_states(const json& in, double tol, const Measured&, ClaimResult& r) {
  const GptConfig m = model_named(str(in, "model"));
  const double P = double(gpt_num_params(m));
  const StateBytesPerParam f = state_bytes_per_param(Precision::fp32), h = state_bytes_per_param(Precision::bf16);
  const double w = num(in, "weights_gb"), o = num(in, "optimizer_gb"), g = num(in, "grads_gb"), a = num(in, "activations_gb");
  const double fp32_states = f.total() * P / kGB;
  r.computed = fmt("P = %.3g: fp32 Adam weights %.1f, optimizer (m, v) %.1f, grads %.1f = %.1f GB; mixed precision "
                   "%.1f + %.1f (master + m, v) + %.1f = %.1f GB",
                   P, f.param * P / kGB, f.optimizer_state * P / kGB, f.grad * P / kGB, fp32_states,
                   h.param * P / kGB, (h.master_param + h.optimizer_state) * P / kGB, h.grad * P / kGB, h.total() * P / kGB);
  r.values = {{"params", P}, {"fp32_states_gb", fp32_states}, {"claimed_states_gb", w + o + g},
              {"claimed_total_gb", w + o + g + a}};
  // Holds when the claimed split is one recipe's, category by category, within tol.
  auto recipe = [&](const StateBytesPerParam& b) {
    return within(w * kGB / P, b.param, tol) && within(o * kGB / P, b.master_param + b.optimizer_state, tol) &&
           within(g * kGB / P, b.grad, tol);
  };
  const bool states_ok = recipe(f) || recipe(h);
  r.values["claimed_bytes_per_param"] = {{"weights", w * kGB / P}, {"optimizer", o * kGB / P}, {"grads", g * kGB / P}};
  std::string act_why;
  if (in.contains("batch")) {
    // Activations: dtbench's fp32 trainer, no recompute, at the claim's batch: what sequence
    // length gives the claimed bytes (activations grow with T and T^2; bisection on T).
    const int batch = int(num(in, "batch")), seq = int(seq_within(in, m));
    const double at_seq = activation_bytes(m, batch, seq, Recompute::none, 4) / kGB;
    const double doubled = activation_bytes(m, 2 * batch, seq, Recompute::none, 4) / kGB;
    int lo = 1, hi = seq;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (activation_bytes(m, batch, mid, Recompute::none, 4) / kGB <= a) lo = mid; else hi = mid - 1;
    }
    const double full = activation_bytes(m, batch, seq, Recompute::full, 4) / kGB;
    r.computed += fmt("; activations at batch %d x T %d: %.0f GB (batch %d: %.0f GB, x%.2f), %.0f GB with full recompute",
                      batch, seq, at_seq, 2 * batch, doubled, doubled / at_seq, full);
    r.values["activations_gb"] = at_seq;
    r.values["activations_doubled_batch_gb"] = doubled;
    r.values["activations_full_recompute_gb"] = full;
    r.values["seq_for_claimed_activations"] = lo;
    act_why = fmt("; %.0f GB of activations needs T <= %d at batch %d (T %d gives %.0f GB); doubling the batch doubles "
                  "them (x%.2f)", a, lo, batch, seq, at_seq, doubled / at_seq);
  } else {
    act_why = fmt("; %.0f GB of activations depends on batch and sequence, which the claim does not give", a);
  }
  r.verdict = states_ok ? "holds" : "differs";
  r.why = states_ok ? fmt("the split is one recipe's: model states %.0f GB", fp32_states)
                    : fmt("the split, %.1f + %.1f + %.1f B/param, is no recipe's (fp32 4 + 8 + 4, mixed precision 2 + 12 "
                          "+ 2: the weight copy exists only beside 2 B weights): model states are 16 B/param = %.0f GB "
                          "either way, not %.0f",
                          w * kGB / P, o * kGB / P, g * kGB / P, fp32_states, w + o + g);
  r.why += act_why;
  if (in.contains("gpu_gb"))
    r.why += fmt("; over a %.0f GB GPU either way (model states alone %.1fx)", num(in, "gpu_gb"), fp32_states / num(in, "gpu_gb"));
}

// Claim 3: optimizer state = 3x the weights, the largest share.
void optimizer_ratio(const json& in, double tol, const Measured&, ClaimResult& r) {
  const double claimed = num(in, "ratio");
  const StateBytesPerParam f = state_bytes_per_param(Precision::fp32), h = state_bytes_per_param(Precision::bf16);
  const double rf = f.optimizer_state / f.param, rh = (h.master_param + h.optimizer_state) / h.param;
  r.computed = fmt("optimizer / weights: fp32 Adam %.0f/%.0f = %.0fx; mixed precision (master + m, v) %.0f/%.0f = %.0fx",
                   f.optimizer_state, f.param, rf, h.master_param + h.optimizer_state, h.param, rh);
  r.values = {{"fp32_ratio", rf}, {"mixed_ratio", rh}, {"claimed", claimed}};
  const bool ok = within(rf, claimed, tol) || within(rh, claimed, tol);
  r.verdict = ok ? "holds" : "differs";
  r.why = fmt("%gx %s: Adam keeps 2x the weights in fp32 (m and v) and 6x in mixed precision (a 4 B master copy "
              "beside them, kept because the weights are 2 B); a ratio between the two counts a master copy beside "
              "fp32 weights, which no recipe keeps. The largest model state in both, but activations can exceed it "
              "(claim 1's batch 32)",
              claimed, ok ? "is one of these within the tolerance" : "is neither");
}

// Claim 4: DP keeps per-GPU memory; all-reduce of P fp32 gradients on n GPUs under t.
void dp_allreduce(const json& in, double tol, const Measured& ms, ClaimResult& r) {
  const GptConfig m = model_named(str(in, "model"));
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
  const std::string what = str(in, "what");
  r.verdict = "cannot measure here";
  r.measured = "needs " + str(in, "needs");
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

// Claim 7: the share of the weights one GPU holds under TP x PP (x DP).
void weight_share(const json& in, double tol, const Measured&, ClaimResult& r) {
  PlanConfig c;
  c.layout.tp = int(num(in, field_key(LayoutKey::tp)));
  c.model = padded_for_tp(model_named(str(in, "model")), c.layout.tp);
  c.layout.pp = int(num(in, field_key(LayoutKey::pp)));
  c.layout.dp = int(num(in, field_key(LayoutKey::dp)));
  c.layout.micro_batches = std::max(1, c.layout.pp);
  c.seq_len = 0;
  const double P = double(gpt_num_params(c.model)), claimed = num(in, "share");
  double most = 0, least = 1e300;
  for (const RankPlan& s : plan_stages(c)) most = std::max(most, double(s.N)), least = std::min(least, double(s.N));
  r.computed = fmt("of %.3g params a rank holds %.3f (busiest stage) to %.3f (lightest); 1/(tp pp) = %.3f", P, most / P,
                   least / P, 1.0 / (c.layout.tp * c.layout.pp));
  r.values = {{"share_busiest", most / P}, {"share_lightest", least / P}, {"claimed", claimed}};
  const bool ok = within(most / P, claimed, tol) && within(least / P, claimed, tol);
  r.verdict = ok ? "holds" : "holds only if";
  const double emb = double(c.model.V) * c.model.C / P;
  r.why = fmt("%s for the transformer blocks (1/(tp pp) each); the tied embedding (%.1f%% of the parameters) is held by "
              "both end stages, 1/tp of it each, and DP divides nothing without ZeRO-3",
              ok ? "within the tolerance; exact" : "exact", 100 * emb);
}

// Claim 8: ZeRO stage 1 saves ~4x, stage 2 ~8x.
void zero_savings(const json& in, double tol, const Measured&, ClaimResult& r) {
  const double s1c = num(in, "stage1"), s2c = num(in, "stage2");
  const int dp_small = int(num(in, field_key(LayoutKey::dp)));
  auto saving = [](int stage, int dp, Precision p) {
    return zero_model_states(1.0, p, 0, dp).total(Tier::device) / zero_model_states(1.0, p, stage, dp).total(Tier::device);
  };
  int dp_need = 1;
  while (dp_need < 1 << 20 && !(within(saving(1, dp_need, Precision::bf16), s1c, tol) &&
                                within(saving(2, dp_need, Precision::bf16), s2c, tol)))
    dp_need *= 2;
  r.computed = fmt("model states, mixed precision: DP %d stage 1 %.1fx, stage 2 %.1fx; DP %d %.1fx and %.1fx; "
                   "limits 16/4 = 4x and 16/2 = 8x; fp32 at DP %d: %.1fx and %.1fx",
                   dp_small, saving(1, dp_small, Precision::bf16), saving(2, dp_small, Precision::bf16), dp_need,
                   saving(1, dp_need, Precision::bf16), saving(2, dp_need, Precision::bf16), dp_small,
                   saving(1, dp_small, Precision::fp32), saving(2, dp_small, Precision::fp32));
  r.values = {{field_key(LayoutKey::dp), dp_small}, {"stage1_saving", saving(1, dp_small, Precision::bf16)},
              {"stage2_saving", saving(2, dp_small, Precision::bf16)}, {"dp_needed", dp_need}};
  r.verdict = "holds only if";
  r.why = fmt("model states only, mixed precision, and DP >= %d (the ZeRO paper's 4x and 8x are limits as DP grows); "
              "activations are not divided at all",
              dp_need);
}

// Claim 9: optimizer offload: per-GPU memory from a to b GB, ~30%% slower.
void offload(const json& in, double, const Measured&, ClaimResult& r) {
  const double before = num(in, "before_gb"), after = num(in, "after_gb");
  const StateBytesPerParam h = state_bytes_per_param(Precision::bf16);
  const double moved = h.master_param + h.optimizer_state;  // B/param leaving the GPU
  const double P = (before - after) * kGB / moved;
  const double rest = after - (h.param + h.grad) * P / kGB;
  r.computed = fmt("offload moves the fp32 master and m, v (%.0f B/param) to the host: %.0f GB less means %.2g params, "
                   "leaving %.1f GB of weights and grads and %.1f GB of activations and buffers on the GPU",
                   moved, before - after, P, (h.param + h.grad) * P / kGB, rest);
  r.values = {{"params_implied", P}, {"other_gb", rest}};
  r.measured = "speed: not measured (needs a GPU and its PCIe link; the offload suite times the CPU copy path only)";
  r.verdict = "holds only if";
  r.why = fmt("a %.2gB-parameter mixed-precision model with ~%.0f GB of activations; the speed cost follows the host "
              "link's bandwidth against the step time, not a constant 30%%",
              P / 1e9, rest);
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

// Claim 11: per-GPU memory of a 3B model on TP x PP x DP with ZeRO.
void per_gpu(const json& in, double tol, const Measured&, ClaimResult& r) {
  const int tp = int(num(in, field_key(LayoutKey::tp))), pp = int(num(in, field_key(LayoutKey::pp)));
  const int dp = int(num(in, field_key(LayoutKey::dp)));
  const GptConfig m = padded_for_tp(model_named(str(in, "model")), tp);
  const double P = double(gpt_num_params(m)), share = P / (tp * pp);
  const double w = num(in, "weights_gb"), o = num(in, "optimizer_gb"), a = num(in, "activations_gb"),
               g = num(in, "grads_gb");
  PlanConfig c;
  c.model = m;
  c.layout.tp = tp, c.layout.pp = pp, c.layout.dp = dp;
  c.layout.micro_batches = int(num(in, "micro_batches"));
  c.zero.stage = int(num(in, field_key(LayoutKey::zero_stage)));
  c.precision = Precision::bf16;
  c.recompute = Recompute::full;
  c.micro_batch_size = int(num(in, "micro_batch_size"));
  const RankPlan plan = plan_busiest_rank(c);
  auto gb = [&](MemCategory k) { return double(plan.mem.get(Tier::device, k)) / kGB; };
  const double pw = gb(MemCategory::param), pg = gb(MemCategory::grad),
               po = gb(MemCategory::master_param) + gb(MemCategory::optimizer_state), pa = gb(MemCategory::activation);
  r.computed = fmt("P/(tp pp) = %.3g params: the claim's %.1f + %.1f + %.1f GB are 4 + 12 + 4 B of them, unsharded; "
                   "dtbench's plan (bf16, ZeRO-%d over DP %d, full recompute, %d x %d tokens per micro-batch): weights "
                   "%.2f, optimizer %.2f, grads %.2f, activations %.2f, total on device %.2f GB",
                   share, w, o, g, c.zero.stage, dp, c.micro_batch_size, c.tokens(), pw, po, pg, pa,
                   double(plan.device_total()) / kGB);
  r.values = {{"params_per_gpu", share}, {"plan_weights_gb", pw}, {"plan_optimizer_gb", po}, {"plan_grads_gb", pg},
              {"plan_activations_gb", pa}, {"plan_total_gb", double(plan.device_total()) / kGB},
              {"claimed_total_gb", w + o + g + a}};
  const bool ok = within(double(plan.device_total()) / kGB, w + o + g + a, tol);
  r.verdict = ok ? "holds" : "differs";
  r.why = fmt("the figures mix fp32 weights and grads with a mixed-precision optimizer and apply no ZeRO: with ZeRO-%d "
              "the optimizer is %.2f GB, not %.1f",
              c.zero.stage, po, o);
}

// Claim 12: activation checkpointing halves activations for 33% more compute.
void recompute(const json& in, double tol, const Measured& ms, ClaimResult& r) {
  const GptConfig m = model_named(str(in, "model"));
  const int seq = int(seq_within(in, m));
  const double saving_claim = num(in, "saving"), extra_claim = num(in, "extra_compute");
  PlanConfig c;
  c.model = m;
  c.seq_len = seq;
  auto layer = [&](Recompute k) { c.recompute = k; return double(layer_activation_floats(c)); };
  const double none = layer(Recompute::none), sel = layer(Recompute::selective), full = layer(Recompute::full);
  // Extra forward work of a training step (forward + backward = 3 forwards): full repeats
  // the layers' forward (1/3 without the head); selective only attention's products.
  const double C = m.C, L = m.L, V = m.V, core = 4.0 * seq * C, layers = L * (24.0 * C * C + core),
               step = 3.0 * (layers + 2.0 * C * V);
  const double full_extra = layers / step, sel_extra = L * core / step;
  r.computed = fmt("per layer, T %d: full recompute keeps %.1f%% of the activations (saves %.1f%%) for +%.0f%% "
                   "compute; selective keeps %.1f%% (saves %.1f%%) for +%.1f%%",
                   seq, 100 * full / none, 100 * (1 - full / none), 100 * full_extra, 100 * sel / none,
                   100 * (1 - sel / none), 100 * sel_extra);
  r.values = {{"full_saving", 1 - full / none}, {"full_extra_compute", full_extra}, {"selective_saving", 1 - sel / none},
              {"selective_extra_compute", sel_extra}};
  if (!ms.recompute.empty()) {
    std::string s;
    for (const json& b : ms.recompute)
      s += fmt("%s%s: %.0f%% saved, %+.0f%% time", s.empty() ? "" : "; ", b.value("recompute", "?").c_str(),
               100 * b["activation_saving"].get<double>(), 100 * b["overhead"].get<double>());
    r.measured = "recompute suite: " + s;
  } else {
    r.measured = ms.have ? "not measured: the report has no recompute records" : kNoReport;
  }
  const bool full_ok = within(1 - full / none, saving_claim, tol) && within(full_extra, extra_claim, tol);
  const bool sel_ok = within(1 - sel / none, saving_claim, tol) && within(sel_extra, extra_claim, tol);
  r.verdict = full_ok || sel_ok ? "holds" : "holds only if";
  r.why = fmt("the two halves describe different methods: +%.0f%% compute is full recompute, which saves %.0f%% (not "
              "half); halving is selective recompute at this T (attention's T^2 scores are %.0f%% of a layer), which "
              "costs +%.1f%%",
              100 * full_extra, 100 * (1 - full / none), 100 * (1 - sel / none), 100 * sel_extra);
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

// Claim 17: an MoE's memory against its active parameters (the article [docs/claims.md#the-article], 6.2). dtbench's moe-6b shape
// has the claim's counts; its model states come from dtbench memory's MoE accounting.
void moe_memory(const json& in, double tol, const Measured&, ClaimResult& r) {
  const GptConfig m = model_named(str(in, "model"));
  const double total = double(gpt_num_params(m)), active = double(gpt_active_params(m));
  const double claimed = num(in, "memory_ratio"), E = m.moe.num_experts, k = m.moe.topk;
  if (E < 1) throw InputError("claims: input 'model' " + str(in, "model") + " is dense: the claim is of an MoE model (moe-6b)");
  MemoryArgs a;
  a.precision = "bf16";
  auto states = [&](int ep) {  // device model states per rank at DP = EP = ep
    a.dp = a.ep = ep;
    return moe_plan_json(m, "moe", a, json::array())["per_rank_bytes"]["total"].get<double>();
  };
  const double one = states(1), spread = states(int(E / k));
  r.computed = fmt("%.3g parameters, %.3g active (%.2fx); mixed-precision Adam, 16 B/param: %.0f GB of model states "
                   "on one rank (all %g experts stored), %.0f GB per rank at expert parallel %g (E/k), %.0f GB for a "
                   "dense model of %.3g",
                   total, active, total / active, one / kGB, E, spread / kGB, E / k, 16 * active / kGB, active);
  r.values = {{"params", total}, {"active_params", active}, {"states_one_rank_gb", one / kGB},
              {"states_ep_gb", spread / kGB}, {"memory_ratio_one_rank", 16 * total / one},
              {"flops_ratio", total / active}};
  const bool counts = within(total / active, claimed, tol);
  r.verdict = counts ? "holds only if" : "differs";
  r.why = counts ? fmt("compute per token is %.1fx less, memory is not: every expert's weights, gradients and Adam state "
                       "are kept, %.0f GB; %.1fx less per GPU only when %g-way expert parallelism spreads the experts",
                       total / active, one / kGB, one / spread, E / k)
                 : fmt("the counts give %.2fx, not %.2fx", total / active, claimed);
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
