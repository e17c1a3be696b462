// The suite registry, checks, Google Benchmark records, and config helpers suites share.
#include "suites/suite.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "kernels/error.h"
#include "reference/layout/dp_sync_json.h"
#include "reference/training/progress.h"

namespace dtb {

Check make_check(std::string name, double value, double tolerance, std::string detail) {
  Check c;
  c.name = std::move(name);
  c.value = value;
  c.tolerance = tolerance;
  c.passed = value <= tolerance;  // false for NaN
  c.detail = std::move(detail);
  return c;
}

Check make_not_judged(Check c, std::string reason) {
  DTB_CHECK(!reason.empty(), "make_not_judged: check " + c.name + " needs a reason");
  c.passed = false;
  c.not_judged_reason = std::move(reason);
  return c;
}

void check_fits_in_memory(double bytes_per_rank, int ranks_per_node, const std::string& what,
                          const RunOptions& options) {
  const size_t ram = host_memory_bytes();
  const double limit = 0.8 * double(ram);
  if (ram == 0 || bytes_per_rank * ranks_per_node <= limit) return;
  const std::string text =
      what + ": predicted " + std::to_string(int64_t(bytes_per_rank)) + " bytes (" +
      std::to_string(int64_t(bytes_per_rank / (1 << 20))) + " MiB) per rank x " + std::to_string(ranks_per_node) +
      " ranks per node, more than this machine's memory allows: " + std::to_string(int64_t(limit)) +
      " bytes available to the run (80% of " + std::to_string(ram >> 20) + " MiB)";
  if (!options.force) throw InputError(text + "; --force runs it anyway");
  static std::atomic<int> warned{0};
  if (warned++ < 8) std::fprintf(stderr, "dtbench: warning: %s; running anyway (--force)\n", text.c_str());
}

void check_dir_writable(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string probe = dir + "/.dtbench-write-test";
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) throw InputError(what + " is not writable: '" + printable(dir) + "'");
  std::fclose(f);
  std::filesystem::remove(probe, ec);
}

GptConfig gpt_config_from_json(const nlohmann::json& m, const std::string& path) {
  GptConfig c;
  c.L = int(int_in_range(m, "L", path + ".L", 1, 1024));
  c.C = int(int_in_range(m, "C", path + ".C", 1, 65536));
  c.NH = int(int_in_range(m, "NH", path + ".NH", 1, 65536));
  c.T = int(int_in_range(m, "T", path + ".T", 1, 1 << 20));
  c.V = int(int_in_range(m, "V", path + ".V", 256, 1 << 24));  // byte-level data: ids up to 255
  // Mixture of experts, Megatron-LM's names; each optional (a section without them is dense).
  auto opt_int = [&](const char* k, int& dst, int64_t lo, int64_t hi) {
    if (m.contains(k)) dst = int(int_in_range(m, k, path + "." + k, lo, hi));
  };
  auto opt_num = [&](const char* k, double& dst) {
    if (m.contains(k)) dst = number_in_range(m, k, path + "." + k, 0.0, 1e6);
  };
  opt_int("num_experts", c.moe.num_experts, 0, 1 << 16);
  opt_int("moe_router_topk", c.moe.topk, 1, 1 << 16);
  opt_int("moe_layer_freq", c.moe_layer_freq, 1, 1024);
  opt_int("moe_ffn_hidden_size", c.moe.ffn_hidden, 0, 1 << 20);
  opt_num("moe_aux_loss_coeff", c.moe.aux_loss_coeff);
  opt_num("moe_z_loss_coeff", c.moe.z_loss_coeff);
  if (m.contains("moe_expert_capacity_factor") && !m.at("moe_expert_capacity_factor").is_null()) {
    const auto& v = m.at("moe_expert_capacity_factor");
    if (!v.is_number())
      throw InputError(path + ".moe_expert_capacity_factor must be a number or null (null: no token is dropped)");
    c.moe.capacity_factor = v.get<double>();
  }
  // The family and the Llama block's keys (Megatron-LM / Hugging Face names; docs/models.md).
  if (m.contains("arch")) {
    if (!m.at("arch").is_string()) throw InputError(path + ".arch must be \"gpt2\" or \"llama\"");
    c.arch = parse_model_arch(m.at("arch").get<std::string>(), path + ".arch");
  }
  opt_int("num_kv_heads", c.num_kv_heads, 0, 65536);
  opt_int("ffn_hidden_size", c.ffn_hidden, 0, 1 << 20);
  if (m.contains("rope_theta")) c.rope_theta = number_in_range(m, "rope_theta", path + ".rope_theta", 1.0, 1e12);
  if (m.contains("norm_eps")) c.norm_eps = number_in_range(m, "norm_eps", path + ".norm_eps", 1e-30, 1.0);
  validate_gpt_config(c);
  return c;
}

void require_gpt2(const GptConfig& model, const std::string& path, const std::string& by) {
  if (is_llama(model)) throw InputError(llama_not_supported(by, path + ".arch"));
}

void apply_recipe_keys(const nlohmann::json& s, const std::string& path, TrainConfig& t, LayoutSpec& layout) {
  if (s.contains(spelling(LayoutKey::precision).config_key)) layout.precision = precision_from_json(s, path, s.contains("fp8") ? &layout.fp8 : nullptr);
  if (s.contains("grad_clip")) t.grad_clip = number_in_range(s, "grad_clip", path + ".grad_clip", 0.0, 1e30);
  if (s.contains("loss_scale")) {
    const std::string ls = s.at("loss_scale").get<std::string>();
    if (ls != "none" && ls != "dynamic" && ls != "auto")
      throw InputError(path + ".loss_scale: '" + printable(ls, 40) + "' is not \"auto\", \"none\" or \"dynamic\"");
    t.loss_scaler.enabled = ls == "dynamic" || (ls == "auto" && layout.precision == Precision::fp16);
  }
  if (s.contains("loss_scale_init"))
    t.loss_scaler.init_scale = number_in_range(s, "loss_scale_init", path + ".loss_scale_init", 1e-30, 0x1.0p127);
  if (s.contains("loss_scale_growth_interval"))
    t.loss_scaler.growth_interval =
        int(int_in_range(s, "loss_scale_growth_interval", path + ".loss_scale_growth_interval", 1, 1 << 30));
  // How the DP replicas keep in step (their combinations and the layouts they need: the layout
  // validator, reference/layout/layout_validate.h).
  dp_sync_from_json(s, path, layout.dp_sync);
}

nlohmann::json model_defaults(int L, int C, int NH, int T, int V, bool llama_keys) {
  nlohmann::json j = to_json(GptConfig{L, C, NH, T, V});
  const MoeConfig moe;  // Megatron-LM's defaults but the balance loss's coefficient (its 0; Switch's 1e-2 here)
  j["num_experts"] = 0;
  j["moe_router_topk"] = 2;
  j["moe_layer_freq"] = 1;
  j["moe_ffn_hidden_size"] = 0;
  j["moe_aux_loss_coeff"] = moe.aux_loss_coeff;
  j["moe_z_loss_coeff"] = moe.z_loss_coeff;
  j["moe_expert_capacity_factor"] = nullptr;
  if (!llama_keys) return j;
  j["arch"] = "gpt2";  // the Llama block's keys (0: num_kv_heads NH, ffn_hidden_size by Llama's rule)
  j["num_kv_heads"] = 0;
  j["ffn_hidden_size"] = 0;
  j["rope_theta"] = 10000.0;
  j["norm_eps"] = 1e-5;
  return j;
}

nlohmann::json to_json(const TrainConfig& t) {
  const auto& a = t.adamw;
  const LossScalerConfig& ls = t.loss_scaler;
  return {{"steps", t.steps}, {"global_batch", t.global_batch}, {"micro_batches", t.micro_batches},
          {"seq_len", t.seq_len}, {"seed", t.seed},
          {"adamw", {{"lr", a.lr}, {"beta1", a.beta1}, {"beta2", a.beta2}, {"eps", a.eps},
                     {"weight_decay", a.weight_decay}}},
          {"grad_clip", t.grad_clip},
          {"loss_scaler", {{"enabled", ls.enabled}, {"init_scale", ls.init_scale},
                           {"growth_interval", ls.growth_interval}}}};
}

void SuiteContext::print(const std::string& line) const {
  if (world.rank() != 0) return;
  clear_progress();
  std::cout << line << '\n' << std::flush;
}

void SuiteContext::print_checks(const std::vector<Check>& checks, int name_width, bool failed_only) const {
  char buf[1024];
  for (const Check& c : checks) {
    if (failed_only && c.passed) continue;
    std::snprintf(buf, sizeof buf, "# check %-*s %.3g <= %.3g  %s%s", name_width, c.name.c_str(), c.value, c.tolerance,
                  c.passed ? "ok" : c.judged() ? "FAILED" : "not judged: ", c.not_judged_reason.c_str());
    print(buf);
  }
}

static std::map<std::string, SuiteFactory>& mutable_registry() {
  static std::map<std::string, SuiteFactory> registry;
  return registry;
}

const std::map<std::string, SuiteFactory>& suite_registry() { return mutable_registry(); }

bool register_suite(const std::string& name, SuiteFactory factory) {
  auto [it, inserted] = mutable_registry().emplace(name, std::move(factory));
  DTB_CHECK(inserted, "suite registered twice: " + name);
  return true;
}

nlohmann::json benchmark_record(const std::string& name, int64_t iterations, int repetitions,
                                double real_time_s, double cpu_time_s, const std::string& time_unit) {
  double scale = 1.0;
  if (time_unit == "ns") scale = 1e9;
  else if (time_unit == "us") scale = 1e6;
  else if (time_unit == "ms") scale = 1e3;
  else DTB_CHECK(time_unit == "s", "unknown time unit " + time_unit);
  return {{"name", name},
          {"run_name", name},
          {"run_type", "iteration"},
          {"repetitions", repetitions},
          {"repetition_index", 0},
          {"threads", 1},
          {"iterations", iterations},
          {"real_time", real_time_s * scale},
          {"cpu_time", cpu_time_s * scale},
          {"time_unit", time_unit}};
}

}  // namespace dtb
