// CudaOpClock (kernels/cuda/op_clock.h): begin/end event pairs, resolved in seconds().
#include "kernels/cuda/op_clock.h"

#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace dtb {
namespace {

class CudaOpClock final : public OpClock {
 public:
  explicit CudaOpClock(cudaStream_t s) : stream_(s) {}
  ~CudaOpClock() override {
    for (cudaEvent_t e : pool_) (void)cudaEventDestroy(e);
  }
  void begin(OpFamily) override { open_ = record(); }
  void end(OpFamily f) override {
    pairs_.push_back({int(f), open_, record()});
    ++calls_[int(f)];
  }
  std::array<double, kNumOpFamilies> seconds() override {
    if (!pairs_.empty()) {
      DTB_CUDA_CHECK(cudaEventSynchronize(pool_[size_t(pairs_.back().stop)]));
      for (const Pair& p : pairs_) {
        float ms = 0;
        DTB_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[size_t(p.start)], pool_[size_t(p.stop)]));
        seconds_[size_t(p.family)] += 1e-3 * double(ms);
      }
      pairs_.clear();
      used_ = 0;  // every recorded event has completed: all may be reused
    }
    return seconds_;
  }
  void reset() override {
    seconds();  // waits for and recycles the events in flight
    OpClock::reset();
    seconds_ = {};
  }

 private:
  struct Pair {
    int family, start, stop;
  };
  // The index of a pool event recorded on the stream now.
  int record() {
    if (used_ == pool_.size()) {
      cudaEvent_t e;
      DTB_CUDA_CHECK(cudaEventCreate(&e));
      pool_.push_back(e);
    }
    DTB_CUDA_CHECK(cudaEventRecord(pool_[used_], stream_));
    return int(used_++);
  }
  cudaStream_t stream_;
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  int open_ = 0;
  std::vector<Pair> pairs_;
  std::array<double, kNumOpFamilies> seconds_{};
};

}  // namespace

std::unique_ptr<OpClock> make_cuda_op_clock(cudaStream_t stream) { return std::make_unique<CudaOpClock>(stream); }

}  // namespace dtb
