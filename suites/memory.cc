// The `memory` suite: each rank's measured peak bytes per category and tier (the Device's
// accounting, kernels/device.h) while the GPT trains for a few steps, beside the analytic
// model's prediction for that rank (reference/analytic/memory_model.h), for DP, ZeRO 1, 2, 3 and
// offload over every rank, and a TP (with and without sequence parallelism) and a PP layout. Parameters, gradients, master
// weights and optimizer state must match the model exactly, and so must activations and
// backward scratch: the model counts this implementation's own buffers (the pooled
// activation sets of the schedule's in-flight micro-batches), so the bound is 0 bytes.
// comm_buffer (pipeline messages, ZeRO's gathered units and buckets) is transient and
// reported as measured only.
#include <cstdio>

#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "suites/memory_guard.h"
#include "suites/oracle.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

struct MemCase {
  std::string name;
  ParallelLayout layout;
  ZeroConfig zero;
};

std::vector<MemCase> memory_cases(int n) {
  std::vector<MemCase> out;
  auto add = [&](int tp, int dp, int pp, int stage, bool offload, bool sp = false) {
    MemCase c;
    c.layout.tp = tp, c.layout.dp = dp, c.layout.pp = pp, c.layout.sequence_parallel = sp;
    c.zero.stage = stage;
    c.zero.offload_optimizer = offload;
    // DP named even at 1 beside TP or PP ("TP2xDP1"), 1f1b left implied: the cases' record names.
    SpecTextForm form;
    form.data_parallel_always = true, form.schedule = DefaultSchedule::never;
    LayoutSpec spec;
    spec.l = c.layout, spec.z = c.zero;
    c.name = layout_spec_text(spec, form);
    out.push_back(c);
  };
  for (int stage = 0; stage <= 3; ++stage) add(1, n, 1, stage, false);
  add(1, n, 1, 2, true);
  add(1, n, 1, 3, true);
  if (n % 2 == 0) {
    add(2, n / 2, 1, 0, false);
    add(2, n / 2, 1, 0, false, true);  // sequence parallel: the LayerNorm and residual regions' 1/tp
    add(1, n / 2, 2, 0, false);
  }
  return out;
}

constexpr MemCategory kCats[] = {MemCategory::param,      MemCategory::grad,        MemCategory::master_param,
                                 MemCategory::optimizer_state, MemCategory::activation, MemCategory::workspace,
                                 MemCategory::comm_buffer};

// The section, typed: the one parse validate() and run() use.
struct Params {
  GptConfig model;
  TrainConfig cfg;  // global_batch: micro_batch_size x world x micro_batches (each case sets its own)
  int mbs = 0;      // sequences per micro-batch
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    p.model = gpt_config_from_json(s.at("model"), "memory.model");
    require_gpt2(p.model, "memory.model", "the memory suite (and its analytic model)");
    TrainConfig& t = p.cfg;
    t.steps = int(int_in_range(s, "steps", "memory.steps", 1, 1000));
    t.micro_batches = int(int_in_range(s, "micro_batches", "memory.micro_batches", 1, 1024));
    p.mbs = int(int_in_range(s, "micro_batch_size", "memory.micro_batch_size", 1, 1 << 16));
    t.seq_len = int(int_in_range(s, "seq_len", "memory.seq_len", 1, 1 << 20));
    t.global_batch = p.mbs * world.size * t.micro_batches;
    t.seed = config.at("seed").get<uint64_t>();
    if (t.seq_len > p.model.T)
      throw InputError("memory.seq_len = " + std::to_string(t.seq_len) + " exceeds memory.model.T = " +
                       std::to_string(p.model.T));
    return p;
  }
  json to_json() const { return {{"model", dtb::to_json(model)}, {"train", dtb::to_json(cfg)}, {"micro_batch_size", mbs}}; }
};

class MemorySuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "memory"; }
  std::string description() const override {
    return "measured peak bytes per category and rank for DP, ZeRO 1-3, offload, TP and PP vs the analytic model";
  }
  json defaults() const override {
    return {{"model", {{"L", 4}, {"C", 64}, {"NH", 4}, {"T", 32}, {"V", 256}}},
            {"steps", 2},
            {"micro_batches", 2},
            {"micro_batch_size", 2},
            {"seq_len", 32}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    if (config.value("backend", "cpu") != "cpu")
      throw InputError("memory: measures the cpu backend's accounting; run it with --backend cpu");
    const Params p = Params::parse(section, config, world);
    const GptConfig& model = p.model;
    const TrainConfig& cfg = p.cfg;
    for (const MemCase& c : memory_cases(world.size)) {
      ParallelLayout l = c.layout;
      l.micro_batches = cfg.micro_batches;
      try {
        validate_layout(l, model, int(int64_t(cfg.global_batch) * l.dp / world.size), world.size, cfg.seq_len);
      } catch (const InputError& e) {
        throw InputError("memory: layout " + c.name + ": " + e.what());
      }
    }
    const double bytes = unsharded_training_state_bytes(model, 0.0) +
                         4.0 * cfg.global_batch * cfg.seq_len * (16.0 * model.C * model.L + 3.0 * model.V);
    check_fits_in_memory(bytes, world.ranks_per_node, "memory: the model and batch", world.options);
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "memory suite needs a dataset");
    Communicator& world = ctx.world;
    const int n = world.size();
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const GptConfig& model = p.model;
    const int mbs = p.mbs;
    ctx.print("# memory: GPT L=" + std::to_string(model.L) + " C=" + std::to_string(model.C) + " NH=" +
              std::to_string(model.NH) + " V=" + std::to_string(model.V) + ", " +
              std::to_string(gpt_num_params(model)) + " params, fp32, " + std::to_string(mbs) +
              " sequences per micro-batch; peak bytes per rank from the model's construction through training, "
              "measured (Device accounting) vs the analytic model (KiB; '=' where they agree exactly)");
    ctx.print("#  layout              rank  param         grad          optimizer     host (master+opt+grad)  "
              "activation    workspace     comm_buffer");
    SuiteResult res;
    for (const MemCase& c : memory_cases(n)) {
      TrainConfig cfg = p.cfg;
      cfg.global_batch = mbs * c.layout.dp * cfg.micro_batches;
      ParallelLayout l = c.layout;
      l.micro_batches = cfg.micro_batches;
      const LayoutOutcome out = run_layout(
          {.model = model, .layout = {.l = l, .z = c.zero}, .train = cfg, .device = ctx.device, .host = world,
           .data = *ctx.dataset});
      PlanConfig pc;
      pc.model = model;
      pc.layout = l;
      pc.zero = c.zero;
      pc.seq_len = cfg.seq_len;
      pc.micro_batch_size = mbs;
      const RankPlan plan = plan_rank(pc, out.tp_rank, out.pp_rank);
      // Per rank: measured then predicted, [tier][category].
      const size_t per = 2 * kNumTiers * kNumMemCategories;
      std::vector<double> mine(per), all(per * n);
      for (int t = 0; t < kNumTiers; ++t)
        for (int k = 0; k < kNumMemCategories; ++k) {
          mine[t * kNumMemCategories + k] = out.peak_bytes[t][k];
          mine[kNumTiers * kNumMemCategories + t * kNumMemCategories + k] =
              double(plan.mem.get(Tier(t), MemCategory(k)));
        }
      world.all_gather(mine.data(), all.data(), per, DType::f64);
      if (world.rank() != 0) continue;
      for (int r = 0; r < n; ++r) {
        const double* m = &all[r * per];
        const double* p = m + kNumTiers * kNumMemCategories;
        auto meas = [&](Tier t, MemCategory k) { return m[int(t) * kNumMemCategories + int(k)]; };
        auto pred = [&](Tier t, MemCategory k) { return p[int(t) * kNumMemCategories + int(k)]; };
        json rec = benchmark_record("memory/" + c.name + "/rank:" + std::to_string(r), cfg.steps, 1, 0.0, 0.0, "s");
        for (const auto& [k, v] : {std::pair{LayoutKey::tp, json(l.tp)}, std::pair{LayoutKey::dp, json(l.dp)},
                                   std::pair{LayoutKey::pp, json(l.pp)}, std::pair{LayoutKey::zero_stage, json(c.zero.stage)},
                                   std::pair{LayoutKey::offload, json(c.zero.offload_optimizer ? "cpu" : "none")},
                                   std::pair{LayoutKey::sequence_parallel, json(l.sequence_parallel)}})
          rec[spelling(k).field_key] = v;
        for (Tier t : {Tier::device, Tier::host})
          for (MemCategory k : kCats) {
            const std::string key = std::string(to_string(t)) + "_" + std::string(to_string(k));
            rec["measured_" + key + "_bytes"] = meas(t, k);
            if (k == MemCategory::comm_buffer) continue;
            rec["predicted_" + key + "_bytes"] = pred(t, k);
            if (meas(t, k) == 0 && pred(t, k) == 0) continue;
            res.checks.push_back(make_check("memory/" + c.name + "/rank:" + std::to_string(r) + "/" + key,
                                            std::fabs(meas(t, k) - pred(t, k)), 0.0,
                                            "|measured peak - analytic model| bytes, exact"));
          }
        res.benchmarks.push_back(rec);
        auto cell = [&](Tier t, std::initializer_list<MemCategory> ks) {
          double a = 0, b = 0;
          for (MemCategory k : ks) a += meas(t, k), b += pred(t, k);
          char s[40];
          std::snprintf(s, sizeof s, "%9.1f %s", a / 1024, a == b ? "= " : "!=");
          return std::string(s);
        };
        char comm[32];
        std::snprintf(comm, sizeof comm, "%9.1f", meas(Tier::device, MemCategory::comm_buffer) / 1024);
        char line[300];
        std::snprintf(line, sizeof line, "   %-19s %4d  %s  %s  %s  %s               %s  %s  %s", c.name.c_str(), r,
                      cell(Tier::device, {MemCategory::param}).c_str(), cell(Tier::device, {MemCategory::grad}).c_str(),
                      cell(Tier::device, {MemCategory::optimizer_state, MemCategory::master_param}).c_str(),
                      cell(Tier::host, {MemCategory::master_param, MemCategory::optimizer_state, MemCategory::grad})
                          .c_str(),
                      cell(Tier::device, {MemCategory::activation}).c_str(),
                      cell(Tier::device, {MemCategory::workspace}).c_str(), comm);
        ctx.print(line);
      }
    }
    return res;
  }
};

}  // namespace

DTB_REGISTER_SUITE("memory", MemorySuite);

}  // namespace dtb
