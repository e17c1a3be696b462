// The `train` suite: the reference GPT trained with data parallelism over every rank on
// real text, then the single-rank baseline (same seed, data and global batch) and the
// float64 oracle, and the conformance checks that compare them (DESIGN.md numerics
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

// How far a layout may stray from the float64 oracle, as a multiple of how far the
// single-rank float32 run strays from it. Both runs are float32 computations of the same
// sums in different orders, so their rounding errors against the oracle are draws of the
// same size; a ratio over 10 for the RMS-scaled loss error (a Gaussian 10-sigma event) or
// for a tensor's relative norm error (an average over many elements, so concentrated
// near 1) does not happen by rounding. A wrong average, a lost micro-batch or a stale
// gradient moves the loss by orders of magnitude more.
constexpr double kOracleFactor = 10.0;
// Floor: a few float32 ulps relative (u = 2^-24), for values where the single run's
// deviation happens to be (near) zero.
constexpr double kFloorUlps = 4.0 * 0x1.0p-24;

GptConfig model_from_json(const json& m) {
  GptConfig c;
  c.L = m.at("L");
  c.C = m.at("C");
  c.NH = m.at("NH");
  c.T = m.at("T");
  c.V = m.at("V");
  return c;
}

TrainConfig train_from_json(const json& s, const json& config) {
  TrainConfig t;
  t.steps = s.at("steps");
  t.global_batch = s.at("global_batch");
  t.micro_batches = s.at("micro_batches");
  t.seq_len = s.at("seq_len");
  t.seed = config.at("seed").get<uint64_t>();
  t.adamw.lr = s.at("lr");
  t.adamw.beta1 = s.at("beta1");
  t.adamw.beta2 = s.at("beta2");
  t.adamw.eps = s.at("eps");
  t.adamw.weight_decay = s.at("weight_decay");
  return t;
}

double rel_norm_diff(const double* a, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class TrainSuite : public Suite {
 public:
  std::string name() const override { return "train"; }
  std::string description() const override {
    return "GPT on real text with data parallelism over all ranks vs the single-rank baseline";
  }
  json defaults() const override {
    return {{"steps", 100},     {"global_batch", 16}, {"micro_batches", 2}, {"seq_len", 64},
            {"lr", 3e-3},       {"beta1", 0.9},       {"beta2", 0.95},      {"eps", 1e-8},
            {"weight_decay", 0.0}};
  }
  void validate(const json& section, const json& config, int world_size) const override {
    const GptConfig model = model_from_json(config.at("model"));
    validate_gpt_config(model);
    validate_train_config(train_from_json(section, config), model, world_size);
    if (double(section.at("lr")) <= 0) throw InputError("train.lr must be positive");
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "train suite needs a dataset");
    const Dataset& data = *ctx.dataset;
    Communicator& world = ctx.world;
    const GptConfig model_cfg = model_from_json(ctx.config.at("model"));
    const TrainConfig cfg = train_from_json(ctx.section, ctx.config);
    const int n = world.size();
    const double tokens_per_step = double(cfg.global_batch) * cfg.seq_len;
    ctx.print("# train: GPT L=" + std::to_string(model_cfg.L) + " C=" + std::to_string(model_cfg.C) +
              " NH=" + std::to_string(model_cfg.NH) + " T=" + std::to_string(cfg.seq_len) +
              " V=" + std::to_string(model_cfg.V) + ", " + std::to_string(gpt_num_params(model_cfg)) +
              " params, dp=" + std::to_string(n) + ", global batch " +
              std::to_string(cfg.global_batch) + " x " + std::to_string(cfg.micro_batches) +
              " micro-batches per rank, " + std::to_string(cfg.steps) + " steps");

    // 1. The layout under test: DP over all ranks.
    Gpt<float> model(model_cfg, ctx.device);
    model.init(cfg.seed);
    world.barrier();
    const TrainRun dp_run = train(model, data, cfg, world);
    for (int s = 0; s < cfg.steps; s += std::max(1, cfg.steps / 10))
      ctx.print(fmt_step(s, dp_run.losses[s]));
    ctx.print(fmt_step(cfg.steps - 1, dp_run.losses.back()));

    // DP replicas must hold the same parameters: compare with rank 0's, bitwise.
    const size_t P = model.num_params();
    std::vector<float> root_params(model.params(), model.params() + P);
    world.broadcast(root_params.data(), P, DType::f32, 0);
    double replica_diff = 0;
    for (size_t i = 0; i < P; ++i)
      replica_diff = std::max(replica_diff, double(std::fabs(root_params[i] - model.params()[i])));
    world.all_reduce(&replica_diff, &replica_diff, 1, DType::f64, ReduceOp::max);

    // 2. Baseline (float32, rank 0) and oracle (float64, rank 1, or rank 0 alone), each on
    // one rank with the whole global batch in one micro-batch.
    TrainConfig single = cfg;
    single.micro_batches = 1;
    const int oracle_rank = n > 1 ? 1 : 0;
    std::vector<double> base_losses, orc_losses(cfg.steps), base_params, orc_params(P);
    double base_step_s = 0;
    auto self = make_mpi_self();
    if (world.rank() == 0) {
      Gpt<float> base(model_cfg, ctx.device);
      base.init(cfg.seed);
      const TrainRun r = train(base, data, single, *self);
      base_losses = r.losses;
      base_params.assign(base.params(), base.params() + P);
      std::vector<double> st;
      for (const auto& t : r.timings) st.push_back(t.step_s);
      base_step_s = summarize(st).median;
    }
    if (world.rank() == oracle_rank) {
      Gpt<double> orc(model_cfg, ctx.device);
      orc.init(cfg.seed);
      const TrainRun r = train(orc, data, single, *self);
      orc_losses = r.losses;
      orc_params.assign(orc.params(), orc.params() + P);
    }
    if (oracle_rank != 0) {
      if (world.rank() == oracle_rank) {
        world.send(orc_losses.data(), orc_losses.size(), DType::f64, 0, 1);
        world.send(orc_params.data(), P, DType::f64, 0, 2);
      } else if (world.rank() == 0) {
        world.recv(orc_losses.data(), orc_losses.size(), DType::f64, oracle_rank, 1);
        world.recv(orc_params.data(), P, DType::f64, oracle_rank, 2);
      }
    }
    world.barrier();

    SuiteResult res;
    // Timings: per step, max over ranks (the slowest rank sets the pace).
    std::vector<double> step_s, compute_s, comm_s;
    for (const auto& t : dp_run.timings) {
      double v[3] = {t.step_s, t.compute_s, t.comm_s};
      world.all_reduce(v, v, 3, DType::f64, ReduceOp::max);
      step_s.push_back(v[0]);
      compute_s.push_back(v[1]);
      comm_s.push_back(v[2]);
    }
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
    rec["comm_fraction"] = comm.median / step.median;
    rec["final_loss"] = dp_run.losses.back();
    res.benchmarks.push_back(rec);
    json brec = benchmark_record("train/gpt/baseline:1", cfg.steps, 1, base_step_s, base_step_s, "ms");
    brec["dp"] = 1;
    brec["tokens_per_s"] = tokens_per_step / base_step_s;
    brec["final_loss"] = base_losses.back();
    res.benchmarks.push_back(brec);

    // Per-step loss: |dp - oracle| against k * RMS_s |baseline - oracle| + floor.
    double ss = 0;
    for (int s = 0; s < cfg.steps; ++s) ss += std::pow(base_losses[s] - orc_losses[s], 2);
    const double scale = std::sqrt(ss / cfg.steps);
    for (int s = 0; s < cfg.steps; ++s) {
      const double dev = std::fabs(dp_run.losses[s] - orc_losses[s]);
      const double tol = kOracleFactor * scale + kFloorUlps * std::fabs(orc_losses[s]);
      res.checks.push_back(make_check(
          "train/loss/step:" + std::to_string(s), dev, tol,
          "|loss_dp - loss_f64| <= 10 x RMS over steps of |loss_1rank - loss_f64| + 4 ulp"));
    }
    // Final parameters, per tensor: relative norm error against the oracle.
    std::vector<double> dp_params(model.params(), model.params() + P);
    for (const auto& t : model.layout()) {
      const double dev = rel_norm_diff(dp_params.data() + t.offset, orc_params.data() + t.offset, t.numel);
      const double dev1 = rel_norm_diff(base_params.data() + t.offset, orc_params.data() + t.offset, t.numel);
      res.checks.push_back(make_check(
          "train/params/" + t.name, dev, kOracleFactor * dev1 + kFloorUlps,
          "||p_dp - p_f64|| / ||p_f64|| <= 10 x the 1-rank run's + 4 ulp"));
    }
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

    res.data = {{"model", ctx.config.at("model")},
                {"num_params", P},
                {"tokens_per_step", tokens_per_step},
                {"losses", {{"dp", dp_run.losses}, {"baseline", base_losses}, {"oracle_f64", orc_losses}}}};
    char line[256];
    std::snprintf(line, sizeof line,
                  "# train: dp=%d %.0f tokens/s (step %.1f ms: compute %.1f, comm %.1f); "
                  "1 rank %.0f tokens/s; final loss %.4f (1 rank %.4f, f64 %.4f)",
                  n, tokens_per_step / step.median, step.median * 1e3, comp.median * 1e3,
                  comm.median * 1e3, tokens_per_step / base_step_s, dp_run.losses.back(),
                  base_losses.back(), orc_losses.back());
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
