// NcclCommunicator: the Communicator over NCCL, on device buffers. Semantics and in-place
// layouts are NCCL's own (communicator.h adopted them), so every collective maps to one
// NCCL call. Source: the NCCL API documentation (ncclCommInitRankConfig, ncclCommSplit,
// ncclCommGetAsyncError, ncclCommFinalize/Destroy/Abort, collectives, ncclSend/ncclRecv,
// group calls) and its user guide on non-blocking communicators (config.blocking = 0,
// ncclInProgress) and in-place operations. Needs NCCL >= 2.18 (ncclCommSplit).
//
// Streams. Each communicator owns a comm stream (cudaStreamNonBlocking) and is given the
// compute stream of its device. Every operation is ordered after the compute stream's work
// so far (an event recorded there, waited on by the comm stream), runs on the comm stream,
// and the compute stream then waits for its completion event, so that compute enqueued
// after the operation sees the result. Blocking forms return once the operation has
// completed on this rank; async forms return a handle (see below).
//
// Timeouts and errors. A communicator is non-blocking (config.blocking = 0): no NCCL call
// blocks the host. Every wait (communicator creation, an NCCL call that returns
// ncclInProgress, the completion of an operation) polls cudaEventQuery and
// ncclCommGetAsyncError, yielding for the first millisecond and then sleeping ~100 us
// between polls, for at most timeout() seconds (default 300 s). On timeout, on an
// asynchronous NCCL error, or when an NCCL or CUDA call fails, the communicator is aborted
// (ncclCommAbort) and the job ends through the error sink (kernels/error.h) with one line
// naming the operation, the group and this rank, e.g.
//   ncclAllReduce of 1048576 f32 on group 'world' (rank 3 of 8): did not complete within
//   300 s (waited 300.0 s): a rank did not arrive or the network hung
// Bad arguments abort the same way (communicator.h lists them): overlapping buffers other
// than in the in-place layouts, a root or peer outside [0, size()).
//
// Not thread-safe. The communicator is bound to the CUDA device that was current when it
// was created (one GPU per process); call it with that device current (CudaDevice does).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"

namespace dtb {

class NcclHandle;

/// A Communicator that owns an initialised, non-blocking ncclComm_t.
///
/// Datatypes: f32 -> ncclFloat32, f64 -> ncclFloat64, i32 -> ncclInt32, bf16 ->
/// ncclBfloat16, f16 -> ncclFloat16; all of them reduce (NCCL reduces half types natively).
/// Ops: sum -> ncclSum, max -> ncclMax, min -> ncclMin. Counts are size_t, as in NCCL.
///
/// In place (native in NCCL): all_reduce when send == recv; all_gather when
/// send == recv + rank*send_count; reduce_scatter when recv == send + rank*recv_count
/// (only block `rank` of the buffer is defined afterwards); broadcast when send == recv.
///
/// Point-to-point (ncclSend/ncclRecv): NCCL has no tags, so `tag` is ignored and messages
/// between two ranks match in issue order; NCCL carries no length, so a recv whose count
/// differs from the matching send is not detected (it may corrupt or hang until the
/// timeout). A send completes only once the peer's matching recv runs (no eager sends, unlike
/// MPI): two ranks that both send() before recv() deadlock until the timeout; use sendrecv.
/// send()/recv() to this rank itself abort (it needs both halves in one group: sendrecv).
class NcclCommunicator final : public Communicator {
 public:
  static constexpr double kDefaultTimeout = 300.0;  // seconds

  /// Takes ownership of `comm`, which must be initialised (its async state no longer
  /// ncclInProgress) and created with config.blocking = 0. `compute_stream` is the stream
  /// the caller's kernels run on (it may be 0, the legacy default stream). `name` names the
  /// group in error messages; `timeout_s` > 0 bounds every wait. Creates the comm stream,
  /// two events and a 4-byte device buffer for barrier(). Aborts on a CUDA failure.
  NcclCommunicator(ncclComm_t comm, std::string name, cudaStream_t compute_stream,
                   double timeout_s = kDefaultTimeout);
  /// Waits (bounded by the timeout) for the comm stream, then ncclCommFinalize (polled
  /// under the timeout) and ncclCommDestroy; if the wait or the finalize fails or times
  /// out, prints a one-line warning and calls ncclCommAbort instead. Then frees the
  /// streams, events and buffers. Never throws and never aborts the job.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  std::string backend() const override { return "nccl"; }

  /// The bound on every wait, in seconds. set_timeout aborts unless seconds > 0.
  double timeout() const { return timeout_s_; }
  void set_timeout(double seconds);
  ncclComm_t comm() const { return comm_; }
  cudaStream_t comm_stream() const { return comm_stream_; }
  cudaStream_t compute_stream() const { return compute_; }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                      ReduceOp op) override;
  /// ncclBroadcast(buf, buf): in place.
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  /// ncclBroadcast(send, recv). send is read on the root only (other ranks pass recv to
  /// NCCL in its place, so their send may be null).
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root) override;
  void send(const void* buf, size_t count, DType dtype, int peer, int tag = 0) override;
  void recv(void* buf, size_t count, DType dtype, int peer, int tag = 0) override;
  /// ncclGroupStart; ncclSend; ncclRecv; ncclGroupEnd (a rank may be its own peer).
  /// In place (send == recv): NCCL's send and recv would race on one buffer, so the data is
  /// first copied (on the comm stream) to a scratch device buffer owned by the communicator,
  /// grown to the largest in-place message seen and freed with it (not accounted by any
  /// Device). Any other overlap of send and recv aborts.
  void sendrecv(const void* send, void* recv, size_t count, DType dtype, int send_peer,
                int recv_peer, int tag = 0) override;
  /// An in-place ncclAllReduce (sum) of one i32 in a device buffer allocated at construction,
  /// waited for on the host.
  void barrier() override;
  /// nccl-tests' alltoall: ncclGroupStart; for each rank j (itself included) ncclSend of
  /// block j and ncclRecv of block j; ncclGroupEnd. Zero-count blocks are skipped. NCCL
  /// carries no length: mismatched counts are not detected (Communicator's contract).
  void all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                   const std::vector<size_t>& send_displs, void* recv,
                   const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                   DType dtype) override;
  /// The same group, issued without waiting (as the async collectives below).
  std::unique_ptr<CommHandle> all_to_allv_async(const void* send, const std::vector<size_t>& send_counts,
                                                const std::vector<size_t>& send_displs, void* recv,
                                                const std::vector<size_t>& recv_counts,
                                                const std::vector<size_t>& recv_displs, DType dtype) override;

  /// Issued as the blocking forms, on the comm stream. The handle's wait() makes the
  /// compute stream wait for the completion event, then polls (bounded, as above) until the
  /// operation is complete. Compute enqueued between the call and wait() may therefore
  /// overlap the collective (it must not touch the buffers). A handle destroyed without
  /// wait() waits in its destructor. A handle must not outlive its communicator.
  std::unique_ptr<CommHandle> all_reduce_async(const void* send, void* recv, size_t count,
                                               DType dtype, ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const void* send, void* recv, size_t send_count,
                                               DType dtype) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const void* send, void* recv,
                                                   size_t recv_count, DType dtype,
                                                   ReduceOp op) override;
  std::unique_ptr<CommHandle> broadcast_async(void* buf, size_t count, DType dtype,
                                              int root) override;
  /// ncclBroadcast(send, recv) and the grouped ncclSend/ncclRecv of sendrecv(), issued as
  /// the async collectives above (in-place sendrecv copies to the scratch buffer on the comm
  /// stream first, as the blocking form does).
  std::unique_ptr<CommHandle> broadcast_out_of_place_async(const void* send, void* recv,
                                                           size_t count, DType dtype,
                                                           int root) override;
  std::unique_ptr<CommHandle> sendrecv_async(const void* send, void* recv, size_t count,
                                             DType dtype, int send_peer, int recv_peer,
                                             int tag = 0) override;
  /// ncclSend / ncclRecv, issued and completed as the async collectives above (a handle
  /// whose wait() or test() completes it). `tag` is ignored: sends and recvs between two
  /// ranks match in issue order, and a send completes only once the peer's recv has run.
  /// Everything issued on this communicator runs in issue order on its one comm stream, so
  /// two ranks that each post send_async before their recv_async (e.g. a ring) deadlock
  /// until the timeout: order the posts (even ranks send first, odd ranks recv first) or use
  /// sendrecv.
  /// To or from this rank itself aborts, as send()/recv(). The handle's test() is one
  /// non-blocking poll: cudaEventQuery of its completion event, then ncclCommGetAsyncError;
  /// an asynchronous error, or more than timeout() seconds since the operation was issued,
  /// aborts as a wait does; once complete, the compute stream waits for the event (as in
  /// wait()).
  std::unique_ptr<CommHandle> send_async(const void* buf, size_t count, DType dtype, int peer,
                                         int tag = 0) override;
  std::unique_ptr<CommHandle> recv_async(void* buf, size_t count, DType dtype, int peer,
                                         int tag = 0) override;

  /// ncclCommSplit with config.blocking = 0, polled under the timeout. `color` must be >= 0
  /// (every rank gets a group; NCCL_SPLIT_NOCOLOR is not offered). The new communicator
  /// shares the compute stream and timeout and has its own comm stream. Collective.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  /// What an operation is, for error messages (text built only on failure).
  struct OpInfo {
    const char* call;  // e.g. "ncclAllReduce"
    size_t count;
    DType dtype;
  };

 private:
  friend class NcclHandle;
  using Clock = std::chrono::steady_clock;

  /// Orders the comm stream after the compute stream's work so far; returns the start time.
  Clock::time_point begin();
  /// Checks an enqueueing NCCL call's result; on ncclInProgress polls until it settles.
  void settle(ncclResult_t rc, const OpInfo& op, Clock::time_point t0);
  /// Records `done` on the comm stream; the compute stream waits for it if `compute_waits`.
  void end(cudaEvent_t done, bool compute_waits);
  /// Polls until `done` has completed: the bounded wait described above.
  void wait_event(cudaEvent_t done, const OpInfo& op, Clock::time_point t0);
  /// settle, then blocking (async false): end(done_, true) + wait_event, returns null;
  /// async: end on a new event, returns the handle owning it.
  std::unique_ptr<CommHandle> finish(ncclResult_t rc, const OpInfo& op, Clock::time_point t0,
                                     bool async);
  /// The collectives behind both forms: argument checks, begin, the NCCL call, finish.
  std::unique_ptr<CommHandle> do_all_reduce(const void* send, void* recv, size_t count,
                                            DType dtype, ReduceOp op, bool async);
  std::unique_ptr<CommHandle> do_all_gather(const void* send, void* recv, size_t send_count,
                                            DType dtype, bool async);
  std::unique_ptr<CommHandle> do_reduce_scatter(const void* send, void* recv, size_t recv_count,
                                                DType dtype, ReduceOp op, bool async);
  std::unique_ptr<CommHandle> do_broadcast(const void* send, void* recv, size_t count,
                                           DType dtype, int root, bool async);
  /// Point-to-point behind send/recv and their async forms (self-peer aborts).
  std::unique_ptr<CommHandle> do_send(const void* buf, size_t count, DType dtype, int peer,
                                      bool async);
  std::unique_ptr<CommHandle> do_recv(void* buf, size_t count, DType dtype, int peer,
                                      bool async);
  /// The grouped send and recv behind sendrecv and sendrecv_async.
  std::unique_ptr<CommHandle> do_sendrecv(const void* send, void* recv, size_t count,
                                          DType dtype, int send_peer, int recv_peer, bool async);
  /// The group behind all_to_allv and its async form.
  std::unique_ptr<CommHandle> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                                             const std::vector<size_t>& send_displs, void* recv,
                                             const std::vector<size_t>& recv_counts,
                                             const std::vector<size_t>& recv_displs, DType dtype, bool async);
  /// Aborts the communicator and ends the job with one line about `op`.
  [[noreturn]] void fail(const OpInfo& op, const std::string& why, int line);
  /// Aborts (as fail) unless 0 <= r < size(); `what` is "root", "peer", ...
  void check_rank(int r, const char* what, const OpInfo& op);
  /// A device buffer of at least `bytes` for in-place sendrecv (on growth, the comm stream
  /// is first drained under the timeout, then the old buffer freed).
  void* scratch(size_t bytes, const OpInfo& op);

  ncclComm_t comm_ = nullptr;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  double timeout_s_ = kDefaultTimeout;
  int rank_ = 0;
  int size_ = 1;
  std::string desc_;  // "group 'name' (rank r of n)" for error messages
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // compute stream -> comm stream
  cudaEvent_t done_ = nullptr;   // completion of the last blocking operation
  void* barrier_buf_ = nullptr;  // one int32
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

/// Two ranks of `bootstrap` whose current GPUs are one GPU (the same UUID), the first such
/// pair in rank order (a < b), or a = b = -1 when every rank has a GPU of its own.
struct SharedGpu {
  int a = -1, b = -1;
  std::string uuid;  // "GPU-xxxxxxxx-..." as nvidia-smi -L prints it
};
/// Every rank's GPU UUID (cudaGetDeviceProperties of the current device), all-gathered over
/// `bootstrap` (host buffers) and compared. Collective over bootstrap.
SharedGpu first_shared_gpu(Communicator& bootstrap);

/// The NCCL world over every rank of `bootstrap` (a host-buffer communicator, normally
/// make_mpi_world()), named "world", with rank and size those of bootstrap. Collective over
/// bootstrap. The caller has made this rank's GPU current (a CudaDevice) and passes its
/// compute stream; timeout_s (> 0) bounds creation and every later wait.
///
/// Steps: every rank reads its GPU's UUID (cudaGetDeviceProperties) and the UUIDs are
/// all-gathered over bootstrap; if two ranks share a GPU the job aborts with one line naming
/// them (NCCL cannot put two ranks of one communicator on one GPU: it fails or hangs), e.g.
/// when more ranks than GPUs are started on a node. Then rank 0 calls ncclGetUniqueId and
/// broadcasts the 128-byte id as 32 i32 words over bootstrap, and every rank calls
/// ncclCommInitRankConfig (config.blocking = 0) and polls ncclCommGetAsyncError until the
/// communicator is ready, aborting on error or after timeout_s.
std::unique_ptr<Communicator> make_nccl_world(Communicator& bootstrap, cudaStream_t compute_stream,
                                              double timeout_s = NcclCommunicator::kDefaultTimeout);

}  // namespace dtb
