// `dtbench validate`: is this cluster fit to train on, and if not, which node is not.
//
// Built so far: --level quick, the inventory of every rank and node (host, node, CPU model,
// cores, memory, device, MPI and BLAS versions) and its consistency across nodes, checked
// against --expect before anything expensive runs; --level medium's per-rank compute: GEMM
// FLOP/s and STREAM-triad bandwidth on every rank (the ranks of one host one at a time, hosts
// at once; best of the repetitions), each rank against the fleet median; and --level long's
// pair sweep: every pair's send/recv bandwidth, round-robin, each rank's median over its
// partners against the fleet median. Nodes can be emulated on one machine (--ranks-per-node N
// groups consecutive ranks) and one rank's compute or transfers slowed (--inject), both for
// tests. Not built yet: medium's collectives within a node, long's trainer run, burnin
// (refused with exit 2), baselines and rules files.
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
};

/// One metric measured on every rank (higher is better), in rank order.
struct Metric {
  std::string unit;
  std::vector<double> per_rank;
};

/// A baseline's value for one metric from a healthy run's per-rank values: iterative outlier
/// removal (drop values beyond 3 MADs, at least 1% of the median, from the median, until none
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
};

/// A test-only fault: rank `rank` runs its compute measurements `compute` times slower (it
/// spins for (FACTOR - 1) x each timed repetition inside the timing), or its point-to-point
/// transfers `comm` times slower (both sides of each pair with it stretch every timed transfer
/// to FACTOR times the longer side's, as a link that many times slower would). Parsed from
/// "RANK:compute:FACTOR" or "RANK:comm:FACTOR" (FACTOR >= 1); InputError otherwise.
/// Documented as for tests only.
struct Injection {
  int rank = -1;
  double compute = 1.0;
  double comm = 1.0;  // "RANK:comm:FACTOR": that rank's point-to-point transfers FACTOR times slower
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

/// The command: collective over `world`. Prints the expected duration first, then the checks
/// and the per-node verdicts on rank 0, writes args.output (JSON, kind "validate") and returns
/// the exit status above. Errors: InputError (exit 2) for bad usage.
int cmd_validate(Communicator& world, const ValidateArgs& args);

}  // namespace dtb
