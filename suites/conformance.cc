// The `conformance` suite: the reference GPT trained on each parallel layout — tensor,
// pipeline (GPipe, 1F1B, interleaved) and data parallel and their products — and every
// one compared with the single-rank baseline and the float64 oracle under the numerics
// contract (docs/numerics.md; tolerances in suites/oracle.cc): per-step loss, step-0 gradient and
// final parameters per tensor, and bitwise equality of every replicated copy (TP, DP, the
// tied embedding). A layout of k ranks runs on world ranks 0..k-1 while the others wait; one
// that needs more ranks than the world has is reported as skipped, not passed.
// Every layout runs in each precision of `precisions` (fp32, bf16, fp16: kernels/half.h),
// against the single-rank runs of the same precision; a half-precision layout is also held
// to a stated bound of the fp32 trajectory, and a recompute layout to bitwise equality with
// the same layout without recompute. The layouts run on the run's backend (its ops and device
// world); the oracle and the references always on the CPU.
// With FP8 recipes in `fp8` (docs/fp8.md), every layout also runs each recipe's FP8 linears over
// fp32 storage against its one-rank twin (the recipe on one rank, the same micro-batches), under
// the FP8 layout contract (fp8_twin_checks, derived in suites/oracle.cc), which needs the same
// layout's fp32 run against its fp32 twin.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "kernels/error.h"
#include "reference/layout/layout_validate.h"
#include "reference/training/dp_sync.h"
#include "reference/training/fp8_scaling.h"
#include "suites/conformance.h"
#include "suites/conformance_fp8.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace conformance {

using nlohmann::json;

// The record conformance/<text> of a layout of k ranks: its step times (the slowest rank's
// per step), settings, final loss, largest loss deviation from the oracle, its checks' worst
// fraction and failures, and the peak activation bytes per pipeline stage.
json layout_record(const std::string& text, const ParallelLayout& l, const LayoutSpec& spec, Precision prec, int k,
                   const std::vector<double>& step_s, const LayoutOutcome& out, double dloss, double worst,
                   size_t checks, int failed, const std::vector<double>& stage_peak) {
  const Summary st = summarize(step_s);
  json rec = benchmark_record("conformance/" + text, int64_t(step_s.size()), 1, st.median, st.median, "ms");
  LayoutSpec s = spec;
  s.l.tp = l.tp, s.l.dp = l.dp, s.l.pp = l.pp, s.l.schedule = l.schedule, s.l.virtual_stages = l.virtual_stages;
  s.precision = prec;
  add_layout_fields(rec, s);
  rec["ranks"] = k;
  rec["step_time_ms"] = to_json(st, 1e3);
  rec["final_loss"] = out.losses.back();
  rec["max_loss_deviation"] = dloss;
  rec["worst_check_fraction"] = worst;
  rec["checks"] = checks;
  rec["checks_failed"] = failed;
  rec["peak_activation_bytes_per_stage"] = stage_peak;
  return rec;
}

// Per step the slowest step time of the layout's k ranks (world ranks 0..k-1 ran `out`), and
// per pipeline stage the largest peak activation bytes, on rank 0 of `world`: each rank sends
// its step times, then its stage and peak. Collective over world.
LayoutTimes gather_layout_times(Communicator& world, const LayoutOutcome& out, int steps, int k, int pp) {
  const size_t per = size_t(steps) + 2;
  std::vector<double> mine(per, 0.0), all(per * world.size());
  for (int s = 0; s < steps && world.rank() < k; ++s) mine[s] = out.timings[s].step_s;
  mine[steps] = out.pp_rank;
  mine[steps + 1] = out.peak_activation_bytes;
  world.all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  LayoutTimes t{std::vector<double>(steps, 0.0), std::vector<double>(pp, 0.0)};
  for (int r = 0; r < k; ++r) {
    for (int s = 0; s < steps; ++s) t.step_s[s] = std::max(t.step_s[s], all[r * per + s]);
    const int stage = int(all[r * per + steps]);
    t.stage_peak[stage] = std::max(t.stage_peak[stage], all[r * per + steps + 1]);
  }
  return t;
}

// A layout spec's recipe as the trainer and the references take it: DiLoCo's replicas are its
// DP ranks; the other recipes do not depend on the DP size (their references are one rank's).
DpSync recipe_of(const LayoutSpec& spec) {
  DpSync d = spec.dp_sync;
  d.replicas = d.local_steps > 0 ? spec.l.dp : 1;
  return d;
}

std::string pad(const std::string& s, size_t n) { return s.size() >= n ? s : s + std::string(n - s.size(), ' '); }

}  // namespace conformance

namespace {

using namespace conformance;

// Why a layout does not run in its precision or on this backend ("" when it runs):
// validate_cp_layout's refusal (other backends have no block attention ops
// yet), or validate_arch_layout's (a Llama model where the family does not run yet).
std::string skip_reason(const LayoutSpec& spec, const GptConfig& model, const std::string& backend) {
  try {
    if (is_llama(model)) validate_arch_layout(spec, model, {.backend = backend});
    if (spec.l.cp > 1) validate_cp_layout(spec, model, backend);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The layouts the suite runs by default: TP 2 and 4; PP 2 and 4 under each schedule; the
// products of two and of three dimensions, and DP 4 under TP 2 (8 ranks: each DP rank takes a
// quarter of the batch, and gradients are summed over 4, not 8); ZeRO; recompute; sequence
// parallelism; the ZB-H1 schedule.
const std::vector<std::string> kDefaultLayouts = {
    "TP2", "TP4", "PP2:gpipe", "PP2:1f1b", "PP2:interleaved:v2", "PP4:gpipe", "PP4:1f1b", "PP4:interleaved:v2",
    "TP2xDP2", "TP2xPP2", "PP2xDP2", "TP2xPP2xDP2", "TP2xDP4",
    // ZeRO 1, 2, 3 and offload, alone and with TP 2 or PP 2 (Rajbhandari et al. 2020).
    "DP2", "DP2:zero1", "DP2:zero2", "DP2:zero3", "DP2:zero2:offload", "DP2:zero3:offload",
    "TP2xDP2:zero1", "TP2xDP2:zero2", "TP2xDP2:zero3", "TP2xDP2:zero2:offload",
    "PP2xDP2:zero1", "PP2xDP2:zero2", "PP2xDP2:zero3", "PP2xDP2:zero3:offload",
    // Activation checkpointing with TP and PP (Korthikanti et al. 2022).
    "TP2xPP2:full", "TP2xPP2:selective", "PP2:interleaved:v2:full", "DP2:zero3:full",
    // Sequence parallelism with TP (Korthikanti et al. 2022): alone, with PP, with ZeRO 1 and
    // with full recompute (bitwise the same layout without it).
    "TP2:sp", "TP2xPP2:sp", "TP2xDP2:sp:zero1", "TP2xDP2:sp:zero1:full",
    // ZB-H1 (Qi et al. 2024), bitwise its 1F1B twin: PP 2 and 4, and with TP 2.
    "PP2:zb-h1", "PP4:zb-h1", "TP2xPP2:zb-h1",
    // Uneven layer splits over the stages (stage balancing: fewer layers beside the embedding
    // and the LM head), 1F1B and ZB-H1.
    "PP2:layers5+3", "PP4:layers1+3+3+1", "PP4:zb-h1:layers1+3+3+1", "PP2:interleaved:v2:layers1+3+3+1",
    // The hierarchical DP all-reduce (kernels/comm/hierarchical_communicator.h) over nodes of 2
    // ranks: alone, with ZeRO 1, and with TP 2 inside the node (each DP group one rank per node:
    // the cross-node stage alone): the summation order changes, nothing else.
    "DP4:hier2", "DP4:zero1:hier2", "TP2xDP2:hier2",
    // Stale gradients, with DC-ASGD's delay compensation, and DiLoCo's local steps
    // (docs/comm-efficiency.md), each against the one-rank reference of its recipe.
    "DP4:stale1", "DP4:stale2", "DP4:stale1:dc", "DP4:stale2:dc", "DP4:local4",
    // Context parallelism (docs/context-parallel.md): the ring alone at CP 2 and 4, the
    // all-gather form, with TP 2 and sequence parallelism, with PP 2, with DP 2 under ZeRO 3
    // (gradients reduced and sharded over the data-and-context group), with full recompute
    // (bitwise CP2 without it). fp32 only: the block attention ops have no half version yet.
    "CP2", "CP4", "CP2:all_gather", "TP2xCP2:sp", "CP2xPP2", "CP2xDP2:zero3", "CP2:full"};

// Why a layout's recipe has no reference in precision `p` ("" when it has one): fp16 trains with
// loss scaling, which stale gradients and local steps refuse; DiLoCo's one-rank reference
// simulates R > 1 replicas in fp32 / fp64 only (the half references are one-rank layout runs).
std::string no_reference_reason(const DpSync& d, Precision p) {
  if (d.synchronous() || p == Precision::fp32) return "";
  if (p == Precision::fp16) return "fp16 needs loss scaling, which stale gradients and local steps do not support";
  if (d.local_steps > 0 && d.replicas > 1)
    return "no " + std::string(to_string(p)) + " reference: DiLoCo's " + std::to_string(d.replicas) +
           " replicas are simulated on one rank in fp32 only";
  return "";
}

// An MoE model's (conformance.model.num_experts > 0): expert parallel alone, over DP, with PP
// (1F1B and interleaved), with ZeRO 1-3, with selective and full recompute and with TP
// (docs/moe.md).
const std::vector<std::string> kDefaultMoeLayouts = {"EP2",          "EP4",          "DP4xEP2",
                                                     "DP2xEP2xPP2",  "DP2xEP2xPP2:interleaved:v2",
                                                     "DP4xEP2:zero1", "DP4xEP2:zero2", "DP4xEP2:zero3",
                                                     "EP2:selective", "DP2xEP2xPP2:full", "TP2xEP2"};

std::vector<std::string> layout_names(const json& section, const GptConfig& model) {
  std::vector<std::string> names;
  for (const auto& v : section.at("layouts")) {
    if (!v.is_string()) throw InputError("conformance.layouts: every entry must be a string, got " + v.dump());
    names.push_back(v.get<std::string>());
  }
  if (!names.empty()) return names;
  const bool moe = model.moe.num_experts > 0;
  if (!is_llama(model)) return default_conformance_layouts(moe);
  // A Llama model: the defaults (an MoE Llama's: the MoE ones) less a TP degree its KV heads or
  // FFN do not shard to (validate_arch_layout), and a dense one's DP 4 under ZeRO 3.
  for (const std::string& text : default_conformance_layouts(moe)) {
    const LayoutSpec spec = parse_layout_spec(text, "conformance.layouts");
    try {
      validate_arch_layout(spec, model, {});
      names.push_back(text);
    } catch (const InputError&) {
    }
  }
  if (!moe) names.push_back("DP4:zero3");
  return names;
}

// Bytes the busiest rank holds: the float64 oracle or a float32 reference (as train.cc
// counts them: 4 parameter copies and the whole batch's activations) plus a layout's shard.
double conformance_memory_bytes(const GptConfig& m, const TrainConfig& t) {
  const double tokens = double(t.global_batch) * t.seq_len;
  const double acts = tokens * (double(m.L) * (16.0 * m.C + double(m.NH) * t.seq_len) + 3.0 * m.V + 8.0 * m.C);
  return (4.0 * double(gpt_num_params(m)) + acts) * (8.0 + 4.0 + 4.0);
}

std::vector<Precision> precisions_from_json(const json& section) {
  std::vector<Precision> out;
  const json& list = section.at("precisions");
  if (!list.is_array() || list.empty())
    throw InputError("conformance.precisions: a non-empty list of fp32, bf16, fp16");
  for (const auto& v : list) {
    const std::string p = v.is_string() ? v.get<std::string>() : v.dump();
    if (p != "fp32" && p != "bf16" && p != "fp16")
      throw InputError("conformance.precisions: '" + printable(p, 40) + "' is not fp32, bf16 or fp16");
    if (std::find(out.begin(), out.end(), parse_precision(p)) != out.end())
      throw InputError("conformance.precisions: '" + p + "' is listed twice");
    out.push_back(parse_precision(p));
  }
  return out;
}

// The section, typed: the one parse validate() and run() use. Every layout is checked
// against its own world (a larger one than the run's is skipped, not refused).
struct Params : Layouts {
  std::vector<Precision> precisions;
  int64_t smallest = int64_t(1) << 62;  // ranks of the smallest layout
  static Params parse(const json& section, const json& config, const WorldInfo& world);
  json to_json() const {
    json s = json::array(), p = json::array();
    for (const LayoutSpec& x : specs) s.push_back(dtb::to_json(x));
    for (Precision x : precisions) p.push_back(std::string(dtb::to_string(x)));
    json f = json::array();
    for (const Fp8Settings& x : fp8) f.push_back(fp8_settings_json(x));
    return {{"model", dtb::to_json(model)}, {"train", dtb::to_json(base)}, {"precisions", p}, {"fp8", f},
            {"layouts", names}, {"specs", s}};
  }
};

Params Params::parse(const json& section, const json& config, const WorldInfo&) {
  const std::string backend = config.value("backend", "cpu");
  Params p;
  p.model = gpt_config_from_json(section.at("model"), "conformance.model");
  p.base = train_config_from_json(section, config, "conformance");
  const TrainConfig& cfg = p.base;
  p.precisions = precisions_from_json(section);
  p.fp8 = fp8_settings_list_from_json(section.at("fp8"), "conformance.fp8");
  if (cfg.seq_len > p.model.T)
    throw InputError("conformance.seq_len = " + std::to_string(cfg.seq_len) + " exceeds conformance.model.T = " +
                     std::to_string(p.model.T));
  std::vector<std::string> seen;
  for (const std::string& text : layout_names(section, p.model)) {
    const LayoutSpec spec = parse_layout_spec(text, "conformance.layouts");
    ParallelLayout l = spec.l;
    l.micro_batches = cfg.micro_batches;
    const std::string where = "conformance.layouts: '" + printable(text, 40) + "'";
    const std::string key = layout_record_name(spec);  // every setting of the layout, one spelling
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      throw InputError("conformance.layouts: '" + printable(text, 40) + "' is listed twice");
    seen.push_back(key);
    if (l.world() > (1 << 20))
      throw InputError("conformance.layouts: '" + printable(text, 40) + "' needs " + std::to_string(l.world()) +
                       " ranks, more than 2^20");
    // Every rule of the layout (reference/layout/layout_validate.h) on its own world (a larger
    // one than the run's is skipped, not refused), the DP sync recipe's in fp32 (a half
    // precision's limits: no_reference_reason in run(), validate_moe_layout below).
    LayoutSpec checked = spec;
    checked.l = l;
    checked.dp_sync = recipe_of(spec);
    // A default context-parallel layout on a backend without the block attention ops is skipped
    // when it would run (validate_cp_layout's reason), not refused: its other rules hold here.
    const bool cp_default = l.cp > 1 && section.at("layouts").empty();
    validate_layout_spec(checked, p.model,
                         {.world = int(l.world()), .global_batch = cfg.global_batch, .seq_len = cfg.seq_len,
                          .backend = cp_default ? "cpu" : backend, .recipe = cfg, .path = "conformance",
                          .where = where});
    for (Precision pr : p.precisions) {  // each precision of the layout: an MoE model's limits
      LayoutSpec in = spec;
      in.precision = pr;
      validate_moe_layout(in, p.model, backend, where);
    }
    p.smallest = std::min(p.smallest, l.world());
    p.names.push_back(text);
    p.specs.push_back(spec);
  }
  return p;
}

// The layout a layout must equal bitwise: without its recompute, or ZB-H1's 1F1B; "" for none.
// Keyed by the record name, so "TP2xPP2:zb-h1" pairs with "TP2xPP2" however the 1F1B one is
// spelled.
struct Twin {
  std::string key, check, detail;
};
Twin bitwise_twin(const LayoutSpec& s) {
  LayoutSpec t = s;
  if (s.recompute != Recompute::none) {
    t.recompute = Recompute::none;
    return {layout_record_name(t), "recompute_bitwise_vs",
            "max |difference| of losses and final parameters between recompute and none, bitwise (the "
            "recomputation runs the same ops on the same values)"};
  }
  if (s.l.schedule == "zb-h1") {
    t.l.schedule = "1f1b";
    return {layout_record_name(t), "schedule_bitwise_vs",
            "max |difference| of losses and final parameters between zb-h1 and 1f1b, bitwise (B and W run the "
            "whole backward's ops, the W's in micro-batch order)"};
  }
  return {};
}

// The runs kept for the bitwise comparisons (bitwise_twin), by record name + precision suffix:
// a layout and its twin (recompute and none, ZB-H1 and 1F1B) may run in either order, and are
// compared when the second of a pair is done.
class TwinRuns {
 public:
  // The checks "<prefix><twin check>/<the other's text>" of the layout `spec` (its precision
  // set, `suffix` that precision's, named `text`) against each of its twins in `specs` already
  // run, 0 allowed; keeps `out` when the layout has a twin.
  std::vector<Check> checks(const std::vector<LayoutSpec>& specs, const LayoutSpec& spec, const std::string& suffix,
                            const std::string& text, const std::string& prefix, const LayoutOutcome& out) {
    const std::string key = layout_record_name(spec) + suffix;
    std::vector<Twin> partners;  // (the other's key, the check)
    if (Twin t = bitwise_twin(spec); !t.key.empty()) partners.push_back({t.key + suffix, t.check, t.detail});
    for (LayoutSpec other : specs) {
      other.precision = spec.precision;
      if (Twin t = bitwise_twin(other); !t.key.empty() && t.key + suffix == key)
        partners.push_back({layout_record_name(other) + suffix, t.check, t.detail});
    }
    if (!partners.empty()) kept_[key] = {text, out.losses, out.params};
    std::vector<Check> checks;
    for (const Twin& t : partners) {
      auto it = kept_.find(t.key);
      if (it == kept_.end() || t.key == key) continue;
      double d = 0;
      for (size_t i = 0; i < out.losses.size(); ++i) d = std::max(d, std::fabs(out.losses[i] - it->second.losses[i]));
      for (size_t i = 0; i < out.params.size(); ++i) d = std::max(d, std::fabs(out.params[i] - it->second.params[i]));
      checks.push_back(make_check(prefix + t.check + "/" + it->second.text, d, 0.0, t.detail));
    }
    return checks;
  }

 private:
  struct Run {
    std::string text;
    std::vector<double> losses, params;
  };
  std::map<std::string, Run> kept_;
};

// A layout's checks against the oracle and its replicas (and, in half precision, the stated
// bounds of the fp32 trajectory, suites/oracle.h), named "<prefix>...".
std::vector<Check> layout_checks(const std::string& prefix, const ReferenceSet& refs, const GptConfig& model,
                                 double tokens_per_step, const LayoutOutcome& out, Precision prec) {
  std::vector<Check> checks = oracle_checks(prefix, refs, model, tokens_per_step, out.losses, out.grads0, out.params);
  for (Check& c : grad_norm_checks(prefix, refs, out.grad_norms)) checks.push_back(std::move(c));
  checks.push_back(make_check(prefix + "replicas_identical/grads/step:0", out.replica_grads0, 0.0,
                              "max |difference| between copies of a replicated gradient (TP, DP, tied wte), "
                              "bitwise"));
  checks.push_back(make_check(prefix + "replicas_identical/params", out.replica_params, 0.0,
                              "max |difference| between copies of a replicated parameter, bitwise"));
  if (prec != Precision::fp32)
    for (Check& c : half_vs_fp32_checks(prefix, prec, out.losses, refs.oracle.losses)) checks.push_back(std::move(c));
  return checks;
}

// The references of every recipe the layouts run in `prec` (DpSync as to_json prints it
// -> its ReferenceSet), computed in the layouts' order, each announced on rank 0; the float64
// oracle of a recipe from `oracles` when there, else run and kept there. Collective over
// ctx.world (the keys are the same on every rank).
std::map<std::string, ReferenceSet> recipe_references(const Params& p, const TrainConfig& cfg, Precision precision,
                                                      Device& cpu, const Dataset& data, SuiteContext& ctx,
                                                      std::map<std::string, Reference>& oracles) {
  std::map<std::string, ReferenceSet> refsets;
  const std::string prec(to_string(precision));
  for (const LayoutSpec& spec : p.specs) {
    const DpSync d = recipe_of(spec);
    const std::string key = to_json(d).dump();
    LayoutSpec in = spec;
    in.precision = precision;
    if (refsets.contains(key) || !no_reference_reason(d, precision).empty() || spec.l.world() > ctx.world.size() ||
        !skip_reason(in, p.model, "cpu").empty())
      continue;
    auto o = oracles.find(key);
    ReferenceSet refs =
        run_references(p.model, cpu, data, cfg, precision, d, ctx.world, o != oracles.end() ? &o->second : nullptr);
    if (o == oracles.end()) oracles[key] = refs.oracle;
    char lambda[32];
    std::snprintf(lambda, sizeof lambda, "%g", d.delay_compensation);
    const std::string recipe =
        d.synchronous() ? ""
        : d.staleness > 0
            ? " (staleness " + std::to_string(d.staleness) + (d.delay_compensation > 0 ? ", dc " + std::string(lambda) : "") + ")"
            : " (local steps " + std::to_string(d.local_steps) + ", " + std::to_string(d.replicas) + " replicas)";
    ctx.print("# " + prec + " baseline" + recipe + ": float64 oracle and " + std::to_string(refs.micro_batches.size()) +
              " single-rank " + prec + " runs; tolerance " + refs.how());
    refsets.emplace(key, std::move(refs));
  }
  return refsets;
}

// The suite's first line: the model, the batch and steps, the world's ranks.
std::string header_line(const GptConfig& model, const TrainConfig& base, int ranks) {
  const std::string kv = is_llama(model) ? " KV=" + std::to_string(kv_heads(model)) : "";
  return std::string("# conformance: ") + (is_llama(model) ? "Llama" : "GPT") + " L=" + std::to_string(model.L) +
         " C=" + std::to_string(model.C) + " NH=" + std::to_string(model.NH) + kv + " V=" + std::to_string(model.V) + ", " +
         std::to_string(gpt_num_params(model)) + " params, T=" + std::to_string(base.seq_len) + ", global batch " +
         std::to_string(base.global_batch) + " in " + std::to_string(base.micro_batches) +
         " micro-batches per DP rank, " + std::to_string(base.steps) + " steps, " + std::to_string(ranks) + " ranks";
}

class ConformanceSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "conformance"; }
  std::string description() const override {
    return "every parallel layout (TP, PP x schedules, DP and products) trained and checked against the "
           "single-rank baseline and the float64 oracle";
  }
  json defaults() const override {
    return {{"model", model_defaults(8, 64, 4, 32, 256, true)},  // MoE and Llama keys too (docs/moe.md, docs/models.md)
            {"steps", 20},
            {"global_batch", 16},
            {"micro_batches", 4},
            {"seq_len", 32},
            {"lr", 1e-3},
            {"beta1", 0.9},
            {"beta2", 0.95},
            {"eps", 1e-8},
            {"weight_decay", 0.0},
            {"layouts", json::array()},
            {"precisions", {"fp32", "bf16", "fp16"}},
            {"fp8", json::array()}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(section, config, world);
    for (const Precision prec : p.precisions)
      require_half_ops(config.value("backend", "cpu"), prec, "conformance.precisions");
    const GptConfig& model = p.model;
    const TrainConfig& cfg = p.base;
    const int64_t smallest = p.smallest;
    // A run that checks nothing must not pass: refuse it.
    if (smallest > world.size)
      throw InputError("conformance: no layout fits " + std::to_string(world.size) + " rank(s) (the smallest needs " +
                       std::to_string(smallest) + "); run it under mpirun -np 8 for every default layout");
    check_fits_in_memory(conformance_memory_bytes(model, cfg), std::min(world.ranks_per_node, 4),
                         "conformance: the model and batch", world.options);
    validate_fp8_rows(p, world.size, config.value("backend", "cpu"));
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "conformance suite needs a dataset");
    const Dataset& data = *ctx.dataset;
    Communicator& world = ctx.world;
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const GptConfig& model = p.model;
    const TrainConfig& base = p.base;
    const double tokens_per_step = double(base.global_batch) * base.seq_len;
    ctx.print(header_line(model, base, world.size()));
    // The layouts run on the backend (its device, its ops for the precision, collectives over
    // the device world); the float64 oracle and the single-rank references on a CPU device of
    // their own with the CPU's ops, whatever the backend. The tolerances are fp32's, so the
    // backend's GEMMs compute in fp32 (TF32 would round inputs to 2^-11).
    Backend* be = ctx.backend;
    if (be) be->set_matmul_precision("fp32");
    const PrecisionOps ops = precision_ops(be);
    CpuDevice cpu;
    ctx.print("# conformance: layouts on the " + (be ? be->name() : std::string("cpu")) +
              " backend, the oracle and references on the cpu");
    SuiteResult res;
    json skipped = json::array(), table = json::array();
    TwinRuns twins;
    const std::vector<std::string>& names = p.names;
    std::vector<double> oracle_losses, oracle_grad_norms;  // the synchronous recipe's (else the first's)
    double factor = 0;
    // The float64 oracle of each recipe (DpSync as to_json prints it), run once (rank 0's): the
    // same for every precision. The map's keys are the same on every rank, so that every rank
    // skips the oracle's job alike.
    std::map<std::string, Reference> oracles;
    const std::string sync_key = to_json(DpSync{}).dump();
    for (const Precision prec : p.precisions) {
      TrainConfig cfg = base;
      cfg.loss_scaler.enabled = prec == Precision::fp16;  // GradScaler defaults: 2^16, x2 per 2000 good steps
      const std::string suffix = prec == Precision::fp32 ? "" : ":" + std::string(to_string(prec));
      const std::map<std::string, ReferenceSet> refsets = recipe_references(p, cfg, prec, cpu, data, ctx, oracles);
      for (const auto& [key, refs] : refsets) {
        if (oracle_losses.empty() || key == sync_key)
          oracle_losses = refs.oracle.losses, oracle_grad_norms = refs.oracle.grad_norms;
        factor = refs.factor();
      }
      ctx.print("#  layout                       ranks  final loss   |dloss| max   worst check   checks   status   "
                "peak activations per stage (KiB)");
      for (size_t li = 0; li < names.size(); ++li) {
        const std::string& layout_text = names[li];
        const std::string text = layout_text + suffix;
        LayoutSpec spec = p.specs[li];
        spec.precision = prec;
        ParallelLayout l = spec.l;
        l.micro_batches = cfg.micro_batches;
        if (l.world() > world.size()) {
          const int64_t k = l.world();
          skipped.push_back({{"layout", text}, {"needs_ranks", k}});
          ctx.print("#  " + pad(text, 28) + " " + pad(std::to_string(k), 5) + "  skipped: needs " +
                    std::to_string(k) + " ranks, the world has " + std::to_string(world.size()));
          continue;
        }
        const DpSync sync = recipe_of(spec);
        if (const std::string why = skip_reason(spec, model, be ? be->name() : "cpu"); !why.empty()) {
          skipped.push_back({{"layout", text}, {"reason", why}});
          ctx.print("#  " + pad(text, 28) + " " + pad(std::to_string(l.world()), 5) + "  skipped: " + why);
          continue;
        }
        if (const std::string why = no_reference_reason(sync, prec); !why.empty()) {
          skipped.push_back({{"layout", text}, {"reason", why}});
          ctx.print("#  " + pad(text, 28) + " " + pad(std::to_string(l.world()), 5) + "  skipped: " + why);
          continue;
        }
        const ReferenceSet& refs = refsets.at(to_json(sync).dump());
        const int k = int(l.world());
        const int color = world.rank() < k ? 0 : 1;
        auto sub = world.split(color, world.rank(), "conformance:" + text);
        auto dev_sub = ctx.device_world ? ctx.device_world->split(color, world.rank(), "conformance:" + text) : nullptr;
        LayoutSpec run = spec;  // its recipe with DiLoCo's replicas (recipe_of), as the references take it
        run.dp_sync = sync;
        LayoutOutcome out;
        if (world.rank() < k)
          out = run_layout({.model = model, .layout = run, .train = cfg, .device = ctx.device, .ops = ops,
                            .host = *sub, .device_comm = dev_sub.get(), .data = data, .gather = true});
        world.barrier();
        const LayoutTimes times = gather_layout_times(world, out, cfg.steps, k, l.pp);
        if (world.rank() != 0) continue;
        const std::vector<double>& step_s = times.step_s;
        const std::vector<double>& stage_peak = times.stage_peak;
        std::string peaks;
        for (double b : stage_peak) {
          if (!peaks.empty()) peaks += ' ';
          peaks += std::to_string(std::lround(b / 1024));
        }

        const std::string prefix = "conformance/" + text + "/";
        std::vector<Check> checks = layout_checks(prefix, refs, model, tokens_per_step, out, prec);
        for (Check& c : twins.checks(p.specs, spec, suffix, text, prefix, out)) checks.push_back(std::move(c));
        int failed = 0;
        double worst = 0, dloss = 0;
        for (const Check& c : checks) {
          failed += c.passed ? 0 : 1;
          worst = std::max(worst, c.fraction());
        }
        for (int s = 0; s < cfg.steps; ++s) dloss = std::max(dloss, std::fabs(out.losses[s] - refs.oracle.losses[s]));
        res.benchmarks.push_back(
            layout_record(text, l, spec, prec, k, step_s, out, dloss, worst, checks.size(), failed, stage_peak));
        table.push_back({{"layout", text}, {"precision", to_string(prec)}, {"losses", out.losses},
                         {"grad_norms", out.grad_norms}});
        char line[300];
        std::snprintf(line, sizeof line, "   %-28s %5d  %10.6f   %11.3g   %11.3f   %6zu   %s   %s", text.c_str(), k,
                      out.losses.back(), dloss, worst, checks.size(), failed ? "FAILED" : "passed", peaks.c_str());
        ctx.print(line);
        for (Check& c : checks) res.checks.push_back(std::move(c));
      }
    }
    if (!p.fp8.empty()) run_fp8_rows(ctx, p, cpu, ops, res, skipped, table);
    if (world.rank() == 0) {
      res.data = {{"model", to_json(p.model)},
                  {"oracle_factor", factor},
                  {"oracle_losses", oracle_losses},
                  {"oracle_grad_norms", oracle_grad_norms},
                  {"layouts", table},
                  {"skipped", skipped}};
      ctx.print("# worst check: the largest value / tolerance over a layout's checks (<= 1 passes)");
    }
    return res;
  }

};

}  // namespace

DTB_REGISTER_SUITE("conformance", ConformanceSuite);

const std::vector<std::string>& default_conformance_layouts(bool moe) {
  return moe ? kDefaultMoeLayouts : kDefaultLayouts;
}

}  // namespace dtb
