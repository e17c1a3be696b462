// The `overlap` suite: what overlapping the gradient reduce-scatters with the backward
// (ZeRO's overlap_comm, DeepSpeed's name) buys, over a few reduce_bucket_size values: the
// GPT trained with data parallelism over every rank at ZeRO stage 2 (or 3), overlap off and
// on alternately (repetitions, medians of the slowest rank's step times); the gain is
// t(off) / t(on) per bucket size. Check: overlap changes no result beyond rounding. The
// reduce-scatters complete in the order they were issued, but MPI's non-blocking
// reduce-scatter may group the DP sum differently from the blocking one (another
// algorithm): a few float32 roundings per gradient element. Float32 runs that regroup sums
// like that (the train suite's single-rank references with 1, 2 and 4 micro-batches) differ
// by at most 3e-9 relative in the loss over their first 7 steps (measured, default
// config), so the check bounds those steps by 1e-6 relative; a lost or doubled bucket moves
// the loss by 1e-3 or more from the first step on.
// On MPI over shared memory a non-blocking collective progresses only inside MPI calls, so
// little overlap is expected here; on NCCL the reduce-scatter runs on its own stream.
#include <algorithm>
#include <cstdio>

#include "kernels/error.h"
#include "suites/memory_guard.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

// The section, typed: the one parse validate() and run() use.
struct Params {
  TimedDpSetup t;
  int stage = 0, reps = 0;
  std::vector<size_t> bucket_sizes;  // elements
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    p.t = timed_dp_setup(s, config, "overlap", world.size);
    p.stage = zero_stage_from_json(s, "overlap", 2, kMaxZeroStage);
    p.reps = int(int_in_range(s, "repetitions", "overlap.repetitions", 1, 100));
    const json& b = s.at("bucket_sizes");
    if (b.empty()) throw InputError("overlap.bucket_sizes is empty");
    for (const auto& v : b) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1)
        throw InputError("overlap.bucket_sizes: every entry must be an integer >= 1 (elements), got " + v.dump());
      p.bucket_sizes.push_back(size_t(v.get<int64_t>()));
    }
    return p;
  }
  json to_json() const {
    return {{"setup", dtb::to_json(t)}, {spelling(LayoutKey::zero_stage).config_key, stage}, {"repetitions", reps}, {"bucket_sizes", bucket_sizes}};
  }
};

class OverlapSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "overlap"; }
  std::string description() const override {
    return "step time with overlap_comm off and on over reduce_bucket_size values (ZeRO 2): the gain as a ratio";
  }
  json defaults() const override {
    return {{"model", {{"L", 4}, {"C", 256}, {"NH", 4}, {"T", 64}, {"V", 256}}},
            {"steps", 6}, {"micro_batches", 1}, {"micro_batch_size", 2}, {"seq_len", 64},
            {config_key(LayoutKey::zero_stage), 2}, {"bucket_sizes", {50000, 500000, 500000000}}, {"repetitions", 3}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(section, config, world);
    const TimedDpSetup& t = p.t;
    validate_layout(t.layout, t.model, t.cfg.global_batch, world.size);
    check_fits_in_memory(unsharded_training_state_bytes(t.model), world.ranks_per_node, "overlap: the model", world.options);
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.dataset != nullptr, "overlap suite needs a dataset");
    Communicator& world = ctx.world;
    Backend* be = ctx.backend;
    Communicator& comm = ctx.device_world ? *ctx.device_world : world;
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const TimedDpSetup& t = p.t;
    const int stage = p.stage, reps = p.reps;
    ctx.print("# overlap: GPT L=" + std::to_string(t.model.L) + " C=" + std::to_string(t.model.C) + ", " +
              std::to_string(gpt_num_params(t.model)) + " params, DP " + std::to_string(world.size()) + ", ZeRO " +
              std::to_string(stage) + ", " + std::to_string(t.cfg.steps) + " steps x " + std::to_string(reps) +
              " repetitions alternating; median of the slowest rank's step times after the first");
    ctx.print("#  reduce_bucket_size   overlap off (ms)   overlap on (ms)   gain off/on");
    SuiteResult res;
    double loss_diff = 0;
    for (const size_t bucket : p.bucket_sizes) {
      std::vector<double> times[2];
      std::vector<double> losses[2];
      for (int r = 0; r < reps; ++r)
        for (int on = 0; on < 2; ++on) {
          ZeroConfig z;
          z.stage = stage;
          z.reduce_bucket_size = bucket;
          z.overlap_comm = on == 1;
          const LayoutOutcome o =
              run_layout({.model = t.model, .layout = {.l = t.layout, .z = z}, .train = t.cfg, .device = ctx.device,
                          .ops = precision_ops(be), .host = world, .device_comm = &comm,
                          .data = *ctx.dataset});
          const std::vector<double> st = slowest_step_times(o, world);
          times[on].insert(times[on].end(), st.begin() + 1, st.end());
          losses[on] = o.losses;
        }
      for (size_t i = 0; i < std::min<size_t>(losses[0].size(), 7); ++i)
        loss_diff = std::max(loss_diff, std::fabs(losses[0][i] - losses[1][i]) / losses[0][i]);
      if (world.rank() != 0) continue;
      const Summary s0 = summarize(times[0]), s1 = summarize(times[1]);
      for (int on = 0; on < 2; ++on) {
        const Summary& s = on ? s1 : s0;
        json rec = benchmark_record("overlap/" + std::string(spelling(LayoutKey::zero_stage).name_key) + ":" +
                                        std::to_string(stage) + "/reduce_bucket_size:" +
                                        std::to_string(bucket) + "/overlap_comm:" + (on ? "true" : "false"),
                                    int64_t(times[on].size()), reps, s.median, s.median, "ms");
        rec["step_time_ms"] = to_json(s, 1e3);
        rec["reduce_bucket_size"] = bucket;
        if (on) rec["gain"] = s0.median / s1.median;
        res.benchmarks.push_back(rec);
      }
      char line[200];
      std::snprintf(line, sizeof line, "   %18zu   %16.2f   %15.2f   %11.3f", bucket, s0.median * 1e3, s1.median * 1e3,
                    s0.median / s1.median);
      ctx.print(line);
    }
    if (world.rank() == 0)
      res.checks.push_back(make_check("overlap/losses_unchanged", loss_diff, 1e-6,
                                      "max |loss(on) - loss(off)| / loss over the first 7 steps <= 1e-6"));
    return res;
  }
};

}  // namespace

DTB_REGISTER_SUITE("overlap", OverlapSuite);

}  // namespace dtb
