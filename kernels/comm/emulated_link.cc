#include "kernels/comm/emulated_link.h"

#include <algorithm>
#include <thread>

#include "kernels/comm/ring.h"
#include "kernels/error.h"

namespace dtb {

std::vector<double> ring_cross_node_bytes(const std::vector<int>& nodes, double bytes_per_rank) {
  const size_t g = nodes.size();
  std::vector<double> out(g, 0.0);
  for (size_t i = 0; g > 1 && i < g; ++i)
    if (nodes[i] != nodes[(i + 1) % g]) out[i] = bytes_per_rank;
  return out;
}

namespace {

std::vector<int> gather_nodes(Communicator& c, int node) {
  std::vector<int> nodes(size_t(c.size()), 0);
  c.all_gather(&node, nodes.data(), 1, DType::i32);
  return nodes;
}

}  // namespace

// A non-blocking operation's handle: complete once the operation is and its deadline passed.
class LinkHandle final : public CommHandle {
 public:
  LinkHandle(EmulatedLinkCommunicator& c, std::unique_ptr<CommHandle> inner,
             std::chrono::steady_clock::time_point until)
      : c_(c), inner_(std::move(inner)), until_(until) {}
  ~LinkHandle() override { wait(); }
  void wait() override {
    if (done_) return;
    inner_->wait();
    c_.hold_until(until_);
    done_ = true;
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test() || std::chrono::steady_clock::now() < until_) return false;
    done_ = true;
    return true;
  }

 private:
  EmulatedLinkCommunicator& c_;
  std::unique_ptr<CommHandle> inner_;
  std::chrono::steady_clock::time_point until_;
  bool done_ = false;
};

EmulatedLinkCommunicator::EmulatedLinkCommunicator(Communicator& inner, int node, const LinkModel& link,
                                                   std::shared_ptr<LinkStats> stats)
    : ForwardingCommunicator(inner),
      link_(link),
      nodes_(gather_nodes(inner, node)),
      stats_(stats ? std::move(stats) : std::make_shared<LinkStats>()) {
  DTB_CHECK(link.gbps >= 0 && link.slow_gbps >= 0 && link.latency_s >= 0,
            "EmulatedLinkCommunicator: a negative bandwidth or latency");
}

EmulatedLinkCommunicator::EmulatedLinkCommunicator(std::unique_ptr<Communicator> inner, int node,
                                                   const LinkModel& link, std::shared_ptr<LinkStats> stats)
    : ForwardingCommunicator(*inner),
      owned_(std::move(inner)),
      link_(link),
      nodes_(gather_nodes(inner_, node)),
      stats_(stats ? std::move(stats) : std::make_shared<LinkStats>()) {
  DTB_CHECK(link.gbps >= 0 && link.slow_gbps >= 0 && link.latency_s >= 0,
            "EmulatedLinkCommunicator: a negative bandwidth or latency");
}

EmulatedLinkCommunicator::Clock::time_point EmulatedLinkCommunicator::deadline(double bytes_per_rank) {
  const Clock::time_point now = Clock::now();
  const std::vector<double> sent = ring_cross_node_bytes(nodes_, bytes_per_rank);
  double t = 0;
  bool crosses = false;
  for (size_t r = 0; r < sent.size(); ++r) {
    if (sent[r] <= 0) continue;
    crosses = true;
    const double gbps = link_.node_gbps(nodes_[r]);
    if (gbps > 0) t = std::max(t, sent[r] / (gbps * 1e9));
  }
  stats_->sent_bytes += sent.empty() ? 0.0 : sent[size_t(rank())];
  if (!crosses) return now;
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t + link_.latency_s));
}

void EmulatedLinkCommunicator::hold_until(Clock::time_point t) {
  const Clock::time_point now = Clock::now();
  if (now >= t) return;
  stats_->wait_s += std::chrono::duration<double>(t - now).count();
  std::this_thread::sleep_until(t);
}

// The bytes each rank of a ring sends, per operation (nccl-tests' bus factors times S).
namespace {
double all_reduce_bytes(size_t n, DType t, int g) { return ring_all_reduce_factor(g) * double(n) * double(dtype_size(t)); }
double gather_bytes(size_t n_full, DType t, int g) { return ring_gather_factor(g) * double(n_full) * double(dtype_size(t)); }
}  // namespace

void EmulatedLinkCommunicator::all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) {
  const auto until = deadline(all_reduce_bytes(n, t, size()));
  inner_.all_reduce(s, r, n, t, op);
  hold_until(until);
}
void EmulatedLinkCommunicator::all_gather(const void* s, void* r, size_t n, DType t) {
  const auto until = deadline(gather_bytes(n * size_t(size()), t, size()));
  inner_.all_gather(s, r, n, t);
  hold_until(until);
}
void EmulatedLinkCommunicator::reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) {
  const auto until = deadline(gather_bytes(n * size_t(size()), t, size()));
  inner_.reduce_scatter(s, r, n, t, op);
  hold_until(until);
}
void EmulatedLinkCommunicator::broadcast(void* b, size_t n, DType t, int root) {
  const auto until = deadline(double(n) * double(dtype_size(t)));
  inner_.broadcast(b, n, t, root);
  hold_until(until);
}
void EmulatedLinkCommunicator::broadcast(const void* s, void* r, size_t n, DType t, int root) {
  const auto until = deadline(double(n) * double(dtype_size(t)));
  inner_.broadcast(s, r, n, t, root);
  hold_until(until);
}
std::unique_ptr<CommHandle> EmulatedLinkCommunicator::all_reduce_async(const void* s, void* r, size_t n, DType t,
                                                                       ReduceOp op) {
  const auto until = deadline(all_reduce_bytes(n, t, size()));
  return std::make_unique<LinkHandle>(*this, inner_.all_reduce_async(s, r, n, t, op), until);
}
std::unique_ptr<CommHandle> EmulatedLinkCommunicator::all_gather_async(const void* s, void* r, size_t n, DType t) {
  const auto until = deadline(gather_bytes(n * size_t(size()), t, size()));
  return std::make_unique<LinkHandle>(*this, inner_.all_gather_async(s, r, n, t), until);
}
std::unique_ptr<CommHandle> EmulatedLinkCommunicator::reduce_scatter_async(const void* s, void* r, size_t n, DType t,
                                                                           ReduceOp op) {
  const auto until = deadline(gather_bytes(n * size_t(size()), t, size()));
  return std::make_unique<LinkHandle>(*this, inner_.reduce_scatter_async(s, r, n, t, op), until);
}
std::unique_ptr<CommHandle> EmulatedLinkCommunicator::broadcast_async(void* b, size_t n, DType t, int root) {
  const auto until = deadline(double(n) * double(dtype_size(t)));
  return std::make_unique<LinkHandle>(*this, inner_.broadcast_async(b, n, t, root), until);
}

std::unique_ptr<Communicator> EmulatedLinkCommunicator::split(int color, int key, const std::string& name) {
  const int node = nodes_[size_t(rank())];
  return std::make_unique<EmulatedLinkCommunicator>(inner_.split(color, key, name), node, link_, stats_);
}

}  // namespace dtb
