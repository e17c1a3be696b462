// What the tests of MpiCommunicator (mpi_communicator_test.cc for float, double and int32;
// mpi_communicator_half_test.cc for bf16 and fp16) share: the world's count of wrong
// elements, the integer inputs and their reductions, the counts, and running an op blocking
// or through its handle. Test code only.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include "kernels/comm/mpi_communicator.h"

namespace dtb::mpi_test {

/// Sum over the world's ranks of `local` (MPI_COMM_WORLD, independent of the code tested).
inline long world_sum(long local) {
  long total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

/// Rank r's input element i: a small positive integer, so sums over ranks are exact.
template <typename T> T input(int r, size_t i) { return T((i * 7 + size_t(r) * 13) % 17 + 1); }

template <typename T> T reduced(ReduceOp op, int n, size_t i) {
  T acc = input<T>(0, i);
  for (int r = 1; r < n; ++r) {
    const T x = input<T>(r, i);
    acc = op == ReduceOp::sum ? acc + x : op == ReduceOp::max ? std::max(acc, x) : std::min(acc, x);
  }
  return acc;
}

inline constexpr size_t kCounts[] = {1, 1003, 65541};  // one element, odd, past MPI's eager size
inline constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};
inline constexpr float kSentinel = -1;  // never an input or a result

/// Runs op blocking (async = false) or through its handle.
template <typename Blocking, typename Async>
void run(bool async, Blocking&& blocking, Async&& start) {
  if (async) {
    std::unique_ptr<CommHandle> h = start();
    h->wait();
    h->wait();  // a second wait is a no-op
  } else {
    blocking();
  }
}

}  // namespace dtb::mpi_test
