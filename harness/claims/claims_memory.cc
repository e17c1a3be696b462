// The evaluators of `dtbench claims` (harness/claims/claims_evaluators.h) about memory: model states,
// activations, the optimizer's share, ZeRO, offload, a layout's per-GPU bytes, recompute and an
// MoE's experts, each on dtbench's memory model (reference/analytic/memory_model.h) and its verdict.
#include <algorithm>
#include <cmath>

#include "harness/claims/claims_evaluators.h"
#include "harness/memory_cli.h"
#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/layout/layout_spec.h"

namespace dtb::claims_impl {

namespace {

using nlohmann::json;

// The vocabulary padded to a multiple of 128 tp, as Megatron-LM's
// --make-vocab-size-divisible-by 128 does for tensor parallelism (GPT-2's 50257 -> 50304 at tp 1).
GptConfig padded_for_tp(GptConfig m, int tp) {
  const int q = 128 * tp;
  m.V = (m.V + q - 1) / q * q;
  return m;
}

// The entry's "seq", which the model's positions bound. Errors: InputError naming it.
double seq_within(const json& in, const GptConfig& m) {
  const double seq = num(in, "seq");
  if (seq > m.T) throw InputError(fmt("claims: input 'seq' (%g) exceeds the model's %d positions", seq, m.T));
  return seq;
}

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

// Claims 1 and 2: model states and activations of a P-parameter model "in fp32 with Adam".
void model_states(const json& in, double tol, const Measured&, ClaimResult& r) {
  const GptConfig m = model_named(string_input(in, "model"));
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

// Claim 7: the share of the weights one GPU holds under TP x PP (x DP).
void weight_share(const json& in, double tol, const Measured&, ClaimResult& r) {
  PlanConfig c;
  c.layout.tp = int(num(in, field_key(LayoutKey::tp)));
  c.model = padded_for_tp(model_named(string_input(in, "model")), c.layout.tp);
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

// Claim 11: per-GPU memory of a 3B model on TP x PP x DP with ZeRO.
void per_gpu(const json& in, double tol, const Measured&, ClaimResult& r) {
  const int tp = int(num(in, field_key(LayoutKey::tp))), pp = int(num(in, field_key(LayoutKey::pp)));
  const int dp = int(num(in, field_key(LayoutKey::dp)));
  const GptConfig m = padded_for_tp(model_named(string_input(in, "model")), tp);
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
  const GptConfig m = model_named(string_input(in, "model"));
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

// Claim 17: an MoE's memory against its active parameters (the article [docs/claims.md#the-article], 6.2). dtbench's moe-6b shape
// has the claim's counts; its model states come from dtbench memory's MoE accounting.
void moe_memory(const json& in, double tol, const Measured&, ClaimResult& r) {
  const GptConfig m = model_named(string_input(in, "model"));
  const double total = double(gpt_num_params(m)), active = double(gpt_active_params(m));
  const double claimed = num(in, "memory_ratio"), E = m.moe.num_experts, k = m.moe.topk;
  if (E < 1) throw InputError("claims: input 'model' " + string_input(in, "model") + " is dense: the claim is of an MoE model (moe-6b)");
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

}  // namespace dtb::claims_impl
