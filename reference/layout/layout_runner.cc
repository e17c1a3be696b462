// The layout runner (reference/layout/layout_runner.h): groups, sharded model, ZeRO engine,
// trainer and checkpoint hooks, composed once for every precision.
#include "reference/layout/layout_runner.h"

#include <chrono>
#include <filesystem>
#include <map>

#include "kernels/agreed_error.h"
#include "kernels/comm/hierarchical_communicator.h"
#include "kernels/cpu/half_ops.h"
#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/layout/layout_validate.h"
#include "reference/training/loss_scaler.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/parallel_trainer.h"

namespace dtb {

namespace {

void note(const LayoutCheckpoints& c, const std::string& line) {
  if (c.note) c.note(line);
}

// Resumes `engine` and `scaler` from c.resume_step_dir: the steps before it (the manifest's
// history) into `before`, the first step to run into loop and the activity record.
template <typename T>
void resume(const LayoutCheckpoints& c, const CheckpointRunInfo& info, const TrainConfig& cfg, ParallelGpt<T>& model,
            ZeroEngine<T>& engine, LossScaler& scaler, Communicator& host, TrainLoop& loop, TrainHistory& before,
            CheckpointActivity& act) {
  const std::string& step_dir = c.resume_step_dir;
  const auto t0 = std::chrono::steady_clock::now();
  const Fp8Checkpoint fp8 = model.fp8_checkpoint();  // the layers held, to be filled in
  const TrainProgress p = load_checkpoint(step_dir, info, engine, &scaler, host, &fp8);  // agreed errors
  model.restore_fp8(p.fp8);
  act.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Past the load every rank holds the same manifest: what follows fails on all alike.
  try {
    before = history_of(p, cfg, step_dir);
  } catch (const InputError& e) {
    throw AgreedInputError(e.what());
  }
  if (p.next_step >= cfg.steps)
    throw AgreedInputError("train.resume_from: checkpoint " + step_dir + " is at step " + std::to_string(p.next_step) +
                     ", leaving no step of train.steps = " + std::to_string(cfg.steps) + " to run");
  loop.first_step = p.next_step;
  act.resumed_from = step_dir;
  act.first_step = p.next_step;
  const nlohmann::json m = check_checkpoint_manifest(step_dir, info);
  act.changed_on_resume = recipe_changes(m, info);  // the allowed ones
  act.resharded_from = resharded_from(m, info);
  // The bytes this rank read: its own file, or every rank file when resharding.
  std::error_code ec;
  act.load_bytes = 0;
  for (int r = 0; r < int(m.at("ranks").size()); ++r)
    if (!act.resharded_from.empty() || r == host.rank())
      act.load_bytes += uint64_t(std::filesystem::file_size(
          std::filesystem::path(step_dir) / ("rank-" + std::to_string(r) + ".bin"), ec));
  note(c, "resumed from " + step_dir + (act.resharded_from.empty() ? "" : " (resharded from " + act.resharded_from + ")") +
              ": steps " + std::to_string(p.next_step) + " to " + std::to_string(cfg.steps - 1) +
              " run here, the loss curve before from the checkpoint");
}

// Notes a committed save, `saved` its step directory ("" none), on rank 0 with its bytes.
void note_saved(const LayoutCheckpoints& c, Communicator& host, CheckpointActivity& act, const std::string& saved) {
  if (saved.empty()) return;
  act.saved.push_back(std::stoll(std::filesystem::path(saved).filename().string().substr(5)));  // "step-<k>"
  if (host.rank() == 0) {
    uintmax_t bytes = 0;
    std::error_code ec;
    for (int r = 0; r < host.size(); ++r)
      bytes += std::filesystem::file_size(std::filesystem::path(saved) / ("rank-" + std::to_string(r) + ".bin"), ec);
    note(c, "checkpoint " + saved + " saved (" + std::to_string(bytes) + " bytes in " + std::to_string(host.size()) +
                " rank files)");
  }
}

// Saves a checkpoint after every c.every steps done, the history = `before` + the steps run;
// a failed save (a full disk; an asynchronous write found failed at its commit) is agreed by
// every rank: recorded, and training goes on without saving. Collective over `host`.
template <typename T>
void save_every(const LayoutCheckpoints& c, CheckpointWriter<T>& w, ParallelGpt<T>& model, ZeroEngine<T>& engine,
                Communicator& host, const TrainHistory& before, CheckpointActivity& act, int64_t done,
                const LossScaler& s, const TrainRun& so_far) {
  if (c.every <= 0 || done % c.every != 0) return;
  TrainHistory h = before;
  h.append(so_far);
  TrainProgress p;
  p.next_step = done;
  p.scaler = s.state();
  p.history = history_to_json(h);
  p.fp8 = model.fp8_checkpoint();  // after the step's fp8_update: the scales the next step uses
  if (!act.save_error.empty()) return;
  try {
    note_saved(c, host, act, w.save(engine, p));
  } catch (const InputError& e) {
    act.save_error = e.what();
    note(c, "checkpoint save failed, training goes on without saving: " + act.save_error);
  }
}

// Commits the asynchronous save in flight after the last step, as save_every records it.
template <typename T>
void finish_saves(const LayoutCheckpoints& c, CheckpointWriter<T>& w, Communicator& host, CheckpointActivity& act) {
  try {
    note_saved(c, host, act, w.finish());
  } catch (const InputError& e) {
    act.save_error = e.what();
    note(c, "checkpoint save failed: " + act.save_error);
  }
  act.save_timings = w.timings();
}

// The layout validator's refusals of the run (reference/layout/layout_validate.h), its first as
// an AgreedInputError: a pure function of the spec, so every rank throws it alike.
void validate_run(const LayoutRunSpec& spec, const ParallelLayout& l, int world, const LayoutCheckpoints* ck) {
  const TrainConfig& cfg = spec.train;
  LayoutSpec s = spec.layout;
  s.l = l;
  LayoutCheckContext c{.world = world, .global_batch = cfg.global_batch, .seq_len = cfg.seq_len, .recipe = cfg};
  c.backend = spec.device.is_cpu() ? "cpu" : spec.ops.fp32 ? spec.ops.fp32->backend() : spec.device.name();
  if (ck) c.checkpoint_every = ck->every, c.resume_from = ck->resume_step_dir;
  const std::vector<LayoutRefusal> r = layout_refusals(s, spec.model, c);
  if (!r.empty()) throw AgreedInputError(r.front().message);
}

// LayoutOutcome::fp8_state: every layer's FP8 scaling state on rank 0 of host, each from the first
// rank of its stage (TP, DP and CP rank 0; one owner per layer, so the sum is exact). Collective over host.
template <typename T>
Fp8Checkpoint gather_fp8_state(ParallelGpt<T>& m, const OwnedGroups& og, Communicator& host, int layers) {
  const Fp8Checkpoint mine = m.fp8_checkpoint();
  Fp8Checkpoint all;
  all.history_len = mine.history_len;
  if (mine.history_len == 0) return all;
  const size_t per = Fp8Checkpoint::floats_per_layer(mine.history_len);
  std::vector<double> full(size_t(layers) * per, 0.0);
  if (og.tp->rank() == 0 && og.dp->rank() == 0 && (!og.cp || og.cp->rank() == 0))
    for (size_t i = 0; i < mine.layers.size(); ++i)
      for (size_t j = 0; j < per; ++j) full[size_t(mine.layers[i]) * per + j] = mine.values[i * per + j];
  host.all_reduce(full.data(), full.data(), full.size(), DType::f64, ReduceOp::sum);
  for (int l = 0; l < layers; ++l) all.layers.push_back(l);
  all.values.assign(full.begin(), full.end());
  return all;
}

template <typename T>
LayoutOutcome run_layout_as(const LayoutRunSpec& spec, Ops<T>* ops) {
  const TrainConfig& cfg = spec.train;
  Communicator& host = spec.host;
  Communicator& comm = spec.device_comm ? *spec.device_comm : spec.host;
  Device& device = spec.device;
  ParallelLayout l = spec.layout.l;
  l.micro_batches = cfg.micro_batches;
  const LayoutCheckpoints* ck = spec.checkpoints;
  validate_run(spec, l, comm.size(), ck);  // every rank alike, before any collective
  OwnedGroups og = make_parallel_groups(comm, l);
  const LayoutHooks* hooks = spec.hooks;
  // Gradients are reduced, and ZeRO shards, over the DP group, or with context parallelism over
  // the data-and-context group (the CP ranks' gradients are partial sums over their tokens).
  Communicator& grad_group = og.dp_cp ? *og.dp_cp : *og.dp;
  const std::unique_ptr<Communicator> wrapped_dp = hooks && hooks->wrap_dp ? hooks->wrap_dp(grad_group) : nullptr;
  // The hierarchical DP all-reduce goes over the hook's wrapper (a slowed or timed link stays in
  // the path).
  std::unique_ptr<Communicator> hier_dp;
  const int node_ranks = spec.layout.hier_node_ranks;
  if (node_ranks > 0) {
    hier_dp = std::make_unique<HierarchicalCommunicator>(wrapped_dp ? *wrapped_dp : grad_group, comm.rank() / node_ranks);
  }
  Communicator& dp = hier_dp ? *hier_dp : wrapped_dp ? *wrapped_dp : grad_group;
  ParallelGroups g{comm, *og.tp, dp, *og.pp, og.pp_backward.get(), og.ep.get(), og.expert_dp.get(), og.cp.get()};
  device.reset_peaks();
  const MemoryStats before = device.stats();
  std::unique_ptr<Ops<T>> cpu_ops;  // the model's own default, built here to be wrapped
  std::unique_ptr<ProfiledOps<T>> profiled;
  if (spec.op_clock) {
    if (!ops) {
      DTB_CHECK(device.is_cpu(), "run_layout: a non-CPU device needs that backend's ops");
      cpu_ops = make_cpu_ops<T>();
      ops = cpu_ops.get();
    }
    profiled = std::make_unique<ProfiledOps<T>>(*ops, *spec.op_clock);
    ops = profiled.get();
  }
  ParallelGpt<T> m(spec.model, l, comm.rank(), device, *og.tp, ops, og.ep.get(), og.cp.get());
  m.set_recompute(spec.layout.recompute);
  if (spec.layout.fp8) m.set_fp8(*spec.layout.fp8);
  ZeroEngine<T> engine(m, spec.layout.z, dp, cfg.adamw, og.expert_dp.get());
  engine.load(m.initial_params(cfg.seed));
  LossScaler scaler(cfg.loss_scaler);
  TrainLoop loop;
  loop.scaler = &scaler;
  loop.step_slowdown = spec.step_slowdown;
  LayoutOutcome out;
  TrainHistory taken;  // the steps taken from a checkpoint
  CheckpointRunInfo info;
  if (ck) {
    info = checkpoint_run_info(spec.model, l, spec.layout.z, spec.layout.precision, cfg, spec.data.sha256,
                               spec.layout.recompute, spec.layout.fp8);
    info.allowed_changes = ck->allowed_changes;
  }
  std::unique_ptr<CheckpointWriter<T>> writer;
  if (ck && ck->every > 0) writer = std::make_unique<CheckpointWriter<T>>(ck->dir, info, host, ck->async);
  if (ck && !ck->resume_step_dir.empty()) {
    resume(*ck, info, cfg, m, engine, scaler, host, loop, taken, out.checkpoints);
  } else {
    // Leaves the parameters as initialised. FP8's delayed recipe stages this pass's amaxes; training's
    // step 0 stages the same (same parameters, batch and scales) into the same max before its update.
    parallel_compute_gradients(m, engine, spec.data, cfg, 0, g);
    if (spec.gather) {
      const std::vector<T> g0 = engine.full_grads();
      out.grads0 = m.gather(g0, host);
      out.replica_grads0 = m.replica_max_diff(g0, host);
    }
  }
  host.barrier();
  if (hooks) loop.before_step = hooks->before_step;
  const bool moe = spec.model.moe.num_experts > 0;
  const bool fp8_scales = spec.layout.fp8 && spec.layout.fp8->recipe == Fp8Recipe::delayed;
  if (spec.fp8_census && spec.layout.fp8) m.set_fp8_census(&out.fp8_census);  // from the first training step
  if ((ck && ck->every > 0) || (hooks && hooks->after_step) || moe || fp8_scales)
    loop.after_step = [&](int64_t done, const LossScaler& s, const TrainRun& so_far) {
      if (fp8_scales) out.fp8_scales.push_back(fp8_median_scales(m.fp8_states()));
      if (moe) {  // the step's routing and exchanges, then a fresh count for the next
        out.moe_counts.push_back(m.moe_counts());
        out.moe_all_to_all_s.push_back(m.moe_comm().dispatch_s + m.moe_comm().combine_s);
        m.reset_moe_stats();
      }
      if (writer) save_every(*ck, *writer, m, engine, host, taken, out.checkpoints, done, s, so_far);
      if (hooks && hooks->after_step) hooks->after_step(done, so_far);
    };
  if (spec.op_clock) spec.op_clock->reset();
  m.set_part_times(spec.part_times);
  if (moe) m.reset_moe_stats();  // step 0's gradient is not a training step
  const TrainRun run = parallel_train(m, engine, spec.data, cfg, spec.layout.dp_sync, g, spec.spans, loop);
  if (writer) finish_saves(*ck, *writer, host, out.checkpoints);
  m.set_fp8_census(nullptr);
  if (spec.op_clock) out.op_seconds = spec.op_clock->seconds(), out.op_calls = spec.op_clock->calls();
  m.set_part_times(nullptr);
  out.pp_rank = m.coord().pp;
  out.tp_rank = m.coord().tp;
  const MemoryStats& after = device.stats();
  for (int t = 0; t < kNumTiers; ++t)
    for (int c = 0; c < kNumMemCategories; ++c)
      out.peak_bytes[t][c] = double(after.peak[t][c]) - double(before.current[t][c]);
  for (int t = 0; t < kNumTiers; ++t) out.peak_total_bytes[t] = double(after.peak_total[t]) - double(before.current_total[t]);
  out.peak_activation_bytes = out.peak_bytes[int(Tier::device)][int(MemCategory::activation)];
  record_steps(out, std::move(taken), run, cfg);
  out.dp_comm_bytes = double(engine.comm_stats().bytes);
  if (hooks && hooks->final_params) {
    const std::vector<T> p = engine.full_params();
    hooks->final_params(std::vector<double>(p.begin(), p.end()));
  }
  if (spec.gather) {
    const std::vector<T> p = engine.full_params();
    out.params = m.gather(p, host);
    out.replica_params = m.replica_max_diff(p, host);
    if (spec.layout.fp8) out.fp8_state = gather_fp8_state(m, og, host, spec.model.L);
  }
  return out;
}

}  // namespace

void validate_dp_hierarchical(const ParallelLayout& l, int zero_stage, int node_ranks) {
  auto n = [](int64_t x) { return std::to_string(x); };
  const std::string what = "hierarchical DP all-reduce over nodes of " + n(node_ranks) + " ranks: ";
  const int64_t world = l.world();
  if (node_ranks < 1) throw InputError("hierarchical DP all-reduce: nodes of " + n(node_ranks) + " ranks (must be >= 1)");
  if (world % node_ranks != 0)
    throw InputError(what + "they do not divide the layout's " + n(world) + " ranks");
  if (world == node_ranks)
    throw InputError(what + "the layout's " + n(world) + " ranks are one node (nothing crosses nodes)");
  if (l.dp < 2) throw InputError(what + "data_parallel " + n(l.dp) + " has no DP all-reduce");
  if (zero_stage >= 2)
    throw InputError(what + "ZeRO stage " + n(zero_stage) + " reduce-scatters its gradients (stage 0 or 1 all-reduces them)");
  for (int r = 0; r < int(world); ++r) {  // each DP group: its ranks per node, equal on every node
    std::map<int, int> per_node;
    for (int member : dp_group(r, l)) ++per_node[member / node_ranks];
    if (per_node.size() == 1)
      throw InputError(what + "the DP group of rank " + n(r) + " lies on one node (nothing crosses nodes)");
    for (const auto& [node, k] : per_node)
      if (k != per_node.begin()->second)
        throw InputError(what + "the DP group of rank " + n(r) + " has " + n(per_node.begin()->second) + " ranks on node " +
                         n(per_node.begin()->first) + " and " + n(k) + " on node " + n(node) +
                         " (every node must hold as many of the group's ranks)");
  }
}

void record_steps(LayoutOutcome& out, TrainHistory before, const TrainRun& run, const TrainConfig& cfg) {
  const size_t run_here = run.losses.size();
  before.append(run);
  out.losses = std::move(before.losses);
  out.grad_norms = std::move(before.grad_norms);
  out.loss_scales = std::move(before.loss_scales);
  out.skipped = std::move(before.skipped);
  out.timings = run.timings;
  const size_t steps = size_t(cfg.steps), scaled = cfg.loss_scaler.enabled ? steps : 0;
  auto expect = [](const char* field, size_t have, size_t want) {
    DTB_CHECK(have == want, std::string("training record: ") + field + " holds " + std::to_string(have) +
                                " values, not one per step (" + std::to_string(want) + ")");
  };
  expect("losses", out.losses.size(), steps);
  expect("grad_norms", out.grad_norms.size(), steps);
  expect("loss_scales", out.loss_scales.size(), scaled);
  expect("skipped", out.skipped.size(), scaled);
  expect("timings", out.timings.size(), run_here);
}

PrecisionOps precision_ops(Backend* backend) {
  if (!backend) return {};
  return {.fp32 = &backend->ops(), .bf16 = backend->bf16_ops(), .fp16 = backend->fp16_ops()};
}

LayoutOutcome run_layout(const LayoutRunSpec& spec) {
  const Precision p = spec.layout.precision;
  const bool half_ops = p == Precision::bf16 ? spec.ops.bf16 != nullptr : spec.ops.fp16 != nullptr;
  if (p != Precision::fp32 && !half_ops && !spec.device.is_cpu()) {
    const std::string name = spec.ops.fp32 ? spec.ops.fp32->backend() : spec.device.name();
    throw InputError("precision " + std::string(to_string(p)) + ": the " + name + " backend has no " +
                     std::string(to_string(p)) + " ops");
  }
  switch (p) {
    case Precision::bf16: return run_layout_as<bf16>(spec, spec.ops.bf16);
    case Precision::fp16: return run_layout_as<fp16>(spec, spec.ops.fp16);
    default: return run_layout_as<float>(spec, spec.ops.fp32);
  }
}

}  // namespace dtb
