#include "suites/oracle.h"

#include <cmath>

namespace dtb {

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
double ReferenceSet::factor() const {
  const size_t m = f32.size();
  return m >= 3 ? 10.0 : m == 2 ? 25.0 : 640.0;
}

std::string ReferenceSet::how() const {
  return "k=" + std::to_string(int(factor())) + " x max deviation of " + std::to_string(f32.size()) +
         " single-rank f32 references";
}

namespace {
// Floors, for values where every reference's deviation happens to be (near) zero: a few
// float32 ulps (u = 2^-24) relative for a tensor, and for a loss, the mean of N float32
// token losses, the standard size of its rounding error, u |loss| / sqrt(N).
constexpr double kUlp = 0x1.0p-24;
constexpr double kFloorUlps = 4.0 * kUlp;

template <typename T>
Reference run_reference(const GptConfig& model_cfg, Device& device, const Dataset& data, const TrainConfig& cfg,
                        Communicator& self) {
  Gpt<T> m(model_cfg, device);
  m.init(cfg.seed);
  compute_gradients(m, data, cfg, 0, self);  // leaves the parameters as initialised
  Reference r(cfg.steps, m.num_params());
  r.grads0.assign(m.grads(), m.grads() + m.num_params());
  r.losses = train(m, data, cfg, self).losses;
  r.params.assign(m.params(), m.params() + m.num_params());
  return r;
}
}  // namespace

TrainConfig train_config_from_json(const nlohmann::json& s, const nlohmann::json& config, const std::string& path) {
  TrainConfig t;
  t.steps = int(int_in_range(s, "steps", path + ".steps", 1, 1000000));
  t.global_batch = int(int_in_range(s, "global_batch", path + ".global_batch", 1, 1 << 20));
  t.micro_batches = int(int_in_range(s, "micro_batches", path + ".micro_batches", 1, 1 << 20));
  t.seq_len = int(int_in_range(s, "seq_len", path + ".seq_len", 1, 1 << 20));
  t.seed = config.at("seed").get<uint64_t>();
  t.adamw.lr = float(number_in_range(s, "lr", path + ".lr", 1e-12, 1.0));
  t.adamw.beta1 = float(number_in_range(s, "beta1", path + ".beta1", 0.0, 0.999999));
  t.adamw.beta2 = float(number_in_range(s, "beta2", path + ".beta2", 0.0, 0.999999));
  t.adamw.eps = float(number_in_range(s, "eps", path + ".eps", 1e-30, 1.0));
  t.adamw.weight_decay = float(number_in_range(s, "weight_decay", path + ".weight_decay", 0.0, 1.0));
  return t;
}

ReferenceSet run_references(const GptConfig& model_cfg, Device& device, const Dataset& data, const TrainConfig& cfg,
                            Communicator& world) {
  ReferenceSet set;
  for (int mb : {1, 2, 4})
    if (cfg.global_batch % mb == 0) set.micro_batches.push_back(mb);
  const int refs = int(set.micro_batches.size()), n = world.size();
  const size_t P = gpt_num_params(model_cfg);
  std::vector<Reference> all(refs + 1, Reference(cfg.steps, P));
  auto self = make_mpi_self();
  for (int j = 0; j <= refs; ++j) {  // j == refs: the oracle
    const int owner = j % n;
    if (world.rank() == owner) {
      TrainConfig single = cfg;
      single.micro_batches = j < refs ? set.micro_batches[j] : 1;
      all[j] = j < refs ? run_reference<float>(model_cfg, device, data, single, *self)
                        : run_reference<double>(model_cfg, device, data, single, *self);
    }
    if (owner != 0 && world.rank() == owner) {
      world.send(all[j].losses.data(), cfg.steps, DType::f64, 0, 3 * j);
      world.send(all[j].params.data(), P, DType::f64, 0, 3 * j + 1);
      world.send(all[j].grads0.data(), P, DType::f64, 0, 3 * j + 2);
    } else if (owner != 0 && world.rank() == 0) {
      world.recv(all[j].losses.data(), cfg.steps, DType::f64, owner, 3 * j);
      world.recv(all[j].params.data(), P, DType::f64, owner, 3 * j + 1);
      world.recv(all[j].grads0.data(), P, DType::f64, owner, 3 * j + 2);
    }
  }
  world.barrier();
  if (world.rank() != 0) return ReferenceSet{set.micro_batches, {}, Reference()};
  set.oracle = std::move(all[refs]);
  all.pop_back();
  set.f32 = std::move(all);
  return set;
}

double rel_norm_diff(const double* a, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<Check> oracle_checks(const std::string& prefix, const ReferenceSet& refs, const GptConfig& model,
                                 double tokens_per_step, const std::vector<double>& losses,
                                 const std::vector<double>& grads0, const std::vector<double>& params) {
  std::vector<Check> out;
  const double k = refs.factor();
  const std::string how = refs.how();
  const std::vector<double>& orc = refs.oracle.losses;
  // Per-step loss: |run - oracle| against k x the references' largest deviation so far
  // (deviations grow along the run, so the envelope up to step s is the scale at s).
  const double mean_floor = kUlp / std::sqrt(tokens_per_step);
  double envelope = 0;
  for (size_t s = 0; s < losses.size(); ++s) {
    for (const auto& r : refs.f32) envelope = std::max(envelope, std::fabs(r.losses[s] - orc[s]));
    out.push_back(make_check(prefix + "loss/step:" + std::to_string(s), std::fabs(losses[s] - orc[s]),
                             k * envelope + mean_floor * std::fabs(orc[s]),
                             "|loss - loss_f64| <= " + how + " + u|loss|/sqrt(tokens)"));
  }
  // Per tensor, relative norm error against the oracle: the step-0 gradient (rounding only,
  // no dynamics yet) and the final parameters.
  auto tensor_checks = [&](const std::string& what, const std::vector<double>& x, std::vector<double> Reference::*f) {
    const std::vector<double>& o = refs.oracle.*f;
    for (const auto& t : gpt_param_layout(model)) {
      const double dev = rel_norm_diff(x.data() + t.offset, o.data() + t.offset, t.numel);
      double scale = 0;
      for (const auto& r : refs.f32)
        scale = std::max(scale, rel_norm_diff((r.*f).data() + t.offset, o.data() + t.offset, t.numel));
      out.push_back(make_check(prefix + what + t.name, dev, k * scale + kFloorUlps,
                               "||x - x_f64|| / ||x_f64|| <= " + how + " + 4 ulp"));
    }
  };
  if (!grads0.empty()) tensor_checks("grads/step:0/", grads0, &Reference::grads0);
  tensor_checks("params/", params, &Reference::params);
  return out;
}

}  // namespace dtb

namespace dtb {

LayoutOutcome run_parallel_layout(const GptConfig& model_cfg, const ParallelLayout& layout, const TrainConfig& cfg,
                                  const ZeroConfig& zero, Device& device, Ops<float>* ops, Communicator& host,
                                  Communicator& comm, const Dataset& data, bool gather, SpanRecorder* spans,
                                  Recompute recompute) {
  ParallelLayout l = layout;
  l.micro_batches = cfg.micro_batches;
  validate_layout(l, model_cfg, cfg.global_batch, comm.size());
  OwnedGroups og = make_parallel_groups(comm, l);
  ParallelGroups g{comm, *og.tp, *og.dp, *og.pp, og.pp_backward.get()};
  device.reset_peaks();
  const MemoryStats before = device.stats();
  ParallelGpt<float> m(model_cfg, l, comm.rank(), device, *og.tp, ops);
  m.set_recompute(recompute);
  ZeroEngine<float> engine(m, zero, *og.dp, cfg.adamw);
  engine.load(m.initial_params(cfg.seed));
  LayoutOutcome out;
  parallel_compute_gradients(m, engine, data, cfg, 0, g);  // leaves the parameters as initialised
  if (gather) {
    const std::vector<float> g0 = engine.full_grads();
    out.grads0 = m.gather(g0, host);
    out.replica_grads0 = m.replica_max_diff(g0, host);
  }
  host.barrier();
  const TrainRun run = parallel_train(m, engine, data, cfg, g, spans);
  out.pp_rank = m.coord().pp;
  out.tp_rank = m.coord().tp;
  const MemoryStats& after = device.stats();
  for (int t = 0; t < kNumTiers; ++t)
    for (int c = 0; c < kNumMemCategories; ++c)
      out.peak_bytes[t][c] = double(after.peak[t][c]) - double(before.current[t][c]);
  out.peak_activation_bytes = out.peak_bytes[int(Tier::device)][int(MemCategory::activation)];
  out.losses = run.losses;
  out.timings = run.timings;
  out.grad_norms = run.grad_norms;
  out.loss_scales = run.loss_scales;
  out.skipped = run.skipped;
  if (gather) {
    const std::vector<float> p = engine.full_params();
    out.params = m.gather(p, host);
    out.replica_params = m.replica_max_diff(p, host);
  }
  return out;
}

}  // namespace dtb

namespace dtb {

std::vector<double> slowest_step_times(const LayoutOutcome& out, Communicator& world) {
  std::vector<double> mine;
  for (const auto& t : out.timings) mine.push_back(t.step_s);
  std::vector<double> all(mine.size() * world.size());
  world.all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  std::vector<double> slowest(mine.size(), 0.0);
  for (int r = 0; r < world.size(); ++r)
    for (size_t s = 0; s < mine.size(); ++s) slowest[s] = std::max(slowest[s], all[r * mine.size() + s]);
  return slowest;
}

TimedDpSetup timed_dp_setup(const nlohmann::json& s, const nlohmann::json& config, const std::string& path,
                            int world_size) {
  TimedDpSetup t;
  t.model = gpt_config_from_json(s.at("model"), path + ".model");
  t.cfg.steps = int(int_in_range(s, "steps", path + ".steps", 2, 100000));
  t.cfg.micro_batches = int(int_in_range(s, "micro_batches", path + ".micro_batches", 1, 1024));
  const int mbs = int(int_in_range(s, "micro_batch_size", path + ".micro_batch_size", 1, 1 << 16));
  t.cfg.seq_len = int(int_in_range(s, "seq_len", path + ".seq_len", 1, 1 << 20));
  if (t.cfg.seq_len > t.model.T)
    throw InputError(path + ".seq_len = " + std::to_string(t.cfg.seq_len) + " exceeds " + path + ".model.T = " +
                     std::to_string(t.model.T));
  t.cfg.global_batch = mbs * world_size * t.cfg.micro_batches;
  t.cfg.seed = config.at("seed").get<uint64_t>();
  t.layout.dp = world_size;
  t.layout.micro_batches = t.cfg.micro_batches;
  return t;
}

}  // namespace dtb
