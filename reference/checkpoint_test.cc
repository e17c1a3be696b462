// Training checkpoints (reference/checkpoint.h): a run saved at step k, destroyed and
// resumed into a fresh model and engine, continues bitwise as the uninterrupted run (per-
// step losses, gathered parameters, every rank's master weights and AdamW moments, the
// loss scaler), for DP, TP x PP, ZeRO 3, fp16 with loss scaling and bf16 with offload; and
// every damaged or mismatched checkpoint is refused with one agreed message before any
// state changes. Runs in the multi-rank binary (2 and 4 ranks); the rank-file format's
// round trip and corruption cases are checkpoint_file_test.cc's, one process alone. Also an
// MoE model at expert parallelism 2, and the refusal of another EP size or MoE setting.
#include "reference/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/parallel_trainer.h"
#include "reference/test_dataset.h"

namespace dtb {
namespace {

namespace fs = std::filesystem;

// 4 layers (PP 2 with 2 virtual stages), 4 heads (TP 2), V 256.
const GptConfig kModel{4, 32, 4, 16, 256};

// A directory unique to the test and shared by the job's ranks: rank 0 makes it
// (mkdtemp) and broadcasts its path; removed at the end.
class SharedTempDir {
 public:
  explicit SharedTempDir(Communicator& w) : w_(w) {
    std::vector<char> buf(128, 0);
    if (w.rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "dtb-ckpt-XXXXXX").string();
      DTB_CHECK(tmpl.size() < buf.size() && mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
      std::memcpy(buf.data(), tmpl.data(), tmpl.size());
    }
    w.broadcast(buf.data(), buf.size() / 4, DType::i32, 0);
    path_ = buf.data();
  }
  ~SharedTempDir() {
    w_.barrier();
    if (w_.rank() == 0) fs::remove_all(path_);
  }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  Communicator& w_;
  std::string path_;
};

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

Case make_case(const std::string& name, int tp, int dp, int pp, int stage = 0, int v = 1,
               const std::string& schedule = "1f1b") {
  Case c;
  c.name = name;
  c.tp = tp, c.dp = dp, c.pp = pp, c.v = v, c.schedule = schedule;
  c.zero.stage = stage;
  return c;
}

ParallelLayout layout_of(const Case& c, const TrainConfig& cfg) {
  ParallelLayout l;
  l.tp = c.tp, l.dp = c.dp, l.pp = c.pp, l.virtual_stages = c.v, l.schedule = c.schedule, l.ep = c.ep;
  l.sequence_parallel = c.sp;
  l.pipeline_layers = c.layers;
  l.micro_batches = cfg.micro_batches;
  return l;
}

CheckpointRunInfo info_of(const Case& c, const TrainConfig& cfg) {
  CheckpointRunInfo r = checkpoint_run_info(c.model, layout_of(c, cfg), c.zero, cfg, "test-data");
  r.allowed_changes = c.allowed_changes;
  return r;
}

TrainConfig base_config() {
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
  const CheckpointRunInfo info = info_of(c, cfg);
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
  out.run = parallel_train(m, e, test_data(), cfg, g, nullptr, loop);
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
  if (cfg.loss_scaler.enabled) {
    const std::vector<double> scales(full.run.loss_scales.begin() + k, full.run.loss_scales.end());
    EXPECT_TRUE(same_bits(resumed.run.loss_scales, scales, "loss scales after the checkpoint"));
  }
  // The loss history of the first part, kept in the manifest.
  const nlohmann::json m = check_checkpoint_manifest(step_dir, info_of(c, cfg));
  const std::vector<double> head(full.run.losses.begin(), full.run.losses.begin() + k);
  EXPECT_TRUE(same_bits(m.at("history").at("losses").get<std::vector<double>>(), head, "manifest loss history"));
  return full.run;
}

// The cases of world size n that `pick` keeps; at least one must fit, or the test skips.
std::vector<Case> cases_of(int n, const std::vector<Case>& all) {
  std::vector<Case> out;
  for (const Case& c : all)
    if (c.tp * c.dp * c.pp == n) out.push_back(c);
  return out;
}

Case dp_case(int dp, int stage = 0) {
  return make_case("DP" + std::to_string(dp) + " zero" + std::to_string(stage), 1, dp, 1, stage);
}

TEST(Checkpoint, ResumeIsBitwiseDP) {
  auto w = make_mpi_world();
  expect_bitwise_resume<float>(dp_case(w->size()), base_config(), *w, 3);
}

TEST(Checkpoint, ResumeIsBitwiseTPxPP) {
  auto w = make_mpi_world();
  const auto cases = cases_of(
      w->size(), {make_case("TP2xPP2 zero0", 2, 1, 2), make_case("PP2 zero0", 1, 1, 2), make_case("TP2 zero0", 2, 1, 1),
                  make_case("DP2xPP2 interleaved v2 zero2", 1, 2, 2, 2, 2, "interleaved")});
  if (cases.empty()) GTEST_SKIP() << "no TP x PP layout of " << w->size() << " ranks (ctest runs 2 and 4)";
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 2);
}

TEST(Checkpoint, ResumeIsBitwiseZero3) {
  auto w = make_mpi_world();
  Case tp2dp2 = make_case("TP2xDP2 zero3", 2, 2, 1, 3);
  tp2dp2.zero.reduce_bucket_size = 3000;  // several buckets
  tp2dp2.zero.allgather_bucket_size = 3000;
  std::vector<Case> cases = cases_of(w->size(), {tp2dp2});
  cases.push_back(dp_case(w->size(), 3));
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 4);
}

// An MoE model (4 experts, top-2, capacity factor 1: tokens dropped; layers 0 and 2 MoE) at
// expert parallelism 2: each rank's file holds its experts' parameters, master weights and
// moments, sharded over the expert-data-parallel group at ZeRO 2; the resume is bitwise.
GptConfig moe_model() {
  GptConfig m = kModel;
  m.moe.num_experts = 4, m.moe.topk = 2, m.moe.capacity_factor = 1.0, m.moe_layer_freq = 2;
  return m;
}

Case moe_case(const std::string& name, int dp, int ep, int pp, int stage) {
  Case c = make_case(name, 1, dp, pp, stage);
  c.ep = ep;
  c.model = moe_model();
  return c;
}

TEST(Checkpoint, ResumeIsBitwiseExpertParallel) {
  auto w = make_mpi_world();
  const std::vector<Case> cases = cases_of(w->size(), {moe_case("DP2xEP2", 2, 2, 1, 0), moe_case("DP2xEP2 zero2", 2, 2, 1, 2),
                                                       moe_case("DP4xEP2 zero1", 4, 2, 1, 1),
                                                       moe_case("DP4xEP2 zero3", 4, 2, 1, 3),
                                                       moe_case("DP2xEP2xPP2 zero2", 2, 2, 2, 2)});
  ASSERT_FALSE(cases.empty());
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 3);
}

// fp16 with dynamic loss scaling from 2^18, growing every 2 good steps: the first two steps
// overflow and are skipped, the scale then grows and overflows again, and at the checkpoint
// (step 3) the scale is 2^16 with the growth tracker mid-way (1 of 2) — a resume that lost
// either takes other steps.
TEST(Checkpoint, ResumeIsBitwiseFp16LossScaler) {
  auto w = make_mpi_world();
  TrainConfig cfg = base_config();
  cfg.steps = 12;
  cfg.precision = Precision::fp16;
  cfg.loss_scaler.enabled = true;
  cfg.loss_scaler.init_scale = 0x1p18;
  cfg.loss_scaler.growth_interval = 2;
  Case c = dp_case(w->size(), 2);
  c.name += " fp16 loss scaling";
  const TrainRun full = expect_bitwise_resume<fp16>(c, cfg, *w, 3);
  // The case exercises the scaler: steps skipped before and after the checkpoint, steps taken.
  int skipped_before = 0, skipped_after = 0;
  for (int s = 0; s < cfg.steps; ++s) (s < 3 ? skipped_before : skipped_after) += full.skipped.at(size_t(s));
  EXPECT_GT(skipped_before, 0);
  EXPECT_GT(skipped_after, 0);
  EXPECT_LT(skipped_before + skipped_after, cfg.steps);
}

TEST(Checkpoint, ResumeIsBitwiseBf16Offload) {
  auto w = make_mpi_world();
  TrainConfig cfg = base_config();
  cfg.precision = Precision::bf16;
  Case c = dp_case(w->size(), 1);
  c.zero.offload_optimizer = true;
  c.name += " offload bf16";
  expect_bitwise_resume<bf16>(c, cfg, *w, 3);
}

// ---- refusals ----

// Saves a 1-step checkpoint of `c` into `dir` (collective).
void save_one_step(const Case& c, const TrainConfig& cfg, Communicator& w, const std::string& dir) {
  TrainConfig one = cfg;
  one.steps = 1;
  run_case<float>(c, one, w, "", dir, 1);
}

// Loading `step_dir` into a fresh engine of `c` must throw InputError containing `needle` on
// every rank, the same message everywhere, and leave the engine's state untouched.
void expect_refused(const Case& c, const TrainConfig& cfg, Communicator& w, const std::string& step_dir,
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
void on_rank0(Communicator& w, const std::function<void()>& f) {
  if (w.rank() == 0) f();
  w.barrier();
}

TEST(Checkpoint, RefusesDamagedFiles) {
  auto w = make_mpi_world();
  const int n = w->size(), last = n - 1;
  const TrainConfig cfg = base_config();
  const Case c = dp_case(n);
  SharedTempDir dir(*w);
  struct Damage {
    std::string what, needle;
    std::function<void(const std::string& step_dir)> apply;
  };
  const std::string last_file = "rank-" + std::to_string(last) + ".bin";
  const std::vector<Damage> damages = {
      {"truncated rank file", last_file + ": truncated",
       [&](const std::string& d) {
         fs::resize_file(fs::path(d) / last_file, fs::file_size(fs::path(d) / last_file) / 2);
       }},
      {"one flipped payload byte", last_file + ": checksum mismatch",
       [&](const std::string& d) {
         std::fstream f(fs::path(d) / last_file, std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(-100, std::ios::end);
         char b = 0;
         f.read(&b, 1);
         b ^= 0x10;
         f.seekp(-100, std::ios::end);
         f.write(&b, 1);
       }},
      {"bad magic", last_file + ": bad magic",
       [&](const std::string& d) {
         std::fstream f(fs::path(d) / last_file, std::ios::in | std::ios::out | std::ios::binary);
         f.write("XX", 2);
       }},
      {"missing rank file", last_file + ": missing",
       [&](const std::string& d) { fs::remove(fs::path(d) / last_file); }},
      {"missing manifest", "no manifest.json (an incomplete checkpoint is never loaded)",
       [&](const std::string& d) { fs::remove(fs::path(d) / "manifest.json"); }},
      {"unreadable manifest", "manifest.json is unreadable",
       [&](const std::string& d) { std::ofstream(fs::path(d) / "manifest.json") << "{\"format_version\": 1,"; }},
      // 2^32 + dp would wrap to this run's dp in an int: refused as out of range instead.
      {"a layout size past int", "manifest.json's 'layout.dp' = " + std::to_string((int64_t(1) << 32) + n) +
                                     " is out of range [0, 1073741824]",
       [&](const std::string& d) {
         nlohmann::json m = nlohmann::json::parse(std::ifstream(fs::path(d) / "manifest.json"));
         m["layout"]["dp"] = (int64_t(1) << 32) + n;
         std::ofstream(fs::path(d) / "manifest.json") << m.dump();
       }},
  };
  for (size_t i = 0; i < damages.size(); ++i) {
    SCOPED_TRACE(damages[i].what);
    const std::string sub = dir.sub(std::to_string(i) + "-damaged");
    save_one_step(c, cfg, *w, sub);
    const std::string step_dir = checkpoint_step_dir(sub, 1);
    on_rank0(*w, [&] { damages[i].apply(step_dir); });
    expect_refused(c, cfg, *w, step_dir, damages[i].needle);
  }
}

TEST(Checkpoint, RefusesAnotherRun) {
  auto w = make_mpi_world();
  const int n = w->size();
  const TrainConfig cfg = base_config();
  SharedTempDir dir(*w);
  const Case saved = dp_case(n);
  save_one_step(saved, cfg, *w, dir.path());
  const std::string step_dir = checkpoint_step_dir(dir.path(), 1);
  // Another layout of the same world: ZeRO 3 (and TP2xPP2 at 4 ranks).
  expect_refused(dp_case(n, 3), cfg, *w, step_dir,
                 "checkpoint " + step_dir + ": layout DP" + std::to_string(n) + " zero0 does not match this run's DP" +
                     std::to_string(n) + " zero3");
  if (n == 4) {
    expect_refused(make_case("TP2xPP2", 2, 1, 2), cfg, *w, step_dir,
                   "layout DP4 zero0 does not match this run's TP2xPP2xDP1 zero0 1f1b");
  }
  // Another seed.
  TrainConfig seeded = cfg;
  seeded.seed = 99;
  expect_refused(saved, seeded, *w, step_dir, "seed 1234 does not match this run's 99");
  // Another precision and another model width would be refused alike; another batch:
  TrainConfig batch = cfg;
  batch.global_batch = 2 * cfg.global_batch;
  expect_refused(saved, batch, *w, step_dir, "global_batch 8 does not match this run's 16");
}

// The recipe a checkpoint records (lr, AdamW's betas, eps and weight decay, grad_clip,
// micro_batches): a resume with any of them changed is refused naming the key and both values,
// unless the key is allowed (dtbench run --allow-changed KEY), which then resumes.
TEST(Checkpoint, RefusesAChangedRecipeUnlessAllowed) {
  auto w = make_mpi_world();
  const TrainConfig cfg = base_config();  // lr 0.01, beta2 0.95, weight decay 0.1, grad_clip 1
  SharedTempDir dir(*w);
  const Case saved = dp_case(w->size());
  save_one_step(saved, cfg, *w, dir.path());
  const std::string step_dir = checkpoint_step_dir(dir.path(), 1);
  const std::string hint = " resumes with it)";
  TrainConfig c = cfg;
  c.adamw.lr = 0.03f;
  expect_refused(saved, c, *w, step_dir, "train.lr 0.01 does not match this run's 0.03 (dtbench run --allow-changed lr" + hint);
  c = cfg, c.adamw.weight_decay = 0.0f;
  expect_refused(saved, c, *w, step_dir, "train.weight_decay 0.1 does not match this run's 0.0");
  c = cfg, c.adamw.beta1 = 0.8f;
  expect_refused(saved, c, *w, step_dir, "train.beta1 0.9 does not match this run's 0.8");
  c = cfg, c.grad_clip = 0.0;
  expect_refused(saved, c, *w, step_dir, "train.grad_clip 1.0 does not match this run's 0.0");
  c = cfg, c.micro_batches = 1;
  expect_refused(saved, c, *w, step_dir, "train.micro_batches 2 does not match this run's 1");
  // Allowed: lr changes and the run resumes from the checkpoint's step; the change is listed.
  Case allowed = saved;
  allowed.allowed_changes = {"lr"};
  c = cfg, c.adamw.lr = 0.03f;
  const Outcome<float> out = run_case<float>(allowed, c, *w, step_dir);
  EXPECT_EQ(out.run.losses.size(), size_t(cfg.steps - 1));
  const nlohmann::json changes =
      recipe_changes(check_checkpoint_manifest(step_dir, info_of(allowed, c)), info_of(allowed, c));
  EXPECT_EQ(changes, nlohmann::json::parse(R"([{"key": "lr", "saved": 0.01, "now": 0.03}])"));
}

// A checkpoint of DP n/2 (saved by half the ranks) loaded by DP n: resharding is refused.
// Sequence parallelism: the same parameters as TP alone (its LayerNorms replicated), and a
// resume that keeps it on continues bitwise; turning it off or on at a resume is refused (the
// LayerNorm gradients would be summed in another order from there on).
TEST(Checkpoint, ResumeIsBitwiseSequenceParallel) {
  auto w = make_mpi_world();
  auto sp = [](Case c) {
    c.sp = true;
    c.name += " sp";
    return c;
  };
  const auto cases = cases_of(w->size(), {sp(make_case("TP2", 2, 1, 1)), sp(make_case("TP2xDP2 zero1", 2, 2, 1, 1)),
                                          sp(make_case("TP2xPP2", 2, 1, 2))});
  if (cases.empty()) GTEST_SKIP() << "no TP 2 layout of " << w->size() << " ranks (ctest runs 2 and 4)";
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 3);
  SharedTempDir dir(*w);
  const TrainConfig cfg = base_config();
  save_one_step(cases[0], cfg, *w, dir.path());
  Case off = cases[0];
  off.sp = false;
  const std::string saved = describe_layout(info_of(cases[0], cfg));
  EXPECT_NE(saved.find(" sp "), std::string::npos) << saved;
  expect_refused(off, cfg, *w, checkpoint_step_dir(dir.path(), 1),
                 "layout " + saved + " does not match this run's " + describe_layout(info_of(off, cfg)));
}

TEST(Checkpoint, ResumeIsBitwiseUnevenStages) {
  // An uneven layer split (pipeline_layers) saves and resumes bitwise, under 1F1B and ZB-H1;
  // a resume with another split, or the even one, is refused naming both.
  auto w = make_mpi_world();
  auto uneven = [](Case c, std::vector<int> layers) {
    c.name += " layers " + pipeline_layers_text(layers);
    c.layers = std::move(layers);
    return c;
  };
  const auto cases = cases_of(w->size(), {uneven(make_case("PP2", 1, 1, 2), {3, 1}),
                                          uneven(make_case("PP2xDP2 zero1", 1, 2, 2, 1, 1, "zb-h1"), {1, 3})});
  if (cases.empty()) GTEST_SKIP() << "no PP layout of " << w->size() << " ranks (ctest runs 2 and 4)";
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 3);
  SharedTempDir dir(*w);
  const TrainConfig cfg = base_config();
  save_one_step(cases[0], cfg, *w, dir.path());
  for (const std::vector<int>& other : {std::vector<int>{}, std::vector<int>{cases[0].layers.rbegin(), cases[0].layers.rend()}}) {
    Case c = cases[0];
    c.layers = other;
    expect_refused(c, cfg, *w, checkpoint_step_dir(dir.path(), 1),
                   "layout " + describe_layout(info_of(cases[0], cfg)) + " does not match this run's " +
                       describe_layout(info_of(c, cfg)));
  }
}

TEST(Checkpoint, RefusesAnotherDPSize) {
  auto w = make_mpi_world();
  const int n = w->size();
  if (n % 2) GTEST_SKIP() << "needs an even world size (ctest runs 2 and 4 ranks)";
  const TrainConfig cfg = base_config();
  SharedTempDir dir(*w);
  auto half = w->split(w->rank() < n / 2 ? 0 : 1, w->rank(), "half");
  if (w->rank() < n / 2) save_one_step(dp_case(n / 2), cfg, *half, dir.path());
  w->barrier();
  expect_refused(dp_case(n), cfg, *w, checkpoint_step_dir(dir.path(), 1),
                 "saved with DP" + std::to_string(n / 2) + ", this run has DP" + std::to_string(n) +
                     ": resharding a checkpoint to another DP size is not supported");
}

// A checkpoint of an MoE run is refused by a run of another expert-parallel size or other MoE
// settings (and a dense run's by an MoE run), each naming both.
TEST(Checkpoint, RefusesAnotherExpertLayoutOrMoeModel) {
  auto w = make_mpi_world();
  const int n = w->size();
  if (n % 2) GTEST_SKIP() << "needs an even world size (ctest runs 2 and 4 ranks)";
  const TrainConfig cfg = base_config();
  SharedTempDir dir(*w);
  const Case saved = moe_case("EP2", n, 2, 1, 0);
  save_one_step(saved, cfg, *w, dir.path());
  const std::string step_dir = checkpoint_step_dir(dir.path(), 1);
  const std::string dp = "DP" + std::to_string(n);
  expect_refused(moe_case("EP1", n, 1, 1, 0), cfg, *w, step_dir,
                 "layout " + dp + "xEP2 zero0 does not match this run's " + dp + " zero0");
  Case top1 = saved;
  top1.model.moe.topk = 1;
  expect_refused(top1, cfg, *w, step_dir, "the model differs from this run's: moe_router_topk 2 (this run 1)");
  // A manifest written before expert parallelism existed has no layout.ep: read as EP 1, so the
  // EP 2 run is refused, and a dense run's such manifest still resumes.
  const std::string no_ep = dir.sub("no-ep");
  save_one_step(saved, cfg, *w, no_ep);
  save_one_step(dp_case(n), cfg, *w, dir.sub("dense-no-ep"));
  auto drop_ep = [](const std::string& d) {
    const fs::path f = fs::path(d) / "manifest.json";
    nlohmann::json m = nlohmann::json::parse(std::ifstream(f));
    m["layout"].erase("ep");
    std::ofstream(f) << m.dump();
  };
  on_rank0(*w, [&] {
    drop_ep(checkpoint_step_dir(no_ep, 1));
    drop_ep(checkpoint_step_dir(dir.sub("dense-no-ep"), 1));
  });
  expect_refused(saved, cfg, *w, checkpoint_step_dir(no_ep, 1),
                 "layout " + dp + " zero0 does not match this run's " + dp + "xEP2 zero0");
  EXPECT_EQ(check_checkpoint_manifest(checkpoint_step_dir(dir.sub("dense-no-ep"), 1), info_of(dp_case(n), cfg))
                .at("step"),
            1);
  // A dense run's checkpoint, resumed as an MoE model of the same layout.
  const std::string dense = dir.sub("dense");
  save_one_step(dp_case(n), cfg, *w, dense);
  expect_refused(moe_case("EP1", n, 1, 1, 0), cfg, *w, checkpoint_step_dir(dense, 1),
                 "the model differs from this run's: num_experts none (this run 4), moe_aux_loss_coeff none "
                 "(this run 0.01)");
}

}  // namespace
}  // namespace dtb
