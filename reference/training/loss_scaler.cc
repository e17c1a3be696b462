#include "reference/training/loss_scaler.h"

#include <cmath>
#include <string>

#include "kernels/error.h"

namespace dtb {

void validate_loss_scaler(const LossScalerConfig& c) {
  if (!(c.init_scale > 0) || !std::isfinite(c.init_scale) || float(c.init_scale) > 0x1.0p127f)
    throw InputError("loss scaler init_scale = " + std::to_string(c.init_scale) + " must be in (0, 2^127]");
  if (!(c.growth_factor > 1) || !std::isfinite(c.growth_factor))
    throw InputError("loss scaler growth_factor = " + std::to_string(c.growth_factor) + " must be > 1");
  if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
    throw InputError("loss scaler backoff_factor = " + std::to_string(c.backoff_factor) + " must be in (0, 1)");
  if (c.growth_interval < 1)
    throw InputError("loss scaler growth_interval = " + std::to_string(c.growth_interval) + " must be >= 1");
}

void validate_loss_scaler_state(const LossScalerConfig& c, const LossScalerState& s) {
  if (!(s.scale > 0) || !std::isfinite(float(s.scale)))
    throw InputError("loss scaler state: scale = " + std::to_string(s.scale) + " must be positive and finite in float32");
  if (s.growth_tracker < 0 || s.growth_tracker >= c.growth_interval)
    throw InputError("loss scaler state: growth tracker = " + std::to_string(s.growth_tracker) +
                     " is outside [0, growth_interval = " + std::to_string(c.growth_interval) + ")");
  if (s.skipped < 0) throw InputError("loss scaler state: skipped steps = " + std::to_string(s.skipped) + " < 0");
}

LossScaler::LossScaler(const LossScalerConfig& cfg) : cfg_(cfg), scale_(cfg.init_scale) {
  if (cfg.enabled) validate_loss_scaler(cfg);
}

void LossScaler::set_state(const LossScalerState& s) {
  DTB_CHECK(s.scale > 0 && std::isfinite(float(s.scale)) && s.growth_tracker >= 0 &&
                s.growth_tracker < cfg_.growth_interval && s.skipped >= 0,
            "LossScaler::set_state: an invalid state (validate_loss_scaler_state first)");
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
  skipped_ = s.skipped;
}

void LossScaler::update(bool found_inf) {
  if (!cfg_.enabled) return;
  if (found_inf) {
    scale_ *= cfg_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ == cfg_.growth_interval) {
    // The scale lives in float32 (as GradScaler's): grow only while it stays finite there.
    const double grown = scale_ * cfg_.growth_factor;
    if (std::isfinite(float(grown))) scale_ = grown;
    growth_tracker_ = 0;
  }
}

}  // namespace dtb
