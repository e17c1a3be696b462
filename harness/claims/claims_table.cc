// The evaluators of `dtbench claims` by name, each with the inputs it reads and what each may
// hold (harness/claims/claims_evaluators.h). Adding an evaluator: its function, then one entry here.
#include <cmath>
#include <cstdio>
#include <string>

#include "harness/claims/claims_evaluators.h"
#include "reference/layout/layout_spec.h"

namespace dtb::claims_impl {

namespace {

constexpr double kMaxReal = 1e30;     // a figure's ceiling: no claim's quantity comes near it
constexpr double kMaxRanks = 1 << 20;  // GPUs, DP, TP and PP degrees (the planner's bound)
constexpr double kMaxSteps = 1 << 16;  // micro-batches, micro-batch sizes (the planner's bound)
constexpr double kMaxStages = 1024;    // pipeline stages (a schedule is simulated per stage)
constexpr double kMaxSeq = 1 << 20;    // tokens per sequence (also at most the model's T)

InputSpec text() { return {InputSpec::Type::text}; }
InputSpec one_of(std::vector<std::string> v) { return {InputSpec::Type::text, 0, 0, false, std::move(v)}; }
InputSpec positive(double hi = kMaxReal) { return {InputSpec::Type::number, 0, hi, true}; }
InputSpec between(double lo, double hi) { return {InputSpec::Type::number, lo, hi}; }
InputSpec count(double lo, double hi) { return {InputSpec::Type::integer, lo, hi}; }
// A pipeline bubble's share of the step: 0.1 % to 99.9 % (0 would ask for infinitely many micro-batches).
InputSpec bubble_share() { return between(1e-3, 0.999); }

}  // namespace

std::string InputSpec::check(const nlohmann::json& v) const {
  if (type == Type::text) {
    if (!v.is_string()) return "a string";
    if (values.empty()) return "";
    for (const std::string& x : values)
      if (v.get<std::string>() == x) return "";
    std::string list;
    for (const std::string& x : values) list += (list.empty() ? "" : ", ") + x;
    return "one of " + list;
  }
  char range[96];
  std::snprintf(range, sizeof range, type == Type::integer ? "%s%.0f, %.0f]" : "%s%g, %g]", open_lo ? "(" : "[", lo,
                hi);
  if (type == Type::integer) {
    if (!v.is_number_integer() || double(v.get<int64_t>()) < lo || double(v.get<int64_t>()) > hi)
      return std::string("an integer in ") + range;
    return "";
  }
  const double x = v.is_number() ? v.get<double>() : NAN;
  if (!std::isfinite(x) || (open_lo ? x <= lo : x < lo) || x > hi) return std::string("a number in ") + range;
  return "";
}

const std::map<std::string, EvaluatorEntry>& evaluators() {
  // The layout's inputs, named as a record's fields.
  const std::string tp = field_key(LayoutKey::tp), pp = field_key(LayoutKey::pp), dp = field_key(LayoutKey::dp);
  const std::string zero_stage = field_key(LayoutKey::zero_stage);
  static const std::map<std::string, EvaluatorEntry> table = {
      {"model_states",
       {model_states,
        {{"model", text()}, {"weights_gb", positive()}, {"optimizer_gb", positive()}, {"grads_gb", positive()},
         {"activations_gb", positive()}, {"batch", count(1, kMaxSteps)}, {"seq", count(1, kMaxSeq)},
         {"gpu_gb", positive()}}}},
      {"optimizer_ratio", {optimizer_ratio, {{"ratio", positive()}}}},
      // layout-key-literal: the name of a claim's evaluator (claims.json), not the layout key
      {"dp_allreduce",
       {dp_allreduce,
        {{"model", text()}, {"gpus", count(2, kMaxRanks)}, {"time_s", positive()}, {"busbw_GBps", positive()},
         {"internode_busbw_GBps", positive()}}}},
      {"bubble", {bubble, {{"bubble", bubble_share()}, {"stages", count(2, kMaxStages)}, {"kind", one_of({"depth"})}}}},
      {"gpu_only",
       {gpu_only,
        {{"what", one_of({"ffn_tp", "mixed_precision"})}, {"needs", text()}, {"time_1_ms", positive()},
         {"time_n_ms", positive()}, {tp, count(2, kMaxRanks)}, {"fp32_tflops", positive()},
         {"tf32_tflops", positive()}, {"bf16_tflops", positive()}, {"speedup", positive()}}}},
      {"weight_share",
       {weight_share,
        {{"model", text()}, {tp, count(1, kMaxRanks)}, {pp, count(1, kMaxStages)}, {dp, count(1, kMaxRanks)},
         {"share", between(0, 1)}}}},
      {"zero_savings",
       {zero_savings, {{dp, count(1, kMaxRanks)}, {"stage1", positive()}, {"stage2", positive()}}}},
      {"offload", {offload, {{"before_gb", positive()}, {"after_gb", positive()}}}},
      {"overlap", {overlap, {{"gain_low", between(0, 1)}, {"gain_high", between(0, 1)}}}},
      {"per_gpu",
       {per_gpu,
        {{"model", text()}, {tp, count(1, kMaxRanks)}, {pp, count(1, kMaxStages)}, {dp, count(1, kMaxRanks)},
         {"weights_gb", positive()}, {"optimizer_gb", positive()}, {"activations_gb", positive()},
         {"grads_gb", positive()}, {"micro_batches", count(1, kMaxSteps)}, {zero_stage, count(0, kMaxZeroStage)},
         {"micro_batch_size", count(1, kMaxSteps)}}}},
      {"recompute",
       {recompute,
        {{"model", text()}, {"seq", count(1, kMaxSeq)}, {"saving", between(0, 1)},
         {"extra_compute", positive(10)}}}},
      {"fp16_comm", {fp16_comm, {{"bytes_fp32", positive()}, {"bytes_fp16", positive()}}}},
      {"energy",
       {energy,
        {{"megawatts", positive()}, {"days", positive()}, {"usd_per_kwh", positive()}, {"usd", positive()},
         {"gpus", positive()}, {"gpu_tdp_w", positive()}, {"gpu_peak_tflops", positive()}, {"params", positive()},
         {"tokens", positive()}}}},
      {"moe_memory", {moe_memory, {{"model", text()}, {"memory_ratio", positive()}}}},
      {"zero_bubble",
       {zero_bubble,
        {{"stages", count(2, kMaxStages)}, {"micro_batches", count(1, kMaxSteps)}, {"ratio", positive()}}}},
      {"checkpoint_interval", {checkpoint_interval, {{"mtbf_hours", positive()}, {"interval_hours", positive()}}}},
      {"stale_gradients", {stale_gradients, {{"gain", positive()}}}},
      {"parallelism_speedup",
       {parallelism_speedup,
        {{"model", text()}, {"hardware", text()}, {"gpus", count(1, kMaxRanks)}, {"speedup", positive()},
         {"layout", text()}}}},
      {"bubble_at_scale",
       {bubble_at_scale,
        {{"bubble", bubble_share()}, {"stages", count(2, kMaxStages)}, {"kind", one_of({"depth"})},
         {"model", text()}, {"hardware", text()}, {"gpus", count(1, kMaxRanks)}, {tp, count(1, kMaxRanks)}}}}};
  return table;
}

}  // namespace dtb::claims_impl
