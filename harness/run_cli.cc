// `dtbench run` (harness/run_cli.h): the config read and validated on rank 0, the backend made
// on every rank, the dataset sent from rank 0, the report files checked, written after every
// suite and rewritten by the termination hook when the run ends early.
#include "harness/run_cli.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/config.h"
#include "harness/report.h"
#include "harness/run_suites.h"
#include "harness/trace.h"
#include "kernels/comm/watchdog.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/checkpoint/checkpoint.h"

namespace dtb {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// This rank's index on its node (which GPU it takes) and the most ranks sharing one node
// over the world (MPI_COMM_TYPE_SHARED). Collective.
struct NodePlace {
  int local_rank = 0;
  int ranks_per_node = 1;
};
NodePlace node_place(Communicator& world) {
  MPI_Comm node;
  DTB_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
                MPI_SUCCESS,
            "MPI_Comm_split_type failed");
  NodePlace p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.ranks_per_node);
  MPI_Comm_free(&node);
  world.all_reduce(&p.ranks_per_node, &p.ranks_per_node, 1, DType::i32, ReduceOp::max);
  return p;
}

// Runs `make` on every rank; if it throws InputError on any rank (no GPU there, say), every
// rank throws the first such message, so all leave together.
template <typename F>
auto make_on_every_rank(Communicator& world, F make) -> decltype(make()) {
  decltype(make()) made;
  std::string why;
  try {
    made = make();
  } catch (const InputError& e) {
    why = e.what();
  }
  int failed = why.empty() ? 0 : 1, any = failed;
  world.all_reduce(&any, &any, 1, DType::i32, ReduceOp::max);
  if (any) {
    // The lowest failing rank's message, broadcast from there through rank 0.
    int who = failed ? world.rank() : world.size();
    world.all_reduce(&who, &who, 1, DType::i32, ReduceOp::min);
    std::string msg = world.rank() == who ? why : std::string();
    int len = int(msg.size());
    world.broadcast(&len, 1, DType::i32, who);
    msg.resize((size_t(len) + 3) / 4 * 4);
    if (len) world.broadcast(msg.data(), msg.size() / 4, DType::i32, who);
    msg.resize(len);
    throw InputError(msg + (world.size() > 1 ? " (rank " + std::to_string(who) + ")" : ""));
  }
  return made;
}

std::string make_run_id(const std::string& config_name) {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y%m%d-%H%M%S", std::localtime(&t));
  return std::string(b) + "-" + config_name;
}

// Whether rank 0 keeps a live progress line: "on", "off", or "auto": when its standard
// output is a terminal and no MPI launcher started it (Open MPI hands its ranks a
// pseudo-terminal even when mpirun's own output goes to a file, so under a launcher a
// terminal cannot be told from a log; scripts/run says "on" when its output is a terminal).
bool live_progress(const std::string& mode) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return false;
  return isatty(fileno(stdout)) != 0;
}

// A report made with the regression gate's test knob (kernels/slowdown.h) says so, in its context
// and on stderr (rank 0).
json with_slowdown_noted(json context, const InjectedSlowdown& slowdown, bool root) {
  if (!slowdown.any()) return context;
  context["injected_slowdown"] = slowdown.to_string();
  if (root)
    std::fprintf(stderr, "dtbench: warning: DTB_INJECT_SLOWDOWN=%s slows this run on purpose (a test of the "
                 "regression gate)\n", slowdown.to_string().c_str());
  return context;
}

// --allow-changed's keys: each one a checkpoint records. Errors: InputError naming the other.
void check_allow_changed(const std::vector<std::string>& allow) {
  const auto& keys = checkpoint_recipe_keys();
  for (const std::string& k : allow)
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      throw InputError("--allow-changed: '" + printable(k, 40) +
                       "' is not a recipe key a checkpoint records (lr, beta1, beta2, eps, weight_decay, grad_clip, "
                       "micro_batches, recompute)");
}

// --allow-changed lets a resumed train run change a setting: its keys checked, and a run that resumes
// nothing (the train suite not run, or train.resume_from empty in the parsed config `c`) refused
// rather than ignored.
void check_allow_changed_resumes(const std::vector<std::string>& allow, const json& c) {
  check_allow_changed(allow);
  if (allow.empty()) return;
  const json& suites = c["suites"];
  const bool trains = std::find(suites.begin(), suites.end(), "train") != suites.end();
  if (!trains || c["train"].value("resume_from", "").empty())
    throw InputError("--allow-changed: this run resumes nothing (it lets a resumed train run change a setting; "
                     "train.resume_from is empty or the train suite is not run)");
}

// The run's id, rank 0's (its clock, its directory: one report path): --run-id as given, else
// the config's name and the time (make_run_id), with "-2", "-3", ... for two runs in one second.
std::string choose_run_id(const std::string& given, const std::string& config_name, const std::string& out_dir) {
  std::string id = given.empty() ? make_run_id(config_name) : given;
  for (int k = 2; given.empty() && k < 1000 && fs::exists(out_dir + "/" + id + ".json"); ++k)
    id = make_run_id(config_name) + "-" + std::to_string(k);
  return id;
}

// Before anything is measured: the output directory writable, the report paths regular files
// where they exist and none of them one of the run's `inputs` (what, path: the config file, the
// dataset), which the report would overwrite; the trace's directory writable. Errors: InputError
// naming the path.
void check_output_paths(const std::string& out_dir, const std::string& run_id, const std::string& trace,
                        const std::vector<std::pair<std::string, std::string>>& inputs) {
  check_dir_writable(out_dir, "output directory");
  for (const std::string& f : {out_dir + "/latest.json", out_dir + "/" + run_id + ".json"}) {
    std::error_code ec;
    if (fs::exists(f, ec) && !fs::is_regular_file(f, ec))
      throw InputError("report path " + f + " exists and is not a regular file");
    for (const auto& [what, path] : inputs)
      if (!path.empty() && fs::exists(f, ec) && fs::equivalent(f, path, ec))
        throw InputError("report path " + f + " is the " + what + " (" + path +
                         "): the report would overwrite it; choose another --run-id or --output-dir");
  }
  if (!trace.empty()) {
    if (fs::is_directory(trace)) throw InputError("--trace: '" + trace + "' is a directory");
    const fs::path dir = fs::path(trace).parent_path();
    check_dir_writable(dir.empty() ? "." : dir.string(), "--trace directory");
  }
}

// The dataset at `path` (at least min_bytes), read on rank 0 and sent to every rank (no shared
// file system assumed). Errors: load_dataset's InputError, on every rank.
Dataset dataset_on_every_rank(Communicator& world, const std::string& path, size_t min_bytes) {
  const std::string bytes = on_root(world, [&] {
    Dataset d = load_dataset(path, min_bytes);
    return d.sha256 + std::string(d.bytes.begin(), d.bytes.end());
  });
  Dataset data;
  data.path = path;
  data.sha256 = bytes.substr(0, 64);
  data.bytes.assign(bytes.begin() + 64, bytes.end());
  return data;
}

// The options as given on `sub`: no path or name empty, --ranks-per-node within the world
// (check_ranks_per_node); args.sweep set when --sweep was given. Errors: InputError naming
// the option.
void check_run_options(const CLI::App& sub, RunArgs& args, int world_size) {
  for (const char* opt : {"--config", "--suites", "--data", "--output-dir", "--run-id", "--backend", "--trace"})
    if (sub.count(opt) > 0 && sub.get_option(opt)->as<std::string>().empty())
      throw InputError(std::string(opt) + " is empty");
  args.sweep = sub.count("--sweep") > 0;
  if (sub.count("--ranks-per-node") > 0) check_ranks_per_node(args.ranks_per_node, world_size);
}

}  // namespace

CLI::App* add_run_subcommand(CLI::App& app, RunArgs& a) {
  CLI::App* sub = app.add_subcommand("run", "run suites and write the JSON report");
  sub->add_option("--config", a.config, "named config or JSON file (default: default)");
  sub->add_option("--suites", a.suites, "comma-separated suites, overriding the config's");
  sub->add_option("--data", a.data, "training text file, overriding the config's");
  sub->add_option("--output-dir", a.output_dir, "report directory (default: results)");
  sub->add_option("--run-id", a.run_id, "report file name stem (default: date-time-config)");
  sub->add_option("--backend", a.backend, "cpu or cuda, overriding the config's");
  sub->add_option("--trace", a.trace,
                  "write per-rank spans of the train and pipeline suites as Chrome trace JSON to FILE (Perfetto)")
      ->type_name("FILE");
  sub->add_flag("--force", a.force,
                "run even when a suite's memory estimate exceeds 80% of this machine's memory (refused "
                "otherwise, before anything is allocated)");
  sub->add_option("--allow-changed", a.allow_changed,
                  "resume a train checkpoint with this recipe key changed (lr, beta1, beta2, eps, weight_decay, "
                  "grad_clip, micro_batches, recompute; repeatable); the report lists the change")
      ->type_name("KEY");
  sub->add_flag("--print-config", a.print_config,
                "print the complete validated config (every key, defaults filled) and exit");
  sub->add_option("--progress", a.progress,
                  "a live progress line on rank 0: auto (when its output is a terminal and no MPI launcher "
                  "started it), on, off (default auto; the last one given counts)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_option("--sweep", a.sweep_layouts,
                  "run the sweep suite only: the config's model on each layout of the world's ranks (e.g. "
                  "TP2xDP2,PP2xDP2:gpipe,DP4:zero2), or on every layout that fits when none are given; one "
                  "report row per layout")
      ->expected(0, 1)
      ->type_name("[LAYOUTS]");
  sub->add_option("--ranks-per-node", a.ranks_per_node, "emulate nodes of N consecutive ranks (for tests): the "
                  "collectives suite's hierarchical rows and train.dp_allreduce see them")->type_name("N");
  return sub;
}

int cmd_run(Communicator& world, const CLI::App& sub, RunArgs args) {
  check_run_options(sub, args, world.size());
  // Rank 0 reads and validates the config and every rank takes its verdict, so ranks that
  // differ (another node's memory, say) cannot disagree about whether the run starts.
  RunOptions opts{args.force};  // travels in each suite's WorldInfo and SuiteContext
  opts.slowdown = injected_slowdown_from_env();  // test-only; every rank reads the same environment
  opts.allow_changed = args.allow_changed, opts.emulated_ranks_per_node = args.ranks_per_node;  // checked in main
  const NodePlace place = node_place(world);
  const int per_node = place.ranks_per_node;
  json cfg = json::parse(on_root(world, [&] {
    if (!args.run_id.empty()) check_file_stem(args.run_id, "--run-id");
    if (args.run_id == "latest")
      throw InputError("--run-id 'latest' is reserved: every run also writes <output-dir>/latest.json");
    if (args.sweep && !args.suites.empty()) throw InputError("--sweep and --suites do not go together");
    std::string text = read_config_text(args.config);
    if (args.sweep) text = apply_sweep(text, args.sweep_layouts);
    json c = parse_config(text, args.config, args.suites, args.data, WorldInfo(world.size(), per_node, opts), args.backend);
    check_allow_changed_resumes(args.allow_changed, c);
    check_utf8(args.output_dir, "--output-dir");
    if (!args.output_dir.empty()) c["output_dir"] = args.output_dir;
    return c.dump();
  }));
  if (args.print_config) {  // every key with its value, defaults filled: a template to edit
    if (world.rank() == 0) std::printf("%s\n", cfg.dump(2).c_str());
    return 0;
  }
  const std::string out_dir = cfg["output_dir"];
  const std::string run_id = on_root(world, [&] { return choose_run_id(args.run_id, cfg["name"], out_dir); });
  on_root(world, [&] {
    check_output_paths(out_dir, run_id, args.trace,
                       {{"config file", args.config == "-" ? std::string() : args.config},
                        {"dataset", cfg["data"].get<std::string>()}});
    return std::string();
  });
  const Dataset data = dataset_on_every_rank(world, cfg["data"], cfg["model"]["T"].get<size_t>() + 2);

  // The backend: one GPU per rank (by its index on the node) on CUDA.
  std::unique_ptr<Backend> backend;
  if (cfg["backend"] == "cuda") {
    backend = make_on_every_rank(world, [&] { return make_cuda_backend(place.local_rank); });
  } else {
    backend = make_cpu_backend();
  }
  set_comm_timeout(opts.comm_timeout_s = cfg["comm_timeout_s"].get<double>());  // the process's watchdog
  const auto device_world = backend->make_device_world(world, opts.comm_timeout_s);
  const json context = with_slowdown_noted(make_context(cfg, &data, world, per_node, run_id, *backend,
                                                        opts.emulated_ranks_per_node), opts.slowdown, world.rank() == 0);
  const std::string path = out_dir + "/" + run_id + ".json";
  json report;
  bool write_failed = false;
  if (world.rank() == 0)
    std::printf("# dtbench %s: config %s, %d ranks%s, suites %s\n", run_id.c_str(), cfg["name"].get<std::string>().c_str(),
                world.size(), emulated_nodes_note(opts.emulated_ranks_per_node).c_str(), cfg["suites"].dump().c_str());
  SpanRecorder spans(!args.trace.empty());  // disabled (records nothing) without --trace
  // The report on disk always holds the suites that finished and, while one runs, that one
  // marked "error" as unfinished: a run killed outright (SIGKILL, a node lost) leaves that.
  // When the run ends early with a chance to say why (a collective past comm_timeout_s,
  // SIGINT, SIGTERM, a fatal error), the termination hook rewrites it with the reason.
  std::recursive_mutex finished_mu;  // recursive: fatal() on the main thread inside after_each runs the hook
  std::vector<SuiteOutcome> finished;
  Stopwatch suite_clock;
  // Rank 0, under finished_mu: the report of `so`, plus the next suite (if any) as unfinished
  // with `why`, written to the run's report and latest.json.
  auto write_reports = [&](const std::vector<SuiteOutcome>& so, const std::string& why) {
    std::vector<SuiteOutcome> on_disk = so;
    if (so.size() < cfg["suites"].size()) {
      SuiteOutcome running;
      running.name = cfg["suites"][so.size()].get<std::string>();
      running.status = "error";
      running.error = why;
      running.duration_s = suite_clock.elapsed();
      on_disk.push_back(std::move(running));
    }
    const json r = make_report(context, on_disk);
    write_json_atomic(path, r);
    write_json_atomic(out_dir + "/latest.json", r);
  };
  const std::string unfinished =
      "unfinished: the run was in this suite when the report was last written (if the run has ended, it was "
      "killed here)";
  set_termination_hook([&](const std::string& why) {
    if (world.rank() != 0) {
      // Rank 0 hung or gone (the watchdog names it): it cannot write; name it in its report.
      if (why.find("rank 0 (pid ") != std::string::npos)
        name_in_unfinished_report(path, out_dir + "/latest.json", unfinished, why);
      return;
    }
    std::lock_guard<std::recursive_mutex> lock(finished_mu);
    // Rank 0 stopped, then woken by the launcher as the others exit, times out on them: the
    // line another rank wrote naming rank 0 is the cause; keep it.
    if (report_names_rank0(path)) return;
    write_reports(finished, why);
  });
  struct HookReset {
    ~HookReset() { set_termination_hook({}); }
  } hook_reset;
  if (world.rank() == 0) {
    std::lock_guard<std::recursive_mutex> lock(finished_mu);
    try {
      write_reports({}, unfinished);
    } catch (const std::exception& e) {
      write_failed = true;
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    }
  }
  auto outcomes = run_suites(cfg, world, *backend, device_world.get(), &data, [&](const std::vector<SuiteOutcome>& so) {
    if (world.rank() != 0) return;
    std::lock_guard<std::recursive_mutex> lock(finished_mu);  // held while writing: the hook writes the same files
    finished = so;
    suite_clock.restart();
    report = make_report(context, so);
    try {  // after every suite: what finished, and the next suite as unfinished
      write_reports(so, unfinished);
    } catch (const std::exception& e) {
      write_failed = true;
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    }
  }, &spans, live_progress(args.progress), WorldInfo(world.size(), per_node, opts));
  if (!args.trace.empty() && !write_run_trace(args.trace, world, spans)) write_failed = true;
  int code = 0;
  if (world.rank() == 0) {
    print_summary(summarize_report(report, path), path);
    const bool refused = std::any_of(outcomes.begin(), outcomes.end(), [](const SuiteOutcome& o) { return o.refused; });
    code = refused ? kExitInput : report_passed(outcomes) && !write_failed ? 0 : 1;
  }
  world.broadcast(&code, 1, DType::i32, 0);
  return code;
}

}  // namespace dtb
