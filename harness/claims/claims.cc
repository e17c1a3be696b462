// `dtbench claims` (harness/claims/claims.h): the catalog read and checked, each entry evaluated by
// its evaluator (harness/claims/claims_evaluators.cc) on what the report measured, the rows as text and JSON.
#include "harness/claims/claims.h"

#include <cstdlib>
#include <map>
#include <set>

#include <fmt/printf.h>

#include "harness/claims/claims_evaluators.h"
#include "harness/config.h"
#include "harness/source_dir.h"
#include "kernels/error.h"
#include "reference/layout/layout_spec.h"

namespace dtb {
namespace claims_impl {
namespace {

using nlohmann::json;

// A record's field as the evaluators read it: a number (> 0 when `positive`), an integer >= 1
// or a string; absent only when `optional`. Errors: InputError naming the record and the key.
enum class Field { number, positive, count, text };
void need(const std::string& source, const json& b, const char* key, Field f, bool optional = false) {
  const std::string where =
      "report " + source + ": " + (b.contains("name") ? "record " + printable(b["name"].get<std::string>(), 80) : "context");
  if (!b.contains(key)) {
    if (optional) return;
    throw InputError(where + ": no \"" + key + "\"");
  }
  const json& v = b[key];
  static const char* const kMust[] = {"a number", "a number > 0", "an integer >= 1", "a string"};
  const bool ok = f == Field::text       ? v.is_string()
                  : f == Field::count    ? v.is_number_integer() && v.get<int64_t>() >= 1
                  : f == Field::positive ? v.is_number() && v.get<double>() > 0
                                         : v.is_number();
  if (!ok) throw InputError(where + ": \"" + key + "\" must be " + kMust[int(f)] + ", got " + printable(v.dump(), 40));
}

// What a report measured: the records the evaluators' measured column reads, each field read
// checked for its type (a report summarize_report accepted has its structure checked already).
Measured measured_from(const json* report, const std::string& source) {
  Measured m;
  if (!report || !report->contains("benchmarks") || !(*report)["benchmarks"].is_array()) return m;
  m.have = true;
  if (report->contains("context") && (*report)["context"].contains("world_size")) {
    need(source, (*report)["context"], "world_size", Field::count);
    m.ar_ranks = (*report)["context"]["world_size"].get<int>();
  }
  std::map<double, double> ar_time;
  for (const json& b : (*report)["benchmarks"]) {
    if (!b.is_object() || !b.contains("name") || !b["name"].is_string()) continue;
    const std::string name = b["name"];
    if (b.value("op", json()) == "all_reduce" && b.value("placement", json()) == "out_of_place" && b.contains("bytes") &&
        b.contains("busbw_GBps") && b.contains("real_time")) {
      for (const char* k : {"bytes", "busbw_GBps", "real_time"}) need(source, b, k, Field::positive);
      const double bytes = b["bytes"].get<double>();
      ar_time[bytes] = b["real_time"].get<double>();
      if (bytes > m.ar_bytes) m.ar_bytes = bytes, m.ar_busbw = b["busbw_GBps"].get<double>();
    }
    if (b.contains("bubble_measured")) {
      need(source, b, "bubble_measured", Field::number), need(source, b, "schedule", Field::text);
      need(source, b, "p", Field::count), need(source, b, "m", Field::count);
      need(source, b, field_key(LayoutKey::virtual_stages), Field::count, true);
      m.pipeline.push_back(b);
    }
    if (b.contains("gain") && name.rfind("overlap", 0) == 0) need(source, b, "gain", Field::positive), m.overlap.push_back(b);
    if (b.contains("activation_saving") && b.contains("overhead")) {
      need(source, b, "activation_saving", Field::number), need(source, b, "overhead", Field::number);
      need(source, b, "recompute", Field::text, true);
      m.recompute.push_back(b);
    }
    if (name.rfind("checkpoint/interval/", 0) == 0 && b.contains("save_cost_ms")) {
      need(source, b, "save_cost_ms", Field::number), need(source, b, "save", Field::text, true);
      m.checkpoint_interval.push_back(b);
    }
    if (name.rfind("comm_efficiency/", 0) == 0 && b.contains("speedup_vs_sync")) {
      need(source, b, "speedup_vs_sync", Field::positive), need(source, b, "loss_vs_sync", Field::number, true);
      need(source, b, "method", Field::text), need(source, b, "link", Field::text);
      m.comm_efficiency.push_back(b);
    }
  }
  if (m.ar_bytes > 0) {
    m.ar_time_us = ar_time[m.ar_bytes];
    auto below = ar_time.find(m.ar_bytes);
    if (below != ar_time.begin()) {  // the next smaller size the report has
      --below;
      m.ar_small_bytes = below->first;
      m.ar_small_time_us = below->second;
    }
  }
  return m;
}

}  // namespace
}  // namespace claims_impl

using nlohmann::json;
using claims_impl::evaluators;
using claims_impl::kNoReport;
using claims_impl::Measured;
using claims_impl::measured_from;

namespace {
template <typename... Args>
std::string fmt(const char* f, const Args&... args) {
  return ::fmt::sprintf(f, args...);
}
}  // namespace

std::string default_claims_catalog() {
  if (const char* p = std::getenv("DTB_CLAIMS_CATALOG")) return p;
  return std::string(source_dir()) + "/harness/claims/claims.json";
}

json load_claims_catalog(const std::string& path) {
  // The project's reader and strict parser (harness/config.h): a missing, odd or oversized file,
  // a key twice in one object, a number beyond double's range and deep nesting are refused.
  const json cat = parse_json_input(read_input_file(path, "claims catalog", size_t(1) << 20), "claims catalog " + path);
  if (!cat.is_object() || !cat.contains("claims") || !cat["claims"].is_array())
    throw InputError("claims catalog " + path + ": expected an object with a \"claims\" array");
  for (const auto& [k, v] : cat.items())
    if (k != "claims" && k != "description")
      throw InputError("claims catalog " + path + ": unknown key '" + printable(k, 40) +
                       "' (a catalog has claims and description)");
  if (cat["claims"].empty()) throw InputError("claims catalog " + path + ": the \"claims\" array is empty");
  std::set<int64_t> ids;
  for (const json& e : cat["claims"]) {
    const std::string where = "claims catalog " + path + ": entry " + (e.is_object() && e.contains("id") ? e["id"].dump() : "?");
    if (!e.is_object()) throw InputError(where + ": not an object");
    static const std::set<std::string> kEntryKeys = {"id",        "claim",     "figures",   "conditions",
                                                     "method",    "evaluator", "tolerance", "inputs"};
    for (const auto& [k, v] : e.items())
      if (!kEntryKeys.count(k))
        throw InputError(where + ": unknown key '" + printable(k, 40) +
                         "' (an entry has id, claim, figures, conditions, method, evaluator, tolerance, inputs)");
    if (!e.contains("id") || !e["id"].is_number_integer() || e["id"].get<int64_t>() < 1 ||
        e["id"].get<int64_t>() > 1000000 || (e["id"].is_number_unsigned() && e["id"].get<uint64_t>() > 1000000))
      throw InputError(where + ": \"id\" must be an integer in [1, 1000000]");
    if (!ids.insert(e["id"].get<int64_t>()).second) throw InputError(where + ": duplicate id");
    for (const char* k : {"claim", "figures", "conditions", "method", "evaluator"}) {
      if (!e.contains(k) || !e[k].is_string() || e[k].get<std::string>().empty())
        throw InputError(where + ": \"" + k + "\" must be a non-empty string");
      for (unsigned char c : e[k].get<std::string>())
        if (c < 0x20) throw InputError(where + ": \"" + k + "\" has a control character (a line break?): one line");
    }
    const std::string method = e["method"];
    if (method != "analytic" && method != "suite" && method != "both")
      throw InputError(where + ": method '" + method + "' is not analytic, suite or both");
    const auto ev = evaluators().find(e["evaluator"].get<std::string>());
    if (ev == evaluators().end())
      throw InputError(where + ": unknown evaluator '" + e["evaluator"].get<std::string>() + "'");
    if (!e.contains("tolerance") || !e["tolerance"].is_number() || !(e["tolerance"].get<double>() > 0) ||
        !(e["tolerance"].get<double>() <= 10))
      throw InputError(where + ": \"tolerance\" must be a number in (0, 10] (relative)");
    if (e.contains("inputs") && !e["inputs"].is_object()) throw InputError(where + ": \"inputs\" must be an object");
    const json inputs = e.value("inputs", json::object());
    for (const auto& [k, v] : inputs.items()) {
      const auto spec = ev->second.inputs.find(k);
      if (spec == ev->second.inputs.end()) {
        std::string known;
        for (const auto& [name, s] : ev->second.inputs) known += (known.empty() ? "" : ", ") + name;
        throw InputError(where + ": unknown input '" + printable(k, 40) + "' (evaluator " + ev->first + " reads " + known +
                         ")");
      }
      const std::string want = spec->second.check(v);
      if (!want.empty()) throw InputError(where + ": input '" + k + "' must be " + want + ", got " + printable(v.dump(), 40));
    }
  }
  return cat;
}

std::vector<ClaimResult> evaluate_claims(const json& catalog, const json* report, const std::string& report_source) {
  const Measured ms = measured_from(report, report_source);
  std::vector<ClaimResult> rows;
  for (const json& e : catalog.at("claims")) {
    ClaimResult r;
    r.id = e.at("id");
    r.claim = e.at("claim");
    r.conditions = e.at("conditions");
    r.method = e.at("method");
    r.predicted = e.at("figures");
    r.measured = r.method == "analytic" ? "analytic only" : "";
    const auto it = evaluators().find(e.at("evaluator").get<std::string>());
    if (it == evaluators().end()) throw InputError("claims: unknown evaluator '" + e.at("evaluator").get<std::string>() + "'");
    try {
      it->second.run(e.value("inputs", json::object()), e.at("tolerance").get<double>(), ms, r);
    } catch (const InputError& err) {  // an input refused by the model it feeds: name the entry
      std::string what = err.what();
      if (what.rfind("claims: ", 0) == 0) what = what.substr(8);
      throw InputError("claims: entry " + std::to_string(r.id) + " (evaluator " + it->first + "): " + what);
    }
    if (r.measured.empty()) r.measured = ms.have ? "not measured by this report" : kNoReport;
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string format_claims_table(const std::vector<ClaimResult>& rows) {
  std::string out;
  for (const ClaimResult& r : rows) {
    out += fmt("%2d. %s\n", r.id, r.claim.c_str());
    out += "    conditions: " + r.conditions + "\n";
    out += "    claimed:    " + r.predicted + "\n";
    out += "    computed:   " + r.computed + "\n";
    out += "    measured:   " + r.measured + "\n";
    out += "    verdict:    " + r.verdict + " (" + r.method + "): " + r.why + "\n";
  }
  std::map<std::string, int> count;
  for (const ClaimResult& r : rows) count[r.verdict]++;
  std::string tally;
  for (const auto& [v, n] : count) tally += (tally.empty() ? "" : ", ") + std::to_string(n) + " " + v;
  out += fmt("%zu claims: %s\n", rows.size(), tally.c_str());
  return out;
}

json claims_to_json(const std::vector<ClaimResult>& rows) {
  json a = json::array();
  for (const ClaimResult& r : rows)
    a.push_back({{"id", r.id}, {"claim", r.claim}, {"conditions", r.conditions}, {"method", r.method},
                 {"predicted", r.predicted}, {"computed", r.computed}, {"measured", r.measured},
                 {"verdict", r.verdict}, {"why", r.why}, {"values", r.values}});
  return {{"kind", "claims"}, {"version", 1}, {"claims", a}};
}

}  // namespace dtb
