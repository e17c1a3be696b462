// The `memory` suite: each rank's measured peak bytes per category and tier (the Device's
// accounting, kernels/device.h) while the GPT trains for a few steps, beside the analytic
// model's prediction for that rank (reference/analytic/memory_model.h): the GPT (`model`) for DP,
// ZeRO 1, 2, 3 and offload over every rank, a TP (with and without sequence parallelism) and a PP
// layout, and context-parallel layouts (CP2 beside DP, with ZeRO over the dp cp ranks, the
// all_gather form, full recompute, and CP beside TP with sequence parallelism); a Llama model
// (`llama_model`: RMSNorm, grouped-query attention, SwiGLU, the untied head) for DP, TP (its KV
// heads sharded, and shared when tp > num_kv_heads), PP with full recompute, CP with selective
// recompute and CP beside TP. Parameters, gradients, master weights and optimizer state must
// match the model exactly, and so must activations and backward scratch: the model counts this
// implementation's own buffers (the pooled activation sets of the schedule's in-flight
// micro-batches, the CP attention's scratch), so the bound is 0 bytes. comm_buffer (pipeline
// messages, ZeRO's gathered units and buckets, CP's K/V blocks) is transient and reported as
// measured; with CP the model's K/V blocks must fit under it (a lower bound, checked).
#include <algorithm>
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
  std::string name;  // "<layout>", or "llama/<layout>" for the Llama model
  ParallelLayout layout;
  ZeroConfig zero;
  Recompute recompute = Recompute::none;
  bool llama = false;
};

// One case: sizes, ZeRO, and the options; cp_comm_type "" keeps p2p.
struct CaseSpec {
  int tp = 1, cp = 1, dp = 1, pp = 1, stage = 0;
  bool offload = false, sp = false, llama = false;
  Recompute recompute = Recompute::none;
  std::string cp_comm{};  // "" (p2p) unless given
};

std::vector<MemCase> memory_cases(int n) {
  std::vector<MemCase> out;
  auto add = [&](const CaseSpec& k) {
    MemCase c;
    c.layout.tp = k.tp, c.layout.cp = k.cp, c.layout.dp = k.dp, c.layout.pp = k.pp, c.layout.sequence_parallel = k.sp;
    if (!k.cp_comm.empty()) c.layout.cp_comm_type = k.cp_comm;
    c.zero.stage = k.stage;
    c.zero.offload_optimizer = k.offload;
    c.recompute = k.recompute;
    c.llama = k.llama;
    // DP named even at 1 beside TP or PP ("TP2xDP1"), 1f1b left implied: the cases' record names.
    SpecTextForm form;
    form.data_parallel_always = true, form.schedule = DefaultSchedule::never;
    LayoutSpec spec;
    spec.l = c.layout, spec.z = c.zero, spec.recompute = c.recompute;
    c.name = (k.llama ? "llama/" : "") + layout_spec_text(spec, form);
    out.push_back(c);
  };
  for (int stage = 0; stage <= 3; ++stage) add({.dp = n, .stage = stage});
  add({.dp = n, .stage = 2, .offload = true});
  add({.dp = n, .stage = 3, .offload = true});
  if (n % 2 == 0) {
    add({.tp = 2, .dp = n / 2});
    add({.tp = 2, .dp = n / 2, .sp = true});  // sequence parallel: the LayerNorm and residual regions' 1/tp
    add({.dp = n / 2, .pp = 2});
    // Context parallelism: each rank's Tn / 2 rows, the log-sum-exp kept, the CP attention's
    // scratch; ZeRO over the dp cp ranks; the all_gather form's blocks; full recompute.
    add({.cp = 2, .dp = n / 2});
    add({.cp = 2, .dp = n / 2, .stage = 2});
    add({.cp = 2, .dp = n / 2, .stage = 1, .cp_comm = "all_gather"});
    add({.cp = 2, .dp = n / 2, .recompute = Recompute::full});
  }
  if (n % 4 == 0) add({.tp = 2, .cp = 2, .dp = n / 4, .sp = true});
  // The Llama model: its tensors and buffers on DP, TP (KV heads sharded; tp 4 > 2 KV heads
  // shares each over two ranks), PP with full recompute, CP with selective recompute, TP beside CP.
  add({.dp = n, .stage = 1, .llama = true});
  if (n % 2 == 0) {
    add({.tp = 2, .dp = n / 2, .llama = true});
    add({.dp = n / 2, .pp = 2, .llama = true, .recompute = Recompute::full});
    add({.cp = 2, .dp = n / 2, .stage = 3, .llama = true, .recompute = Recompute::selective});
  }
  if (n % 4 == 0) {
    add({.tp = 4, .dp = n / 4, .sp = true, .llama = true});
    add({.tp = 2, .cp = 2, .dp = n / 4, .llama = true});
  }
  return out;
}

constexpr MemCategory kCats[] = {MemCategory::param,      MemCategory::grad,        MemCategory::master_param,
                                 MemCategory::optimizer_state, MemCategory::activation, MemCategory::workspace,
                                 MemCategory::comm_buffer};

// The section, typed: the one parse validate() and run() use.
struct Params {
  GptConfig model;
  GptConfig llama;  // the Llama model (llama_model)
  TrainConfig cfg;  // global_batch: micro_batch_size x world x micro_batches (each case sets its own)
  int mbs = 0;      // sequences per micro-batch
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    p.model = gpt_config_from_json(s.at("model"), "memory.model");
    require_gpt2(p.model, "memory.model", "the memory suite's GPT cases");
    p.llama = gpt_config_from_json(s.at("llama_model"), "memory.llama_model");
    if (!is_llama(p.llama)) throw InputError("memory.llama_model: model.arch must be \"llama\" (the Llama cases' model)");
    TrainConfig& t = p.cfg;
    t.steps = int(int_in_range(s, "steps", "memory.steps", 1, 1000));
    t.micro_batches = int(int_in_range(s, "micro_batches", "memory.micro_batches", 1, 1024));
    p.mbs = int(int_in_range(s, "micro_batch_size", "memory.micro_batch_size", 1, 1 << 16));
    t.seq_len = int(int_in_range(s, "seq_len", "memory.seq_len", 1, 1 << 20));
    t.global_batch = p.mbs * world.size * t.micro_batches;
    t.seed = config.at("seed").get<uint64_t>();
    for (const auto& [m, key] : {std::pair{&p.model, "model"}, std::pair{&p.llama, "llama_model"}})
      if (t.seq_len > m->T)
        throw InputError("memory.seq_len = " + std::to_string(t.seq_len) + " exceeds memory." + key + ".T = " +
                         std::to_string(m->T));
    return p;
  }
  json to_json() const {
    return {{"model", dtb::to_json(model)}, {"llama_model", dtb::to_json(llama)}, {"train", dtb::to_json(cfg)},
            {"micro_batch_size", mbs}};
  }
};

class MemorySuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "memory"; }
  std::string description() const override {
    return "measured peak bytes per category and rank for DP, ZeRO 1-3, offload, TP, PP and CP, GPT and Llama, vs the "
           "analytic model";
  }
  json defaults() const override {
    return {{"model", {{"L", 4}, {"C", 64}, {"NH", 4}, {"T", 32}, {"V", 256}}},
            {"llama_model",
             {{"arch", "llama"}, {"L", 4}, {"C", 64}, {"NH", 4}, {"num_kv_heads", 2}, {"ffn_hidden_size", 128},
              {"T", 32}, {"V", 256}}},
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
      // The plan's refusals: the layout validator's (sizes, Llama's KV heads, CP) and the plan's own.
      PlanConfig pc;
      pc.model = c.llama ? p.llama : model;
      pc.layout = l;
      pc.zero = c.zero;
      pc.recompute = c.recompute;
      pc.seq_len = cfg.seq_len;
      pc.micro_batch_size = p.mbs;
      try {
        validate_plan(pc);
      } catch (const InputError& e) {
        throw InputError("memory: layout " + c.name + ": " + e.what());
      }
    }
    double bytes = 0;
    for (const GptConfig* m : {&model, &p.llama})
      bytes = std::max(bytes, unsharded_training_state_bytes(*m, 0.0) +
                                  4.0 * cfg.global_batch * cfg.seq_len * (16.0 * m->C * m->L + 3.0 * m->V));
    check_fits_in_memory(bytes, world.ranks_per_node, "memory: the model and batch", world.options);
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "memory suite needs a dataset");
    Communicator& world = ctx.world;
    const int n = world.size();
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const GptConfig& model = p.model;
    const int mbs = p.mbs;
    const GptConfig& llama = p.llama;
    ctx.print("# memory: GPT L=" + std::to_string(model.L) + " C=" + std::to_string(model.C) + " NH=" +
              std::to_string(model.NH) + " V=" + std::to_string(model.V) + ", " +
              std::to_string(gpt_num_params(model)) + " params; Llama L=" + std::to_string(llama.L) + " C=" +
              std::to_string(llama.C) + " NH=" + std::to_string(llama.NH) + " KV=" + std::to_string(kv_heads(llama)) +
              " F=" + std::to_string(ffn_hidden(llama)) + " V=" + std::to_string(llama.V) + ", " +
              std::to_string(gpt_num_params(llama)) + " params; fp32, " + std::to_string(mbs) +
              " sequences per micro-batch; peak bytes per rank from the model's construction through training, "
              "measured (Device accounting) vs the analytic model (KiB; '=' where they agree exactly)");
    ctx.print("#  layout                          rank  param         grad          optimizer     host (master+opt+grad)  "
              "activation    workspace     comm_buffer");
    SuiteResult res;
    for (const MemCase& c : memory_cases(n)) {
      TrainConfig cfg = p.cfg;
      cfg.global_batch = mbs * c.layout.dp * cfg.micro_batches;
      ParallelLayout l = c.layout;
      l.micro_batches = cfg.micro_batches;
      const GptConfig& cm = c.llama ? llama : model;
      const LayoutOutcome out = run_layout(
          {.model = cm, .layout = {.l = l, .z = c.zero, .recompute = c.recompute}, .train = cfg, .device = ctx.device,
           .host = world, .data = *ctx.dataset});
      PlanConfig pc;
      pc.model = cm;
      pc.layout = l;
      pc.zero = c.zero;
      pc.recompute = c.recompute;
      pc.seq_len = cfg.seq_len;
      pc.micro_batch_size = mbs;
      const RankPlan plan = plan_rank(pc, out.tp_rank, out.pp_rank);
      // Per rank: measured then predicted, [tier][category].
      const size_t per = 2 * kNumTiers * kNumMemCategories;
      const double cp_comm = double(plan.cp_comm_buffer_bytes);  // the same on every rank
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
        rec["arch"] = to_string(cm.arch);
        rec[spelling(LayoutKey::recompute).field_key] = to_string(c.recompute);
        for (const auto& [k, v] : {std::pair{LayoutKey::tp, json(l.tp)}, std::pair{LayoutKey::cp, json(l.cp)},
                                   std::pair{LayoutKey::dp, json(l.dp)},
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
        if (l.cp > 1) {  // CP's K/V blocks, a part of the comm_buffer peak
          rec["analytic_cp_comm_buffer_bytes"] = cp_comm;
          res.checks.push_back(make_check("memory/" + c.name + "/rank:" + std::to_string(r) + "/cp_comm_buffer",
                                          std::max(0.0, cp_comm - meas(Tier::device, MemCategory::comm_buffer)), 0.0,
                                          "analytic CP K/V blocks - measured comm_buffer peak, bytes (a lower bound: "
                                          "0 when it fits under the peak)"));
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
        char line[340];
        std::snprintf(line, sizeof line, "   %-31s %4d  %s  %s  %s  %s               %s  %s  %s", c.name.c_str(), r,
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
