// The command `dtbench validate`: its options on the command line, the checks of its
// arguments and input files (all before anything is measured), the levels run under the
// per-check timeout and the watchdog's termination hook, the rules applied to what was
// measured, and the verdict written. The levels themselves are in levels.h.
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "harness/validate.h"
#include "harness/validate/format.h"
#include "harness/validate/inventory.h"
#include "harness/validate/levels.h"
#include "harness/validate/links.h"
#include "harness/validate/rules.h"
#include "harness/validate/sdc.h"
#include "harness/validate/verdict.h"
#include "kernels/comm/watchdog.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace validate_detail;

// The arguments once checked, and the input files read (on rank 0, broadcast).
struct Setup {
  Injection inj;
  json baseline;
  std::vector<ValidateRule> file_rules;
  std::map<std::string, std::string> expect;
};

// Refuses bad usage before anything runs: InputError on every rank (exit 2). Collective.
Setup check_arguments(Communicator& world, const ValidateArgs& a) {
  if (a.level != "quick" && a.level != "medium" && a.level != "long" && a.level != "burnin")
    throw InputError("--level '" + a.level + "' is not one of quick, medium, long, burnin");
  if (!(a.tolerance > 0 && a.tolerance < 1)) throw InputError("--tolerance must be in (0, 1)");
  if (a.pairs != "all" && a.pairs != "adaptive") throw InputError("--pairs '" + a.pairs + "' is not one of all, adaptive");
  if (a.pairs == "adaptive" && a.level != "long" && a.level != "burnin")
    throw InputError("--pairs adaptive needs --level long or burnin: level " + a.level + " measures no pairs of nodes");
  if (!(a.check_timeout >= 1 && a.check_timeout <= 1e6))
    throw InputError("--check-timeout must be a number of seconds in [1, 1e6]");
  if (!(a.duration > 0 && a.duration <= 1e7)) throw InputError("--duration must be a number of seconds in (0, 1e7]");
  if (!a.make_baseline.empty() && a.level == "quick")
    throw InputError("--make-baseline needs --level medium or higher: level quick measures no metric");
  if (!a.make_baseline.empty() && !a.inject.empty())
    throw InputError("--make-baseline with --inject would make the injected fault the baseline");
  {
    std::error_code ec1, ec2;
    if (!a.make_baseline.empty() && std::filesystem::weakly_canonical(a.make_baseline, ec1) ==
                                        std::filesystem::weakly_canonical(a.output, ec2))
      throw InputError("--make-baseline and --output are the same file, " + a.output);
  }
  check_output_path(world, "--output", a.output);
  if (!a.make_baseline.empty()) check_output_path(world, "--make-baseline", a.make_baseline);
  Setup s;
  s.inj = parse_injection(a.inject, world.size());
  if (s.inj.sdc && !runs_sdc(a))
    throw InputError("--inject " + a.inject + ": level " + a.level + " has no SDC replay to corrupt (--level long, "
                     "burnin, or --sdc)");
  if (!a.baseline.empty()) s.baseline = read_baseline(world, a.baseline);
  if (!a.rules.empty()) {
    s.file_rules = parse_rules(read_json_file(world, "--rules", a.rules), "--rules " + a.rules);
    for (const ValidateRule& r : s.file_rules)
      if (r.type == "baseline_drop" && a.baseline.empty())
        throw InputError("--rules " + a.rules + ": rule '" + r.name + "' (baseline_drop) needs --baseline");
  }
  if (a.backend != "cpu" && a.backend != "cuda") throw InputError("--backend '" + a.backend + "' is not cpu or cuda");
  s.expect = parse_expectations(a.expect);
  if (a.ranks_per_node < 0) throw InputError("--ranks-per-node must be positive");
  if (a.ranks_per_node > 0 && world.size() % a.ranks_per_node != 0)
    throw InputError("--ranks-per-node " + std::to_string(a.ranks_per_node) + " does not divide the " +
                     std::to_string(world.size()) + " ranks");
  return s;
}

// The plan and its expected duration, first (rank 0).
void print_plan(const ValidateArgs& a, int world_size, const Injection& inj) {
  const bool medium = a.level != "quick", long_level = a.level == "long" || a.level == "burnin";
  std::printf("# validate %s: inventory and consistency of %d ranks%s", a.level.c_str(), world_size,
              a.ranks_per_node > 0 ? (", emulated nodes of " + std::to_string(a.ranks_per_node) + " ranks (for tests)").c_str() : "");
  if (medium)
    std::printf("; then each rank's GEMM, memory bandwidth and host-device copies, the ranks of a host one at a "
                "time (about 0.5 s a rank of the most populated host), the send/recv pairs and an all-reduce "
                "within each node");
  if (long_level && a.pairs == "adaptive")
    std::printf("; then groups of nodes as rings of send/recv pairs, the failed ones split in halves, each suspect "
                "confirmed with a known-good partner (about 0.1 s a round of pairs), an all-reduce over the world "
                "and a few training steps");
  else if (long_level)
    std::printf("; then every pair's send/recv (n - 1 rounds of n / 2 pairs, about 0.1 s a round), an all-reduce "
                "over the world and a few training steps");
  if (runs_sdc(a))
    std::printf("; then %d training steps replayed alone on every rank, their hashes compared (SDC triage, well "
                "under a second)", kSdcSteps);
  if (a.level == "burnin") std::printf("; looped for %s s", num_str(a.duration).c_str());
  if (!long_level) std::printf("; expected a few seconds");
  std::printf("; each step of a check times out after %s s", num_str(a.check_timeout).c_str());
  if (inj.link_a >= 0)
    std::printf("; TEST FAULT: the transfers between ranks %d and %d x%s slower", inj.link_a, inj.link_b,
                num_str(inj.comm).c_str());
  std::printf("%s\n", inj.rank >= 0 ? ("; TEST FAULT: rank " + std::to_string(inj.rank) + " " +
                                        (inj.hang  ? std::string("hangs in its compute")
                                         : inj.sdc ? std::string("flips a bit of a GEMM output in its SDC replay")
                                         : inj.comm > 1 ? "communication x" + num_str(inj.comm) + " slower"
                                                        : "compute x" + num_str(inj.compute) + " slower")).c_str()
                                    : "");
}

// A group's all-reduce cannot tell its nodes apart: the checks over groups/allreduce_busbw_GBps
// (its rules, and k_of rules made of them only) name only the nodes that pairs/links, or
// pairs/isolation with --pairs adaptive (in `checks`), shows slow too.
void cross_check_groups(std::vector<ValidateCheck>& judged, const std::vector<ValidateRule>& rules,
                        const std::vector<ValidateCheck>& checks, const std::vector<std::string>& node_of_rank) {
  const auto links = std::find_if(checks.begin(), checks.end(), [](const ValidateCheck& c) {
    return c.name == "pairs/links" || c.name == "pairs/isolation";
  });
  if (links == checks.end()) return;
  const std::string metric = "groups/allreduce_busbw_GBps";
  std::set<std::string> group_rules;
  for (const ValidateRule& r : rules)
    if (r.type != "k_of" && r.metric == metric) group_rules.insert(r.name);
  for (const ValidateRule& r : rules)
    if (r.type == "k_of" && std::all_of(r.of.begin(), r.of.end(), [&](const std::string& x) { return group_rules.count(x); }))
      group_rules.insert(r.name);
  for (ValidateCheck& c : judged)
    if (group_rules.count(c.name)) cross_check_group(c, nodes_slow_by_pairs(*links, node_of_rank), node_of_rank,
                                                     links->name + ": " + links->detail);
}

// The report of a run that ended early: the checks so far, the failed one, the rest not_run,
// and the metrics measured so far judged by the rules (`done`: finished loops' metrics merged
// with those of the loop that was running). On rank 0.
void write_incomplete(const ValidateRun& run, const Setup& s, std::chrono::steady_clock::time_point t0,
                      std::vector<ValidateCheck> so_far, const ValidateCheck& failed,
                      const std::map<std::string, Metric>& done) {
  const ValidateArgs& a = run.args;
  // A check measured again in a later burnin loop appears once: its latest outcome.
  std::vector<ValidateCheck> once;
  for (auto it = so_far.rbegin(); it != so_far.rend(); ++it)
    if (std::none_of(once.begin(), once.end(), [&](const ValidateCheck& c) { return c.name == it->name; }))
      once.insert(once.begin(), *it);
  so_far = once;
  so_far.push_back(failed);
  bool after = false;
  for (const std::string& name : planned_checks(a)) {  // after a whole loop, every check has run once
    if (after && run.loops == 0)
      so_far.push_back({name, "not_run", "not run: check " + failed.name + " did not finish", {}, {}, json::object(), {}});
    after = after || name == failed.name;
  }
  ReportExtra e;
  e.levels_run = {"quick"};
  e.incomplete = true;
  if (run.loops > 0) {
    if (run.medium()) e.levels_run.push_back("medium");
    if (run.long_level()) e.levels_run.push_back("long");
    if (a.level == "burnin") e.levels_run.push_back("burnin");
    e.loops = run.loops;
  }
  if (!done.empty()) {
    try {
      const auto rules = a.rules.empty() ? default_rules(done, s.baseline, a.tolerance) : s.file_rules;
      std::vector<ValidateCheck> judged = evaluate_rules(rules, done, s.baseline, run.node_of_rank);
      cross_check_groups(judged, rules, so_far, run.node_of_rank);
      for (ValidateCheck& c : judged)
        if (c.detail.rfind("missing", 0) != 0 && c.detail.find("could not be judged") == std::string::npos)
          so_far.push_back(std::move(c));  // a metric not measured yet: the run ended first, not_run says so
    } catch (const std::exception&) {
    }
    for (const auto& [name, m] : done) e.metrics[name] = metric_json(m, false);
  }
  write_verdict(a, run.inv, so_far, t0, e);
}

// The failed check of a step that timed out: the ranks that did not arrive, or the pair of a
// transfer that did not finish, each named at its node.
ValidateCheck timeout_check(const CheckTimeout& t, const std::vector<std::string>& node_of_rank) {
  ValidateCheck c{t.check, "fail", "", {}, t.ranks, {{"timeout_s", t.seconds}}, {}};
  const std::string what = t.pair.empty() ? "did not finish a step of check " + t.check
                                          : "(" + t.pair + " in check " + t.check + ") did not finish";
  for (int r : t.ranks) {
    const std::string& nd = node_of_rank[size_t(r)];
    add_once(c.nodes, nd);
    c.node_detail[nd] += (c.node_detail[nd].empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " " +
                         what + " within the " + num_str(t.seconds) + " s timeout (hung, or far too slow)";
  }
  c.detail = !t.pair.empty() ? t.pair + " in check " + t.check + " did not finish within " + num_str(t.seconds) +
                                   " s (a hung rank or a dead link); the run is incomplete"
                             : (t.ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(t.ranks) + " " + what +
                                   " within " + num_str(t.seconds) + " s (hung, or far too slow); the run is incomplete";
  return c;
}

// The rules' checks over the finished run's metrics, and the baseline's own checks, appended to
// run.checks; the report's metrics and rules into `extra`.
void judge(ValidateRun& run, const Setup& s, ReportExtra& extra) {
  const ValidateArgs& a = run.args;
  // The rules: a rules file's, or the defaults (the fleet median, and the baseline when given).
  const std::vector<ValidateRule> rules =
      a.rules.empty() ? default_rules(run.metrics, s.baseline, a.tolerance) : s.file_rules;
  std::vector<ValidateCheck> judged = evaluate_rules(rules, run.metrics, s.baseline, run.node_of_rank);
  cross_check_groups(judged, rules, run.checks, run.node_of_rank);
  for (ValidateCheck& c : judged) run.checks.push_back(std::move(c));
  if (!run.metrics.empty()) run.checks.push_back(valid_figures_check(run.metrics, run.node_of_rank));
  if (!a.baseline.empty()) {
    const json platform = majority(run.inv, "device");
    if (s.baseline.value("platform", json()) != platform)
      run.checks.push_back({"baseline/platform", "fail",
                            "the baseline is for " + s.baseline.value("platform", json()).dump() +
                                ", this run's devices are " + platform.dump(),
                            {}, {}, json::object(), {}});
    // A metric the baseline has and this run lacks fails, whatever the rules name.
    if (!a.rules.empty())
      for (const auto& [name, entry] : s.baseline["metrics"].items())
        if (!run.metrics.count(name))
          run.checks.push_back({"baseline/" + name, "fail",
                                "missing: the baseline has " + name + ", this run measured none (a level too low, or a "
                                "test that could not run)",
                                {}, {}, {{"baseline", entry.value("value", 0.0)}}, {}});
  }
  for (const auto& [name, m] : run.metrics) extra.metrics[name] = metric_json(m, true);
  extra.rules = rules_json(rules);
}

}  // namespace

int cmd_validate(Communicator& world, const ValidateArgs& a) {
  const bool root = world.rank() == 0;
  const Setup s = check_arguments(world, a);
  const auto t0 = std::chrono::steady_clock::now();
  if (root) print_plan(a, world.size(), s.inj);
  std::fflush(stdout);
  set_comm_timeout(a.check_timeout);

  ValidateRun run(world, a, s.inj);
  quick_level(run, s.expect);
  // Rank 0 writes what it has when the watchdog ends the run (it names the call and the ranks;
  // the check running fails with its line, the ones after it are not_run): exit 3, incomplete.
  if (root)
    set_termination_hook([&](const std::string& why) {
      std::vector<ValidateCheck> so_far;
      std::map<std::string, Metric> done;
      std::string running;
      {
        std::lock_guard<std::mutex> lock(run.mu);
        so_far = run.checks;
        so_far.insert(so_far.end(), run.pass.checks.begin(), run.pass.checks.end());
        done = run.measured_so_far();
        running = run.current;
      }
      write_incomplete(run, s, t0, so_far,
                       {running.empty() ? "validate" : running, "fail", why, {}, {}, json::object(), {}}, done);
    });
  struct HookReset {
    ~HookReset() { set_termination_hook({}); }
  } hook_reset;
  try {
    burnin_level(run);
  } catch (const CheckTimeout& t) {
    // Rank 0 alone throws: it names the ranks, writes what it has and ends the job (exit 3).
    const ValidateCheck c = timeout_check(t, run.node_of_rank);
    set_termination_hook({});  // this path writes the report itself
    try {
      std::vector<ValidateCheck> so_far = run.checks;
      so_far.insert(so_far.end(), run.pass.checks.begin(), run.pass.checks.end());
      write_incomplete(run, s, t0, so_far, c, run.measured_so_far());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    }
    std::fprintf(stderr, "dtbench: error: validate: %s\n", c.detail.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  // From here the main thread writes the checks without the lock, and writes the verdict
  // itself: no hook from now on.
  set_termination_hook({});
  ReportExtra extra;
  extra.levels_run = {"quick"};
  if (run.medium()) extra.levels_run.push_back("medium");
  if (run.long_level()) extra.levels_run.push_back("long");
  if (a.level == "burnin") extra.levels_run.push_back("burnin");
  extra.loops = std::max(run.loops, 1);
  judge(run, s, extra);
  // Rank 0 decides, prints and writes; every rank returns its exit status.
  int code = 0;
  if (root) {
    try {
      code = write_verdict(a, run.inv, run.checks, t0, extra);
    } catch (const InputError& e) {
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = 2;  // bad input, as dtbench exits for it
    }
    if (!a.make_baseline.empty()) code = write_baseline(a, run.inv, run.metrics, code);
  }
  world.broadcast(&code, 1, DType::i32, 0);
  return code;
}

CLI::App* add_validate_subcommand(CLI::App& app, ValidateArgs& args) {
  CLI::App* validate = app.add_subcommand(
      "validate", "check a cluster and name its defective nodes: inventory and consistency (quick), each rank's "
                  "compute, copies and its node's links and collectives (medium), every pair, the world's all-reduce "
                  "and training steps (long), looped (burnin); exit 0 all accepted, 1 defective, 2 bad usage, 3 "
                  "incomplete");
  validate->add_option("--level", args.level,
                       "quick (inventory, consistency), medium (also each rank's GEMM, memory bandwidth and host-device "
                       "copies, send/recv and all-reduce within each node), long (also every pair's send/recv, the "
                       "world's all-reduce, training steps) or burnin (long, looped for --duration)");
  validate->add_option("--expect", args.expect,
                       "expectations, e.g. nodes=2,ranks_per_node=8,device=H200,cores=64,memory_gb=500,gpus_per_node=8");
  validate->add_option("--ranks-per-node", args.ranks_per_node,
                       "emulate nodes of N consecutive ranks on one machine (for tests)")
      ->check(CLI::Range(1, 1 << 20));  // 0 given was taken as "not emulated"
  validate->add_option("--backend", args.backend, "cpu or cuda (the device each rank reports)");
  validate->add_option("--output", args.output, "the JSON report (default results/validate.json)");
  validate->add_flag("--werror", args.werror, "warnings fail the node they name");
  validate->add_option("--make-baseline", args.make_baseline,
                       "write a baseline (metric -> value, outliers removed) from this run's metrics to FILE")
      ->type_name("FILE");
  validate->add_option("--baseline", args.baseline,
                       "judge every rank also against this baseline; a metric it has and this run lacks fails")
      ->type_name("FILE");
  validate->add_option("--tolerance", args.tolerance,
                       "the default rules: a rank more than this fraction worse than the fleet median (or the "
                       "baseline) fails, half of it warns; a straggler arrives later than this fraction of the work "
                       "between collectives (default 0.3)");
  validate->add_option("--rules", args.rules,
                       "judge the metrics by this rules file (fleet_drop, baseline_drop, min, max, k_of) instead of "
                       "the default rules")
      ->type_name("FILE");
  validate->add_option("--check-timeout", args.check_timeout,
                       "seconds a step of a check may take; then the ranks that did not finish are named and the "
                       "run ends incomplete, exit 3 (default 300)");
  validate->add_option("--duration", args.duration, "burnin: seconds to loop the long level for (default 600)");
  validate->add_flag("--sdc", args.sdc,
                     "silent-data-corruption triage at any level (levels long and burnin have it): every rank "
                     "replays the same training steps alone; a rank whose hash differs from the majority's is named");
  validate->add_option("--pairs", args.pairs,
                       "long: all (every pair, round-robin) or adaptive (groups of nodes as rings of pairs, only the "
                       "failed ones split, suspects confirmed with a known-good partner; one rank per node)");
  validate->add_option("--inject", args.inject,
                       "FOR TESTS ONLY: RANK:compute:FACTOR or RANK:comm:FACTOR runs that rank's compute measurements "
                       "or point-to-point transfers FACTOR times slower; A-B:comm:FACTOR only the transfers between "
                       "ranks A and B (one slow link); RANK:hang stops that rank in its compute; "
                       "RANK:sdc flips one bit of a GEMM output in that rank's SDC replay");
  return validate;
}

}  // namespace dtb
