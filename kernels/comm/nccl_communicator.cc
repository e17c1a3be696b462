// NcclCommunicator: Communicator over NCCL on device buffers (see nccl_communicator.h for
// streams, timeouts, datatypes and in-place conventions). Every NCCL and CUDA return code is
// checked; every wait is bounded by the communicator's timeout.
// Creating communicators (make_nccl_world, split) is in nccl_communicator_init.cc.
#include "kernels/comm/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/comm/nccl_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/error.h"

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0),
              "NcclCommunicator needs NCCL >= 2.18 (non-blocking communicators, ncclCommSplit)");

namespace dtb {

using namespace nccl_util;

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
  }
  DTB_CHECK(false, "unknown DType");
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  DTB_CHECK(false, "unknown ReduceOp");
  return ncclSum;
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

const void* offset(const void* base, size_t bytes) {
  return static_cast<const char*>(base) + bytes;
}

constexpr const char* kOverlap = "send and recv overlap but are not in the in-place layout";

}  // namespace

/// An operation in flight on the comm stream, completed by its own event.
class NcclHandle final : public CommHandle {
 public:
  NcclHandle(NcclCommunicator* owner, NcclCommunicator::OpInfo op, cudaEvent_t done)
      : owner_(owner), op_(op), done_(done), issued_(NcclCommunicator::Clock::now()) {}
  ~NcclHandle() override {
    if (!waited_) wait();
    (void)cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    DTB_CUDA_CHECK(cudaStreamWaitEvent(owner_->compute_, done_, 0));
    owner_->wait_event(done_, op_, NcclCommunicator::Clock::now());
    waited_ = true;
  }
  /// One poll of wait_event's loop: cudaEventQuery of the completion event, then (while it
  /// is not ready) ncclCommGetAsyncError; an error, or more than timeout() seconds since the
  /// operation was issued, aborts as in wait(). On completion the compute stream waits for
  /// the event, as in wait().
  bool test() override {
    if (waited_) return true;
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) {
      clear_not_ready();
      const ncclResult_t state = async_state(owner_->comm_);
      const double waited = seconds_since(issued_);
      if (state != ncclSuccess && state != ncclInProgress) {
        owner_->fail(op_,
                     "failed after " + fmt("%.1f", waited) + " s: " +
                         nccl_error(state, owner_->comm_),
                     __LINE__);
      }
      if (waited > owner_->timeout_s_) {
        owner_->fail(op_, timeout_text(owner_->timeout_s_, waited), __LINE__);
      }
      return false;
    }
    if (e != cudaSuccess) {
      owner_->fail(op_, std::string("failed: cudaEventQuery: ") + cudaGetErrorName(e) + ": " +
                            cudaGetErrorString(e),
                   __LINE__);
    }
    DTB_CUDA_CHECK(cudaStreamWaitEvent(owner_->compute_, done_, 0));
    waited_ = true;
    return true;
  }

 private:
  NcclCommunicator* owner_;
  NcclCommunicator::OpInfo op_;
  cudaEvent_t done_;
  NcclCommunicator::Clock::time_point issued_;
  bool waited_ = false;
};

NcclCommunicator::NcclCommunicator(ncclComm_t comm, std::string name, cudaStream_t compute_stream,
                                   double timeout_s)
    : comm_(comm), name_(std::move(name)), compute_(compute_stream) {
  DTB_CHECK(comm_ != nullptr, "NcclCommunicator '" + name_ + "': null ncclComm_t");
  set_timeout(timeout_s);
  DTB_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  DTB_NCCL_CHECK(ncclCommCount(comm_, &size_));
  desc_ = describe(name_, rank_, size_);
  DTB_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  DTB_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  DTB_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  DTB_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(int32_t)));
  DTB_CUDA_CHECK(cudaMemsetAsync(barrier_buf_, 0, sizeof(int32_t), comm_stream_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    const auto t0 = Clock::now();
    const char* stage = "draining the comm stream";
    // Every operation issued so far completes first (bounded, no abort of the job here).
    bool ok = cudaEventRecord(done_, comm_stream_) == cudaSuccess;
    while (ok) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      const ncclResult_t state = async_state(comm_);
      ok = e == cudaErrorNotReady && (state == ncclSuccess || state == ncclInProgress) &&
           seconds_since(t0) <= timeout_s_;
      if (ok) pause(t0);
    }
    clear_not_ready();
    if (ok) {  // ncclCommFinalize is asynchronous on a non-blocking communicator: poll it
      stage = "ncclCommFinalize";
      const ncclResult_t rc = ncclCommFinalize(comm_);
      ok = rc == ncclSuccess || rc == ncclInProgress;
      while (ok) {
        const ncclResult_t state = async_state(comm_);
        if (state == ncclSuccess) break;
        ok = state == ncclInProgress && seconds_since(t0) <= timeout_s_;
        if (ok) pause(t0);
      }
    }
    if (ok) {
      (void)ncclCommDestroy(comm_);  // after a successful finalize, frees local resources only
    } else {
      std::fprintf(stderr,
                   "dtbench: warning: NCCL communicator of %s: %s failed or did not complete "
                   "within %g s; aborting it\n",
                   desc_.c_str(), stage, timeout_s_);
      (void)ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (scratch_ != nullptr) (void)cudaFree(scratch_);
  if (barrier_buf_ != nullptr) (void)cudaFree(barrier_buf_);
  if (ready_ != nullptr) (void)cudaEventDestroy(ready_);
  if (done_ != nullptr) (void)cudaEventDestroy(done_);
  if (comm_stream_ != nullptr) (void)cudaStreamDestroy(comm_stream_);
}

void NcclCommunicator::set_timeout(double seconds) {
  DTB_CHECK(seconds > 0 && std::isfinite(seconds),
            "NcclCommunicator '" + name_ + "': timeout " + fmt("%g", seconds) + " s is not > 0");
  timeout_s_ = seconds;
}

NcclCommunicator::Clock::time_point NcclCommunicator::begin() {
  DTB_CUDA_CHECK(cudaEventRecord(ready_, compute_));
  DTB_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
  return Clock::now();
}

void NcclCommunicator::settle(ncclResult_t rc, const OpInfo& op, Clock::time_point t0) {
  if (rc == ncclSuccess) return;
  if (rc != ncclInProgress) fail(op, "failed: " + nccl_error(rc, comm_), __LINE__);
  // Non-blocking communicator: the operation may not be enqueued yet (e.g. NCCL is still
  // connecting to its peers); no other NCCL call on comm_ is allowed until it settles.
  for (;;) {
    const ncclResult_t state = async_state(comm_);
    if (state == ncclSuccess) return;
    const double waited = seconds_since(t0);
    if (state != ncclInProgress) {
      fail(op, "failed after " + fmt("%.1f", waited) + " s: " + nccl_error(state, comm_),
           __LINE__);
    }
    if (waited > timeout_s_) fail(op, timeout_text(timeout_s_, waited), __LINE__);
    pause(t0);
  }
}

void NcclCommunicator::end(cudaEvent_t done, bool compute_waits) {
  DTB_CUDA_CHECK(cudaEventRecord(done, comm_stream_));
  if (compute_waits) DTB_CUDA_CHECK(cudaStreamWaitEvent(compute_, done, 0));
}

void NcclCommunicator::wait_event(cudaEvent_t done, const OpInfo& op, Clock::time_point t0) {
  for (;;) {
    const cudaError_t e = cudaEventQuery(done);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      fail(op, std::string("failed: cudaEventQuery: ") + cudaGetErrorName(e) + ": " +
                   cudaGetErrorString(e),
           __LINE__);
    }
    const ncclResult_t state = async_state(comm_);
    const double waited = seconds_since(t0);
    if (state != ncclSuccess && state != ncclInProgress) {
      fail(op, "failed after " + fmt("%.1f", waited) + " s: " + nccl_error(state, comm_),
           __LINE__);
    }
    if (waited > timeout_s_) fail(op, timeout_text(timeout_s_, waited), __LINE__);
    pause(t0);
  }
  clear_not_ready();
}

std::unique_ptr<CommHandle> NcclCommunicator::finish(ncclResult_t rc, const OpInfo& op,
                                                     Clock::time_point t0, bool async) {
  settle(rc, op, t0);
  if (!async) {
    end(done_, true);
    wait_event(done_, op, t0);
    return nullptr;
  }
  cudaEvent_t done = nullptr;
  DTB_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  end(done, false);  // the compute stream waits on it in wait()
  return std::make_unique<NcclHandle>(this, op, done);
}

void NcclCommunicator::fail(const OpInfo& op, const std::string& why, int line) {
  std::string msg = std::string(op.call) + " of " + std::to_string(op.count) + " " +
                    std::string(to_string(op.dtype)) + " on " + desc_ + ": " + why;
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    msg += " (NCCL communicator aborted)";
  }
  fatal(__FILE__, line, msg);
}

void NcclCommunicator::check_rank(int r, const char* what, const OpInfo& op) {
  if (r < 0 || r >= size_) {
    fail(op, std::string(what) + " " + std::to_string(r) + " out of range", __LINE__);
  }
}

void* NcclCommunicator::scratch(size_t bytes, const OpInfo& op) {
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_ != nullptr) {
    // Nothing issued earlier may still read the old buffer (bounded wait, unlike cudaFree's
    // implicit device synchronisation).
    end(done_, false);
    wait_event(done_, op, Clock::now());
    DTB_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
  }
  DTB_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
  scratch_bytes_ = bytes;
  return scratch_;
}

void NcclCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op) {
  do_all_reduce(send, recv, count, dtype, op, false);
}
void NcclCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  do_all_gather(send, recv, send_count, dtype, false);
}
void NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                      DType dtype, ReduceOp op) {
  do_reduce_scatter(send, recv, recv_count, dtype, op, false);
}
void NcclCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  do_broadcast(buf, buf, count, dtype, root, false);
}
void NcclCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype,
                                 int root) {
  do_broadcast(send, recv, count, dtype, root, false);
}
std::unique_ptr<CommHandle> NcclCommunicator::all_reduce_async(const void* send, void* recv,
                                                               size_t count, DType dtype,
                                                               ReduceOp op) {
  return do_all_reduce(send, recv, count, dtype, op, true);
}
std::unique_ptr<CommHandle> NcclCommunicator::all_gather_async(const void* send, void* recv,
                                                               size_t send_count, DType dtype) {
  return do_all_gather(send, recv, send_count, dtype, true);
}
std::unique_ptr<CommHandle> NcclCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                                   size_t recv_count,
                                                                   DType dtype, ReduceOp op) {
  return do_reduce_scatter(send, recv, recv_count, dtype, op, true);
}
std::unique_ptr<CommHandle> NcclCommunicator::broadcast_async(void* buf, size_t count,
                                                              DType dtype, int root) {
  return do_broadcast(buf, buf, count, dtype, root, true);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_all_reduce(const void* send, void* recv,
                                                            size_t count, DType dtype,
                                                            ReduceOp op, bool async) {
  const OpInfo info{"ncclAllReduce", count, dtype};
  const size_t bytes = count * dtype_size(dtype);
  if (send != recv && overlap(send, bytes, recv, bytes)) fail(info, kOverlap, __LINE__);
  const auto t0 = begin();
  return finish(
      ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, comm_stream_), info,
      t0, async);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_all_gather(const void* send, void* recv,
                                                            size_t send_count, DType dtype,
                                                            bool async) {
  const OpInfo info{"ncclAllGather", send_count, dtype};
  const size_t block = send_count * dtype_size(dtype);
  const bool in_place = send == offset(recv, size_t(rank_) * block);
  const bool bad = !in_place && overlap(send, block, recv, size_t(size_) * block);
  if (bad) fail(info, kOverlap, __LINE__);
  const auto t0 = begin();
  return finish(ncclAllGather(send, recv, send_count, nccl_type(dtype), comm_, comm_stream_),
                info, t0, async);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_reduce_scatter(const void* send, void* recv,
                                                                size_t recv_count, DType dtype,
                                                                ReduceOp op, bool async) {
  const OpInfo info{"ncclReduceScatter", recv_count, dtype};
  const size_t block = recv_count * dtype_size(dtype);
  const bool in_place = recv == offset(send, size_t(rank_) * block);
  const bool bad = !in_place && overlap(send, size_t(size_) * block, recv, block);
  if (bad) fail(info, kOverlap, __LINE__);
  const auto t0 = begin();
  return finish(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op), comm_,
                                  comm_stream_),
                info, t0, async);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_broadcast(const void* send, void* recv,
                                                           size_t count, DType dtype, int root,
                                                           bool async) {
  const OpInfo info{"ncclBroadcast", count, dtype};
  check_rank(root, "root", info);
  const size_t bytes = count * dtype_size(dtype);
  const bool bad = rank_ == root && send != recv && overlap(send, bytes, recv, bytes);
  if (bad) fail(info, kOverlap, __LINE__);
  const void* src = rank_ == root ? send : recv;  // NCCL reads sendbuff on the root only
  const auto t0 = begin();
  return finish(ncclBroadcast(src, recv, count, nccl_type(dtype), root, comm_, comm_stream_), info,
                t0, async);
}

void NcclCommunicator::send(const void* buf, size_t count, DType dtype, int peer, int tag) {
  do_send(buf, count, dtype, peer, false);
}

void NcclCommunicator::recv(void* buf, size_t count, DType dtype, int peer, int tag) {
  do_recv(buf, count, dtype, peer, false);
}

std::unique_ptr<CommHandle> NcclCommunicator::send_async(const void* buf, size_t count,
                                                         DType dtype, int peer, int tag) {
  return do_send(buf, count, dtype, peer, true);
}

std::unique_ptr<CommHandle> NcclCommunicator::recv_async(void* buf, size_t count, DType dtype,
                                                         int peer, int tag) {
  return do_recv(buf, count, dtype, peer, true);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_send(const void* buf, size_t count, DType dtype,
                                                      int peer, bool async) {
  const OpInfo info{"ncclSend", count, dtype};
  check_rank(peer, "peer", info);
  if (peer == rank_) {
    fail(info, "a send to this rank itself needs its recv in the same group: use sendrecv",
         __LINE__);
  }
  const auto t0 = begin();
  return finish(ncclSend(buf, count, nccl_type(dtype), peer, comm_, comm_stream_), info, t0,
                async);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_recv(void* buf, size_t count, DType dtype,
                                                      int peer, bool async) {
  const OpInfo info{"ncclRecv", count, dtype};
  check_rank(peer, "peer", info);
  if (peer == rank_) {
    fail(info, "a recv from this rank itself needs its send in the same group: use sendrecv",
         __LINE__);
  }
  const auto t0 = begin();
  return finish(ncclRecv(buf, count, nccl_type(dtype), peer, comm_, comm_stream_), info, t0,
                async);
}

void NcclCommunicator::sendrecv(const void* send, void* recv, size_t count, DType dtype,
                                int send_peer, int recv_peer, int tag) {
  do_sendrecv(send, recv, count, dtype, send_peer, recv_peer, false);
}

std::unique_ptr<CommHandle> NcclCommunicator::sendrecv_async(const void* send, void* recv,
                                                             size_t count, DType dtype,
                                                             int send_peer, int recv_peer, int tag) {
  return do_sendrecv(send, recv, count, dtype, send_peer, recv_peer, true);
}

std::unique_ptr<CommHandle> NcclCommunicator::broadcast_out_of_place_async(const void* send,
                                                                           void* recv, size_t count,
                                                                           DType dtype, int root) {
  return do_broadcast(send, recv, count, dtype, root, true);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_sendrecv(const void* send, void* recv,
                                                          size_t count, DType dtype, int send_peer,
                                                          int recv_peer, bool async) {
  const OpInfo info{"ncclSend/ncclRecv", count, dtype};
  check_rank(send_peer, "send peer", info);
  check_rank(recv_peer, "recv peer", info);
  const size_t bytes = count * dtype_size(dtype);
  const bool in_place = send == recv && bytes > 0;
  if (!in_place && overlap(send, bytes, recv, bytes)) fail(info, kOverlap, __LINE__);
  void* copy = in_place ? scratch(bytes, info) : nullptr;
  const auto t0 = begin();
  const void* src = send;
  if (in_place) {  // on the comm stream, after the compute stream's work, before the send
    DTB_CUDA_CHECK(cudaMemcpyAsync(copy, send, bytes, cudaMemcpyDeviceToDevice, comm_stream_));
    src = copy;
  }
  const ncclDataType_t type = nccl_type(dtype);
  ncclResult_t rc = ncclGroupStart();
  if (rc == ncclSuccess) {
    rc = ncclSend(src, count, type, send_peer, comm_, comm_stream_);
    if (rc == ncclSuccess) rc = ncclRecv(recv, count, type, recv_peer, comm_, comm_stream_);
    const ncclResult_t end_rc = ncclGroupEnd();  // always closes the group
    if (rc == ncclSuccess) rc = end_rc;
  }
  return finish(rc, info, t0, async);
}

void NcclCommunicator::all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                                   const std::vector<size_t>& send_displs, void* recv,
                                   const std::vector<size_t>& recv_counts,
                                   const std::vector<size_t>& recv_displs, DType dtype) {
  do_all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype, false);
}

std::unique_ptr<CommHandle> NcclCommunicator::all_to_allv_async(
    const void* send, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_displs, void* recv,
    const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs, DType dtype) {
  return do_all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype, true);
}

std::unique_ptr<CommHandle> NcclCommunicator::do_all_to_allv(
    const void* send, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_displs, void* recv,
    const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs, DType dtype, bool async) {
  const size_t n = size_t(size_), ts = dtype_size(dtype);
  size_t total = 0, send_end = 0, recv_end = 0;
  for (size_t j = 0; j < send_counts.size(); ++j) total += send_counts[j];
  const OpInfo info{"ncclSend/ncclRecv (all_to_allv)", total, dtype};
  if (send_counts.size() != n || send_displs.size() != n || recv_counts.size() != n || recv_displs.size() != n)
    fail(info, "counts and displacements need " + std::to_string(n) + " entries each", __LINE__);
  for (size_t j = 0; j < n; ++j) {
    if (send_counts[j]) send_end = std::max(send_end, send_displs[j] + send_counts[j]);
    if (recv_counts[j]) recv_end = std::max(recv_end, recv_displs[j] + recv_counts[j]);
  }
  if (overlap(send, send_end * ts, recv, recv_end * ts)) fail(info, kOverlap, __LINE__);
  const auto t0 = begin();
  const ncclDataType_t type = nccl_type(dtype);
  ncclResult_t rc = ncclGroupStart();
  if (rc == ncclSuccess) {
    for (size_t j = 0; j < n && rc == ncclSuccess; ++j) {
      if (send_counts[j])
        rc = ncclSend(static_cast<const char*>(send) + send_displs[j] * ts, send_counts[j], type, int(j), comm_,
                      comm_stream_);
      if (rc == ncclSuccess && recv_counts[j])
        rc = ncclRecv(static_cast<char*>(recv) + recv_displs[j] * ts, recv_counts[j], type, int(j), comm_,
                      comm_stream_);
    }
    const ncclResult_t end_rc = ncclGroupEnd();  // always closes the group
    if (rc == ncclSuccess) rc = end_rc;
  }
  return finish(rc, info, t0, async);
}

void NcclCommunicator::barrier() {
  const OpInfo info{"ncclAllReduce (barrier)", 1, DType::i32};
  const auto t0 = begin();
  finish(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, comm_stream_),
         info, t0, false);
}

}  // namespace dtb
