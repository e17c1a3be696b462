// What the checkpoint tests share (reference/checkpoint/checkpoint_test.cc, checkpoint_reshard_test.cc):
// the test model and recipe, a layout case, one training run that saves or resumes, bitwise
// comparison, and the refusal check. Multi-rank: the functions taking a Communicator are
// collective over it.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/parallel/parallel_test_util.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/model/test_dataset.h"

namespace dtb::checkpoint_test {

namespace fs = std::filesystem;

// 4 layers (PP 2 with 2 virtual stages), 4 heads (TP 2), V 256.
inline const GptConfig kModel{4, 32, 4, 16, 256};

struct Case {
  std::string name;
  int tp = 1, dp = 1, pp = 1, v = 1, ep = 1;
  bool sp = false;  // sequence parallel
  std::string schedule = "1f1b";
  std::vector<int> layers;  // pipeline_layers (empty: even)
  std::vector<std::string> allowed_changes;  // recipe keys a resume may change
  ZeroConfig zero;
  GptConfig model = kModel;
};

inline Case make_case(const std::string& name, int tp, int dp, int pp, int stage = 0, int v = 1,
               const std::string& schedule = "1f1b") {
  Case c;
  c.name = name;
  c.tp = tp, c.dp = dp, c.pp = pp, c.v = v, c.schedule = schedule;
  c.zero.stage = stage;
  return c;
}

inline ParallelLayout layout_of(const Case& c, const TrainConfig& cfg) {
  ParallelLayout l;
  l.tp = c.tp, l.dp = c.dp, l.pp = c.pp, l.virtual_stages = c.v, l.schedule = c.schedule, l.ep = c.ep;
  l.sequence_parallel = c.sp;
  l.pipeline_layers = c.layers;
  l.micro_batches = cfg.micro_batches;
  return l;
}

// The identity of a run of `c` and `cfg` storing T (its precision: precision_of<T>).
template <typename T = float>
CheckpointRunInfo info_of(const Case& c, const TrainConfig& cfg) {
  CheckpointRunInfo r = checkpoint_run_info(c.model, layout_of(c, cfg), c.zero, precision_of<T>(), cfg, "test-data");
  r.allowed_changes = c.allowed_changes;
  return r;
}

inline TrainConfig base_config() {
  TrainConfig cfg;
  cfg.steps = 6;
  cfg.global_batch = 8;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  cfg.adamw.lr = 1e-2f;
  cfg.adamw.beta2 = 0.95f;
  cfg.adamw.weight_decay = 0.1f;
  cfg.grad_clip = 1.0;
  return cfg;
}

// What a run ends with, on this rank.
template <typename T>
struct Outcome {
  TrainRun run;                // the steps this run took
  std::vector<double> params;  // the full model, gathered (every rank)
  ZeroState<T> state;          // this rank's engine state
  LossScalerState scaler;
};

// One run of case `c` on `w`: from a fresh initialisation, or resumed from `resume_dir`;
// up to cfg.steps; saving a checkpoint into `save_dir` after step `save_at` (0: never).
template <typename T>
Outcome<T> run_case(const Case& c, const TrainConfig& cfg, Communicator& w, const std::string& resume_dir = "",
                    const std::string& save_dir = "", int64_t save_at = 0) {
  CpuDevice dev;
  const ParallelLayout l = layout_of(c, cfg);
  OwnedGroups og = make_parallel_groups(w, l);
  ParallelGroups g{w, *og.tp, *og.dp, *og.pp, og.pp_backward.get(), og.ep.get(), og.expert_dp.get()};
  ParallelGpt<T> m(c.model, l, w.rank(), dev, *og.tp, nullptr, og.ep.get());
  ZeroEngine<T> e(m, c.zero, *og.dp, cfg.adamw, og.expert_dp.get());
  e.load(m.initial_params(cfg.seed));
  LossScaler scaler(cfg.loss_scaler);
  const CheckpointRunInfo info = info_of<T>(c, cfg);
  TrainLoop loop;
  loop.scaler = &scaler;
  if (!resume_dir.empty()) loop.first_step = load_checkpoint(resume_dir, info, e, &scaler, w).next_step;
  loop.after_step = [&](int64_t done, const LossScaler& s, const TrainRun& so_far) {
    if (done != save_at) return;
    TrainProgress p;
    p.next_step = done;
    p.scaler = s.state();
    p.history = {{"losses", so_far.losses}};
    save_checkpoint(save_dir, info, e, p, w);
  };
  Outcome<T> out;
  out.run = parallel_train(m, e, test_data(), cfg, DpSync{}, g, nullptr, loop);
  out.params = m.gather(e.full_params(), w);
  out.state = e.export_state();
  out.scaler = scaler.state();
  return out;
}

template <typename V>
::testing::AssertionResult same_bits(const std::vector<V>& a, const std::vector<V>& b, const char* what) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": " << a.size() << " vs " << b.size() << " elements";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(V)) != 0)
      return ::testing::AssertionFailure()
             << what << " differ first at element " << i << ": " << double(a[i]) << " vs " << double(b[i]);
  return ::testing::AssertionSuccess();
}

// A run resumed at step k against the uninterrupted one, bit for bit: the per-step losses
// after k, the gathered final parameters, this rank's stored parameters, master weights,
// AdamW m, v and t, and the loss scaler.
template <typename T>
void expect_same_end(const Outcome<T>& resumed, const Outcome<T>& full, int64_t k) {
  const std::vector<double> tail(full.run.losses.begin() + k, full.run.losses.end());
  EXPECT_TRUE(same_bits(resumed.run.losses, tail, "per-step losses after the checkpoint"));
  EXPECT_TRUE(same_bits(resumed.params, full.params, "gathered final parameters"));
  EXPECT_TRUE(same_bits(resumed.state.params, full.state.params, "this rank's stored parameters"));
  EXPECT_TRUE(same_bits(resumed.state.master, full.state.master, "this rank's master weights"));
  EXPECT_TRUE(same_bits(resumed.state.m, full.state.m, "this rank's AdamW m"));
  EXPECT_TRUE(same_bits(resumed.state.v, full.state.v, "this rank's AdamW v"));
  EXPECT_EQ(resumed.state.t, full.state.t);
  EXPECT_EQ(resumed.scaler.scale, full.scaler.scale);
  EXPECT_EQ(resumed.scaler.growth_tracker, full.scaler.growth_tracker);
  EXPECT_EQ(resumed.scaler.skipped, full.scaler.skipped);
}

// base_config() for fp16 with dynamic loss scaling from 2^18, growing every 2 good steps: the
// first steps overflow and are skipped, then the scale grows and overflows again.
inline TrainConfig fp16_scaling_config(int steps) {
  TrainConfig cfg = base_config();
  cfg.steps = steps;
  cfg.loss_scaler.enabled = true;
  cfg.loss_scaler.init_scale = 0x1p18;
  cfg.loss_scaler.growth_interval = 2;
  return cfg;
}

// Uninterrupted S steps against k steps + save, everything destroyed, resume, S - k steps.
// Returns the uninterrupted run's record.
template <typename T>
TrainRun expect_bitwise_resume(const Case& c, const TrainConfig& cfg, Communicator& w, int64_t k) {
  SCOPED_TRACE(c.name);
  SharedTempDir dir(w);
  const Outcome<T> full = run_case<T>(c, cfg, w);
  {
    TrainConfig first = cfg;
    first.steps = int(k);
    const Outcome<T> part = run_case<T>(c, first, w, "", dir.path(), k);
    EXPECT_EQ(part.run.losses.size(), size_t(k));
  }  // the model, engine and groups of the first part are gone
  w.barrier();
  const std::string step_dir = checkpoint_step_dir(dir.path(), k);
  EXPECT_EQ(resolve_resume(dir.path(), "latest"), step_dir);
  const Outcome<T> resumed = run_case<T>(c, cfg, w, step_dir);
  EXPECT_EQ(resumed.run.losses.size(), size_t(cfg.steps - k));
  expect_same_end(resumed, full, k);
  if (cfg.loss_scaler.enabled) {
    const std::vector<double> scales(full.run.loss_scales.begin() + k, full.run.loss_scales.end());
    EXPECT_TRUE(same_bits(resumed.run.loss_scales, scales, "loss scales after the checkpoint"));
  }
  // The loss history of the first part, kept in the manifest.
  const nlohmann::json m = check_checkpoint_manifest(step_dir, info_of<T>(c, cfg));
  const std::vector<double> head(full.run.losses.begin(), full.run.losses.begin() + k);
  EXPECT_TRUE(same_bits(m.at("history").at("losses").get<std::vector<double>>(), head, "manifest loss history"));
  return full.run;
}

// The cases of world size n that `pick` keeps; at least one must fit, or the test skips.
inline std::vector<Case> cases_of(int n, const std::vector<Case>& all) {
  std::vector<Case> out;
  for (const Case& c : all)
    if (c.tp * c.dp * c.pp == n) out.push_back(c);
  return out;
}

inline Case dp_case(int dp, int stage = 0) {
  return make_case("DP" + std::to_string(dp) + " zero" + std::to_string(stage), 1, dp, 1, stage);
}

// An MoE model (4 experts, top-2, capacity factor 1: tokens dropped; layers 0 and 2 MoE) at
// expert parallelism 2: each rank's file holds its experts' parameters, master weights and
// moments, sharded over the expert-data-parallel group at ZeRO 2; the resume is bitwise.
inline GptConfig moe_model() {
  GptConfig m = kModel;
  m.moe.num_experts = 4, m.moe.topk = 2, m.moe.capacity_factor = 1.0, m.moe_layer_freq = 2;
  return m;
}

inline Case moe_case(const std::string& name, int dp, int ep, int pp, int stage) {
  Case c = make_case(name, 1, dp, pp, stage);
  c.ep = ep;
  c.model = moe_model();
  return c;
}

// Saves a 1-step checkpoint of `c` into `dir` (collective).
inline void save_one_step(const Case& c, const TrainConfig& cfg, Communicator& w, const std::string& dir) {
  TrainConfig one = cfg;
  one.steps = 1;
  run_case<float>(c, one, w, "", dir, 1);
}

// Loading `step_dir` into a fresh engine of `c` must throw InputError containing `needle` on
// every rank, the same message everywhere, and leave the engine's state untouched.
inline void expect_refused(const Case& c, const TrainConfig& cfg, Communicator& w, const std::string& step_dir,
                    const std::string& needle) {
  CpuDevice dev;
  const ParallelLayout l = layout_of(c, cfg);
  OwnedGroups og = make_parallel_groups(w, l);
  ParallelGpt<float> m(c.model, l, w.rank(), dev, *og.tp, nullptr, og.ep.get());
  ZeroEngine<float> e(m, c.zero, *og.dp, cfg.adamw, og.expert_dp.get());
  e.load(m.initial_params(cfg.seed));
  LossScaler scaler(cfg.loss_scaler);
  const ZeroState<float> before = e.export_state();
  std::string msg;
  try {
    load_checkpoint(step_dir, info_of(c, cfg), e, &scaler, w);
  } catch (const InputError& x) {
    msg = x.what();
  }
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: '" << msg << "', expected '" << needle << "'";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  // The same message on every rank: compare lengths and a hash with rank 0's.
  int64_t mine[2] = {int64_t(msg.size()), int64_t(std::hash<std::string>{}(msg)&0x7fffffff)};
  int64_t root[2] = {mine[0], mine[1]};
  std::vector<double> buf = {double(mine[0]), double(mine[1])};
  w.broadcast(buf.data(), 2, DType::f64, 0);
  root[0] = int64_t(buf[0]), root[1] = int64_t(buf[1]);
  EXPECT_EQ(mine[0], root[0]) << "rank " << w.rank() << " threw another message: " << msg;
  EXPECT_EQ(mine[1], root[1]) << "rank " << w.rank() << " threw another message: " << msg;
  const ZeroState<float> after = e.export_state();
  EXPECT_TRUE(same_bits(after.params, before.params, "parameters after a refused load"));
  EXPECT_TRUE(same_bits(after.m, before.m, "m after a refused load"));
  EXPECT_EQ(after.t, before.t);
  w.barrier();
}

// A file changed by rank 0 only, then everyone waits.
inline void on_rank0(Communicator& w, const std::function<void()>& f) {
  if (w.rank() == 0) f();
  w.barrier();
}

}  // namespace dtb::checkpoint_test
