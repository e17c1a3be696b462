// Bandwidth definitions and the timing engine of the collectives suite, as nccl-tests
// defines them (doc/PERFORMANCE.md, src/common.cu, each src/*.cu *GetBw): which byte count S
// a collective's bandwidth is computed from, algbw = S / t, busbw = algbw * bus factor, and
// the time of one iteration = a batch's elapsed time / iterations, the max over ranks.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/comm/communicator.h"
#include "suites/stats.h"

namespace dtb {

enum class CollectiveOp { all_reduce, all_gather, reduce_scatter, broadcast, sendrecv, all_to_all, all_to_allv };

/// Every CollectiveOp, in declaration order.
const std::vector<CollectiveOp>& all_collective_ops();
/// "all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all",
/// "all_to_allv".
std::string_view to_string(CollectiveOp op);
/// The op named `name` (as to_string writes it). Throws InputError listing the valid names.
CollectiveOp parse_collective_op(std::string_view name);

/// busbw / algbw for `op` on `n` ranks (nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n;
/// all_gather, reduce_scatter and all_to_all (n-1)/n (nccl-tests' alltoall.cu: the share of
/// the buffer that leaves the rank); all_to_allv the share of alltoallv_split's elements that
/// leave their rank (sum of w(r, j) over r != j over the sum over all r, j: 1 at n = 2, 5/6
/// at 4, (n-1)/n for odd n); broadcast and sendrecv 1. On one rank every op's
/// factor is 0 (nothing crosses a bus, so busbw is 0; nccl-tests keeps 1 for sendrecv and
/// broadcast there). Aborts if n < 1.
double bus_factor(CollectiveOp op, int n);

/// Algorithm bandwidth in GB/s (1 GB = 1e9 bytes, as nccl-tests): bytes / seconds / 1e9.
/// Aborts if seconds <= 0.
double algbw_GBps(size_t bytes, double seconds);

/// Bus bandwidth in GB/s: algbw_GBps(bytes, seconds) * bus_factor(op, n).
double busbw_GBps(CollectiveOp op, size_t bytes, double seconds, int n);

/// The byte count S the bandwidths of `op` use (nccl-tests' *GetCollByteCount):
/// all_reduce, broadcast, sendrecv: count * type_size (the buffer); all_gather:
/// count * type_size * n with count the per-rank send count (the full gathered buffer);
/// reduce_scatter: count * type_size * n with count the per-rank recv count (the full input);
/// all_to_all: count * type_size * n with count the block per peer (the whole send buffer, as
/// nccl-tests' alltoall); all_to_allv: the bytes each rank sends, count * type_size * R with
/// count the split's unit and R its row sum (alltoallv_split).
size_t bandwidth_bytes(CollectiveOp op, size_t per_rank_count, size_t type_size, int n);

/// The collectives suite's uneven all_to_allv split, the same on every backend and in the bare
/// MPI calibration: rank r sends unit * w(r, j) elements to rank j, w(r, j) = (r + j) mod n
/// (on one rank, w = 1), blocks laid end to end in rank order. Every rank sends and receives
/// unit * R elements, R = n(n-1)/2, but each peer a different share, some none (as a router's
/// dispatch: uneven, with empty blocks), and each rank a different pattern. Counts and
/// displacements in elements, size() entries each. Aborts if n < 1 or rank outside [0, n).
struct AlltoallvSplit {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
};
size_t alltoallv_weight(int r, int j, int n);
/// R: the elements per unit each rank sends (and receives) in the split.
size_t alltoallv_row_sum(int n);
AlltoallvSplit alltoallv_split(int n, int rank, size_t unit);

/// One line saying which S `op` uses, for reports, e.g. "S = full gathered buffer (recv)".
std::string_view size_definition(CollectiveOp op);

/// Iterations per timed batch for a message of `bytes`: `iters`, reduced so that
/// iterations * bytes <= max_bytes_per_batch, and at least 1. A pure function of its
/// arguments, so every rank agrees (a different count on one rank would deadlock).
int iterations_for_size(int iters, size_t bytes, size_t max_bytes_per_batch);

/// Per-iteration times of `repetitions` timed batches, each the max over ranks, seconds.
struct TimedResult {
  std::vector<double> per_iter_s;  // one per batch, in batch order
  Summary summary;                 // of per_iter_s
};

/// Times `op` as nccl-tests does: `warmup` untimed calls, then `repetitions` batches of
/// [barrier; t0; `iters` calls of op; t1], a batch's per-iteration time being
/// (t1 - t0) / iters (steady_clock). The timed loop holds nothing but the op. After all
/// batches one all_reduce(max) over `comm` gives each batch the slowest rank's time
/// (nccl-tests averages over ranks by default; the max is its `-a 3`). Collective over
/// comm: every rank must pass the same warmup, iters and repetitions. Aborts if warmup < 0,
/// iters < 1 or repetitions < 1.
TimedResult time_iterations(Communicator& comm, int warmup, int iters, int repetitions,
                            const std::function<void()>& op);

/// One launch of an operation on device buffers: issues it without waiting and returns its
/// handle (e.g. [&] { return dev.all_reduce_async(...); }).
using AsyncLaunch = std::function<std::unique_ptr<CommHandle>()>;

/// Times a device-buffer operation as nccl-tests' BenchTime does (src/common.cu): `warmup`
/// launches back to back, then their completion; then `repetitions` batches of
/// [device_sync; barrier; t0; `iters` launches back to back; every handle waited, in issue
/// order, only after the last launch; device_sync; t1], a batch's per-iteration time being
/// (t1 - t0) / iters (steady_clock around the whole loop, as nccl-tests' timer around its
/// startColl loop and one completeColl). Nothing between two launches waits on the device
/// (on NCCL the launches queue on the comm stream and the first wait covers them all; on a
/// backend whose async forms complete at wait(), e.g. MPI staged through host buffers, the
/// waits do that work and are timed, as they must be). `device_sync` waits for all work
/// queued on the device (Backend::synchronize); `comm` is the host communicator of the
/// barrier and of the one all_reduce(max) over ranks after all batches (as time_iterations).
/// Handles are destroyed after t1. Collective over comm and over the launched operation's
/// group. Aborts if warmup < 0, iters < 1 or repetitions < 1.
TimedResult time_async_iterations(Communicator& comm, const std::function<void()>& device_sync,
                                  int warmup, int iters, int repetitions,
                                  const AsyncLaunch& launch);

}  // namespace dtb
