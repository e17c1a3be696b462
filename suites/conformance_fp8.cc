// The conformance suite's FP8 rows: every listed layout under each recipe of conformance.fp8 against its
// one-rank twin (docs/fp8.md#the-conformance-suites-fp8-rows). The contract, its regime and what it
// does not cover are derived in suites/oracle.cc (fp8_twin_checks).
#include "suites/conformance_fp8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "kernels/error.h"
#include "reference/layout/layout_validate.h"
#include "suites/oracle.h"

namespace dtb::conformance {

using nlohmann::json;

namespace {

// Layout li of `p` with FP8 recipe `s` (none: its fp32 run, dev32's) over fp32 storage (the sharp
// form: the layouts' own deviations are fp32 rounding).
LayoutSpec fp8_spec(const Layouts& p, size_t li, const std::optional<Fp8Settings>& s) {
  LayoutSpec spec = p.specs[li];
  spec.precision = Precision::fp32;
  spec.fp8 = s;
  spec.l.micro_batches = p.base.micro_batches;
  spec.dp_sync = recipe_of(spec);  // so that the FP8 rule, not the DP sync one, names stale gradients and local steps
  return spec;
}

}  // namespace

std::string fp8_skip_reason(const Layouts& p, size_t li, size_t i, const std::string& backend) {
  const LayoutSpec spec = fp8_spec(p, li, p.fp8[i]);
  const LayoutCheckContext c{.world = int(spec.l.world()), .global_batch = p.base.global_batch,
                             .seq_len = p.base.seq_len, .backend = backend, .recipe = p.base,
                             .path = "conformance",
                             .where = "conformance.fp8[" + std::to_string(i) + "] on '" + printable(p.names[li], 40) + "'"};
  const std::vector<LayoutRefusal> r = layout_refusals(spec, p.model, c);
  if (!r.empty()) return r.front().message;  // the arch and cp rules among them (skip_reason's)
  const std::string uncovered = fp8_twin_uncovered(p.fp8[i], spec.l);
  return uncovered.empty() ? "" : c.where + ": " + uncovered;
}

void validate_fp8_rows(const Layouts& p, int world_size, const std::string& backend) {
  // An FP8 recipe that no layout fitting the world runs would check nothing: refuse it, naming
  // the first layout's reason.
  for (size_t i = 0; i < p.fp8.size(); ++i) {
    std::string first;
    bool runs = false;
    for (size_t li = 0; li < p.specs.size() && !runs; ++li) {
      if (p.specs[li].l.world() > world_size) continue;
      const std::string why = fp8_skip_reason(p, li, i, backend);
      runs = why.empty();
      if (first.empty()) first = why;
    }
    if (!runs)
      throw InputError("conformance.fp8[" + std::to_string(i) + "]: recipe " + to_string(p.fp8[i].recipe) +
                       " runs on none of the layouts that fit " + std::to_string(world_size) + " rank(s)" +
                       (first.empty() ? std::string() : " (" + first + ")"));
  }
}

void run_fp8_rows(SuiteContext& ctx, const Layouts& p, Device& cpu, const PrecisionOps& ops, SuiteResult& res,
                  json& skipped, json& table) {
  Communicator& world = ctx.world;
  TrainConfig cfg = p.base;  // the contract's regime (suites/oracle.h): its first steps, the parameters held
  cfg.steps = std::min(cfg.steps, kFp8TwinSteps);
  cfg.adamw.lr = float(kFp8TwinLr);
  const std::string backend = ctx.backend ? ctx.backend->name() : "cpu";
  auto self = make_mpi_self();
  std::map<std::pair<int, int>, LayoutOutcome> twins;  // (micro-batches, recipe or -1) -> rank 0's run
  auto twin = [&](int micro_batches, const std::optional<Fp8Settings>& s) -> const LayoutOutcome& {
    const auto key = std::make_pair(micro_batches, s ? int(s->recipe) : -1);
    auto it = twins.find(key);
    if (it == twins.end()) {
      ParallelLayout one;
      one.micro_batches = micro_batches;
      TrainConfig single = cfg;
      single.micro_batches = micro_batches;
      it = twins.emplace(key, run_layout({.model = p.model, .layout = {.l = one, .precision = Precision::fp32, .fp8 = s},
                                          .train = single, .device = cpu, .host = *self, .data = *ctx.dataset,
                                          .gather = true})).first;
    }
    return it->second;
  };
  std::string recipes;
  for (const Fp8Settings& s : p.fp8) recipes += std::string(recipes.empty() ? "" : ", ") + to_string(s.recipe);
  const std::string regime = std::to_string(cfg.steps) + " steps with the parameters held (lr 0)";
  ctx.print("# fp8 (" + recipes + "): FP8 linears over fp32 storage, " + regime + ", each layout against its one-rank "
            "twin (the recipe on one rank, the same micro-batches) within the FP8 layout contract (docs/fp8.md)");
  ctx.print("#  layout                       ranks  final loss   |dloss| twin  worst check   checks   status");
  for (size_t li = 0; li < p.names.size(); ++li) {
    const LayoutSpec plain = fp8_spec(p, li, std::nullopt);
    const ParallelLayout& l = plain.l;
    const int k = int(l.world());
    std::vector<size_t> runs;  // the recipes this layout runs
    for (size_t i = 0; i < p.fp8.size(); ++i) {
      const std::string text = p.names[li] + ":fp8:" + to_string(p.fp8[i].recipe);
      std::string why = k > world.size() ? "needs " + std::to_string(k) + " ranks, the world has " +
                                               std::to_string(world.size())
                                         : fp8_skip_reason(p, li, i, backend);
      if (why.empty()) {
        runs.push_back(i);
        continue;
      }
      skipped.push_back(k > world.size() ? json{{"layout", text}, {"needs_ranks", k}} : json{{"layout", text}, {"reason", why}});
      ctx.print("#  " + pad(text, 28) + " " + pad(std::to_string(k), 5) + "  skipped: " + why);
    }
    if (runs.empty()) continue;
    const int color = world.rank() < k ? 0 : 1;
    auto sub = world.split(color, world.rank(), "conformance:fp8:" + p.names[li]);
    auto dev_sub = ctx.device_world ? ctx.device_world->split(color, world.rank(), "conformance:fp8:" + p.names[li])
                                    : nullptr;
    auto run = [&](const LayoutSpec& spec) {
      return run_layout({.model = p.model, .layout = spec, .train = cfg, .device = ctx.device, .ops = ops,
                         .host = *sub, .device_comm = dev_sub.get(), .data = *ctx.dataset, .gather = true});
    };
    LayoutOutcome out32;
    if (world.rank() < k) out32 = run(plain);
    world.barrier();
    const int twin_mb = cfg.micro_batches * l.dp;  // each rank's micro-batch is the twin's
    for (size_t i : runs) {
      const Fp8Settings& s = p.fp8[i];
      const LayoutSpec spec = fp8_spec(p, li, s);
      const std::string text = p.names[li] + ":fp8:" + to_string(s.recipe);
      LayoutOutcome out;
      if (world.rank() < k) out = run(spec);
      world.barrier();
      const LayoutTimes times = gather_layout_times(world, out, cfg.steps, k, l.pp);
      if (world.rank() != 0) continue;
      const LayoutOutcome& t8 = twin(twin_mb, s);
      const std::string prefix = "conformance/" + text + "/";
      std::vector<Check> checks =
          fp8_twin_checks(prefix, fp8_splits_before_quantizing(l), out, t8, out32, twin(twin_mb, std::nullopt));
      checks.push_back(make_check(prefix + "replicas_identical/grads/step:0", out.replica_grads0, 0.0,
                                  "max |difference| between copies of a replicated gradient (TP, DP, tied wte), "
                                  "bitwise"));
      checks.push_back(make_check(prefix + "replicas_identical/params", out.replica_params, 0.0,
                                  "max |difference| between copies of a replicated parameter, bitwise"));
      int failed = 0;
      double worst = 0, dloss = 0;
      for (const Check& c : checks) {
        failed += c.passed ? 0 : 1;
        worst = std::max(worst, c.fraction());
      }
      for (int st = 0; st < cfg.steps; ++st) {
        const double d = std::fabs(out.losses[st] - t8.losses[st]);
        dloss = std::isnan(d) || d > dloss ? d : dloss;
      }
      res.benchmarks.push_back(layout_record(text, l, spec, Precision::fp32, k, times.step_s, out, dloss, worst,
                                             checks.size(), failed, times.stage_peak));
      table.push_back({{"layout", text}, {"precision", "fp8"}, {"fp8_recipe", to_string(s.recipe)},
                       {"losses", out.losses}, {"grad_norms", out.grad_norms}});
      char line[300];
      std::snprintf(line, sizeof line, "   %-28s %5d  %10.6f   %11.3g   %11.3f   %6zu   %s", text.c_str(), k,
                    out.losses.back(), dloss, worst, checks.size(), failed ? "FAILED" : "passed");
      ctx.print(line);
      for (Check& c : checks) res.checks.push_back(std::move(c));
    }
  }
}

}  // namespace dtb::conformance
