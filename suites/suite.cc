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
#include "reference/progress.h"

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

int64_t int_in_range(const nlohmann::json& s, const std::string& key, const std::string& path,
                     int64_t lo, int64_t hi) {
  const nlohmann::json& v = s.at(key);
  const bool in = v.is_number_integer() &&
                  !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) &&
                  v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in)
    throw InputError(path + " = " + v.dump() + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v.get<int64_t>();
}

double number_in_range(const nlohmann::json& s, const std::string& key, const std::string& path,
                       double lo, double hi) {
  const double x = s.at(key).get<double>();
  if (!(x >= lo && x <= hi))
    throw InputError(path + " = " + s.at(key).dump() + " is out of range [" + nlohmann::json(lo).dump() +
                     ", " + nlohmann::json(hi).dump() + "]");
  return x;
}

namespace {
std::atomic<bool> g_memory_check_forced{false};
}  // namespace

void set_memory_check_forced(bool forced) { g_memory_check_forced = forced; }

void check_fits_in_memory(double bytes_per_rank, int ranks_per_node, const std::string& what) {
  const size_t ram = host_memory_bytes();
  const double limit = 0.8 * double(ram);
  if (ram == 0 || bytes_per_rank * ranks_per_node <= limit) return;
  const std::string text =
      what + ": predicted " + std::to_string(int64_t(bytes_per_rank)) + " bytes (" +
      std::to_string(int64_t(bytes_per_rank / (1 << 20))) + " MiB) per rank x " + std::to_string(ranks_per_node) +
      " ranks per node, more than this machine's memory allows: " + std::to_string(int64_t(limit)) +
      " bytes available to the run (80% of " + std::to_string(ram >> 20) + " MiB)";
  if (!g_memory_check_forced) throw InputError(text + "; --force runs it anyway");
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
  validate_gpt_config(c);
  return c;
}

ParallelLayout parallel_layout_from_json(const nlohmann::json& s, const std::string& path, const GptConfig& model,
                                         int micro_batches, int global_batch, int world_size) {
  ParallelLayout l;
  l.tp = int(int_in_range(s, "tensor_parallel", path + ".tensor_parallel", 1, 1 << 16));
  l.pp = int(int_in_range(s, "pipeline_parallel", path + ".pipeline_parallel", 1, 1 << 16));
  l.dp = int(int_in_range(s, "data_parallel", path + ".data_parallel", 0, 1 << 20));
  l.virtual_stages = int(int_in_range(s, "virtual_stages", path + ".virtual_stages", 1, 1024));
  l.schedule = s.at("schedule").get<std::string>();
  if (int64_t(l.tp) * l.pp > world_size)
    throw InputError(path + ": tensor_parallel (" + std::to_string(l.tp) + ") x pipeline_parallel (" +
                     std::to_string(l.pp) + ") = " + std::to_string(int64_t(l.tp) * l.pp) + " exceeds the world size " +
                     std::to_string(world_size));
  if (l.world() > world_size)
    throw InputError(path + ": tensor_parallel (" + std::to_string(l.tp) + ") x data_parallel (" +
                     std::to_string(l.dp) + ") x pipeline_parallel (" + std::to_string(l.pp) + ") = " +
                     std::to_string(l.world()) + " is not the world size " + std::to_string(world_size));
  l.micro_batches = micro_batches;
  if (l.dp == 0) {
    if (world_size % (int64_t(l.tp) * l.pp) != 0)
      throw InputError(path + ": tensor_parallel (" + std::to_string(l.tp) + ") x pipeline_parallel (" +
                       std::to_string(l.pp) + ") does not divide the world size " + std::to_string(world_size));
    l.dp = world_size / (l.tp * l.pp);
  }
  try {
    validate_layout(l, model, global_batch, world_size);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what());
  }
  return l;
}

ZeroConfig zero_config_from_json(const nlohmann::json& s, const std::string& path) {
  ZeroConfig z;
  z.stage = int(int_in_range(s, "zero_stage", path + ".zero_stage", 0, 3));
  const std::string off = s.at("offload_optimizer").get<std::string>();
  if (off != "none" && off != "cpu")
    throw InputError(path + ".offload_optimizer: '" + printable(off, 40) + "' is not \"none\" or \"cpu\"");
  z.offload_optimizer = off == "cpu";
  z.reduce_bucket_size = size_t(int_in_range(s, "reduce_bucket_size", path + ".reduce_bucket_size", 1, int64_t(1) << 40));
  z.allgather_bucket_size =
      size_t(int_in_range(s, "allgather_bucket_size", path + ".allgather_bucket_size", 1, int64_t(1) << 40));
  z.overlap_comm = s.at("overlap_comm").get<bool>();
  try {
    validate_zero(z);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what());
  }
  return z;
}

LayoutSpec parse_layout_spec(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return InputError(path + ": '" + printable(text, 40) + "' " + why +
                      " (expected e.g. \"TP2xPP2xDP2\", \"PP4:gpipe\", \"PP2:interleaved:v2\", \"DP2:zero3:offload\")");
  };
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ':') parts.push_back(text.substr(start, i - start)), start = i + 1;
  if (parts.empty() || parts.size() > 5 || parts[0].empty()) throw bad("is not a layout");
  ParallelLayout l;
  bool seen[3] = {false, false, false};
  std::string dims = parts[0];
  for (char& c : dims) c = char(std::toupper(static_cast<unsigned char>(c)));
  size_t pos = 0;
  while (pos < dims.size()) {
    const std::string dim = dims.substr(pos, 2);
    const int which = dim == "TP" ? 0 : dim == "DP" ? 1 : dim == "PP" ? 2 : -1;
    if (which < 0) throw bad("has an unknown dimension at '" + printable(dims.substr(pos), 20) + "' (TP, DP, PP)");
    if (seen[which]) throw bad("names " + dim + " twice");
    seen[which] = true;
    pos += 2;
    size_t end = pos;
    while (end < dims.size() && std::isdigit(static_cast<unsigned char>(dims[end]))) ++end;
    if (end == pos || end - pos > 4) throw bad("needs a size after " + dim);
    const int size = std::stoi(dims.substr(pos, end - pos));
    if (size < 1) throw bad("has " + dim + " size 0");
    (which == 0 ? l.tp : which == 1 ? l.dp : l.pp) = size;
    pos = end;
    if (pos < dims.size()) {
      if (dims[pos] != 'X') throw bad("joins dimensions with '" + printable(std::string(1, dims[pos])) + "', not 'x'");
      ++pos;
      if (pos == dims.size()) throw bad("ends with 'x'");
    }
  }
  LayoutSpec spec;
  bool seen_opt[5] = {false, false, false, false, false};  // schedule, v, zero, offload, recompute
  auto digits_after = [](const std::string& o, size_t k) {
    return o.size() > k && o.size() <= k + 4 &&
           std::all_of(o.begin() + long(k), o.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& o = parts[i];
    int which;
    if (o == "gpipe" || o == "1f1b" || o == "interleaved") {
      which = 0;
      l.schedule = o;
    } else if ((o[0] == 'v' || o[0] == 'V') && digits_after(o, 1)) {
      which = 1;
      l.virtual_stages = std::stoi(o.substr(1));
    } else if (o.rfind("zero", 0) == 0 && digits_after(o, 4)) {
      which = 2;
      spec.z.stage = std::stoi(o.substr(4));
    } else if (o == "offload") {
      which = 3;
      spec.z.offload_optimizer = true;
    } else if (o == "full" || o == "selective") {
      which = 4;
      spec.recompute = o == "full" ? Recompute::full : Recompute::selective;
    } else {
      throw bad("has an unknown option '" + printable(o, 20) +
                "' (gpipe, 1f1b, interleaved, vN, zeroN, offload, full, selective)");
    }
    if (seen_opt[which]) throw bad("repeats an option ('" + printable(o, 20) + "')");
    seen_opt[which] = true;
  }
  spec.l = l;
  return spec;
}

Recompute parse_recompute_key(const nlohmann::json& s, const std::string& path) {
  const std::string r = s.at("recompute").get<std::string>();
  for (Recompute x : {Recompute::none, Recompute::selective, Recompute::full})
    if (r == to_string(x)) return x;
  throw InputError(path + ".recompute: '" + printable(r, 40) + "' is not none, selective or full");
}

void apply_recipe_keys(const nlohmann::json& s, const std::string& path, TrainConfig& t, ZeroConfig* z) {
  if (s.contains("precision")) {
    const std::string p = s.at("precision").get<std::string>();
    if (p != "fp32" && p != "bf16" && p != "fp16")
      throw InputError(path + ".precision: '" + printable(p, 40) + "' is not fp32, bf16 or fp16");
    t.precision = parse_precision(p);
  }
  if (s.contains("grad_clip")) t.grad_clip = number_in_range(s, "grad_clip", path + ".grad_clip", 0.0, 1e30);
  if (s.contains("loss_scale")) {
    const std::string ls = s.at("loss_scale").get<std::string>();
    if (ls != "none" && ls != "dynamic" && ls != "auto")
      throw InputError(path + ".loss_scale: '" + printable(ls, 40) + "' is not \"auto\", \"none\" or \"dynamic\"");
    t.loss_scaler.enabled = ls == "dynamic" || (ls == "auto" && t.precision == Precision::fp16);
  }
  if (s.contains("loss_scale_init"))
    t.loss_scaler.init_scale = number_in_range(s, "loss_scale_init", path + ".loss_scale_init", 1e-30, 0x1.0p127);
  if (s.contains("loss_scale_growth_interval"))
    t.loss_scaler.growth_interval =
        int(int_in_range(s, "loss_scale_growth_interval", path + ".loss_scale_growth_interval", 1, 1 << 30));
  if (z && s.contains("communication_data_type")) {
    const std::string c = s.at("communication_data_type").get<std::string>();
    const std::string mine(to_string(t.precision));
    if (c != "auto" && c != "fp32" && c != mine)
      throw InputError(path + ".communication_data_type: '" + printable(c, 40) + "' is not \"auto\", \"fp32\" or " +
                       "the run's precision \"" + mine + "\" (gradients are reduced in their own type or in fp32)");
    z->fp32_communication = c == "fp32" && t.precision != Precision::fp32;
  }
}

void SuiteContext::print(const std::string& line) const {
  if (world.rank() != 0) return;
  clear_progress();
  std::cout << line << '\n' << std::flush;
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
