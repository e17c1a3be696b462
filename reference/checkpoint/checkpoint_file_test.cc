// The checkpoint rank-file format (reference/checkpoint/checkpoint.h write_rank_file, read_rank_file)
// and resolve_resume, one process alone: a round trip, every kind of damage refused in one
// line, how resume_from names a step, and the layout a manifest records (context parallelism).
// The multi-rank save and resume: checkpoint_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/checkpoint/checkpoint_io.h"

namespace dtb {
namespace {

namespace fs = std::filesystem;

std::string local_temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "dtb-ckpt-file-XXXXXX").string();
  DTB_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
  return tmpl;
}

std::vector<CheckpointSection> some_sections() {
  std::vector<CheckpointSection> s = {
      {"state", "raw", std::vector<char>(48, 7)}, {"params", "f32", {}}, {"empty", "f64", {}}};
  for (int i = 0; i < 1000; ++i) {
    const float x = float(i) * 0.25f - 3.0f;
    const char* p = reinterpret_cast<const char*>(&x);
    s[1].bytes.insert(s[1].bytes.end(), p, p + 4);
  }
  return s;
}

TEST(CheckpointFile, RoundTrip) {
  const std::string d = local_temp_dir(), path = d + "/rank-1.bin";
  const auto sections = some_sections();
  const FileDigest dig = write_rank_file(path, {1, 4, 17}, sections);
  EXPECT_EQ(dig.bytes, fs::file_size(path));
  EXPECT_EQ(dig.bytes, 72 + 3 * 48 + 48 + 4000);
  EXPECT_EQ(dig.sha256.size(), 64u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const auto back = read_rank_file(path, {1, 4, 17}, &dig);
  ASSERT_EQ(back.size(), sections.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].name, sections[i].name);
    EXPECT_EQ(back[i].dtype, sections[i].dtype);
    EXPECT_EQ(back[i].bytes, sections[i].bytes);
  }
  fs::remove_all(d);
}

TEST(CheckpointFile, RefusesEveryDamage) {
  const std::string d = local_temp_dir(), path = d + "/rank-0.bin";
  const FileDigest dig = write_rank_file(path, {0, 2, 5}, some_sections());
  auto refused = [&](const RankFileId& id, const FileDigest* expect) -> std::string {
    try {
      read_rank_file(path, id, expect);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  auto contains = [](const std::string& s, const std::string& needle) {
    return s.find(needle) != std::string::npos
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << "'" << s << "' lacks '" << needle << "'";
  };
  EXPECT_TRUE(contains(refused({1, 2, 5}, &dig), "written by rank 0 of 2 at step 5, expected rank 1 of 2 at step 5"));
  EXPECT_TRUE(contains(refused({0, 2, 6}, nullptr), "expected rank 0 of 2 at step 6"));
  FileDigest wrong = dig;
  wrong.sha256[0] = wrong.sha256[0] == 'a' ? 'b' : 'a';
  EXPECT_TRUE(contains(refused({0, 2, 5}, &wrong), "does not match the manifest's"));
  const std::vector<char> good = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  auto with = [&](const std::function<void(std::vector<char>&)>& change) {
    std::vector<char> b = good;
    change(b);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), long(b.size()));
  };
  // Every byte of the header's hashed fields and of the payload is covered.
  for (size_t at : {size_t(13), size_t(30), size_t(72), size_t(72 + 3 * 48), good.size() - 1}) {
    with([&](std::vector<char>& b) { b[at] ^= 1; });
    const std::string why = refused({0, 2, 5}, nullptr);
    EXPECT_FALSE(why.empty()) << "a flipped byte at " << at << " was not noticed";
    EXPECT_EQ(why.find('\n'), std::string::npos);
  }
  with([&](std::vector<char>& b) { b[72 + 100] ^= 1; });
  EXPECT_TRUE(contains(refused({0, 2, 5}, nullptr), "checksum mismatch"));
  with([&](std::vector<char>& b) { b.resize(b.size() - 1); });
  EXPECT_TRUE(contains(refused({0, 2, 5}, &dig), "truncated: " + std::to_string(dig.bytes - 1) + " of "));
  EXPECT_TRUE(contains(refused({0, 2, 5}, nullptr), "truncated"));
  with([&](std::vector<char>& b) { b.resize(40); });
  EXPECT_TRUE(contains(refused({0, 2, 5}, nullptr), "shorter than the 72-byte header"));
  with([&](std::vector<char>& b) { b.push_back(0); });
  EXPECT_TRUE(contains(refused({0, 2, 5}, &dig), "wrong size"));
  with([&](std::vector<char>& b) { b[0] = 'X'; });
  EXPECT_TRUE(contains(refused({0, 2, 5}, nullptr), "bad magic"));
  with([&](std::vector<char>& b) { b[8] = 9; });
  EXPECT_TRUE(contains(refused({0, 2, 5}, nullptr), "format version 9 is not supported"));
  fs::remove(path);
  EXPECT_TRUE(contains(refused({0, 2, 5}, nullptr), "rank-0.bin: missing"));
  fs::remove_all(d);
}

// The FP8 sections (checkpoint_io::fp8_sections, Fp8Take): a layer taken from the file that holds
// it, bitwise; a layer no file holds, two files that disagree on one, another history length, one
// section without the other, a size that is not its layers' refused, each naming the file.
TEST(CheckpointFile, Fp8SectionsTakeEachLayerOnceAndRefuseDamage) {
  using namespace checkpoint_io;
  const size_t per = Fp8Checkpoint::floats_per_layer(2);  // 12 x (2 + 2)
  auto file = [&](std::vector<int> layers, float base) {
    Fp8Checkpoint c{.history_len = 2, .layers = layers};
    for (size_t i = 0; i < layers.size() * per; ++i) c.values.push_back(base + float(i));
    return fp8_sections(c);
  };
  auto thrown = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_TRUE(fp8_sections(Fp8Checkpoint{}).empty());  // no state, no sections
  // Layers 0 and 2 from two files (PP stages), each as saved.
  Fp8Take take(Fp8Checkpoint{.history_len = 2, .layers = {0, 2}});
  take.offer(file({0, 1}, 100.0f), "a.bin");
  take.offer(file({2}, 500.0f), "b.bin");
  take.check_complete("x");
  ASSERT_EQ(take.want.values.size(), 2 * per);
  EXPECT_EQ(take.want.values[0], 100.0f);
  EXPECT_EQ(take.want.values[per - 1], 100.0f + float(per - 1));
  EXPECT_EQ(take.want.values[per], 500.0f);
  // The same layer twice, equal: taken; unequal: refused.
  take.offer(file({2}, 500.0f), "c.bin");
  EXPECT_EQ(thrown([&] { take.offer(file({2}, 501.0f), "d.bin"); }),
            "checkpoint file d.bin: the FP8 scaling state of transformer layer 2 differs from another rank file's (it "
            "is the same on every rank that holds the layer)");
  Fp8Take missing(Fp8Checkpoint{.history_len = 2, .layers = {0, 1}});
  missing.offer(file({0}, 1.0f), "a.bin");
  EXPECT_EQ(thrown([&] { missing.check_complete("checkpoint file a.bin"); }),
            "checkpoint file a.bin holds no FP8 scaling state of transformer layer 1 (saved without FP8's delayed "
            "recipe, or damaged)");
  Fp8Take longer(Fp8Checkpoint{.history_len = 3, .layers = {0}});
  EXPECT_EQ(thrown([&] { longer.offer(file({0}, 1.0f), "a.bin"); }),
            "checkpoint file a.bin: FP8 amax histories of 2 steps, this run keeps 3");
  std::vector<CheckpointSection> one = file({0}, 1.0f);
  one.pop_back();  // "index.fp8"
  EXPECT_EQ(thrown([&] { take.offer(one, "a.bin"); }),
            "checkpoint file a.bin: section 'index.fp8' is missing beside the other");
  std::vector<CheckpointSection> cut = file({0}, 1.0f);
  cut[0].bytes.resize(cut[0].bytes.size() - 4);
  EXPECT_NE(thrown([&] { take.offer(cut, "a.bin"); }).find("checkpoint file a.bin: section 'fp8' holds "),
            std::string::npos);
}

TEST(CheckpointFile, ResolveResume) {
  const std::string d = local_temp_dir();
  EXPECT_EQ(resolve_resume(d, ""), "");
  EXPECT_EQ(resolve_resume(d, "latest"), "");  // nothing saved yet: a fresh start
  write_file_durably(d + "/latest", "12\n");
  EXPECT_EQ(resolve_resume(d, "latest"), d + "/step-12");
  write_file_durably(d + "/latest", "twelve\n");
  EXPECT_THROW(resolve_resume(d, "latest"), InputError);
  EXPECT_THROW(resolve_resume("", "latest"), InputError);
  EXPECT_THROW(resolve_resume(d, d + "/step-3"), InputError);
  fs::create_directories(d + "/step-3");
  EXPECT_EQ(resolve_resume(d, d + "/step-3"), d + "/step-3");
  // No latest beside an incomplete step (no manifest): a fresh start; beside complete ones
  // (latest lost): refused, naming the newest, not overwritten by a fresh run.
  fs::remove(d + "/latest");
  EXPECT_EQ(resolve_resume(d, "latest"), "");
  for (const char* step : {"/step-4", "/step-12"}) {
    fs::create_directories(d + step);
    write_file_durably(d + step + "/manifest.json", "{}");
  }
  try {
    resolve_resume(d, "latest");
    ADD_FAILURE() << "complete checkpoints without latest: a fresh run would overwrite them";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 2 complete checkpoint(s), the newest " + d + "/step-12"),
              std::string::npos)
        << e.what();
  }
  CheckpointRunInfo run;
  try {
    check_checkpoint_manifest(d + "/step-3", run);
    ADD_FAILURE() << "a step directory without a manifest was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no manifest.json"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// A manifest records the context-parallel size: a CP run's checkpoint reshards into a run
// without CP (and back), naming the saved layout, and a manifest written before cp was
// recorded reads as CP 1.
TEST(CheckpointFile, ManifestRecordsContextParallel) {
  const std::string d = local_temp_dir();
  const GptConfig model{4, 64, 4, 32, 256};  // L, C, NH, T, V
  auto run_of = [&](int cp, int dp, int zero) {
    ParallelLayout l;
    l.cp = cp;
    l.dp = dp;
    ZeroConfig z;
    z.stage = zero;
    return checkpoint_run_info(model, l, z, Precision::fp32, TrainConfig{}, "");
  };
  // `run`'s manifest in DIR/<name> (rank entries as listed: the files are not read here).
  auto save = [&](const CheckpointRunInfo& run, const std::string& name, bool drop_cp) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < run.world_size(); ++r)
      ranks.push_back({{"rank", r}, {"file", "rank-" + std::to_string(r) + ".bin"}});
    nlohmann::json m = checkpoint_io::make_manifest(run, 10, run.world_size(), TrainProgress{}, 10, ranks);
    if (drop_cp) m["layout"].erase("cp");
    fs::create_directories(d + "/" + name);
    write_file_durably(d + "/" + name + "/manifest.json", m.dump());
    return d + "/" + name;
  };
  const CheckpointRunInfo cp2dp2 = run_of(2, 2, 3);
  EXPECT_EQ(describe_layout(cp2dp2), "CP2xDP2 zero3");
  const std::string a = save(cp2dp2, "cp2", false);
  EXPECT_EQ(check_checkpoint_manifest(a, cp2dp2)["layout"]["cp"], 2);
  EXPECT_EQ(resharded_from(check_checkpoint_manifest(a, cp2dp2), cp2dp2), "");
  for (const CheckpointRunInfo& to : {run_of(1, 4, 3), run_of(1, 2, 3), run_of(4, 1, 3), run_of(2, 1, 0)})
    EXPECT_EQ(resharded_from(check_checkpoint_manifest(a, to), to), "CP2xDP2 zero3") << describe_layout(to);
  // Written before cp was recorded: CP 1, on its own layout and resharded into a CP run.
  const CheckpointRunInfo dp2 = run_of(1, 2, 0);
  const std::string old = save(dp2, "old", true);
  EXPECT_EQ(resharded_from(check_checkpoint_manifest(old, dp2), dp2), "");
  EXPECT_EQ(resharded_from(check_checkpoint_manifest(old, run_of(2, 1, 0)), run_of(2, 1, 0)), "DP2 zero0");
  // A CP size of 0 is no layout (every other size is checked against the world size).
  nlohmann::json zero = nlohmann::json::parse(std::ifstream(a + "/manifest.json"));
  zero["layout"]["cp"] = 0;
  write_file_durably(a + "/manifest.json", zero.dump());
  try {
    check_checkpoint_manifest(a, cp2dp2);
    ADD_FAILURE() << "layout.cp 0 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'layout.cp' = 0 is out of range [1, 1073741824]"), std::string::npos)
        << e.what();
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace dtb
