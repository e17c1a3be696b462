// Communicator: the collectives every parallel strategy is written against. One
// interface, two transports: MPI on host buffers (kernels/comm/mpi_communicator.*) and NCCL
// on device buffers (kernels/comm/nccl_communicator.*, in CUDA builds); and three wrappers
// over a transport: StagedCommunicator (device buffers through host staging to MPI,
// staged_communicator.h), HierarchicalCommunicator (the two-level all-reduce,
// hierarchical_communicator.h) and EmulatedLinkCommunicator (slow inter-node links emulated,
// emulated_link.h), the last two on ForwardingCommunicator below. Semantics follow NCCL,
// including in-place conventions, so that code written once runs on every one.
//
// Counts are in elements of `dtype`; buffers are host pointers for MPI, device pointers for
// NCCL.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace dtb {

enum class ReduceOp { sum, max, min };

/// An operation in flight. wait() blocks until it has completed on this rank; a handle
/// destroyed without wait() waits in its destructor.
class CommHandle {
 public:
  virtual ~CommHandle() = default;
  virtual void wait() = 0;
  /// Non-blocking: true once the operation has completed on this rank (its buffers may then
  /// be reused or read), false while it is in flight. Once it has returned true, wait()
  /// returns at once, and so does a later test(). Errors abort as wait() does (MPI: MPI_Test;
  /// NCCL: cudaEventQuery of the completion event and ncclCommGetAsyncError, which also
  /// drives progress). Polling test() in a loop makes progress on both backends.
  virtual bool test() = 0;
};

/// A group of ranks and its collectives. Every operation is collective over the group
/// (all ranks call it with the same counts, dtype, op and root) unless it says otherwise.
/// Errors, for every operation: a failed library call, a count the backend cannot express
/// (MPI: above INT_MAX elements), buffers that overlap other than in the documented in-place layout, or a root or peer
/// outside [0, size()) abort the job through the error sink, naming group and operation.
/// Semantics and in-place layouts are NCCL's (ncclAllReduce, ncclAllGather, ...). Half types
/// (bf16, f16) reduce element by element in fp32, rounded back to the half type at each step
/// of the backend's algorithm (NCCL natively; MPI through user-defined operations).
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This rank's index in the group, in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;
  /// Name of the group (e.g. "world", "dp", "self"), used in error messages.
  virtual std::string name() const = 0;
  /// Backend name, e.g. "mpi".
  virtual std::string backend() const = 0;

  /// recv[i] = op over ranks of send[i], i < count. In place when send == recv.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
  /// recv (size*send_count) = concatenation of every rank's send (send_count) in rank order.
  /// In place when send == recv + rank*send_count (NCCL's convention).
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
  /// send holds size*recv_count; rank r receives op over ranks of block r into recv.
  /// In place when recv == send + rank*recv_count (NCCL's convention).
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                              ReduceOp op) = 0;
  /// buf (count) on `root` is copied to every rank (in place; NCCL's ncclBcast).
  virtual void broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  /// Out of place (NCCL's ncclBroadcast): send (count) on `root` lands in every rank's recv;
  /// send is read on the root only. send == recv is the in-place form.
  virtual void broadcast(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  /// Point-to-point, not collective: blocks until buf (count) may be reused; matched with
  /// the recv of `peer` by (peer, tag).
  virtual void send(const void* buf, size_t count, DType dtype, int peer, int tag = 0) = 0;
  /// Point-to-point: blocks until buf (count) holds the message of `peer` with `tag`;
  /// a message of another length aborts.
  virtual void recv(void* buf, size_t count, DType dtype, int peer, int tag = 0) = 0;
  /// Sends `send` to send_peer while receiving `recv` from recv_peer, without deadlock
  /// (nccl-tests' sendrecv: a ring shift when send_peer = rank+1, recv_peer = rank-1).
  /// In place when send == recv: the buffer is sent, then replaced by what arrives.
  virtual void sendrecv(const void* send, void* recv, size_t count, DType dtype, int send_peer,
                        int recv_peer, int tag = 0) = 0;
  /// Returns once every rank of the group has entered it.
  virtual void barrier() = 0;

  /// Uneven all-to-all (MPI_Alltoallv; on NCCL, nccl-tests' alltoall: one ncclSend and one
  /// ncclRecv per rank, itself included, in a group): this rank sends send_counts[j] elements
  /// from send + send_displs[j] to rank j and receives recv_counts[i] elements from rank i
  /// into recv + recv_displs[i]. The four vectors hold size() entries, counts and
  /// displacements in elements of `dtype` (an expert-parallel dispatch: send grouped by
  /// destination rank, as a router's counts say). recv_counts[i] must equal rank i's
  /// send_counts[rank()]: MPI aborts on a longer message (MPI_ERR_TRUNCATE) but leaves the
  /// rest of a block unwritten after a shorter one, NCCL carries no length and cannot tell
  /// (exchange the counts first, as a dispatch does). Out of place only: send and recv must not
  /// overlap (MPI's MPI_IN_PLACE form is not offered; nccl-tests has no in-place all-to-all).
  /// Errors: vectors of another length, a block past INT_MAX elements or offset (MPI), or
  /// overlapping buffers abort as every operation's errors.
  virtual void all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                           const std::vector<size_t>& send_displs, void* recv,
                           const std::vector<size_t>& recv_counts,
                           const std::vector<size_t>& recv_displs, DType dtype) = 0;
  /// Even all-to-all (MPI_Alltoall; nccl-tests' alltoall): send and recv hold size()*count
  /// elements; block j of send goes to rank j, block i of recv comes from rank i. Out of
  /// place only. The default calls all_to_allv with equal blocks; MpiCommunicator calls
  /// MPI_Alltoall.
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype);

  /// Non-blocking forms: same semantics, completion at handle->wait(). Buffers must stay
  /// valid and untouched until then.
  virtual std::unique_ptr<CommHandle> all_reduce_async(const void* send, void* recv, size_t count,
                                                       DType dtype, ReduceOp op) = 0;
  virtual std::unique_ptr<CommHandle> all_gather_async(const void* send, void* recv,
                                                       size_t send_count, DType dtype) = 0;
  virtual std::unique_ptr<CommHandle> reduce_scatter_async(const void* send, void* recv,
                                                           size_t recv_count, DType dtype,
                                                           ReduceOp op) = 0;
  virtual std::unique_ptr<CommHandle> broadcast_async(void* buf, size_t count, DType dtype,
                                                      int root) = 0;

  /// Non-blocking out-of-place broadcast (ncclBroadcast(send, recv)), as the blocking
  /// broadcast(send, recv, ...): send is read on the root only; send == recv is in place.
  /// The default runs the blocking form and returns a completed handle (a backend without
  /// a non-blocking form, e.g. MPI); NcclCommunicator issues it without waiting.
  virtual std::unique_ptr<CommHandle> broadcast_out_of_place_async(const void* send, void* recv,
                                                                   size_t count, DType dtype,
                                                                   int root);
  /// Non-blocking sendrecv: same semantics (and in-place form) as sendrecv(), completion at
  /// handle->wait(). The default runs the blocking sendrecv and returns a completed handle
  /// (MPI before MPI 4 has no MPI_Isendrecv); MpiCommunicator posts MPI_Irecv and MPI_Isend,
  /// NcclCommunicator issues its grouped ncclSend/ncclRecv without waiting.
  virtual std::unique_ptr<CommHandle> sendrecv_async(const void* send, void* recv, size_t count,
                                                     DType dtype, int send_peer, int recv_peer,
                                                     int tag = 0);

  /// Non-blocking all_to_allv: same semantics, completion at handle->wait(); the counts and
  /// displacements are copied, the buffers must stay valid until then. The default runs the
  /// blocking form and returns a completed handle; NcclCommunicator issues its group without
  /// waiting (the collectives suite's device timing launches it back to back).
  virtual std::unique_ptr<CommHandle> all_to_allv_async(const void* send, const std::vector<size_t>& send_counts,
                                                        const std::vector<size_t>& send_displs, void* recv,
                                                        const std::vector<size_t>& recv_counts,
                                                        const std::vector<size_t>& recv_displs, DType dtype);

  /// Non-blocking point-to-point, not collective: sends buf (count) to `peer`. Returns at
  /// once; buf must stay valid and unmodified until the handle completes (test() true or
  /// wait()). Matching: MPI pairs it with the recv of `peer` with the same `tag`
  /// (MPI_Isend; messages with equal (peer, tag) match in order); NCCL has no tags, ignores
  /// `tag` and matches sends and recvs between two ranks in issue order (ncclSend), so on
  /// NCCL both sides must post in the same order. NCCL's send completes only once the peer's
  /// recv has run (no eager sends). Errors as for every operation (a peer outside [0, size()),
  /// a count MPI cannot express, a failed call abort); NCCL also aborts on a send to this
  /// rank itself.
  virtual std::unique_ptr<CommHandle> send_async(const void* buf, size_t count, DType dtype,
                                                 int peer, int tag = 0) = 0;
  /// Non-blocking point-to-point, not collective: receives the message of `peer` (count
  /// elements) into buf. Returns at once; buf must not be read or written until the handle
  /// completes. Matched as send_async (MPI_Irecv by (peer, tag); ncclRecv in issue order per
  /// peer). On MPI a message of another length aborts at completion (as recv()); NCCL carries
  /// no length, so a mismatch is not detected. NCCL aborts on a recv from this rank itself.
  virtual std::unique_ptr<CommHandle> recv_async(void* buf, size_t count, DType dtype, int peer,
                                                 int tag = 0) = 0;

  /// A sub-group: ranks with the same color, ordered by key (MPI_Comm_split semantics).
  /// Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
};

/// A handle whose operation completed before it was returned (the blocking defaults above).
class CompletedHandle final : public CommHandle {
 public:
  void wait() override {}
  bool test() override { return true; }
};

inline std::unique_ptr<CommHandle> Communicator::broadcast_out_of_place_async(
    const void* send, void* recv, size_t count, DType dtype, int root) {
  broadcast(send, recv, count, dtype, root);
  return std::make_unique<CompletedHandle>();
}

inline std::unique_ptr<CommHandle> Communicator::sendrecv_async(const void* send, void* recv,
                                                                size_t count, DType dtype,
                                                                int send_peer, int recv_peer,
                                                                int tag) {
  sendrecv(send, recv, count, dtype, send_peer, recv_peer, tag);
  return std::make_unique<CompletedHandle>();
}

/// The displacements of blocks of `counts` laid end to end: {0, c0, c0+c1, ...}.
inline std::vector<size_t> exclusive_prefix_sum(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

inline void Communicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  const std::vector<size_t> counts(size_t(size()), count), displs = exclusive_prefix_sum(counts);
  all_to_allv(send, counts, displs, recv, counts, displs, dtype);
}

inline std::unique_ptr<CommHandle> Communicator::all_to_allv_async(
    const void* send, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_displs, void* recv,
    const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs, DType dtype) {
  all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  return std::make_unique<CompletedHandle>();
}

/// Forwards every operation to `inner` (which must outlive it): the base of a communicator
/// that changes one or two operations (a test's fault injection, a probe that times the
/// gradient all-reduce) and leaves the rest as they are. Errors: those of `inner`.
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  std::string backend() const override { return inner_.backend(); }
  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override { inner_.all_reduce(s, r, n, t, op); }
  void all_gather(const void* s, void* r, size_t n, DType t) override { inner_.all_gather(s, r, n, t); }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    inner_.reduce_scatter(s, r, n, t, op);
  }
  void broadcast(void* b, size_t n, DType t, int root) override { inner_.broadcast(b, n, t, root); }
  void broadcast(const void* s, void* r, size_t n, DType t, int root) override { inner_.broadcast(s, r, n, t, root); }
  void send(const void* b, size_t n, DType t, int peer, int tag) override { inner_.send(b, n, t, peer, tag); }
  void recv(void* b, size_t n, DType t, int peer, int tag) override { inner_.recv(b, n, t, peer, tag); }
  void sendrecv(const void* s, void* r, size_t n, DType t, int sp, int rp, int tag) override {
    inner_.sendrecv(s, r, n, t, sp, rp, tag);
  }
  void barrier() override { inner_.barrier(); }
  void all_to_allv(const void* s, const std::vector<size_t>& sc, const std::vector<size_t>& sd, void* r,
                   const std::vector<size_t>& rc, const std::vector<size_t>& rd, DType t) override {
    inner_.all_to_allv(s, sc, sd, r, rc, rd, t);
  }
  void all_to_all(const void* s, void* r, size_t n, DType t) override { inner_.all_to_all(s, r, n, t); }
  std::unique_ptr<CommHandle> all_to_allv_async(const void* s, const std::vector<size_t>& sc,
                                                const std::vector<size_t>& sd, void* r, const std::vector<size_t>& rc,
                                                const std::vector<size_t>& rd, DType t) override {
    return inner_.all_to_allv_async(s, sc, sd, r, rc, rd, t);
  }
  std::unique_ptr<CommHandle> all_reduce_async(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    return inner_.all_reduce_async(s, r, n, t, op);
  }
  std::unique_ptr<CommHandle> all_gather_async(const void* s, void* r, size_t n, DType t) override {
    return inner_.all_gather_async(s, r, n, t);
  }
  std::unique_ptr<CommHandle> reduce_scatter_async(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    return inner_.reduce_scatter_async(s, r, n, t, op);
  }
  std::unique_ptr<CommHandle> broadcast_async(void* b, size_t n, DType t, int root) override {
    return inner_.broadcast_async(b, n, t, root);
  }
  std::unique_ptr<CommHandle> broadcast_out_of_place_async(const void* s, void* r, size_t n, DType t,
                                                           int root) override {
    return inner_.broadcast_out_of_place_async(s, r, n, t, root);
  }
  std::unique_ptr<CommHandle> sendrecv_async(const void* s, void* r, size_t n, DType t, int sp, int rp,
                                             int tag) override {
    return inner_.sendrecv_async(s, r, n, t, sp, rp, tag);
  }
  std::unique_ptr<CommHandle> send_async(const void* b, size_t n, DType t, int peer, int tag) override {
    return inner_.send_async(b, n, t, peer, tag);
  }
  std::unique_ptr<CommHandle> recv_async(void* b, size_t n, DType t, int peer, int tag) override {
    return inner_.recv_async(b, n, t, peer, tag);
  }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return inner_.split(color, key, name);
  }

 protected:
  Communicator& inner_;
};

/// Runs `fn` on rank 0 of `world` and broadcasts its string result (e.g. a file rank 0 read, so
/// that ranks without a shared filesystem see it too); an InputError thrown by fn on rank 0 is
/// rethrown on every rank with the same message, so all ranks leave together. Collective over
/// `world`. Errors: a result of 2 GiB or more aborts.
std::string on_root(Communicator& world, const std::function<std::string()>& fn);

/// The MPI world (MPI_COMM_WORLD duplicated) and a size-1 group of this rank alone
/// (MPI_COMM_SELF duplicated), for the single-rank baseline. MPI must be initialised.
std::unique_ptr<Communicator> make_mpi_world();
std::unique_ptr<Communicator> make_mpi_self();

}  // namespace dtb
