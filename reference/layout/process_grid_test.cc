// The process grid against Megatron-LM's worked 16-rank example, and every refused layout
// with the numbers in its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "kernels/error.h"
#include "reference/layout/process_grid.h"

namespace dtb {
namespace {

TEST(ProcessGrid, MegatronSixteenRankExample) {
  ParallelLayout l;
  l.tp = 2, l.pp = 4, l.dp = 2;
  EXPECT_EQ(tp_group(0, l), (std::vector<int>{0, 1}));
  EXPECT_EQ(tp_group(15, l), (std::vector<int>{14, 15}));
  EXPECT_EQ(dp_group(0, l), (std::vector<int>{0, 2}));
  EXPECT_EQ(dp_group(5, l), (std::vector<int>{5, 7}));
  EXPECT_EQ(pp_group(0, l), (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(pp_group(14, l), (std::vector<int>{2, 6, 10, 14}));
  EXPECT_EQ(grid_coord(13, l), (GridCoord{1, 0, 3}));
}

TEST(ProcessGrid, CoordinatesRoundTripAndGroupsPartitionTheWorld) {
  for (auto [tp, dp, pp] : {std::tuple{1, 1, 1}, {2, 2, 2}, {4, 2, 1}, {1, 3, 2}, {2, 1, 4}}) {
    ParallelLayout l;
    l.tp = tp, l.dp = dp, l.pp = pp;
    std::set<std::vector<int>> tps, dps, pps;
    for (int r = 0; r < l.world(); ++r) {
      EXPECT_EQ(grid_rank(grid_coord(r, l), l), r);
      tps.insert(tp_group(r, l));
      dps.insert(dp_group(r, l));
      pps.insert(pp_group(r, l));
      // Every group holds the rank itself.
      for (const auto& g : {tp_group(r, l), dp_group(r, l), pp_group(r, l)})
        EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
    }
    // world / size disjoint groups of each kind.
    EXPECT_EQ(int(tps.size()), l.world() / tp);
    EXPECT_EQ(int(dps.size()), l.world() / dp);
    EXPECT_EQ(int(pps.size()), l.world() / pp);
  }
}

// Megatron-Core's default order "tp-cp-ep-dp-pp" (parallel_state.py): 8 ranks at tp 2, cp 2,
// dp 2; and cp = 1 leaves every rank where the "tp-dp-pp" grid put it.
TEST(ProcessGrid, ContextParallelBetweenTensorAndDataParallel) {
  ParallelLayout l;
  l.tp = 2, l.cp = 2, l.dp = 2;
  EXPECT_EQ(l.world(), 8);
  EXPECT_EQ(tp_group(2, l), (std::vector<int>{2, 3}));
  EXPECT_EQ(cp_group(0, l), (std::vector<int>{0, 2}));
  EXPECT_EQ(cp_group(5, l), (std::vector<int>{5, 7}));
  EXPECT_EQ(dp_group(0, l), (std::vector<int>{0, 4}));
  EXPECT_EQ(dp_group(3, l), (std::vector<int>{3, 7}));
  EXPECT_EQ(dp_cp_group(0, l), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(dp_cp_group(7, l), (std::vector<int>{1, 3, 5, 7}));
  GridCoord c{0, 1, 0};
  c.cp = 1;
  EXPECT_EQ(grid_coord(6, l), c);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(grid_rank(grid_coord(r, l), l), r);
  l.pp = 2;  // 16 ranks: PP slowest
  EXPECT_EQ(pp_group(1, l), (std::vector<int>{1, 9}));
  EXPECT_EQ(dp_cp_group(9, l), (std::vector<int>{9, 11, 13, 15}));
  for (auto [tp, dp, pp] : {std::tuple{2, 2, 2}, {4, 2, 1}, {1, 3, 2}}) {
    ParallelLayout one;
    one.tp = tp, one.dp = dp, one.pp = pp;
    for (int r = 0; r < one.world(); ++r) {
      EXPECT_EQ(grid_coord(r, one), (GridCoord{r % tp, (r / tp) % dp, r / (tp * dp)}));
      EXPECT_EQ(dp_cp_group(r, one), dp_group(r, one));
    }
  }
}

std::string refusal(ParallelLayout l, GptConfig m, int global_batch, int world) {
  try {
    validate_layout(l, m, global_batch, world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ProcessGrid, RefusedLayoutsNameTheirNumbers) {
  const GptConfig model{4, 64, 4, 32, 256};
  ParallelLayout l;
  EXPECT_EQ(refusal(l, model, 8, 1), "");
  l.dp = 4;  // global batch 10 over 4 DP ranks
  EXPECT_EQ(refusal(l, model, 10, 4), "global batch 10 is not divisible by data_parallel (4) x micro_batches (1)");
  l = {};
  l.tp = 4;  // 6 heads over 4 TP ranks
  EXPECT_EQ(refusal(l, {4, 48, 6, 32, 256}, 8, 4), "model.NH = 6 heads are not divisible by tensor_parallel = 4");
  l = {};
  l.pp = 2;  // 5 layers over 2 stages
  EXPECT_EQ(refusal(l, {5, 64, 4, 32, 256}, 8, 2),
            "model.L = 5 layers are not divisible by pipeline_parallel (2) x virtual_stages (1); pipeline_layers "
            "gives an uneven split");
  l.pipeline_layers = {3, 2};  // ... which it then takes
  EXPECT_EQ(refusal(l, {5, 64, 4, 32, 256}, 8, 2), "");
  l.pipeline_layers = {3, 1};
  EXPECT_EQ(refusal(l, {5, 64, 4, 32, 256}, 8, 2), "pipeline_layers 3+1 sums to 4 layers, not the model's L = 5");
  l.pipeline_layers = {5};
  EXPECT_EQ(refusal(l, {5, 64, 4, 32, 256}, 8, 2),
            "pipeline_layers 5 has 1 entries, not one per virtual stage: pipeline_parallel (2) x virtual_stages (1) = 2");
  l.pipeline_layers = {5, 0};
  EXPECT_EQ(refusal(l, {5, 64, 4, 32, 256}, 8, 2), "pipeline_layers 5+0: every stage needs at least one layer");
  EXPECT_EQ(stage_layers(ParallelLayout{.pp = 2, .pipeline_layers = {3, 2}}, 5), (std::vector<int>{3, 2}));
  EXPECT_EQ(stage_layers(ParallelLayout{.pp = 4}, 8), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(stage_first_layer(ParallelLayout{.pp = 4, .pipeline_layers = {1, 3, 3, 1}}, 8, 3), 7);
  EXPECT_EQ(parse_pipeline_layers("1+3+3+1"), (std::vector<int>{1, 3, 3, 1}));
  for (const char* bad : {"", "+", "1+", "1++2", "0+8", "a", "1,2", "12345"})
    EXPECT_THROW(parse_pipeline_layers(bad), InputError) << bad;
  l = {};
  l.tp = 2, l.dp = 2;
  EXPECT_EQ(refusal(l, model, 8, 8),
            "tensor_parallel (2) x data_parallel (2) x pipeline_parallel (1) = 4 is not the world size 8");
  l = {};
  l.tp = 3;
  EXPECT_EQ(refusal(l, {4, 63, 3, 32, 256}, 8, 3), "model.V = 256 (vocabulary) is not divisible by tensor_parallel = 3");
  l = {};
  l.pp = 2, l.schedule = "interleaved", l.virtual_stages = 2, l.micro_batches = 3;
  EXPECT_EQ(refusal(l, model, 12, 2),
            "schedule \"interleaved\" needs micro_batches (3) to be a multiple of pipeline_parallel (2)");
  l.micro_batches = 4;
  EXPECT_EQ(refusal(l, model, 8, 2), "");
  l.virtual_stages = 1;
  EXPECT_EQ(refusal(l, model, 8, 2), "schedule \"interleaved\" needs virtual_stages >= 2, got 1");
  l = {};
  l.schedule = "zerobubble";
  EXPECT_EQ(refusal(l, model, 8, 1), "unknown schedule 'zerobubble' (gpipe, 1f1b, interleaved, zb-h1)");
  l = {};
  l.virtual_stages = 2;
  EXPECT_EQ(refusal(l, model, 8, 1), "virtual_stages = 2 needs schedule \"interleaved\", not \"1f1b\"");
}

}  // namespace
}  // namespace dtb
