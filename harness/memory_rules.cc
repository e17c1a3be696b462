// `dtbench memory`'s rules of thumb against the exact plan (memory_rules.h).
#include "harness/memory_rules.h"

#include <algorithm>
#include <cmath>

#include "harness/cli_text.h"
#include "harness/memory_cli.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

using nlohmann::json;
using cli::fmt;

namespace {
constexpr double kGiB = 1073741824.0;
}  // namespace

json memory_rule(const std::string& rule, const std::string& plan, bool holds) {
  return {{"rule", rule}, {"plan", plan}, {"holds", holds}};
}

// The rules of thumb, each held against the exact plan c of `stages` (b its busiest stage):
// 16 B/param of model state, optimizer state 3x the weights, params / (TP x PP) a rank,
// Korthikanti's activations per layer (kor bytes, ours_layer ours), Megatron's weight +
// optimizer bytes (meg), the schedule's activation sets; each a memory_rule() record.
json memory_rules_of_thumb(const PlanConfig& c, const std::vector<RankPlan>& stages, const RankPlan& b, double ours_layer,
                           double kor, double meg) {
  const GptConfig& m = c.model;
  const uint64_t total = gpt_num_params(m);
  const ParallelLayout& l = c.layout;
  json rules = json::array();
  const StateBytesPerParam k = state_bytes_per_param(c.precision);
  const double N = double(b.N);
  const double states = double(b.mem.model_states(Tier::device) + b.mem.model_states(Tier::host));
  // ZeRO shards over the DP group, or with context parallelism the dp cp ranks of the data-and-context group.
  const int zero_ranks = l.dp * l.cp;
  const MemoryBytes<double> paper_states =
      zero_model_states(N, c.precision, c.zero.stage, zero_ranks, offload_of(c.zero));
  const double paper = paper_states.total(Tier::device) + paper_states.total(Tier::host);
  const bool fp32 = c.precision == Precision::fp32;
  std::string zero_note;
  if (c.zero.stage > 0)
    zero_note = fmt(" (ZeRO-%d over %s %d: the paper's %.3f%s)", c.zero.stage,
                    (std::string(spelling(LayoutKey::dp).spec_token) +
                     (l.cp > 1 ? std::string(" x ") + spelling(LayoutKey::cp).spec_token : std::string()))
                        .c_str(),
                    zero_ranks, paper / N,
                    std::abs(states - paper) < 0.5 ? "" : "; the rest is the padding of the shards");
  rules.push_back(memory_rule(
      "16 B/param of model state",
      fmt("%s; this plan: %.3f B per held parameter over the %s held by stage %d%s",
          fp32 ? "fp32 Adam: 4 param + 4 grad + 8 Adam m, v = 16, with no separate master copy (AdamW updates the "
                 "fp32 weights themselves)"
               : "mixed precision: 2 param + 2 grad + 4 fp32 master + 8 Adam m, v = 16",
          states / N, commas(b.N).c_str(), b.pp_rank, zero_note.c_str()),
      std::abs(states / N - 16) < 0.005));
  const double opt_ratio = (k.master_param + k.optimizer_state) / 4.0;
  rules.push_back(memory_rule(
      "optimizer state = 3x the weights",
      fp32 ? fmt("only with a separate fp32 master copy (mixed precision: 4 master + 8 Adam = 3x 4-byte weights); fp32 "
                 "Adam keeps m and v only: %.0fx the weights",
                 opt_ratio)
           : fmt("mixed precision: 4 fp32 master + 8 Adam = %.0fx the fp32 weights (%.0fx the 16-bit ones held)", opt_ratio,
                 (k.master_param + k.optimizer_state) / k.param),
      !fp32));
  const double even = double(total) / (l.tp * l.pp);
  rules.push_back(memory_rule(
      "each rank holds params / (TP x PP)",
      fmt("%s / %d = %s; stage %d holds %s (%+.1f%%)%s", commas(total).c_str(), l.tp * l.pp,
          commas(uint64_t(std::llround(even))).c_str(), b.pp_rank, commas(b.N).c_str(), 100 * (N / even - 1),
          l.tp * l.pp == 1 ? ""
          : is_llama(m)    ? ": the embedding sits on the first stage and the untied head on the last, RMSNorm "
                             "weights are replicated over TP, and a KV head is held by every rank whose query heads "
                             "read it when TP exceeds the KV heads"
                           : ": the tied embedding sits on the first and the last stage, wpe on the first, and "
                             "LayerNorms and row-parallel biases are replicated over TP"),
      std::abs(N / even - 1) < 0.01));
  if (kor > 0)  // the GPT block's formulas (model_plan's gpt_formulas)
  rules.push_back(memory_rule(
      l.sequence_parallel
          ? "activations per layer s b h (34/t + 5 a s/(h t)) bytes (Korthikanti et al. 2022 eq. 4: TP t with sequence "
            "parallelism, 16-bit)"
          : "activations per layer s b h (34 + 5 a s / h) bytes (Korthikanti et al. 2022, 16-bit; TP: 10 + 24/t + 5as/(ht))",
      fmt("%.3f GiB per layer and micro-batch here vs %.3f GiB by the formula (x%.2f): the reference GPT keeps %s "
          "activations, both LayerNorm outputs and %s, and has no dropout",
          ours_layer / kGiB, kor / kGiB, ours_layer / kor, fp32 ? "fp32" : "16-bit",
          c.attention == AttentionKernel::fused ? "the fused attention's log-sum-exp (no softmax output)"
                                                : "the softmax output"),
      std::abs(ours_layer / kor - 1) < 0.05));
  const double first_states = double(stages[0].mem.model_states(Tier::device) + stages[0].mem.model_states(Tier::host));
  if (meg > 0)
  rules.push_back(memory_rule(
      "Megatron-LM theoretical weight + optimizer: 18 B/param (6 + 12/DP distributed), bf16 with fp32 main grads",
      fmt("%.2f GiB for stage 0 vs %.2f GiB here: Megatron adds fp32 main gradients, omits biases and wpe", meg / kGiB,
          first_states / kGiB),
      std::abs(meg / first_states - 1) < 0.05));
  const std::string sched = l.schedule;
  const int want_sets = sched == "gpipe" ? l.micro_batches : std::min(l.pp, l.micro_batches);
  if (sched != "interleaved")
    rules.push_back(memory_rule(
        sched == "gpipe" ? "GPipe holds all m micro-batches' activations" : "1F1B holds at most p micro-batches' activations",
        fmt("stage 0 holds %d activation sets (m %d, p %d)", stages[0].activation_sets[0], l.micro_batches, l.pp),
        stages[0].activation_sets[0] == want_sets));

  return rules;
}

}  // namespace dtb
