// A communicator over device memory for ranks that share one GPU: every collective copies its
// device inputs to host buffers, runs on an MPI communicator there, and copies the results
// back. NCCL cannot place two ranks of a communicator on one GPU (make_nccl_world refuses),
// so this is how several ranks on one GPU (TP, PP, DP and ZeRO layouts on a single-GPU
// machine) talk: the same semantics as the MPI communicator, on device pointers. The copies
// are the Backend's (cudaMemcpy on the compute stream, synchronised: ordered after the
// compute queued before the call; memcpy on the CPU, which is how the tests run it).
//
// Cost: two copies over PCIe per collective on top of MPI's own time (a host round trip, as
// MPI without CUDA awareness needs); a correctness mode, not a performance one: its rows in
// the collectives suite say "mpi-staged", never "nccl".
#pragma once
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/comm/communicator.h"

namespace dtb {

/// Wraps `host` (an MPI communicator on host buffers, owned) so that every buffer passed is
/// a device buffer of `backend` (which must outlive it). Semantics, in-place layouts and
/// errors are the wrapped communicator's (Communicator's contract); backend() is
/// "<host's>-staged", name() the host's. Each operation stages through fresh host buffers,
/// so any number may be in flight; an async operation's results reach the device when its
/// handle completes (wait(), or the first test() that returns true).
class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend);
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return host_->name(); }
  std::string backend() const override { return host_->backend() + "-staged"; }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override;
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root) override;
  void send(const void* buf, size_t count, DType dtype, int peer, int tag) override;
  void recv(void* buf, size_t count, DType dtype, int peer, int tag) override;
  void sendrecv(const void* send, void* recv, size_t count, DType dtype, int send_peer, int recv_peer,
                int tag) override;
  void barrier() override { host_->barrier(); }
  /// Stages the span of send the blocks cover, runs the host's all_to_allv, and copies each
  /// received block back (recv between blocks is left as it was).
  void all_to_allv(const void* send, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_displs,
                   void* recv, const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                   DType dtype) override;

  std::unique_ptr<CommHandle> all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                               ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const void* send, void* recv, size_t send_count,
                                               DType dtype) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType dtype,
                                                   ReduceOp op) override;
  std::unique_ptr<CommHandle> broadcast_async(void* buf, size_t count, DType dtype, int root) override;
  std::unique_ptr<CommHandle> send_async(const void* buf, size_t count, DType dtype, int peer, int tag) override;
  std::unique_ptr<CommHandle> recv_async(void* buf, size_t count, DType dtype, int peer, int tag) override;

  /// The host communicator's split, staged the same way. Collective over this communicator.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

 private:
  std::unique_ptr<Communicator> host_;
  Backend& backend_;
};

}  // namespace dtb
