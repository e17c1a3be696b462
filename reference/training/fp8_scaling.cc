#include "reference/training/fp8_scaling.h"

#include <cmath>
#include <limits>

#include "kernels/error.h"

namespace dtb {

AmaxComputeAlgo parse_amax_compute_algo(const std::string& text, const std::string& key) {
  if (text == "max") return AmaxComputeAlgo::max;
  if (text == "most_recent") return AmaxComputeAlgo::most_recent;
  throw InputError(key + " = '" + text + "': must be \"max\" or \"most_recent\"");
}

const char* to_string(AmaxComputeAlgo a) { return a == AmaxComputeAlgo::max ? "max" : "most_recent"; }

void validate_fp8_delayed_scaling(const Fp8DelayedScalingConfig& c) {
  if (c.margin < 0 || c.margin > 64)
    throw InputError("fp8 margin = " + std::to_string(c.margin) + " must be in [0, 64]");
  if (c.amax_history_len < 1 || c.amax_history_len > (1 << 20))
    throw InputError("fp8 amax_history_len = " + std::to_string(c.amax_history_len) + " must be in [1, 2^20]");
}

Fp8TensorScaling::Fp8TensorScaling(int history_len) {
  DTB_CHECK(history_len >= 1, "Fp8TensorScaling: an amax history of " + std::to_string(history_len) + " values");
  amax_history.assign(size_t(history_len), 0.0f);
}

void Fp8TensorScaling::record(float amax) { amax_history[0] = std::fmax(amax_history[0], amax); }

void Fp8TensorScaling::update(const Fp8DelayedScalingConfig& cfg, Fp8Format f, float reduced) {
  DTB_CHECK(amax_history.size() == size_t(cfg.amax_history_len),
            "Fp8TensorScaling::update: the history's length differs from the config's amax_history_len");
  std::vector<float>& h = amax_history;
  const size_t n = h.size();
  const float last = reduced != 0.0f ? reduced : h[0];
  float window_max = 0.0f;
  if (last != 0.0f) {  // TE's kernel_bulk: a tensor that was not quantized keeps its history
    for (size_t i = 0; i < n; ++i) {
      const float a = i + 1 < n ? h[i + 1] : last;
      window_max = std::fmax(window_max, a);
      h[i] = i > 0 ? a : 0.0f;
    }
  }
  const float amax = cfg.amax_compute_algo == AmaxComputeAlgo::most_recent ? last : window_max;
  // scaled_max = fp8_dtype_max * std::pow(2.f, -margin), in float as TE computes it.
  const float scaled_max = fp8_max(f) * std::pow(2.0f, -float(cfg.margin));
  float s = std::isfinite(amax) && amax > 0.0f ? scaled_max / amax : scale;
  if (std::isinf(s)) s = std::numeric_limits<float>::max();
  scale = s;
  scale_inv = 1.0f / s;
}

}  // namespace dtb
