// The Suite interface and its registry. A suite is one file in suites/ that registers
// itself by name (DTB_REGISTER_SUITE) and returns records (Google Benchmark's shape) and
// checks. The harness owns config parsing, the report and the process world.
#pragma once
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "kernels/comm/communicator.h"
#include "kernels/comm/watchdog.h"
#include "kernels/device.h"
#include "kernels/slowdown.h"
#include "reference/model/data.h"
#include "reference/model/gpt.h"
#include "reference/model/gpt_json.h"
#include "reference/layout/process_grid.h"
#include "reference/analytic/memory_model.h"
#include "reference/zero/zero.h"
#include "reference/training/spans.h"
#include "reference/training/trainer.h"
#include "reference/json_keys.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

/// A conformance check: passed when value <= tolerance (both >= 0, in the unit the name
/// says). `detail` says how the tolerance was derived. A timing check may also be not judged
/// (not_judged_reason non-empty, e.g. "the machine was busy: ..." with the figures): then it
/// neither passed nor failed — `passed` is false, as for any check not shown to pass — and it
/// fails no suite and no run (docs/report.md, "Checks not judged").
struct Check {
  std::string name;  // e.g. "train/loss/step:12"
  double value = 0;
  double tolerance = 0;
  bool passed = false;
  std::string detail;
  std::string not_judged_reason;  // empty: judged (passed or failed)
  double fraction() const { return tolerance > 0 ? value / tolerance : (value == 0 ? 0.0 : INFINITY); }
  bool judged() const { return not_judged_reason.empty(); }
  /// Judged and not passed: what makes a suite "failed" and the run exit 1.
  bool failed() const { return judged() && !passed; }
  /// The report's checks[].verdict: "passed", "failed" or "not_judged".
  const char* verdict() const { return !judged() ? "not_judged" : passed ? "passed" : "failed"; }
};
/// Builds a Check with passed = (value <= tolerance) (NaN fails).
Check make_check(std::string name, double value, double tolerance, std::string detail = {});
/// `c` marked not judged for `reason` (non-empty, one line: why, with the figures): passed
/// false, value and tolerance kept (what was measured, against what it would have been held).
Check make_not_judged(Check c, std::string reason);

/// What a suite returns. `benchmarks` are flat records (see benchmark_record); `data` is
/// suite-specific structured output kept in the report's suites[] entry (e.g. loss curves).
struct SuiteResult {
  std::vector<nlohmann::json> benchmarks;
  std::vector<Check> checks;
  nlohmann::json data = nlohmann::json::object();
};

/// The run's options from the command line and the config's top level, as every suite sees
/// them (no process-wide switches): `force` is `dtbench run --force` (check_fits_in_memory
/// warns instead of refusing); comm_timeout_s the config's comm_timeout_s, seconds, that the
/// harness gives the watchdog and the device communicators.
struct RunOptions {
  bool force = false;
  double comm_timeout_s = kDefaultCommTimeout;
  /// Recipe keys a resumed train run may change (`--allow-changed KEY`; checkpoint_recipe_keys).
  std::vector<std::string> allow_changed = {};
  /// Test-only: what DTB_INJECT_SLOWDOWN slows (kernels/slowdown.h); nothing by default.
  InjectedSlowdown slowdown = {};
  /// `dtbench run --ranks-per-node N`: nodes emulated as blocks of N consecutive world ranks
  /// for the node-aware algorithms (the collectives suite's hierarchical rows, train's
  /// dp_allreduce); 0: the real nodes. Memory checks keep the real ranks per node.
  int emulated_ranks_per_node = 0;
};

/// The ranks per node the node-aware algorithms use: options.emulated_ranks_per_node when set,
/// else the real `ranks_per_node`. Nodes are blocks of that many consecutive world ranks
/// (node of rank r = r / it: a launcher's block placement, mpirun's and srun's default).
inline int node_size(int ranks_per_node, const RunOptions& options) {
  return options.emulated_ranks_per_node > 0 ? options.emulated_ranks_per_node : ranks_per_node;
}

/// The process world a config is validated against: ranks in all, and the most ranks
/// that share one node's memory, with the run's options. Converts from a plain world size
/// (one rank per node).
struct WorldInfo {
  WorldInfo(int size_ = 1, int ranks_per_node_ = 1, RunOptions options_ = {})
      : size(size_), ranks_per_node(ranks_per_node_), options(options_) {}
  int size;
  int ranks_per_node;
  RunOptions options = {};
};

/// What a suite runs with. Every rank gets the same config (validated, defaults filled).
struct SuiteContext {
  Communicator& world;
  Device& device;
  const nlohmann::json& config;   // the whole run config
  const nlohmann::json& section;  // config[suite name], every key present
  const Dataset* dataset = nullptr;  // the run's training text (config "data"), loaded once
  Backend* backend = nullptr;        // what `device` belongs to; null means a CPU-only caller
  /// Collectives on the backend's memory (NCCL on CUDA); null means `world` serves both.
  /// `world` (MPI, host buffers) is for control: barriers, host-side reductions, results.
  Communicator* device_world = nullptr;
  /// Where a suite records its per-rank timing spans (`dtbench run --trace`); null or
  /// disabled when no trace is asked for. The harness exports what it holds after the run.
  SpanRecorder* spans = nullptr;
  /// The most ranks sharing one node, and the run's options (--force, comm_timeout_s).
  int ranks_per_node = 1;
  RunOptions options = {};
  /// The world this run's config was validated against (what a suite's Params::parse takes).
  WorldInfo world_info() const { return WorldInfo(world.size(), ranks_per_node, options); }
  /// Prints a line on rank 0 only (others ignore it).
  void print(const std::string& line) const;
  /// Prints each of `checks` as "# check <name, padded to name_width> <value> <= <tolerance>  ok"
  /// (or "FAILED", or "not judged: <reason>"), on rank 0; with failed_only, the failed and the
  /// not judged ones alone.
  void print_checks(const std::vector<Check>& checks, int name_width, bool failed_only = false) const;
};


class Suite {
 public:
  virtual ~Suite() = default;
  /// The registry name, used by --suites and as the first part of record names.
  virtual std::string name() const = 0;
  /// One line for `dtbench list`: what the suite measures and checks.
  virtual std::string description() const = 0;
  /// The suite's config section: every key it accepts with its default. Keys not listed
  /// are rejected by the harness, and a value must have its default's JSON type.
  virtual nlohmann::json defaults() const = 0;
  /// Cross-key and range checks of a section (defaults filled), including whether it fits
  /// in memory with world.ranks_per_node ranks per node; throws InputError naming the key.
  virtual void validate(const nlohmann::json& section, const nlohmann::json& config,
                        const WorldInfo& world) const {}
  /// Runs on every rank (collective over ctx.world), starting from the suite's
  /// Params::parse(ctx.section, ctx.config, ctx.world_info()), the parse validate() used.
  /// Errors: throws std::runtime_error for a failure the harness records as the suite's error.
  virtual SuiteResult run(SuiteContext& ctx) = 0;
  /// The typed parameters run() would use for `section`, in a comparable printable form
  /// (Params::parse(...).to_json()); the same InputError as validate() for what the parse
  /// refuses. Every suite has a Params with one parse that validate() and run() both use.
  virtual nlohmann::json params_json(const nlohmann::json& section, const nlohmann::json& config,
                                     const WorldInfo& world) const = 0;
};

/// A Suite whose typed section is `Params`, a type with `static Params parse(const json& section,
/// const json& config, const WorldInfo& world)` (throws InputError naming the key) and `json
/// to_json() const`: params_json is that parse's to_json(), written once here for every suite.
template <class Params>
class SuiteWithParams : public Suite {
 public:
  nlohmann::json params_json(const nlohmann::json& section, const nlohmann::json& config,
                             const WorldInfo& world) const final {
    return Params::parse(section, config, world).to_json();
  }
};

/// The run config's "model" section (L, C, NH, T, V, the optional MoE keys num_experts,
/// moe_router_topk, moe_expert_capacity_factor, moe_aux_loss_coeff, moe_z_loss_coeff,
/// moe_layer_freq, moe_ffn_hidden_size: Megatron-LM's names, and the family arch "gpt2" or
/// "llama" with the Llama keys num_kv_heads, ffn_hidden_size, rope_theta, norm_eps) as a GptConfig, range-checked
/// (V >= 256: the data is byte-level) and validated; InputError naming the key otherwise.
GptConfig gpt_config_from_json(const nlohmann::json& model, const std::string& path = "model");
/// Refuses a Llama model where `by` (a suite, a tool) runs the GPT-2 family only: InputError
/// "<path>.arch = llama: not supported by <by> yet (...)" (llama_not_supported); nothing for GPT-2.
void require_gpt2(const GptConfig& model, const std::string& path, const std::string& by);
/// A "model" section's defaults: the shape given, dense (num_experts 0), and the MoE keys'
/// defaults (moe_router_topk 2, moe_layer_freq 1, moe_ffn_hidden_size 0: 4C, moe_aux_loss_coeff
/// 0.01, moe_z_loss_coeff 0, moe_expert_capacity_factor null: no dropping), and the Llama keys'
/// (arch "gpt2", num_kv_heads 0: NH, ffn_hidden_size 0: Llama's rule, rope_theta 10000, norm_eps
/// 1e-5) with `llama_keys` (the run's own "model" section and the conformance suite's; the other
/// suites with a model section of their own run GPT-2 only, so far), so that the config merge
/// accepts them there.
nlohmann::json model_defaults(int L, int C, int NH, int T, int V, bool llama_keys = false);

/// Comparable printable forms of the typed config parts every suite shares (every field),
/// for Suite::params_json; the model's is reference/model/gpt_json.h's.
nlohmann::json to_json(const TrainConfig& t);

/// A section's training-recipe keys, each only where the section has it: into `layout` (the
/// layout's recipe, LayoutSpec's one copy) precision (fp32, bf16, fp16, and fp8 with its recipe where
/// the section has an `fp8` section: precision_from_json) and
/// how the DP replicas keep in step (reference/training/trainer.h DpSync: the one reader
/// reference/layout/dp_sync_json.h dp_sync_from_json, its ranges; their combinations:
/// reference/layout/layout_validate.h); into `t` loss_scale ("auto": dynamic for layout.precision
/// fp16, none otherwise; "none"; "dynamic"), loss_scale_init, loss_scale_growth_interval and
/// grad_clip (0: off). communication_data_type is the layout's too (layout_from_json).
/// Errors: InputError "<path>.<key>: <reason>".
void apply_recipe_keys(const nlohmann::json& section, const std::string& path, TrainConfig& t, LayoutSpec& layout);

/// Refuses a run before it allocates: throws InputError "<what>: predicted B bytes (X MiB)
/// per rank x Y ranks per node, more than this machine's memory allows: A bytes available
/// to the run (80% of Z MiB); --force runs it anyway" when bytes_per_rank (the suite's
/// analytic estimate, bytes) * ranks_per_node exceeds 80% of physical RAM. With
/// options.force (`dtbench run --force`) it prints that as a warning instead.
void check_fits_in_memory(double bytes_per_rank, int ranks_per_node, const std::string& what,
                          const RunOptions& options);

/// Creates directory `dir` (and its parents) if needed and checks that a file can be
/// created in it (a probe file, removed again). Errors: InputError "<what> is not writable:
/// '<dir>'". Used before anything is measured, for every directory a run will write.
void check_dir_writable(const std::string& dir, const std::string& what);

using SuiteFactory = std::function<std::unique_ptr<Suite>()>;
/// Name -> factory of every registered suite, sorted by name.
const std::map<std::string, SuiteFactory>& suite_registry();
/// Registers a factory; aborts on a duplicate name. Used through DTB_REGISTER_SUITE.
bool register_suite(const std::string& name, SuiteFactory factory);

/// Registers CLASS (a Suite with a default constructor) under NAME at static
/// initialisation. The file must be in the dtb_suites OBJECT library, or the linker drops it.
#define DTB_REGISTER_SUITE(NAME, CLASS) \
  static const bool dtb_registered_##CLASS = ::dtb::register_suite(NAME, [] { return std::make_unique<CLASS>(); })

/// A benchmark record in Google Benchmark's JSON shape: name (the join key,
/// `suite/case/key:value/...`), run_name, run_type "iteration", repetitions,
/// repetition_index 0, threads 1, iterations, real_time and cpu_time (seconds given,
/// written in `time_unit`: "ns", "us", "ms" or "s"), time_unit. Suites add their own keys,
/// units in the key names (busbw_GBps, peak_bytes).
nlohmann::json benchmark_record(const std::string& name, int64_t iterations, int repetitions,
                                double real_time_s, double cpu_time_s, const std::string& time_unit);

}  // namespace dtb
