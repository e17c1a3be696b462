// The `checkpoint` suite: what saving training checkpoints costs (the article's [docs/claims.md#the-article] checkpointing
// overhead; the recompute suite measures activation checkpointing). The GPT trained data-
// parallel over every rank without saves, with a blocking save every save_interval steps and
// with an asynchronous one (reference/checkpoint/checkpoint_async.h), alternately (repetitions); then a
// resume from the asynchronous checkpoint. Per rank: bytes, save write and load seconds and
// GB/s against the disk's own sequential write (+ fsync) and read rate, measured in the same
// directory with the same sizes; rank 0's commit (manifest, latest); each mode's training
// time per step against no saves. Young's (1974) and Daly's (2006) optimal interval follow
// from the measured cost and mtbf_hours. Checks: the resumed run is bitwise the uninterrupted
// one, the asynchronous files are byte for byte the blocking ones, every save committed, and
// each rank file holds exactly the state the memory model predicts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/checkpoint/checkpoint_interval.h"
#include "suites/checkpoint_disk.h"
#include "suites/memory_guard.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The section, typed: the one parse validate() and run() use.
struct Params {
  TimedDpSetup t;
  ZeroConfig zero;
  int save_interval = 0, reps = 0;
  std::string dir;  // "": the system's temporary directory
  double mtbf_hours = 0;
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    p.t = timed_dp_setup(s, config, "checkpoint", world.size);
    p.zero.stage = zero_stage_from_json(s, "checkpoint");
    // At most steps - 1: the resume from the first save needs a step left to run.
    p.save_interval = int(int_in_range(s, "save_interval", "checkpoint.save_interval", 1, p.t.cfg.steps - 1));
    p.reps = int(int_in_range(s, "repetitions", "checkpoint.repetitions", 1, 100));
    p.mtbf_hours = number_in_range(s, "mtbf_hours", "checkpoint.mtbf_hours", 1e-3, 1e9);
    p.dir = s.at("checkpoint_dir").get<std::string>();
    return p;
  }
  json to_json() const {
    return {{"setup", dtb::to_json(t)}, {config_key(LayoutKey::zero_stage), zero.stage},
            {"save_interval", save_interval},
            {"repetitions", reps}, {"mtbf_hours", mtbf_hours}, {"checkpoint_dir", dir}};
  }
  int saves() const { return t.cfg.steps / save_interval; }
};

// What one repetition measured on this rank, seconds and bytes.
struct Rep {
  double loop_s[3] = {};  // training loop (first step to the last commit): none, blocking, async
  std::vector<SaveTiming> saves[2];  // blocking, async
  double load_s = 0, disk_write_s = 0, disk_read_s = 0;
  uint64_t bytes = 0;  // this rank's file
  uint64_t index_bytes = 0;  // of it, the resharding index: its two sections and their table entries
  double loss_diff = 0;  // max |loss(resumed) - loss(no saves)|
  int missing_saves = 0, differing_files = 0;
};

constexpr const char* kModeNames[] = {"none", "blocking", "async"};
constexpr int kDiskProbes = 5;  // disk probes a repetition

// One training run, the loop timed from the first step's start to run_layout's return (an
// asynchronous run's last commit included), the slowest rank's.
LayoutOutcome timed_run(const Params& p, SuiteContext& ctx, const LayoutCheckpoints* ck, double& loop_s) {
  double t0 = 0;
  LayoutHooks hooks{.before_step = [&](int64_t) {
    if (t0 == 0) t0 = now_s();
  }};
  LayoutOutcome out = run_layout({.model = p.t.model, .layout = {.l = p.t.layout, .z = p.zero}, .train = p.t.cfg,
                                  .device = ctx.device, .host = ctx.world, .data = *ctx.dataset,
                                  .checkpoints = ck, .hooks = &hooks});
  loop_s = now_s() - t0;
  ctx.world.all_reduce(&loop_s, &loop_s, 1, DType::f64, ReduceOp::max);
  return out;
}

// The rank files' entries (sizes, SHA-256) of a step's manifest.
json manifest_ranks(const std::string& step_dir) {
  std::ifstream in(fs::path(step_dir) / "manifest.json");
  return in ? json::parse(in, nullptr, false).value("ranks", json()) : json();
}

Rep run_rep(const Params& p, SuiteContext& ctx, const std::string& work, int rep) {
  Communicator& world = ctx.world;
  Rep r;
  const std::string tag = std::string("-").append(std::to_string(rep));
  timed_run(p, ctx, nullptr, r.loop_s[0]);
  const LayoutOutcome none = timed_run(p, ctx, nullptr, r.loop_s[0]);  // the first warms the caches
  LayoutCheckpoints ck[2] = {{.dir = work + "/blocking" + tag, .every = p.save_interval},
                             {.dir = work + "/async" + tag, .every = p.save_interval, .async = true}};
  for (int m = 0; m < 2; ++m) {
    const LayoutOutcome o = timed_run(p, ctx, &ck[m], r.loop_s[m + 1]);
    r.saves[m] = o.checkpoints.save_timings;
    r.missing_saves += p.saves() - int(o.checkpoints.saved.size());
  }
  r.bytes = r.saves[0].empty() ? 0 : r.saves[0][0].bytes;
  if (!r.saves[0].empty()) {  // the index's bytes, from the file itself (its runs depend on the rank's shards)
    const std::string f = (fs::path(checkpoint_step_dir(ck[0].dir, r.saves[0][0].step)) /
                           ("rank-" + std::to_string(world.rank()) + ".bin")).string();
    r.index_bytes = rank_file_index_bytes(f, {world.rank(), world.size(), r.saves[0][0].step}, world);  // agreed
  }
  // The disk's own rate for this rank's bytes, every rank at once, as the saves wrote: the
  // median of kDiskProbes probes (a shared disk's rate moves from one moment to the next).
  std::vector<double> dw, dr;
  for (int i = 0; i < kDiskProbes; ++i) {
    world.barrier();
    const DiskRate d = measure_disk(work + "/disk-" + std::to_string(world.rank()) + ".tmp", r.bytes, world);
    dw.push_back(d.write_s), dr.push_back(d.read_s);
  }
  r.disk_write_s = summarize(dw).median, r.disk_read_s = summarize(dr).median;
  // Load from the asynchronous checkpoint, its pages dropped from the cache first, as the
  // disk probe's read was.
  const std::string step_dir = checkpoint_step_dir(ck[1].dir, p.save_interval);
  drop_cached(step_dir + "/rank-" + std::to_string(world.rank()) + ".bin");
  world.barrier();
  LayoutCheckpoints resume{.resume_step_dir = step_dir};
  double unused = 0;
  const LayoutOutcome res = timed_run(p, ctx, &resume, unused);
  r.load_s = res.checkpoints.load_s;
  for (size_t k = 0; k < none.losses.size(); ++k)
    r.loss_diff = std::max(r.loss_diff, k < res.losses.size() ? std::fabs(res.losses[k] - none.losses[k]) : INFINITY);
  if (world.rank() == 0) {
    for (int k = p.save_interval; k <= p.t.cfg.steps; k += p.save_interval) {
      const json a = manifest_ranks(checkpoint_step_dir(ck[1].dir, k));
      if (a.is_null() || a != manifest_ranks(checkpoint_step_dir(ck[0].dir, k))) ++r.differing_files;
    }
    std::error_code ec;  // best effort: a directory left behind is no error of the measurement
    for (const auto& c : ck) fs::remove_all(c.dir, ec);
  }
  world.barrier();
  return r;
}

// The rank file's bytes the memory model predicts for every rank (equal shards, padded): the header (72), the section
// table (48 a section: state, params, master when held, m, v), the state (48) and the
// parameter, master-weight and optimizer-state bytes of plan_rank. Not the resharding index
// (index.params, index.state: 24 bytes a run of consecutive elements, as many runs as the
// rank's shards cut its tensors), which the check subtracts as the file reports it.
double predicted_file_bytes(const Params& p, int world_size) {
  PlanConfig pc;
  pc.model = p.t.model;
  pc.layout = p.t.layout;
  pc.zero = p.zero;
  pc.seq_len = p.t.cfg.seq_len;
  pc.micro_batch_size = p.t.cfg.global_batch / (world_size * p.t.cfg.micro_batches);
  const RankPlan plan = plan_rank(pc, 0, 0);
  double state = 0;
  for (MemCategory c : {MemCategory::param, MemCategory::master_param, MemCategory::optimizer_state})
    for (Tier t : {Tier::device, Tier::host}) state += double(plan.mem.get(t, c));
  const int sections = 4 + (plan.mem.get(Tier::device, MemCategory::master_param) +
                                    plan.mem.get(Tier::host, MemCategory::master_param) >
                                0);
  return 72.0 + 48.0 * sections + 48.0 + state;
}

double median(std::vector<double> xs) { return summarize(std::move(xs)).median; }

// Per repetition and save, mode m's `field` of SaveTiming, the slowest rank's (a missing
// save: 0). Collective.
std::vector<double> slowest_saves(const std::vector<Rep>& reps, int m, int saves, double SaveTiming::*field,
                                  Communicator& world) {
  std::vector<double> v;
  for (const Rep& r : reps)
    for (int j = 0; j < saves; ++j) v.push_back(j < int(r.saves[m].size()) ? r.saves[m][j].*field : 0.0);
  world.all_reduce(v.data(), v.data(), v.size(), DType::f64, ReduceOp::max);
  return v;
}

// The Young/Daly interval record of a save mode whose cost per save is delta_s.
json interval_record(const std::string& mode, double delta_s, double mtbf_h, double step_s, int save_interval,
                     double measured_overhead) {
  const double M = mtbf_h * 3600.0, young = young_interval_s(delta_s, M), daly = daly_interval_s(delta_s, M);
  json rec = benchmark_record("checkpoint/interval/save:" + mode, 1, 1, delta_s, delta_s, "ms");
  rec["save"] = mode;
  rec["save_cost_ms"] = delta_s * 1e3;
  rec["mtbf_hours"] = mtbf_h;
  rec["young_interval_s"] = young;
  rec["daly_interval_s"] = daly;
  rec["daly_interval_steps"] = daly / step_s;
  rec["overhead_at_daly"] = checkpoint_overhead_share(daly, delta_s, M);
  rec["overhead_at_save_interval"] = measured_overhead;
  rec["predicted_overhead_at_save_interval"] = delta_s / (save_interval * step_s);
  return rec;
}

class CheckpointSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "checkpoint"; }
  std::string description() const override {
    return "checkpoint save/load s and GB/s per rank vs the disk's own rate, async vs blocking save, "
           "Young/Daly interval";
  }
  json defaults() const override {
    return {{"model", {{"L", 4}, {"C", 128}, {"NH", 4}, {"T", 64}, {"V", 256}}},
            {"steps", 8}, {"micro_batches", 1}, {"micro_batch_size", 2}, {"seq_len", 64},
            {config_key(LayoutKey::zero_stage), 1},
            {"save_interval", 2}, {"repetitions", 3}, {"mtbf_hours", 200.0}, {"checkpoint_dir", ""}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(section, config, world);
    validate_layout(p.t.layout, p.t.model, p.t.cfg.global_batch, world.size);
    validate_zero(p.zero);
    if (!p.dir.empty()) {
      std::error_code ec;
      if (!fs::exists(p.dir, ec))
        throw InputError("checkpoint.checkpoint_dir: '" + p.dir + "' does not exist (the suite measures a "
                         "filesystem that is there; make the directory first)");
      if (!fs::is_directory(p.dir, ec)) throw InputError("checkpoint.checkpoint_dir: '" + p.dir + "' is not a directory");
      check_dir_writable(p.dir, "checkpoint.checkpoint_dir");
    }
    // The training's state and the snapshot's.
    check_fits_in_memory(2.0 * unsharded_training_state_bytes(p.t.model) +
                             fp32_step_activation_bytes(p.t.model, p.t.cfg),
                         world.ranks_per_node, "checkpoint: the model, batch and a state snapshot", world.options);
  }
  SuiteResult run(SuiteContext& ctx) override;
};

// What the repetitions measured, combined over the ranks (collective), seconds and bytes.
struct Measured {
  std::vector<double> per_step[3];           // training time per step, slowest rank, per repetition
  std::vector<double> cost[2];               // (mode - none) x steps / saves, per repetition (paired)
  std::vector<double> stall[2], write[2], snapshot[2];  // per save, the slowest rank's
  std::vector<double> commit[2];             // per save, rank 0's (the manifest phase)
  std::vector<double> load, disk_w, disk_r;  // per repetition, the slowest rank's
  std::vector<double> ranks;                 // 7 a rank: bytes, write s blocking, async, load s, disk write s, read s,
                                             // the index's bytes
  double loss_diff = 0, missing = 0, differing = 0;
};

Measured combine(const Params& p, const std::vector<Rep>& reps, Communicator& world) {
  Measured x;
  const int S = p.saves(), steps = p.t.cfg.steps;
  for (const Rep& r : reps)
    for (int m = 0; m < 3; ++m) {
      x.per_step[m].push_back(r.loop_s[m] / steps);
      if (m) x.cost[m - 1].push_back((r.loop_s[m] - r.loop_s[0]) / S);
    }
  std::vector<double> wb[2];  // this rank's writes
  for (int m = 0; m < 2; ++m) {
    x.stall[m] = slowest_saves(reps, m, S, &SaveTiming::stall_s, world);
    x.write[m] = slowest_saves(reps, m, S, &SaveTiming::write_s, world);
    x.snapshot[m] = slowest_saves(reps, m, S, &SaveTiming::snapshot_s, world);
    for (const Rep& r : reps)
      for (const SaveTiming& t : r.saves[m]) x.commit[m].push_back(t.commit_s), wb[m].push_back(t.write_s);
  }
  for (const Rep& r : reps) {
    x.load.push_back(r.load_s), x.disk_w.push_back(r.disk_write_s), x.disk_r.push_back(r.disk_read_s);
    x.loss_diff = std::max(x.loss_diff, r.loss_diff), x.missing += r.missing_saves, x.differing += r.differing_files;
  }
  std::vector<double> mine = {double(reps[0].bytes), median(wb[0]), median(wb[1]),
                              median(x.load), median(x.disk_w), median(x.disk_r), double(reps[0].index_bytes)};
  x.ranks.resize(mine.size() * size_t(world.size()));
  world.all_gather(mine.data(), x.ranks.data(), mine.size(), DType::f64);
  for (auto* v : {&x.load, &x.disk_w, &x.disk_r}) world.all_reduce(v->data(), v->data(), v->size(), DType::f64, ReduceOp::max);
  world.all_reduce(&x.loss_diff, &x.loss_diff, 1, DType::f64, ReduceOp::max);
  world.all_reduce(&x.missing, &x.missing, 1, DType::f64, ReduceOp::max);
  return x;
}

// The save modes' training records and table lines: step time, overhead over no saves, cost
// per save, stall, write, snapshot, commit, GB/s against the disk's.
void train_records(SuiteContext& ctx, const Params& p, const Measured& x, double bytes, double disk_w_GBps,
                   SuiteResult& res) {
  const double base = median(x.per_step[0]);
  ctx.print("#  save       step (ms)   overhead   per save (ms)   stall (ms)   write (ms)   GB/s   of disk");
  for (int m = 0; m < 3; ++m) {
    const Summary s = summarize(x.per_step[m]);
    json rec = benchmark_record(std::string("checkpoint/train/save:") + kModeNames[m], int64_t(s.n), p.reps,
                                s.median, s.median, "ms");
    rec["save"] = kModeNames[m];
    rec["step_time_ms"] = to_json(s, 1e3);
    rec["overhead"] = s.median / base - 1.0;
    char line[200];
    std::snprintf(line, sizeof line, "   %-9s %10.2f", kModeNames[m], s.median * 1e3);
    if (m > 0) {
      const int i = m - 1;
      const Summary st = summarize(x.stall[i]), wr = summarize(x.write[i]);
      const double cost = median(x.cost[i]), gbps = bytes / wr.median / 1e9;
      rec["saves"] = p.saves();
      rec["save_cost_ms"] = cost * 1e3;
      rec["stall_time_ms"] = to_json(st, 1e3);
      rec["write_time_ms"] = to_json(wr, 1e3);
      rec["snapshot_time_ms"] = to_json(summarize(x.snapshot[i]), 1e3);
      rec["commit_time_ms"] = to_json(summarize(x.commit[i]), 1e3);
      rec["bytes_per_rank"] = bytes;
      rec["write_GBps"] = gbps;
      rec["disk_fraction"] = gbps / disk_w_GBps;
      std::snprintf(line, sizeof line, "   %-9s %10.2f   %+7.1f%%   %13.2f   %10.2f   %10.2f   %5.3f   %6.1f%%",
                    kModeNames[m], s.median * 1e3, 100 * (s.median / base - 1), cost * 1e3, st.median * 1e3,
                    wr.median * 1e3, gbps, 100 * gbps / disk_w_GBps);
    }
    ctx.print(line);
    res.benchmarks.push_back(rec);
  }
}

SuiteResult CheckpointSuite::run(SuiteContext& ctx) {
  DTB_CHECK(ctx.dataset != nullptr, "checkpoint suite needs a dataset");
  Communicator& world = ctx.world;
  const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
  const std::string work = shared_work_dir(p.dir, world);
  // Removed by rank 0 when the suite ends, also when a refusal (a damaged file) ends it early.
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;  // best effort: a directory left behind is no error of the measurement
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup{world.rank() == 0 ? work : std::string()};
  ctx.print("# checkpoint: GPT L=" + std::to_string(p.t.model.L) + " C=" + std::to_string(p.t.model.C) + ", " +
            std::to_string(gpt_num_params(p.t.model)) + " params, DP " + std::to_string(world.size()) + " zero" +
            std::to_string(p.zero.stage) + ", " + std::to_string(p.t.cfg.steps) + " steps, a save every " +
            std::to_string(p.save_interval) + ", " + std::to_string(p.reps) + " repetitions, in " + work);
  std::vector<Rep> reps;
  for (int i = 0; i < p.reps; ++i) reps.push_back(run_rep(p, ctx, work, i));
  world.barrier();
  const Measured x = combine(p, reps, world);
  SuiteResult res;
  if (world.rank() != 0) return res;
  const int n = world.size();
  json ranks = json::array();
  double rank_bytes_err = 0, bytes = 0;
  const double predicted = predicted_file_bytes(p, n);
  for (int r = 0; r < n; ++r) {
    const double* a = x.ranks.data() + 7 * size_t(r);
    bytes = std::max(bytes, a[0]);
    rank_bytes_err = std::max(rank_bytes_err, std::fabs(a[0] - a[6] - predicted));
    ranks.push_back({{"rank", r}, {"bytes", a[0]}, {"write_s", a[1]}, {"async_write_s", a[2]}, {"load_s", a[3]},
                     {"write_GBps", a[0] / a[1] / 1e9}, {"load_GBps", a[0] / a[3] / 1e9},
                     {"disk_write_GBps", a[0] / a[4] / 1e9}, {"disk_read_GBps", a[0] / a[5] / 1e9}});
  }
  const Summary ls = summarize(x.load), dw = summarize(x.disk_w), dr = summarize(x.disk_r);
  const double disk_w_GBps = bytes / dw.median / 1e9, disk_r_GBps = bytes / dr.median / 1e9;
  train_records(ctx, p, x, bytes, disk_w_GBps, res);
  json lrec = benchmark_record("checkpoint/load", int64_t(ls.n), p.reps, ls.median, ls.median, "ms");
  lrec["load_time_ms"] = to_json(ls, 1e3);
  lrec["bytes_per_rank"] = bytes;
  lrec["read_GBps"] = bytes / ls.median / 1e9;
  lrec["disk_fraction"] = bytes / ls.median / 1e9 / disk_r_GBps;
  res.benchmarks.push_back(lrec);
  for (int w = 0; w < 2; ++w) {
    const Summary& d = w ? dr : dw;
    json rec = benchmark_record(std::string("checkpoint/disk/op:") + (w ? "read" : "write"), int64_t(d.n), p.reps,
                                d.median, d.median, "ms");
    rec["op"] = w ? "read" : "write";
    rec["disk_time_ms"] = to_json(d, 1e3);
    rec["bytes_per_rank"] = bytes;
    rec["disk_GBps"] = bytes / d.median / 1e9;
    res.benchmarks.push_back(rec);
  }
  char line[260];
  std::snprintf(line, sizeof line,
                "#  disk (%.0f bytes a rank, all ranks at once): write+fsync %.3f GB/s, read %.3f GB/s; load %.2f ms = "
                "%.3f GB/s (%.1f%% of the disk's read)",
                bytes, disk_w_GBps, disk_r_GBps, ls.median * 1e3, bytes / ls.median / 1e9,
                100 * bytes / ls.median / 1e9 / disk_r_GBps);
  ctx.print(line);
  // Young/Daly's delta: blocking, the training thread's stall per save; asynchronous, the
  // measured cost per save on the training time, at least its stall.
  const double base = median(x.per_step[0]);
  for (int m = 0; m < 2; ++m) {
    const double delta = m ? std::max(median(x.stall[1]), median(x.cost[1])) : median(x.stall[0]);
    json rec = interval_record(kModeNames[m + 1], delta, p.mtbf_hours, base, p.save_interval,
                               median(x.per_step[m + 1]) / base - 1.0);
    std::snprintf(line, sizeof line,
                  "#  %s save: %.2f ms a save; MTBF %g h: Young %.1f s, Daly %.1f s = %.0f steps; overhead %.4f%% "
                  "at Daly's interval",
                  kModeNames[m + 1], delta * 1e3, p.mtbf_hours, rec["young_interval_s"].get<double>(),
                  rec["daly_interval_s"].get<double>(), rec["daly_interval_steps"].get<double>(),
                  100 * rec["overhead_at_daly"].get<double>());
    ctx.print(line);
    res.benchmarks.push_back(rec);
  }
  res.checks.push_back(make_check("checkpoint/resumed_bitwise", x.loss_diff, 0.0,
                                  "max |loss(resumed from the asynchronous step-" + std::to_string(p.save_interval) +
                                      ") - loss(no saves)| over steps and repetitions, bitwise"));
  res.checks.push_back(make_check("checkpoint/async_files_equal_blocking", x.differing, 0.0,
                                  "step directories whose rank files' sizes and SHA-256 differ between the "
                                  "asynchronous and the blocking saves (the same state, the same bytes)"));
  res.checks.push_back(make_check("checkpoint/saves_committed", x.missing, 0.0,
                                  "saves not committed (a failed write, a missing manifest), the most on any rank"));
  res.checks.push_back(make_check("checkpoint/rank_bytes", rank_bytes_err, 0.0,
                                  "max |rank file bytes less the resharding index's - (header, section table and state + the memory model's "
                                  "param, master and optimizer bytes)|, exact"));
  res.data = {{"ranks", ranks}, {"predicted_rank_bytes", predicted}, {"disk_write_GBps", disk_w_GBps},
              {"disk_read_GBps", disk_r_GBps}, {"mtbf_hours", p.mtbf_hours}, {"save_interval", p.save_interval},
              {"steps", p.t.cfg.steps}};
  return res;
}

}  // namespace

DTB_REGISTER_SUITE("checkpoint", CheckpointSuite);

}  // namespace dtb
