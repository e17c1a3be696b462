// The layout spec options of stale gradients and local steps (reference/layout/layout_spec.h): their
// spellings in a spec, a record name and a record's fields, and the specs refused.
#include <gtest/gtest.h>

#include "kernels/error.h"
#include "reference/layout/layout_spec.h"

namespace dtb {
namespace {

TEST(LayoutSpec, StaleDelayCompensationAndLocalStepsOptions) {
  const LayoutSpec s = parse_layout_spec("DP4:stale2:dc", "t");
  EXPECT_EQ(s.l.dp, 4);
  EXPECT_EQ(s.dp_sync.staleness, 2);
  EXPECT_EQ(s.dp_sync.delay_compensation, 0.1);  // dc alone: lambda 0.1
  EXPECT_EQ(layout_record_name(s), "tp:1/dp:4/pp:1/schedule:1f1b/stale:2/dc:0.1");
  EXPECT_EQ(parse_layout_spec("DP2:stale1:dc0.5", "t").dp_sync.delay_compensation, 0.5);
  const LayoutSpec l = parse_layout_spec("DP4:local4", "t");
  EXPECT_EQ(l.dp_sync.local_steps, 4);
  EXPECT_EQ(layout_record_name(l), "tp:1/dp:4/pp:1/schedule:1f1b/local:4");
  nlohmann::json rec;
  add_layout_fields(rec, l);
  EXPECT_EQ(rec.at("local_steps"), 4);
  EXPECT_EQ(rec.at("staleness"), 0);
  nlohmann::json sync;
  add_layout_fields(sync, parse_layout_spec("DP4", "t"));
  EXPECT_FALSE(sync.contains("staleness"));  // synchronous records are as before
  for (const char* bad : {"DP4:stale0", "DP4:local0", "DP4:dc", "DP4:stale1:local2", "DP4:stale1:dcx", "DP4:stale1:dc0",
                          "DP4:stale1:stale2"})
    EXPECT_THROW(parse_layout_spec(bad, "t"), InputError) << bad;
}

}  // namespace
}  // namespace dtb
