// Memory accounting of the CPU Device and Tensor: every byte tagged by category and tier,
// current and peak tracked, freed bytes returned.
#include <gtest/gtest.h>

#include "kernels/tensor.h"

namespace dtb {

TEST(Device, TracksCurrentAndPeakPerCategory) {
  CpuDevice dev;
  {
    Tensor p = Tensor::zeros(dev, {10, 4}, DType::f32, MemCategory::param);
    Tensor a = Tensor::empty(dev, {3}, DType::f64, MemCategory::activation);
    EXPECT_EQ(dev.stats().bytes(Tier::device, MemCategory::param), 160u);
    EXPECT_EQ(dev.stats().bytes(Tier::device, MemCategory::activation), 24u);
    EXPECT_EQ(dev.stats().current_total[int(Tier::device)], 184u);
    {
      Tensor b = Tensor::empty(dev, {100}, DType::f32, MemCategory::activation);
      EXPECT_EQ(dev.stats().bytes(Tier::device, MemCategory::activation), 424u);
    }
    EXPECT_EQ(dev.stats().bytes(Tier::device, MemCategory::activation), 24u);
    EXPECT_EQ(dev.stats().peak_bytes(Tier::device, MemCategory::activation), 424u);
    EXPECT_EQ(dev.stats().peak_total[int(Tier::device)], 584u);
  }
  EXPECT_EQ(dev.stats().current_total[int(Tier::device)], 0u);
  dev.reset_peaks();
  EXPECT_EQ(dev.stats().peak_total[int(Tier::device)], 0u);
}

TEST(Device, HostTierAccountedApart) {
  CpuDevice dev;
  Tensor m = Tensor::zeros(dev, {8}, DType::f32, MemCategory::optimizer_state, Tier::host);
  EXPECT_EQ(dev.stats().bytes(Tier::host, MemCategory::optimizer_state), 32u);
  EXPECT_EQ(dev.stats().bytes(Tier::device, MemCategory::optimizer_state), 0u);
}

TEST(Tensor, ShapeDtypeAndZeros) {
  CpuDevice dev;
  Tensor t = Tensor::zeros(dev, {2, 3, 5}, DType::f64, MemCategory::workspace);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.bytes(), 240u);
  EXPECT_EQ(t.dim(-1), 5);
  const double* d = t.data<double>();
  for (int i = 0; i < 30; ++i) EXPECT_EQ(d[i], 0.0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);  // aligned for SIMD
  Tensor copy = t;  // shared storage: freed once
  EXPECT_EQ(copy.raw(), t.raw());
}

}  // namespace dtb
