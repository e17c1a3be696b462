// Creating NCCL communicators (see nccl_communicator.h): make_nccl_world (the unique id over
// the bootstrap communicator, one GPU per rank checked, ncclCommInitRankConfig) and
// NcclCommunicator::split (ncclCommSplit), both non-blocking and polled under the timeout;
// a failure or a timeout aborts the communicator and ends the job with one line.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/comm/nccl_communicator.h"
#include "kernels/comm/nccl_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/error.h"

namespace dtb {

using namespace nccl_util;

namespace {

/// Polls a communicator being created (init or split) until it is ready. On an error or
/// after timeout_s, aborts it and ends the job: "<what>: failed ..." / "did not complete".
void wait_ready(ncclComm_t comm, const std::string& what, Clock::time_point t0,
                double timeout_s) {
  for (;;) {
    const ncclResult_t state = async_state(comm);
    if (state == ncclSuccess) return;
    const double waited = seconds_since(t0);
    if (state != ncclInProgress) {
      const std::string err = nccl_error(state, comm);
      (void)ncclCommAbort(comm);
      fatal(__FILE__, __LINE__, what + ": failed after " + fmt("%.1f", waited) + " s: " + err);
    }
    if (waited > timeout_s) {
      (void)ncclCommAbort(comm);
      fatal(__FILE__, __LINE__, what + ": " + timeout_text(timeout_s, waited));
    }
    pause(t0);
  }
}

std::string uuid_text(const int32_t* words) {
  unsigned char b[16];
  std::memcpy(b, words, sizeof b);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

}  // namespace

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  const std::string what = "ncclCommSplit of " + desc_ + " into '" + name + "' (color " +
                           std::to_string(color) + ", key " + std::to_string(key) + ")";
  DTB_CHECK(color >= 0, what + ": color < 0");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // NCCL writes the child from its own thread when the split completes (some versions at
  // once), so it is read atomically while polling.
  alignas(std::atomic_ref<ncclComm_t>::required_alignment) ncclComm_t child = nullptr;
  const auto t0 = Clock::now();
  const ncclResult_t rc = ncclCommSplit(comm_, color, key, &child, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    const std::string err = nccl_error(rc, comm_);
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    fatal(__FILE__, __LINE__, what + ": failed: " + err);
  }
  // The split runs as an async job of the parent: its state is ncclInProgress until done.
  for (;;) {
    const ncclResult_t state = async_state(comm_);
    const double waited = seconds_since(t0);
    if (state != ncclSuccess && state != ncclInProgress) {
      const std::string err = nccl_error(state, comm_);
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      fatal(__FILE__, __LINE__, what + ": failed after " + fmt("%.1f", waited) + " s: " + err);
    }
    if (state == ncclSuccess &&
        std::atomic_ref<ncclComm_t>(child).load(std::memory_order_acquire) != nullptr) {
      break;
    }
    if (waited > timeout_s_) {
      (void)ncclCommAbort(comm_);  // also stops the child's initialisation
      comm_ = nullptr;
      fatal(__FILE__, __LINE__, what + ": " + timeout_text(timeout_s_, waited));
    }
    pause(t0);
  }
  const ncclComm_t ready = std::atomic_ref<ncclComm_t>(child).load(std::memory_order_acquire);
  wait_ready(ready, what, t0, timeout_s_);
  return std::make_unique<NcclCommunicator>(ready, name, compute_, timeout_s_);
}

SharedGpu first_shared_gpu(Communicator& bootstrap) {
  int device = -1;
  DTB_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  DTB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  static_assert(sizeof(prop.uuid.bytes) == 4 * sizeof(int32_t), "a CUDA UUID is 16 bytes");
  int32_t mine[4];
  std::memcpy(mine, prop.uuid.bytes, sizeof mine);
  const int size = bootstrap.size();
  std::vector<int32_t> uuids(4 * size_t(size));
  bootstrap.all_gather(mine, uuids.data(), 4, DType::i32);
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      if (std::memcmp(&uuids[4 * size_t(a)], &uuids[4 * size_t(b)], 16) == 0)
        return {a, b, uuid_text(&uuids[4 * size_t(a)])};
  return {};
}

std::unique_ptr<Communicator> make_nccl_world(Communicator& bootstrap, cudaStream_t compute_stream,
                                              double timeout_s) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  const std::string group = describe("world", rank, size);
  DTB_CHECK(timeout_s > 0 && std::isfinite(timeout_s),
            "make_nccl_world on " + group + ": timeout " + fmt("%g", timeout_s) + " s is not > 0");

  // One GPU per rank: NCCL cannot place two ranks of a communicator on one GPU.
  const SharedGpu shared = first_shared_gpu(bootstrap);
  if (shared.a >= 0)
    fatal(__FILE__, __LINE__,
          "make_nccl_world on " + group + ": ranks " + std::to_string(shared.a) + " and " + std::to_string(shared.b) +
              " share one GPU (" + shared.uuid + "), which NCCL does not support: start at most one rank per GPU on "
              "each node and make each rank's own GPU current (e.g. device = node-local rank)");

  // Rank 0's unique id, as 32 i32 words over the bootstrap communicator.
  static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES && NCCL_UNIQUE_ID_BYTES % 4 == 0,
                "ncclUniqueId travels as i32 words");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  int32_t words[NCCL_UNIQUE_ID_BYTES / 4] = {};
  if (rank == 0) {
    DTB_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(words, &id, sizeof id);
  }
  bootstrap.broadcast(words, NCCL_UNIQUE_ID_BYTES / 4, DType::i32, 0);
  std::memcpy(&id, words, sizeof id);

  // Non-blocking initialisation, polled under the timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const std::string what = "ncclCommInitRankConfig on " + group;
  const auto t0 = Clock::now();
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    const std::string err = nccl_error(rc, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    fatal(__FILE__, __LINE__, what + ": failed: " + err);
  }
  DTB_CHECK(comm != nullptr, what + ": returned no communicator");
  wait_ready(comm, what, t0, timeout_s);
  return std::make_unique<NcclCommunicator>(comm, "world", compute_stream, timeout_s);
}

}  // namespace dtb
