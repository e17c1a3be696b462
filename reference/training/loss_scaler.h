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

/// What a LossScaler holds between steps, as a training checkpoint saves it
/// (reference/checkpoint/checkpoint.h; GradScaler.state_dict(): scale, _growth_tracker).
struct LossScalerState {
  double scale = 65536.0;      // the current scale (the stored one, also when disabled)
  int64_t growth_tracker = 0;  // good steps in a row since the last growth or backoff
  int64_t skipped = 0;         // steps skipped so far (inf or NaN gradients)
};

/// Throws InputError naming the value unless `s` can continue a scaler of `cfg`: scale > 0
/// and finite in float32, 0 <= growth_tracker < growth_interval, skipped >= 0.
void validate_loss_scaler_state(const LossScalerConfig& cfg, const LossScalerState& s);

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
  /// The state to checkpoint: with set_state() on a scaler of the same config, the next
  /// update() and scale() are bitwise those of this one.
  LossScalerState state() const { return {scale_, growth_tracker_, skipped_}; }
  /// Continues from a checkpointed state (validate_loss_scaler_state first: an invalid
  /// state aborts).
  void set_state(const LossScalerState& s);

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
};

}  // namespace dtb
