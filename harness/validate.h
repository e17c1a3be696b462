// `dtbench validate`: is this cluster fit to train on, and if not, which node is not.
//
// Built so far: --level quick, the inventory of every rank and node (host, node, CPU model,
// cores, memory, device, MPI and BLAS versions) and its consistency across nodes, checked
// against --expect before anything expensive runs. Nodes can be emulated on one machine
// (--ranks-per-node N groups consecutive ranks, for tests). The levels that measure (medium:
// per-rank compute and collectives within a node; long: pairs across nodes and the trainer;
// burnin) are refused with exit 2 until they exist.
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
};

/// One check's outcome. status: "pass", "warn", "fail", "skip" or "not_run"; detail says why
/// in one line; nodes and ranks name what it is about (empty: the whole world).
struct ValidateCheck {
  std::string name, status, detail;
  std::vector<std::string> nodes;
  std::vector<int> ranks;
  nlohmann::json values = nlohmann::json::object();
  std::map<std::string, std::string> node_detail;  // per named node: what is wrong there
};

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
