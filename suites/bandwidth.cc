// nccl-tests' bandwidth definitions (doc/PERFORMANCE.md) and the timing engine; see
// bandwidth.h. The derivation, for n ranks on links of bandwidth B: an all-reduce moves
// 2(n-1)/n of the buffer over each rank's link (reduce-scatter then all-gather), so
// t = (S/B) * 2(n-1)/n and busbw = S/t * 2(n-1)/n estimates B whatever n is.
#include "suites/bandwidth.h"

#include <algorithm>

#include "kernels/comm/ring.h"
#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {

const std::vector<CollectiveOp>& all_collective_ops() {
  static const std::vector<CollectiveOp> ops = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                                                CollectiveOp::reduce_scatter,
                                                CollectiveOp::broadcast, CollectiveOp::sendrecv,
                                                CollectiveOp::all_to_all, CollectiveOp::all_to_allv};
  return ops;
}

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::sendrecv: return "sendrecv";
    case CollectiveOp::all_to_all: return "all_to_all";
    case CollectiveOp::all_to_allv: return "all_to_allv";
  }
  return "?";
}

CollectiveOp parse_collective_op(std::string_view name) {
  std::string valid;
  for (CollectiveOp op : all_collective_ops()) {
    if (to_string(op) == name) return op;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(op));
  }
  throw InputError("unknown collective '" + std::string(name) + "' (valid: " + valid + ")");
}

double bus_factor(CollectiveOp op, int n) {
  DTB_CHECK(n >= 1, "bus_factor: world size " + std::to_string(n) + " < 1");
  if (n == 1) return 0.0;
  switch (op) {
    case CollectiveOp::all_reduce: return ring_all_reduce_factor(n);
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all: return ring_gather_factor(n);
    case CollectiveOp::all_to_allv: {
      size_t off = 0, all = 0;
      for (int r = 0; r < n; ++r)
        for (int j = 0; j < n; ++j) (r == j ? all : off) += alltoallv_weight(r, j, n);
      return double(off) / double(off + all);
    }
    case CollectiveOp::broadcast:
    case CollectiveOp::sendrecv: return 1.0;
  }
  return 0.0;
}

double algbw_GBps(size_t bytes, double seconds) {
  DTB_CHECK(seconds > 0, "algbw_GBps: non-positive time " + std::to_string(seconds));
  return double(bytes) / seconds / 1e9;
}

double busbw_GBps(CollectiveOp op, size_t bytes, double seconds, int n) {
  return algbw_GBps(bytes, seconds) * bus_factor(op, n);
}

size_t bandwidth_bytes(CollectiveOp op, size_t per_rank_count, size_t type_size, int n) {
  DTB_CHECK(n >= 1, "bandwidth_bytes: world size " + std::to_string(n) + " < 1");
  switch (op) {
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all: return per_rank_count * type_size * size_t(n);
    case CollectiveOp::all_to_allv: return per_rank_count * type_size * alltoallv_row_sum(n);
    case CollectiveOp::all_reduce:
    case CollectiveOp::broadcast:
    case CollectiveOp::sendrecv: return per_rank_count * type_size;
  }
  return 0;
}

std::string_view size_definition(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "S = buffer (count * type size, send = recv size)";
    case CollectiveOp::all_gather: return "S = full gathered buffer (recv: count * type size * n)";
    case CollectiveOp::reduce_scatter:
      return "S = full input buffer (send: recv count * type size * n)";
    case CollectiveOp::broadcast: return "S = buffer (count * type size)";
    case CollectiveOp::sendrecv: return "S = buffer sent by each rank (count * type size)";
    case CollectiveOp::all_to_all: return "S = send buffer of each rank (block count * type size * n)";
    case CollectiveOp::all_to_allv:
      return "S = bytes each rank sends (count * type size * n(n-1)/2, to peer j count * ((r + j) mod n))";
  }
  return "?";
}

size_t alltoallv_weight(int r, int j, int n) {
  DTB_CHECK(n >= 1 && r >= 0 && r < n && j >= 0 && j < n,
            "alltoallv_weight: rank " + std::to_string(r) + " or peer " + std::to_string(j) + " outside a world of " +
                std::to_string(n));
  return n == 1 ? 1 : size_t((r + j) % n);
}

size_t alltoallv_row_sum(int n) {
  DTB_CHECK(n >= 1, "alltoallv_row_sum: world size " + std::to_string(n) + " < 1");
  return n == 1 ? 1 : size_t(n) * size_t(n - 1) / 2;
}

AlltoallvSplit alltoallv_split(int n, int rank, size_t unit) {
  AlltoallvSplit s;
  for (int j = 0; j < n; ++j) {
    s.send_counts.push_back(unit * alltoallv_weight(rank, j, n));
    s.recv_counts.push_back(unit * alltoallv_weight(j, rank, n));
  }
  s.send_displs = exclusive_prefix_sum(s.send_counts);
  s.recv_displs = exclusive_prefix_sum(s.recv_counts);
  return s;
}

int iterations_for_size(int iters, size_t bytes, size_t max_bytes_per_batch) {
  DTB_CHECK(iters >= 1, "iterations_for_size: iters < 1");
  if (bytes == 0) return iters;
  const size_t fit = max_bytes_per_batch / bytes;
  return int(std::max<size_t>(1, std::min<size_t>(size_t(iters), fit)));
}

TimedResult time_iterations(Communicator& comm, int warmup, int iters, int repetitions,
                            const std::function<void()>& op) {
  DTB_CHECK(warmup >= 0 && iters >= 1 && repetitions >= 1,
            "time_iterations: need warmup >= 0, iters >= 1, repetitions >= 1 (got " +
                std::to_string(warmup) + ", " + std::to_string(iters) + ", " +
                std::to_string(repetitions) + ")");
  for (int i = 0; i < warmup; ++i) op();
  TimedResult r;
  r.per_iter_s.assign(repetitions, 0.0);
  for (int rep = 0; rep < repetitions; ++rep) {
    comm.barrier();
    const double t0 = now_seconds();
    for (int i = 0; i < iters; ++i) op();
    const double t1 = now_seconds();
    r.per_iter_s[rep] = (t1 - t0) / iters;
  }
  // The slowest rank defines each batch's time; reduced once, outside the timed batches.
  comm.all_reduce(r.per_iter_s.data(), r.per_iter_s.data(), r.per_iter_s.size(), DType::f64,
                  ReduceOp::max);
  r.summary = summarize(r.per_iter_s);
  return r;
}

TimedResult time_async_iterations(Communicator& comm, const std::function<void()>& device_sync,
                                  int warmup, int iters, int repetitions,
                                  const AsyncLaunch& launch) {
  DTB_CHECK(warmup >= 0 && iters >= 1 && repetitions >= 1,
            "time_async_iterations: need warmup >= 0, iters >= 1, repetitions >= 1 (got " +
                std::to_string(warmup) + ", " + std::to_string(iters) + ", " +
                std::to_string(repetitions) + ")");
  std::vector<std::unique_ptr<CommHandle>> handles;
  handles.reserve(size_t(std::max(warmup, iters)));
  // Launches `k` operations back to back, then completes them all.
  auto batch = [&](int k) {
    for (int i = 0; i < k; ++i) handles.push_back(launch());
    for (auto& h : handles) h->wait();
    device_sync();
  };
  if (warmup > 0) batch(warmup);
  handles.clear();
  TimedResult r;
  r.per_iter_s.assign(repetitions, 0.0);
  for (int rep = 0; rep < repetitions; ++rep) {
    device_sync();
    comm.barrier();
    const double t0 = now_seconds();
    batch(iters);
    const double t1 = now_seconds();
    handles.clear();  // events freed outside the timed region
    r.per_iter_s[rep] = (t1 - t0) / iters;
  }
  comm.all_reduce(r.per_iter_s.data(), r.per_iter_s.data(), r.per_iter_s.size(), DType::f64,
                  ReduceOp::max);
  r.summary = summarize(r.per_iter_s);
  return r;
}

}  // namespace dtb
