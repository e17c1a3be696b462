// Hardware files (harness/hardware_file.h): the strict reader, the writer, --hardware's lookup.
#include "harness/hardware_file.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "harness/config.h"
#include "harness/source_dir.h"
#include "kernels/error.h"

namespace dtb {

using nlohmann::json;

namespace {

constexpr double kGiB = 1073741824.0;
constexpr double kMinRate = 1e-6, kMaxValue = 1e7;  // a positive figure's range, in the file's units
constexpr const char* kPrecisions[] = {"fp32", "bf16", "fp16"};  // index int(Precision)
constexpr const char* kTopKeys[] = {"name",      "description", "device_memory_gib", "ranks_per_node",
                                    "peak_tflops", "gemm",       "attention",          "memory",
                                    "collectives", "p2p_intra",  "p2p_inter",          "host_link",
                                    "sources",     "ranks_per_core", "host_pass",        "sm_count",
                                    "gemm_tiles",  "gemm_fraction",  "l2_gb_per_s",      "fused_attention",
                                    "attention_kernel", "ring_protocols"};
constexpr const char* kShapeKeys[] = {"sm_count", "gemm_tiles", "gemm_fraction", "l2_gb_per_s", "fused_attention"};

// File units to SI: a value u in the file is u * mul / div in the spec. The writer inverts it so
// that the reader gives the value back exactly when some u does (hardware_to_json's promise).
struct Unit {
  double mul = 1, div = 1;
  double in(double u) const { return u * mul / div; }
  double out(double x) const {
    double u = x * div / mul;
    for (int k = 0; k < 4 && in(u) != x; ++k) {
      const double up = std::nextafter(u, HUGE_VAL), down = std::nextafter(u, -HUGE_VAL);
      u = std::abs(in(up) - x) < std::abs(in(down) - x) ? up : down;
    }
    return u;
  }
};
constexpr Unit kMicro{1, 1e6}, kTera{1e12, 1}, kGiga{1e9, 1}, kGibi{kGiB, 1};

// "text" in double quotes (built by appending: GCC 12 warns, wrongly, on "literal" + std::string).
std::string in_quotes(const std::string& text) {
  std::string q(1, '"');
  q += text;
  q += '"';
  return q;
}

// A JSON object read strictly: every key asked for must be there, and no other.
class Obj {
 public:
  Obj(const json& j, std::string path, const std::string& where) : j_(j), path_(std::move(path)), where_(where) {
    if (!j.is_object())
      fail((path_.empty() ? std::string("the document") : in_quotes(path_)) + " must be an object, got " +
           std::string(j.type_name()));
  }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(where_ + ": " + what); }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  bool has(const std::string& k) const { return j_.contains(k); }
  const json& at(const std::string& k) {
    seen_.push_back(k);
    const auto it = j_.find(k);
    if (it == j_.end()) {
      std::vector<std::string> others;  // a misspelling of k among the keys present?
      for (const auto& [other, v] : j_.items()) others.push_back(other);
      const std::string near = nearest_name(k, others);
      fail("missing " + in_quotes(key(k)) + (near.empty() ? "" : " (found " + in_quotes(key(printable(near, 40))) + ": misspelt?)"));
    }
    return *it;
  }
  // A number in the file's units: > 0 (or >= 0), and within [kMinRate, kMaxValue] for a positive
  // one, at most kMaxValue otherwise: beyond them no real machine lies, and the plan's
  // arithmetic would print inf or 1e300-second steps.
  double number(const std::string& k, bool positive) {
    const json& v = at(k);
    if (!v.is_number()) fail(in_quotes(key(k)) + " must be a number, got " + std::string(v.type_name()));
    const double x = v.get<double>();
    if (!std::isfinite(x) || (positive ? !(x > 0) : x < 0))
      fail(in_quotes(key(k)) + " must be " + (positive ? "> 0" : ">= 0") + ", got " + v.dump());
    if (x > kMaxValue || (positive && x < kMinRate))
      fail(in_quotes(key(k)) + " = " + v.dump() + " is outside [" + (positive ? "1e-06" : "0") + ", 1e+07]");
    return x;
  }
  int integer(const std::string& k, int min) {
    const json& v = at(k);
    if (!v.is_number_integer()) fail(in_quotes(key(k)) + " must be an integer, got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < min || x > (1 << 20)) fail(in_quotes(key(k)) + " must be in [" + std::to_string(min) + ", 1048576], got " + v.dump());
    return int(x);
  }
  std::string string(const std::string& k) {
    const json& v = at(k);
    if (!v.is_string()) fail(in_quotes(key(k)) + " must be a string, got " + std::string(v.type_name()));
    return v.get<std::string>();
  }
  Obj object(const std::string& k) { return Obj(at(k), key(k), where_); }
  // After every key is read: refuse the others, naming the nearest valid key.
  void done() const {
    for (const auto& [k, v] : j_.items()) {
      if (std::find(seen_.begin(), seen_.end(), k) != seen_.end()) continue;
      const std::string near = nearest_name(k, seen_);
      fail("unknown key " + in_quotes(key(printable(k, 40))) + (near.empty() ? "" : " (did you mean " + in_quotes(key(near)) + "?)"));
    }
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& where_;
  std::vector<std::string> seen_;
};

AlphaBeta alpha_rate(Obj o, const char* rate_key, Unit rate) {
  AlphaBeta ab{kMicro.in(o.number("alpha_us", false)), rate.in(o.number(rate_key, true))};
  o.done();
  return ab;
}

json alpha_rate_json(const AlphaBeta& ab, const char* rate_key, Unit rate) {
  return {{"alpha_us", kMicro.out(ab.alpha_s)}, {rate_key, rate.out(ab.per_s)}};
}

std::array<AlphaBeta, 3> per_precision(Obj o) {
  std::array<AlphaBeta, 3> out{};
  for (size_t p = 0; p < 3; ++p) out[p] = alpha_rate(o.object(kPrecisions[p]), "tflops", kTera);
  o.done();
  return out;
}

CollectiveFit collective(const json& j, const std::string& path, const std::string& where) {
  Obj o(j, path, where);
  CollectiveFit f;
  f.group = o.integer("group", 2);
  const std::string link = o.string("link");
  if (link != "intra_node" && link != "inter_node")
    o.fail(in_quotes(o.key("link")) + " must be \"intra_node\" or \"inter_node\", got " + in_quotes(printable(link, 40)));
  f.link = link == "intra_node" ? LinkClass::intra_node : LinkClass::inter_node;
  f.bus = {kMicro.in(o.number("alpha_us", false)), kGiga.in(o.number("busbw_gb_per_s", true))};
  o.done();
  return f;
}

// A fraction (of the peak, of a bandwidth): a number in (0, 1].
double fraction(Obj& o, const std::string& k) {
  const double x = o.number(k, true);
  if (x > 1) o.fail(in_quotes(o.key(k)) + " must be a fraction in (0, 1], got " + std::to_string(x));
  return x;
}

// NCCL's ring model, protocol by protocol (RingProtocol): a non-empty array, names distinct; the
// multi-node figures optional (default: the one-node ones).
std::vector<RingProtocol> ring_protocols(const json& j, const std::string& where) {
  if (!j.is_array() || j.empty() || j.size() > 8)
    throw InputError(where + ": \"ring_protocols\" must be an array of 1 to 8 {name, base_us, intra_step_us, inter_step_us, "
                             "busbw_fraction[, intra_step_multi_node_us, busbw_fraction_multi_node]}, got " +
                     (j.is_array() ? std::to_string(j.size()) + " entries" : std::string(j.type_name())));
  std::vector<RingProtocol> out;
  for (size_t i = 0; i < j.size(); ++i) {
    Obj o(j[i], "ring_protocols[" + std::to_string(i) + "]", where);
    RingProtocol r;
    r.name = o.string("name");
    if (r.name.empty() || r.name.size() > 16) o.fail(in_quotes(o.key("name")) + " must be 1 to 16 characters");
    for (const RingProtocol& q : out)
      if (q.name == r.name) o.fail(in_quotes(o.key("name")) + " repeats protocol " + in_quotes(printable(r.name, 16)));
    r.base_s = kMicro.in(o.number("base_us", false));
    r.intra_step_s = kMicro.in(o.number("intra_step_us", false));
    r.inter_step_s = kMicro.in(o.number("inter_step_us", false));
    r.busbw_fraction = fraction(o, "busbw_fraction");
    r.intra_step_multi_node_s =
        o.has("intra_step_multi_node_us") ? kMicro.in(o.number("intra_step_multi_node_us", false)) : r.intra_step_s;
    r.busbw_fraction_multi_node =
        o.has("busbw_fraction_multi_node") ? fraction(o, "busbw_fraction_multi_node") : r.busbw_fraction;
    o.done();
    out.push_back(r);
  }
  return out;
}

// The shape model's figures (all present: the caller checked), with the file's peak, HBM rate and
// alphas; validated by the model's own check besides the file's.
GemmShapeModel shape_model(Obj& top, const HardwareSpec& s, const std::string& where) {
  GemmShapeModel g;
  g.sm_count = top.integer("sm_count", 1);
  const json& tiles = top.at("gemm_tiles");
  if (!tiles.is_array() || tiles.empty()) top.fail("\"gemm_tiles\" must be a non-empty array of [m, n] tiles");
  for (size_t i = 0; i < tiles.size(); ++i) {
    const json& t = tiles[i];
    const bool ok = t.is_array() && t.size() == 2 && t[0].is_number_integer() && t[1].is_number_integer() &&
                    t[0].get<int64_t>() >= 1 && t[0].get<int64_t>() <= 4096 && t[1].get<int64_t>() >= 1 &&
                    t[1].get<int64_t>() <= 4096;
    if (!ok) top.fail(in_quotes("gemm_tiles[" + std::to_string(i) + "]") + " must be [m, n], integers in [1, 4096], got " + printable(t.dump(), 40));
    g.tiles.push_back({int(t[0].get<int64_t>()), int(t[1].get<int64_t>())});
  }
  Obj fr = top.object("gemm_fraction");
  for (size_t p = 0; p < 3; ++p) g.gemm_fraction[p] = fraction(fr, kPrecisions[p]);
  fr.done();
  g.l2_bytes_per_s = kGiga.in(top.number("l2_gb_per_s", true));
  const json& fa = top.at("fused_attention");
  if (!fa.is_array() || fa.empty()) top.fail("\"fused_attention\" must be a non-empty array of {head_dim, forward, backward}");
  for (size_t i = 0; i < fa.size(); ++i) {
    Obj o(fa[i], "fused_attention[" + std::to_string(i) + "]", where);
    FusedAttentionFraction f{o.integer("head_dim", 1), fraction(o, "forward"), fraction(o, "backward")};
    o.done();
    if (i > 0 && f.head_dim <= g.attention.back().head_dim)
      top.fail(in_quotes("fused_attention[" + std::to_string(i) + "].head_dim") + " must be larger than the one before it");
    g.attention.push_back(f);
  }
  g.peak_flops = s.peak_flops;
  g.memory_bytes_per_s = s.hw.memory.per_s;
  for (size_t p = 0; p < 3; ++p) g.gemm_alpha_s[p] = s.hw.gemm[p].alpha_s, g.attention_alpha_s[p] = s.hw.attention[p].alpha_s;
  try {
    validate_gemm_shape_model(g);
  } catch (const InputError& e) {
    top.fail(e.what());
  }
  return g;
}

}  // namespace

HardwareSpec hardware_from_json(const json& j, const std::string& where) {
  Obj top(j, "", where);
  HardwareSpec s;
  s.name = top.string("name");
  s.description = top.string("description");
  for (const auto& [k, text] : {std::pair{"name", &s.name}, std::pair{"description", &s.description}}) {
    if (text->empty()) top.fail(in_quotes(k) + " is empty");
    for (unsigned char c : *text)  // printed in a plan's header line
      if (c < 0x20 || c == 0x7f) top.fail(in_quotes(k) + " has a control character: one line of text");
  }
  s.device_memory_bytes = kGibi.in(top.number("device_memory_gib", true));
  s.hw.ranks_per_node = top.integer("ranks_per_node", 1);
  Obj peak = top.object("peak_tflops");
  for (size_t p = 0; p < 3; ++p) s.peak_flops[p] = kTera.in(peak.number(kPrecisions[p], true));
  peak.done();
  s.hw.gemm = per_precision(top.object("gemm"));
  s.hw.attention = per_precision(top.object("attention"));
  for (size_t p = 0; p < 3; ++p)  // achievable is at most the peak: MFU stays <= 100 %
    for (const auto& [what, ab] : {std::pair{"gemm", s.hw.gemm[p]}, std::pair{"attention", s.hw.attention[p]}})
      if (ab.per_s > s.peak_flops[p] * (1 + 1e-12))
        top.fail(in_quotes(std::string(what) + "." + kPrecisions[p] + ".tflops") + " = " + std::to_string(ab.per_s / 1e12) +
                 " exceeds " + in_quotes(std::string("peak_tflops.") + kPrecisions[p]) + " = " +
                 std::to_string(s.peak_flops[p] / 1e12));
  s.hw.memory = alpha_rate(top.object("memory"), "gb_per_s", kGiga);
  const json& coll = top.at("collectives");
  if (!coll.is_array() || coll.empty()) top.fail("\"collectives\" must be a non-empty array of fits");
  for (size_t i = 0; i < coll.size(); ++i) {
    s.hw.collectives.push_back(collective(coll[i], "collectives[" + std::to_string(i) + "]", where));
    for (size_t k = 0; k < i; ++k)
      if (s.hw.collectives[k].group == s.hw.collectives[i].group && s.hw.collectives[k].link == s.hw.collectives[i].link)
        top.fail(in_quotes("collectives[" + std::to_string(i) + "]") + " repeats the fit of group " +
                 std::to_string(s.hw.collectives[i].group) + " on its link");
  }
  // The model prices every group within a node with an intra-node fit, and no such group is
  // larger than a node: one fit at least where a node has 2 or more ranks, none larger than it.
  bool intra = false;
  for (size_t i = 0; i < s.hw.collectives.size(); ++i) {
    const CollectiveFit& f = s.hw.collectives[i];
    if (f.link != LinkClass::intra_node) continue;
    intra = true;
    if (f.group > s.hw.ranks_per_node)
      top.fail(in_quotes("collectives[" + std::to_string(i) + "]") + " is an intra-node fit of group " +
               std::to_string(f.group) + ", larger than a node (\"ranks_per_node\" = " +
               std::to_string(s.hw.ranks_per_node) + ")");
  }
  if (!intra && s.hw.ranks_per_node > 1)
    top.fail("\"collectives\" has no intra_node fit, which the ranks of a node (\"ranks_per_node\" = " +
             std::to_string(s.hw.ranks_per_node) + ") communicate over");
  if (top.has("ring_protocols")) s.hw.ring_protocols = ring_protocols(top.at("ring_protocols"), where);
  s.hw.p2p_intra = alpha_rate(top.object("p2p_intra"), "gb_per_s", kGiga);
  s.hw.p2p_inter = alpha_rate(top.object("p2p_inter"), "gb_per_s", kGiga);
  s.hw.host_link = alpha_rate(top.object("host_link"), "gb_per_s", kGiga);
  // Optional, for a machine whose ranks share cores (a calibrated CPU machine): ranks per core
  // (default 1) and the trainer's host pass over the gradient (default none).
  if (top.has("ranks_per_core")) {
    s.hw.ranks_per_core = top.number("ranks_per_core", true);
    if (s.hw.ranks_per_core < 1) top.fail("\"ranks_per_core\" must be >= 1, got " + top.at("ranks_per_core").dump());
  }
  if (top.has("host_pass")) s.hw.host_pass = alpha_rate(top.object("host_pass"), "g_elements_per_s", kGiga);
  // The GEMM and attention shape model: its figures all or none.
  int shape_keys = 0;
  for (const char* k : kShapeKeys) shape_keys += top.has(k) ? 1 : 0;
  if (shape_keys > 0 && shape_keys < int(std::size(kShapeKeys)))
    for (const char* k : kShapeKeys)
      if (!top.has(k)) top.fail("missing " + in_quotes(k) + ": the shape model needs sm_count, gemm_tiles, gemm_fraction, l2_gb_per_s and fused_attention together");
  if (shape_keys > 0) s.hw.shape = shape_model(top, s, where);
  if (top.has("attention_kernel")) {
    const json& v = top.at("attention_kernel");
    if (!v.is_string() || (v != "materialized" && v != "fused"))
      top.fail("\"attention_kernel\" must be \"materialized\" or \"fused\", got " + printable(v.dump(), 40));
    s.attention_kernel = parse_attention_kernel(v.get<std::string>());
    if (s.attention_kernel == AttentionKernel::fused && !s.hw.shape)
      top.fail("\"attention_kernel\" fused needs the shape model's figures (sm_count, gemm_tiles, gemm_fraction, l2_gb_per_s, fused_attention)");
  }
  const json& src = top.at("sources");
  if (!src.is_object()) top.fail("\"sources\" must be an object of field -> source text");
  if (src.empty()) top.fail("\"sources\" is empty: say where the figures come from");
  const std::vector<std::string> fields(std::begin(kTopKeys), std::end(kTopKeys));
  // A source names a field, optionally narrowed by the file's key names (gemm.tflops,
  // collectives.inter_node.busbw_gb_per_s): each part a key the schema has.
  const std::vector<std::string> parts = {"fp32", "bf16", "fp16", "alpha_us", "tflops", "gb_per_s", "busbw_gb_per_s",
                                          "g_elements_per_s", "intra_node", "inter_node", "group", "link",
                                          "base_us", "intra_step_us", "inter_step_us", "busbw_fraction",
                                          "intra_step_multi_node_us", "busbw_fraction_multi_node"};
  for (const auto& [k, v] : src.items()) {
    if (!v.is_string() || v.get<std::string>().empty()) top.fail(in_quotes("sources." + printable(k, 40)) + " must be a non-empty string");
    size_t at = k.find('.');
    const std::string field = k.substr(0, at);
    bool known = std::find(fields.begin(), fields.end(), field) != fields.end();
    while (known && at != std::string::npos) {
      const size_t next = k.find('.', at + 1);
      known = std::find(parts.begin(), parts.end(), k.substr(at + 1, next - at - 1)) != parts.end();
      at = next;
    }
    if (!known) top.fail(in_quotes("sources." + printable(k, 40)) + " names no field of the file");
  }
  s.sources = src;
  top.done();
  return s;
}

json hardware_to_json(const HardwareSpec& s) {
  json j;
  j["name"] = s.name;
  j["description"] = s.description;
  j["device_memory_gib"] = kGibi.out(s.device_memory_bytes);
  j["ranks_per_node"] = s.hw.ranks_per_node;
  for (size_t p = 0; p < 3; ++p) {
    j["peak_tflops"][kPrecisions[p]] = kTera.out(s.peak_flops[p]);
    j["gemm"][kPrecisions[p]] = alpha_rate_json(s.hw.gemm[p], "tflops", kTera);
    j["attention"][kPrecisions[p]] = alpha_rate_json(s.hw.attention[p], "tflops", kTera);
  }
  j["memory"] = alpha_rate_json(s.hw.memory, "gb_per_s", kGiga);
  j["collectives"] = json::array();
  for (const CollectiveFit& f : s.hw.collectives)
    j["collectives"].push_back({{"group", f.group},
                                {"link", f.link == LinkClass::intra_node ? "intra_node" : "inter_node"},
                                {"alpha_us", kMicro.out(f.bus.alpha_s)},
                                {"busbw_gb_per_s", kGiga.out(f.bus.per_s)}});
  for (const RingProtocol& r : s.hw.ring_protocols)
    j["ring_protocols"].push_back({{"name", r.name}, {"base_us", kMicro.out(r.base_s)}, {"intra_step_us", kMicro.out(r.intra_step_s)},
                                   {"inter_step_us", kMicro.out(r.inter_step_s)}, {"busbw_fraction", r.busbw_fraction},
                                   {"intra_step_multi_node_us", kMicro.out(r.intra_step_multi_node_s)},
                                   {"busbw_fraction_multi_node", r.busbw_fraction_multi_node}});
  j["p2p_intra"] = alpha_rate_json(s.hw.p2p_intra, "gb_per_s", kGiga);
  j["p2p_inter"] = alpha_rate_json(s.hw.p2p_inter, "gb_per_s", kGiga);
  j["host_link"] = alpha_rate_json(s.hw.host_link, "gb_per_s", kGiga);
  if (s.hw.ranks_per_core != 1) j["ranks_per_core"] = s.hw.ranks_per_core;
  if (s.hw.host_pass.per_s > 0) j["host_pass"] = alpha_rate_json(s.hw.host_pass, "g_elements_per_s", kGiga);
  if (s.hw.shape) {
    const GemmShapeModel& g = *s.hw.shape;
    j["sm_count"] = g.sm_count;
    j["gemm_tiles"] = json::array();
    for (const GemmTile& t : g.tiles) j["gemm_tiles"].push_back({t.m, t.n});
    for (size_t p = 0; p < 3; ++p) j["gemm_fraction"][kPrecisions[p]] = g.gemm_fraction[p];
    j["l2_gb_per_s"] = kGiga.out(g.l2_bytes_per_s);
    j["fused_attention"] = json::array();
    for (const FusedAttentionFraction& f : g.attention)
      j["fused_attention"].push_back({{"head_dim", f.head_dim}, {"forward", f.forward}, {"backward", f.backward}});
  }
  if (s.attention_kernel != AttentionKernel::materialized) j["attention_kernel"] = std::string(to_string(s.attention_kernel));
  j["sources"] = s.sources.is_object() ? s.sources : json::object();
  return j;
}

HardwareSpec load_hardware_file(const std::string& path, const std::string& where_arg) {
  const std::string where = where_arg.empty() ? path : where_arg;
  // The project's reader and strict parser (harness/config.h): a missing, odd or oversized file,
  // a key twice in one object, a number beyond double's range and deep nesting are refused.
  return hardware_from_json(parse_json_input(read_input_file(path, "hardware", size_t(1) << 20), "hardware file " + where),
                            where);
}

void write_hardware_file(const std::string& path, const HardwareSpec& s) {
  std::ofstream f(path);
  if (!(f << hardware_to_json(s).dump(2) << "\n")) throw InputError("hardware file " + path + ": cannot write");
}

std::string resolve_hardware_file(const std::string& arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (arg.empty()) throw InputError("--hardware is empty");
  if (fs::exists(arg, ec) || arg.find('/') != std::string::npos || arg.ends_with(".json")) return arg;
  const fs::path dir = fs::path(source_dir()) / "harness" / "hardware";
  const fs::path file = dir / (arg + ".json");
  if (fs::is_regular_file(file, ec)) return file.string();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  const std::string near = nearest_name(arg, names);
  throw InputError("--hardware '" + printable(arg, 40) + "': no such file and no named hardware" +
                   (near.empty() ? "" : " (did you mean " + near + "?)") + "; named: " + all);
}

}  // namespace dtb
