// The `train` suite: the reference GPT trained with data parallelism over every rank on
// real text, then the single-rank baseline (same seed, data and global batch) and the
// float64 oracle, and the conformance checks that compare them (docs/numerics.md).
// Reports tokens/s and the step time split into compute and communication.
#include <cmath>
#include <cstdio>

#include <filesystem>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/op_profile.h"
#include "kernels/timer.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/training/dp_sync.h"
#include "reference/layout/layout_runner.h"
#include "reference/layout/layout_validate.h"
#include "reference/training/trainer.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

// Bytes the suite holds at once on the busiest rank, which runs a float32 reference and
// may run the float64 oracle: 4 copies of the parameters (weights, grads, Adam m and v) and
// the activations of gpt.cc (per layer ~16 C + NH T values per token, plus 2 V + 4 C per
// token at the head), all for the whole global batch, in float64 and float32.
double train_memory_bytes(const GptConfig& m, const TrainConfig& t) {
  const double tokens = double(t.global_batch) * t.seq_len;
  const double acts = tokens * (double(m.L) * (16.0 * m.C + double(m.NH) * t.seq_len) + 3.0 * m.V + 8.0 * m.C);
  const double floats = 4.0 * double(gpt_num_params(m)) + acts;
  return floats * (8.0 + 4.0);
}

// The DP run's step breakdown from ctx.spans, when recorded (--trace): per span name, the
// median over steps of the seconds the step's slowest rank (slowest[s], as for the step
// times) spent in it, in ms; a name absent from a step counts 0 there. An empty object
// when no spans were recorded. Collective over `world`; the result is rank 0's.
json step_breakdown_ms(const SuiteContext& ctx, Communicator& world, const std::vector<int>& slowest,
                       int64_t first_step = 0) {
  if (!ctx.spans || !ctx.spans->enabled()) return json::object();
  const auto names = span_names();
  const size_t K = names.size(), steps = slowest.size();
  std::vector<double> mine(steps * K, -1.0);  // [step][name], -1: absent
  for (size_t s = 0; s < steps; ++s)
    for (const auto& [name, sec] : ctx.spans->breakdown(first_step + int64_t(s)))
      mine[s * K + span_name_index(name)] = sec;
  std::vector<double> all(mine.size() * world.size());
  world.all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  json out = json::object();
  for (size_t k = 0; k < K; ++k) {
    std::vector<double> per_step;
    bool present = false;
    for (size_t s = 0; s < steps; ++s) {
      const double v = all[size_t(slowest[s]) * mine.size() + s * K + k];
      present = present || v >= 0;
      per_step.push_back(std::max(v, 0.0));
    }
    if (present) out[std::string(names[k])] = summarize(per_step).median * 1e3;
  }
  return out;
}

// Training checkpoints (reference/checkpoint/checkpoint.h): the section's checkpoint_dir,
// checkpoint_every and resume_from. With any of them the layout runs on the sharded
// trainer (ZeroEngine holds the state a checkpoint saves), also for plain DP.
struct CheckpointPlan {
  std::string dir;          // "" : none
  int every = 0;            // save after every `every` steps; 0: never
  std::string resume_from;  // "": a fresh run; "latest": dir's latest checkpoint (fresh when none); a step directory
  bool on() const { return !dir.empty() || !resume_from.empty(); }
};

CheckpointPlan checkpoint_plan_from_json(const json& s) {
  CheckpointPlan p;
  p.dir = s.at("checkpoint_dir").get<std::string>();
  p.every = int(int_in_range(s, "checkpoint_every", "train.checkpoint_every", 0, 1000000));
  p.resume_from = s.at("resume_from").get<std::string>();
  if (p.every > 0 && p.dir.empty())
    throw InputError("train.checkpoint_every = " + std::to_string(p.every) +
                     " needs train.checkpoint_dir (where to save)");
  if (p.resume_from == "latest" && p.dir.empty())
    throw InputError("train.resume_from \"latest\" needs train.checkpoint_dir (where to look)");
  std::error_code ec;
  if (!p.dir.empty() && std::filesystem::exists(p.dir, ec) && !std::filesystem::is_directory(p.dir, ec))
    throw InputError("train.checkpoint_dir: '" + printable(p.dir) + "' is not a directory");
  if (p.every > 0) check_dir_writable(p.dir, "train.checkpoint_dir");  // before anything is measured
  // A fresh run saving where an earlier run's checkpoints are would overwrite them (and its
  // `latest` would then name a mix of the two runs).
  if (p.every > 0 && p.resume_from.empty()) {
    std::string held;
    try {
      held = resolve_resume(p.dir, "latest");
    } catch (const InputError& e) {
      throw InputError("train.checkpoint_dir: " + std::string(e.what()));
    }
    if (!held.empty())
      throw InputError("train.checkpoint_dir: '" + printable(p.dir) + "' holds an earlier run's checkpoints (latest " +
                       printable(held) + "); a fresh run would overwrite them: resume with train.resume_from "
                       "\"latest\", or save into another directory");
  }
  return p;
}

// The step directory the plan resumes from ("" for a fresh run); InputError
// "train.resume_from: ..." when it names none.
std::string resume_step_dir(const CheckpointPlan& p) {
  try {
    return resolve_resume(p.dir, p.resume_from);
  } catch (const InputError& e) {
    throw InputError("train.resume_from: " + std::string(e.what()));
  }
}

// What checkpointing did in a run: its report's data.checkpoint.
json checkpoint_json(const CheckpointActivity& a, const CheckpointPlan& p, int steps) {
  return {{"save_error", a.save_error.empty() ? json(nullptr) : json(a.save_error)},
          {"dir", p.dir},
          {"every", p.every},
          {"resume_from", p.resume_from},
          {"resumed_from", a.resumed_from},
          {"resumed_at_step", a.first_step},
          {"changed_on_resume", a.changed_on_resume},
          {"resharded_from", a.resharded_from},
          {"steps_run", steps - a.first_step},
          {"saved_at_steps", a.saved}};
}

// What a train run is, from its section: the parsed settings and what follows from them.
struct TrainFacts {
  const GptConfig& model;
  const TrainConfig& cfg;
  const ParallelLayout& layout;
  const ZeroConfig& zero;
  Recompute recompute;
  const CheckpointPlan& plan;
  bool dp_only;             // the plain DP trainer (reference/training/trainer.h), not the sharded model
  std::string layout_name;  // the record's name after train/gpt/ (train/llama/)
  double tokens_per_step;
  double peak_tflops;  // the section's peak_tflops (0: no MFU)
  int hier_node_ranks = 0;  // the DP all-reduce: 0 flat, N hierarchical over nodes of N ranks
};

// The plain data-parallel run (reference/training/trainer.h's Gpt<float> and train()) over
// `dev_comm`, `ops` null on the CPU: the step-0 gradient (CPU only), the losses and timings,
// this rank's final parameters and the largest difference from rank 0's (bitwise equal
// replicas give 0). Collective over ctx.world.
LayoutOutcome run_plain_dp(const SuiteContext& ctx, const GptConfig& model_cfg, const TrainConfig& cfg,
                           Ops<float>* ops, Communicator& dev_comm, OpClock& clock) {
  const Dataset& data = *ctx.dataset;
  Communicator& world = ctx.world;
  LayoutOutcome run;
  CpuOps<float> cpu_ops;  // the model's default, built here to be wrapped
  ProfiledOps<float> profiled(ops ? *ops : cpu_ops, clock);
  Gpt<float> model(model_cfg, ctx.device, &profiled);
  auto to_host = [&](const float* p, size_t count) {
    std::vector<float> h(count);
    model.ops().copy_to_host(h.data(), p, count * sizeof(float));
    return h;
  };
  model.init(cfg.seed);
  compute_gradients(model, data, cfg, 0, dev_comm);
  if (ops == nullptr) {
    const std::vector<float> g = to_host(model.grads(), model.num_params());
    run.grads0.assign(g.begin(), g.end());
  }
  world.barrier();
  clock.reset();  // the training steps' ops, not step 0's gradient
  const TrainRun r = train(model, data, cfg, dev_comm, ctx.spans, ctx.options.slowdown.train_step);  // spans: --trace
  run.op_seconds = clock.seconds(), run.op_calls = clock.calls();
  record_steps(run, {}, r, cfg);  // losses, gradient norms, timings: as run_layout records them
  // DP replicas must hold the same parameters: compare with rank 0's, bitwise.
  const size_t P = model.num_params();
  const std::vector<float> my_params = to_host(model.params(), P);
  std::vector<float> root_params = my_params;
  world.broadcast(root_params.data(), P, DType::f32, 0);
  for (size_t i = 0; i < P; ++i)
    run.replica_params = std::max(run.replica_params, double(std::fabs(root_params[i] - my_params[i])));
  world.all_reduce(&run.replica_params, &run.replica_params, 1, DType::f64, ReduceOp::max);
  run.params.assign(my_params.begin(), my_params.end());
  return run;
}

// Per step run here, the slowest rank's step time (it sets the pace), split as that rank saw
// it; its communication time includes waiting for the others (exposed communication).
struct StepSplit {
  std::vector<double> step_s, compute_s, comm_s;
  std::vector<int> slowest_rank;  // per step
  Summary step, compute, comm;    // of the three, over the steps
  /// Per op family (kernels/op_profile.h), seconds per step: the mean over steps and ranks.
  std::array<double, kNumOpFamilies> op_s{};
};

// Collective over `world`.
StepSplit slowest_split(const LayoutOutcome& run, Communicator& world) {
  const int n = world.size(), timed = int(run.timings.size());
  std::vector<double> mine;
  for (const auto& t : run.timings) mine.insert(mine.end(), {t.step_s, t.compute_s, t.comm_s});
  std::vector<double> all(mine.size() * n);
  world.all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  StepSplit sp;
  for (int s = 0; s < timed; ++s) {
    int slowest = 0;
    for (int r = 1; r < n; ++r)
      if (all[r * mine.size() + 3 * s] > all[slowest * mine.size() + 3 * s]) slowest = r;
    const double* v = &all[slowest * mine.size() + 3 * s];
    sp.step_s.push_back(v[0]);
    sp.compute_s.push_back(v[1]);
    sp.comm_s.push_back(v[2]);
    sp.slowest_rank.push_back(slowest);
  }
  if (world.rank() == 0) sp.step = summarize(sp.step_s), sp.compute = summarize(sp.compute_s), sp.comm = summarize(sp.comm_s);
  world.all_reduce(run.op_seconds.data(), sp.op_s.data(), kNumOpFamilies, DType::f64, ReduceOp::sum);
  for (double& s : sp.op_s) s /= double(n) * std::max(1, timed);
  return sp;
}

// Model FLOPs per token of the run (reference/model/gpt.h: 6 N + 12 L C T, PaLM appendix B).
double model_flops_per_token(const TrainFacts& f) { return dtb::model_flops_per_token(f.model, f.cfg.seq_len); }

double model_tflops(const TrainFacts& f, const StepSplit& sp) {
  return model_flops_per_token(f) * f.tokens_per_step / sp.step.median / 1e12;
}

// The run's record, train/gpt/<layout> (train/llama/<layout> for a Llama model).
json train_record(const TrainFacts& f, const LayoutOutcome& run, const StepSplit& sp, const json& breakdown,
                  const std::string& backend) {
  const int timed = int(run.timings.size());
  const ParallelLayout& layout = f.layout;
  json rec = benchmark_record(std::string("train/") + (is_llama(f.model) ? "llama/" : "gpt/") + f.layout_name, timed, 1, sp.step.median, sp.step.median, "ms");
  add_layout_fields(rec, LayoutSpec{layout, f.zero, f.recompute, f.cfg.precision, f.hier_node_ranks, f.cfg.dp_sync});
  rec["steps"] = f.cfg.steps;
  rec["tokens_per_step"] = f.tokens_per_step;
  rec["tokens_per_s"] = f.tokens_per_step / sp.step.median;
  rec["step_time_ms"] = to_json(sp.step, 1e3);
  rec["compute_time_ms"] = to_json(sp.compute, 1e3);
  rec["comm_time_ms"] = to_json(sp.comm, 1e3);
  std::vector<double> fraction;
  for (int s = 0; s < timed; ++s) fraction.push_back(sp.comm_s[s] / sp.step_s[s]);
  rec["comm_fraction"] = summarize(fraction).median;  // per step, then the median
  json ops = json::object();
  for (int k = 0; k < kNumOpFamilies; ++k) ops[to_string(OpFamily(k))] = sp.op_s[size_t(k)] * 1e3;
  rec["op_time_ms"] = ops;
  if (!breakdown.empty()) rec["step_breakdown_ms"] = breakdown;
  rec["final_loss"] = run.losses.back();
  if (!run.loss_scales.empty()) {
    int skipped = 0;
    for (int k : run.skipped) skipped += k;
    rec["skipped_steps"] = skipped;
    rec["final_loss_scale"] = run.loss_scales.back();
  }
  rec["backend"] = backend;
  rec["model_flops_per_token"] = model_flops_per_token(f);
  rec["model_tflops"] = model_tflops(f, sp);
  if (f.peak_tflops > 0) rec["mfu"] = model_tflops(f, sp) / f.peak_tflops;
  return rec;
}

// With checkpoints: data.checkpoint, and with saves the check that each one completed.
void checkpoint_results(const TrainFacts& f, const CheckpointActivity& a, SuiteResult& res) {
  if (f.plan.on()) res.data["checkpoint"] = checkpoint_json(a, f.plan, f.cfg.steps);
  if (f.plan.every > 0)
    res.checks.push_back(make_check("train/checkpoints_saved", a.save_error.empty() ? 0.0 : 1.0, 0.0,
                                    a.save_error.empty() ? "every save completed" : "a save failed: " + a.save_error));
}

// The replicas: every copy of a replicated parameter (and, off plain DP, of its step-0
// gradient) bitwise equal over the ranks that hold one.
void replica_checks(const TrainFacts& f, const LayoutOutcome& run, SuiteResult& res) {
  res.checks.push_back(make_check(f.dp_only ? "train/dp_replicas_identical" : "train/replicas_identical",
                                  run.replica_params, 0.0,
                                  f.dp_only ? "max |p_rank - p_rank0| over ranks, bitwise"
                                            : "max |difference| between copies of a replicated parameter (TP, DP, "
                                              "tied wte), bitwise"));
  if (!f.dp_only && !run.grads0.empty())  // a resumed run has no step-0 gradient
    res.checks.push_back(make_check("train/replicas_identical/grads/step:0", run.replica_grads0, 0.0,
                                    "max |difference| between copies of a replicated gradient, bitwise"));
}

// The per-step record beside the loss curves, with or without the references: each step's global
// gradient norm (NaN, null in JSON, where undefined) and, with loss scaling, its scale and skip.
void per_step_data(const LayoutOutcome& run, SuiteResult& res) {
  res.data["grad_norms"] = run.grad_norms;
  if (!run.loss_scales.empty()) res.data["loss_scales"] = run.loss_scales, res.data["skipped"] = run.skipped;
}

// Each step's gradient norm against the oracle's (grad_norm_checks: conformance's check and
// tolerance), "train/grad_norm/step:s"; none for a resumed step whose checkpoint did not record
// it (written when norms were kept only with clipping: NaN, not a skipped step).
void grad_norm_results(const LayoutOutcome& run, const ReferenceSet& refs, SuiteResult& res) {
  const int64_t resumed = run.checkpoints.first_step;
  for (Check& c : grad_norm_checks("train/", refs, run.grad_norms)) {
    const size_t s = std::stoul(c.name.substr(c.name.rfind(':') + 1));
    const bool skipped = !run.skipped.empty() && run.skipped[s] != 0;
    if (int64_t(s) < resumed && std::isnan(run.grad_norms[s]) && !skipped) continue;
    res.checks.push_back(std::move(c));
  }
}

// Without the references (on a GPU, or references: false): the replicas, and that the model
// starts near the uniform loss ln V (GPT-2 init: logits ~0; an MoE model's losses add
// moe_initial_loss) and learns. On a GPU the CUDA ops are checked against the CPU's by the CUDA tests.
void device_results(const TrainFacts& f, const LayoutOutcome& run, const SuiteContext& ctx, SuiteResult& res) {
  replica_checks(f, run, res);
  res.checks.push_back(make_check("train/loss_step0_near_uniform",
                                  std::fabs(run.losses.front() - std::log(double(f.model.V)) - moe_initial_loss(f.model)),
                                  0.5, "|loss_0 - ln V - the MoE losses at init| <= 0.5"));
  res.checks.push_back(make_check("train/loss_falls", run.losses.back() / run.losses.front(), 0.99,
                                  "last loss / first loss <= 0.99"));
  res.data = {{"model", to_json(f.model)},
              {"num_params", gpt_num_params(f.model)},
              // layout-key-literal: the plain data-parallel run's loss curve (vs "layout"), not the dp degree
              {"losses", {{f.dp_only ? "dp" : "layout", run.losses}}}};
  per_step_data(run, res);
  checkpoint_results(f, run.checkpoints, res);
}

void print_device_line(const TrainFacts& f, const StepSplit& sp, const std::string& device, const SuiteContext& ctx) {
  const double tf = model_tflops(f, sp), peak = f.peak_tflops;
  char line[200];
  std::snprintf(line, sizeof line, "# train on %s: %.0f tokens/s, step %.2f ms, %.1f model TFLOP/s%s", device.c_str(),
                f.tokens_per_step / sp.step.median, sp.step.median * 1e3, tf,
                peak > 0 ? (", MFU " + std::to_string(100 * tf / peak).substr(0, 5) + "%").c_str() : "");
  ctx.print(line);
}

// On the CPU: the checks against the float64 oracle, the replicas and learning; the loss
// curves of the run and the references.
void oracle_results(const TrainFacts& f, const LayoutOutcome& run, const ReferenceSet& refs, const SuiteContext& ctx,
                    SuiteResult& res) {
  for (Check& c : oracle_checks("train/", refs, f.model, f.tokens_per_step, run.losses, run.grads0, run.params))
    res.checks.push_back(std::move(c));
  grad_norm_results(run, refs, res);
  if (f.cfg.precision != Precision::fp32)  // the stated bounds of the fp32 trajectory (suites/oracle.h)
    for (Check& c : half_vs_fp32_checks("train/", f.cfg.precision, run.losses, refs.oracle.losses))
      res.checks.push_back(std::move(c));
  replica_checks(f, run, res);
  // Learning: the mean of the last 10% of losses well below the uniform ln(256) = 5.55.
  const int steps = f.cfg.steps, tail = std::max(1, steps / 10);
  double tail_loss = 0;
  for (int s = steps - tail; s < steps; ++s) tail_loss += run.losses[s];
  tail_loss /= tail;
  const double uniform = std::log(double(f.model.V));
  res.checks.push_back(make_check("train/loss_below_uniform", tail_loss, 0.75 * uniform + moe_initial_loss(f.model),
                                  "mean loss of the last 10% of steps <= 0.75 ln V (+ the MoE losses at init)"));

  // layout-key-literal: the plain data-parallel run's loss curve (vs "layout"), not the dp degree
  json losses = {{f.dp_only ? "dp" : "layout", run.losses}, {"oracle_f64", refs.oracle.losses}};
  for (size_t j = 0; j < refs.single.size(); ++j)
    losses["single_rank_" + std::string(to_string(refs.precision)) + "_micro_batches:" +
           std::to_string(refs.micro_batches[j])] = refs.single[j].losses;
  const Dataset& data = *ctx.dataset;
  res.data = {{"model", to_json(f.model)},
              {"num_params", gpt_num_params(f.model)},
              {"tokens_per_step", f.tokens_per_step},
              {"dataset", {{"path", data.path}, {"bytes", data.bytes.size()}, {"sha256", data.sha256}}},
              {"oracle_factor", refs.factor()},
              {"losses", losses}};
  per_step_data(run, res);
  checkpoint_results(f, run.checkpoints, res);
}

void print_cpu_line(const TrainFacts& f, const StepSplit& sp, int n, const LayoutOutcome& run,
                    const ReferenceSet& refs, const SuiteContext& ctx) {
  char line[256];
  std::snprintf(line, sizeof line,
                "# train: %s %.0f tokens/s (step %.1f ms: compute %.1f, comm %.1f); "
                "final loss %.4f (1 rank %.4f, f64 %.4f)",
                (f.dp_only ? "dp=" + std::to_string(n) : f.layout_name).c_str(), f.tokens_per_step / sp.step.median,
                sp.step.median * 1e3, sp.compute.median * 1e3, sp.comm.median * 1e3, run.losses.back(),
                refs.single[0].losses.back(), refs.oracle.losses.back());
  ctx.print(line);
}

// The section, typed: the one parse validate() and run() use.
struct Params {
  GptConfig model;
  TrainConfig cfg;
  LayoutSpec spec;  // spec.precision == cfg.precision
  CheckpointPlan plan;
  std::string matmul_precision;
  double peak_tflops = 0;
  bool references = true;  // on the CPU: the single-rank references and the float64 oracle, and their checks
  /// Plain DP (reference/training/trainer.h) unless the layout, ZeRO, recompute, loss scaling, a half
  /// precision or checkpoints need the sharded model.
  bool plain_dp() const {
    const ParallelLayout& l = spec.l;
    return !plan.on() && cfg.dp_sync.synchronous() && l.tp == 1 && l.pp == 1 && l.ep == 1 && spec.z.stage == 0 &&
           spec.recompute == Recompute::none && !cfg.loss_scaler.enabled && cfg.precision == Precision::fp32 &&
           spec.hier_node_ranks == 0;
  }
  static Params parse(const json& section, const json& config, const WorldInfo& world);
  json to_json() const {
    return {{"model", dtb::to_json(model)},    {"train", dtb::to_json(cfg)},
            {"layout", dtb::to_json(spec)},    {"checkpoint_dir", plan.dir},
            {"checkpoint_every", plan.every},  {"resume_from", plan.resume_from},
            {"matmul_precision", matmul_precision}, {"peak_tflops", peak_tflops}, {"references", references}};
  }
};

Params Params::parse(const json& section, const json& config, const WorldInfo& world) {
  Params p;
  p.model = gpt_config_from_json(config.at("model"));
  TrainConfig& train = p.cfg;
  train = train_config_from_json(section, config, "train");
  p.spec = layout_from_json(section, "train", p.model, train.micro_batches, train.global_batch, world.size,
                            train.seq_len);
  validate_train_config(train, p.model, p.spec.l.dp);
  // dp_allreduce "hierarchical": nodes of the world's ranks per node (real, or --ranks-per-node's).
  p.spec.hier_node_ranks = dp_allreduce_from_json(section, "train", node_size(world.ranks_per_node, world.options));
  train.precision = p.spec.precision;
  apply_recipe_keys(section, "train", train);  // loss scaling, clipping, DP sync (precision: the same)
  train.dp_sync.replicas = train.dp_sync.local_steps > 0 ? p.spec.l.dp : 1;  // DiLoCo: one replica per DP rank
  p.spec.dp_sync = train.dp_sync;
  const std::string backend = config.value("backend", "cpu");
  const bool cpu = backend == "cpu";
  require_half_ops(backend, train.precision, "train.precision");
  const std::string prec = section.at("matmul_precision");
  if (prec != "fp32" && prec != "tf32" && prec != "bf16" && prec != "fp16")
    throw InputError("train.matmul_precision: '" + prec + "' is not one of fp32, tf32, bf16, fp16");
  if (cpu && prec != "fp32") throw InputError("train.matmul_precision: the cpu backend computes in fp32 only, not " + prec);
  p.matmul_precision = prec;
  p.peak_tflops = number_in_range(section, "peak_tflops", "train.peak_tflops", 0.0, 1e6);
  p.plan = checkpoint_plan_from_json(section);
  if (p.plan.every > train.steps)  // it would never save (the checkpoint suite bounds its interval the same way)
    throw InputError("train.checkpoint_every = " + std::to_string(p.plan.every) + " exceeds train.steps = " +
                     std::to_string(train.steps) + ": no checkpoint would be saved");
  p.references = section.at("references").get<bool>();
  // Every rule of the layout (reference/layout/layout_validate.h), checkpoints included.
  LayoutCheckContext check{.world = world.size, .global_batch = train.global_batch, .seq_len = train.seq_len,
                           .backend = backend, .recipe = train, .checkpoint_every = p.plan.every,
                           .resume_from = p.plan.resume_from, .path = "train", .model_replicas = p.plain_dp()};
  validate_layout_spec(p.spec, p.model, check);
  const DpSync& d = train.dp_sync;
  if (d.local_steps > 0 && d.replicas > 1 && train.precision != Precision::fp32 && p.references)
    throw InputError("train.local_steps = " + std::to_string(d.local_steps) + " with precision " +
                     std::string(to_string(train.precision)) + " on " + std::to_string(d.replicas) +
                     " replicas: no reference (the one-rank reference simulates replicas in fp32 / fp64 only); set "
                     "train.references false");
  return p;
}

class TrainSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "train"; }
  std::string description() const override {
    return "GPT on real text on a tp x dp x pp layout (default: data parallel over all ranks) vs the single-rank baseline";
  }
  json defaults() const override {
    return {{"steps", 200},     {"global_batch", 16}, {"micro_batches", 2}, {"seq_len", 64},
            {"lr", 1e-3},       {"beta1", 0.9},       {"beta2", 0.95},      {"eps", 1e-8},
            {"weight_decay", 0.0}, {"matmul_precision", "fp32"}, {"peak_tflops", 0.0},
            {config_key(LayoutKey::tp), 1}, {config_key(LayoutKey::pp), 1}, {config_key(LayoutKey::dp), 0},
            {config_key(LayoutKey::ep), 1}, {config_key(LayoutKey::sequence_parallel), false}, {"schedule", "1f1b"},
            {config_key(LayoutKey::virtual_stages), 1}, {config_key(LayoutKey::pipeline_layers), json::array()},
            {config_key(LayoutKey::zero_stage), 0}, {config_key(LayoutKey::offload), "none"},
            {"reduce_bucket_size", 500000000},
            {"allgather_bucket_size", 500000000}, {"overlap_comm", false}, {"recompute", "none"},
            {"grad_clip", 0.0}, {"loss_scale", "auto"}, {"loss_scale_init", 65536.0},
            {"loss_scale_growth_interval", 2000}, {"precision", "fp32"},
            {config_key(LayoutKey::comm_type), "auto"},
            {"checkpoint_dir", ""}, {"checkpoint_every", 0}, {"resume_from", ""}, {"references", true},
            {config_key(LayoutKey::dp_allreduce), "flat"}, {config_key(LayoutKey::staleness), 0},
            {config_key(LayoutKey::delay_compensation), 0.0}, {config_key(LayoutKey::local_steps), 0},
            {"outer_lr", 0.7}, {"outer_momentum", 0.9}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(section, config, world);
    const GptConfig& model = p.model;
    const TrainConfig& train = p.cfg;
    const ParallelLayout& layout = p.spec.l;
    const ZeroConfig& zero = p.spec.z;
    // The references run side by side, one per rank, up to four at once on a node (on the
    // CPU backend only; on a GPU the model lives in the GPU's memory).
    if (config.value("backend", "cpu") == "cpu")
      check_fits_in_memory(train_memory_bytes(model, train), std::min(world.ranks_per_node, 4),
                           "train: the model and batch", world.options);
    // Checkpoints: the keys, and a checkpoint to resume from checked against this run (all
    // but the dataset, which is read later, and the rank files, which each rank checks).
    const CheckpointPlan& plan = p.plan;
    const std::string step_dir = resume_step_dir(plan);
    if (!step_dir.empty()) {
      CheckpointRunInfo info = checkpoint_run_info(model, layout, zero, train, "", p.spec.recompute);
      info.allowed_changes = world.options.allow_changed;
      const json m = check_checkpoint_manifest(step_dir, info);
      const int64_t k = m.at("step").get<int64_t>();
      if (k >= train.steps)
        throw InputError("train.resume_from: checkpoint " + printable(step_dir) + " is at step " + std::to_string(k) +
                         ", leaving no step of train.steps = " + std::to_string(train.steps) + " to run");
      history_from_json(m, k, train, step_dir);
      check_checkpoint_files(step_dir, m);  // sizes only; each rank checks its checksum when loading
    }
  }


  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "train suite needs a dataset");
    const Dataset& data = *ctx.dataset;
    Communicator& world = ctx.world;
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const GptConfig& model_cfg = p.model;
    const TrainConfig& cfg = p.cfg;
    const int n = world.size();
    const ParallelLayout& layout = p.spec.l;
    const ZeroConfig& zero = p.spec.z;
    const Recompute recompute = p.spec.recompute;
    const CheckpointPlan& plan = p.plan;
    const bool dp_only = p.plain_dp();
    const TrainFacts f{model_cfg, cfg, layout, zero, recompute, plan, dp_only,
                       dp_only ? std::string(spelling(LayoutKey::dp).name_key) + ":" + std::to_string(n)
                               : layout_record_name(p.spec),
                       double(cfg.global_batch) * cfg.seq_len, p.peak_tflops, p.spec.hier_node_ranks};
    const std::string kv = is_llama(model_cfg) ? " KV=" + std::to_string(kv_heads(model_cfg)) : "";
    ctx.print(std::string("# train: ") + (is_llama(model_cfg) ? "Llama" : "GPT") + " L=" + std::to_string(model_cfg.L) +
              " C=" + std::to_string(model_cfg.C) + " NH=" + std::to_string(model_cfg.NH) + kv +
              " T=" + std::to_string(cfg.seq_len) +
              " V=" + std::to_string(model_cfg.V) + ", " + std::to_string(gpt_num_params(model_cfg)) +
              " params, " + (dp_only ? "dp=" + std::to_string(n) : f.layout_name) + ", global batch " +
              std::to_string(cfg.global_batch) + " x " + std::to_string(cfg.micro_batches) +
              " micro-batches per DP rank, " + std::to_string(cfg.steps) + " steps");

    // 1. The layout under test. First its gradient at step 0, compared below before any
    // optimizer step can blur it (Adam is blind to a gradient's scale). On another backend
    // than the CPU the model runs there, its collectives over the device world (NCCL), and
    // only the throughput is measured: the references need the float64 oracle, which is the
    // CPU's; the CUDA ops are checked against the CPU's by the CUDA tests instead.
    Backend* be = ctx.backend;
    const bool on_cpu = be == nullptr || be->name() == "cpu";
    if (be) be->set_matmul_precision(p.matmul_precision);
    Communicator& dev_comm = ctx.device_world ? *ctx.device_world : world;
    LayoutOutcome run;
    // Where the step's compute time goes, per op family (CUDA events on a GPU).
    const std::unique_ptr<OpClock> clock = be ? be->make_op_clock() : make_host_op_clock();
    if (dp_only) {
      run = run_plain_dp(ctx, model_cfg, cfg, on_cpu ? nullptr : &be->ops(), dev_comm, *clock);
    } else {
      LayoutCheckpoints ck;
      if (plan.on()) {
        ck.dir = plan.dir, ck.every = plan.every, ck.resume_step_dir = resume_step_dir(plan);
        ck.allowed_changes = ctx.options.allow_changed;
        ck.note = [&](const std::string& line) { ctx.print("# train: " + line); };
        if (ck.resume_step_dir.empty() && plan.resume_from == "latest")
          ctx.print("# train: no checkpoint in " + plan.dir + " yet: a fresh run");
      }
      run = run_layout({.model = model_cfg, .layout = p.spec, .train = cfg,
                        .device = ctx.device, .ops = precision_ops(be), .host = world,
                        .device_comm = &dev_comm, .data = data, .gather = true, .spans = ctx.spans,
                        .checkpoints = plan.on() ? &ck : nullptr, .op_clock = clock.get(),
                        .step_slowdown = ctx.options.slowdown.train_step});
    }
    const int every = std::max(1, cfg.steps / 10);
    for (int s = 0; s < cfg.steps; ++s)
      if (s % every == 0 || s == cfg.steps - 1) ctx.print(fmt_step(s, run.losses[s]));

    // 2. References on one rank each, the whole global batch per step: the float64 oracle
    // and float32 runs with 1, 2 and 4 micro-batches (those that divide the batch). Not with
    // references: false (the regression gate's config, which times the steps only).
    const bool with_refs = on_cpu && p.references;
    const ReferenceSet refs = with_refs ? run_references(model_cfg, ctx.device, data, cfg, world) : ReferenceSet{};

    SuiteResult res;
    const StepSplit split = slowest_split(run, world);
    // Steps run here (all but those a resumed run took from its checkpoint): their timings.
    const json breakdown = step_breakdown_ms(ctx, world, split.slowest_rank, run.checkpoints.first_step);  // collective
    if (world.rank() != 0) return res;  // rank 0 reports
    res.benchmarks.push_back(train_record(f, run, split, breakdown, on_cpu ? "cpu" : be->name()));
    if (!with_refs) {
      device_results(f, run, ctx, res);
      print_device_line(f, split, on_cpu ? "cpu" : be->device_name(), ctx);
    } else {
      oracle_results(f, run, refs, ctx, res);
      print_cpu_line(f, split, n, run, refs, ctx);
    }
    return res;
  }

 private:
  static std::string fmt_step(int s, double loss) {
    char b[64];
    std::snprintf(b, sizeof b, "  step %5d  loss %.6f", s, loss);
    return b;
  }
};

}  // namespace

DTB_REGISTER_SUITE("train", TrainSuite);

}  // namespace dtb
