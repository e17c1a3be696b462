// The `train` suite: the reference GPT trained with data parallelism over every rank on
// real text, then the single-rank baseline (same seed, data and global batch) and the
// float64 oracle, and the conformance checks that compare them (README.md, numerics
// contract). Reports tokens/s and the step time split into compute and communication.
#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/timer.h"
#include "reference/trainer.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

// Tolerances from the float64 oracle (README.md, numerics contract). A float32 run's
// deviation from the oracle is rounding error amplified by the training dynamics: Adam
// turns a rounding-level change of a near-zero gradient into an update of size lr, so
// after tens of steps every float32 run, the layout under test and the single-rank ones
// alike, sits ~1e-3 (relative) from the oracle along a few unstable directions. The size
// of a run's deviation is then a random draw: the ratio of two runs' deviations behaves
// like |a|/|b| for independent Gaussians (a Cauchy tail, P(ratio > k) = (2/pi) atan(1/k)),
// measured here from 0.5 to 3.4 over seven seeds. So the scale is the LARGEST deviation of
// m single-rank float32 references that sum in different orders (micro-batches 1, 2, 4),
// and P(|a| > k max(|b_1..m|)) ~ (2/pi)^(m/2) E|a|^m / k^m: for m = 3 and k = 10 that is
// 8e-4, for m = 2 and k = 25 it is 6e-4, for m = 1 and k = 640 it is 1e-3. The per-step
// checks of one run follow one trajectory, so they fail together or not at all: the rate
// is per run, not per check (measured: the worst ratio over 20 seeds is in the README).
// The step-0 gradient is compared too, before the dynamics: there every run's error is
// plain rounding, a norm over many elements that does not scatter like a ratio of
// Gaussians, and a wrong average (the gradient off by a factor: relative error >= 0.5)
// misses its ~1e-6 tolerance by five orders of magnitude. Adam's update is nearly blind
// to a gradient's scale, so the loss checks alone would not see that bug for some steps.
double oracle_factor(int refs) { return refs >= 3 ? 10.0 : refs == 2 ? 25.0 : 640.0; }
// Floors, for values where every reference's deviation happens to be (near) zero: a few
// float32 ulps (u = 2^-24) relative for a tensor, and for a loss, the mean of N float32
// token losses, the standard size of its rounding error, u |loss| / sqrt(N).
constexpr double kUlp = 0x1.0p-24;
constexpr double kFloorUlps = 4.0 * kUlp;

// A single-rank reference run: its step-0 gradient, per-step losses and final parameters.
struct Reference {
  Reference(int steps, size_t P) : losses(steps), params(P), grads0(P) {}
  std::vector<double> losses, params, grads0;
};

template <typename T>
Reference run_reference(const GptConfig& model_cfg, Device& device, const Dataset& data,
                        const TrainConfig& cfg, Communicator& self) {
  Gpt<T> m(model_cfg, device);
  m.init(cfg.seed);
  compute_gradients(m, data, cfg, 0, self);  // leaves the parameters as initialised
  Reference r(cfg.steps, m.num_params());
  r.grads0.assign(m.grads(), m.grads() + m.num_params());
  r.losses = train(m, data, cfg, self).losses;
  r.params.assign(m.params(), m.params() + m.num_params());
  return r;
}

TrainConfig train_from_json(const json& s, const json& config) {
  TrainConfig t;
  t.steps = int(int_in_range(s, "steps", "train.steps", 1, 1000000));
  t.global_batch = int(int_in_range(s, "global_batch", "train.global_batch", 1, 1 << 20));
  t.micro_batches = int(int_in_range(s, "micro_batches", "train.micro_batches", 1, 1 << 20));
  t.seq_len = int(int_in_range(s, "seq_len", "train.seq_len", 1, 1 << 20));
  t.seed = config.at("seed").get<uint64_t>();
  t.adamw.lr = float(number_in_range(s, "lr", "train.lr", 1e-12, 1.0));
  t.adamw.beta1 = float(number_in_range(s, "beta1", "train.beta1", 0.0, 0.999999));
  t.adamw.beta2 = float(number_in_range(s, "beta2", "train.beta2", 0.0, 0.999999));
  t.adamw.eps = float(number_in_range(s, "eps", "train.eps", 1e-30, 1.0));
  t.adamw.weight_decay = float(number_in_range(s, "weight_decay", "train.weight_decay", 0.0, 1.0));
  return t;
}

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

double rel_norm_diff(const double* a, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The DP run's step breakdown from ctx.spans, when recorded (--trace): per span name, the
// median over steps of the seconds the step's slowest rank (slowest[s], as for the step
// times) spent in it, in ms; a name absent from a step counts 0 there. An empty object
// when no spans were recorded. Collective over `world`; the result is rank 0's.
json step_breakdown_ms(const SuiteContext& ctx, Communicator& world, const std::vector<int>& slowest) {
  if (!ctx.spans || !ctx.spans->enabled()) return json::object();
  const auto names = span_names();
  const size_t K = names.size(), steps = slowest.size();
  std::vector<double> mine(steps * K, -1.0);  // [step][name], -1: absent
  for (size_t s = 0; s < steps; ++s)
    for (const auto& [name, sec] : ctx.spans->breakdown(int64_t(s))) mine[s * K + span_name_index(name)] = sec;
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

class TrainSuite : public Suite {
 public:
  std::string name() const override { return "train"; }
  std::string description() const override {
    return "GPT on real text with data parallelism over all ranks vs the single-rank baseline";
  }
  json defaults() const override {
    return {{"steps", 200},     {"global_batch", 16}, {"micro_batches", 2}, {"seq_len", 64},
            {"lr", 1e-3},       {"beta1", 0.9},       {"beta2", 0.95},      {"eps", 1e-8},
            {"weight_decay", 0.0}, {"matmul_precision", "fp32"}, {"peak_tflops", 0.0}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const GptConfig model = gpt_config_from_json(config.at("model"));
    const TrainConfig train = train_from_json(section, config);
    validate_train_config(train, model, world.size);
    const std::string prec = section.at("matmul_precision");
    if (prec != "fp32" && prec != "tf32" && prec != "bf16" && prec != "fp16")
      throw InputError("train.matmul_precision: '" + prec + "' is not one of fp32, tf32, bf16, fp16");
    if (config.value("backend", "cpu") == "cpu" && prec != "fp32")
      throw InputError("train.matmul_precision: the cpu backend computes in fp32 only, not " + prec);
    number_in_range(section, "peak_tflops", "train.peak_tflops", 0.0, 1e6);
    // The references run side by side, one per rank, up to four at once on a node (on the
    // CPU backend only; on a GPU the model lives in the GPU's memory).
    if (config.value("backend", "cpu") == "cpu")
      check_fits_in_memory(train_memory_bytes(model, train), std::min(world.ranks_per_node, 4),
                           "train: the model and batch");
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "train suite needs a dataset");
    const Dataset& data = *ctx.dataset;
    Communicator& world = ctx.world;
    const GptConfig model_cfg = gpt_config_from_json(ctx.config.at("model"));
    const TrainConfig cfg = train_from_json(ctx.section, ctx.config);
    const int n = world.size();
    const double tokens_per_step = double(cfg.global_batch) * cfg.seq_len;
    ctx.print("# train: GPT L=" + std::to_string(model_cfg.L) + " C=" + std::to_string(model_cfg.C) +
              " NH=" + std::to_string(model_cfg.NH) + " T=" + std::to_string(cfg.seq_len) +
              " V=" + std::to_string(model_cfg.V) + ", " + std::to_string(gpt_num_params(model_cfg)) +
              " params, dp=" + std::to_string(n) + ", global batch " +
              std::to_string(cfg.global_batch) + " x " + std::to_string(cfg.micro_batches) +
              " micro-batches per rank, " + std::to_string(cfg.steps) + " steps");

    // 1. The layout under test: DP over all ranks. First its gradient at step 0, compared
    // below before any optimizer step can blur it (Adam is blind to a gradient's scale).
    // On another backend than the CPU the model runs there, its gradients all-reduced over
    // the device world (NCCL), and only the throughput is measured: the references need the
    // float64 oracle, which is the CPU's; the CUDA ops are checked against the CPU's by the
    // CUDA tests instead.
    Backend* be = ctx.backend;
    const bool on_cpu = be == nullptr || be->name() == "cpu";
    if (be) be->set_matmul_precision(ctx.section.at("matmul_precision"));
    Communicator& dp = ctx.device_world ? *ctx.device_world : world;
    Gpt<float> model(model_cfg, ctx.device, on_cpu ? nullptr : &be->ops());
    auto to_host = [&](const float* p, size_t count) {
      std::vector<float> h(count);
      model.ops().copy_to_host(h.data(), p, count * sizeof(float));
      return h;
    };
    model.init(cfg.seed);
    compute_gradients(model, data, cfg, 0, dp);
    std::vector<double> dp_grads0;  // compared with the references, on the CPU only
    if (on_cpu) {
      const std::vector<float> g = to_host(model.grads(), model.num_params());
      dp_grads0.assign(g.begin(), g.end());
    }
    world.barrier();
    const TrainRun dp_run = train(model, data, cfg, dp, ctx.spans);  // spans: --trace
    const int every = std::max(1, cfg.steps / 10);
    for (int s = 0; s < cfg.steps; ++s)
      if (s % every == 0 || s == cfg.steps - 1) ctx.print(fmt_step(s, dp_run.losses[s]));

    // DP replicas must hold the same parameters: compare with rank 0's, bitwise.
    const size_t P = model.num_params();
    const std::vector<float> my_params = to_host(model.params(), P);
    std::vector<float> root_params = my_params;
    world.broadcast(root_params.data(), P, DType::f32, 0);
    double replica_diff = 0;
    for (size_t i = 0; i < P; ++i)
      replica_diff = std::max(replica_diff, double(std::fabs(root_params[i] - my_params[i])));
    world.all_reduce(&replica_diff, &replica_diff, 1, DType::f64, ReduceOp::max);

    // 2. References on one rank each, the whole global batch per step: the float64 oracle
    // and float32 runs with 1, 2 and 4 micro-batches (those that divide the batch). Job j
    // runs on rank j % n, so they run side by side; results go to rank 0.
    std::vector<int> ref_mbs;
    for (int mb : {1, 2, 4})
      if (on_cpu && cfg.global_batch % mb == 0) ref_mbs.push_back(mb);
    const int refs = int(ref_mbs.size());
    std::vector<Reference> ref(refs + 1, Reference(cfg.steps, on_cpu ? P : 0));
    auto self = make_mpi_self();
    for (int j = 0; on_cpu && j <= refs; ++j) {  // j == refs: the oracle
      const int owner = j % n;
      if (world.rank() == owner) {
        TrainConfig single = cfg;
        single.micro_batches = j < refs ? ref_mbs[j] : 1;
        ref[j] = j < refs ? run_reference<float>(model_cfg, ctx.device, data, single, *self)
                          : run_reference<double>(model_cfg, ctx.device, data, single, *self);
      }
      if (owner != 0 && world.rank() == owner) {
        world.send(ref[j].losses.data(), cfg.steps, DType::f64, 0, 3 * j);
        world.send(ref[j].params.data(), P, DType::f64, 0, 3 * j + 1);
        world.send(ref[j].grads0.data(), P, DType::f64, 0, 3 * j + 2);
      } else if (owner != 0 && world.rank() == 0) {
        world.recv(ref[j].losses.data(), cfg.steps, DType::f64, owner, 3 * j);
        world.recv(ref[j].params.data(), P, DType::f64, owner, 3 * j + 1);
        world.recv(ref[j].grads0.data(), P, DType::f64, owner, 3 * j + 2);
      }
    }
    world.barrier();
    const std::vector<double>& orc_losses = ref[refs].losses;

    SuiteResult res;
    // Timings: per step, the slowest rank's (it sets the pace), split as that rank saw it;
    // its communication time includes waiting for the others (exposed communication).
    std::vector<double> mine;
    for (const auto& t : dp_run.timings) mine.insert(mine.end(), {t.step_s, t.compute_s, t.comm_s});
    std::vector<double> all(mine.size() * n);
    world.all_gather(mine.data(), all.data(), mine.size(), DType::f64);
    std::vector<double> step_s, compute_s, comm_s;
    std::vector<int> slowest_rank;  // per step
    for (int s = 0; s < cfg.steps; ++s) {
      int slowest = 0;
      for (int r = 1; r < n; ++r)
        if (all[r * mine.size() + 3 * s] > all[slowest * mine.size() + 3 * s]) slowest = r;
      const double* v = &all[slowest * mine.size() + 3 * s];
      step_s.push_back(v[0]);
      compute_s.push_back(v[1]);
      comm_s.push_back(v[2]);
      slowest_rank.push_back(slowest);
    }
    const json breakdown = step_breakdown_ms(ctx, world, slowest_rank);  // collective
    if (world.rank() != 0) return res;  // rank 0 reports

    const Summary step = summarize(step_s), comp = summarize(compute_s), comm = summarize(comm_s);
    json rec = benchmark_record("train/gpt/dp:" + std::to_string(n), cfg.steps, 1, step.median,
                                step.median, "ms");
    rec["dp"] = n;
    rec["steps"] = cfg.steps;
    rec["tokens_per_step"] = tokens_per_step;
    rec["tokens_per_s"] = tokens_per_step / step.median;
    rec["step_time_ms"] = to_json(step, 1e3);
    rec["compute_time_ms"] = to_json(comp, 1e3);
    rec["comm_time_ms"] = to_json(comm, 1e3);
    std::vector<double> fraction;
    for (int s = 0; s < cfg.steps; ++s) fraction.push_back(comm_s[s] / step_s[s]);
    rec["comm_fraction"] = summarize(fraction).median;  // per step, then the median
    if (!breakdown.empty()) rec["step_breakdown_ms"] = breakdown;
    rec["final_loss"] = dp_run.losses.back();
    // Model FLOPs per token, forward and backward: 6 N for the weights plus 12 L C T for
    // attention's scores and values (Chowdhery et al. 2022, PaLM, appendix B).
    const double flops_per_token = 6.0 * double(P) + 12.0 * model_cfg.L * double(model_cfg.C) * cfg.seq_len;
    const double model_tflops = flops_per_token * tokens_per_step / step.median / 1e12;
    rec["backend"] = on_cpu ? "cpu" : be->name();
    rec["model_flops_per_token"] = flops_per_token;
    rec["model_tflops"] = model_tflops;
    const double peak = ctx.section.at("peak_tflops");
    if (peak > 0) rec["mfu"] = model_tflops / peak;
    res.benchmarks.push_back(rec);
    if (!on_cpu) {
      res.checks.push_back(make_check("train/dp_replicas_identical", replica_diff, 0.0,
                                      "max |p_rank - p_rank0| over ranks, bitwise"));
      // The CUDA ops are checked against the CPU's by the CUDA tests; here, that the model
      // starts near the uniform loss ln V (GPT-2 init: logits ~0) and learns.
      res.checks.push_back(make_check("train/loss_step0_near_uniform",
                                      std::fabs(dp_run.losses.front() - std::log(double(model_cfg.V))), 0.5,
                                      "|loss_0 - ln V| <= 0.5"));
      res.checks.push_back(make_check("train/loss_falls", dp_run.losses.back() / dp_run.losses.front(), 0.99,
                                      "last loss / first loss <= 0.99"));
      res.data = {{"model", ctx.config.at("model")}, {"num_params", P}, {"losses", {{"dp", dp_run.losses}}}};
      char line[200];
      std::snprintf(line, sizeof line, "# train on %s: %.0f tokens/s, step %.2f ms, %.1f model TFLOP/s%s",
                    be->device_name().c_str(), tokens_per_step / step.median, step.median * 1e3, model_tflops,
                    peak > 0 ? (", MFU " + std::to_string(100 * model_tflops / peak).substr(0, 5) + "%").c_str() : "");
      ctx.print(line);
      return res;
    }

    // Per-step loss: |dp - oracle| against k x the references' largest deviation so far
    // (deviations grow along the run, so the envelope up to step s is the scale at s).
    const double k = oracle_factor(refs);
    const std::string how = "k=" + std::to_string(int(k)) + " x max deviation of " +
                            std::to_string(refs) + " single-rank f32 references";
    const double mean_floor = kUlp / std::sqrt(tokens_per_step);
    double envelope = 0;
    for (int s = 0; s < cfg.steps; ++s) {
      for (int j = 0; j < refs; ++j) envelope = std::max(envelope, std::fabs(ref[j].losses[s] - orc_losses[s]));
      const double dev = std::fabs(dp_run.losses[s] - orc_losses[s]);
      const double tol = k * envelope + mean_floor * std::fabs(orc_losses[s]);
      res.checks.push_back(make_check("train/loss/step:" + std::to_string(s), dev, tol,
                                      "|loss_dp - loss_f64| <= " + how + " + u|loss|/sqrt(tokens)"));
    }
    // Per tensor, relative norm error against the oracle: the step-0 gradient (rounding
    // only, no dynamics yet) and the final parameters.
    const std::vector<double> dp_params(model.params(), model.params() + P);
    auto tensor_checks = [&](const std::string& prefix, const std::vector<double>& dp,
                             std::vector<double> Reference::*field) {
      const std::vector<double>& orc = ref[refs].*field;
      for (const auto& t : model.layout()) {
        const double dev = rel_norm_diff(dp.data() + t.offset, orc.data() + t.offset, t.numel);
        double scale = 0;
        for (int j = 0; j < refs; ++j)
          scale = std::max(scale, rel_norm_diff((ref[j].*field).data() + t.offset, orc.data() + t.offset, t.numel));
        res.checks.push_back(make_check(prefix + t.name, dev, k * scale + kFloorUlps,
                                        "||x_dp - x_f64|| / ||x_f64|| <= " + how + " + 4 ulp"));
      }
    };
    tensor_checks("train/grads/step:0/", dp_grads0, &Reference::grads0);
    tensor_checks("train/params/", dp_params, &Reference::params);
    res.checks.push_back(make_check("train/dp_replicas_identical", replica_diff, 0.0,
                                    "max |p_rank - p_rank0| over ranks, bitwise"));
    // Learning: the mean of the last 10% of losses well below the uniform ln(256) = 5.55.
    const int tail = std::max(1, cfg.steps / 10);
    double tail_loss = 0;
    for (int s = cfg.steps - tail; s < cfg.steps; ++s) tail_loss += dp_run.losses[s];
    tail_loss /= tail;
    const double uniform = std::log(double(model_cfg.V));
    res.checks.push_back(make_check("train/loss_below_uniform", tail_loss, 0.75 * uniform,
                                    "mean loss of the last 10% of steps <= 0.75 ln V"));

    json losses = {{"dp", dp_run.losses}, {"oracle_f64", orc_losses}};
    for (int j = 0; j < refs; ++j)
      losses["single_rank_f32_micro_batches:" + std::to_string(ref_mbs[j])] = ref[j].losses;
    res.data = {{"model", ctx.config.at("model")},
                {"num_params", P},
                {"tokens_per_step", tokens_per_step},
                {"dataset", {{"path", data.path}, {"bytes", data.bytes.size()}, {"sha256", data.sha256}}},
                {"oracle_factor", k},
                {"losses", losses}};
    char line[256];
    std::snprintf(line, sizeof line,
                  "# train: dp=%d %.0f tokens/s (step %.1f ms: compute %.1f, comm %.1f); "
                  "final loss %.4f (1 rank %.4f, f64 %.4f)",
                  n, tokens_per_step / step.median, step.median * 1e3, comp.median * 1e3,
                  comm.median * 1e3, dp_run.losses.back(), ref[0].losses.back(), orc_losses.back());
    ctx.print(line);
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
