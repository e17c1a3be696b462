// Training checkpoints' manifest: the run identity and its checks, the step directories and
// `latest`, the history a manifest keeps (reference/checkpoint/checkpoint.h). Not here: the rank file
// format (checkpoint_file.cc) and the collective save and load (checkpoint.cc).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>

#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/checkpoint/checkpoint_io.h"
#include "reference/layout/layout_spec.h"
#include "reference/model/gpt_json.h"

namespace dtb {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_io;

namespace {

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}

// manifest[a][b] (b may be empty) as V, or InputError naming the key.
template <typename V>
V field(const json& m, const std::string& where, const char* a, const char* b = nullptr) {
  const std::string key = b ? std::string(a) + "." + b : a;
  try {
    const json& j = b ? m.at(a).at(b) : m.at(a);
    if constexpr (std::is_same_v<V, std::string>) {
      if (!j.is_string()) throw InputError("");
    } else if constexpr (std::is_same_v<V, bool>) {
      if (!j.is_boolean()) throw InputError("");
    } else {
      if (!j.is_number_integer()) throw InputError("");
    }
    return j.get<V>();
  } catch (const std::exception&) {
    throw InputError("checkpoint " + where + ": manifest.json lacks '" + key + "' or it has the wrong type");
  }
}

// An int field of the manifest (a layout or model size), in [0, 2^30]: a larger value must
// not wrap to a small one that matches the run.
int int_field(const json& m, const std::string& where, const char* a, const char* b = nullptr) {
  (void)field<int64_t>(m, where, a, b);  // present and an integer
  const json& j = b ? m.at(a).at(b) : m.at(a);
  const bool in = !(j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(1) << 30) && j.get<int64_t>() >= 0 &&
                  j.get<int64_t>() <= int64_t(1) << 30;
  if (!in)
    throw InputError("checkpoint " + where + ": manifest.json's '" + (b ? std::string(a) + "." + b : std::string(a)) +
                     "' = " + j.dump() + " is out of range [0, 1073741824]");
  return int(j.get<int64_t>());
}

// The model keys (to_json's) whose values differ, each as "<key> <saved> (this run <run>)", a
// key one side lacks as "none" (a dense model has no MoE keys).
std::string model_differences(const json& saved, const json& run) {
  std::string s;
  auto value = [](const json& m, const std::string& k) { return m.contains(k) ? m.at(k).dump() : std::string("none"); };
  auto add = [&](const std::string& k) {
    const std::string a = value(saved, k), b = value(run, k);
    if (a != b) s += (s.empty() ? "" : ", ") + k + " " + a + " (this run " + b + ")";
  };
  add("num_experts");  // first: whether either is an MoE model at all
  for (const auto& [k, v] : run.items())
    if (k != "num_experts") add(k);
  for (const auto& [k, v] : saved.items())
    if (!run.contains(k) && k != "num_experts") add(k);
  return s;
}

// The keys of a manifest's "layout" object, each a record's field; nothing else may be there.
constexpr LayoutKey kManifestLayoutKeys[] = {LayoutKey::tp,
                                             LayoutKey::dp,
                                             LayoutKey::pp,
                                             LayoutKey::cp,
                                             LayoutKey::virtual_stages,
                                             LayoutKey::schedule,
                                             LayoutKey::ep,
                                             LayoutKey::sequence_parallel,
                                             LayoutKey::pipeline_layers,
                                             LayoutKey::zero_stage,
                                             LayoutKey::offload,
                                             LayoutKey::precision};

// The layout and ZeRO settings a manifest records (validated field by field).
CheckpointRunInfo saved_layout(const json& m, const std::string& where) {
  CheckpointRunInfo saved;
  saved.layout.tp = int_field(m, where, "layout", field_key(LayoutKey::tp));
  saved.layout.dp = int_field(m, where, "layout", field_key(LayoutKey::dp));
  saved.layout.pp = int_field(m, where, "layout", field_key(LayoutKey::pp));
  saved.layout.virtual_stages = int_field(m, where, "layout", field_key(LayoutKey::virtual_stages));
  saved.layout.schedule = field<std::string>(m, where, "layout", field_key(LayoutKey::schedule));
  // Context parallelism: absent in a manifest written before it was recorded (CP 1). The CP
  // ranks of a DP rank hold the same parameters, and ZeRO shards over the data-and-context
  // group, so cp identifies which elements each rank file holds (and the world size). The
  // communication type (p2p, all_gather) holds no state and may change on a resume.
  const bool has_cp = m.at("layout").is_object() && m.at("layout").contains(field_key(LayoutKey::cp));
  saved.layout.cp = has_cp ? int_field(m, where, "layout", field_key(LayoutKey::cp)) : 1;
  if (saved.layout.cp < 1)
    throw InputError("checkpoint " + where + ": manifest.json's 'layout.cp' = 0 is out of range [1, 1073741824]");
  // Expert parallelism: absent in a manifest written before it existed (a dense run, EP 1).
  saved.layout.ep = m.contains("layout") && m["layout"].is_object() && m["layout"].contains(field_key(LayoutKey::ep))
                        ? int_field(m, where, "layout", field_key(LayoutKey::ep))
                        : 1;
  // Sequence parallelism: absent in a manifest written before it existed (off).
  saved.layout.sequence_parallel = m.at("layout").contains(field_key(LayoutKey::sequence_parallel)) &&
                                   field<bool>(m, where, "layout", field_key(LayoutKey::sequence_parallel));
  // The layers per virtual stage: absent in a manifest written before uneven splits ([]: even).
  if (m.at("layout").contains(field_key(LayoutKey::pipeline_layers))) {
    const json& pl = m.at("layout").at(field_key(LayoutKey::pipeline_layers));
    if (!pl.is_array()) throw InputError("checkpoint " + where + ": layout.pipeline_layers is not a list");
    for (const json& x : pl) {
      if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > kMaxStageLayers)
        throw InputError("checkpoint " + where + ": layout.pipeline_layers holds " + x.dump().substr(0, 20));
      saved.layout.pipeline_layers.push_back(x.get<int>());
    }
  }
  saved.zero.stage = int_field(m, where, "layout", field_key(LayoutKey::zero_stage));
  saved.zero.offload_optimizer = field<bool>(m, where, "layout", field_key(LayoutKey::offload));
  // Nothing else: a key this build does not read would be a setting the resume ignores (the
  // model's keys are refused the same way, compared whole).
  std::vector<std::string> keys;
  std::string listed;  // "tp, dp, ..."
  for (LayoutKey k : kManifestLayoutKeys) {
    keys.push_back(field_key(k));
    listed += (listed.empty() ? "" : ", ") + keys.back();
  }
  for (const auto& [k, v] : m.at("layout").items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      throw InputError("checkpoint " + where + ": manifest.json's layout has the unknown key '" + printable(k, 40) +
                       "' (a layout holds " + listed + ")");
  return saved;
}

// Whether two runs' layouts hold their state alike (every rank the same elements).
bool same_layout(const CheckpointRunInfo& x, const CheckpointRunInfo& y, int L) {
  const ParallelLayout& a = x.layout;
  const ParallelLayout& b = y.layout;
  return a.tp == b.tp && a.dp == b.dp && a.pp == b.pp && a.cp == b.cp && a.ep == b.ep &&
         a.sequence_parallel == b.sequence_parallel &&
         a.virtual_stages == b.virtual_stages && stage_layers(a, L) == stage_layers(b, L) &&
         (a.pp == 1 || a.schedule == b.schedule) && x.zero.stage == y.zero.stage &&
         x.zero.offload_optimizer == y.zero.offload_optimizer;
}

bool layout_independent(const json& m) { return m.value("layout_independent", false) == true; }

}  // namespace

std::string resharded_from(const json& m, const CheckpointRunInfo& run) {
  const CheckpointRunInfo saved = saved_layout(m, "");
  return same_layout(saved, run, run.model.L) ? "" : describe_layout(saved);
}

namespace {
}  // namespace

const std::vector<std::string>& checkpoint_recipe_keys() {
  static const std::vector<std::string> keys = {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip",
                                                "micro_batches", "recompute"};
  return keys;
}

json recipe_changes(const json& m, const CheckpointRunInfo& run) {
  json out = json::array();
  if (!m.contains("recipe") || !m["recipe"].is_object()) return out;
  for (const std::string& k : checkpoint_recipe_keys()) {
    const json saved = m["recipe"].value(k, json()), now = run.recipe.value(k, json());
    if (saved != now) out.push_back({{"key", k}, {"saved", saved}, {"now", now}});
  }
  return out;
}

CheckpointRunInfo checkpoint_run_info(const GptConfig& model, const ParallelLayout& layout, const ZeroConfig& zero,
                                      Precision precision, const TrainConfig& cfg, const std::string& dataset_sha256,
                                      Recompute recompute, const std::optional<Fp8Settings>& fp8) {
  CheckpointRunInfo r;
  // AdamW's floats as their shortest decimal (0.01f is 0.01 in the manifest and in a message,
  // not 0.009999999776...): the same float gives the same number on both sides.
  auto dec = [](float x) {
    char b[32];
    const auto r = std::to_chars(b, b + sizeof b, x);
    return std::stod(std::string(b, r.ptr));
  };
  r.recipe = {{"lr", dec(cfg.adamw.lr)},           {"beta1", dec(cfg.adamw.beta1)},
              {"beta2", dec(cfg.adamw.beta2)},     {"eps", dec(cfg.adamw.eps)},
              {"weight_decay", dec(cfg.adamw.weight_decay)}, {"grad_clip", cfg.grad_clip},
              {"micro_batches", cfg.micro_batches}, {"recompute", std::string(to_string(recompute))}};
  r.layout = layout;
  r.zero = zero;
  r.precision = precision;
  r.fp8 = fp8;
  r.model = model;
  r.seed = cfg.seed;
  r.dataset_sha256 = dataset_sha256;
  r.global_batch = cfg.global_batch;
  r.seq_len = cfg.seq_len;
  r.loss_scaling = cfg.loss_scaler.enabled;
  return r;
}

std::string describe_layout(const CheckpointRunInfo& r) {
  const ParallelLayout& l = r.layout;
  std::string s;
  auto tok = [](LayoutKey k) { return std::string(spelling(k).spec_token); };
  if (l.tp > 1) s += tok(LayoutKey::tp) + std::to_string(l.tp) + "x";
  if (l.cp > 1) s += tok(LayoutKey::cp) + std::to_string(l.cp) + "x";
  if (l.pp > 1) s += tok(LayoutKey::pp) + std::to_string(l.pp) + "x";
  s += tok(LayoutKey::dp) + std::to_string(l.dp);
  if (l.ep > 1) s += 'x' + tok(LayoutKey::ep) + std::to_string(l.ep);
  if (l.sequence_parallel) s += ' ' + tok(LayoutKey::sequence_parallel);
  s += ' ' + tok(LayoutKey::zero_stage) + std::to_string(r.zero.stage);
  if (r.zero.offload_optimizer) s += ' ' + tok(LayoutKey::offload);
  if (l.pp > 1) s += " " + l.schedule;
  if (l.virtual_stages > 1) s += ' ' + tok(LayoutKey::virtual_stages) + std::to_string(l.virtual_stages);
  if (!l.pipeline_layers.empty()) s += ' ' + tok(LayoutKey::pipeline_layers) + ' ' + pipeline_layers_text(l.pipeline_layers);
  return s;
}

void TrainHistory::append(const TrainRun& run) {
  losses.insert(losses.end(), run.losses.begin(), run.losses.end());
  loss_scales.insert(loss_scales.end(), run.loss_scales.begin(), run.loss_scales.end());
  grad_norms.insert(grad_norms.end(), run.grad_norms.begin(), run.grad_norms.end());
  skipped.insert(skipped.end(), run.skipped.begin(), run.skipped.end());
}

namespace {
json numbers_to_json(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(std::isfinite(x) ? json(x) : json(nullptr));
  return a;
}
}  // namespace

json history_to_json(const TrainHistory& h) {
  return {{"losses", numbers_to_json(h.losses)},
          {"loss_scales", numbers_to_json(h.loss_scales)},
          {"grad_norms", numbers_to_json(h.grad_norms)},
          {"skipped", h.skipped}};
}

TrainHistory history_from_json(const json& m, int64_t steps, const TrainConfig& cfg, const std::string& step_dir) {
  const std::string bad = "checkpoint " + printable(step_dir) + ": manifest.json's history does not hold the " +
                          std::to_string(steps) + " steps the train suite records";
  TrainHistory h;
  auto numbers = [&](const char* key, size_t n, std::vector<double>& out) {
    const json& a = m.contains("history") && m["history"].is_object() ? m["history"].value(key, json()) : json();
    if (!a.is_array() || a.size() != n) throw InputError(bad);
    for (const json& x : a) {
      if (!x.is_null() && !x.is_number()) throw InputError(bad);
      out.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
    }
  };
  numbers("losses", size_t(steps), h.losses);
  numbers("loss_scales", cfg.loss_scaler.enabled ? size_t(steps) : 0, h.loss_scales);
  // Gradient norms: every step; a checkpoint written when they were recorded only with
  // clipping holds none without it (unknown: NaN).
  const json& norms = m.contains("history") && m["history"].is_object() ? m["history"].value("grad_norms", json()) : json();
  if (cfg.grad_clip <= 0 && steps > 0 && norms.is_array() && norms.empty())
    h.grad_norms.assign(size_t(steps), std::numeric_limits<double>::quiet_NaN());
  else
    numbers("grad_norms", size_t(steps), h.grad_norms);
  std::vector<double> skipped;
  numbers("skipped", cfg.loss_scaler.enabled ? size_t(steps) : 0, skipped);
  for (double x : skipped) h.skipped.push_back(x != 0 ? 1 : 0);
  return h;
}

TrainHistory history_of(const TrainProgress& progress, const TrainConfig& cfg, const std::string& step_dir) {
  json m;
  m["history"] = progress.history;
  return history_from_json(m, progress.next_step, cfg, step_dir);
}

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step-" + std::to_string(step))).string();
}

std::string resolve_resume(const std::string& dir, const std::string& resume_from) {
  if (resume_from.empty()) return "";
  if (resume_from == "latest") {
    if (dir.empty()) throw InputError("\"latest\" needs a checkpoint directory");
    const std::string latest = (fs::path(dir) / "latest").string();
    std::error_code ec;
    if (!fs::exists(latest, ec)) {
      // No latest: a fresh run, unless complete checkpoints (a step directory with its
      // manifest) are there, which the fresh run's saves would overwrite.
      int64_t newest = -1, complete = 0;
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() < 6 || name.size() > 23 || name.compare(0, 5, "step-") != 0 ||
            name.find_first_not_of("0123456789", 5) != std::string::npos || !fs::exists(it->path() / "manifest.json"))
          continue;
        ++complete;
        newest = std::max(newest, int64_t(std::stoll(name.substr(5))));
      }
      if (complete == 0) return "";
      throw InputError("checkpoint directory " + printable(dir) + " has no 'latest' file but holds " +
                       std::to_string(complete) + " complete checkpoint(s), the newest " +
                       checkpoint_step_dir(dir, newest) +
                       ": resume from one by its path, or move them away (a fresh run would overwrite them)");
    }
    const std::vector<char> b = read_all(latest, "checkpoint");
    std::string text(b.begin(), b.end());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
      throw InputError("checkpoint " + latest + ": '" + printable(text, 40) + "' is not a step number");
    return checkpoint_step_dir(dir, std::stoll(text));
  }
  std::error_code ec;
  if (!fs::is_directory(resume_from, ec))
    throw InputError("'" + printable(resume_from) + "' is not a checkpoint step directory (" +
                     (fs::exists(resume_from, ec) ? "not a directory" : "no such directory") + ")");
  return resume_from;
}

namespace {
// The full model's tensors as the rank files' indices address them: name, global shape,
// offset in the flat buffer (gpt_param_layout).
json tensor_table(const GptConfig& model) {
  json t = json::array();
  for (const ParamTensor& p : gpt_param_layout(model))
    t.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}, {"numel", p.numel}});
  return t;
}
}  // namespace

json check_checkpoint_manifest(const std::string& step_dir, const CheckpointRunInfo& run) {
  const std::string path = (fs::path(step_dir) / "manifest.json").string();
  const std::string where = printable(step_dir);
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) throw InputError("checkpoint " + where + ": no such directory");
  if (!fs::exists(path, ec))
    throw InputError("checkpoint " + where + ": no manifest.json (an incomplete checkpoint is never loaded)");
  json m;
  try {
    const std::vector<char> b = read_all(path, "checkpoint manifest");
    m = json::parse(b.begin(), b.end());
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw InputError("checkpoint " + where + ": manifest.json is unreadable: " + printable(what, 120));
  }
  if (!m.is_object()) throw InputError("checkpoint " + where + ": manifest.json is not a JSON object");
  const auto version = field<int64_t>(m, where, "format_version");
  if (version != kCheckpointFormatVersion)
    throw InputError("checkpoint " + where + ": format version " + std::to_string(version) +
                     " is not supported (this build reads " + std::to_string(kCheckpointFormatVersion) + ")");
  const CheckpointRunInfo saved = saved_layout(m, where);
  const std::string prec = field<std::string>(m, where, "layout", "precision");
  const auto world = field<int64_t>(m, where, "world_size");
  const std::string me = "checkpoint " + where + ": ";
  // Another layout: resharded on load (every tensor's elements are indexed in the full model),
  // unless the checkpoint predates that index (format 1 without layout_independent).
  const bool same = same_layout(saved, run, run.model.L);
  if (!same && !layout_independent(m))
    throw InputError(me + "layout " + describe_layout(saved) + " does not match this run's " + describe_layout(run) +
                     " (saved without the index that reshards: resume it on its own layout)");
  if (world != saved.layout.world())
    throw InputError(me + "world size " + std::to_string(world) + " is not its layout " + describe_layout(saved) +
                     "'s " + std::to_string(saved.layout.world()));
  if (same && world != run.world_size())
    throw InputError(me + "world size " + std::to_string(world) + " does not match this run's " +
                     std::to_string(run.world_size()));
  if (prec != precision_name(run.precision))
    throw InputError(me + "precision " + printable(prec, 16) + " does not match this run's " +
                     precision_name(run.precision));
  // FP8: the recipe and every setting of it, or none on both sides (a manifest without the key
  // was saved without FP8).
  {
    const json saved_fp8 = m.contains("fp8") ? m["fp8"] : json(), now = run.fp8 ? fp8_settings_json(*run.fp8) : json();
    auto name = [](const json& f) { return f.is_null() ? std::string("none") : "fp8 " + printable(f.dump(), 160); };
    if (saved_fp8 != now)
      throw InputError(me + "FP8 recipe " + name(saved_fp8) + " does not match this run's " + name(now) +
                       " (the amax histories and scales are the recipe's)");
  }
  // The model: its sizes, and an MoE model's settings (to_json's keys; a dense model has none).
  for (const char* k : {"L", "C", "NH", "T", "V"}) (void)int_field(m, where, "model", k);
  const json want = to_json(run.model);
  if (m.at("model") != want)
    throw InputError(me + "the model differs from this run's: " + printable(model_differences(m.at("model"), want), 300));
  // The tensor table a resharded load places elements by: the model's own, entry by entry (an
  // edited or damaged table was accepted, the rank files' indices placing the elements).
  if (m.contains("tensors")) {
    const json table = tensor_table(run.model);
    const json& saved_table = m["tensors"];
    if (!saved_table.is_array() || saved_table.size() != table.size())
      throw InputError(me + "manifest.json's tensors table does not list the model's " + std::to_string(table.size()) +
                       " tensors");
    for (size_t i = 0; i < table.size(); ++i)
      if (saved_table[i] != table[i])
        throw InputError(me + "manifest.json's tensors[" + std::to_string(i) + "] " +
                         printable(saved_table[i].dump(), 80) + " is not the model's " + printable(table[i].dump(), 80));
  }
  const json& seed = m.contains("seed") ? m["seed"] : json();
  if (!seed.is_number_unsigned() && !seed.is_number_integer())
    throw InputError(me + "manifest.json lacks 'seed' or it has the wrong type");
  if (seed.get<uint64_t>() != run.seed)
    throw InputError(me + "seed " + std::to_string(seed.get<uint64_t>()) + " does not match this run's " +
                     std::to_string(run.seed));
  const std::string ds = field<std::string>(m, where, "dataset_sha256");
  if (!run.dataset_sha256.empty() && ds != run.dataset_sha256)
    throw InputError(me + "dataset sha256 " + printable(ds, 64) + " does not match this run's " + run.dataset_sha256);
  const auto gb = field<int64_t>(m, where, "train", "global_batch"), sl = field<int64_t>(m, where, "train", "seq_len");
  if (gb != run.global_batch)
    throw InputError(me + "global_batch " + std::to_string(gb) + " does not match this run's " +
                     std::to_string(run.global_batch) + " (the data position is a step of that batch)");
  if (sl != run.seq_len)
    throw InputError(me + "seq_len " + std::to_string(sl) + " does not match this run's " +
                     std::to_string(run.seq_len));
  if (field<bool>(m, where, "loss_scaler", "enabled") != run.loss_scaling)
    throw InputError(me + "loss scaling " + (run.loss_scaling ? "off" : "on") + " does not match this run's " +
                     (run.loss_scaling ? "on" : "off"));
  // The recipe: a change breaks the claim that the run is the one it continues, unless named.
  for (const json& c : recipe_changes(m, run)) {
    const std::string k = c["key"];
    if (std::find(run.allowed_changes.begin(), run.allowed_changes.end(), k) == run.allowed_changes.end())
      throw InputError(me + "train." + k + " " + printable(c["saved"].dump(), 40) + " does not match this run's " +
                       printable(c["now"].dump(), 40) + " (dtbench run --allow-changed " + k + " resumes with it)");
  }
  const auto step = field<int64_t>(m, where, "step");
  if (step < 0) throw InputError(me + "step " + std::to_string(step) + " < 0 in manifest.json");
  if (!m.contains("ranks") || !m["ranks"].is_array() || m["ranks"].size() != size_t(world))
    throw InputError(me + "manifest.json does not list " + std::to_string(world) + " rank files");
  return m;
}

void check_checkpoint_files(const std::string& step_dir, const json& manifest) {
  const json& ranks = manifest.at("ranks");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string name = "rank-" + std::to_string(r) + ".bin", path = (fs::path(step_dir) / name).string();
    const json& e = ranks[r];
    if (!e.is_object() || e.value("file", "") != name || !e.contains("bytes") || !e["bytes"].is_number_unsigned())
      throw InputError("checkpoint " + printable(step_dir) + ": manifest.json's entry for rank " + std::to_string(r) +
                       " is malformed");
    const uint64_t want = e["bytes"].get<uint64_t>();
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw InputError("checkpoint file " + path + ": missing");
    if (!fs::is_regular_file(st)) throw InputError("checkpoint file " + path + ": not a regular file");
    const uint64_t have = fs::file_size(path, ec);
    if (ec) throw InputError("checkpoint file " + path + ": unreadable");
    if (have < want)
      throw InputError("checkpoint file " + path + ": truncated: " + std::to_string(have) + " of " +
                       std::to_string(want) + " bytes");
    if (have != want)
      throw InputError("checkpoint file " + path + ": wrong size: " + std::to_string(have) +
                       " bytes, the manifest says " + std::to_string(want));
  }
}


namespace checkpoint_io {


json make_manifest(const CheckpointRunInfo& run, int64_t step, int world_size, const TrainProgress& progress,
                   int64_t adamw_steps, json ranks) {
  const ParallelLayout& l = run.layout;
  return {{"format", "dtbench-checkpoint"},
          {"format_version", kCheckpointFormatVersion},
          // Every rank file indexes its elements in the full model: any layout can load it.
          {"layout_independent", true},
          {"tensors", tensor_table(run.model)},
          {"step", step},
          {"world_size", world_size},
          {"layout",
           {{field_key(LayoutKey::tp), l.tp},
            {field_key(LayoutKey::dp), l.dp},
            {field_key(LayoutKey::pp), l.pp},
            {field_key(LayoutKey::cp), l.cp},
            {field_key(LayoutKey::virtual_stages), l.virtual_stages},
            {field_key(LayoutKey::schedule), l.schedule},
            {field_key(LayoutKey::ep), l.ep},
            {field_key(LayoutKey::sequence_parallel), l.sequence_parallel},
            {field_key(LayoutKey::pipeline_layers), l.pipeline_layers},
            {field_key(LayoutKey::zero_stage), run.zero.stage},
            {field_key(LayoutKey::offload), run.zero.offload_optimizer},
            {field_key(LayoutKey::precision), precision_name(run.precision)}}},
          {"model", to_json(run.model)},
          {"fp8", run.fp8 ? fp8_settings_json(*run.fp8) : json()},
          {"recipe", run.recipe},
          {"seed", run.seed},
          {"dataset_sha256", run.dataset_sha256},
          {"train", {{"global_batch", run.global_batch}, {"seq_len", run.seq_len}}},
          {"loss_scaler",
           {{"enabled", run.loss_scaling},
            {"scale", progress.scaler.scale},
            {"growth_tracker", progress.scaler.growth_tracker},
            {"skipped", progress.scaler.skipped}}},
          {"adamw_steps", adamw_steps},
          {"history", progress.history},
          {"ranks", std::move(ranks)}};
}

}  // namespace checkpoint_io

}  // namespace dtb
