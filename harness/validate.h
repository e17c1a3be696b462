// `dtbench validate`: is this cluster fit to train on, and if not, which node is not.
//
// Levels, each including the one before:
//  - quick: the inventory of every rank and node (host, node, CPU model, cores, memory, device,
//    MPI and BLAS versions; on GPUs the device's PCI bus id, UUID and memory, the driver, CUDA
//    runtime and NCCL versions) and its consistency across nodes (no two ranks of a node on one
//    device), checked against --expect before anything expensive runs.
//  - medium: each rank's compute (GEMM FLOP/s, STREAM-triad bandwidth; the ranks of one host one
//    at a time), host<->device copies (cuda backend; skipped with its reason on cpu), each node's
//    rank x rank send/recv matrix and its all-reduce (bus bandwidth and each rank's arrival).
//  - long: every pair's send/recv (round-robin, n - 1 rounds of n / 2 pairs; retested before
//    blamed), alpha-beta fits per link class (intra-node, inter-node), the world's all-reduce
//    with arrival times, and a few data-parallel training steps of the reference GPT.
//  - burnin: the long level looped for --duration seconds, each rank's worst figure judged.
// Metrics are judged by rules (a rules file's, or the defaults: the fleet median, and the
// baseline when given); a metric a rule needs and the run lacks fails. Every step of a check has
// a timeout: a rank that does not arrive is named and the run ends incomplete. Nodes can be
// emulated on one machine (--ranks-per-node N groups consecutive ranks) and one rank's compute
// or transfers slowed, or the rank hung (--inject), both for tests only.
//
// Verdicts: each check is pass, warn, fail, skip (with its reason) or not_run; a node is
// accepted when no failed check names it. Exit status: 0 every node accepted (warnings too,
// unless --werror), 1 a node is defective or a check failed, 2 bad usage, 3 incomplete.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"

namespace dtb {

struct ValidateArgs {
  std::string level = "quick";
  std::string expect;       // "key=value,..." (parse_expectations)
  int ranks_per_node = 0;   // > 0: emulate nodes of this many consecutive ranks
  std::string backend = "cpu";
  std::string output = "results/validate.json";
  bool werror = false;
  double tolerance = 0.3;   // medium: a rank below (1 - tolerance) x the fleet median fails
  std::string inject;       // "RANK:compute:FACTOR": tests only (parse_injection)
  std::string make_baseline;  // write a baseline from this run's metrics to this file
  std::string baseline;       // judge this run's metrics against this baseline file too
  std::string rules;          // a rules file (parse_rules) instead of the default rules
  double check_timeout = 300;  // seconds a step of a check may take before its missing ranks are named (exit 3)
  double duration = 600;       // burnin: seconds to loop the long level for
};

/// One metric measured on every rank, in rank order.
struct Metric {
  std::string unit;
  std::vector<double> per_rank;
  bool higher_is_better = true;
  nlohmann::json extra = nullptr;  // more values for the report (e.g. lateness in ms), or null
};

/// What dtbench validate knows about a metric it can measure: unit, direction, whether its
/// value differs per rank (false: one value for a whole node or the world, repeated on each of
/// its ranks, so the fleet-median rule does not apply), the level that measures it, and how.
struct MetricInfo {
  std::string unit;
  bool higher_is_better = true;
  bool per_rank = true;
  std::string level, how;
  bool baseline = true;  // false: judged by absolute bounds, so --make-baseline leaves it out
};
/// Every metric by name ("compute/gemm_gflops", "pairs/sendrecv_GBps", ...): the vocabulary of
/// baselines and rules files.
const std::map<std::string, MetricInfo>& validate_metrics();

/// One rule of the fixed vocabulary (a rules file's entry; the defaults are rules too).
///  - fleet_drop: a rank worse than the median of all ranks by more than `fail` (a fraction in
///    (0, 1)) fails, by more than `warn` warns. "Worse": below for a higher-is-better metric.
///  - baseline_drop: the same against the baseline file's value for the metric.
///  - min / max: a rank below (min) or above (max) the absolute `fail` fails; `warn` likewise.
///  - k_of: a rank fails when at least `k` of the rules `of` fail for it (warns when k of them
///    warn or fail); the rules it names are then its inputs and give no verdict of their own,
///    except that an input whose metric is missing fails the run (and the k_of with it).
/// A rule over a metric the run did not measure (or the baseline lacks) fails: missing = fail.
struct ValidateRule {
  std::string name, type, metric;
  double fail = 0, warn = -1;
  bool has_warn = false;
  int k = 0;
  std::vector<std::string> of;
};

/// A rules file: {"kind": "validate-rules", "version": 1, "rules": [{"name", "type", "metric",
/// "fail", "warn"} or {"name", "type": "k_of", "k", "of": [names]}]}. Errors: InputError naming
/// `where`, the rule and the problem (unknown type, key or metric, thresholds out of range, k
/// out of [1, len(of)], a name used twice, "of" naming no rule, a rule twice or another k_of).
std::vector<ValidateRule> parse_rules(const nlohmann::json& doc, const std::string& where);

/// The rules without a rules file: fleet_drop at (tolerance, tolerance / 2) for every measured
/// per-rank metric, named as the metric (for the lateness metrics, lower is better and healthy
/// is near 0: max at 100 x tolerance, 50 x tolerance percent of the work); with a baseline (a JSON object, else null), also
/// baseline_drop for every metric it has, named "baseline/<metric>".
std::vector<ValidateRule> default_rules(const std::map<std::string, Metric>& measured,
                                        const nlohmann::json& baseline, double tolerance);

/// A baseline's value for one metric from a healthy run's per-rank values: iterative outlier
/// removal (drop values more than 3 x max(MAD, 1% of the median) from the median, until none
/// is dropped), then the median of the rest. Deterministic for the same inputs.
double baseline_value(std::vector<double> per_rank);

/// One check's outcome. status: "pass", "warn", "fail", "skip" or "not_run"; detail says why
/// in one line; nodes and ranks name what it is about (empty: the whole world).
struct ValidateCheck {
  std::string name, status, detail;
  std::vector<std::string> nodes;
  std::vector<int> ranks;
  nlohmann::json values = nlohmann::json::object();
  std::map<std::string, std::string> node_detail;  // per named node: what is wrong there
  bool counts = true;  // false: an input of a k_of rule, which gives the verdict instead
  /// Per named node, its own status where it differs from the check's (the check fails for
  /// one node's rank and only warns for another's: that node is warned, not failed).
  std::map<std::string, std::string> node_status = {};
};

/// Each rule as a check (named as the rule; values: the rule, each rank's value, the median or
/// baseline), in rule order, k_of rules last. Deterministic for the same inputs. `nodes[r]` is
/// rank r's node. Errors: InputError for a baseline_drop rule without a baseline.
std::vector<ValidateCheck> evaluate_rules(const std::vector<ValidateRule>& rules,
                                          const std::map<std::string, Metric>& measured,
                                          const nlohmann::json& baseline, const std::vector<std::string>& nodes);

/// A test-only fault: rank `rank` runs its compute measurements `compute` times slower (it
/// spins for (FACTOR - 1) x each timed repetition inside the timing), or its point-to-point
/// transfers `comm` times slower (both sides of each pair with it stretch every timed transfer
/// to FACTOR times the longer side's, as a link that many times slower would). Parsed from
/// "RANK:compute:FACTOR" or "RANK:comm:FACTOR" (FACTOR >= 1), or "RANK:hang" (the rank stops in
/// level medium's compute check, for the per-check timeout); InputError otherwise.
/// Documented as for tests only.
struct Injection {
  int rank = -1;
  double compute = 1.0;
  double comm = 1.0;  // "RANK:comm:FACTOR": that rank's point-to-point transfers FACTOR times slower
  bool hang = false;  // "RANK:hang": that rank stops in its first compute step and never returns
};

/// The round-robin schedule of all pairs among n ranks (the circle method): n - 1 rounds of
/// n / 2 disjoint pairs (n even; odd n: n rounds, one rank idle in each). Every pair meets
/// exactly once. n >= 1.
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n);
Injection parse_injection(const std::string& spec, int world_size);

/// Level medium's rule over one metric measured on every rank (higher is better): a rank below
/// (1 - tolerance) x the median of all ranks fails, below (1 - tolerance / 2) x warns; the
/// check names each such rank, its node, value, the median and the deviation. `nodes[r]` is
/// rank r's node.
ValidateCheck fleet_median_check(const std::string& name, const std::string& unit, const std::vector<double>& value,
                                 const std::vector<std::string>& nodes, double tolerance);

/// Checks against a baseline file ({"kind": "validate-baseline", "platform", "metrics": {name:
/// {"value", "unit"}}}): per metric, a rank below (1 - tolerance) x the baseline fails (half of
/// it warns); a metric the baseline has and this run did not measure fails ("missing").
std::vector<ValidateCheck> baseline_checks(const nlohmann::json& baseline, const std::map<std::string, Metric>& measured,
                                           const std::vector<std::string>& nodes, double tolerance);

/// The --expect keys and what they compare: nodes (number of nodes), ranks_per_node (every
/// node's), gpus_per_node (ranks per node on the cuda backend, one GPU each; 0 on cpu), device
/// (a substring of every rank's device name, case-insensitive), cores (every node's at least),
/// memory_gb (every node's at least, GB = 1e9 B). Parses "key=value,..."; InputError naming
/// the key or value for an unknown key, a repeated key, an empty or non-numeric value.
std::map<std::string, std::string> parse_expectations(const std::string& spec);

/// The checks of level quick over the ranks' inventories (one JSON object per rank, as
/// rank_inventory writes them, in rank order): each node's ranks agree with each other and
/// with the other nodes (device, CPU model, cores, memory within 5%, MPI and BLAS versions,
/// ranks per node), then every expectation. Pure: no communication.
std::vector<ValidateCheck> quick_checks(const std::vector<nlohmann::json>& inventory,
                                        const std::map<std::string, std::string>& expect);

/// This rank's inventory: rank, host, node (the host, or host/node<k> when emulated),
/// node_index, local_rank, cpu_model, cores, memory_bytes, device, backend, mpi_version,
/// blas_version. Errors: none; what cannot be read is recorded as null.
nlohmann::json rank_inventory(int rank, int node_index, int local_rank, bool emulated, const std::string& device,
                              const std::string& backend);

/// Hockney's latency-bandwidth model t(n) = alpha + n / beta fitted by least squares with
/// relative residuals (weights 1 / t^2) to (bytes, seconds) points, as the MPI literature and
/// nccl-tests' users summarise a link: returns
/// {alpha in seconds, beta in bytes/s}; {0, 0} with fewer than two distinct sizes, beta 0 when
/// the fitted slope is not positive.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& points);

/// The command: collective over `world`. Prints the expected duration first, then the checks
/// and the per-node verdicts on rank 0, writes args.output (JSON, kind "validate") and returns
/// the exit status above. Errors: InputError (exit 2) for bad usage.
int cmd_validate(Communicator& world, const ValidateArgs& args);

}  // namespace dtb
