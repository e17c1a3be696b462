// Asynchronous checkpoint saves (reference/checkpoint/checkpoint_async.h) through the layout runner: a
// run saved asynchronously trains as without saves, its checkpoint resumes bitwise, its rank
// files are byte for byte the blocking saves', and a write that fails in the background is
// reported on every rank at the commit, with no manifest or latest written for it. Runs in
// the multi-rank binary (2 and 4 ranks).
#include "reference/checkpoint/checkpoint_async.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "reference/parallel/parallel_test_util.h"
#include "reference/model/test_dataset.h"

namespace dtb {
namespace {

namespace fs = std::filesystem;

const GptConfig kModel{2, 32, 4, 16, 256};

nlohmann::json manifest_ranks(const std::string& step_dir) {
  std::ifstream in(fs::path(step_dir) / "manifest.json");
  return nlohmann::json::parse(in).at("ranks");
}

struct Fixture {
  std::unique_ptr<Communicator> w = make_mpi_world();
  TrainConfig cfg;
  ParallelLayout l;
  ZeroConfig zero;
  Dataset data = test_data();
  CpuDevice dev;
  SharedTempDir tmp{*w};
  const std::string& dir = tmp.path();
  Fixture() {
    cfg.steps = 6;
    cfg.global_batch = 8;
    cfg.seq_len = 16;
    cfg.adamw.lr = 1e-2f;
    l.dp = w->size();
    zero.stage = 1;
  }
  LayoutOutcome run(const LayoutCheckpoints* ck) {
    return run_layout({.model = kModel, .layout = {.l = l, .z = zero}, .train = cfg, .device = dev, .host = *w,
                       .data = data, .gather = true, .checkpoints = ck});
  }
  std::string sub(const std::string& name) const { return (fs::path(dir) / name).string(); }
};

TEST(CheckpointAsync, ResumesBitwiseAndWritesTheBlockingSavesBytes) {
  Fixture f;
  const LayoutOutcome full = f.run(nullptr);
  LayoutCheckpoints async{.dir = f.sub("async"), .every = 2, .async = true};
  const LayoutOutcome a = f.run(&async);
  EXPECT_TRUE(a.checkpoints.save_error.empty()) << a.checkpoints.save_error;
  EXPECT_EQ(a.checkpoints.saved, (std::vector<int64_t>{2, 4, 6}));  // the last committed after the loop
  ASSERT_EQ(a.checkpoints.save_timings.size(), 3u);
  for (const SaveTiming& t : a.checkpoints.save_timings) EXPECT_GT(t.bytes, 0u);
  EXPECT_EQ(a.losses, full.losses);  // saving in the background does not change the run
  LayoutCheckpoints blocking{.dir = f.sub("blocking"), .every = 2};
  const LayoutOutcome b = f.run(&blocking);
  EXPECT_EQ(b.checkpoints.saved, (std::vector<int64_t>{2, 4, 6}));
  if (f.w->rank() == 0) {
    for (int64_t k : {2, 4, 6}) {  // the same state, the same bytes: sizes and SHA-256 of every rank file
      EXPECT_EQ(manifest_ranks(checkpoint_step_dir(async.dir, k)), manifest_ranks(checkpoint_step_dir(blocking.dir, k)))
          << "step " << k;
    }
  }
  LayoutCheckpoints resume{.resume_step_dir = checkpoint_step_dir(async.dir, 2)};
  const LayoutOutcome r = f.run(&resume);
  EXPECT_EQ(r.checkpoints.first_step, 2);
  EXPECT_GT(r.checkpoints.load_bytes, 0u);
  EXPECT_EQ(r.checkpoints.load_bytes, a.checkpoints.save_timings[0].bytes);
  EXPECT_EQ(r.losses, full.losses);
  if (f.w->rank() == 0) {
    ASSERT_EQ(r.params.size(), full.params.size());
    for (size_t i = 0; i < full.params.size(); ++i) ASSERT_EQ(r.params[i], full.params[i]) << "parameter " << i;
  }
}

// The last rank's temporary file is made a directory beforehand, so its background write of
// step 2 fails (EISDIR); the commit at the next save agrees on it: every rank records the
// error naming that file, no later save runs, and step 2 has no manifest and DIR no latest.
TEST(CheckpointAsync, AFailedBackgroundWriteIsReportedOnEveryRank) {
  Fixture f;
  const int last = f.w->size() - 1;
  const std::string step2 = checkpoint_step_dir(f.sub("async"), 2);
  if (f.w->rank() == 0) fs::create_directories(fs::path(step2) / ("rank-" + std::to_string(last) + ".bin.tmp"));
  f.w->barrier();
  LayoutCheckpoints async{.dir = f.sub("async"), .every = 2, .async = true};
  const LayoutOutcome a = f.run(&async);
  EXPECT_NE(a.checkpoints.save_error.find("rank-" + std::to_string(last) + ".bin"), std::string::npos)
      << "save_error: '" << a.checkpoints.save_error << "'";
  EXPECT_TRUE(a.checkpoints.saved.empty());
  EXPECT_EQ(a.checkpoints.save_timings.size(), 1u);  // no save after the failed one
  EXPECT_FALSE(fs::exists(fs::path(step2) / "manifest.json"));
  EXPECT_FALSE(fs::exists(fs::path(f.sub("async")) / "latest"));
}

}  // namespace
}  // namespace dtb
