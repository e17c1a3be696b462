// MpiCommunicator: the Communicator over an MPI communicator, on host buffers. Blocking
// collectives map to MPI_Allreduce & co., async ones to MPI_I* with MPI_Wait in the handle.
// In-place conventions are NCCL's (see communicator.h); every MPI call is checked and a
// failure aborts the job naming the operation and the group. Every call is published on the
// communication watchdog's board (watchdog.h), which ends a call that outlives the timeout.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "kernels/comm/communicator.h"

namespace dtb {

/// A Communicator that owns an MPI_Comm. The communicator's error handler is set to
/// MPI_ERRORS_RETURN so that every failure comes back to DTB_CHECK, which aborts the job
/// with `MPI_<Call> on group '<name>' (rank r of n): <MPI error string>`.
///
/// Datatypes: f32 -> MPI_FLOAT, f64 -> MPI_DOUBLE, i32 -> MPI_INT32_T, reduced with MPI_SUM,
/// MPI_MAX, MPI_MIN. bf16 and f16 travel as MPI_UINT16_T (bit patterns unchanged by
/// all_gather, broadcast, send/recv, sendrecv) and reduce (all_reduce, reduce_scatter and
/// their _async forms) through user-defined, commutative MPI operations, one per format and
/// ReduceOp, created on the first half reduction and freed in MPI_Finalize: each step
/// combines two elements as float(a) op float(b) and rounds back to the format, to nearest
/// even (kernels/half.h). sum is thus correctly rounded per step, and over n ranks within
/// n-1 roundings of the exact sum (the library picks the order). Every step is commutative
/// bitwise, so the result is bitwise the same on every rank wherever the library reduces
/// along one tree with operands swapped at most, as Open MPI's algorithms do for MPI_SUM on
/// floats too (checked by the tests at 2 and 4 ranks); a NaN sum is the canonical
/// quiet NaN (bf16 0x7fc0, f16 0x7e00). max/min return one of the inputs unrounded, ignore
/// NaNs as fmaxf/fminf do (all NaN: the canonical NaN) and order -0 below +0. Counts must
/// fit in an int (aborts otherwise), as the MPI-3 C interface takes int counts.
///
/// In place (NCCL's conventions): all_reduce when send == recv; all_gather when
/// send == recv + rank*send_count; reduce_scatter when recv == send + rank*recv_count.
/// Any other overlap of send and recv aborts (MPI forbids aliased buffers).
/// In-place reduce_scatter uses MPI_IN_PLACE, which leaves rank r's result at the start of
/// the buffer; it is then copied to block r. Afterwards only block r is defined: the other
/// blocks of the buffer are unspecified (block 0 may hold this rank's result), as with MPI.
class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (freed in the destructor unless MPI is finalised).
  /// `name` names the group in error messages. Aborts if comm is MPI_COMM_NULL.
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  std::string backend() const override { return "mpi"; }
  /// The underlying MPI communicator (still owned by this object).
  MPI_Comm comm() const { return comm_; }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                      ReduceOp op) override;
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  /// The root copies send into recv (memcpy), then MPI_Bcast of recv.
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root) override;
  void send(const void* buf, size_t count, DType dtype, int peer, int tag = 0) override;
  /// Aborts if the matching message does not hold exactly `count` elements.
  void recv(void* buf, size_t count, DType dtype, int peer, int tag = 0) override;
  /// MPI_Sendrecv; send and recv must not overlap. Aborts on a short message, as recv().
  void sendrecv(const void* send, void* recv, size_t count, DType dtype, int send_peer,
                int recv_peer, int tag = 0) override;
  void barrier() override;
  /// MPI_Alltoallv; every count and displacement must fit in an int (aborts otherwise). A
  /// message longer than its recv_counts entry aborts (MPI_ERR_TRUNCATE); a shorter one is not
  /// detected (the rest of that block is left as it was).
  void all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                   const std::vector<size_t>& send_displs, void* recv,
                   const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                   DType dtype) override;
  /// MPI_Alltoall.
  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override;

  /// The handles' wait() calls MPI_Wait and their test() MPI_Test; on completion (either
  /// way) an in-place reduce_scatter's result is moved to rank's block. A handle destroyed
  /// before completion waits in its destructor, so that the buffers are never released under
  /// a live request.
  std::unique_ptr<CommHandle> all_reduce_async(const void* send, void* recv, size_t count,
                                               DType dtype, ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const void* send, void* recv, size_t send_count,
                                               DType dtype) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const void* send, void* recv,
                                                   size_t recv_count, DType dtype,
                                                   ReduceOp op) override;
  std::unique_ptr<CommHandle> broadcast_async(void* buf, size_t count, DType dtype,
                                              int root) override;
  /// MPI_Isend, matched by (peer, tag).
  std::unique_ptr<CommHandle> send_async(const void* buf, size_t count, DType dtype, int peer,
                                         int tag = 0) override;
  /// MPI_Irecv, matched by (peer, tag). On completion (wait() or test()) the received length
  /// is checked with MPI_Get_count as in recv(): a shorter message aborts; a longer one is
  /// MPI's truncation error, which aborts too.
  std::unique_ptr<CommHandle> recv_async(void* buf, size_t count, DType dtype, int peer,
                                         int tag = 0) override;

  /// MPI_Irecv from recv_peer then MPI_Isend to send_peer (MPI before MPI 4 has no
  /// MPI_Isendrecv), one handle over both: wait() waits for both, test() is true once both have
  /// completed; the received length is checked as recv() does. send and recv must not overlap
  /// (the in-place form runs the blocking MPI_Sendrecv_replace and returns a completed handle).
  /// Progress: Open MPI's shared-memory and TCP transports move a message past the eager limit
  /// only inside MPI calls, so computation between the post and wait() hides the transfer only as
  /// far as test() is called in between (context_parallel.cc polls between attention blocks).
  std::unique_ptr<CommHandle> sendrecv_async(const void* send, void* recv, size_t count, DType dtype,
                                             int send_peer, int recv_peer, int tag = 0) override;

  /// MPI_Comm_split. `color` must be >= 0 (every rank gets a group).
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::string desc_;  // "group 'name' (rank r of n)" for error messages
  uint64_t group_id_ = 0;  // the group's id on the communication watchdog's board (watchdog.h)
};

}  // namespace dtb
