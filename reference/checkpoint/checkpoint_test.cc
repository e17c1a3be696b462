// Training checkpoints (reference/checkpoint/checkpoint.h): a run saved at step k, destroyed and
// resumed into a fresh model and engine, continues bitwise as the uninterrupted run (per-
// step losses, gathered parameters, every rank's master weights and AdamW moments, the
// loss scaler), for DP, TP x PP, ZeRO 3, fp16 with loss scaling and bf16 with offload; and
// every damaged or mismatched checkpoint is refused with one agreed message before any
// state changes. Runs in the multi-rank binary (2 and 4 ranks); the rank-file format's
// round trip and corruption cases are checkpoint_file_test.cc's, one process alone; loading
// another layout's checkpoint is checkpoint_reshard_test.cc's. Also an MoE model at expert
// parallelism 2, and the refusal of another MoE setting.
#include "reference/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "reference/checkpoint/checkpoint_test_util.h"

namespace dtb {
namespace {

using namespace checkpoint_test;


TEST(Checkpoint, ResumeIsBitwiseDP) {
  auto w = make_mpi_world();
  expect_bitwise_resume<float>(dp_case(w->size()), base_config(), *w, 3);
}

TEST(Checkpoint, ResumeIsBitwiseTPxPP) {
  auto w = make_mpi_world();
  const auto cases = cases_of(
      w->size(), {make_case("TP2xPP2 zero0", 2, 1, 2), make_case("PP2 zero0", 1, 1, 2), make_case("TP2 zero0", 2, 1, 1),
                  make_case("DP2xPP2 interleaved v2 zero2", 1, 2, 2, 2, 2, "interleaved")});
  if (cases.empty()) GTEST_SKIP() << "no TP x PP layout of " << w->size() << " ranks (ctest runs 2 and 4)";
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 2);
}

TEST(Checkpoint, ResumeIsBitwiseZero3) {
  auto w = make_mpi_world();
  Case tp2dp2 = make_case("TP2xDP2 zero3", 2, 2, 1, 3);
  tp2dp2.zero.reduce_bucket_size = 3000;  // several buckets
  tp2dp2.zero.allgather_bucket_size = 3000;
  std::vector<Case> cases = cases_of(w->size(), {tp2dp2});
  cases.push_back(dp_case(w->size(), 3));
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 4);
}


TEST(Checkpoint, ResumeIsBitwiseExpertParallel) {
  auto w = make_mpi_world();
  const std::vector<Case> cases = cases_of(w->size(), {moe_case("DP2xEP2", 2, 2, 1, 0), moe_case("DP2xEP2 zero2", 2, 2, 1, 2),
                                                       moe_case("DP4xEP2 zero1", 4, 2, 1, 1),
                                                       moe_case("DP4xEP2 zero3", 4, 2, 1, 3),
                                                       moe_case("DP2xEP2xPP2 zero2", 2, 2, 2, 2)});
  ASSERT_FALSE(cases.empty());
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 3);
}

// fp16 with dynamic loss scaling from 2^18, growing every 2 good steps: the first two steps
// overflow and are skipped, the scale then grows and overflows again, and at the checkpoint
// (step 3) the scale is 2^16 with the growth tracker mid-way (1 of 2) — a resume that lost
// either takes other steps.
TEST(Checkpoint, ResumeIsBitwiseFp16LossScaler) {
  auto w = make_mpi_world();
  const TrainConfig cfg = fp16_scaling_config(12);
  Case c = dp_case(w->size(), 2);
  c.name += " fp16 loss scaling";
  const TrainRun full = expect_bitwise_resume<fp16>(c, cfg, *w, 3);
  // The case exercises the scaler: steps skipped before and after the checkpoint, steps taken.
  int skipped_before = 0, skipped_after = 0;
  for (int s = 0; s < cfg.steps; ++s) (s < 3 ? skipped_before : skipped_after) += full.skipped.at(size_t(s));
  EXPECT_GT(skipped_before, 0);
  EXPECT_GT(skipped_after, 0);
  EXPECT_LT(skipped_before + skipped_after, cfg.steps);
}

TEST(Checkpoint, ResumeIsBitwiseBf16Offload) {
  auto w = make_mpi_world();
  const TrainConfig cfg = base_config();
  Case c = dp_case(w->size(), 1);
  c.zero.offload_optimizer = true;
  c.name += " offload bf16";
  expect_bitwise_resume<bf16>(c, cfg, *w, 3);
}

// ---- refusals ----


TEST(Checkpoint, RefusesDamagedFiles) {
  auto w = make_mpi_world();
  const int n = w->size(), last = n - 1;
  const TrainConfig cfg = base_config();
  const Case c = dp_case(n);
  SharedTempDir dir(*w);
  struct Damage {
    std::string what, needle;
    std::function<void(const std::string& step_dir)> apply;
  };
  const std::string last_file = "rank-" + std::to_string(last) + ".bin";
  const std::vector<Damage> damages = {
      {"truncated rank file", last_file + ": truncated",
       [&](const std::string& d) {
         fs::resize_file(fs::path(d) / last_file, fs::file_size(fs::path(d) / last_file) / 2);
       }},
      {"one flipped payload byte", last_file + ": checksum mismatch",
       [&](const std::string& d) {
         std::fstream f(fs::path(d) / last_file, std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(-100, std::ios::end);
         char b = 0;
         f.read(&b, 1);
         b ^= 0x10;
         f.seekp(-100, std::ios::end);
         f.write(&b, 1);
       }},
      {"bad magic", last_file + ": bad magic",
       [&](const std::string& d) {
         std::fstream f(fs::path(d) / last_file, std::ios::in | std::ios::out | std::ios::binary);
         f.write("XX", 2);
       }},
      {"missing rank file", last_file + ": missing",
       [&](const std::string& d) { fs::remove(fs::path(d) / last_file); }},
      {"missing manifest", "no manifest.json (an incomplete checkpoint is never loaded)",
       [&](const std::string& d) { fs::remove(fs::path(d) / "manifest.json"); }},
      {"unreadable manifest", "manifest.json is unreadable",
       [&](const std::string& d) { std::ofstream(fs::path(d) / "manifest.json") << "{\"format_version\": 1,"; }},
      // 2^32 + dp would wrap to this run's dp in an int: refused as out of range instead.
      {"a layout size past int", "manifest.json's 'layout.dp' = " + std::to_string((int64_t(1) << 32) + n) +
                                     " is out of range [0, 1073741824]",
       [&](const std::string& d) {
         nlohmann::json m = nlohmann::json::parse(std::ifstream(fs::path(d) / "manifest.json"));
         m["layout"]["dp"] = (int64_t(1) << 32) + n;
         std::ofstream(fs::path(d) / "manifest.json") << m.dump();
       }},
      // A layout key this build does not read (the model's were refused, the layout's accepted).
      {"an unknown layout key", "manifest.json's layout has the unknown key 'tensor_paralel'",
       [&](const std::string& d) {
         nlohmann::json m = nlohmann::json::parse(std::ifstream(fs::path(d) / "manifest.json"));
         m["layout"]["tensor_paralel"] = 2;
         std::ofstream(fs::path(d) / "manifest.json") << m.dump();
       }},
      // The tensor table a resharded load places elements by: an edited entry was accepted.
      {"an edited tensor table", "manifest.json's tensors[0] ",
       [&](const std::string& d) {
         nlohmann::json m = nlohmann::json::parse(std::ifstream(fs::path(d) / "manifest.json"));
         m["tensors"][0]["numel"] = 100;
         std::ofstream(fs::path(d) / "manifest.json") << m.dump();
       }},
  };
  for (size_t i = 0; i < damages.size(); ++i) {
    SCOPED_TRACE(damages[i].what);
    const std::string sub = dir.sub(std::to_string(i) + "-damaged");
    save_one_step(c, cfg, *w, sub);
    const std::string step_dir = checkpoint_step_dir(sub, 1);
    on_rank0(*w, [&] { damages[i].apply(step_dir); });
    expect_refused(c, cfg, *w, step_dir, damages[i].needle);
  }
}

TEST(Checkpoint, RefusesAnotherRun) {
  auto w = make_mpi_world();
  const int n = w->size();
  const TrainConfig cfg = base_config();
  SharedTempDir dir(*w);
  const Case saved = dp_case(n);
  save_one_step(saved, cfg, *w, dir.path());
  const std::string step_dir = checkpoint_step_dir(dir.path(), 1);
  // Another layout is resharded (checkpoint_reshard_test.cc); another seed is refused:
  // Another seed.
  TrainConfig seeded = cfg;
  seeded.seed = 99;
  expect_refused(saved, seeded, *w, step_dir, "seed 1234 does not match this run's 99");
  // Another precision and another model width would be refused alike; another batch:
  TrainConfig batch = cfg;
  batch.global_batch = 2 * cfg.global_batch;
  expect_refused(saved, batch, *w, step_dir, "global_batch 8 does not match this run's 16");
}

// The recipe a checkpoint records (lr, AdamW's betas, eps and weight decay, grad_clip,
// micro_batches): a resume with any of them changed is refused naming the key and both values,
// unless the key is allowed (dtbench run --allow-changed KEY), which then resumes.
TEST(Checkpoint, RefusesAChangedRecipeUnlessAllowed) {
  auto w = make_mpi_world();
  const TrainConfig cfg = base_config();  // lr 0.01, beta2 0.95, weight decay 0.1, grad_clip 1
  SharedTempDir dir(*w);
  const Case saved = dp_case(w->size());
  save_one_step(saved, cfg, *w, dir.path());
  const std::string step_dir = checkpoint_step_dir(dir.path(), 1);
  const std::string hint = " resumes with it)";
  TrainConfig c = cfg;
  c.adamw.lr = 0.03f;
  expect_refused(saved, c, *w, step_dir, "train.lr 0.01 does not match this run's 0.03 (dtbench run --allow-changed lr" + hint);
  c = cfg, c.adamw.weight_decay = 0.0f;
  expect_refused(saved, c, *w, step_dir, "train.weight_decay 0.1 does not match this run's 0.0");
  c = cfg, c.adamw.beta1 = 0.8f;
  expect_refused(saved, c, *w, step_dir, "train.beta1 0.9 does not match this run's 0.8");
  c = cfg, c.grad_clip = 0.0;
  expect_refused(saved, c, *w, step_dir, "train.grad_clip 1.0 does not match this run's 0.0");
  c = cfg, c.micro_batches = 1;
  expect_refused(saved, c, *w, step_dir, "train.micro_batches 2 does not match this run's 1");
  // Allowed: lr changes and the run resumes from the checkpoint's step; the change is listed.
  Case allowed = saved;
  allowed.allowed_changes = {"lr"};
  c = cfg, c.adamw.lr = 0.03f;
  const Outcome<float> out = run_case<float>(allowed, c, *w, step_dir);
  EXPECT_EQ(out.run.losses.size(), size_t(cfg.steps - 1));
  const nlohmann::json changes =
      recipe_changes(check_checkpoint_manifest(step_dir, info_of(allowed, c)), info_of(allowed, c));
  EXPECT_EQ(changes, nlohmann::json::parse(R"([{"key": "lr", "saved": 0.01, "now": 0.03}])"));
}

// Sequence parallelism: the same parameters as TP alone (its LayerNorms replicated), and a
// resume that keeps it on continues bitwise (turning it off at a resume reshards:
// checkpoint_reshard_test.cc).
TEST(Checkpoint, ResumeIsBitwiseSequenceParallel) {
  auto w = make_mpi_world();
  auto sp = [](Case c) {
    c.sp = true;
    c.name += " sp";
    return c;
  };
  const auto cases = cases_of(w->size(), {sp(make_case("TP2", 2, 1, 1)), sp(make_case("TP2xDP2 zero1", 2, 2, 1, 1)),
                                          sp(make_case("TP2xPP2", 2, 1, 2))});
  if (cases.empty()) GTEST_SKIP() << "no TP 2 layout of " << w->size() << " ranks (ctest runs 2 and 4)";
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 3);
}

TEST(Checkpoint, ResumeIsBitwiseUnevenStages) {
  // An uneven layer split (pipeline_layers) saves and resumes bitwise, under 1F1B and ZB-H1
  // (another split at a resume reshards: checkpoint_reshard_test.cc).
  auto w = make_mpi_world();
  auto uneven = [](Case c, std::vector<int> layers) {
    c.name += " layers " + pipeline_layers_text(layers);
    c.layers = std::move(layers);
    return c;
  };
  const auto cases = cases_of(w->size(), {uneven(make_case("PP2", 1, 1, 2), {3, 1}),
                                          uneven(make_case("PP2xDP2 zero1", 1, 2, 2, 1, 1, "zb-h1"), {1, 3})});
  if (cases.empty()) GTEST_SKIP() << "no PP layout of " << w->size() << " ranks (ctest runs 2 and 4)";
  for (const Case& c : cases) expect_bitwise_resume<float>(c, base_config(), *w, 3);
}

// A checkpoint of an MoE run is refused by a run of other MoE settings (and a dense run's by
// an MoE run), each naming both; another expert-parallel size reshards (checkpoint_reshard_test.cc).
TEST(Checkpoint, RefusesAnotherMoeModel) {
  auto w = make_mpi_world();
  const int n = w->size();
  if (n % 2) GTEST_SKIP() << "needs an even world size (ctest runs 2 and 4 ranks)";
  const TrainConfig cfg = base_config();
  SharedTempDir dir(*w);
  const Case saved = moe_case("EP2", n, 2, 1, 0);
  save_one_step(saved, cfg, *w, dir.path());
  const std::string step_dir = checkpoint_step_dir(dir.path(), 1);
  const std::string dp = "DP" + std::to_string(n);
  Case top1 = saved;
  top1.model.moe.topk = 1;
  expect_refused(top1, cfg, *w, step_dir, "the model differs from this run's: moe_router_topk 2 (this run 1)");
  // A manifest written before expert parallelism existed has no layout.ep (nor the index that
  // reshards): read as EP 1, so the EP 2 run is refused, and a dense run's such manifest still
  // resumes.
  const std::string no_ep = dir.sub("no-ep");
  save_one_step(saved, cfg, *w, no_ep);
  save_one_step(dp_case(n), cfg, *w, dir.sub("dense-no-ep"));
  auto drop_ep = [](const std::string& d) {
    const fs::path f = fs::path(d) / "manifest.json";
    nlohmann::json m = nlohmann::json::parse(std::ifstream(f));
    m["layout"].erase("ep");
    m.erase("layout_independent");
    std::ofstream(f) << m.dump();
  };
  on_rank0(*w, [&] {
    drop_ep(checkpoint_step_dir(no_ep, 1));
    drop_ep(checkpoint_step_dir(dir.sub("dense-no-ep"), 1));
  });
  expect_refused(saved, cfg, *w, checkpoint_step_dir(no_ep, 1),
                 "layout " + dp + " zero0 does not match this run's " + dp +
                     "xEP2 zero0 (saved without the index that reshards: resume it on its own layout)");
  EXPECT_EQ(check_checkpoint_manifest(checkpoint_step_dir(dir.sub("dense-no-ep"), 1), info_of(dp_case(n), cfg))
                .at("step"),
            1);
  // A dense run's checkpoint, resumed as an MoE model of the same layout.
  const std::string dense = dir.sub("dense");
  save_one_step(dp_case(n), cfg, *w, dense);
  expect_refused(moe_case("EP1", n, 1, 1, 0), cfg, *w, checkpoint_step_dir(dense, 1),
                 "the model differs from this run's: num_experts none (this run 4), moe_aux_loss_coeff none "
                 "(this run 0.01)");
}

}  // namespace
}  // namespace dtb
