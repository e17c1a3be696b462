// The layout spellings table and the parsers of every input form; see layout_spec.h.
#include "reference/layout/layout_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "kernels/error.h"
#include "reference/json_keys.h"

namespace dtb {

using nlohmann::json;

const std::vector<LayoutSpelling>& layout_spellings() {
  static const std::vector<LayoutSpelling> table = {
      // key                            name                  config key                 spec       name key        field key                  memory flag
      {LayoutKey::tp,                 "tp",                 "tensor_parallel",         "TP",      "tp",           "tp",                      "--tp"},
      {LayoutKey::pp,                 "pp",                 "pipeline_parallel",       "PP",      "pp",           "pp",                      "--pp"},
      {LayoutKey::dp,                 "dp",                 "data_parallel",           "DP",      "dp",           "dp",                      "--dp"},
      {LayoutKey::ep,                 "ep",                 "expert_parallel",         "EP",      "ep",           "ep",                      "--expert-parallel"},
      {LayoutKey::sequence_parallel,  "sequence_parallel",  "sequence_parallel",       "sp",      "sp",           "sequence_parallel",       "--sequence-parallel"},
      {LayoutKey::schedule,           "schedule",           "schedule",                "",        "schedule",     "schedule",                "--schedule"},
      {LayoutKey::virtual_stages,     "virtual_stages",     "virtual_stages",          "v",       "v",            "virtual_stages",          "--virtual-stages"},
      {LayoutKey::pipeline_layers,    "pipeline_layers",    "pipeline_layers",         "layers",  "layers",       "pipeline_layers",         "--pipeline-layers"},
      {LayoutKey::micro_batches,      "micro_batches",      "micro_batches",           "",        "m",            "micro_batches",           "--micro-batches"},
      {LayoutKey::zero_stage,         "zero_stage",         "zero_stage",              "zero",    "zero",         "zero_stage",              "--zero-stage"},
      {LayoutKey::offload,            "offload",            "offload_optimizer",       "offload", "offload",      "offload_optimizer",       "--offload-optimizer"},
      {LayoutKey::precision,          "precision",          "precision",               "",        "precision",    "precision",               "--precision"},
      {LayoutKey::recompute,          "recompute",          "recompute",               "",        "recompute",    "recompute",               "--recompute"},
      {LayoutKey::comm_type,          "comm_type",          "communication_data_type", "",        "comm",         "communication_data_type", ""},
      {LayoutKey::dp_allreduce,       "dp_allreduce",       "dp_allreduce",            "hier",    "dp_allreduce", "dp_allreduce",            ""},
      {LayoutKey::staleness,          "staleness",          "staleness",               "stale",   "stale",        "staleness",               ""},
      {LayoutKey::delay_compensation, "delay_compensation", "delay_compensation",      "dc",      "dc",           "delay_compensation",      ""},
      {LayoutKey::local_steps,        "local_steps",        "local_steps",             "local",   "local",        "local_steps",             ""},
      {LayoutKey::cp,                 "cp",                 "context_parallel",        "CP",      "cp",           "cp",                      "--cp"},
      {LayoutKey::cp_comm_type,       "cp_comm_type",       "cp_comm_type",            "",        "cp_comm",      "cp_comm_type",            "--cp-comm-type"},
  };
  return table;
}

const LayoutSpelling& spelling(LayoutKey k) {
  const LayoutSpelling& s = layout_spellings().at(size_t(k));
  DTB_CHECK(s.key == k, "layout_spellings: rows out of enum order");
  return s;
}

namespace {
std::string key_of(LayoutKey k) { return spelling(k).config_key; }
// A lambda as record names and messages print it: the shortest form that reads back ("0.1").
std::string number_text(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}
// The schedule names (a spec's schedule option; the config key's values).
constexpr const char* kSchedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
}  // namespace

int zero_stage_from_json(const json& s, const std::string& path, int lo, int hi) {
  const std::string k = key_of(LayoutKey::zero_stage);
  return int(int_in_range(s, k, path + "." + k, lo, hi));
}

ParallelLayout parallel_layout_from_json(const json& s, const std::string& path, const GptConfig& model,
                                         int micro_batches, int global_batch, int world_size, int seq_len) {
  const std::string tp = key_of(LayoutKey::tp), pp = key_of(LayoutKey::pp), dp = key_of(LayoutKey::dp);
  const std::string vs = key_of(LayoutKey::virtual_stages), ep = key_of(LayoutKey::ep);
  ParallelLayout l;
  l.tp = int(int_in_range(s, tp, path + "." + tp, 1, 1 << 16));
  // A dense model's section has no expert_parallel (the config drops it: harness/config.cc).
  l.ep = s.contains(ep) ? int(int_in_range(s, ep, path + "." + ep, 1, 1 << 16)) : 1;
  l.pp = int(int_in_range(s, pp, path + "." + pp, 1, 1 << 16));
  const std::string sp = key_of(LayoutKey::sequence_parallel);
  if (s.contains(sp)) {
    if (!s.at(sp).is_boolean()) throw InputError(path + "." + sp + ": must be true or false, got " + s.at(sp).dump());
    l.sequence_parallel = s.at(sp).get<bool>();
  }
  l.dp = int(int_in_range(s, dp, path + "." + dp, 0, 1 << 20));
  // context_parallel and cp_comm_type: absent, 1 and "p2p" (a section without them trains as before).
  const std::string cp = key_of(LayoutKey::cp), cpt = key_of(LayoutKey::cp_comm_type);
  if (s.contains(cp)) l.cp = int(int_in_range(s, cp, path + "." + cp, 1, 1 << 16));
  if (s.contains(cpt)) {
    if (!s.at(cpt).is_string()) throw InputError(path + "." + cpt + ": must be \"p2p\" or \"all_gather\", got " + printable(s.at(cpt).dump(), 40));
    l.cp_comm_type = s.at(cpt).get<std::string>();
  }
  l.virtual_stages = int(int_in_range(s, vs, path + "." + vs, 1, 1024));
  l.schedule = s.at(key_of(LayoutKey::schedule)).get<std::string>();
  // pipeline_layers: absent or [] for the even split, else one layer count per virtual stage.
  const std::string pl = key_of(LayoutKey::pipeline_layers);
  if (s.contains(pl)) {
    const json& a = s.at(pl);
    if (!a.is_array())
      throw InputError(path + "." + pl + ": must be a list of layer counts per virtual stage (or [] for an even split), got " +
                       printable(a.dump(), 40));
    for (const json& x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > kMaxStageLayers)
        throw InputError(path + "." + pl + ": " + printable(x.dump(), 20) + " is not a layer count in [1, " +
                         std::to_string(kMaxStageLayers) + "]");
      l.pipeline_layers.push_back(x.get<int>());
    }
  }
  auto n = [](int64_t x) { return std::to_string(x); };
  // tp x pp below: tp x cp x pp where context parallel (the messages name cp only then).
  const std::string tpn = l.cp > 1 ? tp + " (" + n(l.tp) + ") x " + cp + " (" + n(l.cp) + ")" : tp + " (" + n(l.tp) + ")";
  const int64_t tcp = int64_t(l.tp) * l.cp;
  if (tcp * l.pp > world_size)
    throw InputError(path + ": " + tpn + " x " + pp + " (" + n(l.pp) + ") = " +
                     n(tcp * l.pp) + " exceeds the world size " + n(world_size));
  if (l.world() > world_size)
    throw InputError(path + ": " + tpn + " x " + dp + " (" + n(l.dp) + ") x " + pp + " (" +
                     n(l.pp) + ") = " + n(l.world()) + " is not the world size " + n(world_size));
  l.micro_batches = micro_batches;
  if (l.dp == 0) {
    if (world_size % (tcp * l.pp) != 0)
      throw InputError(path + ": " + tpn + " x " + pp + " (" + n(l.pp) +
                       ") does not divide the world size " + n(world_size));
    l.dp = int(world_size / (tcp * l.pp));
  }
  try {
    validate_layout(l, model, global_batch, world_size, seq_len);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what());
  }
  return l;
}

ZeroConfig zero_config_from_json(const json& s, const std::string& path) {
  ZeroConfig z;
  z.stage = zero_stage_from_json(s, path);
  const std::string ok = key_of(LayoutKey::offload);
  const std::string off = s.at(ok).get<std::string>();
  if (off != "none" && off != "cpu")
    throw InputError(path + "." + ok + ": '" + printable(off, 40) + "' is not \"none\" or \"cpu\"");
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

Recompute parse_recompute_key(const json& s, const std::string& path) {
  const std::string k = key_of(LayoutKey::recompute);
  const std::string r = s.at(k).get<std::string>();
  for (Recompute x : {Recompute::none, Recompute::selective, Recompute::full})
    if (r == to_string(x)) return x;
  throw InputError(path + "." + k + ": '" + printable(r, 40) + "' is not none, selective or full");
}

Precision precision_from_json(const json& s, const std::string& path, std::optional<Fp8Settings>* fp8) {
  const std::string k = key_of(LayoutKey::precision);
  const std::string p = s.at(k).get<std::string>();
  if (fp8 && p == "fp8") {
    *fp8 = fp8_settings_from_json(s.value("fp8", json::object()), path + ".fp8");
    return Precision::bf16;  // FP8 linears over bf16 storage, as Transformer Engine's autocast
  }
  if (p != "fp32" && p != "bf16" && p != "fp16")
    throw InputError(path + "." + k + ": '" + printable(p, 40) + "' is not fp32, bf16" + (fp8 ? ", fp16 or fp8" : " or fp16"));
  if (fp8) fp8->reset();
  return parse_precision(p);
}

bool backend_has_half_ops(const std::string& backend) { return backend == "cpu" || backend == "cuda"; }

void require_half_ops(const std::string& backend, Precision p, const std::string& key) {
  if (p == Precision::fp32 || backend_has_half_ops(backend)) return;
  throw InputError(key + ": " + std::string(to_string(p)) + " needs a backend with bf16 and fp16 ops; the " +
                   printable(backend, 40) + " backend has none");
}

bool fp32_communication_from_json(const json& s, const std::string& path, Precision p) {
  const std::string k = key_of(LayoutKey::comm_type);
  const std::string c = s.at(k).get<std::string>();
  const std::string mine(to_string(p));
  if (c != "auto" && c != "fp32" && c != mine)
    throw InputError(path + "." + k + ": '" + printable(c, 40) + "' is not \"auto\", \"fp32\" or " +
                     "the run's precision \"" + mine + "\" (gradients are reduced in their own type or in fp32)");
  return c == "fp32" && p != Precision::fp32;
}

int dp_allreduce_from_json(const json& s, const std::string& path, int node_ranks) {
  const std::string k = key_of(LayoutKey::dp_allreduce);
  const std::string v = s.at(k).get<std::string>();
  if (v == "flat") return 0;
  if (v == "hierarchical") return node_ranks;
  throw InputError(path + "." + k + ": '" + printable(v, 40) + "' is not \"flat\" or \"hierarchical\"");
}

LayoutSpec layout_from_json(const json& s, const std::string& path, const GptConfig& model, int micro_batches,
                            int global_batch, int world_size, int seq_len) {
  LayoutSpec spec;
  spec.l = parallel_layout_from_json(s, path, model, micro_batches, global_batch, world_size, seq_len);
  spec.z = zero_config_from_json(s, path);
  spec.recompute = parse_recompute_key(s, path);
  spec.precision = precision_from_json(s, path, &spec.fp8);
  spec.z.fp32_communication = fp32_communication_from_json(s, path, spec.precision);
  return spec;
}

namespace {
// A layout spec's dimensions ("TP2xPP2", upper case) into `l`; `bad` makes the error.
template <typename Bad>
void parse_spec_dims(std::string dims, ParallelLayout& l, const Bad& bad) {
  for (char& c : dims) c = char(std::toupper(static_cast<unsigned char>(c)));
  const std::string names[5] = {spelling(LayoutKey::tp).spec_token, spelling(LayoutKey::dp).spec_token,
                                spelling(LayoutKey::pp).spec_token, spelling(LayoutKey::ep).spec_token,
                                spelling(LayoutKey::cp).spec_token};
  bool seen[5] = {false, false, false, false, false};
  size_t pos = 0;
  while (pos < dims.size()) {
    const std::string dim = dims.substr(pos, 2);
    const int which = int(std::find(names, names + 5, dim) - names);
    if (which == 5) throw bad("has an unknown dimension at '" + printable(dims.substr(pos), 20) + "' (TP, CP, DP, PP, EP)");
    if (seen[which]) throw bad("names " + dim + " twice");
    seen[which] = true;
    pos += 2;
    size_t end = pos;
    while (end < dims.size() && std::isdigit(static_cast<unsigned char>(dims[end]))) ++end;
    if (end == pos || end - pos > 4) throw bad("needs a size after " + dim);
    const int size = std::stoi(dims.substr(pos, end - pos));
    if (size < 1) throw bad("has " + dim + " size 0");
    (which == 0 ? l.tp : which == 1 ? l.dp : which == 2 ? l.pp : which == 3 ? l.ep : l.cp) = size;
    pos = end;
    if (pos < dims.size()) {
      if (dims[pos] != 'X') throw bad("joins dimensions with '" + printable(std::string(1, dims[pos])) + "', not 'x'");
      ++pos;
      if (pos == dims.size()) throw bad("ends with 'x'");
    }
  }
  if (seen[3] && !seen[1]) l.dp = l.ep;  // "EP2": the experts split over all the DP ranks
}
}  // namespace

LayoutSpec parse_layout_spec(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return InputError(path + ": '" + printable(text, 40) + "' " + why +
                      " (expected e.g. \"TP2xPP2xDP2\", \"PP4:gpipe\", \"PP2:interleaved:v2\", \"DP2:zero3:offload\")");
  };
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ':') parts.push_back(text.substr(start, i - start)), start = i + 1;
  // The dimensions and each of the 12 option kinds at most once (a repeat is refused below, by name).
  if (parts.empty() || parts.size() > 13 || parts[0].empty()) throw bad("is not a layout");
  LayoutSpec spec;
  parse_spec_dims(parts[0], spec.l, bad);
  const std::string v = spelling(LayoutKey::virtual_stages).spec_token, zero = spelling(LayoutKey::zero_stage).spec_token;
  const std::string offload = spelling(LayoutKey::offload).spec_token;
  const std::string sp = spelling(LayoutKey::sequence_parallel).spec_token;
  const std::string layers = spelling(LayoutKey::pipeline_layers).spec_token;
  const std::string hier = spelling(LayoutKey::dp_allreduce).spec_token;
  const std::string stale = spelling(LayoutKey::staleness).spec_token, dc = spelling(LayoutKey::delay_compensation).spec_token;
  const std::string local = spelling(LayoutKey::local_steps).spec_token;
  bool seen_opt[12] = {};  // schedule, v, zero, offload, recompute, sp, layers, hier, stale, dc, local, cp comm type
  auto digits_after = [](const std::string& o, size_t k) {
    return o.size() > k && o.size() <= k + 4 &&
           std::all_of(o.begin() + long(k), o.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& o = parts[i];
    int which;
    if (std::find(std::begin(kSchedules), std::end(kSchedules), o) != std::end(kSchedules)) {
      which = 0;
      spec.l.schedule = o;
    } else if (std::tolower(static_cast<unsigned char>(o[0])) == v[0] && digits_after(o, v.size())) {
      which = 1;
      spec.l.virtual_stages = std::stoi(o.substr(v.size()));
    } else if (o.rfind(zero, 0) == 0 && digits_after(o, zero.size())) {
      which = 2;
      spec.z.stage = std::stoi(o.substr(zero.size()));
    } else if (o == offload) {
      which = 3;
      spec.z.offload_optimizer = true;
    } else if (o == to_string(Recompute::full) || o == to_string(Recompute::selective)) {
      which = 4;
      spec.recompute = parse_recompute(o);
    } else if (o == sp) {
      which = 5;
      spec.l.sequence_parallel = true;
    } else if (o == "p2p" || o == "all_gather") {  // context parallelism's cp_comm_type (Megatron's values)
      which = 11;
      spec.l.cp_comm_type = o;
    } else if (o.rfind(hier, 0) == 0 && digits_after(o, hier.size())) {
      which = 7;
      spec.hier_node_ranks = std::stoi(o.substr(hier.size()));
      if (spec.hier_node_ranks < 1) throw bad("has " + hier + "0 (nodes of at least one rank)");
    } else if (o.rfind(layers, 0) == 0) {
      which = 6;
      try {
        spec.l.pipeline_layers = parse_pipeline_layers(o.substr(layers.size()));
      } catch (const InputError& e) {
        throw bad("has " + std::string(e.what()));
      }
    } else if (o.rfind(stale, 0) == 0 && digits_after(o, stale.size())) {
      which = 8;
      spec.dp_sync.staleness = std::stoi(o.substr(stale.size()));
      if (spec.dp_sync.staleness < 1) throw bad("has staleness " + o.substr(stale.size()) + " (staleK needs K >= 1)");
    } else if (o.rfind(local, 0) == 0 && digits_after(o, local.size())) {
      which = 10;
      spec.dp_sync.local_steps = std::stoi(o.substr(local.size()));
      if (spec.dp_sync.local_steps < 1) throw bad("has local_steps " + o.substr(local.size()) + " (localH needs H >= 1)");
    } else if (o.rfind(dc, 0) == 0) {
      which = 9;
      spec.dp_sync.delay_compensation = kDefaultDelayCompensation;
      if (o.size() > dc.size()) {  // "dcX": lambda X
        const std::string x = o.substr(dc.size());
        char* end = nullptr;
        const double v = std::strtod(x.c_str(), &end);
        if (end != x.c_str() + x.size() || !(v > 0) || v > 1e6)
          throw bad("has delay compensation '" + printable(x, 20) + "' (dcX needs a number X in (0, 1e6])");
        spec.dp_sync.delay_compensation = v;
      }
    } else {
      throw bad("has an unknown option '" + printable(o, 20) +
                "' (gpipe, 1f1b, interleaved, zb-h1, vN, zeroN, offload, full, selective, sp, layersA+B+.., hierN, "
                "staleK, dc, dcX, localH, p2p, all_gather)");
    }
    if (seen_opt[which])
      throw bad(which == 0 ? "names a second schedule ('" + printable(o, 20) + "')"
                           : "repeats an option ('" + printable(o, 20) + "')");
    seen_opt[which] = true;
  }
  if (seen_opt[9] && !seen_opt[8]) throw bad("has dc without staleK (delay compensation compensates staleness)");
  if (seen_opt[8] && seen_opt[10]) throw bad("combines staleK with localH (stale gradients or local steps, not both)");
  if (seen_opt[11] && spec.l.cp == 1) throw bad("names a CP communication type without a CP dimension (e.g. CP2:all_gather)");
  return spec;
}

void validate_moe_layout(const LayoutSpec&, const GptConfig& model, const std::string& backend,
                         const std::string& path) {
  if (model.moe.num_experts == 0) return;
  const std::string moe = "model.num_experts = " + std::to_string(model.moe.num_experts);
  if (backend != "cpu")
    throw InputError(path + ": " + moe + ": MoE layers run on the CPU backend only so far, not " + printable(backend, 40));
}

std::string layout_record_name(const LayoutSpec& s) {
  std::string name;
  auto seg = [&](LayoutKey k, const std::string& value) {  // appends "[/]key:value"
    if (!name.empty()) name += '/';
    name += spelling(k).name_key;
    name += ':';
    name += value;
  };
  const ParallelLayout& l = s.l;
  seg(LayoutKey::tp, std::to_string(l.tp));
  seg(LayoutKey::dp, std::to_string(l.dp));
  seg(LayoutKey::pp, std::to_string(l.pp));
  seg(LayoutKey::schedule, l.schedule);
  if (l.ep > 1) seg(LayoutKey::ep, std::to_string(l.ep));
  if (l.cp > 1) seg(LayoutKey::cp, std::to_string(l.cp));
  if (l.cp > 1 && l.cp_comm_type != ParallelLayout{}.cp_comm_type) seg(LayoutKey::cp_comm_type, l.cp_comm_type);
  if (l.sequence_parallel) seg(LayoutKey::sequence_parallel, "on");
  if (l.schedule == "interleaved") seg(LayoutKey::virtual_stages, std::to_string(l.virtual_stages));
  if (!l.pipeline_layers.empty()) seg(LayoutKey::pipeline_layers, pipeline_layers_text(l.pipeline_layers));
  if (s.z.stage > 0) seg(LayoutKey::zero_stage, std::to_string(s.z.stage));
  if (s.z.offload_optimizer) seg(LayoutKey::offload, "cpu");
  if (s.recompute != Recompute::none) seg(LayoutKey::recompute, std::string(to_string(s.recompute)));
  if (s.fp8) {  // FP8 linears over bf16: "precision:fp8/fp8_recipe:<recipe>"
    seg(LayoutKey::precision, "fp8");
    name += std::string("/fp8_recipe:") + to_string(s.fp8->recipe);
  } else if (s.precision != Precision::fp32) {
    seg(LayoutKey::precision, std::string(to_string(s.precision)));
  }
  if (s.hier_node_ranks > 0) seg(LayoutKey::dp_allreduce, spelling(LayoutKey::dp_allreduce).spec_token + std::to_string(s.hier_node_ranks));
  if (s.dp_sync.staleness > 0) seg(LayoutKey::staleness, std::to_string(s.dp_sync.staleness));
  if (s.dp_sync.delay_compensation > 0) seg(LayoutKey::delay_compensation, number_text(s.dp_sync.delay_compensation));
  if (s.dp_sync.local_steps > 0) seg(LayoutKey::local_steps, std::to_string(s.dp_sync.local_steps));
  return name;
}

void add_layout_fields(json& rec, const LayoutSpec& s) {
  auto f = [&](LayoutKey k) -> json& { return rec[spelling(k).field_key]; };
  f(LayoutKey::tp) = s.l.tp;
  f(LayoutKey::dp) = s.l.dp;
  f(LayoutKey::pp) = s.l.pp;
  f(LayoutKey::ep) = s.l.ep;
  f(LayoutKey::sequence_parallel) = s.l.sequence_parallel;
  f(LayoutKey::schedule) = s.l.schedule;
  f(LayoutKey::virtual_stages) = s.l.virtual_stages;
  f(LayoutKey::pipeline_layers) = s.l.pipeline_layers;
  f(LayoutKey::zero_stage) = s.z.stage;
  f(LayoutKey::offload) = s.z.offload_optimizer ? "cpu" : "none";
  f(LayoutKey::recompute) = std::string(to_string(s.recompute));
  f(LayoutKey::precision) = s.fp8 ? std::string("fp8") : std::string(to_string(s.precision));
  if (s.fp8) rec["fp8_recipe"] = to_string(s.fp8->recipe);  // absent without FP8: every other record as before
  if (s.l.cp > 1) {  // absent without context parallelism: the records of every other layout as before
    f(LayoutKey::cp) = s.l.cp;
    f(LayoutKey::cp_comm_type) = s.l.cp_comm_type;
  }
  if (s.hier_node_ranks > 0) {  // absent when flat: the records of every flat layout as before
    f(LayoutKey::dp_allreduce) = "hierarchical";
    rec[std::string(spelling(LayoutKey::dp_allreduce).field_key) + "_ranks_per_node"] = s.hier_node_ranks;
  }
  if (!s.dp_sync.synchronous()) {
    f(LayoutKey::staleness) = s.dp_sync.staleness;
    f(LayoutKey::delay_compensation) = s.dp_sync.delay_compensation;
    f(LayoutKey::local_steps) = s.dp_sync.local_steps;
  }
}

json to_json(const ParallelLayout& l) {
  return {{"tp", l.tp}, {"dp", l.dp}, {"pp", l.pp}, {"ep", l.ep}, {"cp", l.cp}, {"cp_comm_type", l.cp_comm_type},
          {"sequence_parallel", l.sequence_parallel},
          {"micro_batches", l.micro_batches},
          {"schedule", l.schedule}, {"virtual_stages", l.virtual_stages}, {"pipeline_layers", l.pipeline_layers}};
}

json to_json(const ZeroConfig& z) {
  return {{"stage", z.stage}, {"offload_optimizer", z.offload_optimizer}, {"reduce_bucket_size", z.reduce_bucket_size},
          {"allgather_bucket_size", z.allgather_bucket_size}, {"overlap_comm", z.overlap_comm},
          {"fp32_communication", z.fp32_communication}};
}

json to_json(const DpSync& d) {
  return {{"staleness", d.staleness}, {"delay_compensation", d.delay_compensation}, {"local_steps", d.local_steps},
          {"outer_lr", d.outer_lr}, {"outer_momentum", d.outer_momentum}, {"replicas", d.replicas}};
}

json to_json(const LayoutSpec& s) {
  return {{"layout", to_json(s.l)}, {"zero", to_json(s.z)}, {"recompute", std::string(to_string(s.recompute))},
          {"precision", std::string(to_string(s.precision))}, {"hier_node_ranks", s.hier_node_ranks},
          {"dp_sync", to_json(s.dp_sync)}, {"fp8", s.fp8 ? fp8_settings_json(*s.fp8) : json(nullptr)}};
}

}  // namespace dtb
