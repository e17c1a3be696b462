// The `recompute` suite: what activation checkpointing costs and saves (Korthikanti et al.
// 2022). The GPT trained with data parallelism over every rank under recompute none,
// selective and full, alternately (repetitions; medians of the slowest rank's step times):
// step-time overhead over none beside the extra forward FLOPs the model predicts, and each
// rank's peak activation bytes (plus the recompute buffers, in workspace) beside the
// analytic model's, which must match exactly. The often-quoted figures are +33 % compute
// and half the activation memory for full recompute: the rows show what this machine and
// this implementation give. Recompute changes no result: the losses are bitwise equal.
#include <algorithm>
#include <cstdio>

#include "kernels/error.h"
#include "suites/memory_guard.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

constexpr Recompute kModes[] = {Recompute::none, Recompute::selective, Recompute::full};

// Forward FLOPs per token (multiply-adds x 2) of the layers and of the LM head, and the
// share a recompute setting adds to a training step of 3 forwards' worth (forward +
// backward of 2x): full repeats the layers' forward; selective the attention core's two
// products, QK^T and attention x V (4 Tn C per token per layer; the softmax is not counted).
double extra_flops_fraction(const GptConfig& m, int Tn, Recompute r) {
  const double C = m.C, L = m.L, V = m.V;
  const double core = 4.0 * Tn * C;  // per token per layer, non-causal count, as attention_forward computes
  const double layers = L * (24.0 * C * C + core), head = 2.0 * C * V;
  const double step = 3.0 * (layers + head);
  if (r == Recompute::full) return layers / step;
  if (r == Recompute::selective) return L * core / step;
  return 0.0;
}

// The section, typed: the one parse validate() and run() use.
struct Params {
  TimedDpSetup t;
  int reps = 0;
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    p.t = timed_dp_setup(s, config, "recompute", world.size);
    p.reps = int(int_in_range(s, "repetitions", "recompute.repetitions", 1, 100));
    return p;
  }
  json to_json() const { return {{"setup", dtb::to_json(t)}, {"repetitions", reps}}; }
};

class RecomputeSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "recompute"; }
  std::string description() const override {
    return "activation checkpointing none/selective/full: step-time overhead vs predicted FLOPs, activation bytes vs "
           "the analytic model";
  }
  json defaults() const override {
    return {{"model", {{"L", 4}, {"C", 128}, {"NH", 4}, {"T", 128}, {"V", 256}}},
            {"steps", 5}, {"micro_batches", 1}, {"micro_batch_size", 4}, {"seq_len", 128}, {"repetitions", 3}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    if (config.value("backend", "cpu") != "cpu")
      throw InputError("recompute: compares with the cpu backend's accounting; run it with --backend cpu");
    const Params p = Params::parse(section, config, world);
    const TimedDpSetup& t = p.t;
    validate_layout(t.layout, t.model, t.cfg.global_batch, world.size);
    check_fits_in_memory(unsharded_training_state_bytes(t.model) + fp32_step_activation_bytes(t.model, t.cfg),
                         world.ranks_per_node, "recompute: the model and batch", world.options);
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "recompute suite needs a dataset");
    Communicator& world = ctx.world;
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const TimedDpSetup& t = p.t;
    const int reps = p.reps;
    const int mbs = t.cfg.global_batch / (world.size() * t.cfg.micro_batches);
    ctx.print("# recompute: GPT L=" + std::to_string(t.model.L) + " C=" + std::to_string(t.model.C) + " NH=" +
              std::to_string(t.model.NH) + " T=" + std::to_string(t.cfg.seq_len) + ", " +
              std::to_string(gpt_num_params(t.model)) + " params, DP " + std::to_string(world.size()) + ", " +
              std::to_string(mbs) + " sequences per micro-batch, " + std::to_string(t.cfg.steps) + " steps x " +
              std::to_string(reps) + " repetitions alternating; rank 0's bytes (KiB)");
    ctx.print("#  recompute   step (ms)   overhead   predicted FLOPs   activation   saving   workspace   plan");
    std::vector<double> times[3];
    LayoutOutcome last[3];
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < 3; ++i) {
        last[i] = run_layout({.model = t.model, .layout = {.l = t.layout, .recompute = kModes[i]}, .train = t.cfg,
                              .device = ctx.device, .host = world, .data = *ctx.dataset});
        const std::vector<double> st = slowest_step_times(last[i], world);
        times[i].insert(times[i].end(), st.begin() + 1, st.end());
      }
    SuiteResult res;
    if (world.rank() != 0) return res;
    PlanConfig pc;
    pc.model = t.model;
    pc.layout = t.layout;
    pc.seq_len = t.cfg.seq_len;
    pc.micro_batch_size = mbs;
    const Summary base = summarize(times[0]);
    const double act0 = last[0].peak_bytes[int(Tier::device)][int(MemCategory::activation)];
    double loss_diff = 0;
    for (int i = 0; i < 3; ++i) {
      pc.recompute = kModes[i];
      const RankPlan plan = plan_rank(pc, 0, 0);
      const Summary s = summarize(times[i]);
      const double act = last[i].peak_bytes[int(Tier::device)][int(MemCategory::activation)];
      const double ws = last[i].peak_bytes[int(Tier::device)][int(MemCategory::workspace)];
      const double pact = double(plan.mem.get(Tier::device, MemCategory::activation));
      const double pws = double(plan.mem.get(Tier::device, MemCategory::workspace));
      const std::string mode(to_string(kModes[i]));
      json rec = benchmark_record("recompute/" + mode, int64_t(times[i].size()), reps, s.median, s.median, "ms");
      rec["recompute"] = mode;
      rec["step_time_ms"] = to_json(s, 1e3);
      rec["overhead"] = s.median / base.median - 1.0;
      rec["predicted_extra_flops"] = extra_flops_fraction(t.model, t.cfg.seq_len, kModes[i]);
      rec["activation_bytes"] = act;
      rec["predicted_activation_bytes"] = pact;
      rec["activation_saving"] = 1.0 - act / act0;
      rec["workspace_bytes"] = ws;
      rec["predicted_workspace_bytes"] = pws;
      res.benchmarks.push_back(rec);
      res.checks.push_back(make_check("recompute/" + mode + "/activation_bytes", std::fabs(act - pact), 0.0,
                                      "|measured peak activation bytes - analytic model|, exact"));
      res.checks.push_back(make_check("recompute/" + mode + "/workspace_bytes", std::fabs(ws - pws), 0.0,
                                      "|measured peak workspace bytes - analytic model|, exact"));
      for (size_t k = 0; k < last[0].losses.size(); ++k)
        loss_diff = std::max(loss_diff, std::fabs(last[i].losses[k] - last[0].losses[k]));
      char line[240];
      std::snprintf(line, sizeof line, "   %-10s %10.2f   %+7.1f%%   %+14.1f%%   %10.1f   %5.1f%%   %9.1f   %s", mode.c_str(),
                    s.median * 1e3, 100 * (s.median / base.median - 1), 100 * extra_flops_fraction(t.model, t.cfg.seq_len, kModes[i]),
                    act / 1024, 100 * (1 - act / act0), ws / 1024, act == pact && ws == pws ? "= plan" : "!= plan");
      ctx.print(line);
    }
    res.checks.push_back(make_check("recompute/losses_unchanged", loss_diff, 0.0,
                                    "max |loss(recompute) - loss(none)| over steps: the same ops on the same values, "
                                    "bitwise"));
    return res;
  }
};

}  // namespace

DTB_REGISTER_SUITE("recompute", RecomputeSuite);

}  // namespace dtb
