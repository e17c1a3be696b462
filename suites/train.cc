// The `train` suite: the reference GPT trained with data parallelism over every rank on
// real text, then the single-rank baseline (same seed, data and global batch) and the
// float64 oracle, and the conformance checks that compare them (docs/numerics.md).
// Reports tokens/s and the step time split into compute and communication. Here: the section,
// the runs; what they report in suites/train_results.h, the checkpoint settings in
// suites/train_checkpoint.h.
#include <cmath>
#include <cstdio>

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
#include "suites/train_checkpoint.h"
#include "suites/train_results.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace train_suite;

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
  // Synchronous (Params::plain_dp); spans: --trace.
  const TrainRun r = train(model, data, cfg, DpSync{}, dev_comm, ctx.spans, ctx.options.slowdown.train_step);
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

// The section, typed: the one parse validate() and run() use.
struct Params {
  GptConfig model;
  TrainConfig cfg;
  LayoutSpec spec;  // its precision and DP sync recipe too
  CheckpointPlan plan;
  std::string matmul_precision;
  double peak_tflops = 0;
  bool references = true;  // on the CPU: the single-rank references and the float64 oracle, and their checks
  /// Plain DP (reference/training/trainer.h) unless the layout, ZeRO, recompute, loss scaling, a half
  /// precision or checkpoints need the sharded model.
  bool plain_dp() const {
    const ParallelLayout& l = spec.l;
    return !plan.on() && spec.dp_sync.synchronous() && l.tp == 1 && l.cp == 1 && l.pp == 1 && l.ep == 1 && spec.z.stage == 0 &&
           spec.recompute == Recompute::none && !cfg.loss_scaler.enabled && spec.precision == Precision::fp32 &&
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
  apply_recipe_keys(section, "train", train, p.spec);  // loss scaling, clipping, DP sync (precision: the same)
  p.spec.dp_sync.replicas = p.spec.dp_sync.local_steps > 0 ? p.spec.l.dp : 1;  // DiLoCo: one replica per DP rank
  const std::string backend = config.value("backend", "cpu");
  const bool cpu = backend == "cpu";
  require_half_ops(backend, p.spec.precision, "train.precision");
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
                           .resume_from = p.plan.resume_from, .path = "train"};
  validate_layout_spec(p.spec, p.model, check);
  const DpSync& d = p.spec.dp_sync;
  if (d.local_steps > 0 && d.replicas > 1 && p.spec.precision != Precision::fp32 && p.references)
    throw InputError("train.local_steps = " + std::to_string(d.local_steps) + " with precision " +
                     std::string(to_string(p.spec.precision)) + " on " + std::to_string(d.replicas) +
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
            {config_key(LayoutKey::cp), 1}, {config_key(LayoutKey::cp_comm_type), "p2p"},
            {config_key(LayoutKey::virtual_stages), 1}, {config_key(LayoutKey::pipeline_layers), json::array()},
            {config_key(LayoutKey::zero_stage), 0}, {config_key(LayoutKey::offload), "none"},
            {"reduce_bucket_size", 500000000},
            {"allgather_bucket_size", 500000000}, {"overlap_comm", false}, {"recompute", "none"},
            {"grad_clip", 0.0}, {"loss_scale", "auto"}, {"loss_scale_init", 65536.0},
            {"loss_scale_growth_interval", 2000}, {"precision", "fp32"}, {"fp8", fp8_settings_json(Fp8Settings{})},
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
      CheckpointRunInfo info =
          checkpoint_run_info(model, layout, zero, p.spec.precision, train, "", p.spec.recompute, p.spec.fp8);
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
    const CheckpointPlan& plan = p.plan;
    const bool dp_only = p.plain_dp();
    const TrainFacts f{model_cfg, cfg, p.spec, plan, dp_only,
                       dp_only ? std::string(spelling(LayoutKey::dp).name_key) + ":" + std::to_string(n)
                               : layout_record_name(p.spec),
                       double(cfg.global_batch) * cfg.seq_len, p.peak_tflops};
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
    const ReferenceSet refs = with_refs ? run_references(model_cfg, ctx.device, data, cfg, p.spec.precision,
                                                         p.spec.dp_sync, world, nullptr, p.spec.fp8)
                                        : ReferenceSet{};

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
