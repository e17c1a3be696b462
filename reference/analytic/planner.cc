// The layout planner (reference/analytic/planner.h): enumeration, memory, time, ranking.
#include "reference/analytic/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/error.h"
#include "reference/analytic/plan_schedules.h"
#include "reference/layout/layout_spec.h"

namespace dtb {
namespace {

std::string gib_text(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / 1073741824.0);
  return b;
}

// The fixed dimensions of a request, as given: "--tp 8 x --dp 2" ("" when none; 0: not fixed).
std::string pinned_text(int tp, int pp, int dp) {
  std::string s;
  for (auto [k, v] : {std::pair{LayoutKey::tp, tp}, std::pair{LayoutKey::pp, pp}, std::pair{LayoutKey::dp, dp}})
    if (v > 0) s += (s.empty() ? "" : " x ") + std::string(spelling(k).memory_flag) + " " + std::to_string(v);
  return s;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// One layout's candidates (ZeRO x recompute x sequence parallelism x schedule), each checked and
// priced. A schedule other than 1F1B is tried only where 1F1B's candidate fits: interleaving holds
// more activations than 1F1B (Narayanan et al. 2021 Sec. 2.2.2) and ZB-H1 as many (Qi et al. 2024
// Sec. 3.1), so where 1F1B runs out of memory they do too (the plan's pruning, not counted).
void add_layout(const PlanRequest& r, const PlannerHardware& hw, int tp, int cp, int pp, int dp,
                const std::vector<int>& split, std::vector<PlanCandidate>& out) {
  const int64_t per_mb = int64_t(dp) * r.micro_batch_size;
  const bool divides = r.global_batch % per_mb == 0;
  const int m = divides ? int(r.global_batch / per_mb) : 1;
  const double model_flops = model_flops_per_token(r.model, r.tokens());
  GptConfig padded = r.model;
  padded.V = padded_vocab(r.model.V, tp);
  for (int z = 0; z <= 3; ++z) {
    if (z >= 1 && dp * cp == 1) continue;  // nothing to shard over (ZeRO shards over the dp cp ranks)
    if (r.zero_stage >= 0 && z != r.zero_stage) continue;
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
      for (bool sp : {false, true}) {
        bool fits = true;  // 1F1B's candidate (the first schedule) fits
        for (const ScheduleChoice& sc : plan_schedule_choices(r.model.L, r.only_1f1b ? 1 : pp, m, rc == Recompute::full)) {
          if (sp && tp == 1) continue;
          if (sc.schedule != "1f1b" && (!divides || !fits)) continue;
          PlanCandidate c;
          StepTimeInput& in = c.input;
          in.model = padded;
          in.layout.tp = tp, in.layout.cp = cp, in.layout.pp = pp, in.layout.dp = dp;
          in.layout.pipeline_layers = split;
          in.layout.sequence_parallel = sp;
          in.layout.schedule = sc.schedule;
          in.layout.virtual_stages = sc.virtual_stages;
          in.overlap = r.overlap;
          in.dropout = r.dropout;
          in.main_grad_accumulation = r.main_grad_accumulation;
          in.layout.micro_batches = m;
          in.global_batch = r.global_batch;
          in.micro_batches = m;
          in.seq_len = r.tokens();
          in.zero.stage = z;
          in.recompute = rc;
          in.precision = r.precision;
          in.attention = r.attention;
          if (!divides) {
            c.rejected_kind = "global batch not divisible by dp x micro-batch size";
            c.rejected = "global batch " + std::to_string(r.global_batch) + " is not divisible by dp " +
                         std::to_string(dp) + " x micro-batch size " + std::to_string(r.micro_batch_size);
            out.push_back(std::move(c));
            continue;
        }
        PlanConfig pc;
        pc.model = padded;
        pc.layout = in.layout;
        pc.zero = in.zero;
        pc.precision = r.precision;
        pc.recompute = rc;
        pc.seq_len = r.tokens();
        pc.micro_batch_size = r.micro_batch_size;
        pc.attention = r.attention;
        try {
          // The busiest rank's device bytes and, under context parallelism, its ring's K/V and
          // dK/dV blocks (comm_buffer, which RankPlan keeps beside mem: a lower bound of that peak).
          const RankPlan busiest = plan_busiest_rank(pc);
          c.device_bytes = double(busiest.device_total()) + double(busiest.cp_comm_buffer_bytes);
        } catch (const InputError& e) {  // a layout the reference trainer refuses (validate_plan)
          c.rejected_kind = "refused by the reference trainer";
          c.rejected = e.what();
          out.push_back(std::move(c));
          continue;
        }
        if (c.device_bytes > hw.device_memory_bytes) {
          c.rejected_kind = "out of device memory";
          fits = fits && sc.schedule != "1f1b";
          c.rejected = "needs " + gib_text(c.device_bytes) + " > " + gib_text(hw.device_memory_bytes);
          out.push_back(std::move(c));
          continue;
        }
        c.terms = predict_step(in, hw.hw);
        c.feasible = true;
        c.tokens_per_s = double(r.global_batch) * r.tokens() / c.terms.step_s;
        const double peak = hw.peak_flops[size_t(r.precision)];
        c.mfu = peak > 0 ? model_flops * c.tokens_per_s / (double(r.gpus) * peak) : 0.0;
        out.push_back(std::move(c));
        }
      }
  }
}

// What the balancer prices a layout's parts with: one micro-batch of b sequences at tp and cp, no
// recompute, no sequence parallelism.
StepTimeInput balance_input(const PlanRequest& r, int tp, int cp, int pp) {
  StepTimeInput in;
  in.model = r.model;
  in.model.V = padded_vocab(r.model.V, tp);
  in.layout.tp = tp, in.layout.cp = cp, in.layout.pp = pp, in.layout.dp = 1;
  in.global_batch = r.micro_batch_size, in.micro_batches = 1, in.seq_len = r.tokens();
  in.precision = r.precision;
  in.attention = r.attention, in.dropout = r.dropout, in.main_grad_accumulation = r.main_grad_accumulation;
  return in;
}

}  // namespace

std::string PlanCandidate::name() const {
  // 1f1b left implied and "sp" last (SpecTextForm): the names plan output has always printed.
  SpecTextForm form;
  form.schedule = DefaultSchedule::never, form.sp_last = true;
  LayoutSpec s;
  s.l = input.layout, s.z = input.zero, s.recompute = input.recompute;
  return layout_spec_text(s, form);
}

int padded_vocab(int V, int tp) {
  const int64_t q = 128LL * tp;
  return int((V + q - 1) / q * q);
}

int default_global_batch(const GptConfig& model, int seq_len, int gpus, int micro_batch_size) {
  // Brown et al. 2020, Table 2.1: (parameters of the GPT-3 model, its batch in sequences of 2048
  // tokens: 0.5M, 1M, 2M and 3.2M tokens; 1536 for 175B as Megatron-LM's GPT-3 175B example trains it).
  struct Row {
    double params, seqs;
  };
  static constexpr Row kGpt3[] = {{125e6, 256}, {1.3e9, 512}, {2.7e9, 512}, {6.7e9, 1024}, {13e9, 1024}, {175e9, 1536}};
  const double n = double(gpt_num_params(model));
  double tokens = kGpt3[0].seqs * 2048;
  for (const Row& row : kGpt3)
    if (row.params <= n * 1.02) tokens = row.seqs * 2048;  // 2 %: gpt3-175b counts 174.6e9
  const int64_t q = int64_t(gpus) * micro_batch_size;
  const int64_t seqs = std::max<int64_t>(1, std::llround(tokens / std::max(1, seq_len)));
  return int((seqs + q - 1) / q * q);
}

void validate_plan_request(const PlanRequest& r) {
  validate_gpt_config(r.model);
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError(what);
  };
  need(r.model.moe.num_experts == 0, "plan: MoE models are not modelled (the step-time model is dense only)");
  need(r.gpus >= 1, "--gpus must be >= 1, got " + std::to_string(r.gpus));
  // Sizes past these are no model anyone trains, and the plan's time grows with them (the
  // schedule simulates every micro-batch; the memory plan every layer; 12 L C^2 must fit int64).
  auto in_range = [&](const char* what, int64_t v, int64_t hi) {
    need(v >= 1 && v <= hi, std::string(what) + " must be in [1, " + std::to_string(hi) + "], got " + std::to_string(v));
  };
  in_range("--gpus", r.gpus, kMaxPlanGpus);
  in_range("--micro-batch-size", r.micro_batch_size, kMaxPlanMicroBatchSize);
  in_range("--global-batch", r.global_batch, kMaxPlanGlobalBatch);
  in_range("--layers", r.model.L, 4096);
  in_range("--hidden", r.model.C, 1 << 17);
  in_range("--vocab", r.model.V, 1 << 24);
  need(r.seq_len >= 0 && r.tokens() <= r.model.T,
       "--seq " + std::to_string(r.seq_len) + " must be in [1, " + std::to_string(r.model.T) + "] (the model's T)");
  int64_t fixed = 1;
  for (auto [k, v] : {std::pair{LayoutKey::tp, r.tp}, std::pair{LayoutKey::cp, r.cp}, std::pair{LayoutKey::pp, r.pp},
                      std::pair{LayoutKey::dp, r.dp}}) {
    if (v == 0) continue;
    // `dtbench plan` takes `dtbench memory`'s flags (--cp among them).
    const char* flag = spelling(k).memory_flag;
    need(v >= 1, std::string(flag) + " must be >= 1, got " + std::to_string(v));
    need(r.gpus % v == 0, std::string(flag) + " " + std::to_string(v) + " does not divide --gpus " + std::to_string(r.gpus));
    fixed *= v;
  }
  const std::string product = r.cp > 0 ? "--tp x --cp x --pp x --dp = " : "--tp x --pp x --dp = ";
  need(r.gpus % fixed == 0, product + std::to_string(fixed) + " does not divide --gpus " + std::to_string(r.gpus));
  if (r.tp > 0 && r.pp > 0 && r.dp > 0 && r.cp > 0)
    need(fixed == r.gpus, product + std::to_string(fixed) + " is not --gpus " + std::to_string(r.gpus));
  if (r.tp > 0 && r.pp > 0 && r.dp > 0 && r.cp == 0 && !is_llama(r.model))  // cp is 1 for GPT-2 unless fixed
    need(fixed == r.gpus, product + std::to_string(fixed) + " is not --gpus " + std::to_string(r.gpus));
  if (r.cp > 1)
    need(r.tokens() % (2 * r.cp) == 0, "--cp " + std::to_string(r.cp) + " needs 2 cp = " + std::to_string(2 * r.cp) +
                                           " to divide --seq " + std::to_string(r.tokens()) +
                                           " (each sequence is cut into 2 cp chunks)");
  if (r.zero_stage != -1) validate_zero_stage(r.zero_stage, spelling(LayoutKey::zero_stage).memory_flag);  // -1: the planner's choice
  // ZeRO shards over the DP ranks: a stage >= 1 needs a layout with dp > 1. The largest dp a
  // request leaves is N / (tp pp) at the smallest tp and pp it allows (1 where free: 1 divides
  // the heads and the layers), so dp > 1 is reachable exactly when that product is below N.
  if (r.zero_stage >= 1) {
    const std::string zero = "--zero-stage " + std::to_string(r.zero_stage) + " needs dp > 1 (ZeRO shards over the DP ranks)";
    need(r.dp != 1, zero + ", not --dp 1");
    const std::string pins = pinned_text(r.tp, r.pp, 0);
    need(int64_t(std::max(r.tp, 1)) * std::max(r.pp, 1) < r.gpus,
         zero + ": " + (pins.empty() ? "" : pins + " on ") + "--gpus " + std::to_string(r.gpus) + " leaves dp 1");
  }
}

std::string no_layout_reason(const PlanRequest& r) {
  auto n = [](int64_t v) { return std::to_string(v); };
  const std::string heads = "the model's " + n(r.model.NH) + " heads", layers = "the model's " + n(r.model.L) + " layers";
  if (r.tp > 0 && r.model.NH % r.tp != 0) return "--tp " + n(r.tp) + " does not divide " + heads;
  if (r.tp > 0 && !llama_tp_refusal(r.model, r.tp).empty()) return llama_tp_refusal(r.model, r.tp);
  if (r.pp > r.model.L) return "--pp " + n(r.pp) + " is more stages than " + layers;
  if (r.dp > 0 && r.gpus % r.dp == 0) {  // --dp fixes tp x pp = N / dp
    const int64_t k = r.gpus / r.dp;
    const std::string on = pinned_text(r.tp, 0, r.dp) + " on --gpus " + n(r.gpus) + " leaves ";
    if (r.tp > 0 && k % r.tp == 0 && k / r.tp > r.model.L)
      return on + "pp = " + n(k / r.tp) + ", more stages than " + layers;
    if (r.pp > 0 && k % r.pp == 0 && r.model.NH % (k / r.pp) != 0)
      return pinned_text(0, r.pp, r.dp) + " on --gpus " + n(r.gpus) + " leaves tp = " + n(k / r.pp) +
             ", which does not divide " + heads;
    if (r.tp == 0 && r.pp == 0)
      return on + "tp x pp = " + n(k) + ", and no tp dividing " + heads + " times a pp of at most its " + n(r.model.L) +
             " layers makes " + n(k);
  }
  return "tp must divide --gpus and the heads (" + n(r.model.NH) + "), pp --gpus / tp and be at most the layers (" +
         n(r.model.L) + ")";
}

std::vector<int> ends_light_split(int L, int pp) {
  if (pp < 1 || pp > L)
    throw InputError("pipeline split: " + std::to_string(pp) + " stages for " + std::to_string(L) +
                     " layers (each stage needs a layer)");
  if (L % pp == 0) return {};
  const int per = (L + pp - 1) / pp;
  std::vector<int> split(size_t(pp), per);
  int deficit = pp * per - L;  // < pp: at most one layer off each stage
  for (int k = 0; deficit > 0; ++k, --deficit) split[size_t(k % 2 == 0 ? k / 2 : pp - 1 - k / 2)] -= 1;
  return split;
}

std::vector<PlanCandidate> plan_layouts(const PlanRequest& r, const PlannerHardware& hw) {
  validate_plan_request(r);
  std::vector<PlanCandidate> out;
  const bool llama = is_llama(r.model);
  for (int tp : divisors(r.gpus)) {
    if (r.model.NH % tp != 0 || (r.tp > 0 && tp != r.tp)) continue;
    if (!llama_tp_refusal(r.model, tp).empty()) continue;
    for (int cp : divisors(r.gpus / tp)) {
      // Context parallelism: enumerated for the Llama family (2 cp dividing the sequence), fixed by
      // --cp for any model, else 1.
      if (r.cp > 0 ? cp != r.cp : (cp > 1 && (!llama || r.tokens() % (2 * cp) != 0))) continue;
      for (int pp : divisors(r.gpus / tp / cp)) {
        // An even split; else for Llama the first and last stages one layer lighter
        // (ends_light_split: Meta's 126 layers on 16 stages, as published), for GPT-2 the balancer's
        // split over the step-time model's per-part costs (balanced_split).
        const bool even = r.model.L % pp == 0;
        if (pp > r.model.L || (r.pp > 0 && pp != r.pp)) continue;
        const int dp = r.gpus / tp / cp / pp;
        if (r.dp > 0 && dp != r.dp) continue;
        std::vector<int> split;
        if (!even && llama) split = ends_light_split(r.model.L, pp);
        if (!even && !llama) split = balanced_split(balance_input(r, tp, cp, pp), hw.hw);
        add_layout(r, hw, tp, cp, pp, dp, split, out);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.feasible != b.feasible) return a.feasible;
    if (a.feasible) return a.terms.step_s < b.terms.step_s;
    return a.device_bytes > 0 && (b.device_bytes == 0 || a.device_bytes < b.device_bytes);
  });
  return out;
}

}  // namespace dtb
