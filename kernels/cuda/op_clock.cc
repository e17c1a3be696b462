// CudaOpClock (kernels/cuda/op_clock.h): begin/end event pairs, folded into seconds as they
// complete, so the events in use are those of the work still queued.
#include "kernels/cuda/op_clock.h"

#include <deque>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace dtb {
namespace {

class CudaOpClock final : public OpClock {
 public:
  explicit CudaOpClock(cudaStream_t s) : stream_(s) {}
  ~CudaOpClock() override {
    for (const Pair& p : pairs_) (void)cudaEventDestroy(p.start), (void)cudaEventDestroy(p.stop);
    if (open_) (void)cudaEventDestroy(open_);
    for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
  }
  void begin(OpFamily) override { open_ = record(); }
  void end(OpFamily f) override {
    pairs_.push_back({int(f), open_, record()});
    open_ = nullptr;
    ++calls_[int(f)];
  }
  std::array<double, kNumOpFamilies> seconds() override {
    if (!pairs_.empty()) DTB_CUDA_CHECK(cudaEventSynchronize(pairs_.back().stop));
    fold(true);
    return seconds_;
  }
  void reset() override {
    seconds();  // waits for and recycles the events in flight
    OpClock::reset();
    seconds_ = {};
  }

 private:
  struct Pair {
    int family;
    cudaEvent_t start, stop;
  };
  // Adds the pairs that have completed, oldest first, to seconds_ and frees their events;
  // `all`: every pair has completed (the caller waited).
  void fold(bool all) {
    while (!pairs_.empty()) {
      const Pair& p = pairs_.front();
      if (!all) {
        const cudaError_t q = cudaEventQuery(p.stop);
        if (q == cudaErrorNotReady) break;
        DTB_CUDA_CHECK(q);
      }
      float ms = 0;
      DTB_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
      seconds_[size_t(p.family)] += 1e-3 * double(ms);
      free_.push_back(p.start);
      free_.push_back(p.stop);
      pairs_.pop_front();
    }
  }
  // An event recorded on the stream now: a free one, else one freed by the pairs that have
  // completed, else a new one (the pool grows to the events of the work in flight).
  cudaEvent_t record() {
    if (free_.empty()) fold(false);
    cudaEvent_t e;
    if (free_.empty()) {
      DTB_CUDA_CHECK(cudaEventCreate(&e));
    } else {
      e = free_.back();
      free_.pop_back();
    }
    DTB_CUDA_CHECK(cudaEventRecord(e, stream_));
    return e;
  }
  cudaStream_t stream_;
  std::vector<cudaEvent_t> free_;
  std::deque<Pair> pairs_;
  cudaEvent_t open_ = nullptr;
  std::array<double, kNumOpFamilies> seconds_{};
};

}  // namespace

std::unique_ptr<OpClock> make_cuda_op_clock(cudaStream_t stream) { return std::make_unique<CudaOpClock>(stream); }

}  // namespace dtb
