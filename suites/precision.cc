// The `precision` suite: the mixed-precision recipes (Micikevicius et al. 2018; kernels/half.h,
// reference/zero/zero.h) on one model and one data stream, with data parallelism over every rank:
//
//   fp32                       the baseline
//   bf16, fp16                 half parameters, activations and gradients, fp32 master weights
//                              and moments; fp16 with dynamic loss scaling (GradScaler)
//   bf16/fp16 + fp32 comm      the same with the DP gradient reduction widened to fp32
//                              (DeepSpeed's communication_data_type): twice the bytes, one
//                              rounding instead of one per reduction step
//   fp16 forced overflow       loss_scale_init far above what fp16 holds: the first steps'
//                              gradients overflow, every rank skips them and the scale backs off;
//                              with gradient clipping at 1.0 (without it, at one rank, this run
//                              diverged at step 25 and went on overflowing down to 2^13)
//   fp8/<recipe>               FP8 linears over bf16 (docs/fp8.md), one row per `fp8` section of
//                              precision.fp8, run once, against the bf16 run: the loss gap within
//                              fp8_vs_bf16_checks' bound (suites/oracle.h), rank 0's census of
//                              saturated and flushed values per operand class (none clamped under
//                              current, blockwise and MXFP8 scaling: checked), the delayed recipe's
//                              scales per step
//
// Per run: step time (median of the slowest rank's, after the first step, over alternating
// repetitions) and its speedup over fp32, final loss and the largest loss deviation from
// the fp32 run, bytes of DP gradient traffic, persistent model-state bytes per parameter, the
// loss-scale trajectory and skipped steps. Checks: the half runs' losses stay within the
// conformance suite's stated bounds of fp32 (suites/oracle.h half_vs_fp32_checks); the fp32-comm
// variants move exactly twice the bytes; every loss-scale trajectory is the one GradScaler's
// rule gives for its skipped steps (replayed through reference/training/loss_scaler.h), and the forced
// overflow skips at least one step and then trains; the model-state bytes are the analytic
// model's (reference/analytic/memory_model.h), exactly.
//
// On the CPU backend half storage is emulated (each op widens its inputs to fp32 and rounds
// its outputs): the numerics are the GPU recipe's, the speed is not — the conversions cost
// time and no op runs faster in half. The speedup column says what this machine gives. On
// CUDA the runs use the backend's bf16 / fp16 ops and its device world (not yet run on a GPU).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "kernels/error.h"
#include "reference/layout/layout_validate.h"
#include "reference/training/fp8_scaling.h"
#include "reference/training/loss_scaler.h"
#include "reference/analytic/memory_model.h"
#include "suites/memory_guard.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

struct Variant {
  std::string name;
  Precision precision = Precision::fp32;
  bool fp32_comm = false;
  double loss_scale_init = 0;  // 0: GradScaler's 2^16 (fp16 only)
  std::optional<Fp8Settings> fp8{};  // FP8 linears over bf16 storage
};

constexpr const char* kRoles[3] = {"input", "weight", "grad_output"};

// The FP8 rows a config gets unless it says: every recipe with Transformer Engine's defaults.
json default_fp8_rows() {
  return json::array({{{"recipe", "delayed"}}, {{"recipe", "current"}}, {{"recipe", "blockwise"}}, {{"recipe", "mxfp8"}}});
}

double model_state_bytes(const LayoutOutcome& o, Tier tier) {
  const auto& d = o.peak_bytes[int(tier)];
  return d[int(MemCategory::param)] + d[int(MemCategory::grad)] + d[int(MemCategory::master_param)] +
         d[int(MemCategory::optimizer_state)];
}

// The section, typed: the one parse validate() and run() use.
struct Params {
  TimedDpSetup t;
  int zero_stage = 0, reps = 0, growth = 0;
  double overflow_init = 0;
  std::vector<Fp8Settings> fp8;  // the FP8 rows' recipes, each an `fp8` section as the train suite's
  bool fp8_default = false;      // fp8 is the default list: a recipe the layout cannot run is left out
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    const json& f = s.at("fp8");
    p.fp8_default = f == default_fp8_rows();
    p.fp8 = fp8_settings_list_from_json(f, "precision.fp8");
    p.t = timed_dp_setup(s, config, "precision", world.size);
    p.zero_stage = zero_stage_from_json(s, "precision");
    p.reps = int(int_in_range(s, "repetitions", "precision.repetitions", 1, 100));
    p.growth = int(int_in_range(s, "loss_scale_growth_interval", "precision.loss_scale_growth_interval", 1, 1 << 30));
    p.overflow_init = number_in_range(s, "overflow_loss_scale_init", "precision.overflow_loss_scale_init", 0x1.0p17,
                                      0x1.0p127);  // above GradScaler's 2^16
    return p;
  }
  json to_json() const {
    json f = json::array();
    for (const Fp8Settings& s : fp8) f.push_back(fp8_settings_json(s));
    return {{"setup", dtb::to_json(t)}, {spelling(LayoutKey::zero_stage).config_key, zero_stage}, {"repetitions", reps},
            {"loss_scale_growth_interval", growth}, {"overflow_loss_scale_init", overflow_init}, {"fp8", f}};
  }
};

// The suite's first line: the model, DP and ZeRO, the steps and repetitions, the loss scaler.
std::string header_line(const Params& p, int ranks) {
  const TimedDpSetup& t = p.t;
  return "# precision: GPT L=" + std::to_string(t.model.L) + " C=" + std::to_string(t.model.C) + ", " +
         std::to_string(gpt_num_params(t.model)) + " params, DP " + std::to_string(ranks) + ", ZeRO " +
         std::to_string(p.zero_stage) + ", " + std::to_string(t.cfg.steps) + " steps x " + std::to_string(p.reps) +
         " repetitions alternating; fp16 loss scale from 2^16, x2 after " + std::to_string(p.growth) +
         " good steps, x0.5 and skip on inf/NaN";
}

// How far run o's loss scales are from the trajectory GradScaler's rule gives for its skipped
// steps, replayed from init_scale (0: the scaler's default) with growth_interval `growth`: the
// largest |difference|, 0 when they agree.
double loss_scale_off(const LayoutOutcome& o, int growth, double init_scale) {
  LossScalerConfig lc;
  lc.enabled = true;
  lc.growth_interval = growth;
  lc.init_scale = init_scale > 0 ? init_scale : lc.init_scale;
  LossScaler replay(lc);
  double off = 0;
  for (size_t k = 0; k < o.loss_scales.size(); ++k) {
    off = std::max(off, std::fabs(o.loss_scales[k] - replay.scale()));
    replay.update(o.skipped[k] != 0);
  }
  return off;
}

class PrecisionSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "precision"; }
  std::string description() const override {
    return "fp32 vs bf16 vs fp16 (fp32 master weights, dynamic loss scaling): step time, loss deviation, "
           "loss-scale trajectory, forced overflow, fp32 vs half gradient all-reduce";
  }
  json defaults() const override {
    return {{"model", {{"L", 4}, {"C", 128}, {"NH", 4}, {"T", 64}, {"V", 256}}},
            {"steps", 30}, {"micro_batches", 2}, {"micro_batch_size", 2}, {"seq_len", 64},
            {config_key(LayoutKey::zero_stage), 0}, {"repetitions", 2},
            {"loss_scale_growth_interval", 10}, {"overflow_loss_scale_init", 0x1.0p24},
            {"fp8", default_fp8_rows()}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    require_half_ops(config.value("backend", "cpu"), Precision::bf16, "precision");  // it runs bf16 and fp16
    const Params p = Params::parse(section, config, world);
    const TimedDpSetup& t = p.t;
    validate_layout(t.layout, t.model, t.cfg.global_batch, world.size);
    check_fits_in_memory(unsharded_training_state_bytes(t.model), world.ranks_per_node, "precision: the model", world.options);
    // The FP8 rows meet the layout rule as the train suite's FP8 runs do (on the CPU alone: run()
    // says so elsewhere); a list the config gives is refused at its first recipe the layout
    // cannot run, the default one leaves such recipes out (run() says which).
    if (config.value("backend", "cpu") != "cpu" || p.fp8_default) return;
    for (size_t i = 0; i < p.fp8.size(); ++i)
      if (const std::string why = fp8_refusal(p, i, world.size); !why.empty()) throw InputError(why);
  }

  // The first layout-rule refusal of FP8 row i on `ranks` ranks ("" when it runs), naming
  // precision.fp8[i].
  static std::string fp8_refusal(const Params& p, size_t i, int ranks) {
    const TimedDpSetup& t = p.t;
    const LayoutSpec s{.l = t.layout, .precision = Precision::bf16, .fp8 = p.fp8[i]};
    const LayoutCheckContext c{.world = ranks, .global_batch = t.cfg.global_batch, .seq_len = t.cfg.seq_len,
                               .backend = "cpu", .recipe = t.cfg, .path = "precision",
                               .where = "precision.fp8[" + std::to_string(i) + "]"};
    const std::vector<LayoutRefusal> r = layout_refusals(s, t.model, c);
    return r.empty() ? "" : r.front().message;
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "precision suite needs a dataset");
    Communicator& world = ctx.world;
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const TimedDpSetup& t = p.t;
    const int reps = p.reps, growth = p.growth;
    const double overflow_init = p.overflow_init;
    ZeroConfig zero;
    zero.stage = p.zero_stage;
    std::vector<Variant> variants = {{"fp32", Precision::fp32},
                                     {"bf16", Precision::bf16},
                                     {"bf16/comm:fp32", Precision::bf16, true},
                                     {"fp16", Precision::fp16},
                                     {"fp16/comm:fp32", Precision::fp16, true},
                                     {"fp16/forced_overflow", Precision::fp16, false, overflow_init}};
    ctx.print(header_line(p, world.size()));
    const size_t half_rows = variants.size();  // the FP8 rows follow
    const bool cpu = !ctx.backend || ctx.backend->name() == "cpu";
    if (!cpu && !p.fp8.empty())
      ctx.print("# fp8 rows: not run on the " + ctx.backend->name() + " backend (FP8 GEMMs on the CPU only: docs/fp8.md)");
    else
      for (size_t i = 0; i < p.fp8.size(); ++i) {
        if (const std::string why = fp8_refusal(p, i, world.size()); !why.empty()) {  // the default list's
          ctx.print("# fp8 row " + std::string(to_string(p.fp8[i].recipe)) + ": not run (" + why + ")");
          continue;
        }
        variants.push_back({.name = std::string("fp8/") + to_string(p.fp8[i].recipe), .precision = Precision::bf16,
                            .fp8 = p.fp8[i]});
      }
    const size_t bf16_row = 1;
    const size_t V = variants.size();
    std::vector<std::vector<double>> times(V);
    std::vector<LayoutOutcome> last(V);
    for (int r = 0; r < reps; ++r)
      for (size_t i = 0; i < V; ++i) {
        // The FP8 rows run once: the CPU emulates their GEMMs element by element (and counts every
        // quantized value), so their time is the emulation's, not a recipe's.
        if (variants[i].fp8 && r > 0) continue;
        TrainConfig cfg = t.cfg;
        const Precision prec = variants[i].precision;
        cfg.loss_scaler.enabled = prec == Precision::fp16;
        cfg.loss_scaler.growth_interval = growth;
        if (variants[i].loss_scale_init > 0) {
          cfg.loss_scaler.init_scale = variants[i].loss_scale_init;
          cfg.grad_clip = 1.0;
        }
        ZeroConfig z = zero;
        z.fp32_communication = variants[i].fp32_comm;
        last[i] = run_layout({.model = t.model, .layout = {.l = t.layout, .z = z, .precision = prec, .fp8 = variants[i].fp8},
                              .train = cfg, .device = ctx.device,
                              .ops = precision_ops(ctx.backend), .host = world, .device_comm = ctx.device_world,
                              .data = *ctx.dataset, .fp8_census = variants[i].fp8.has_value()});
        const std::vector<double> st = slowest_step_times(last[i], world);
        times[i].insert(times[i].end(), st.begin() + 1, st.end());  // step 0 allocates
      }
    SuiteResult res;
    if (world.rank() != 0) return res;

    const LayoutOutcome& base = last[0];
    const Summary s32 = summarize(times[0]);
    PlanConfig pc;
    pc.model = t.model;
    pc.layout = t.layout;
    pc.zero.stage = zero.stage;
    pc.seq_len = t.cfg.seq_len;
    pc.micro_batch_size = t.cfg.global_batch / (world.size() * t.cfg.micro_batches);
    const double P = double(plan_rank(pc, 0, 0).N);
    ctx.print("#  run                    step ms  speedup  final loss  tail dloss/loss  max |dloss|/loss  DP bytes/step  "
              "state B/param  skipped  loss scale first -> last");
    for (size_t i = 0; i < V; ++i) {
      const Variant& v = variants[i];
      if (v.fp8) continue;  // below, against bf16
      const LayoutOutcome& o = last[i];
      const Summary s = summarize(times[i]);
      const double dev = max_rel_deviation(o.losses, base.losses);
      const double tail_dev = tail_gap(o.losses, base.losses).gap;
      int skipped = 0;
      for (int k : o.skipped) skipped += k;
      const double dp_bytes = o.dp_comm_bytes / double(t.cfg.steps + 1);  // + the untimed step-0 gradient
      const double state = model_state_bytes(o, Tier::device) + model_state_bytes(o, Tier::host);
      json rec = benchmark_record("precision/" + v.name, int64_t(times[i].size()), reps, s.median, s.median, "ms");
      rec["precision"] = std::string(to_string(v.precision));
      rec[field_key(LayoutKey::comm_type)] =
          v.fp32_comm || v.precision == Precision::fp32 ? "fp32" : to_string(v.precision);
      rec["step_time_ms"] = to_json(s, 1e3);
      rec["speedup_over_fp32"] = s32.median / s.median;
      rec["final_loss"] = o.losses.back();
      rec["max_loss_deviation_from_fp32"] = dev;  // per step, relative: spikes included
      rec["tail_mean_loss_deviation_from_fp32"] = tail_dev;  // signed, relative, last quarter of the steps
      rec["dp_comm_bytes_per_step"] = dp_bytes;
      rec["model_state_bytes_per_param"] = state / P;
      rec["losses"] = o.losses;
      rec["grad_norms"] = o.grad_norms;  // beside the losses, as the train and conformance suites report them
      if (!o.loss_scales.empty()) {
        rec["loss_scales"] = o.loss_scales;
        rec["skipped_steps"] = skipped;
      }
      res.benchmarks.push_back(rec);
      char line[300];
      std::snprintf(line, sizeof line, "   %-22s %8.2f  %6.2fx  %10.6f  %+15.4f  %16.3g  %13.0f  %13.1f  %7d  %s",
                    v.name.c_str(), s.median * 1e3, s32.median / s.median, o.losses.back(), tail_dev, dev, dp_bytes,
                    state / P, skipped,
                    o.loss_scales.empty()
                        ? "-"
                        : (fmt_scale(o.loss_scales.front()) + " -> " + fmt_scale(o.loss_scales.back())).c_str());
      ctx.print(line);

      const std::string prefix = "precision/" + v.name + "/";
      if (v.precision != Precision::fp32 && v.loss_scale_init == 0)  // the conformance suite's bounds
        for (Check& c : half_vs_fp32_checks(prefix, v.precision, o.losses, base.losses)) res.checks.push_back(std::move(c));
      if (v.fp32_comm && world.size() > 1 && zero.stage == 0)  // (stages 1-3 also gather parameters, in T)
        res.checks.push_back(make_check(prefix + "comm_bytes_ratio", std::fabs(o.dp_comm_bytes / last[i - 1].dp_comm_bytes - 2.0),
                                        0.0, "|fp32-comm bytes / half-comm bytes - 2|, exact"));
      if (!o.loss_scales.empty())
        res.checks.push_back(make_check(prefix + "loss_scale_trajectory", loss_scale_off(o, growth, v.loss_scale_init),
                                        0.0, "max |scale - GradScaler rule replayed on the skipped steps|, exact"));
      if (v.loss_scale_init > 0) {
        res.checks.push_back(make_check(prefix + "skipped_steps", skipped >= 1 ? 0.0 : 1.0, 0.0,
                                        "at least one skipped step (0 when so)"));
        res.checks.push_back(make_check(prefix + "trains_after_backoff", o.losses.back() / o.losses.front(), 0.99,
                                        "last loss / first loss <= 0.99"));
      }
      // Model states against the analytic model (rank 0's: the busiest with wte, every DP rank
      // equal up to padding).
      pc.precision = v.precision;
      const RankPlan plan = plan_rank(pc, 0, 0);
      const double predicted = double(plan.mem.model_states(Tier::device)) + double(plan.mem.model_states(Tier::host));
      res.checks.push_back(make_check(prefix + "model_state_bytes", std::fabs(state - predicted), 0.0,
                                      "|measured - analytic| persistent model-state bytes (param, grad, master, "
                                      "optimizer), exact"));
    }
    ctx.print("# speedup: fp32 step time / this one (the cpu emulates half storage: conversions, no faster op); tail "
              "dloss/loss: mean loss over the last quarter of the steps vs fp32's; state B/param: param + grad + "
              "master + Adam moments per parameter");
    if (V > half_rows) fp8_rows(ctx, res, variants, last, times, half_rows, bf16_row, pc, P, double(t.cfg.steps + 1));
    return res;
  }

 private:
  // The FP8 rows (variants[first..]) against the bf16 run: step time, the loss gap, what each operand
  // class saturated and flushed (rank 0's quantizations over the training steps), the delayed
  // recipe's scales; checks: fp8_vs_bf16_checks and the model-state bytes (FP8 keeps bf16's).
  static void fp8_rows(SuiteContext& ctx, SuiteResult& res, const std::vector<Variant>& variants,
                       const std::vector<LayoutOutcome>& last, const std::vector<std::vector<double>>& times,
                       size_t first, size_t bf16_row, PlanConfig pc, double P, double gradient_passes) {
    const LayoutOutcome& base = last[bf16_row];
    const Summary s32 = summarize(times[0]), s16 = summarize(times[bf16_row]);
    ctx.print("#  run                    step ms  x bf16  final loss  tail dloss/loss(bf16) +- se  max |dloss|/loss  "
              "saturated x/w/dy %   flushed x/w/dy %   dy scale first -> last");
    for (size_t i = first; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      const LayoutOutcome& o = last[i];
      const Summary s = summarize(times[i]);
      const double dev = max_rel_deviation(o.losses, base.losses);
      const TailGap g = tail_gap(o.losses, base.losses);
      const double gap = g.gap;
      json rec = benchmark_record("precision/" + v.name, int64_t(times[i].size()), 1, s.median, s.median, "ms");
      rec["precision"] = "fp8";
      rec["fp8"] = fp8_settings_json(*v.fp8);
      rec["fp8_recipe"] = to_string(v.fp8->recipe);
      rec[field_key(LayoutKey::comm_type)] = "bf16";
      rec["step_time_ms"] = to_json(s, 1e3);
      rec["speedup_over_fp32"] = s32.median / s.median;
      rec["speedup_over_bf16"] = s16.median / s.median;
      // The columns every row has, against fp32.
      rec["max_loss_deviation_from_fp32"] = max_rel_deviation(o.losses, last[0].losses);
      rec["tail_mean_loss_deviation_from_fp32"] = tail_gap(o.losses, last[0].losses).gap;
      rec["dp_comm_bytes_per_step"] = o.dp_comm_bytes / gradient_passes;
      rec["model_state_bytes_per_param"] = (model_state_bytes(o, Tier::device) + model_state_bytes(o, Tier::host)) / P;
      rec["final_loss"] = o.losses.back();
      rec["tail_mean_loss_gap_to_bf16"] = gap;  // signed, relative, last quarter of the steps
      rec["tail_mean_loss_gap_se"] = g.se_rel;  // its standard error, relative
      rec["max_loss_deviation_from_bf16"] = dev;
      rec["losses"] = o.losses;
      rec["grad_norms"] = o.grad_norms;
      json census = json::object();
      double sat[3], flu[3];
      for (int r = 0; r < 3; ++r) {
        const cpu::Fp8Counts& c = o.fp8_census.by_role[size_t(r)];
        const double nonzero = double(c.values - c.zeros);
        sat[r] = c.values ? double(c.saturated) / double(c.values) : 0.0;
        flu[r] = nonzero > 0 ? double(c.flushed) / nonzero : 0.0;
        census[kRoles[r]] = {{"values", c.values}, {"zeros", c.zeros}, {"flushed", c.flushed},
                             {"saturated", c.saturated}, {"saturated_share", sat[r]}, {"flushed_share", flu[r]}};
      }
      rec["fp8_census"] = census;  // rank 0's quantizations over the training steps
      if (!o.fp8_scales.empty()) {
        json sc = json::object();
        for (int r = 0; r < 3; ++r) {
          std::vector<double> x;
          for (const auto& step : o.fp8_scales) x.push_back(step[size_t(r)]);
          sc[kRoles[r]] = x;
        }
        rec["fp8_scales"] = sc;  // per step, the median over rank 0's linears, after the step's update
      }
      res.benchmarks.push_back(rec);
      char line[360];
      std::snprintf(line, sizeof line,
                    "   %-22s %8.2f  %5.2fx  %10.6f  %+17.4f %6.4f  %16.3g  %5.2f/%5.2f/%5.2f   %5.2f/%5.2f/%5.2f   %s",
                    v.name.c_str(), s.median * 1e3, s16.median / s.median, o.losses.back(), gap, g.se_rel, dev, 100 * sat[0],
                    100 * sat[1], 100 * sat[2], 100 * flu[0], 100 * flu[1], 100 * flu[2],
                    o.fp8_scales.empty() ? "-"
                                         : (fmt_g(o.fp8_scales.front()[2]) + " -> " + fmt_g(o.fp8_scales.back()[2])).c_str());
      ctx.print(line);
      const std::string prefix = "precision/" + v.name + "/";
      for (Check& c : fp8_vs_bf16_checks(prefix, o.losses, base.losses)) res.checks.push_back(std::move(c));
      // Current, blockwise and MXFP8 scales map each tensor's, tile's or block's own amax onto the
      // format's largest value or below it (fp8_scale_from_amax; the blocks' scales rounded down to a
      // power of two, the MX ones' E8M0 up): nothing they quantize is clamped. The delayed recipe's
      // come from earlier steps' amaxes, so a tensor that grew saturates (reported, not checked).
      if (v.fp8->recipe != Fp8Recipe::delayed)
        for (int r = 0; r < 3; ++r)
          res.checks.push_back(make_check(prefix + "saturated/" + kRoles[r],
                                          double(o.fp8_census.by_role[size_t(r)].saturated), 0.0,
                                          "values clamped at the format's largest, rank 0's over the training steps: "
                                          "none (each scale maps its own amax to fp8_max or below), exact"));
      pc.precision = Precision::bf16;  // FP8 keeps bf16's parameters, gradients, master weights and moments
      const RankPlan plan = plan_rank(pc, 0, 0);
      const double state = model_state_bytes(o, Tier::device) + model_state_bytes(o, Tier::host);
      const double predicted = double(plan.mem.model_states(Tier::device)) + double(plan.mem.model_states(Tier::host));
      res.checks.push_back(make_check(prefix + "model_state_bytes", std::fabs(state - predicted), 0.0,
                                      "|measured - analytic (bf16)| persistent model-state bytes, exact"));
    }
    ctx.print("# fp8 rows: FP8 linears over bf16 (docs/fp8.md); x bf16: bf16 step time / this one (the cpu emulates "
              "FP8 GEMMs element by element); saturated: share of rank 0's quantized values clamped at the format's "
              "largest; flushed: share of its non-zero values quantized to zero; dy scale: the "
              "delayed recipe's output-gradient scale (median over the linears)");
  }

  static std::string fmt_g(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", x);
    return b;
  }

  static std::string fmt_scale(double s) {
    const int e = int(std::lround(std::log2(s)));
    if (std::ldexp(1.0, e) == s) return "2^" + std::to_string(e);
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    return b;
  }
};

}  // namespace

DTB_REGISTER_SUITE("precision", PrecisionSuite);

}  // namespace dtb
