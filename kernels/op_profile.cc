// OpFamily names and the host OpClock (kernels/op_profile.h).
#include "kernels/op_profile.h"

#include "kernels/backend.h"
#include "kernels/timer.h"

namespace dtb {

const char* to_string(OpFamily f) {
  switch (f) {
    case OpFamily::gemm: return "gemm";
    case OpFamily::attention: return "attention";
    case OpFamily::pointwise: return "pointwise";
    case OpFamily::loss: return "loss";
    case OpFamily::optimizer: return "optimizer";
    case OpFamily::memory: return "memory";
  }
  return "?";
}

namespace {

// steady_clock at begin() and end(); the ops ran in between.
class HostOpClock final : public OpClock {
 public:
  void begin(OpFamily) override { t0_ = now_seconds(); }
  void end(OpFamily f) override {
    seconds_[int(f)] += now_seconds() - t0_;
    ++calls_[int(f)];
  }
  std::array<double, kNumOpFamilies> seconds() override { return seconds_; }
  void reset() override {
    OpClock::reset();
    seconds_ = {};
  }

 private:
  double t0_ = 0;
  std::array<double, kNumOpFamilies> seconds_{};
};

}  // namespace

std::unique_ptr<OpClock> make_host_op_clock() { return std::make_unique<HostOpClock>(); }

std::unique_ptr<OpClock> Backend::make_op_clock() { return make_host_op_clock(); }

}  // namespace dtb
