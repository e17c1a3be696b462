// The in-run calibration (docs/ci.md, "Calibrated metrics"): reference kernels timed beside
// the measurements, so that a time can also be read as a ratio to them, which divides out how
// fast the machine happens to be at that moment (a shared runner's load, a CPU's clock). As
// scripts/bench-peers reads dtbench against its peers: compute against an sgemm, memory-bound
// work against a STREAM triad, a collective against a bare MPI loop of the same size.
// Not a peer comparison: the references are fixed and small, chosen to be timed in milliseconds.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "kernels/comm/mpi_communicator.h"
#include "kernels/tensor.h"
#include "suites/bandwidth.h"

namespace dtb {

/// The reference kernels' times, seconds, each the slowest rank's median of 15 (after one
/// untimed call): sgemm_s one cblas_sgemm 256 x 256 x 256 (33.6 MFLOP, single-threaded
/// OpenBLAS as the ranks run it); triad_s one STREAM triad a = b + 3 c over 2^20 floats
/// (12 MiB moved, McCalpin's kernel).
struct Calibration {
  double sgemm_s = 0, triad_s = 0;
};

/// Measures both on every rank at once (after a barrier, as the suites' ranks run), then the
/// max over ranks. Collective over `world`.
Calibration measure_calibration(Communicator& world);

/// The calibration of a suite from the measurements before and after it: each time the
/// geometric mean of the two, so a load that came or went during the suite counts half.
Calibration combine(const Calibration& before, const Calibration& after);

/// {"sgemm_us": {"before", "after"}, "triad_us": {"before", "after"}}: the report's
/// suites[].calibration.
nlohmann::json calibration_json(const Calibration& before, const Calibration& after);

/// Adds to every measured record (real_time > 0, not skipped) that has no real_time_cal yet:
/// `calibration` (the record's own choice when it has one: "triad" for memory-bound work,
/// else "sgemm") and real_time_cal = real_time (in seconds) / that reference's seconds.
/// Records that carry real_time_cal already (the collectives', against bare MPI) or say
/// calibration "none" (no reference of their kind was measured) are left.
void apply_calibration(std::vector<nlohmann::json>& records, const Calibration& cal);

/// The bare MPI call of a collective on `comm` (MPI_Allreduce, MPI_Allgather,
/// MPI_Reduce_scatter_block, MPI_Bcast, MPI_Sendrecv, MPI_Alltoall, MPI_Alltoallv over
/// alltoallv_split's blocks), out of place, with the same buffers, count (elements per rank,
/// as the Communicator's call; all_to_all's block, all_to_allv's unit), type and peers: what the collectives
/// suite times beside each row, on the MPI communicator `comm` underneath the suite's.
/// Errors: InputError for a dtype other than f32, f64.
std::function<void()> bare_mpi_call(CollectiveOp op, const MpiCommunicator& comm, const void* send, void* recv,
                                    size_t count, DType dtype, int root, int next, int prev);

}  // namespace dtb
