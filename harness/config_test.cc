// Config parsing and validation: defaults filled, unknown keys rejected with the nearest
// name, types and layouts checked. (The command-line half is harness/cli_test.sh.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "harness/config.h"
#include "harness/fuzz/config_input.h"
#include "kernels/error.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

static std::string error_of(const std::string& text, int world = 4, const std::string& suites = "") {
  try {
    parse_config(text, "test", suites, "", world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Every named config validates at the world size it is written for: 4 ranks, but the
// cluster cases (8 and 32 GPUs).
TEST(Config, NamedConfigsParseAtTheirWorldSize) {
  const std::map<std::string, int> world = {{"10b-tp2-pp2-dp2", 8}, {"3b-tp4-pp2-dp4-zero1", 32}};
  for (const auto& name : config_names()) {
    const int n = world.count(name) ? world.at(name) : 4;
    const auto cfg = parse_config(read_config_text(name), name, "", "", WorldInfo(n, n));
    EXPECT_TRUE(cfg.contains("train")) << name;
    EXPECT_TRUE(cfg["collectives"].contains("max_bytes")) << name;
  }
  EXPECT_FALSE(config_names().empty());
}

TEST(Config, DefaultsFilledAndOverridesApplied) {
  const auto cfg = parse_config(R"({"train": {"steps": 3}})", "t", "train", "/tmp/x.txt", 2);
  EXPECT_EQ(cfg["train"]["steps"], 3);
  EXPECT_EQ(cfg["train"]["micro_batches"], 2);  // default kept
  EXPECT_EQ(cfg["suites"], nlohmann::json({"train"}));
  EXPECT_EQ(cfg["data"], "/tmp/x.txt");
  EXPECT_DOUBLE_EQ(parse_config(R"({"train": {"lr": 1}})", "t", "", "", 1)["train"]["lr"].get<double>(), 1.0);
}

TEST(Config, Errors) {
  EXPECT_EQ(error_of(R"({"trian": {}})"), "unknown config key 'trian' (did you mean 'train'?)");
  EXPECT_EQ(error_of(R"({"train": {"step": 1}})"), "unknown config key 'train.step' (did you mean 'steps'?)");
  EXPECT_EQ(error_of(R"({"zzzzzzzz": 1})"), "unknown config key 'zzzzzzzz'");
  EXPECT_EQ(error_of(R"({"seed": "x"})"), "config key 'seed' must be an integer, got \"x\"");
  EXPECT_EQ(error_of(R"({"seed": -1})"), "config key 'seed' must be >= 0");
  EXPECT_NE(error_of(R"({"seed": )").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("{}", 4, "collectives,nosuch").find("unknown suite 'nosuch'"), std::string::npos);
  EXPECT_NE(error_of("{}", 4, "train,train").find("selected twice"), std::string::npos);
  // 16 sequences over 3 ranks x 2 micro-batches do not divide.
  EXPECT_NE(error_of("{}", 3).find("not divisible by data_parallel (3)"), std::string::npos);
  EXPECT_EQ(error_of("{}", 4), "");
}

// A key given twice in one object, at any depth, is refused naming its path (JSON parsers keep
// one silently: {"train": {"steps": 3}, "train": {"lr": 0.5}} ran 200 steps at lr 0.5); the same
// key in two different objects is not a duplicate.
TEST(Config, DuplicateKeysAreRefused) {
  const std::string twice = "' appears twice in one object (JSON keeps only one of them)";
  EXPECT_EQ(error_of(R"({"train": {"steps": 3}, "train": {"lr": 0.5}})"), "config test: key 'train" + twice);
  EXPECT_EQ(error_of(R"({"train": {"sequence_parallel": true, "sequence_parallel": false}})"),
            "config test: key 'train.sequence_parallel" + twice);
  EXPECT_EQ(error_of(R"({"conformance": {"model": {"L": 4, "C": 64, "L": 8}}})"),
            "config test: key 'conformance.model.L" + twice);
  EXPECT_EQ(error_of(R"({"sweep": {"layouts": [{"a": 1, "a": 2}]}})"), "config test: key 'sweep.layouts[].a" + twice);
  EXPECT_EQ(error_of(R"({"train": {"steps": 3}, "conformance": {"steps": 3}})"), "");
  EXPECT_EQ(error_of(R"({"sweep": {"layouts": [{"a": 1}, {"a": 2}]}})").find("appears twice"), std::string::npos);
}

// The model section's MoE keys (docs/moe.md): a dense model's merged config has none of them (it
// is the config of before MoE, so reports and the gate's baselines compare); an MoE model's has all,
// the defaults filled in; an MoE key without num_experts, a top-k above the expert count, a capacity
// factor of 0, an MoE model in bf16, and an expert-parallel size that
// does not divide the DP size or the experts are refused in one line naming the key.
TEST(Config, MoeKeysOnlyInAnMoeModel) {
  const auto dense = parse_config("{}", "t", "train", "", 2);
  EXPECT_EQ(dense["model"], nlohmann::json({{"L", 2}, {"C", 64}, {"NH", 4}, {"T", 64}, {"V", 256}}));
  const auto moe = parse_config(R"({"model": {"num_experts": 4}})", "t", "train", "", 2);
  EXPECT_EQ(moe["model"]["moe_router_topk"], 2);
  EXPECT_TRUE(moe["model"]["moe_expert_capacity_factor"].is_null());
  EXPECT_DOUBLE_EQ(parse_config(R"({"model": {"num_experts": 4, "moe_expert_capacity_factor": 1}})", "t", "train",
                                "", 2)["model"]["moe_expert_capacity_factor"].get<double>(), 1.0);
  EXPECT_EQ(error_of(R"({"model": {"moe_router_topk": 1}})", 2, "train"),
            "config key 'model.moe_router_topk' is set but model.num_experts is 0 (a dense model)");
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 2, "moe_router_topk": 3}})", 2, "train"),
            "model.moe_router_topk = 3 is outside [1, num_experts = 2]");
  EXPECT_NE(error_of(R"({"model": {"num_experts": 2, "moe_expert_capacity_factor": 0}})", 2, "train")
                .find("moe_expert_capacity_factor = 0: must be > 0"), std::string::npos);
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 2}, "train": {"tensor_parallel": 2}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 2}})", 2, "train"), "");
  // Expert parallelism: carved out of DP, dividing the experts; the sharded model in every precision.
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 4}, "train": {"expert_parallel": 2, "zero_stage": 2}})", 4, "train"),
            "");
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 4}, "train": {"expert_parallel": 3}})", 4, "train"),
            "train: expert_parallel = 3 does not divide data_parallel = 4 (expert parallelism is carved out of data "
            "parallelism)");
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 6}, "train": {"expert_parallel": 4}})", 4, "train"),
            "train: model.num_experts = 6 experts are not divisible by expert_parallel = 4");
  EXPECT_EQ(error_of(R"({"train": {"expert_parallel": 2}})", 2, "train"),
            "config key 'train.expert_parallel' is set but model.num_experts is 0 (a dense model)");
  EXPECT_FALSE(dense["train"].contains("expert_parallel"));  // the dense config of before MoE
  EXPECT_EQ(moe["train"]["expert_parallel"], 1);
  EXPECT_EQ(error_of(R"({"model": {"num_experts": 2}, "train": {"precision": "bf16"}})", 2, "train"), "");
}

// The Llama family's keys (docs/models.md): a GPT-2 model's merged config has none of them (as before
// the family existed); a Llama model's has all; a Llama key with arch gpt2, an unknown arch, KV
// heads not dividing NH are refused in one line; the sharded model trains it (TP, PP, ZeRO) in fp32,
// with context parallelism, in fp32, bf16 and fp16, with the DP sync recipes, refusing a tp the KV
// heads do not shard or replicate to;
// every suite but train and conformance refuses it.
TEST(Config, LlamaKeysOnlyInALlamaModel) {
  const auto llama = parse_config(R"({"model": {"arch": "llama", "num_kv_heads": 2}})", "t", "train", "", 2);
  EXPECT_EQ(llama["model"]["rope_theta"], 10000.0);
  EXPECT_EQ(llama["model"]["num_kv_heads"], 2);
  EXPECT_EQ(parse_config(R"({"model": {"arch": "gpt2"}})", "t", "train", "", 2)["model"],
            nlohmann::json({{"L", 2}, {"C", 64}, {"NH", 4}, {"T", 64}, {"V", 256}}));
  EXPECT_EQ(error_of(R"({"model": {"norm_eps": 1e-6}})", 2, "train"),
            "config key 'model.norm_eps' is a Llama option but model.arch is \"gpt2\" (set it to \"llama\")");
  EXPECT_EQ(error_of(R"({"model": {"arch": "mistral"}})", 2, "train"),
            "model.arch: 'mistral' is not \"gpt2\" or \"llama\"");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama", "num_kv_heads": 3}})", 2, "train"),
            "model.num_kv_heads = 3 does not divide NH = 4");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama"}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama", "num_kv_heads": 2}, "train": {"tensor_parallel": 2}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama", "num_kv_heads": 1}, "train": {"tensor_parallel": 4}})", 4, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama", "L": 4}, "train": {"pipeline_parallel": 2, "zero_stage": 1}})", 4,
                     "train"),
            "");
  // NH 6, KV 3 (head size 16): tp 2 neither divides 3 nor is a multiple of it.
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama", "C": 96, "NH": 6, "num_kv_heads": 3},
                         "train": {"tensor_parallel": 2}})", 2, "train"),
            "train: tensor_parallel = 2 neither divides nor is a multiple of model.num_kv_heads = 3 (grouped-query "
            "attention shards whole KV heads, or replicates each over tp / KV ranks)");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama", "ffn_hidden_size": 170}, "train": {"tensor_parallel": 4}})", 4,
                     "train"),
            "train: tensor_parallel = 4 does not divide model.ffn_hidden_size = 170 (SwiGLU's gate and up rows are "
            "each column-parallel)");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama"}, "train": {"context_parallel": 2, "seq_len": 32}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama"}, "train": {"checkpoint_every": 5, "checkpoint_dir": "ck"}})", 2,
                     "train"),
            "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama"}, "train": {"precision": "bf16"}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama"}, "train": {"staleness": 1}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"model": {"arch": "llama"}, "train": {"local_steps": 4}})", 2, "train"), "");
  EXPECT_NE(error_of(R"({"model": {"arch": "llama"}})", 4, "sweep").find("not supported by the sweep suite"),
            std::string::npos);
}

// train.fp8 (docs/fp8.md): absent unless train.precision is "fp8" (a config's report as before FP8);
// under it, every key the recipe takes, Transformer Engine's defaults filled in (the delayed keys
// for the delayed recipe only); set without fp8, or with a key of another recipe, refused in one
// line; the layout rule runs (a GPU backend refused, the sweep's precision has no fp8); checkpoints
// are taken.
TEST(Config, Fp8SectionOnlyUnderPrecisionFp8) {
  EXPECT_FALSE(parse_config(R"({"train": {"precision": "bf16"}})", "t", "train", "", 2)["train"].contains("fp8"));
  EXPECT_EQ(parse_config(R"({"train": {"precision": "fp8"}})", "t", "train", "", 2)["train"]["fp8"],
            nlohmann::json({{"recipe", "delayed"}, {"fp8_format", "hybrid"}, {"margin", 0}, {"amax_history_len", 1024},
                            {"amax_compute_algo", "max"}}));
  EXPECT_EQ(parse_config(R"({"train": {"precision": "fp8", "fp8": {"recipe": "mxfp8"}}})", "t", "train", "", 2)["train"]
                        ["fp8"],
            nlohmann::json({{"recipe", "mxfp8"}, {"fp8_format", "e4m3"}}));
  EXPECT_EQ(error_of(R"({"train": {"precision": "fp8", "fp8": {"recipe": "current"}}})", 2, "train"), "");
  EXPECT_EQ(error_of(R"({"train": {"fp8": {"recipe": "current"}}})", 2, "train"),
            "config key 'train.fp8' is set but train.precision is \"fp32\" (set it to \"fp8\")");
  EXPECT_EQ(error_of(R"({"train": {"precision": "fp8", "fp8": {"recipe": "current", "margin": 1}}})", 2, "train"),
            "train.fp8.margin: belongs to the delayed recipe (its amax history), not to recipe 'current'");
  const std::string ck = ::testing::TempDir() + "dtb-config-fp8-ck";  // validation makes the directory
  EXPECT_EQ(error_of(R"({"train": {"precision": "fp8", "checkpoint_every": 5, "checkpoint_dir": ")" + ck + R"("}})", 2,
                     "train"),
            "");
  std::filesystem::remove_all(ck);
  EXPECT_NE(error_of(R"({"backend": "cuda", "train": {"precision": "fp8"}})", 2, "train")
                .find("fp8 recipe delayed on the cuda backend is not supported yet"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"train": {"precision": "fp4"}})", 2, "train"),
            "train.precision: 'fp4' is not fp32, bf16, fp16 or fp8");
}

// bf16 and fp16 validate on a backend with half ops (cpu, cuda: decided by name, as validate()
// has no Backend), in every suite that trains in them; a backend without them is refused
// with one line naming the key, the precision and the backend.
TEST(Config, HalfPrecisionValidatesOnBackendsWithHalfOps) {
  for (const char* backend : {"cpu", "cuda"}) {
    const std::string b = "\"backend\": \"" + std::string(backend) + "\"";
    EXPECT_EQ(error_of("{" + b + R"(, "train": {"precision": "bf16", "tensor_parallel": 2}})", 4, "train"), "")
        << backend;
    EXPECT_EQ(error_of("{" + b + R"(, "sweep": {"precision": "fp16"}})", 4, "sweep"), "") << backend;
    EXPECT_EQ(error_of("{" + b + "}", 4, "precision"), "") << backend;
    EXPECT_EQ(error_of("{" + b + R"(, "conformance": {"layouts": ["TP2"]}})", 4, "conformance"), "") << backend;
  }
  EXPECT_TRUE(backend_has_half_ops("cpu") && backend_has_half_ops("cuda"));
  EXPECT_FALSE(backend_has_half_ops("rocm"));
  EXPECT_NO_THROW(require_half_ops("rocm", Precision::fp32, "train.precision"));
  try {
    require_half_ops("rocm", Precision::fp16, "conformance.precisions");
    ADD_FAILURE() << "fp16 accepted on a backend without half ops";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "conformance.precisions: fp16 needs a backend with bf16 and fp16 ops; the rocm backend has none");
  }
}

TEST(Config, NearestName) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(nearest_name("colectives", {"collectives", "train"}), "collectives");
  EXPECT_EQ(nearest_name("xyz", {"collectives", "train"}), "");
}

TEST(Config, MissingNamedConfig) {
  EXPECT_THROW(read_config_text("defualt"), InputError);
  try {
    read_config_text("defualt");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'default'"), std::string::npos) << e.what();
  }
}

// `dtbench run --sweep [LAYOUTS]`: the text rewritten to run the sweep suite only.
TEST(Config, ApplySweep) {
  const auto j = nlohmann::json::parse(apply_sweep(R"({"seed": 7})", "TP2xDP2,DP4:zero2"));
  EXPECT_EQ(j["suites"], nlohmann::json({"sweep"}));
  EXPECT_EQ(j["sweep"]["layouts"], nlohmann::json({"TP2xDP2", "DP4:zero2"}));
  EXPECT_EQ(j["seed"], 7);
  EXPECT_FALSE(nlohmann::json::parse(apply_sweep("{}", ""))["sweep"].contains("layouts"));
  EXPECT_EQ(apply_sweep("[1]", "DP4"), "[1]");  // not an object: parse_config says why
  EXPECT_THROW(apply_sweep("{}", "DP4,,TP2"), InputError);
}

// Overrides come from the command line, where any bytes stand; the config must stay UTF-8
// (it is dumped to reach the ranks) and a message must stay one printable line.
TEST(Config, OverridesMustBeUtf8) {
  EXPECT_EQ(error_of("{}", 4, "collectives,\xff"), "--suites 'collectives,?' is not valid UTF-8");
  EXPECT_EQ(error_of("{}", 4, "tr\nain"),
            "unknown suite 'tr?ain' (did you mean 'train'?); suites: checkpoint, collectives, comm_efficiency, "
            "conformance, cp_attention, ffn_tp, gemm, kernels, memory, moe, offload, overlap, pipeline, "
            "precision, recompute, sweep, train");
  try {
    parse_config("{}", "t", "", "/tmp/\xc3" "(", 4);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--data '/tmp/?(' is not valid UTF-8");
  }
  EXPECT_NO_THROW(check_utf8("caf\xc3\xa9", "x"));
}

// A long unknown key is answered at once: candidates whose length alone rules them out are
// not compared (edit distance is |a| x |b| steps).
TEST(Config, LongUnknownKeyIsCheap) {
  EXPECT_EQ(nearest_name(std::string(1 << 20, 'a'), {"collectives", "train"}), "");
  EXPECT_EQ(nearest_name("trainn", {"collectives", "train"}), "train");
  EXPECT_EQ(error_of("{\"" + std::string(300, 'k') + "\": 1}"), "unknown config key '" + std::string(200, 'k') + "...'");
}

// The config fuzzer's findings (harness/fuzz/regressions/config, replayed by scripts/fuzz):
// each file through the fuzzer's path, with the one line dtbench now answers. Before the
// fixes: a stack overflow in --sweep's re-serialisation of a deep config, and nlohmann's
// type_error (exit 1, not 2) dumping a config holding a non-UTF-8 --data or --sweep.
TEST(Config, FuzzRegressions) {
  const std::map<std::string, std::string> expected = {
      {"sweep-deep-nesting.txt", "config fuzz nests deeper than 64 levels"},
      {"data-not-utf8.txt", "--data '?' is not valid UTF-8"},
      {"sweep-layouts-not-utf8.txt", "--sweep 'DP4,?(' is not valid UTF-8"},
  };
  namespace fs = std::filesystem;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(std::string(DTB_SOURCE_DIR) + "/harness/fuzz/regressions/config")) {
    const std::string name = e.path().filename().string();
    ASSERT_TRUE(expected.count(name)) << name << ": a regression without its expected message here";
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::string error;
    try {
      fuzz::run_config_input(text.str());
    } catch (const InputError& ex) {
      error = ex.what();
    }
    EXPECT_EQ(error, expected.at(name)) << name;
    ++files;
  }
  EXPECT_EQ(files, expected.size());
}

}  // namespace dtb
