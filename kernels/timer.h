// Wall-clock timing for CPU work (steady_clock). GPU work is timed with CUDA events
// instead (CudaTimer, kernels/cuda/cuda_device.h). Units: seconds, as double.
#pragma once
#include <chrono>

namespace dtb {

/// Seconds since an arbitrary fixed point, monotonic (std::chrono::steady_clock).
inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// Measures elapsed seconds from construction (or restart()).
class Stopwatch {
 public:
  Stopwatch() : t0_(now_seconds()) {}
  void restart() { t0_ = now_seconds(); }
  double elapsed() const { return now_seconds() - t0_; }

 private:
  double t0_;
};

}  // namespace dtb
