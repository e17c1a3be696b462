// StagedCommunicator (staged_communicator.h): device buffers through host buffers and MPI.
// Every operation reads all of its device inputs into a host send buffer before anything is
// written, and runs out of place on the host, so the device-side in-place layouts (NCCL's,
// which Communicator follows) need no case of their own.
#include "kernels/comm/staged_communicator.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace dtb {

namespace {

using Bytes = std::vector<unsigned char>;

// An operation in flight on the host communicator; on completion, `land` copies what
// arrived to the device, once (through the Backend, not the communicator, so a handle may
// outlive the communicator that made it). The host buffers live as long as the handle.
class StagedHandle final : public CommHandle {
 public:
  // Built first, then start()ed with the host operation on its buffers.
  StagedHandle(Bytes in, Bytes out, std::function<void(const Bytes&)> land)
      : in_(std::move(in)), out_(std::move(out)), land_(std::move(land)) {}
  ~StagedHandle() override { wait(); }
  void start(std::unique_ptr<CommHandle> inner) { inner_ = std::move(inner); }
  unsigned char* in() { return in_.data(); }
  unsigned char* out() { return out_.data(); }
  void wait() override {
    if (done_) return;
    inner_->wait();
    finish();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    done_ = true;
    if (land_) land_(out_);
  }
  Bytes in_, out_;
  std::function<void(const Bytes&)> land_;
  std::unique_ptr<CommHandle> inner_;
  bool done_ = false;
};

// What lands a completed operation's host output in the device buffer `dst`.
std::function<void(const Bytes&)> land_in(Backend& be, void* dst) {
  return [&be, dst](const Bytes& out) { be.copy_from_host(dst, out.data(), out.size()); };
}

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend)
    : host_(std::move(host)), backend_(backend) {}

void StagedCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  const size_t bytes = count * dtype_size(dtype);
  Bytes in(bytes), out(bytes);
  backend_.copy_to_host(in.data(), send, bytes);
  host_->all_reduce(in.data(), out.data(), count, dtype, op);
  backend_.copy_from_host(recv, out.data(), bytes);
}

void StagedCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  const size_t bytes = send_count * dtype_size(dtype);
  Bytes in(bytes), out(bytes * size_t(size()));
  backend_.copy_to_host(in.data(), send, bytes);
  host_->all_gather(in.data(), out.data(), send_count, dtype);
  backend_.copy_from_host(recv, out.data(), out.size());
}

void StagedCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  const size_t bytes = recv_count * dtype_size(dtype);
  Bytes in(bytes * size_t(size())), out(bytes);
  backend_.copy_to_host(in.data(), send, in.size());
  host_->reduce_scatter(in.data(), out.data(), recv_count, dtype, op);
  backend_.copy_from_host(recv, out.data(), bytes);
}

void StagedCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  broadcast(buf, buf, count, dtype, root);
}

void StagedCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  const size_t bytes = count * dtype_size(dtype);
  Bytes b(bytes);
  if (rank() == root) backend_.copy_to_host(b.data(), send, bytes);  // send is read on the root only
  host_->broadcast(b.data(), count, dtype, root);
  backend_.copy_from_host(recv, b.data(), bytes);
}

void StagedCommunicator::send(const void* buf, size_t count, DType dtype, int peer, int tag) {
  Bytes b(count * dtype_size(dtype));
  backend_.copy_to_host(b.data(), buf, b.size());
  host_->send(b.data(), count, dtype, peer, tag);
}

void StagedCommunicator::recv(void* buf, size_t count, DType dtype, int peer, int tag) {
  Bytes b(count * dtype_size(dtype));
  host_->recv(b.data(), count, dtype, peer, tag);
  backend_.copy_from_host(buf, b.data(), b.size());
}

void StagedCommunicator::sendrecv(const void* send, void* recv, size_t count, DType dtype, int send_peer,
                                  int recv_peer, int tag) {
  const size_t bytes = count * dtype_size(dtype);
  Bytes in(bytes), out(bytes);
  backend_.copy_to_host(in.data(), send, bytes);
  host_->sendrecv(in.data(), out.data(), count, dtype, send_peer, recv_peer, tag);
  backend_.copy_from_host(recv, out.data(), bytes);
}

void StagedCommunicator::all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                                     const std::vector<size_t>& send_displs, void* recv,
                                     const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                                     DType dtype) {
  const size_t ts = dtype_size(dtype);
  auto span = [](const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
    size_t end = 0;
    for (size_t j = 0; j < counts.size() && j < displs.size(); ++j)
      if (counts[j]) end = std::max(end, displs[j] + counts[j]);
    return end;
  };
  Bytes in(span(send_counts, send_displs) * ts), out(span(recv_counts, recv_displs) * ts);
  if (!in.empty()) backend_.copy_to_host(in.data(), send, in.size());
  host_->all_to_allv(in.data(), send_counts, send_displs, out.data(), recv_counts, recv_displs, dtype);
  for (size_t i = 0; i < recv_counts.size(); ++i)
    if (recv_counts[i])
      backend_.copy_from_host(static_cast<unsigned char*>(recv) + recv_displs[i] * ts,
                              out.data() + recv_displs[i] * ts, recv_counts[i] * ts);
}

// The async forms: stage the inputs now, start the host operation on the handle's buffers,
// land the outputs when it completes.
std::unique_ptr<CommHandle> StagedCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                                 DType dtype, ReduceOp op) {
  const size_t bytes = count * dtype_size(dtype);
  auto h = std::make_unique<StagedHandle>(Bytes(bytes), Bytes(bytes), land_in(backend_, recv));
  backend_.copy_to_host(h->in(), send, bytes);
  h->start(host_->all_reduce_async(h->in(), h->out(), count, dtype, op));
  return h;
}

std::unique_ptr<CommHandle> StagedCommunicator::all_gather_async(const void* send, void* recv, size_t send_count,
                                                                 DType dtype) {
  const size_t bytes = send_count * dtype_size(dtype);
  auto h = std::make_unique<StagedHandle>(Bytes(bytes), Bytes(bytes * size_t(size())), land_in(backend_, recv));
  backend_.copy_to_host(h->in(), send, bytes);
  h->start(host_->all_gather_async(h->in(), h->out(), send_count, dtype));
  return h;
}

std::unique_ptr<CommHandle> StagedCommunicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                                                     DType dtype, ReduceOp op) {
  const size_t bytes = recv_count * dtype_size(dtype);
  auto h = std::make_unique<StagedHandle>(Bytes(bytes * size_t(size())), Bytes(bytes), land_in(backend_, recv));
  backend_.copy_to_host(h->in(), send, bytes * size_t(size()));
  h->start(host_->reduce_scatter_async(h->in(), h->out(), recv_count, dtype, op));
  return h;
}

std::unique_ptr<CommHandle> StagedCommunicator::broadcast_async(void* buf, size_t count, DType dtype, int root) {
  const size_t bytes = count * dtype_size(dtype);
  // In place on the host: `out` is both what the root sends and what every rank receives.
  auto h = std::make_unique<StagedHandle>(Bytes(), Bytes(bytes), land_in(backend_, buf));
  if (rank() == root) backend_.copy_to_host(h->out(), buf, bytes);
  h->start(host_->broadcast_async(h->out(), count, dtype, root));
  return h;
}

std::unique_ptr<CommHandle> StagedCommunicator::send_async(const void* buf, size_t count, DType dtype, int peer,
                                                           int tag) {
  const size_t bytes = count * dtype_size(dtype);
  auto h = std::make_unique<StagedHandle>(Bytes(bytes), Bytes(), nullptr);
  backend_.copy_to_host(h->in(), buf, bytes);
  h->start(host_->send_async(h->in(), count, dtype, peer, tag));
  return h;
}

std::unique_ptr<CommHandle> StagedCommunicator::recv_async(void* buf, size_t count, DType dtype, int peer, int tag) {
  const size_t bytes = count * dtype_size(dtype);
  auto h = std::make_unique<StagedHandle>(Bytes(), Bytes(bytes), land_in(backend_, buf));
  h->start(host_->recv_async(h->out(), count, dtype, peer, tag));
  return h;
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, const std::string& name) {
  return std::make_unique<StagedCommunicator>(host_->split(color, key, name), backend_);
}

}  // namespace dtb
