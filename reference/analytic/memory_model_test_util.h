// The memory plan's tests' shared pieces (memory_model_test.cc, memory_model_cp_test.cc): a small
// GPT plan, a stand-in communicator whose collectives only copy (the values are meaningless, the
// allocations are the trainer's), and the comparison of a plan with a CpuDevice's peaks.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "reference/analytic/memory_model.h"

namespace dtb {
namespace memory_model_test {

inline PlanConfig small_plan(int tp, int pp, int dp, const std::string& schedule = "1f1b", int v = 1, int m = 1) {
  PlanConfig c;
  c.model = GptConfig{8, 64, 4, 32, 256};
  c.layout.tp = tp;
  c.layout.pp = pp;
  c.layout.dp = dp;
  c.layout.schedule = schedule;
  c.layout.virtual_stages = v;
  c.layout.micro_batches = m;
  c.micro_batch_size = 2;
  c.seq_len = 16;
  return c;
}

// A TP group stand-in of any size for one process: collectives copy send to recv (all-gather
// into this rank's block, reduce-scatter from it).
class CopyComm final : public Communicator {
 public:
  CopyComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "tp-stand-in"; }
  std::string backend() const override { return "none"; }
  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp) override { copy(s, r, n, t); }
  void all_gather(const void* s, void* r, size_t n, DType t) override {
    copy(s, static_cast<char*>(r) + size_t(rank_) * n * dtype_size(t), n, t);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp) override {
    copy(static_cast<const char*>(s) + size_t(rank_) * n * dtype_size(t), r, n, t);
  }
  void broadcast(void*, size_t, DType, int) override {}
  void broadcast(const void* s, void* r, size_t n, DType t, int) override { copy(s, r, n, t); }
  void send(const void*, size_t, DType, int, int) override { no(); }
  void recv(void*, size_t, DType, int, int) override { no(); }
  // The CP ring's exchange (a stand-in CP group): the block comes back as sent.
  void sendrecv(const void* s, void* r, size_t n, DType t, int, int, int) override { copy(s, r, n, t); }
  void barrier() override {}
  void all_to_allv(const void*, const std::vector<size_t>&, const std::vector<size_t>&, void*,
                   const std::vector<size_t>&, const std::vector<size_t>&, DType) override {
    no();
  }
  std::unique_ptr<CommHandle> all_reduce_async(const void*, void*, size_t, DType, ReduceOp) override { no(); }
  std::unique_ptr<CommHandle> all_gather_async(const void*, void*, size_t, DType) override { no(); }
  std::unique_ptr<CommHandle> reduce_scatter_async(const void*, void*, size_t, DType, ReduceOp) override { no(); }
  std::unique_ptr<CommHandle> broadcast_async(void*, size_t, DType, int) override { no(); }
  std::unique_ptr<CommHandle> send_async(const void*, size_t, DType, int, int) override { no(); }
  std::unique_ptr<CommHandle> recv_async(void*, size_t, DType, int, int) override { no(); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override { no(); }

 private:
  static void copy(const void* s, void* r, size_t n, DType t) {
    if (s != r) std::memcpy(r, s, n * dtype_size(t));
  }
  [[noreturn]] static void no() { throw std::logic_error("CopyComm: not used here"); }
  int rank_, size_;
};

// Every category the plan predicts, compared with what `dev` saw at its peak (comm_buffer,
// the transient copies, is not planned).
inline void expect_plan_matches(const RankPlan& r, const CpuDevice& dev) {
  const MemoryStats& s = dev.stats();
  for (int cat = 0; cat < kNumMemCategories; ++cat)
    for (int tier = 0; tier < kNumTiers; ++tier) {
      if (MemCategory(cat) == MemCategory::comm_buffer) continue;
      EXPECT_EQ(r.mem.get(Tier(tier), MemCategory(cat)), s.peak_bytes(Tier(tier), MemCategory(cat)))
          << to_string(MemCategory(cat)) << " on " << to_string(Tier(tier));
    }
}

}  // namespace memory_model_test
}  // namespace dtb
