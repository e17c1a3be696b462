// dtbench: the command line. `dtbench run` runs the selected suites over the MPI world, one
// after another on every rank (run_suites, here), and writes the JSON report; `dtbench list`
// lists suites and named configs (--layout-keys: the layout keys' spellings). Bad input ends
// with one line on stderr and exit status 2; a failed check with exit status 1.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>

#include "harness/claims/claims.h"
#include "harness/config.h"
#include "harness/count.h"
#include "harness/list_cli.h"
#include "harness/memory_cli.h"
#include "harness/plan_cli.h"
#include "harness/report.h"
#include "harness/trace.h"
#include "harness/validate.h"
#include "reference/checkpoint/checkpoint.h"
#include "suites/calibration.h"
#include "suites/host_load.h"
#include "kernels/agreed_error.h"
#include "kernels/comm/watchdog.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/training/progress.h"

namespace dtb {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kExitInput = 2;


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

// `dtbench summary REPORT`: the summary `dtbench run` prints at its end, for a report on
// disk (the one a killed run left, say). Reads no collective: each rank reads the file.
int cmd_summary(const std::string& path, bool root) {
  const ReportSummary s = read_report_file(path);
  if (root) dtb::print_summary(s, path);
  return s.passed() ? 0 : 1;
}

// `dtbench claims`: every catalog entry evaluated (harness/claims/claims.h), the measured column from
// REPORT's records when --report is given. Prints the table, or the JSON with --json; --output
// also writes the JSON (scripts/report.py renders it). Exit 2 on a bad catalog or report.
struct ClaimsArgs {
  std::string catalog, report, output;
  bool json = false;
};

int cmd_claims(const ClaimsArgs& a, bool root) {
  const nlohmann::json catalog = load_claims_catalog(a.catalog.empty() ? default_claims_catalog() : a.catalog);
  nlohmann::json report;
  if (!a.report.empty()) {  // read and checked as `dtbench summary` reads it (schema version, structure)
    report = parse_json_input(read_input_file(a.report, "report", size_t(1) << 30), "report " + a.report);
    summarize_report(report, a.report);
  }
  const std::vector<ClaimResult> rows = evaluate_claims(catalog, a.report.empty() ? nullptr : &report, a.report);
  nlohmann::json out = claims_to_json(rows);
  out["catalog"] = a.catalog.empty() ? std::string("harness/claims/claims.json") : a.catalog;  // the default, as the repository names it
  out["report"] = a.report.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.report);
  if (!root) return 0;
  if (!a.output.empty()) {
    std::ofstream f(a.output);
    if (!(f << out.dump(1) << "\n")) throw InputError("--output " + a.output + ": cannot write");
  }
  if (a.json) std::printf("%s\n", out.dump(1).c_str());
  else std::printf("%s", format_claims_table(rows).c_str());
  return 0;
}

struct RunArgs {
  std::string config = "default";
  std::string suites, data, output_dir, run_id, backend;
  std::string trace;  // Chrome trace JSON path, empty: none
  bool print_config = false;
  bool force = false;  // --force: run even when a suite's memory estimate exceeds 80% of RAM
  std::string progress = "auto";  // --progress auto|on|off
  bool sweep = false;        // --sweep: run the sweep suite only
  std::string sweep_layouts;  // its comma-separated layouts, empty: every layout that fits
  std::vector<std::string> allow_changed;  // --allow-changed KEY (repeatable)
  int ranks_per_node = 0;  // --ranks-per-node N: emulated nodes of N consecutive ranks; 0: the real ones
};

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

// Rank 0's live progress line on a terminal: "[suite i/n name] step s/S, elapsed, ~left",
// redrawn at most 4 times a second; the estimate assumes the loop's remaining steps take
// as long as its steps so far (a loop restarts when a step 1 is reported).
class TerminalProgress final : public ProgressSink {
 public:
  void begin_suite(int index, int total, const std::string& name) {
    prefix_ = "[suite " + std::to_string(index) + "/" + std::to_string(total) + " " + name + "]";
    suite_start_ = now_seconds();
    draw("running");
  }
  void step(int64_t done, int64_t total) override {
    const double now = now_seconds();
    if (done <= 1) loop_start_ = now - 1e-9;  // a new training loop
    if (now - last_draw_ < 0.25 && done < total) return;
    const double per = (now - loop_start_) / double(done);
    char b[160];
    std::snprintf(b, sizeof b, "step %lld/%lld, %.1f s elapsed, ~%.0f s left in this loop", (long long)done,
                  (long long)total, now - suite_start_, per * double(total - done));
    draw(b);
  }
  void clear() override {
    if (!shown_) return;
    std::fputs("\r\033[K", stdout);
    std::fflush(stdout);
    shown_ = false;
  }

 private:
  void draw(const std::string& what) {
    std::fprintf(stdout, "\r\033[K%s %s", prefix_.c_str(), what.c_str());
    std::fflush(stdout);
    shown_ = true;
    last_draw_ = now_seconds();
  }
  std::string prefix_;
  double suite_start_ = 0, loop_start_ = 0, last_draw_ = -1;
  bool shown_ = false;
};

// Runs config["suites"] in order, each on every rank. A suite that throws std::exception is
// recorded as "error" with its message; on one rank the run goes on, on several the job ends
// through the error sink (MPI_Abort) after rank 0 wrote what it has, since the other ranks
// may be blocked in the failed suite's collectives. `after_each` is called on every rank
// after each suite with the outcomes so far, so the report on disk always holds what
// finished. `spans` goes to every suite as SuiteContext::spans, `info` (ranks per node, the
// run's options) into every SuiteContext. Rank 0 prints one line per suite as it ends; with
// `live_progress` also a live line for a terminal. Collective over `world`.
std::vector<SuiteOutcome> run_suites(const nlohmann::json& config, Communicator& world, Backend& backend,
                                     Communicator* device_world, const Dataset* dataset,
                                     const std::function<void(const std::vector<SuiteOutcome>&)>& after_each,
                                     SpanRecorder* spans, bool live_progress, const WorldInfo& info) {
  std::vector<SuiteOutcome> outcomes;
  // Progress: a live line on rank 0 when asked; one line per suite always.
  TerminalProgress live;
  const bool tty = world.rank() == 0 && live_progress;
  ProgressSink* previous = tty ? set_progress_sink(&live) : nullptr;
  const int n_suites = int(config.at("suites").size());
  int index = 0;
  for (const auto& s : config.at("suites")) {
    const std::string name = s.get<std::string>();
    ++index;
    if (tty) live.begin_suite(index, n_suites, name);
    auto suite = suite_registry().at(name)();
    Device& device = backend.device();
    SuiteContext ctx{world, device, config, config.at(name), dataset, &backend, device_world, spans,
                     info.ranks_per_node, info.options};
    SuiteOutcome out;
    out.name = name;
    // The in-run calibration (suites/calibration.h): the CPU's reference kernels just before
    // and after the suite, so that every time it records is also a ratio to them.
    const bool calibrate = backend.name() == "cpu";
    const Calibration before = calibrate ? measure_calibration(world) : Calibration{};
    device.reset_peaks();
    world.barrier();
    Stopwatch sw;
    double ran_s = -1;  // the suite's own time, without the calibration after it
    try {
      LoadMeter load(world);  // other work on the hosts while it runs (suites/host_load.h)
      out.result = suite->run(ctx);
      ran_s = sw.elapsed();
      out.host_load = host_load_json(load.stop());
      if (calibrate) {
        const Calibration after = measure_calibration(world);
        out.calibration = calibration_json(before, after);
        apply_calibration(out.result.benchmarks, combine(before, after));
      }
      out.status = suite_status(out.result);
    } catch (const AgreedInputError& e) {  // every rank threw it: none waits, the job goes on
      out.status = "error";
      out.error = e.what();
      out.refused = true;
      if (world.rank() == 0) std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    } catch (const std::exception& e) {
      out.status = "error";
      out.error = e.what();
      if (world.size() > 1) {
        // The other ranks may be inside this suite's collectives, waiting for this one, and
        // cannot be told; record what is known (rank 0 writes the report) and end the job.
        outcomes.push_back(std::move(out));
        if (world.rank() == 0) after_each(outcomes);
        set_termination_hook({});  // the report already holds this suite's error
        fatal(__FILE__, __LINE__, "suite '" + name + "' failed: " + e.what() +
                                      "; ending the job so that no rank waits for this one");
      }
    }
    out.duration_s = ran_s >= 0 ? ran_s : sw.elapsed();
    if (world.rank() == 0) {
      clear_progress();
      std::printf("%s\n", suite_end_line(index, n_suites, out).c_str());
      std::fflush(stdout);
    }
    outcomes.push_back(std::move(out));
    after_each(outcomes);
  }
  if (tty) set_progress_sink(previous);
  return outcomes;
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
// where they exist, the trace's directory writable. Errors: InputError naming the path.
void check_output_paths(const std::string& out_dir, const std::string& run_id, const std::string& trace) {
  check_dir_writable(out_dir, "output directory");
  for (const std::string& f : {out_dir + "/latest.json", out_dir + "/" + run_id + ".json"}) {
    std::error_code ec;
    if (fs::exists(f, ec) && !fs::is_regular_file(f, ec))
      throw InputError("report path " + f + " exists and is not a regular file");
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

int cmd_run(Communicator& world, const RunArgs& args) {
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
    check_output_paths(out_dir, run_id, args.trace);
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

}  // namespace
}  // namespace dtb

int main(int argc, char** argv) {
  // OpenBLAS's idle threads spin briefly (may re-execute this program, so first of all).
  dtb::set_blas_thread_timeout(argv);
  // SIGINT and SIGTERM go to the communication watchdog's thread only (it writes what
  // finished, then exits); blocked here, before MPI starts threads that would inherit them.
  dtb::block_termination_signals();
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS ||
      provided < MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "dtbench: error: MPI_Init_thread failed (thread level %d)\n", provided);
    return 1;
  }
  int code = 0;
  {
    auto world = dtb::make_mpi_world();
    dtb::start_comm_watchdog(MPI_COMM_WORLD, dtb::kDefaultCommTimeout);
    const bool root = world->rank() == 0;
    CLI::App app{"dtbench: benchmark and conformance suite for distributed LLM training", "dtbench"};
    app.require_subcommand(1);
    dtb::RunArgs args;
    auto* run = app.add_subcommand("run", "run suites and write the JSON report");
    run->add_option("--config", args.config, "named config or JSON file (default: default)");
    run->add_option("--suites", args.suites, "comma-separated suites, overriding the config's");
    run->add_option("--data", args.data, "training text file, overriding the config's");
    run->add_option("--output-dir", args.output_dir, "report directory (default: results)");
    run->add_option("--run-id", args.run_id, "report file name stem (default: date-time-config)");
    run->add_option("--backend", args.backend, "cpu or cuda, overriding the config's");
    run->add_option("--trace", args.trace,
                    "write per-rank spans of the train and pipeline suites as Chrome trace JSON to FILE (Perfetto)")
        ->type_name("FILE");
    run->add_flag("--force", args.force,
                  "run even when a suite's memory estimate exceeds 80% of this machine's memory (refused "
                  "otherwise, before anything is allocated)");
    run->add_option("--allow-changed", args.allow_changed,
                    "resume a train checkpoint with this recipe key changed (lr, beta1, beta2, eps, weight_decay, "
                    "grad_clip, micro_batches, recompute; repeatable); the report lists the change")
        ->type_name("KEY");
    run->add_flag("--print-config", args.print_config,
                  "print the complete validated config (every key, defaults filled) and exit");
    run->add_option("--progress", args.progress,
                    "a live progress line on rank 0: auto (when its output is a terminal and no MPI launcher "
                    "started it), on, off (default auto; the last one given counts)")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    run->add_option("--sweep", args.sweep_layouts,
                    "run the sweep suite only: the config's model on each layout of the world's ranks (e.g. "
                    "TP2xDP2,PP2xDP2:gpipe,DP4:zero2), or on every layout that fits when none are given; one "
                    "report row per layout")
        ->expected(0, 1)
        ->type_name("[LAYOUTS]");
    run->add_option("--ranks-per-node", args.ranks_per_node, "emulate nodes of N consecutive ranks (for tests): the "
                    "collectives suite's hierarchical rows and train.dp_allreduce see them")->type_name("N");
    auto* list = app.add_subcommand("list", "list suites and named configs");
    bool list_layout_keys = false, list_json = false;
    list->add_flag("--layout-keys", list_layout_keys,
                   "list the layout keys' spellings instead: config key, layout spec token, record name key, record "
                   "field, `dtbench memory` flag");
    list->add_flag("--json", list_json, "with --layout-keys: print them as JSON, one object per key");
    std::string summary_path;
    auto* summary = app.add_subcommand(
        "summary", "print the end-of-run summary of a report (e.g. results/latest.json); exit 1 if a suite failed");
    summary->add_option("REPORT", summary_path, "report JSON file")->required();
    dtb::MemoryArgs memory_args;
    auto* memory = dtb::add_memory_subcommand(app, memory_args);
    dtb::PlanArgs plan_args;
    auto* plan = dtb::add_plan_subcommand(app, plan_args);
    dtb::ValidateArgs validate_args;
    auto* validate = dtb::add_validate_subcommand(app, validate_args);
    dtb::CountArgs count_args;
    auto* count = dtb::add_count_subcommand(app, count_args);
    dtb::ClaimsArgs claims_args;
    auto* claims = app.add_subcommand(
        "claims", "check the field's rules of thumb (harness/claims/claims.json) against dtbench's models and a report");
    claims->add_option("--report", claims_args.report, "a dtbench report whose suites give the measured column");
    claims->add_option("--catalog", claims_args.catalog, "claims catalog JSON (default: harness/claims/claims.json)");
    claims->add_option("--output", claims_args.output, "also write the evaluated claims as JSON to FILE")->type_name("FILE");
    claims->add_flag("--json", claims_args.json, "print JSON instead of the table");
    try {
      app.parse(argc, argv);
      for (const char* opt : {"--config", "--suites", "--data", "--output-dir", "--run-id", "--backend", "--trace"})
        if (run->count(opt) > 0 && run->get_option(opt)->as<std::string>().empty())
          throw dtb::InputError(std::string(opt) + " is empty");
      for (const char* opt : {"--report", "--catalog", "--output"})
        if (claims->count(opt) > 0 && claims->get_option(opt)->as<std::string>().empty())
          throw dtb::InputError(std::string("claims ") + opt + " is empty");
      args.sweep = run->count("--sweep") > 0;
      if (run->count("--ranks-per-node") > 0) dtb::check_ranks_per_node(args.ranks_per_node, world->size());
      if (*run) code = dtb::cmd_run(*world, args);
      else if (*list) code = dtb::cmd_list(*world, list_layout_keys, list_json);
      else if (*summary) code = dtb::cmd_summary(summary_path, root);
      else if (*memory) code = dtb::cmd_memory(*memory, memory_args, root);
      else if (*plan) code = dtb::cmd_plan(*world, *plan, plan_args, root);
      else if (*claims) code = dtb::cmd_claims(claims_args, root);
      else if (*count) code = dtb::cmd_count(*world, count_args);
      else if (*validate) code = dtb::cmd_validate(*world, validate_args);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {
        if (root) app.exit(e);
      } else if (root) {
        std::string what = e.what();
        std::fprintf(stderr, "dtbench: error: %s (see dtbench --help)\n", what.c_str());
      }
      code = e.get_exit_code() == 0 ? 0 : dtb::kExitInput;
    } catch (const dtb::InputError& e) {
      if (root) std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = dtb::kExitInput;
    } catch (const std::exception& e) {  // not bad input: a failure of this machine or a bug
      // Other ranks may be waiting in a collective for this one: end the whole job.
      if (world->size() > 1) dtb::fatal(__FILE__, __LINE__, std::string("error: ") + e.what());
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = 1;
    }
  }
  dtb::stop_comm_watchdog();
  MPI_Finalize();
  return code;
}
