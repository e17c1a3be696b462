#include "harness/count.h"

#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else  // no valgrind headers: the regions run, and nothing can count them
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_DUMP_STATS_AT(name) (void)(name)
#endif

#include "harness/config.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"
#include "kernels/slowdown.h"
#include "reference/checkpoint/checkpoint_io.h"
#include "reference/layout/layout_runner.h"
#include "reference/model/moe.h"
#include "reference/training/trainer.h"
#include "suites/oracle.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

/// One region's collection window: start() turns callgrind's instrumentation on (run with
/// --instr-atstart=no, the rest of the program runs uninstrumented, several times faster, and
/// every region starts with the simulated caches empty), zeroes the counters and turns
/// collection on for this thread; stop() turns collection off, dumps the counts under the
/// region's name and instrumentation off.
class Window {
 public:
  explicit Window(std::string name) : name_(std::move(name)) {}
  void start() {
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
    t0_ = Clock::now();
  }
  void stop() {
    CALLGRIND_TOGGLE_COLLECT;
    seconds_ = std::chrono::duration<double>(Clock::now() - t0_).count();
    CALLGRIND_DUMP_STATS_AT(name_.c_str());
    CALLGRIND_STOP_INSTRUMENTATION;
  }
  double seconds() const { return seconds_; }

 private:
  std::string name_;
  Clock::time_point t0_{};
  double seconds_ = 0;
};

/// A region: its name, the slowdown factor that applies to it, and the work: `run(runs, w)`
/// calls w.start(), runs exactly `runs` repetitions and calls w.stop().
struct Region {
  std::string name;
  double factor = 1.0;
  std::function<void(int runs, Window& w)> run;
};

/// Page-aligned float buffers, filled with a fixed pattern in [-1, 1): every run then maps them
/// onto the same sets of the simulated first-level cache (whose index bits lie within a page), so
/// that a region's simulated D1 misses do not depend on where the allocator put its buffers (with
/// 64-byte alignment the same binary counted 74 185 or 103 231 D1 read misses in attention's
/// forward pass, run to run).
struct Buffers {
  std::vector<std::unique_ptr<float, decltype(&std::free)>> owned;
  std::vector<std::vector<int32_t>> ints;
  /// n token ids (i * 37) mod v.
  const int32_t* tokens(size_t n, int v) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 37) % size_t(v));
    ints.push_back(std::move(t));
    return ints.back().data();
  }
  float* get(size_t n) {
    const size_t bytes = ((n * sizeof(float) + 4095) / 4096) * 4096;
    float* p = static_cast<float*>(std::aligned_alloc(4096, bytes));
    DTB_CHECK(p != nullptr, "dtbench count: out of memory");
    for (size_t i = 0; i < n; ++i) p[i] = float(int((i * 2654435761u) % 2001) - 1000) / 1000.f;
    owned.emplace_back(p, &std::free);
    return p;
  }
};

template <typename F>
Region repeat(std::string name, double factor, F op) {
  return {std::move(name), factor, [op](int runs, Window& w) {
            w.start();
            for (int i = 0; i < runs; ++i) op();
            w.stop();
          }};
}

// The kernels: the CPU ops of one small layer's shapes (the quick config's model at a batch of
// 4 sequences of 64 tokens; the train step's is the config's) and the gemm suite's sgemm.
void add_kernel_regions(std::vector<Region>& regions, Buffers& b, CpuOps<float>& ops, const InjectedSlowdown& slow) {
  const int B = 4, Tn = 64, C = 64, NH = 4, V = 256, N = B * Tn, OC = 4 * C;
  const std::string nco = "/N:" + std::to_string(N) + "/C:" + std::to_string(C) + "/OC:" + std::to_string(OC);
  float *x = b.get(size_t(N) * C), *w = b.get(size_t(OC) * C), *bias = b.get(OC), *y = b.get(size_t(N) * OC);
  float *dx = b.get(size_t(N) * C), *dw = b.get(size_t(OC) * C), *dbias = b.get(OC), *dy = b.get(size_t(N) * OC);
  regions.push_back(repeat("kernel/matmul_forward" + nco, 1.0, [=, &ops] { ops.matmul_forward(y, x, w, bias, N, C, OC); }));
  regions.push_back(repeat("kernel/matmul_backward" + nco, 1.0,
                           [=, &ops] { ops.matmul_backward(dx, dw, dbias, dy, x, w, N, C, OC); }));
  float *ln = b.get(size_t(N) * C), *mean = b.get(N), *rstd = b.get(N), *lw = b.get(C), *lb = b.get(C);
  float *dln = b.get(size_t(N) * C), *dlw = b.get(C), *dlb = b.get(C);
  const std::string nc = "/N:" + std::to_string(N) + "/C:" + std::to_string(C);
  regions.push_back(repeat("kernel/layernorm_forward" + nc, 1.0,
                           [=, &ops] { ops.layernorm_forward(ln, mean, rstd, x, lw, lb, N, C); }));
  regions.push_back(repeat("kernel/layernorm_backward" + nc, 1.0,
                           [=, &ops] { ops.layernorm_backward(dln, dlw, dlb, dx, x, lw, mean, rstd, N, C); }));
  float *qkv = b.get(size_t(N) * 3 * C), *att = b.get(size_t(B) * NH * Tn * Tn), *ao = b.get(size_t(N) * C);
  float *dqkv = b.get(size_t(N) * 3 * C), *scratch = b.get(size_t(B) * NH * Tn * Tn), *dao = b.get(size_t(N) * C);
  const std::string bt = "/B:" + std::to_string(B) + "/T:" + std::to_string(Tn) + "/C:" + std::to_string(C) +
                         "/NH:" + std::to_string(NH);
  regions.push_back(repeat("kernel/attention_forward" + bt, 1.0,
                           [=, &ops] { ops.attention_forward(ao, att, qkv, B, Tn, C, NH); }));
  regions.push_back(repeat("kernel/attention_backward" + bt, 1.0,
                           [=, &ops] { ops.attention_backward(dqkv, scratch, dao, qkv, att, B, Tn, C, NH); }));
  const size_t n = size_t(N) * OC;
  float *g = b.get(n), *dg = b.get(n);
  regions.push_back(repeat("kernel/gelu_forward/n:" + std::to_string(n), 1.0, [=, &ops] { ops.gelu_forward(g, y, n); }));
  regions.push_back(repeat("kernel/gelu_backward/n:" + std::to_string(n), 1.0,
                           [=, &ops] { ops.gelu_backward(dg, y, dy, n); }));
  float *logits = b.get(size_t(N) * V), *probs = b.get(size_t(N) * V), *losses = b.get(N), *dlogits = b.get(size_t(N) * V);
  const int32_t* tg = b.tokens(size_t(N), V);
  const std::string nv = "/N:" + std::to_string(N) + "/V:" + std::to_string(V);
  regions.push_back(repeat("kernel/crossentropy_forward" + nv, 1.0,
                           [=, &ops] { ops.crossentropy_forward(losses, probs, logits, tg, N, V); }));
  regions.push_back(repeat("kernel/crossentropy_backward" + nv, 1.0,
                           [=, &ops] { ops.crossentropy_backward(dlogits, probs, tg, 1.f / N, N, V); }));
  const size_t np = 131072;
  float *p = b.get(np), *pg = b.get(np), *m = b.get(np), *v = b.get(np);
  for (size_t i = 0; i < np; ++i) v[i] = std::fabs(v[i]);  // a second moment is >= 0
  AdamWParams hp;
  regions.push_back(repeat("kernel/adamw/n:" + std::to_string(np), 1.0,
                           [=, &ops] { ops.adamw_update(p, pg, m, v, np, hp, 1); }));
  // The gemm suite's GEMM (Backend::time_gemm's call), square.
  const int S = 128;  // 4.2 MFLOP: callgrind runs BLAS about 100x slower than the CPU
  float *ga = b.get(size_t(S) * S), *gb = b.get(size_t(S) * S), *gc = b.get(size_t(S) * S);
  regions.push_back(repeat("gemm/sgemm/M:128/N:128/K:128", slow.gemm, [=] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.f, ga, S, gb, S, 0.f, gc, S);
  }));
}

// One MoE layer (reference/model/moe.h) on one rank, the moe suite's path without its exchanges: 256
// tokens in routing groups of 64, C = 64, 4 experts of F = 4C, top-2, capacity factor 1.25 (some
// assignments dropped). The pattern-filled weights route every call alike; the backward region
// reuses one forward's activations and accumulates into the same gradient buffers. Named moe/,
// not kernel/: the layer allocates its routing and row buffers itself (std::vector), so where
// they land decides the simulated cache misses, which the gate then shows and does not gate.
void add_moe_regions(std::vector<Region>& regions, Buffers& b, CpuOps<float>& ops) {
  const int N = 256, C = 64, group = 64;
  MoeConfig cfg;
  cfg.num_experts = 4, cfg.topk = 2, cfg.capacity_factor = 1.25;
  const int E = cfg.num_experts, F = moe_hidden(cfg, C);
  auto weights = [&] {
    return MoeWeights<float>{b.get(size_t(E) * C), b.get(size_t(E) * F * C), b.get(size_t(E) * F),
                             b.get(size_t(E) * C * F), b.get(size_t(E) * C)};
  };
  const MoeWeights<float> w = weights(), dw = weights();
  // The router's pattern-filled weights and inputs in [-1, 1) give logits of size ~C: scaled to
  // ~1, so the softmax is not one-hot and the gradients are not all zero.
  for (size_t i = 0; i < size_t(E) * C; ++i) w.router[i] *= 0.02f;
  float *x = b.get(size_t(N) * C), *out = b.get(size_t(N) * C), *dout = b.get(size_t(N) * C), *dx = b.get(size_t(N) * C);
  auto acts = std::make_shared<MoeActivations<float>>();
  const std::string tag = "/N:" + std::to_string(N) + "/C:" + std::to_string(C) + "/E:" + std::to_string(E) +
                          "/k:" + std::to_string(cfg.topk);
  regions.push_back(repeat("moe/forward" + tag, 1.0, [=, &ops] {
    moe_forward(ops, cfg, w, x, out, N, C, *acts, group);
  }));
  regions.push_back({"moe/backward" + tag, 1.0, [=, &ops](int runs, Window& win) {
                       moe_forward(ops, cfg, w, x, out, N, C, *acts, group);
                       win.start();
                       for (int i = 0; i < runs; ++i) moe_backward(ops, cfg, w, dw, x, dout, dx, N, C, *acts);
                       win.stop();
                     }});
}

// The training step, both trainers, on one rank: the single-rank Gpt trainer (the train
// suite's data-parallel path, reference/training/trainer.h train) and the sharded trainer at
// tp = pp = dp = 1 (reference/layout/layout_runner.h run_layout), the config's model and batch.
void add_train_regions(std::vector<Region>& regions, const json& cfg, const Dataset& data, Device& device,
                       Communicator& world, const InjectedSlowdown& slow) {
  const GptConfig model = gpt_config_from_json(cfg.at("model"));
  require_gpt2(model, "model", "the instruction counts (its sharded-trainer region)");
  TrainConfig train = train_config_from_json(cfg.at("train"), cfg, "train");
  const std::string tag = "/" + cfg.at("name").get<std::string>();
  regions.push_back({"train_step/gpt" + tag, slow.train_step, [=, &data, &device, &world](int runs, Window& w) {
                       Gpt<float> m(model, device);
                       m.init(train.seed);
                       TrainConfig t = train;
                       t.steps = runs;
                       w.start();
                       (void)dtb::train(m, data, t, DpSync{}, world);
                       w.stop();
                     }});
  regions.push_back({"train_step/parallel_gpt" + tag, slow.train_step, [=, &data, &device, &world](int runs, Window& w) {
                       TrainConfig t = train;
                       t.steps = runs;
                       LayoutHooks hooks;
                       hooks.before_step = [&](int64_t s) {
                         if (s == 0) w.start();
                       };
                       hooks.after_step = [&](int64_t done, const TrainRun&) {
                         if (done == runs) w.stop();
                       };
                       (void)run_layout({.model = model, .layout = {}, .train = t, .device = device,
                                         .host = world, .data = data, .hooks = &hooks});
                     }});
}

// A checkpoint's CPU side on one rank (the checkpoint suite's blocking save without the disk's
// wait, which callgrind does not count): the rank file of the config's model at ZeRO 0 in fp32
// (parameters, AdamW m and v, the pattern-filled state, the index) built into its sections and written with
// its SHA-256 (reference/checkpoint/checkpoint_io.h rank_sections, write_rank_file), into a directory made
// once and removed after.
void add_checkpoint_regions(std::vector<Region>& regions, const json& cfg) {
  const GptConfig model = gpt_config_from_json(cfg.at("model"));
  const size_t n = size_t(gpt_num_params(model));
  const std::string tag = "/" + cfg.at("name").get<std::string>();
  regions.push_back({"checkpoint/rank_file" + tag, 1.0, [n](int runs, Window& w) {
                       ZeroState<float> st;
                       st.params.resize(n), st.m.resize(n), st.v.resize(n);
                       for (size_t i = 0; i < n; ++i)
                         st.params[i] = st.m[i] = st.v[i] = float(int((i * 2654435761u) % 2001) - 1000) / 1000.f;
                       st.t = 1;
                       ZeroStateIndex index;  // one rank holding the whole model: one run each
                       index.params.resize(n);
                       for (size_t i = 0; i < n; ++i) index.params[i] = int64_t(i);
                       index.moments = index.params;
                       CheckpointRunInfo run;
                       TrainProgress progress;
                       progress.next_step = 1;
                       std::string dir = (std::filesystem::temp_directory_path() / "dtbench-count-XXXXXX").string();
                       DTB_CHECK(::mkdtemp(dir.data()) != nullptr, "dtbench count: cannot make a temporary directory");
                       const std::string path = dir + "/rank-0.bin";
                       w.start();
                       for (int i = 0; i < runs; ++i)
                         (void)write_rank_file(path, {0, 1, 1}, checkpoint_io::rank_sections(st, index, run, progress));
                       w.stop();
                       std::filesystem::remove_all(dir);
                     }});
}

}  // namespace

CLI::App* add_count_subcommand(CLI::App& app, CountArgs& a) {
  auto* sub = app.add_subcommand("count", "run fixed CPU work region by region, for counting instructions under "
                                          "callgrind (the regression gate's counting mode, docs/ci.md)");
  sub->add_option("--config", a.config, "named config or JSON file whose model, train batch and data the train-step "
                                        "regions use (default: smoke)");
  sub->add_option("--reps", a.reps, "repetitions per region (default 20: a slowdown factor of 1.05 then repeats a whole one)");
  sub->add_option("--only", a.only, "only the regions whose name contains this text");
  sub->add_flag("--list", a.list, "print the region names and exit");
  return sub;
}

int cmd_count(Communicator& world, const CountArgs& a) {
  if (world.size() != 1) throw InputError("dtbench count runs on one rank (got " + std::to_string(world.size()) + ")");
  if (a.reps < 1 || a.reps > 1000) throw InputError("--reps must be in [1, 1000], got " + std::to_string(a.reps));
  const InjectedSlowdown slow = injected_slowdown_from_env();
  // One BLAS thread, whatever OPENBLAS_NUM_THREADS says: the regions collect this thread's work only.
  openblas_set_num_threads(1);
  const json cfg = parse_config(read_config_text(a.config), a.config, "train", "", WorldInfo(1, 1));
  const Dataset data = load_dataset(cfg.at("data"), size_t(cfg.at("model").at("T").get<int>()) + 2);
  CpuDevice device;
  CpuOps<float> ops;
  Buffers buffers;
  std::vector<Region> regions;
  add_kernel_regions(regions, buffers, ops, slow);
  add_moe_regions(regions, buffers, ops);
  add_train_regions(regions, cfg, data, device, world, slow);
  add_checkpoint_regions(regions, cfg);
  std::vector<Region*> chosen;
  for (Region& r : regions)
    if (r.name.find(a.only) != std::string::npos) chosen.push_back(&r);
  if (chosen.empty()) throw InputError("--only '" + a.only + "' matches no region (see dtbench count --list)");
  if (a.list) {
    for (const Region* r : chosen) std::printf("%s\n", r->name.c_str());
    return 0;
  }
  json out = {{"count_version", 1}, {"config", cfg.at("name")}, {"reps", a.reps},
              {"injected_slowdown", slow.to_string()}, {"regions", json::array()}};
  for (Region* r : chosen) {
    const int runs = int(std::lround(r->factor * a.reps));
    Window w(r->name);
    r->run(runs, w);
    out["regions"].push_back({{"name", r->name}, {"reps", a.reps}, {"runs", runs}, {"seconds", w.seconds()}});
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

}  // namespace dtb
