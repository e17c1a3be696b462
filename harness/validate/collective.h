// The collective probes of `dtbench validate`: an all-reduce's bus bandwidth and each rank's
// arrival at it (how late it comes after the first, as a share of the work between), and why
// arrival cannot attribute a straggler on a crowded host. Levels medium (each node, groups of
// nodes) and long (the world) use them.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"

namespace dtb {

/// An all-reduce over `comm` (the ranks of a node, or the world): `busbw` of a 16 MiB float sum,
/// best of 5 after a warm-up, 2 (n - 1) / n x bytes / seconds (nccl-tests' bus bandwidth, GB/s);
/// and each rank's arrival: 15 iterations of a fixed piece of work (sgemm 768^3, about 8 ms a core, stretched by the
/// test-only compute fault) then an 8-byte all-reduce, each rank timing its wait inside it. The
/// last to arrive waits least, so rank r's lateness in an iteration is the longest wait less its
/// own: a measure free of clock offsets between hosts. lag_ms: each rank's median lateness,
/// work_ms: the median time of the work, both in comm's rank order.
struct CollectiveProbe {
  double busbw = 0;
  std::vector<double> lag_ms;
  double work_ms = 0;
};
/// Collective over `comm`: every call is the Communicator's, so the watchdog names a rank hung
/// in one by `comm`'s group.
CollectiveProbe probe_allreduce(Communicator& comm, double factor);

/// Why arrival times cannot attribute a straggler here, or "": a physical machine (a host, or
/// the hosts that share one kernel's boot id: machine_of_rank) running more ranks at once than
/// it has cores (the world's collective: all its ranks; a node's: its largest node, as a
/// machine's nodes take turns); the reason names the hosts sharing it. Their arrival order is
/// then the OS scheduler's. `inv`: every rank's inventory (host, boot_id, node_index, cores).
std::string crowded(const std::vector<nlohmann::json>& inv, bool world_wide);

}  // namespace dtb
