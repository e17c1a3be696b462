// MpiCommunicator: Communicator over MPI on host buffers (see mpi_communicator.h for the
// datatype mapping and in-place conventions). Every MPI return code is checked. The half
// types reduce through user-defined MPI operations (mpi_half_ops.cc).
#include "kernels/comm/mpi_communicator.h"

#include "kernels/comm/mpi_util.h"
#include "kernels/comm/watchdog.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "kernels/error.h"

namespace dtb {
namespace {

/// "group 'world' (rank 1 of 4)", for error messages.
std::string describe(const std::string& name, int rank, int size) {
  return "group '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) +
         ")";
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

namespace {

int int_count(size_t count, const char* call, const std::string& group) {
  DTB_CHECK(count <= size_t(INT_MAX), std::string(call) + " on " + group + ": count " +
                                          std::to_string(count) + " exceeds INT_MAX");
  return int(count);
}

/// The MPI datatype of `t`. The half types travel as MPI_UINT16_T (MPI has no half
/// types); reductions on them use the user-defined operations of half_op().
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
  }
  DTB_CHECK(false, "unknown DType");
  return MPI_DATATYPE_NULL;
}

/// The MPI operation reducing `t` with `op`: MPI's own for f32, f64, i32; a user-defined
/// one (half_op) for bf16 and f16.
MPI_Op mpi_op(ReduceOp op, DType t, const char* call, const std::string& group) {
  DTB_CHECK(op == ReduceOp::sum || op == ReduceOp::max || op == ReduceOp::min,
            std::string(call) + " on " + group + ": unknown ReduceOp");
  if (t == DType::bf16 || t == DType::f16) return half_op(t, op, call, group);
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

void check_no_overlap(const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                      const char* call, const std::string& group) {
  DTB_CHECK(!overlap(send, send_bytes, recv, recv_bytes),
            std::string(call) + " on " + group +
                ": send and recv overlap but are not in the in-place layout");
}

void check_rank(int r, int size, const char* what, const char* call, const std::string& group) {
  DTB_CHECK(r >= 0 && r < size, std::string(call) + " on " + group + ": " + what + " " +
                                    std::to_string(r) + " out of range");
}

/// MPI arguments of a collective: the send argument (maybe MPI_IN_PLACE), the recv
/// argument, and a copy to make after completion (in-place reduce_scatter).
struct Plan {
  const void* send = nullptr;
  void* recv = nullptr;
  void* fix_dst = nullptr;
  const void* fix_src = nullptr;
  size_t fix_bytes = 0;
};

Plan plan_all_reduce(const void* send, void* recv, size_t bytes, const char* call,
                     const std::string& group) {
  if (send == recv) return {MPI_IN_PLACE, recv};
  check_no_overlap(send, bytes, recv, bytes, call, group);
  return {send, recv};
}

Plan plan_all_gather(const void* send, void* recv, size_t block_bytes, int rank, int size,
                     const char* call, const std::string& group) {
  if (send == static_cast<const char*>(recv) + rank * block_bytes) return {MPI_IN_PLACE, recv};
  check_no_overlap(send, block_bytes, recv, size * block_bytes, call, group);
  return {send, recv};
}

// MPI_IN_PLACE reduce_scatter_block takes the whole input in recvbuf and writes rank r's
// block at its start; the fix-up copies it to block r (NCCL's in-place location).
Plan plan_reduce_scatter(const void* send, void* recv, size_t block_bytes, int rank, int size,
                         const char* call, const std::string& group) {
  if (recv == static_cast<const char*>(send) + rank * block_bytes) {
    void* whole = const_cast<void*>(send);
    return {MPI_IN_PLACE, whole, recv, whole, rank == 0 ? 0 : block_bytes};
  }
  check_no_overlap(send, size * block_bytes, recv, block_bytes, call, group);
  return {send, recv};
}

void apply_fixup(const Plan& p) {
  if (p.fix_bytes > 0) std::memcpy(p.fix_dst, p.fix_src, p.fix_bytes);  // distinct blocks
}

/// What a completed receive must hold: `count` elements of `type` (type MPI_DATATYPE_NULL:
/// not a receive, nothing to check).
struct RecvCheck {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  size_t count = 0;
};

/// A non-blocking operation in flight: wait() completes it with MPI_Wait, test() polls it
/// with MPI_Test. On completion the plan's fix-up is applied and a receive's length checked.
class MpiHandle final : public CommHandle {
 public:
  MpiHandle(MPI_Request req, std::string call, std::string group, Plan plan, uint64_t group_id, CommOp op,
            int peer = -1, RecvCheck check = {})
      : req_(req), call_(std::move(call)), group_(std::move(group)), plan_(plan),
        check_(check), group_id_(group_id), op_(op), peer_(peer) {}
  ~MpiHandle() override {
    if (!done_ && !mpi_finalized()) wait();
  }
  void wait() override {
    if (done_) return;
    MPI_Status status;
    {
      CommOpScope on_board(group_id_, async_wait(op_), peer_);
      DTB_MPI_CHECK(MPI_Wait(&req_, &status), "MPI_Wait(" + call_ + ")", group_);
    }
    complete(status);
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status status;
    DTB_MPI_CHECK(MPI_Test(&req_, &flag, &status), "MPI_Test(" + call_ + ")", group_);
    if (flag) complete(status);
    return done_;
  }

 private:
  void complete(const MPI_Status& status) {
    done_ = true;
    apply_fixup(plan_);
    if (check_.type == MPI_DATATYPE_NULL) return;
    int got = 0;
    DTB_MPI_CHECK(MPI_Get_count(&status, check_.type, &got), "MPI_Get_count", group_);
    DTB_CHECK(size_t(got) == check_.count, call_ + " on " + group_ + ": received " +
                                               std::to_string(got) + " elements, expected " +
                                               std::to_string(check_.count));
  }

  MPI_Request req_;
  std::string call_, group_;
  Plan plan_;
  RecvCheck check_;
  uint64_t group_id_;
  CommOp op_;
  int peer_;
  bool done_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : comm_(comm), name_(std::move(name)) {
  DTB_CHECK(comm_ != MPI_COMM_NULL, "MpiCommunicator '" + name_ + "': MPI_COMM_NULL");
  const std::string group = "group '" + name_ + "'";
  DTB_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
                group);
  DTB_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", group);
  DTB_MPI_CHECK(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", group);
  DTB_MPI_CHECK(MPI_Comm_set_name(comm_, name_.c_str()), "MPI_Comm_set_name", group);
  desc_ = describe(name_, rank_, size_);
  group_id_ = describe_comm_group(comm_, name_).id;
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && !mpi_finalized()) {
    DTB_MPI_CHECK(MPI_Comm_free(&comm_), "MPI_Comm_free", desc_);
  }
}

void MpiCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op) {
  const char* call = "MPI_Allreduce";
  const std::string& g = desc_;  // built once: nothing allocated per call
  const Plan p = plan_all_reduce(send, recv, count * dtype_size(dtype), call, g);
  CommOpScope on_board(group_id_, CommOp::all_reduce, -1);
  DTB_MPI_CHECK(MPI_Allreduce(p.send, p.recv, int_count(count, call, g),
                              mpi_type(dtype), mpi_op(op, dtype, call, g), comm_),
                call, g);
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  const char* call = "MPI_Allgather";
  const std::string& g = desc_;  // built once: nothing allocated per call
  const Plan p =
      plan_all_gather(send, recv, send_count * dtype_size(dtype), rank_, size_, call, g);
  const int n = int_count(send_count, call, g);
  const MPI_Datatype t = mpi_type(dtype);
  CommOpScope on_board(group_id_, CommOp::all_gather, -1);
  DTB_MPI_CHECK(MPI_Allgather(p.send, n, t, p.recv, n, t, comm_), call, g);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                     DType dtype, ReduceOp op) {
  const char* call = "MPI_Reduce_scatter_block";
  const std::string& g = desc_;  // built once: nothing allocated per call
  const Plan p =
      plan_reduce_scatter(send, recv, recv_count * dtype_size(dtype), rank_, size_, call, g);
  CommOpScope on_board(group_id_, CommOp::reduce_scatter, -1);
  DTB_MPI_CHECK(MPI_Reduce_scatter_block(p.send, p.recv, int_count(recv_count, call, g),
                                         mpi_type(dtype), mpi_op(op, dtype, call, g), comm_),
                call, g);
  apply_fixup(p);
}

void MpiCommunicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  const char* call = "MPI_Bcast";
  const std::string& g = desc_;  // built once: nothing allocated per call
  check_rank(root, size_, "root", call, g);
  CommOpScope on_board(group_id_, CommOp::broadcast, -1);
  DTB_MPI_CHECK(MPI_Bcast(buf, int_count(count, call, g), mpi_type(dtype), root,
                          comm_),
                call, g);
}

void MpiCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  if (rank_ == root && send != recv) {
    const size_t bytes = count * dtype_size(dtype);
    check_no_overlap(send, bytes, recv, bytes, "MPI_Bcast", desc_);
    std::memcpy(recv, send, bytes);
  }
  broadcast(recv, count, dtype, root);
}

void MpiCommunicator::send(const void* buf, size_t count, DType dtype, int peer, int tag) {
  const char* call = "MPI_Send";
  const std::string& g = desc_;  // built once: nothing allocated per call
  check_rank(peer, size_, "peer", call, g);
  CommOpScope on_board(group_id_, CommOp::send, peer);
  DTB_MPI_CHECK(MPI_Send(buf, int_count(count, call, g), mpi_type(dtype), peer,
                         tag, comm_),
                call, g);
}

void MpiCommunicator::recv(void* buf, size_t count, DType dtype, int peer, int tag) {
  const char* call = "MPI_Recv";
  const std::string& g = desc_;  // built once: nothing allocated per call
  check_rank(peer, size_, "peer", call, g);
  const MPI_Datatype t = mpi_type(dtype);
  MPI_Status status;
  CommOpScope on_board(group_id_, CommOp::recv, peer);
  DTB_MPI_CHECK(MPI_Recv(buf, int_count(count, call, g), t, peer, tag, comm_, &status), call, g);
  int got = 0;
  DTB_MPI_CHECK(MPI_Get_count(&status, t, &got), "MPI_Get_count", g);
  DTB_CHECK(size_t(got) == count, std::string(call) + " on " + g + ": received " +
                                      std::to_string(got) + " elements, expected " +
                                      std::to_string(count));
}

void MpiCommunicator::sendrecv(const void* send, void* recv, size_t count, DType dtype,
                               int send_peer, int recv_peer, int tag) {
  const char* call = "MPI_Sendrecv";
  const std::string& g = desc_;  // built once: nothing allocated per call
  check_rank(send_peer, size_, "send peer", call, g);
  check_rank(recv_peer, size_, "recv peer", call, g);
  const size_t bytes = count * dtype_size(dtype);
  const int n = int_count(count, call, g);
  const MPI_Datatype t = mpi_type(dtype);
  MPI_Status status;
  CommOpScope on_board(group_id_, CommOp::sendrecv, recv_peer);
  if (send == recv) {  // in place: MPI forbids aliased Sendrecv buffers, so _replace
    DTB_MPI_CHECK(MPI_Sendrecv_replace(recv, n, t, send_peer, tag, recv_peer, tag, comm_, &status),
                  "MPI_Sendrecv_replace", g);
  } else {
    check_no_overlap(send, bytes, recv, bytes, call, g);
    DTB_MPI_CHECK(MPI_Sendrecv(send, n, t, send_peer, tag, recv, n, t, recv_peer, tag, comm_,
                               &status),
                  call, g);
  }
  int got = 0;
  DTB_MPI_CHECK(MPI_Get_count(&status, t, &got), "MPI_Get_count", g);
  DTB_CHECK(got == n, std::string(call) + " on " + g + ": received " + std::to_string(got) +
                          " elements, expected " + std::to_string(n));
}

void MpiCommunicator::barrier() {
  CommOpScope on_board(group_id_, CommOp::barrier, -1);
  DTB_MPI_CHECK(MPI_Barrier(comm_), "MPI_Barrier", desc_);
}

void MpiCommunicator::all_to_allv(const void* send, const std::vector<size_t>& send_counts,
                                  const std::vector<size_t>& send_displs, void* recv,
                                  const std::vector<size_t>& recv_counts,
                                  const std::vector<size_t>& recv_displs, DType dtype) {
  const char* call = "MPI_Alltoallv";
  const std::string& g = desc_;
  const size_t n = size_t(size_), ts = dtype_size(dtype);
  DTB_CHECK(send_counts.size() == n && send_displs.size() == n && recv_counts.size() == n &&
                recv_displs.size() == n,
            std::string(call) + " on " + g + ": counts and displacements need " + std::to_string(n) +
                " entries each");
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  size_t send_end = 0, recv_end = 0;  // elements spanned, for the overlap check
  for (size_t j = 0; j < n; ++j) {
    sc[j] = int_count(send_counts[j], call, g), sd[j] = int_count(send_displs[j], call, g);
    rc[j] = int_count(recv_counts[j], call, g), rd[j] = int_count(recv_displs[j], call, g);
    if (send_counts[j]) send_end = std::max(send_end, send_displs[j] + send_counts[j]);
    if (recv_counts[j]) recv_end = std::max(recv_end, recv_displs[j] + recv_counts[j]);
  }
  check_no_overlap(send, send_end * ts, recv, recv_end * ts, call, g);
  const MPI_Datatype t = mpi_type(dtype);
  CommOpScope on_board(group_id_, CommOp::all_to_allv, -1);
  DTB_MPI_CHECK(MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm_), call, g);
}

void MpiCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  const char* call = "MPI_Alltoall";
  const std::string& g = desc_;
  const int c = int_count(count, call, g);
  int_count(count * size_t(size_), call, g);  // the whole buffer is addressed with int offsets
  const size_t bytes = count * size_t(size_) * dtype_size(dtype);
  check_no_overlap(send, bytes, recv, bytes, call, g);
  const MPI_Datatype t = mpi_type(dtype);
  CommOpScope on_board(group_id_, CommOp::all_to_all, -1);
  DTB_MPI_CHECK(MPI_Alltoall(send, c, t, recv, c, t, comm_), call, g);
}

std::unique_ptr<CommHandle> MpiCommunicator::all_reduce_async(const void* send, void* recv,
                                                              size_t count, DType dtype,
                                                              ReduceOp op) {
  const char* call = "MPI_Iallreduce";
  std::string g = desc_;
  const Plan p = plan_all_reduce(send, recv, count * dtype_size(dtype), call, g);
  MPI_Request req;
  DTB_MPI_CHECK(MPI_Iallreduce(p.send, p.recv, int_count(count, call, g),
                               mpi_type(dtype), mpi_op(op, dtype, call, g), comm_, &req),
                call, g);
  return std::make_unique<MpiHandle>(req, call, std::move(g), p, group_id_, CommOp::all_reduce);
}

std::unique_ptr<CommHandle> MpiCommunicator::all_gather_async(const void* send, void* recv,
                                                              size_t send_count, DType dtype) {
  const char* call = "MPI_Iallgather";
  std::string g = desc_;
  const Plan p =
      plan_all_gather(send, recv, send_count * dtype_size(dtype), rank_, size_, call, g);
  const int n = int_count(send_count, call, g);
  const MPI_Datatype t = mpi_type(dtype);
  MPI_Request req;
  DTB_MPI_CHECK(MPI_Iallgather(p.send, n, t, p.recv, n, t, comm_, &req), call, g);
  return std::make_unique<MpiHandle>(req, call, std::move(g), p, group_id_, CommOp::all_gather);
}

std::unique_ptr<CommHandle> MpiCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                                  size_t recv_count, DType dtype,
                                                                  ReduceOp op) {
  const char* call = "MPI_Ireduce_scatter_block";
  std::string g = desc_;
  const Plan p =
      plan_reduce_scatter(send, recv, recv_count * dtype_size(dtype), rank_, size_, call, g);
  MPI_Request req;
  DTB_MPI_CHECK(MPI_Ireduce_scatter_block(p.send, p.recv, int_count(recv_count, call, g),
                                          mpi_type(dtype), mpi_op(op, dtype, call, g), comm_,
                                          &req),
                call, g);
  return std::make_unique<MpiHandle>(req, call, std::move(g), p, group_id_, CommOp::reduce_scatter);
}

std::unique_ptr<CommHandle> MpiCommunicator::broadcast_async(void* buf, size_t count,
                                                             DType dtype, int root) {
  const char* call = "MPI_Ibcast";
  std::string g = desc_;
  check_rank(root, size_, "root", call, g);
  MPI_Request req;
  DTB_MPI_CHECK(MPI_Ibcast(buf, int_count(count, call, g), mpi_type(dtype), root,
                           comm_, &req),
                call, g);
  return std::make_unique<MpiHandle>(req, call, std::move(g), Plan{buf, buf}, group_id_, CommOp::broadcast);
}

std::unique_ptr<CommHandle> MpiCommunicator::send_async(const void* buf, size_t count,
                                                        DType dtype, int peer, int tag) {
  const char* call = "MPI_Isend";
  std::string g = desc_;
  check_rank(peer, size_, "peer", call, g);
  MPI_Request req;
  DTB_MPI_CHECK(MPI_Isend(buf, int_count(count, call, g), mpi_type(dtype), peer,
                          tag, comm_, &req),
                call, g);
  return std::make_unique<MpiHandle>(req, call, std::move(g), Plan{}, group_id_, CommOp::send, peer);
}

std::unique_ptr<CommHandle> MpiCommunicator::recv_async(void* buf, size_t count, DType dtype,
                                                        int peer, int tag) {
  const char* call = "MPI_Irecv";
  std::string g = desc_;
  check_rank(peer, size_, "peer", call, g);
  const MPI_Datatype t = mpi_type(dtype);
  MPI_Request req;
  DTB_MPI_CHECK(MPI_Irecv(buf, int_count(count, call, g), t, peer, tag, comm_, &req), call, g);
  return std::make_unique<MpiHandle>(req, call, std::move(g), Plan{}, group_id_, CommOp::recv, peer, RecvCheck{t, count});
}

namespace {
// Two requests as one handle (sendrecv_async): both posted before either is waited for, so the
// order of the waits cannot deadlock.
class PairHandle final : public CommHandle {
 public:
  PairHandle(std::unique_ptr<CommHandle> recv, std::unique_ptr<CommHandle> send)
      : recv_(std::move(recv)), send_(std::move(send)) {}
  void wait() override {
    recv_->wait();
    send_->wait();
  }
  bool test() override {
    const bool r = recv_->test();
    const bool s = send_->test();
    return r && s;
  }

 private:
  std::unique_ptr<CommHandle> recv_, send_;
};
}  // namespace

std::unique_ptr<CommHandle> MpiCommunicator::sendrecv_async(const void* send, void* recv, size_t count,
                                                            DType dtype, int send_peer, int recv_peer, int tag) {
  if (send == recv) return Communicator::sendrecv_async(send, recv, count, dtype, send_peer, recv_peer, tag);
  const std::string& g = desc_;
  const size_t bytes = count * dtype_size(dtype);
  check_no_overlap(send, bytes, recv, bytes, "MPI_Isend/MPI_Irecv", g);
  auto r = recv_async(recv, count, dtype, recv_peer, tag);
  auto s = send_async(send, count, dtype, send_peer, tag);
  return std::make_unique<PairHandle>(std::move(r), std::move(s));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  const std::string& g = desc_;  // built once: nothing allocated per call
  DTB_CHECK(color >= 0, "split of " + g + " into '" + name + "': color " +
                            std::to_string(color) + " < 0");
  MPI_Comm sub = MPI_COMM_NULL;
  CommOpScope on_board(group_id_, CommOp::split, -1);
  DTB_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split", g);
  return std::make_unique<MpiCommunicator>(sub, name);
}

namespace {

std::unique_ptr<Communicator> dup_of(MPI_Comm parent, const std::string& name) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  DTB_CHECK(initialized && !mpi_finalized(), "make_mpi_" + name + ": MPI is not initialised");
  MPI_Comm comm = MPI_COMM_NULL;
  DTB_MPI_CHECK(MPI_Comm_dup(parent, &comm), "MPI_Comm_dup", "group '" + name + "'");
  return std::make_unique<MpiCommunicator>(comm, name);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() { return dup_of(MPI_COMM_WORLD, "world"); }
std::unique_ptr<Communicator> make_mpi_self() { return dup_of(MPI_COMM_SELF, "self"); }

std::string on_root(Communicator& world, const std::function<std::string()>& fn) {
  std::string payload;
  int ok = 1;
  if (world.rank() == 0) {
    try {
      payload = fn();
    } catch (const InputError& e) {
      ok = 0;
      payload = e.what();
    }
  }
  DTB_CHECK(payload.size() < (size_t(1) << 31), "payload over 2 GiB");
  int len = int(payload.size());
  world.broadcast(&ok, 1, DType::i32, 0);
  world.broadcast(&len, 1, DType::i32, 0);
  payload.resize((size_t(len) + 3) / 4 * 4);  // moved as 4-byte words
  if (len) world.broadcast(payload.data(), payload.size() / 4, DType::i32, 0);
  payload.resize(len);
  if (!ok) throw InputError(payload);
  return payload;
}

}  // namespace dtb
