// The `moe` suite: one mixture-of-experts layer (reference/model/moe.h) at expert parallelism 1, 2,
// 4, ... and several token counts per rank: the forward's time, its dispatch and combine
// (all_to_allv of the routed rows; DeepEP's "dispatch" and "combine") time and GB/s, the share
// of the forward in them, the router's load imbalance (max over mean assignments per expert)
// and drop rate; and a check that every EP size gives each rank's tokens the output and input
// gradient one rank computes alone. Then a small MoE GPT (2 layers, both MoE, the layer's shape)
// trained at DP = world with the largest EP size: per step the load imbalance (its worst layer)
// and drop rate over every rank's tokens, and the step's share in dispatch and combine; and each
// rank's model states against the analytic model (exact: checked to the byte). The
// conformance of expert-parallel layouts is the train and conformance suites' (docs/moe.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "reference/layout/layout_spec.h"
#include "reference/analytic/memory_model.h"
#include "reference/model/moe.h"
#include "reference/model/rng.h"
#include "suites/bandwidth.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// The section, typed: the one parse validate() and run() use.
struct Params {
  MoeConfig moe;
  int C = 0, seq = 0, warmup = 0, iters = 0, reps = 0, train_steps = 0;
  std::vector<int> tokens;  // per rank
  uint64_t seed = 0;
  static Params parse(const json& s, const json& config, const WorldInfo& world);
  json to_json() const {
    return {{"hidden", C},
            {"num_experts", moe.num_experts},
            {"moe_router_topk", moe.topk},
            {"moe_expert_capacity_factor", moe.capacity_factor ? json(*moe.capacity_factor) : json(nullptr)},
            {"moe_ffn_hidden_size", moe.ffn_hidden},
            {"seq_len", seq},
            {"tokens", tokens},
            {"warmup", warmup},
            {"iters", iters},
            {"repetitions", reps},
            {"train_steps", train_steps},
            {"seed", seed}};
  }
};

Params Params::parse(const json& s, const json&, const WorldInfo&) {
  Params p;
  p.C = int(int_in_range(s, "hidden", "moe.hidden", 1, 65536));
  p.moe.num_experts = int(int_in_range(s, "num_experts", "moe.num_experts", 1, 65536));
  p.moe.topk = int(int_in_range(s, "moe_router_topk", "moe.moe_router_topk", 1, 65536));
  if (!s.at("moe_expert_capacity_factor").is_null())
    p.moe.capacity_factor = number_in_range(s, "moe_expert_capacity_factor", "moe.moe_expert_capacity_factor", 0.0, 1e6);
  p.moe.ffn_hidden = int(int_in_range(s, "moe_ffn_hidden_size", "moe.moe_ffn_hidden_size", 0, 1 << 20));
  p.moe.aux_loss_coeff = 0.01;
  try {
    validate_moe_config(p.moe);
  } catch (const InputError& e) {
    throw InputError(std::string("moe: ") + e.what());
  }
  p.seq = int(int_in_range(s, "seq_len", "moe.seq_len", 1, 1 << 20));
  const json& t = s.at("tokens");
  if (!t.is_array() || t.empty()) throw InputError("moe.tokens: a non-empty list of tokens per rank");
  for (const auto& v : t) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 24))
      throw InputError("moe.tokens: every entry must be an integer in [1, 2^24], got " + v.dump());
    const int n = v.get<int>();
    if (n % p.seq != 0)
      throw InputError("moe.tokens: " + std::to_string(n) + " tokens per rank are not whole sequences of moe.seq_len = " +
                       std::to_string(p.seq) + " (the routing groups)");
    if (std::find(p.tokens.begin(), p.tokens.end(), n) != p.tokens.end())
      throw InputError("moe.tokens: " + std::to_string(n) + " is listed twice");
    p.tokens.push_back(n);
  }
  p.warmup = int(int_in_range(s, "warmup", "moe.warmup", 0, 1000));
  p.iters = int(int_in_range(s, "iters", "moe.iters", 1, 100000));
  p.reps = int(int_in_range(s, "repetitions", "moe.repetitions", 1, 1000));
  p.train_steps = int(int_in_range(s, "train_steps", "moe.train_steps", 0, 100000));
  p.seed = uint64_t(int_in_range(s, "seed", "moe.seed", 0, int64_t(1) << 53));
  if (p.train_steps > 0 && p.C % 4 != 0)
    throw InputError("moe.hidden = " + std::to_string(p.C) + ": the trained model's 4 heads need a multiple of 4 "
                     "(or moe.train_steps 0)");
  return p;
}

/// EP sizes measured: 1, then every p <= world dividing both the world and the experts.
std::vector<int> ep_sizes(int world, int E) {
  std::vector<int> out;
  for (int p = 1; p <= world; ++p)
    if (world % p == 0 && E % p == 0) out.push_back(p);
  return out;
}

/// The layer's weights (all E experts): router N(0, 0.02), expert weights N(0, 0.02), biases 0,
/// element i of each a pure function of (seed, name, i), as gpt_init_params; with `random`
/// false, zeros (a gradient buffer).
struct Weights {
  Weights(const MoeConfig& m, int C, uint64_t seed, bool random = true) : E(m.num_experts), C(C), F(moe_hidden(m, C)) {
    auto draw = [&](std::vector<float>& v, size_t n, const char* name) {
      v.assign(n, 0.0f);
      if (random)
        for (size_t i = 0; i < n; ++i) v[i] = float(0.02 * random_normal(seed, stream_id(name), i));
    };
    draw(router, size_t(E) * C, "moe.router");
    draw(fc, size_t(E) * F * C, "moe.fc");
    draw(proj, size_t(E) * C * F, "moe.proj");
    fc_bias.assign(size_t(E) * F, 0.0f), proj_bias.assign(size_t(E) * C, 0.0f);
  }
  /// Views of experts [e0, e0 + n) (the router whole); grads: zeroed buffers of the same shape.
  MoeWeights<float> view(int e0) {
    return {router.data(), fc.data() + size_t(e0) * F * C, fc_bias.data() + size_t(e0) * F,
            proj.data() + size_t(e0) * C * F, proj_bias.data() + size_t(e0) * C};
  }
  int E, C, F;
  std::vector<float> router, fc, fc_bias, proj, proj_bias;
};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), r += double(b[i]) * b[i];
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

/// The training part: a 2-layer MoE GPT of the layer's shape (4 heads, T = seq_len, V 256) at
/// DP = world, EP = ep, train_steps steps of 2 sequences per rank; its record, and checks that
/// each rank's model states (parameters, gradients, Adam moments: fp32, no ZeRO) are exactly the
/// analytic model's (reference/analytic/memory_model.h moe_model_states: the non-expert parameters and
/// E / ep of each layer's experts).
json train_record(SuiteContext& ctx, const Params& o, int ep, std::vector<Check>& checks) {
  DTB_CHECK(ctx.dataset != nullptr, "moe suite needs a dataset");
  Communicator& world = ctx.world;
  const int W = world.size(), E = o.moe.num_experts;
  GptConfig model{2, o.C, 4, o.seq, 256};
  model.moe = o.moe;
  ParallelLayout l;
  l.dp = W, l.ep = ep;
  TrainConfig cfg;
  cfg.steps = o.train_steps;
  cfg.global_batch = 2 * W;
  cfg.micro_batches = 1;
  cfg.seq_len = o.seq;
  cfg.seed = o.seed;
  const LayoutOutcome out = run_layout({.model = model, .layout = {.l = l}, .train = cfg, .device = ctx.device,
                                        .host = world, .data = *ctx.dataset});
  const size_t S = out.timings.size(), Lm = size_t(num_moe_layers(model)), per = size_t(E + 1);
  // Per step: the slowest rank's step and exchange seconds; the routing summed over ranks.
  std::vector<double> step(S), a2a(S), counts(S * Lm * per);
  for (size_t s = 0; s < S; ++s) {
    step[s] = out.timings[s].step_s, a2a[s] = out.moe_all_to_all_s[s];
    std::copy(out.moe_counts[s].begin(), out.moe_counts[s].end(), counts.begin() + long(s * Lm * per));
  }
  world.all_reduce(step.data(), step.data(), S, DType::f64, ReduceOp::max);
  world.all_reduce(a2a.data(), a2a.data(), S, DType::f64, ReduceOp::max);
  world.all_reduce(counts.data(), counts.data(), counts.size(), DType::f64, ReduceOp::sum);
  std::vector<double> imbalance(S, 0.0), drop(S, 0.0);
  for (size_t s = 0; s < S; ++s) {
    double dropped = 0, assigned = 0;
    for (size_t i = 0; i < Lm; ++i) {
      const double* c = counts.data() + (s * Lm + i) * per;
      double sum = 0, most = 0;
      for (int e = 0; e < E; ++e) sum += c[e], most = std::max(most, c[e]);
      if (sum > 0) imbalance[s] = std::max(imbalance[s], most / (sum / E));
      dropped += c[E], assigned += sum;
    }
    drop[s] = assigned > 0 ? dropped / assigned : 0.0;
  }
  // Model states per rank, measured (the Device's peak per category) against the analytic model:
  // the most any rank measured, and the largest |measured - model| over ranks.
  const MemoryBytes<double> model_states = moe_model_states(model, Precision::fp32, 0, W, ep);
  constexpr MemCategory kStates[] = {MemCategory::param, MemCategory::grad, MemCategory::master_param,
                                     MemCategory::optimizer_state};
  double mem[8];
  for (int i = 0; i < 4; ++i) {
    const double measured = out.peak_bytes[int(Tier::device)][int(kStates[i])];
    mem[i] = measured, mem[4 + i] = std::fabs(measured - model_states.get(Tier::device, kStates[i]));
  }
  world.all_reduce(mem, mem, 8, DType::f64, ReduceOp::max);
  const MoeParams np = moe_params(model);
  json memory = {{"params_total", np.total}, {"params_active", np.active}, {"params_per_rank", np.per_rank(ep)}};
  for (int i = 0; i < 4; ++i) {
    const std::string key(to_string(kStates[i]));
    memory[key] = {{"measured_bytes", mem[i]}, {"model_bytes", model_states.get(Tier::device, kStates[i])}};
    checks.push_back(make_check("moe/train/ep:" + std::to_string(ep) + "/memory/" + key, mem[4 + i], 0.0,
                                "|measured peak - analytic model| bytes per rank, max over ranks, exact"));
  }
  const Summary st = summarize(step), sa = summarize(a2a);
  json rec = benchmark_record("moe/train/ep:" + std::to_string(ep), 1, int64_t(S), st.median, st.median, "ms");
  rec[field_key(LayoutKey::ep)] = ep;
  rec["world_size"] = W;
  rec["hidden"] = o.C;
  rec["num_experts"] = E;
  rec["topk"] = o.moe.topk;
  rec["steps"] = int64_t(S);
  rec["step_time_ms"] = to_json(st, 1e3);
  rec["all_to_all_ms"] = to_json(sa, 1e3);
  rec["all_to_all_fraction"] = st.median > 0 ? std::min(1.0, sa.median / st.median) : 0.0;
  rec["imbalance_per_step"] = imbalance;
  rec["drop_rate_per_step"] = drop;
  rec["imbalance"] = summarize(imbalance).median;
  rec["drop_rate"] = summarize(drop).median;
  rec["final_loss"] = out.losses.empty() ? 0.0 : out.losses.back();
  rec["memory_per_rank"] = memory;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "# moe train: 2-layer MoE GPT, DP %d x EP %d, %zu steps: step %.3f ms (dispatch + combine %.3f ms, "
                "%.1f%%), imbalance %.3f (worst layer, median over steps), dropped %.1f%%, final loss %.4f",
                W, ep, S, st.median * 1e3, sa.median * 1e3, 100 * rec["all_to_all_fraction"].get<double>(),
                rec["imbalance"].get<double>(), 100 * rec["drop_rate"].get<double>(), rec["final_loss"].get<double>());
  ctx.print(buf);
  std::snprintf(buf, sizeof buf,
                "# moe train memory per rank: %.0f of %.0f parameters (%.0f active per token); model states %.1f KiB "
                "measured, %.1f KiB by the analytic model",
                np.per_rank(ep), np.total, np.active, (mem[0] + mem[1] + mem[2] + mem[3]) / 1024,
                model_states.model_states(Tier::device) / 1024);
  ctx.print(buf);
  return rec;
}

class MoeSuite final : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "moe"; }
  std::string description() const override {
    return "an MoE layer at expert parallelism 1, 2, 4, ...: forward time, dispatch and combine (all_to_allv) time "
           "and GB/s, load imbalance and drop rate; output and input gradient checked against one rank";
  }
  json defaults() const override {
    return {{"hidden", 128},     {"num_experts", 8},   {"moe_router_topk", 2}, {"moe_expert_capacity_factor", 1.25},
            {"moe_ffn_hidden_size", 0}, {"seq_len", 64}, {"tokens", {256, 1024}}, {"warmup", 1},
            {"iters", 3},        {"repetitions", 3},   {"train_steps", 10}, {"seed", 7}};
  }
  void validate(const json& s, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(s, config, world);
    GptConfig model;  // the experts alone decide what an MoE layer refuses (validate_moe_layout)
    model.moe = p.moe;
    validate_moe_layout(LayoutSpec{}, model, config.value("backend", "cpu"), "moe");
    // A rank holds every expert (the one-rank reference) twice (weights and gradients) and, at
    // the largest token count, its tokens' rows through each expert: (C + 2F + C) per assignment.
    const double C = p.C, F = moe_hidden(p.moe, p.C), E = p.moe.num_experts;
    const double n = *std::max_element(p.tokens.begin(), p.tokens.end()) * double(p.moe.topk);
    check_fits_in_memory(4.0 * (2 * E * (2 * F * C + F + 2 * C) + 2 * n * (2 * C + 2 * F)), world.ranks_per_node,
                         "moe: the layer", world.options);
  }
  SuiteResult run(SuiteContext& ctx) override;
};

SuiteResult MoeSuite::run(SuiteContext& ctx) {
  const Params o = Params::parse(ctx.section, ctx.config, ctx.world_info());
  CpuOps<float> ops;
  Communicator& world = ctx.world;
  const int W = world.size(), me = world.rank(), E = o.moe.num_experts, C = o.C, k = o.moe.topk;
  const std::vector<int> eps = ep_sizes(W, E);
  Weights w(o.moe, C, o.seed);
  const int F = w.F;
  // Error analysis of the check (relative norm error against one rank, float32): the EP run
  // computes each row with the same ops in the same order; only BLAS may block a GEMM over the
  // rows it shares a call with differently. A length-K sum of random-sign terms is off by about
  // u sqrt(K) relative (Higham & Mary 2019), so two evaluations differ by at most 8 u sum sqrt(K)
  // over the sums on the path, a factor ~4 of margin each: output fc (C) and proj (F); input
  // gradient proj's dgrad (C), fc's dgrad (F), and the output's own path.
  const double tol_out = 8 * kU * (std::sqrt(double(C)) + std::sqrt(double(F)));
  const double tol_dx = 2 * tol_out;

  SuiteResult res;
  res.data = {{"hidden", C}, {"num_experts", E}, {"moe_router_topk", k}, {"ffn_hidden", F}, {"ep_sizes", eps},
              {"tokens", o.tokens}};
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "# moe: C=%d, %d experts of F=%d, top-%d, routing groups of %d tokens, %d rank(s); warmup %d, iters %d, "
                "%d repetitions; time = median of the slowest rank's forward",
                C, E, F, k, o.seq, W, o.warmup, o.iters, o.reps);
  ctx.print(buf);
  ctx.print("#  ep   tokens/rank   fwd (ms)   dispatch (ms, GB/s)   combine (ms, GB/s)   a2a share   imbalance   dropped");

  for (const int n : o.tokens) {
    // This rank's tokens, and the one-rank reference of its output and input gradient.
    std::vector<float> x(size_t(n) * C), dout(size_t(n) * C);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = float(random_normal(o.seed + uint64_t(me), stream_id("moe.x"), i));
      dout[i] = float(random_normal(o.seed + uint64_t(me), stream_id("moe.dout"), i));
    }
    std::vector<float> ref_out(x.size()), ref_dx(x.size(), 0.0f);
    {
      MoeActivations<float> a;
      Weights g(o.moe, C, o.seed, false);  // the gradients
      moe_forward(ops, o.moe, w.view(0), x.data(), ref_out.data(), n, C, a, o.seq);
      moe_backward(ops, o.moe, w.view(0), g.view(0), x.data(), dout.data(), ref_dx.data(), n, C, a);
    }
    for (const int p : eps) {
      auto ep = world.split(me / p, me % p, std::string(spelling(LayoutKey::ep).name_key) + std::to_string(p));
      const int e0 = (me % p) * (E / p);
      Weights grads(o.moe, C, o.seed, false);
      MoeActivations<float> a;
      std::vector<float> out(x.size()), dx(x.size(), 0.0f);
      // 1. The check: one forward and backward against the one-rank reference.
      moe_forward(ops, o.moe, w.view(e0), x.data(), out.data(), n, C, a, o.seq, ep.get());
      moe_backward(ops, o.moe, w.view(e0), grads.view(e0), x.data(), dout.data(), dx.data(), n, C, a, 1.0, ep.get());
      double err[2] = {rel_err(out, ref_out), rel_err(dx, ref_dx)};
      world.all_reduce(err, err, 2, DType::f64, ReduceOp::max);
      // The routing over the world: assignments per expert before dropping, and the drops.
      std::vector<double> per_expert(size_t(E) + 1, 0.0);
      for (int e = 0; e < E; ++e) per_expert[size_t(e)] = a.routing.tokens_per_expert[size_t(e)];
      per_expert[size_t(E)] = a.routing.dropped;
      world.all_reduce(per_expert.data(), per_expert.data(), per_expert.size(), DType::f64, ReduceOp::sum);
      const double assignments = double(n) * W * k;
      const double imbalance = *std::max_element(per_expert.begin(), per_expert.end() - 1) / (assignments / E);
      const double drop_rate = per_expert[size_t(E)] / assignments;

      // 2. Timing: the forward, with its exchanges' share.
      MoeCommStats st;
      auto op = [&] { moe_forward(ops, o.moe, w.view(e0), x.data(), out.data(), n, C, a, o.seq, ep.get(), &st); };
      for (int i = 0; i < o.warmup; ++i) op();
      st = MoeCommStats{};
      const TimedResult tr = time_iterations(world, 0, o.iters, o.reps, op);
      const double calls = double(o.iters) * o.reps;
      // Per forward, each rank's: dispatch and combine seconds, and bytes sent to other ranks.
      double mine[4] = {st.dispatch_s / calls, st.combine_s / calls, double(st.dispatch_bytes) / calls,
                        double(st.combine_bytes) / calls};
      std::vector<double> all(4 * size_t(W));
      world.all_gather(mine, all.data(), 4, DType::f64);
      double worst[4] = {0, 0, 0, 0};  // the slowest rank's seconds; the largest bytes
      for (int r = 0; r < W; ++r)
        for (int i = 0; i < 4; ++i) worst[i] = std::max(worst[i], all[4 * size_t(r) + size_t(i)]);
      auto gbps = [](double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
      const Summary& s = tr.summary;
      const std::string name = "moe/ep:" + std::to_string(p) + "/tokens:" + std::to_string(n);
      json rec = benchmark_record(name, o.iters, o.reps, s.median, s.median, "ms");
      rec[field_key(LayoutKey::ep)] = p;
      rec["tokens_per_rank"] = n;
      rec["hidden"] = C;
      rec["num_experts"] = E;
      rec["topk"] = k;
      rec["world_size"] = W;
      rec["time_ms"] = to_json(s, 1e3);
      rec["dispatch_ms"] = worst[0] * 1e3;
      rec["combine_ms"] = worst[1] * 1e3;
      rec["dispatch_bytes"] = worst[2];
      rec["combine_bytes"] = worst[3];
      rec["dispatch_GBps"] = gbps(worst[2], worst[0]);
      rec["combine_GBps"] = gbps(worst[3], worst[1]);
      rec["all_to_all_fraction"] = s.median > 0 ? std::min(1.0, (worst[0] + worst[1]) / s.median) : 0.0;
      rec["imbalance"] = imbalance;
      rec["drop_rate"] = drop_rate;
      res.benchmarks.push_back(rec);
      std::snprintf(buf, sizeof buf, "   %2d   %11d   %8.3f   %8.3f, %7.3f    %8.3f, %7.3f    %8.1f%%   %9.3f   %6.1f%%", p,
                    n, s.median * 1e3, worst[0] * 1e3, gbps(worst[2], worst[0]), worst[1] * 1e3,
                    gbps(worst[3], worst[1]), 100 * rec["all_to_all_fraction"].get<double>(), imbalance,
                    100 * drop_rate);
      ctx.print(buf);
      if (p > 1) {
        const std::string at = "/ep:" + std::to_string(p) + "/tokens:" + std::to_string(n);
        const std::string how = "relative norm error vs one rank computing the same tokens with every expert, max over "
                                "ranks; tolerance 8 u sum sqrt(K) over the float sums on its path (u = 2^-24)";
        res.checks.push_back(make_check("moe/output" + at, err[0], tol_out, how));
        res.checks.push_back(make_check("moe/input_grad" + at, err[1], tol_dx, how));
      }
      world.barrier();
    }
  }
  if (o.train_steps > 0) res.benchmarks.push_back(train_record(ctx, o, eps.back(), res.checks));
  ctx.print_checks(res.checks, 44);
  return res;
}

}  // namespace

DTB_REGISTER_SUITE("moe", MoeSuite);

}  // namespace dtb
