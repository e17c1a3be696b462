// What a train suite run reports (suites/train_results.h): records, checks and data, and the
// lines printed beside them.
#include "suites/train_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "reference/training/spans.h"

namespace dtb::train_suite {

using nlohmann::json;

namespace {

// Model FLOPs per token of the run (reference/model/gpt.h: 6 N + 12 L C T, PaLM appendix B).
double model_flops_per_token(const TrainFacts& f) { return dtb::model_flops_per_token(f.model, f.cfg.seq_len); }

double model_tflops(const TrainFacts& f, const StepSplit& sp) {
  return model_flops_per_token(f) * f.tokens_per_step / sp.step.median / 1e12;
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

}  // namespace

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

json step_breakdown_ms(const SuiteContext& ctx, Communicator& world, const std::vector<int>& slowest,
                       int64_t first_step) {
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

json train_record(const TrainFacts& f, const LayoutOutcome& run, const StepSplit& sp, const json& breakdown,
                  const std::string& backend) {
  const int timed = int(run.timings.size());
  json rec = benchmark_record(std::string("train/") + (is_llama(f.model) ? "llama/" : "gpt/") + f.layout_name, timed, 1,
                              sp.step.median, sp.step.median, "ms");
  add_layout_fields(rec, f.spec);
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
  if (f.spec.precision != Precision::fp32)  // the stated bounds of the fp32 trajectory (suites/oracle.h)
    for (Check& c : half_vs_fp32_checks("train/", f.spec.precision, run.losses, refs.oracle.losses))
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

}  // namespace dtb::train_suite
