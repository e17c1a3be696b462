// Level quick of `dtbench validate`: each rank's inventory (host, node, CPU, memory, device,
// library versions), the --expect parser, and the checks that compare the inventories with
// each other and with the expectations. No measurement here; the probes are elsewhere.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/validate/check.h"
#include "kernels/comm/communicator.h"

namespace dtb {

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
/// node_index, local_rank, boot_id (the kernel's, /proc/sys/kernel/random/boot_id: the same for
/// every host in a network/UTS namespace of one machine), cpu_model, cores, memory_bytes,
/// device, backend, mpi_version, blas_version. Errors: none; what cannot be read is recorded as
/// null.
nlohmann::json rank_inventory(int rank, int node_index, int local_rank, bool emulated, const std::string& device,
                              const std::string& backend);

/// Every rank's physical machine, in rank order: "boot <boot_id>" where the inventory has one
/// (hosts that are namespaces of one kernel share it), else "host <host>". Pure.
std::vector<std::string> machine_of_rank(const std::vector<nlohmann::json>& inventory);

/// The machines that more than one node or host runs on: per machine (machine_of_rank's
/// key), its hosts and its nodes in order of first appearance. Emulated nodes of one host are
/// such a machine. Pure.
struct SharedMachine {
  std::string machine;
  std::vector<std::string> hosts, nodes;
};
std::vector<SharedMachine> shared_machines(const std::vector<nlohmann::json>& inventory);

/// The CPU's model name from /proc/cpuinfo, or "" when it cannot be read.
std::string cpu_model();

/// The value most ranks report for `key` in their inventories (ties: the lowest rank's; null
/// where a rank lacks the key). `inventory` must not be empty.
nlohmann::json majority(const std::vector<nlohmann::json>& inventory, const std::string& key);

/// Every rank's string, in rank order: the lengths by all_reduce(max), then the strings padded
/// to whole i32 words through one all_gather. Collective over `world`.
std::vector<std::string> all_gather_strings(Communicator& world, const std::string& s);

}  // namespace dtb
