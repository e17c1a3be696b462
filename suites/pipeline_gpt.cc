// The pipeline suite on the reference GPT; see pipeline_gpt.h.
#include "suites/pipeline_gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "reference/analytic/memory_model.h"
#include "reference/parallel/pipeline_schedule.h"
#include "reference/analytic/stage_balance.h"
#include "suites/stats.h"

namespace dtb {

using nlohmann::json;

json GptPipelineParams::defaults() {
  // L 8 of C 128 with a 4096-token vocabulary: the LM head costs about 1.7 layers' FLOPs
  // (2 BT C V against a layer's 24 BT C^2 + 4 BT^2 C / B), so an even split leaves the last stage the
  // slowest and the balancer has something to move.
  return {{"model", model_defaults(8, 128, 4, 64, 4096)},
          {"stages", {2}},
          {"schedules", {"1f1b", "zb-h1"}},
          {"micro_batches", 8},
          {"micro_batch_size", 2},
          {"seq_len", 64},
          {"steps", 3},
          {"balance", true},
          {"blocking_p2p", true}};
}

GptPipelineParams GptPipelineParams::parse(const json& s) {
  GptPipelineParams o;
  const std::string at = "pipeline.gpt";
  o.model = gpt_config_from_json(s.at("model"), at + ".model");
  if (o.model.moe.num_experts > 0) throw InputError(at + ".model: an MoE model is not run by the pipeline suite");
  require_gpt2(o.model, at + ".model", "the pipeline suite");
  const json& st = s.at("stages");
  if (!st.is_array()) throw InputError(at + ".stages must be a list (of pipeline sizes; [] for none)");
  for (const json& x : st) {
    if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > 64)
      throw InputError(at + ".stages: " + x.dump() + " is not an integer in [1, 64]");
    o.stages.push_back(x.get<int>());
  }
  const json& sch = s.at("schedules");
  if (!sch.is_array() || sch.empty()) throw InputError(at + ".schedules must be a non-empty list");
  for (const json& x : sch) {
    const std::string v = x.is_string() ? x.get<std::string>() : x.dump();
    if (v != "gpipe" && v != "1f1b" && v != "zb-h1")
      throw InputError(at + ".schedules: '" + printable(v, 40) + "' is not one of gpipe, 1f1b, zb-h1");
    if (std::find(o.schedules.begin(), o.schedules.end(), v) != o.schedules.end())
      throw InputError(at + ".schedules: '" + v + "' is listed twice");
    o.schedules.push_back(v);
  }
  o.micro_batches = int(int_in_range(s, "micro_batches", at + ".micro_batches", 1, 256));
  o.micro_batch_size = int(int_in_range(s, "micro_batch_size", at + ".micro_batch_size", 1, 1024));
  o.seq_len = int(int_in_range(s, "seq_len", at + ".seq_len", 1, o.model.T));
  o.steps = int(int_in_range(s, "steps", at + ".steps", 1, 1000));
  o.balance = s.at("balance").get<bool>();
  o.blocking_p2p = s.at("blocking_p2p").get<bool>();
  return o;
}

json GptPipelineParams::to_json() const {
  return {{"model", dtb::to_json(model)}, {"stages", stages}, {"schedules", schedules},
          {"micro_batches", micro_batches}, {"micro_batch_size", micro_batch_size}, {"seq_len", seq_len},
          {"steps", steps}, {"balance", balance}, {"blocking_p2p", blocking_p2p}};
}

namespace {

// What one (schedule, split, p2p) run measured, on every rank (gathered).
struct Measured {
  std::vector<int> layers;                  // per stage
  std::vector<double> f_ms, b_ms, w_ms;     // per stage, per micro-batch (medians over the steps)
  std::vector<double> send_ms;              // per stage and step: posting (or waiting for) sends
  std::vector<double> stage_bubble;         // per stage: idle / pipeline time (median)
  std::vector<double> bytes_sent;           // per stage, per step
  std::vector<double> peak_activation;      // per stage, bytes
  double bubble = 0, time_s = 0;            // medians over the steps
  PartCosts parts;                          // seconds per micro-batch per part, over the group
};

// A split of L layers over p stages as even as it can be: the remainder one layer each to the
// middle stages 1..p-2, then to stage 0, then to stage p-1 (away from the head, then the embedding).
std::vector<int> start_split(int L, int p) {
  std::vector<int> n(static_cast<size_t>(p), L / p), order;
  for (int s = 1; s < p - 1; ++s) order.push_back(s);
  order.push_back(0);
  if (p > 1) order.push_back(p - 1);
  for (int r = 0; r < L % p; ++r) n[size_t(order[size_t(r)])] += 1;
  return n;
}

bool is_even(const std::vector<int>& n) { return std::adjacent_find(n.begin(), n.end(), std::not_equal_to<>()) == n.end(); }

std::string name_of(const std::string& s, int p, int m, const std::vector<int>& layers, bool overlap) {
  return "pipeline/gpt/schedule:" + s + "/p:" + std::to_string(p) + "/m:" + std::to_string(m) + "/layers:" +
         pipeline_layers_text(layers) + (overlap ? "" : "/p2p:blocking");
}

// Trains o.steps + 1 steps of the GPT with schedule `s` and split `layers` on `group` (ranks
// 0..p-1 of the world; `active` false elsewhere) and gathers what they measured, skipping the
// first step (warm-up: the activation pools fill). Collective over ctx.world.
Measured measure(SuiteContext& ctx, const GptPipelineParams& o, Communicator* group, Communicator* dgroup,
                 const std::string& s, const std::vector<int>& layers, bool overlap, int64_t& trace_step) {
  const int p = int(layers.size()), m = o.micro_batches, T = o.steps, W = ctx.world.size();
  const int L = o.model.L;
  // Per rank: per step start, end, F, B, W, send, bytes; then the peak activation bytes.
  const size_t per = 7 * size_t(T) + 1;
  std::vector<double> mine(per, 0.0);
  PartTimes pt(L);
  if (group) {
    ParallelLayout l;
    l.pp = p, l.schedule = s, l.pipeline_layers = is_even(layers) && L % p == 0 ? std::vector<int>{} : layers;
    TrainConfig cfg;
    cfg.steps = T + 1;
    cfg.micro_batches = m;
    cfg.global_batch = m * o.micro_batch_size;
    cfg.seq_len = o.seq_len;
    cfg.overlap_p2p_comm = overlap;
    SpanRecorder rec(true);
    LayoutHooks hooks;  // the part clock restarts after the warm-up step, as the stage times do
    hooks.before_step = [&](int64_t step) {
      if (step == 1) pt = PartTimes(L);
    };
    const LayoutOutcome out = run_layout({.model = o.model, .layout = {.l = l}, .train = cfg, .device = ctx.device,
                                          .ops = precision_ops(ctx.backend), .host = *group, .device_comm = dgroup,
                                          .data = *ctx.dataset, .spans = &rec, .hooks = &hooks, .part_times = &pt});
    for (int t = 0; t < T; ++t) {
      double* r = &mine[7 * size_t(t)];
      r[0] = 1e300, r[1] = -1e300;
      for (const Span& sp : rec.spans()) {
        if (sp.step != t + 1) continue;
        const std::string_view n = sp.name;
        const bool f = n == "compute.forward", b = n == "compute.backward" || n == "compute.backward_input",
                   w = n == "compute.backward_weight", snd = n == "comm.send", rcv = n == "comm.recv";
        if (!(f || b || w || snd || rcv)) continue;  // the optimizer and the step's reductions are not the pipeline
        r[0] = std::min(r[0], sp.start_s), r[1] = std::max(r[1], sp.end_s);  // a wait for a message starts it too
        if (!rcv) (f ? r[2] : b ? r[3] : w ? r[4] : r[5]) += sp.duration_s();
        if (ctx.spans && ctx.spans->enabled()) ctx.spans->add(n, trace_step + t, sp.start_s, sp.end_s);
      }
      r[6] = out.timings[size_t(t) + 1].p2p_bytes;
      if (ctx.spans && ctx.spans->enabled()) ctx.spans->add_step(trace_step + t, r[0], r[1]);
    }
    mine[per - 1] = out.peak_activation_bytes;
  }
  trace_step += T;
  std::vector<double> all(per * size_t(W));
  ctx.world.all_gather(mine.data(), all.data(), per, DType::f64);
  // The parts each stage timed, summed over the world (a part is timed on one rank only).
  std::vector<double> parts(3 * (size_t(L) + 2));
  for (int k = 0; k < 3; ++k) std::copy(pt.seconds[k].begin(), pt.seconds[k].end(), parts.begin() + long(k) * (L + 2));
  ctx.world.all_reduce(parts.data(), parts.data(), parts.size(), DType::f64, ReduceOp::sum);

  Measured r;
  r.layers = layers;
  const double calls = double(T) * m;  // the part clock runs over the timed steps
  const bool zb = s == "zb-h1";
  for (int k = 0; k < L + 2; ++k) {
    const double f = parts[size_t(k)] / calls, b = parts[size_t(L + 2 + k)] / calls, w = parts[size_t(2 * (L + 2) + k)] / calls;
    r.parts.forward.push_back(f);
    r.parts.backward.push_back(zb ? b + w : b);  // the whole backward; W's part of it
    r.parts.weight.push_back(w);
  }
  std::vector<double> bubbles, times;
  const size_t P = static_cast<size_t>(p);
  std::vector<std::vector<double>> f(P), b(P), w(P), snd(P), idle(P), by(P);
  for (int t = 0; t < T; ++t) {
    double start = 1e300, end = -1e300;
    for (int st = 0; st < p; ++st) {
      const double* x = &all[per * size_t(st) + 7 * size_t(t)];
      start = std::min(start, x[0]), end = std::max(end, x[1]);
    }
    const double mk = end - start;  // the pipeline time: first action anywhere to the last one
    double total_idle = 0;
    for (int st = 0; st < p; ++st) {
      const double* x = &all[per * size_t(st) + 7 * size_t(t)];
      // Idle: not computing. A send counts as idle here (unlike the synthetic cases, whose
      // posting is comm): a blocking send's wait is the bubble the overlap removes.
      const double id = std::max(0.0, mk - x[2] - x[3] - x[4]);
      total_idle += id;
      f[size_t(st)].push_back(x[2] / m), b[size_t(st)].push_back(x[3] / m), w[size_t(st)].push_back(x[4] / m);
      snd[size_t(st)].push_back(x[5]), idle[size_t(st)].push_back(id / mk), by[size_t(st)].push_back(x[6]);
    }
    bubbles.push_back(total_idle / (p * mk));
    times.push_back(mk);
  }
  auto med = [](const std::vector<double>& v) { return summarize(v).median; };
  for (int st = 0; st < p; ++st) {
    r.f_ms.push_back(1e3 * med(f[size_t(st)])), r.b_ms.push_back(1e3 * med(b[size_t(st)]));
    r.w_ms.push_back(1e3 * med(w[size_t(st)])), r.send_ms.push_back(1e3 * med(snd[size_t(st)]));
    r.stage_bubble.push_back(med(idle[size_t(st)])), r.bytes_sent.push_back(med(by[size_t(st)]));
    r.peak_activation.push_back(all[per * size_t(st) + per - 1]);
  }
  r.bubble = med(bubbles);
  r.time_s = med(times);
  return r;
}

// The schedule's simulation from per-stage times (any one unit; the makespan comes back in it).
PipelineSimulation simulate(const std::string& s, int m, const std::vector<StageCost>& c) {
  return simulate_pipeline(s, int(c.size()), m, 1, c);
}

// The measured per-stage times (ms per micro-batch) as simulator costs; a stage that measured
// none is given a nanosecond-scale time (the simulator needs forward and backward > 0).
std::vector<StageCost> measured_costs(const Measured& x) {
  std::vector<StageCost> c;
  for (size_t st = 0; st < x.f_ms.size(); ++st)
    c.push_back({std::max(x.f_ms[st], 1e-9), std::max(x.b_ms[st] + x.w_ms[st], 2e-9), x.w_ms[st]});
  return c;
}

// The record, checks and table line of one measured run.
void report(SuiteContext& ctx, const GptPipelineParams& o, const std::string& s, const Measured& x, bool overlap,
            SuiteResult& res) {
  const int p = int(x.layers.size()), m = o.micro_batches;
  const PipelineSimulation sim = simulate(s, m, measured_costs(x));
  const bool zb = s == "zb-h1";
  double mf = 0, mb = 0, mw = 0;
  for (int st = 0; st < p; ++st) mf += x.f_ms[size_t(st)] / p, mb += x.b_ms[size_t(st)] / p, mw += x.w_ms[size_t(st)] / p;
  const double formula = zb ? zb_h1_bubble_theory(p, m, mf, mb, mw) : pipeline_bubble_theory(s, p, m, 1);
  const std::string name = name_of(s, p, m, x.layers, overlap);
  json rec = benchmark_record(name, 1, o.steps, x.time_s, x.time_s, "ms");
  rec["schedule"] = s, rec["p"] = p, rec["m"] = m, rec[field_key(LayoutKey::pipeline_layers)] = x.layers;
  rec["p2p"] = overlap ? "overlap" : "blocking";
  rec["stage_forward_ms"] = x.f_ms, rec["stage_backward_ms"] = x.b_ms, rec["stage_weight_ms"] = x.w_ms;
  rec["stage_send_ms"] = x.send_ms;
  rec["bubble_measured"] = x.bubble, rec["stage_bubble_measured"] = x.stage_bubble;
  rec["bubble_simulated"] = sim.bubble, rec["stage_bubble_simulated"] = sim.stage_bubble;
  rec["bubble_theory"] = formula;
  rec["pipeline_time_ms"] = x.time_s * 1e3, rec["pipeline_time_simulated_ms"] = sim.makespan;
  rec["p2p_bytes_sent"] = x.bytes_sent;
  rec["peak_activation_bytes"] = x.peak_activation;
  // Each stage sends one (B Tn, C) fp32 message per micro-batch forward (all but the last)
  // and one backward (all but the first): exactly, or the trainer sent something else.
  const double msg = double(o.micro_batch_size) * o.seq_len * o.model.C * 4;
  double worst = 0;
  for (int st = 0; st < p; ++st)
    worst = std::max(worst, std::fabs(x.bytes_sent[size_t(st)] - m * msg * ((st < p - 1) + (st > 0))));
  res.checks.push_back(make_check(name + "/p2p_bytes", worst, 0.0,
                                  "max |bytes sent - m (B Tn C 4) per direction| over the stages, exact"));
  {  // the per-rank plan (reference/analytic/memory_model.h), ZB-H1's kept output gradients included
    PlanConfig c;
    c.model = o.model;
    c.layout.pp = p, c.layout.schedule = s, c.layout.micro_batches = m;
    c.layout.pipeline_layers = x.layers;
    c.seq_len = o.seq_len, c.micro_batch_size = o.micro_batch_size;
    json plan = json::array();
    double off = 0;
    for (int st = 0; st < p; ++st) {
      const double b = double(plan_rank(c, 0, st).mem.at(Tier::device, MemCategory::activation));
      plan.push_back(b);
      off = std::max(off, std::fabs(b - x.peak_activation[size_t(st)]));
    }
    rec["peak_activation_bytes_model"] = plan;
    res.checks.push_back(make_check(name + "/peak_activation_vs_plan", off, 0.0,
                                    "max |measured - planned| peak activation bytes over the stages, exact"));
  }
  res.benchmarks.push_back(rec);
  char buf[400];
  std::string fbw;
  for (int st = 0; st < p; ++st) {
    char b[24];
    std::snprintf(b, sizeof b, "%s%.2f", fbw.empty() ? "" : " ",
                  x.f_ms[size_t(st)] + x.b_ms[size_t(st)] + x.w_ms[size_t(st)]);
    fbw += b;
  }
  std::snprintf(buf, sizeof buf, "   %-7s %3d  %-11s %-9s %7.4f    %7.4f  %7.4f  %9.2f %9.2f  %s", s.c_str(), p,
                pipeline_layers_text(x.layers).c_str(), overlap ? "overlap" : "blocking", x.bubble, sim.bubble,
                formula, x.time_s * 1e3, sim.makespan, fbw.c_str());
  ctx.print(buf);
}

// The balancer's proposal from `before`'s part times, its simulated effect, and (when it
// moves a layer) the proposed split measured.
void balance(SuiteContext& ctx, const GptPipelineParams& o, Communicator* group, Communicator* dgroup,
             const std::string& s, const Measured& before, int64_t& trace_step, SuiteResult& res) {
  const int p = int(before.layers.size()), m = o.micro_batches;
  const std::vector<int> proposed = balance_stages(before.parts, p);
  auto bottleneck = [&](const std::vector<int>& split) {
    double worst = 0;
    for (const StageCost& c : stage_costs(before.parts, split)) worst = std::max(worst, c.forward + c.backward);
    return worst;
  };
  const PipelineSimulation sb = simulate(s, m, stage_costs(before.parts, before.layers));
  const PipelineSimulation sa = simulate(s, m, stage_costs(before.parts, proposed));
  const Measured after = proposed == before.layers ? before
                                                   : measure(ctx, o, group, dgroup, s, proposed, true, trace_step);
  if (proposed != before.layers) report(ctx, o, s, after, true, res);
  json rec = benchmark_record("pipeline/gpt/balance/schedule:" + s + "/p:" + std::to_string(p) + "/m:" +
                                  std::to_string(m),
                              1, o.steps, after.time_s, after.time_s, "ms");
  rec["schedule"] = s, rec["p"] = p, rec["m"] = m;
  rec["layers_before"] = before.layers, rec["layers_after"] = proposed;
  json parts = json::array();
  for (int k = 0; k < before.parts.layers() + 2; ++k) parts.push_back(1e3 * before.parts.total(k));
  rec["part_time_ms"] = parts;  // forward + whole backward per micro-batch: embedding, layers, head
  rec["bottleneck_before_ms"] = 1e3 * bottleneck(before.layers), rec["bottleneck_after_ms"] = 1e3 * bottleneck(proposed);
  rec["bubble_before_simulated"] = sb.bubble, rec["bubble_after_simulated"] = sa.bubble;
  rec["pipeline_time_before_simulated_ms"] = 1e3 * sb.makespan, rec["pipeline_time_after_simulated_ms"] = 1e3 * sa.makespan;
  rec["bubble_before_measured"] = before.bubble, rec["bubble_after_measured"] = after.bubble;
  rec["pipeline_time_before_ms"] = before.time_s * 1e3, rec["pipeline_time_after_ms"] = after.time_s * 1e3;
  res.benchmarks.push_back(rec);
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "#  balance %s p %d: layers %s -> %s, bottleneck %.2f -> %.2f ms per micro-batch; simulated: bubble "
                "%.4f -> %.4f, time %.1f -> %.1f ms; measured: bubble %.4f -> %.4f, time %.1f -> %.1f ms",
                s.c_str(), p, pipeline_layers_text(before.layers).c_str(), pipeline_layers_text(proposed).c_str(),
                1e3 * bottleneck(before.layers), 1e3 * bottleneck(proposed), sb.bubble, sa.bubble, 1e3 * sb.makespan,
                1e3 * sa.makespan, before.bubble, after.bubble, before.time_s * 1e3, after.time_s * 1e3);
  ctx.print(buf);
}

}  // namespace

void run_gpt_pipeline(SuiteContext& ctx, const GptPipelineParams& o, SuiteResult& res, int64_t& trace_step) {
  if (o.stages.empty()) return;
  DTB_CHECK(ctx.dataset != nullptr, "the pipeline suite's GPT cases need a dataset");
  const int W = ctx.world.size(), me = ctx.world.rank(), m = o.micro_batches;
  const GptConfig& g = o.model;
  char buf[700];
  std::snprintf(buf, sizeof buf,
                "# pipeline on the GPT (L %d, C %d, NH %d, V %d): %d micro-batches of %d x %d tokens, %d steps "
                "(median) after 1 warm-up; bubble = idle / (p x pipeline time), idle = not computing (waiting for, "
                "posting or waiting on a message included), pipeline time = first pipeline action on any stage to "
                "the last; simulated = the schedule run on the measured per-stage times "
                "with zero communication; theory = the schedule's closed form for equal stages",
                g.L, g.C, g.NH, g.V, m, o.micro_batch_size, o.seq_len, o.steps);
  ctx.print(buf);
  ctx.print("#  schedule  p  layers      p2p       measured  simulated  theory  time (ms)  sim (ms)  F+B+W per stage "
            "(ms per micro-batch)");
  for (const int p : o.stages) {
    auto skip = [&](const std::string& s, const std::string& why) {
      json rec = benchmark_record("pipeline/gpt/schedule:" + s + "/p:" + std::to_string(p) + "/m:" + std::to_string(m),
                                  0, o.steps, 0, 0, "ms");
      rec["skipped"] = true, rec["skip_message"] = why;
      res.benchmarks.push_back(rec);
      ctx.print("   " + s + " p " + std::to_string(p) + ": skipped, " + why);
    };
    if (p > W || p > g.L) {
      for (const auto& s : o.schedules)
        skip(s, p > W ? "p " + std::to_string(p) + " > world size " + std::to_string(W)
                      : "p " + std::to_string(p) + " > the model's " + std::to_string(g.L) + " layers");
      continue;
    }
    const bool active = me < p;
    auto group = ctx.world.split(active ? 0 : 1, me, "gpt-pp" + std::to_string(p));
    std::unique_ptr<Communicator> dgroup =
        ctx.device_world ? ctx.device_world->split(active ? 0 : 1, me, "gpt-pp-dev" + std::to_string(p)) : nullptr;
    Communicator* gp = active ? group.get() : nullptr;
    Communicator* dg = active ? dgroup.get() : nullptr;
    for (const auto& s : o.schedules) {
      if (s == "zb-h1" && m < p) {
        skip(s, "zb-h1 with m " + std::to_string(m) + " < p " + std::to_string(p) + ": no steady phase");
        continue;
      }
      const Measured start = measure(ctx, o, gp, dg, s, start_split(g.L, p), true, trace_step);
      report(ctx, o, s, start, true, res);
      if (o.blocking_p2p && p > 1) report(ctx, o, s, measure(ctx, o, gp, dg, s, start.layers, false, trace_step), false, res);
      if (o.balance && p > 1) balance(ctx, o, gp, dg, s, start, trace_step, res);
    }
    ctx.world.barrier();
  }
}

}  // namespace dtb
