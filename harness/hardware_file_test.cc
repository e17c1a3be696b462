// Tests of harness/hardware_file.h: the shipped files load, cite a source for every figure and
// round-trip through write_hardware_file exactly; each kind of malformed file is refused naming
// the key; --hardware's names resolve to the files beside the source tree.
#include "harness/hardware_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "harness/source_dir.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

const char* kShipped[] = {"a100-40gb", "a100-80gb", "h100-sxm", "h200-sxm"};

std::string shipped(const std::string& name) { return std::string(source_dir()) + "/harness/hardware/" + name + ".json"; }

json shipped_json(const std::string& name) {
  std::ifstream f(shipped(name));
  return json::parse(f);
}

void expect_same(const AlphaBeta& a, const AlphaBeta& b, const std::string& what) {
  EXPECT_EQ(a.alpha_s, b.alpha_s) << what;
  EXPECT_EQ(a.per_s, b.per_s) << what;
}

void expect_same(const HardwareSpec& a, const HardwareSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.description, b.description);
  EXPECT_EQ(a.device_memory_bytes, b.device_memory_bytes);
  EXPECT_EQ(a.peak_flops, b.peak_flops);
  EXPECT_EQ(a.hw.ranks_per_node, b.hw.ranks_per_node);
  for (size_t p = 0; p < 3; ++p) {
    expect_same(a.hw.gemm[p], b.hw.gemm[p], "gemm");
    expect_same(a.hw.attention[p], b.hw.attention[p], "attention");
  }
  expect_same(a.hw.memory, b.hw.memory, "memory");
  ASSERT_EQ(a.hw.collectives.size(), b.hw.collectives.size());
  for (size_t i = 0; i < a.hw.collectives.size(); ++i) {
    EXPECT_EQ(a.hw.collectives[i].group, b.hw.collectives[i].group);
    EXPECT_EQ(a.hw.collectives[i].link, b.hw.collectives[i].link);
    expect_same(a.hw.collectives[i].bus, b.hw.collectives[i].bus, "collectives");
  }
  ASSERT_EQ(a.hw.ring_protocols.size(), b.hw.ring_protocols.size());
  for (size_t i = 0; i < a.hw.ring_protocols.size(); ++i) {
    const RingProtocol &x = a.hw.ring_protocols[i], &y = b.hw.ring_protocols[i];
    EXPECT_TRUE(x.name == y.name && x.base_s == y.base_s && x.intra_step_s == y.intra_step_s &&
                x.inter_step_s == y.inter_step_s && x.busbw_fraction == y.busbw_fraction &&
                x.intra_step_multi_node_s == y.intra_step_multi_node_s &&
                x.busbw_fraction_multi_node == y.busbw_fraction_multi_node) << x.name;
  }
  expect_same(a.hw.p2p_intra, b.hw.p2p_intra, "p2p_intra");
  expect_same(a.hw.p2p_inter, b.hw.p2p_inter, "p2p_inter");
  expect_same(a.hw.host_link, b.hw.host_link, "host_link");
  expect_same(a.hw.host_pass, b.hw.host_pass, "host_pass");
  EXPECT_EQ(a.hw.ranks_per_core, b.hw.ranks_per_core);
  EXPECT_EQ(a.attention_kernel, b.attention_kernel);
  ASSERT_EQ(a.hw.shape.has_value(), b.hw.shape.has_value());
  if (a.hw.shape) {
    const GemmShapeModel &x = *a.hw.shape, &y = *b.hw.shape;
    EXPECT_EQ(x.sm_count, y.sm_count);
    ASSERT_EQ(x.tiles.size(), y.tiles.size());
    for (size_t i = 0; i < x.tiles.size(); ++i) EXPECT_TRUE(x.tiles[i].m == y.tiles[i].m && x.tiles[i].n == y.tiles[i].n);
    EXPECT_EQ(x.gemm_fraction, y.gemm_fraction);
    EXPECT_EQ(x.peak_flops, y.peak_flops);
    EXPECT_EQ(x.l2_bytes_per_s, y.l2_bytes_per_s);
    EXPECT_EQ(x.memory_bytes_per_s, y.memory_bytes_per_s);
    EXPECT_EQ(x.gemm_alpha_s, y.gemm_alpha_s);
    ASSERT_EQ(x.attention.size(), y.attention.size());
    for (size_t i = 0; i < x.attention.size(); ++i)
      EXPECT_TRUE(x.attention[i].head_dim == y.attention[i].head_dim && x.attention[i].forward == y.attention[i].forward &&
                  x.attention[i].backward == y.attention[i].backward);
  }
  EXPECT_EQ(a.sources, b.sources);
}

TEST(HardwareFile, ShippedFilesLoadInSiUnits) {
  const HardwareSpec s = load_hardware_file(shipped("a100-40gb"));
  EXPECT_EQ(s.name, "a100-40gb");
  const json j = shipped_json("a100-40gb");
  EXPECT_EQ(s.device_memory_bytes, j["device_memory_gib"].get<double>() * 1073741824.0);
  EXPECT_EQ(s.peak_flops[size_t(Precision::bf16)], j["peak_tflops"]["bf16"].get<double>() * 1e12);
  EXPECT_EQ(s.hw.memory.per_s, j["memory"]["gb_per_s"].get<double>() * 1e9);
  EXPECT_EQ(s.hw.memory.alpha_s, j["memory"]["alpha_us"].get<double>() / 1e6);
  EXPECT_EQ(s.hw.ranks_per_node, j["ranks_per_node"].get<int>());
  EXPECT_EQ(s.hw.collectives.size(), j["collectives"].size());
  // NCCL's ring model, in microseconds in the file: LL's 3.6 us base, Simple's 9.6 us a network step.
  ASSERT_EQ(s.hw.ring_protocols.size(), 3u);
  EXPECT_EQ(s.hw.ring_protocols[0].name, "LL");
  EXPECT_EQ(s.hw.ring_protocols[0].base_s, 3.6 / 1e6);
  EXPECT_EQ(s.hw.ring_protocols[2].inter_step_s, 9.6 / 1e6);
  EXPECT_EQ(s.hw.ring_protocols[0].busbw_fraction, 0.3333);
  EXPECT_EQ(s.hw.ring_protocols[0].busbw_fraction_multi_node, 0.25);
  EXPECT_EQ(s.hw.ring_protocols[0].intra_step_multi_node_s, 0.846 / 1e6);
  EXPECT_EQ(s.hw.ring_protocols[1].intra_step_multi_node_s, s.hw.ring_protocols[1].intra_step_s);  // absent: the one-node figure
  for (const char* name : kShipped) EXPECT_NO_THROW(load_hardware_file(shipped(name))) << name;
}

// Every figure's field has a source: each top-level key but name, description and sources is
// the first part of at least one key of "sources".
TEST(HardwareFile, EveryFigureCitesASource) {
  for (const char* name : kShipped) {
    const json j = shipped_json(name);
    for (const auto& [field, v] : j.items()) {
      if (field == "name" || field == "description" || field == "sources") continue;
      bool cited = false;
      for (const auto& [k, text] : j["sources"].items()) cited |= k.substr(0, k.find('.')) == field;
      EXPECT_TRUE(cited) << name << ": no source for " << field;
    }
  }
}

TEST(HardwareFile, WrittenFileLoadsBackIdentically) {
  const std::string path = ::testing::TempDir() + "hardware_round_trip.json";
  for (const char* name : kShipped) {
    const HardwareSpec s = load_hardware_file(shipped(name));
    write_hardware_file(path, s);
    expect_same(load_hardware_file(path), s);
  }
  // A calibration's numbers (not read from a file): exact where the file's units allow, else
  // within one unit in the last place; a second write is the same document.
  HardwareSpec s = load_hardware_file(shipped("h100-sxm"));
  s.hw.memory = {3.7123456789012345e-6, 1.2345678901234567e12};
  s.hw.gemm[0] = {1.0 / 3.0 * 1e-5, 2.0 / 3.0 * 1e13};
  s.device_memory_bytes = 12345678901.0;
  write_hardware_file(path, s);
  const HardwareSpec back = load_hardware_file(path);
  EXPECT_NEAR(back.hw.memory.alpha_s, s.hw.memory.alpha_s, 1e-15 * s.hw.memory.alpha_s);
  EXPECT_NEAR(back.hw.memory.per_s, s.hw.memory.per_s, 1e-15 * s.hw.memory.per_s);
  EXPECT_NEAR(back.hw.gemm[0].per_s, s.hw.gemm[0].per_s, 1e-15 * s.hw.gemm[0].per_s);
  EXPECT_EQ(back.device_memory_bytes, s.device_memory_bytes);  // GiB: a power of two
  EXPECT_EQ(hardware_to_json(load_hardware_file(path)), hardware_to_json(back));
  // The optional keys of a calibrated CPU machine: absent by default, written and read back.
  EXPECT_FALSE(hardware_to_json(s).contains("ranks_per_core"));
  EXPECT_FALSE(hardware_to_json(s).contains("host_pass"));
  s = load_hardware_file(shipped("h100-sxm"));
  s.hw.ranks_per_core = 2, s.hw.host_pass = {0, 1.5e9};
  write_hardware_file(path, s);
  expect_same(load_hardware_file(path), s);
  json j = hardware_to_json(s);
  j["ranks_per_core"] = 0.5;
  EXPECT_THROW(hardware_from_json(j, "x.json"), InputError);
  std::remove(path.c_str());
}

// Each kind of malformed document is refused, naming the file and the key.
TEST(HardwareFile, MalformedFilesAreRefusedNamingTheKey) {
  struct Case {
    std::string what;
    void (*edit)(json&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {"missing rate", [](json& j) { j["memory"].erase("gb_per_s"); }, "x.json: missing \"memory.gb_per_s\""},
      {"missing section", [](json& j) { j.erase("host_link"); }, "missing \"host_link\""},
      {"missing peak", [](json& j) { j["peak_tflops"].erase("fp16"); }, "missing \"peak_tflops.fp16\""},
      {"unknown key", [](json& j) { j["gemm"]["bf16"]["tflop"] = 1; },
       "unknown key \"gemm.bf16.tflop\" (did you mean \"gemm.bf16.tflops\"?)"},
      {"unknown top key", [](json& j) { j["ranks_per_nodes"] = 8; }, "unknown key \"ranks_per_nodes\""},
      {"wrong type", [](json& j) { j["ranks_per_node"] = "8"; }, "\"ranks_per_node\" must be an integer"},
      {"number as string", [](json& j) { j["attention"]["fp16"]["tflops"] = "156"; },
       "\"attention.fp16.tflops\" must be a number"},
      {"zero rate", [](json& j) { j["collectives"][3]["busbw_gb_per_s"] = 0; },
       "\"collectives[3].busbw_gb_per_s\" must be > 0"},
      {"negative peak", [](json& j) { j["peak_tflops"]["bf16"] = -312; }, "\"peak_tflops.bf16\" must be > 0"},
      {"negative alpha", [](json& j) { j["p2p_inter"]["alpha_us"] = -1; }, "\"p2p_inter.alpha_us\" must be >= 0"},
      {"bad link", [](json& j) { j["collectives"][0]["link"] = "nvlink"; }, "\"collectives[0].link\" must be"},
      {"group of one", [](json& j) { j["collectives"][0]["group"] = 1; }, "\"collectives[0].group\" must be in [2,"},
      {"repeated fit", [](json& j) { j["collectives"][1] = j["collectives"][0]; }, "repeats the fit of group 2"},
      {"no fits", [](json& j) { j["collectives"] = json::array(); }, "\"collectives\" must be a non-empty array"},
      {"not an object", [](json& j) { j["memory"] = 1244; }, "\"memory\" must be an object"},
      {"source of nothing", [](json& j) { j["sources"]["hbm"] = "x"; }, "\"sources.hbm\" names no field"},
      {"empty source", [](json& j) { j["sources"]["memory.gb_per_s"] = ""; }, "must be a non-empty string"},
      {"ring not an array", [](json& j) { j["ring_protocols"] = json::object(); }, "\"ring_protocols\" must be an array of 1 to 8"},
      {"ring empty", [](json& j) { j["ring_protocols"] = json::array(); }, "\"ring_protocols\" must be an array of 1 to 8"},
      {"ring repeated", [](json& j) { j["ring_protocols"][1]["name"] = "LL"; }, "\"ring_protocols[1].name\" repeats protocol \"LL\""},
      {"ring negative step", [](json& j) { j["ring_protocols"][2]["inter_step_us"] = -9.6; },
       "\"ring_protocols[2].inter_step_us\" must be >= 0"},
      {"ring fraction", [](json& j) { j["ring_protocols"][0]["busbw_fraction"] = 1.5; },
       "\"ring_protocols[0].busbw_fraction\" must be a fraction in (0, 1]"},
      {"ring missing key", [](json& j) { j["ring_protocols"][0].erase("base_us"); }, "missing \"ring_protocols[0].base_us\""},
      {"ring unknown key", [](json& j) { j["ring_protocols"][0]["bas_us"] = 1; }, "unknown key \"ring_protocols[0].bas_us\""},
      {"ring entry not an object", [](json& j) { j["ring_protocols"][1] = 3; }, "\"ring_protocols[1]\" must be an object"},
      {"ring name too long", [](json& j) { j["ring_protocols"][0]["name"] = std::string(17, 'x'); },
       "\"ring_protocols[0].name\" must be 1 to 16 characters"},
      {"ring nine entries", [](json& j) { for (int k = 0; k < 6; ++k) j["ring_protocols"].push_back(j["ring_protocols"][0]); },
       "\"ring_protocols\" must be an array of 1 to 8"},
      {"ring zero fraction", [](json& j) { j["ring_protocols"][2]["busbw_fraction"] = 0; },
       "\"ring_protocols[2].busbw_fraction\" must be > 0"},
      {"ring multi-node fraction", [](json& j) { j["ring_protocols"][0]["busbw_fraction_multi_node"] = 2; },
       "\"ring_protocols[0].busbw_fraction_multi_node\" must be a fraction in (0, 1]"},
  };
  for (const Case& c : cases) {
    json j = shipped_json("a100-40gb");
    c.edit(j);
    try {
      hardware_from_json(j, "x.json");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.what << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("x.json: ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(load_hardware_file("/nonexistent/hw.json"), InputError);
}

// The GEMM shape model's figures: read into SI units, all or none, each malformed one refused.
TEST(HardwareFile, ShapeModelFigures) {
  const HardwareSpec a100 = load_hardware_file(shipped("a100-80gb"));
  ASSERT_TRUE(a100.hw.shape.has_value());
  EXPECT_EQ(a100.hw.shape->sm_count, 108);
  EXPECT_EQ(a100.hw.shape->gemm_fraction[1], 0.859);
  EXPECT_EQ(a100.hw.shape->l2_bytes_per_s, 7219e9);
  EXPECT_EQ(a100.hw.shape->memory_bytes_per_s, a100.hw.memory.per_s);
  EXPECT_EQ(a100.hw.shape->peak_flops, a100.peak_flops);
  EXPECT_EQ(a100.attention_kernel, AttentionKernel::fused);
  EXPECT_EQ(load_hardware_file(shipped("h100-sxm")).hw.shape->sm_count, 132);
  EXPECT_EQ(load_hardware_file(shipped("h200-sxm")).hw.shape->sm_count, 132);
  json j = shipped_json("a100-40gb");  // without the shape model and the kernel: flat rates, materialized
  for (const char* k : {"sm_count", "gemm_tiles", "gemm_fraction", "l2_gb_per_s", "fused_attention", "attention_kernel"})
    j.erase(k), j["sources"].erase(k);
  const HardwareSpec flat = hardware_from_json(j, "x.json");
  EXPECT_FALSE(flat.hw.shape.has_value());
  EXPECT_EQ(flat.attention_kernel, AttentionKernel::materialized);
  EXPECT_FALSE(hardware_to_json(flat).contains("sm_count"));
  struct Case {
    std::string what;
    void (*edit)(json&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {"one figure missing", [](json& j) { j.erase("l2_gb_per_s"); }, "missing \"l2_gb_per_s\": the shape model needs"},
      {"fraction above 1", [](json& j) { j["gemm_fraction"]["bf16"] = 1.2; }, "\"gemm_fraction.bf16\" must be a fraction"},
      {"tile side 0", [](json& j) { j["gemm_tiles"][2] = {0, 128}; }, "\"gemm_tiles[2]\" must be [m, n]"},
      {"no tiles", [](json& j) { j["gemm_tiles"] = json::array(); }, "\"gemm_tiles\" must be a non-empty array"},
      {"zero SMs", [](json& j) { j["sm_count"] = 0; }, "\"sm_count\" must be in [1,"},
      {"head dims descending", [](json& j) { j["fused_attention"][1]["head_dim"] = 32; },
       "\"fused_attention[1].head_dim\" must be larger"},
      {"attention fraction 0", [](json& j) { j["fused_attention"][0]["backward"] = 0; },
       "\"fused_attention[0].backward\" must be > 0"},
      {"unknown kernel", [](json& j) { j["attention_kernel"] = "flash"; }, "\"attention_kernel\" must be \"materialized\" or \"fused\""},
      {"fused without the model",
       [](json& j) {
         for (const char* k : {"sm_count", "gemm_tiles", "gemm_fraction", "l2_gb_per_s", "fused_attention"}) j.erase(k);
       },
       "\"attention_kernel\" fused needs the shape model"},
  };
  for (const Case& c : cases) {
    json k = shipped_json("a100-40gb");
    c.edit(k);
    try {
      hardware_from_json(k, "x.json");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.what << ": " << e.what();
    }
  }
}

TEST(HardwareFile, NamesResolveBesideTheSourceTree) {
  EXPECT_EQ(resolve_hardware_file("a100-40gb"), shipped("a100-40gb"));
  EXPECT_EQ(resolve_hardware_file("/some/file.json"), "/some/file.json");  // a path is taken as given
  try {
    resolve_hardware_file("a100-40g");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean a100-40gb?"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtb
