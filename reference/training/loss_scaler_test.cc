// Loss-scaler arithmetic (reference/training/loss_scaler.h) against GradScaler's semantics.
#include "reference/training/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/error.h"

namespace dtb {
namespace {

// The worked case: init 65536, growth every 2 good steps, overflow pattern
// [no, no, yes, no, no, no, no] -> scales after each update 65536, 131072, 65536, 65536,
// 131072, 131072, 262144, and one skipped step.
TEST(LossScaler, GrowsAndBacksOffAsGradScaler) {
  LossScalerConfig c;
  c.enabled = true;
  c.growth_interval = 2;
  LossScaler s(c);
  const std::vector<bool> overflow = {false, false, true, false, false, false, false};
  const std::vector<double> want = {65536, 131072, 65536, 65536, 131072, 131072, 262144};
  for (size_t i = 0; i < overflow.size(); ++i) {
    s.update(overflow[i]);
    EXPECT_EQ(s.scale(), want[i]) << "after update " << i;
  }
  EXPECT_EQ(s.skipped_steps(), 1);
}

// Growing every step with no overflow never makes the scale infinite: 111 doublings from
// 2^16 reach 2^127, float32's largest power of two, and it stays there.
TEST(LossScaler, NeverGrowsPastFloat32) {
  LossScalerConfig c;
  c.enabled = true;
  c.growth_interval = 1;
  LossScaler s(c);
  for (int i = 0; i < 111; ++i) s.update(false);
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 127));
  for (int i = 0; i < 50; ++i) s.update(false);
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isfinite(float(s.scale())));
}

TEST(LossScaler, DisabledIsOneAndBadSettingsAreRefused) {
  LossScaler off{LossScalerConfig{}};
  off.update(true);
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_EQ(off.skipped_steps(), 0);
  LossScalerConfig c;
  c.enabled = true;
  c.backoff_factor = 1.5;
  EXPECT_THROW(LossScaler{c}, InputError);
  c.backoff_factor = 0.5;
  c.growth_interval = 0;
  EXPECT_THROW(LossScaler{c}, InputError);
}

}  // namespace
}  // namespace dtb
