// Dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision Training", Sec. 3.2) with
// the semantics of PyTorch's torch.amp.GradScaler: the loss is multiplied by the scale
// before backward and the gradients divided by it before clipping and the optimizer step;
// a step whose gradients hold an inf or NaN on ANY rank is skipped by every rank and the
// scale multiplied by backoff_factor; after growth_interval consecutive good steps it is
// multiplied by growth_factor — unless that would overflow float32 (the largest finite
// power of two is 2^127), as GradScaler keeps the scale finite.
#pragma once
#include <cstdint>

namespace dtb {

/// GradScaler's constructor arguments and defaults.
struct LossScalerConfig {
  bool enabled = false;
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
};

/// Throws InputError naming the value unless init_scale > 0 and finite, growth_factor > 1,
/// 0 < backoff_factor < 1, growth_interval >= 1.
void validate_loss_scaler(const LossScalerConfig& cfg);

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& cfg);
  const LossScalerConfig& config() const { return cfg_; }
  /// The current scale (1 when disabled).
  double scale() const { return cfg_.enabled ? scale_ : 1.0; }
  /// After a step's gradients are known: `found_inf` (agreed across all ranks) backs the
  /// scale off and counts a skipped step; a good step counts towards growth.
  void update(bool found_inf);
  int64_t skipped_steps() const { return skipped_; }
  int64_t good_steps_in_a_row() const { return growth_tracker_; }

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
};

}  // namespace dtb
