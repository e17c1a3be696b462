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
#include "kernels/device.h"
#include "reference/data.h"
#include "reference/gpt.h"
#include "reference/process_grid.h"
#include "reference/memory_model.h"
#include "reference/zero.h"
#include "reference/spans.h"
#include "reference/trainer.h"

namespace dtb {

/// A conformance check: passed when value <= tolerance (both >= 0, in the unit the name
/// says). `detail` says how the tolerance was derived.
struct Check {
  std::string name;  // e.g. "train/loss/step:12"
  double value = 0;
  double tolerance = 0;
  bool passed = false;
  std::string detail;
  double fraction() const { return tolerance > 0 ? value / tolerance : (value == 0 ? 0.0 : INFINITY); }
};
/// Builds a Check with passed = (value <= tolerance) (NaN fails).
Check make_check(std::string name, double value, double tolerance, std::string detail = {});

/// What a suite returns. `benchmarks` are flat records (see benchmark_record); `data` is
/// suite-specific structured output kept in the report's suites[] entry (e.g. loss curves).
struct SuiteResult {
  std::vector<nlohmann::json> benchmarks;
  std::vector<Check> checks;
  nlohmann::json data = nlohmann::json::object();
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
  /// Prints a line on rank 0 only (others ignore it).
  void print(const std::string& line) const;
};

/// The process world a config is validated against: ranks in all, and the most ranks
/// that share one node's memory. Converts from a plain world size (one rank per node).
struct WorldInfo {
  WorldInfo(int size_ = 1, int ranks_per_node_ = 1) : size(size_), ranks_per_node(ranks_per_node_) {}
  int size;
  int ranks_per_node;
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
  /// Runs on every rank (collective over ctx.world). Errors: throws std::runtime_error for
  /// a failure the harness records as the suite's error.
  virtual SuiteResult run(SuiteContext& ctx) = 0;
};

/// An integer config value in [lo, hi], or InputError naming `path` (e.g. "train.steps").
int64_t int_in_range(const nlohmann::json& section, const std::string& key, const std::string& path,
                     int64_t lo, int64_t hi);
/// A number config value in [lo, hi] (finite), or InputError naming `path`.
double number_in_range(const nlohmann::json& section, const std::string& key, const std::string& path,
                       double lo, double hi);
/// The run config's "model" section (L, C, NH, T, V) as a GptConfig, range-checked
/// (V >= 256: the data is byte-level) and validated; InputError naming the key otherwise.
GptConfig gpt_config_from_json(const nlohmann::json& model, const std::string& path = "model");

/// A section's training layout: tensor_parallel, pipeline_parallel, data_parallel (0: the
/// world size / (tp pp)), schedule and virtual_stages, with the given micro-batches,
/// refused unless it can train `model` on `world_size` ranks with `global_batch` sequences
/// (validate_layout: divisibility of heads, vocabulary, layers, batch; product = world).
/// Errors: InputError "<path>: <reason naming the numbers>".
ParallelLayout parallel_layout_from_json(const nlohmann::json& section, const std::string& path,
                                         const GptConfig& model, int micro_batches, int global_batch, int world_size);

/// A section's ZeRO keys, DeepSpeed's names: zero_stage (0-3), offload_optimizer ("none" or
/// "cpu"), reduce_bucket_size and allgather_bucket_size (elements, >= 1), overlap_comm.
/// Errors: InputError "<path>.<key>: <reason>" (validate_zero).
ZeroConfig zero_config_from_json(const nlohmann::json& section, const std::string& path);

/// A layout with its ZeRO settings and recompute, as the conformance and sweep suites name it.
struct LayoutSpec {
  ParallelLayout l;
  ZeroConfig z;
  Recompute recompute = Recompute::none;
};

/// "TP2xPP2xDP2[:option...]" -> a layout: dimensions TP, DP, PP in any order, each at most
/// once, case-insensitive, joined by 'x'; options a schedule (gpipe, 1f1b, interleaved; 1f1b
/// by default), "vN" virtual stages, "zeroN" the ZeRO stage, "offload" (offload_optimizer
/// cpu), "full" or "selective" recompute, each at most once. Divisibility is not checked
/// here (validate_layout). Errors: InputError "<path>: '<text>' <reason> (expected e.g. ...)".
LayoutSpec parse_layout_spec(const std::string& text, const std::string& path);

/// A section's "recompute" key: none, selective or full; InputError "<path>.recompute: ..."
/// otherwise.
Recompute parse_recompute_key(const nlohmann::json& section, const std::string& path);

/// A section's training-recipe keys into `t` (and `z`, when given), each only where the
/// section has it: precision (fp32, bf16, fp16), loss_scale ("auto": dynamic for fp16,
/// none otherwise; "none"; "dynamic"), loss_scale_init, loss_scale_growth_interval,
/// grad_clip (0: off) and communication_data_type (DeepSpeed's key: "auto", the gradients'
/// type; "fp32"; or the run's half type). Errors: InputError "<path>.<key>: <reason>".
void apply_recipe_keys(const nlohmann::json& section, const std::string& path, TrainConfig& t, ZeroConfig* z);

/// Refuses a run before it allocates: throws InputError "<what>: predicted B bytes (X MiB)
/// per rank x Y ranks per node, more than this machine's memory allows: A bytes available
/// to the run (80% of Z MiB); --force runs it anyway" when bytes_per_rank (the suite's
/// analytic estimate, bytes) * ranks_per_node exceeds 80% of physical RAM. After
/// set_memory_check_forced(true) (`dtbench run --force`) it prints that as a warning instead.
void check_fits_in_memory(double bytes_per_rank, int ranks_per_node, const std::string& what);

/// Creates directory `dir` (and its parents) if needed and checks that a file can be
/// created in it (a probe file, removed again). Errors: InputError "<what> is not writable:
/// '<dir>'". Used before anything is measured, for every directory a run will write.
void check_dir_writable(const std::string& dir, const std::string& what);
/// Whether check_fits_in_memory warns (true) or refuses (false, the default). Process-wide.
void set_memory_check_forced(bool forced);

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
