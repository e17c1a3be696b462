// Tests of reference/analytic/gemm_model.h: tile and wave quantization, the L2-starved small tile,
// the memory-bound floor, the fused attention's causal half and its head-dimension fractions,
// and the refusals. Every figure is chosen so that the expected time is exact in binary
// floating point (powers of two, small integers), so the checks are equalities up to the last
// place of one division (EXPECT_DOUBLE_EQ: 4 ulps).
#include "reference/analytic/gemm_model.h"

#include <gtest/gtest.h>

#include "kernels/error.h"

namespace dtb {
namespace {

// sm_count SMs of one tile each, 2^40 FLOP/s at fraction 1 (2^40 / sms per SM), unlimited L2
// and HBM (1e30 bytes/s), no call cost.
GemmShapeModel unit_model(int sms, std::vector<GemmTile> tiles) {
  GemmShapeModel g;
  g.sm_count = sms;
  g.tiles = std::move(tiles);
  g.peak_flops = {0x1p40, 0x1p40, 0x1p40};
  g.gemm_fraction = {1, 1, 1};
  g.l2_bytes_per_s = 1e30;
  g.memory_bytes_per_s = 1e30;
  g.attention = {{64, 0.5, 0.25}, {128, 1, 0.5}};
  return g;
}

// One tile's time for K: 2 tm tn K FLOPs at an SM's rate 2^40 / sms.
double tile_s(const GemmShapeModel& g, GemmTile t, int64_t K) { return 2.0 * t.m * t.n * K / (0x1p40 / g.sm_count); }

TEST(GemmShapeModel, WaveQuantization) {
  // 108 tiles fill one wave of 108 SMs; one more tile takes a second whole wave.
  const GemmShapeModel g = unit_model(108, {{256, 128}});
  const double one = gemm_seconds(g, 256 * 108, 128, 1024, Precision::bf16);
  EXPECT_DOUBLE_EQ(one, tile_s(g, {256, 128}, 1024));
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 256 * 109, 128, 1024, Precision::bf16), 2 * one);
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 256 * 216, 128, 1024, Precision::bf16), 2 * one);
}

TEST(GemmShapeModel, TileQuantization) {
  // One SM: M = 257 pads to two row tiles, twice M = 256's time for 1/256 more work.
  const GemmShapeModel g = unit_model(1, {{256, 128}});
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 257, 128, 64, Precision::fp16), 2 * gemm_seconds(g, 256, 128, 64, Precision::fp16));
}

TEST(GemmShapeModel, PicksTheTileThatQuantizesLeast) {
  // A 64 x 64 GEMM on many SMs: the 64x64 tile (one tile) is 8 times faster than a padded 256x128.
  const GemmShapeModel g = unit_model(108, {{256, 128}, {64, 64}});
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 64, 64, 512, Precision::bf16), tile_s(g, {64, 64}, 512));
  // A full wave of large tiles: the larger tile wins the tie and the time is the full wave's.
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 256 * 108, 128, 512, Precision::bf16), tile_s(g, {256, 128}, 512));
}

TEST(GemmShapeModel, SmallTilesStarveOnL2) {
  // L2 at 2^30 B/s over 1 SM: a 64x64 tile's K step reads (64 + 64) x 2 bytes = 256 B in 2^-22 s,
  // its 2 x 64 x 64 = 8192 FLOPs take 2^13 / 2^40 = 2^-27 s: L2-bound, 32 times the compute.
  GemmShapeModel g = unit_model(1, {{64, 64}});
  g.l2_bytes_per_s = 0x1p30;
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 64, 64, 8, Precision::bf16), 8 * 256.0 / 0x1p30);
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 64, 64, 8, Precision::bf16), 32 * tile_s(g, {64, 64}, 8));
}

TEST(GemmShapeModel, MemoryBoundFloorAndAlpha) {
  // K = 1: 2 M N FLOPs against 2 (M + N + M N) bytes at 2^30 B/s: the bytes decide; alpha adds.
  GemmShapeModel g = unit_model(108, {{128, 128}});
  g.memory_bytes_per_s = 0x1p30;
  g.gemm_alpha_s = {0, 0x1p-10, 0};
  const double bytes = 2.0 * (4096 + 4096 + 4096.0 * 4096);
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 4096, 4096, 1, Precision::bf16), 0x1p-10 + bytes / 0x1p30);
}

TEST(GemmShapeModel, PrecisionPicksItsFraction) {
  GemmShapeModel g = unit_model(1, {{128, 128}});
  g.gemm_fraction = {0.5, 1, 1};
  EXPECT_DOUBLE_EQ(gemm_seconds(g, 128, 128, 64, Precision::fp32), 2 * gemm_seconds(g, 128, 128, 64, Precision::bf16));
}

TEST(FusedAttention, CausalDoesHalfTheSquarePlusTheDiagonal) {
  // s = 128 n on many (b, h) blocks (past 64 per SM: the balanced bound, exact here): causal
  // visits n (n + 1) / 2 of the n^2 tile pairs, forward and backward alike.
  const GemmShapeModel g = unit_model(4, {{128, 128}});
  for (int64_t n : {1, 4, 16}) {
    for (bool fwd : {true, false}) {
      const double full = fused_attention_seconds(g, 64, 16, 128 * n, 128 * n, 128, false, fwd, Precision::bf16);
      const double causal = fused_attention_seconds(g, 64, 16, 128 * n, 128 * n, 128, true, fwd, Precision::bf16);
      EXPECT_DOUBLE_EQ(causal / full, double(n + 1) / (2.0 * n)) << "n " << n << (fwd ? " forward" : " backward");
    }
  }
}

TEST(FusedAttention, PairFlopsAndWaves) {
  // One (b, h) on one SM, head dim 128 (fraction 1 forward, 0.5 backward), 2 x 2 tiles non-causal:
  // forward 4 pairs of 4 x 128^2 x 128 FLOPs, backward 4 pairs of 10 x 128^2 x 128 at half rate.
  const GemmShapeModel g = unit_model(1, {{128, 128}});
  const double pair = 128.0 * 128 * 128 / 0x1p40;
  EXPECT_DOUBLE_EQ(fused_attention_seconds(g, 1, 1, 256, 256, 128, false, true, Precision::bf16), 4 * 4 * pair);
  EXPECT_DOUBLE_EQ(fused_attention_seconds(g, 1, 1, 256, 256, 128, false, false, Precision::bf16), 4 * 10 * pair / 0.5);
  // Causal on 2 SMs: query tiles of 1 and 2 pairs run side by side: the longer one, 2 pairs.
  const GemmShapeModel g2 = unit_model(2, {{128, 128}});
  EXPECT_DOUBLE_EQ(fused_attention_seconds(g2, 1, 1, 256, 256, 128, true, true, Precision::bf16), 2 * 4 * pair * 2);
}

TEST(FusedAttention, HeadDimFractionInterpolates) {
  // Fractions 0.5 at 64 and 1 at 128 (forward): 0.75 at 96, clamped outside. Time per pair is
  // proportional to d / fraction(d).
  const GemmShapeModel g = unit_model(1, {{128, 128}});
  auto t = [&](int64_t d) { return fused_attention_seconds(g, 1, 1, 128, 128, d, false, true, Precision::bf16); };
  const double pair = 4.0 * 128 * 128 / 0x1p40;
  EXPECT_DOUBLE_EQ(t(96), pair * 96 / 0.75);
  EXPECT_DOUBLE_EQ(t(32), pair * 32 / 0.5);
  EXPECT_DOUBLE_EQ(t(256), pair * 256 / 1.0);
}

TEST(MaterializedAttention, BatchedGemmsAndTheSoftmaxPasses) {
  // One SM of 128x128 tiles at 2^40 FLOP/s, HBM 2^40 bytes/s; b 2 x 2 heads of 128 x 128 scores,
  // d 64 in bf16: every GEMM has M = 4 x 128 = 512 (four row tiles, four waves); N = 64 pads to
  // one 128-wide tile. Forward: Q K^T (K = 64) and P V (K = 128), the softmax reading and writing
  // 4 x 128^2 two-byte scores; backward: dP = dO V^T (K = 64), dV, dQ, dK (K = 128) and the
  // softmax's backward reading P and dP and writing dS.
  GemmShapeModel g = unit_model(1, {{128, 128}});
  g.memory_bytes_per_s = 0x1p40;
  const double scores = 4.0 * 128 * 128, k64 = tile_s(g, {128, 128}, 64), k128 = tile_s(g, {128, 128}, 128);
  EXPECT_DOUBLE_EQ(materialized_attention_seconds(g, 2, 2, 128, 128, 64, true, Precision::bf16),
                   4 * k64 + 4 * k128 + 2 * 2 * scores / 0x1p40);
  EXPECT_DOUBLE_EQ(materialized_attention_seconds(g, 2, 2, 128, 128, 64, false, Precision::bf16),
                   4 * k64 + 12 * k128 + 3 * 2 * scores / 0x1p40);
}

TEST(GemmShapeModel, Refusals) {
  GemmShapeModel g = unit_model(108, {{128, 128}});
  EXPECT_THROW(gemm_seconds(g, 0, 1, 1, Precision::bf16), InputError);
  EXPECT_THROW(fused_attention_seconds(g, 1, 1, 0, 1, 64, true, true, Precision::bf16), InputError);
  GemmShapeModel bad = g;
  bad.sm_count = 0;
  EXPECT_THROW(validate_gemm_shape_model(bad), InputError);
  bad = g, bad.gemm_fraction[1] = 1.5;
  EXPECT_THROW(validate_gemm_shape_model(bad), InputError);
  bad = g, bad.tiles.clear();
  EXPECT_THROW(validate_gemm_shape_model(bad), InputError);
  bad = g, bad.attention = {{128, 1, 1}, {64, 1, 1}};
  EXPECT_THROW(validate_gemm_shape_model(bad), InputError);
  EXPECT_NO_THROW(validate_gemm_shape_model(g));
}

}  // namespace
}  // namespace dtb
