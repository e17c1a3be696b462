// The rules of `dtbench validate`: the metric vocabulary, the rules file's parser, the default
// rules, and each rule evaluated over the ranks' values into a check (k_of rules last, from
// the outcomes of the rules they name). Pure: no communication, no measurement.
#include "harness/validate/rules.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "harness/validate/format.h"
#include "kernels/error.h"
#include "suites/stats.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace validate_detail;

struct RankOutcomes {
  std::vector<std::string> status, text;
};

// Folds per-rank outcomes into a check: the worst status, the ranks and nodes not passing, each
// node's lines; `all_pass` is the detail when every rank passes.
ValidateCheck fold(const std::string& name, const RankOutcomes& o, const std::vector<std::string>& nodes,
                   const std::string& all_pass, json values) {
  ValidateCheck c{name, "pass", all_pass, {}, {}, std::move(values), {}};
  std::string worst_text;
  for (size_t r = 0; r < o.status.size(); ++r) {
    if (o.status[r] == "pass") continue;
    c.ranks.push_back(int(r));
    if (std::find(c.nodes.begin(), c.nodes.end(), nodes[r]) == c.nodes.end()) c.nodes.push_back(nodes[r]);
    std::string& d = c.node_detail[nodes[r]];
    d += (d.empty() ? "" : "; ") + o.text[r];
    std::string& ns = c.node_status[nodes[r]];
    if (ns != "fail") ns = o.status[r];
    if (o.status[r] == "fail" && c.status != "fail") c.status = "fail", worst_text = o.text[r];
    if (o.status[r] == "warn" && c.status == "pass") c.status = "warn", worst_text = o.text[r];
  }
  if (c.status != "pass") c.detail = worst_text;
  return c;
}

// A metric's worse-than fraction against a reference: how far below it (higher is better) or
// above it (lower is better); 1 (or more) when the reference is not positive.
double worse_by(double value, double reference, bool higher_is_better) {
  if (!(reference > 0)) return 1.0;
  return higher_is_better ? 1.0 - value / reference : value / reference - 1.0;
}

// Why rank r's value of `m` is no figure at all, or "": not a number, infinite, or, where higher
// is better (a rate, a bandwidth), not positive: a probe that measured nothing. Such a value
// fails every rule over it (fail closed): NaN compares false with every threshold and would pass.
std::string no_figure(const Metric& m, size_t r) {
  const double v = m.per_rank[r];
  if (std::isfinite(v) && (!m.higher_is_better || v > 0)) return "";
  return std::isnan(v) ? "not a number" : std::isinf(v) ? "infinite" : "not positive";
}

// Records a rank without a valid figure as failed; true when it was one.
bool failed_closed(RankOutcomes& o, const ValidateRule& rule, const Metric& m, size_t r) {
  const std::string why = no_figure(m, r);
  if (why.empty()) return false;
  o.status.push_back("fail");
  o.text.push_back("rank " + std::to_string(r) + " " + num_str(m.per_rank[r]) + " " + m.unit + ": no valid figure (" +
                   why + "), so rule " + rule.name + " fails");
  return true;
}

// The median of the valid figures of `m` (0 when none: every rank then fails its drop rule).
double valid_median(const Metric& m) {
  std::vector<double> v;
  for (size_t r = 0; r < m.per_rank.size(); ++r)
    if (no_figure(m, r).empty()) v.push_back(m.per_rank[r]);
  return median(v);
}

// The outcomes of a drop rule (fleet_drop, baseline_drop) against `reference`, which `what`
// names ("the median", "the baseline").
RankOutcomes drop_outcomes(const ValidateRule& rule, const Metric& m, double reference, const std::string& what) {
  RankOutcomes o;
  for (size_t r = 0; r < m.per_rank.size(); ++r) {
    if (failed_closed(o, rule, m, r)) continue;
    const double w = worse_by(m.per_rank[r], reference, m.higher_is_better);
    const bool fail = w > rule.fail, warn = rule.warn > 0 && w > rule.warn;
    o.status.push_back(fail ? "fail" : warn ? "warn" : "pass");
    o.text.push_back(fail || warn ? "rank " + std::to_string(r) + " " + num_str(m.per_rank[r]) + " " + m.unit + ", " +
                                        pct(w) + (m.higher_is_better ? " below " : " above ") + what + " " +
                                        num_str(reference) + " (rule " + rule.name + ": " + (fail ? "fail" : "warn") +
                                        " beyond " + pct(fail ? rule.fail : rule.warn) +
                                        (m.higher_is_better ? " below " : " above ") +
                                        (rule.type == "fleet_drop" ? "the fleet median" : "the baseline") + ")"
                                  : "");
  }
  return o;
}

// The outcomes of an absolute bound (min: fail below `fail`, warn below `warn`; max: above).
RankOutcomes bound_outcomes(const ValidateRule& rule, const Metric& m) {
  RankOutcomes o;
  const bool is_min = rule.type == "min";
  for (size_t r = 0; r < m.per_rank.size(); ++r) {
    if (failed_closed(o, rule, m, r)) continue;
    const double v = m.per_rank[r];
    const bool fail = is_min ? v < rule.fail : v > rule.fail;
    const bool warn = rule.has_warn && (is_min ? v < rule.warn : v > rule.warn);
    o.status.push_back(fail ? "fail" : warn ? "warn" : "pass");
    o.text.push_back(fail || warn ? "rank " + std::to_string(r) + " " + num_str(v) + " " + m.unit + (is_min ? " < " : " > ") +
                                        num_str(fail ? rule.fail : rule.warn) + " (rule " + rule.name + ": " +
                                        (fail ? "fail" : "warn") + (is_min ? " below " : " above ") +
                                        num_str(fail ? rule.fail : rule.warn) + " " + m.unit + ")"
                                  : "");
  }
  return o;
}

const std::set<std::string> kRuleTypes = {"fleet_drop", "baseline_drop", "min", "max", "k_of"};

}  // namespace

const std::map<std::string, MetricInfo>& validate_metrics() {
  static const std::map<std::string, MetricInfo> m = {
      {"compute/gemm_gflops", {"GFLOP/s", true, true, "medium", "sgemm 1024^3 on each rank, best of 3 rounds"}},
      {"compute/triad_GBps", {"GB/s", true, true, "medium", "STREAM triad over 3 x 32 MiB on each rank"}},
      {"copy/h2d_GBps", {"GB/s", true, true, "medium", "host-to-device copy of 64 MiB from pageable memory (cuda)"}},
      {"copy/d2h_GBps", {"GB/s", true, true, "medium", "device-to-host copy of 64 MiB to pageable memory (cuda)"}},
      {"node/sendrecv_GBps", {"GB/s", true, true, "medium",
                              "send/recv bandwidth with the other ranks of its node, 4 MiB each way, both directions "
                              "counted (2 x bytes / s), median over partners"}},
      {"node/allreduce_busbw_GBps", {"GB/s", true, true, "medium",
                                     "all-reduce of 16 MiB within each node, busbw (its node's, on each rank)"}},
      {"node/arrival_late_pct", {"% of the work", false, true, "medium",
                                 "how late each rank reaches its node's all-reduce after the first, median of 15, "
                                 "as a share of the work between them", false}},
      {"world/arrival_late_pct", {"% of the work", false, true, "long",
                                  "how late each rank reaches the world's all-reduce after the first, median of 15, "
                                  "as a share of the work between them", false}},
      {"pairs/sendrecv_GBps", {"GB/s", true, true, "long",
                               "send/recv bandwidth with every other rank, 4 MiB each way, both directions counted "
                               "(2 x bytes / s), median over partners"}},
      {"groups/allreduce_busbw_GBps", {"GB/s", true, true, "long",
                                       "all-reduce of 16 MiB within each group of 2 nodes, busbw (its group's)"}},
      {"world/allreduce_busbw_GBps", {"GB/s", true, false, "long", "all-reduce of 16 MiB over every rank, busbw"}},
      {"train/tokens_per_s", {"tokens/s", true, true, "long", "data-parallel reference GPT steps on every rank"}},
  };
  return m;
}

namespace {
std::vector<ValidateRule> parse_rules_unchecked(const json& doc, const std::string& where);
}  // namespace

std::vector<ValidateRule> parse_rules(const json& doc, const std::string& where) {
  try {
    return parse_rules_unchecked(doc, where);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw InputError(where + ": " + e.what());
  }
}

namespace {
std::vector<ValidateRule> parse_rules_unchecked(const json& doc, const std::string& where) {
  auto bad = [&](const std::string& what) { return InputError(where + ": " + what); };
  if (!doc.is_object() || !doc.contains("kind") || doc["kind"] != "validate-rules" || !doc.contains("rules") ||
      !doc["rules"].is_array())
    throw bad("not a validate rules file ({\"kind\": \"validate-rules\", \"rules\": [...]})");
  if (doc["rules"].empty()) throw bad("no rules: an empty list would judge nothing");
  std::vector<ValidateRule> rules;
  std::set<std::string> names;
  for (const json& j : doc["rules"]) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
      throw bad("a rule without a \"name\"");
    ValidateRule r;
    r.name = j["name"];
    if (r.name.find_first_of("\n\r\t") != std::string::npos) throw bad("a rule name with a control character");
    auto rb = [&](const std::string& what) { return bad("rule '" + r.name + "': " + what); };
    if (!names.insert(r.name).second) throw rb("the name is used twice");
    const bool is_k_of = j.contains("type") && j["type"] == "k_of";
    for (const auto& [k, v] : j.items()) {
      if (k != "name" && k != "type" && k != "metric" && k != "fail" && k != "warn" && k != "k" && k != "of")
        throw rb("unknown key '" + k + "' (name, type, metric, fail, warn, k, of)");
      if (is_k_of && (k == "metric" || k == "fail" || k == "warn"))
        throw rb("'" + k + "' does not apply to a k_of rule (name, type, k, of)");
      if (!is_k_of && (k == "k" || k == "of")) throw rb("'" + k + "' applies to k_of rules only");
    }
    if (!j.contains("type") || !j["type"].is_string()) throw rb("needs a \"type\" (a string)");
    r.type = j.value("type", "");
    if (!kRuleTypes.count(r.type))
      throw rb("type '" + r.type + "' is not one of fleet_drop, baseline_drop, min, max, k_of");
    if (r.type == "k_of") {
      if (!j.contains("k") || !j["k"].is_number_integer() || !j.contains("of") || !j["of"].is_array() || j["of"].empty())
        throw rb("k_of needs an integer \"k\" and a list \"of\" of rule names");
      const long long k = j["k"].is_number_unsigned() && j["k"].get<unsigned long long>() > (1ull << 40)
                              ? (1ll << 40)
                              : j["k"].get<long long>();
      if (k < 1 || size_t(k) > j["of"].size())
        throw rb("k " + j["k"].dump() + " is not in [1, " + std::to_string(j["of"].size()) + "]");
      r.k = int(k);
      for (const json& n : j["of"]) {
        if (!n.is_string()) throw rb("\"of\" must list rule names");
        if (std::find(r.of.begin(), r.of.end(), n.get<std::string>()) != r.of.end())
          throw rb("\"of\" names '" + n.get<std::string>() + "' twice");
        r.of.push_back(n);
      }
    } else {
      if (!j.contains("metric") || !j["metric"].is_string()) throw rb("needs a \"metric\" (a string)");
      r.metric = j["metric"];
      if (!validate_metrics().count(r.metric)) throw rb("unknown metric '" + r.metric + "'");
      if (!j.contains("fail") || !j["fail"].is_number() || !std::isfinite(j["fail"].get<double>()))
        throw rb("needs a numeric \"fail\" threshold");
      r.fail = j["fail"];
      r.has_warn = j.contains("warn");
      if (r.has_warn && (!j["warn"].is_number() || !std::isfinite(j["warn"].get<double>())))
        throw rb("\"warn\" must be a number");
      if (r.has_warn) r.warn = j["warn"];
      const bool drop = r.type == "fleet_drop" || r.type == "baseline_drop";
      if (drop && !(r.fail > 0 && r.fail < 1)) throw rb("a drop's \"fail\" must be a fraction in (0, 1)");
      if (drop && r.has_warn && !(r.warn > 0 && r.warn < r.fail)) throw rb("\"warn\" must be in (0, fail)");
      if (r.type == "min" && r.has_warn && r.warn < r.fail) throw rb("a min rule's \"warn\" must be >= its \"fail\"");
      if (r.type == "max" && r.has_warn && r.warn > r.fail) throw rb("a max rule's \"warn\" must be <= its \"fail\"");
      if (!r.has_warn && drop) r.warn = -1;
    }
    rules.push_back(r);
  }
  for (const ValidateRule& r : rules)
    for (const std::string& n : r.of) {
      const auto it = std::find_if(rules.begin(), rules.end(), [&](const ValidateRule& x) { return x.name == n; });
      if (it == rules.end()) throw bad("rule '" + r.name + "': \"of\" names no rule '" + n + "'");
      if (it->type == "k_of") throw bad("rule '" + r.name + "': \"of\" names another k_of ('" + n + "')");
    }
  return rules;
}
}  // namespace

std::vector<ValidateRule> default_rules(const std::map<std::string, Metric>& measured, const json& baseline,
                                        double tolerance) {
  std::vector<ValidateRule> rules;
  for (const auto& [name, m] : measured) {
    const auto it = validate_metrics().find(name);
    if (it == validate_metrics().end() || !it->second.per_rank) continue;
    if (it->second.higher_is_better)
      rules.push_back({name, "fleet_drop", name, tolerance, tolerance / 2, true, 0, {}});
    else  // lateness: near 0 when healthy, so an absolute bound, not a ratio to the median
      rules.push_back({name, "max", name, 100 * tolerance, 50 * tolerance, true, 0, {}});
  }
  if (baseline.is_object())
    for (const auto& [name, entry] : baseline.at("metrics").items())
      rules.push_back({"baseline/" + name, "baseline_drop", name, tolerance, tolerance / 2, true, 0, {}});
  return rules;
}

std::vector<ValidateCheck> evaluate_rules(const std::vector<ValidateRule>& rules,
                                          const std::map<std::string, Metric>& measured, const json& baseline,
                                          const std::vector<std::string>& nodes) {
  std::vector<ValidateCheck> out;
  std::map<std::string, RankOutcomes> outcomes;  // rules that ran, for k_of
  std::set<std::string> inputs, missing;
  for (const ValidateRule& r : rules) inputs.insert(r.of.begin(), r.of.end());
  for (const ValidateRule& r : rules) {
    if (r.type == "k_of") continue;
    const auto it = measured.find(r.metric);
    const json* base = nullptr;
    if (r.type == "baseline_drop") {
      if (!baseline.is_object()) throw InputError("rule '" + r.name + "' (baseline_drop) needs --baseline");
      const json& bm = baseline.at("metrics");
      if (bm.contains(r.metric)) base = &bm.at(r.metric);
    }
    json values = {{"rule", r.name}, {"type", r.type}, {"metric", r.metric}, {"fail", r.fail}};
    if (r.has_warn && r.warn > 0) values["warn"] = r.warn;
    if (it == measured.end() || (r.type == "baseline_drop" && base == nullptr)) {
      const std::string why = it == measured.end()
                                  ? "missing: this run measured no " + r.metric +
                                        " (a level too low, or a test that could not run); rule " + r.name + " fails"
                                  : "missing: the baseline has no " + r.metric + "; rule " + r.name + " fails";
      ValidateCheck c{r.name, "fail", why, {}, {}, values, {}};
      if (base) c.values["baseline"] = base->value("value", 0.0);
      // A missing metric fails the run, a k_of's input too.
      missing.insert(r.name);
      out.push_back(c);
      continue;
    }
    const Metric& m = it->second;
    for (size_t i = 0; i < m.per_rank.size(); ++i) values["rank " + std::to_string(i)] = m.per_rank[i];
    RankOutcomes o;
    std::string all_pass;
    if (r.type == "fleet_drop") {
      const double med = valid_median(m);
      values["median"] = med;
      values["reference"] = med;
      o = drop_outcomes(r, m, med, "the median");
      all_pass = "every rank within " + pct(r.has_warn && r.warn > 0 ? r.warn : r.fail) + " of the median " +
                 num_str(med) + " " + m.unit;
    } else if (r.type == "baseline_drop") {
      const double b = base->value("value", 0.0);
      values["baseline"] = b;
      values["reference"] = b;
      o = drop_outcomes(r, m, b, "the baseline");
      all_pass = "every rank within " + pct(r.has_warn && r.warn > 0 ? r.warn : r.fail) + " of the baseline " +
                 num_str(b) + " " + m.unit;
    } else {
      o = bound_outcomes(r, m);
      all_pass = "every rank " + std::string(r.type == "min" ? ">= " : "<= ") + num_str(r.fail) + " " + m.unit;
    }
    values["unit"] = m.unit;
    if (m.extra.is_object())
      for (const auto& [k, v] : m.extra.items()) values[k] = v;
    ValidateCheck c = fold(r.name, o, nodes, all_pass, values);
    if (inputs.count(r.name)) {
      c.counts = false;  // judged through the k_of rules that name it
      c.detail = "(input of a k_of rule) " + c.detail;
    }
    outcomes[r.name] = o;
    out.push_back(c);
  }
  for (const ValidateRule& r : rules) {
    if (r.type != "k_of") continue;
    json values = {{"rule", r.name}, {"type", "k_of"}, {"k", r.k}, {"of", r.of}};
    std::vector<std::string> gone;
    for (const std::string& n : r.of)
      if (missing.count(n)) gone.push_back(n);
    if (!gone.empty()) {
      out.push_back({r.name, "fail", "rule " + gone.front() + " could not be judged (its metric is missing), so " +
                                         r.name + " fails", {}, {}, values, {}});
      continue;
    }
    RankOutcomes o;
    const size_t n = nodes.size();
    for (size_t rank = 0; rank < n; ++rank) {
      int fails = 0, warns = 0;
      std::string why;
      for (const std::string& in : r.of) {
        const RankOutcomes& x = outcomes.at(in);
        if (rank >= x.status.size()) continue;
        fails += x.status[rank] == "fail";
        warns += x.status[rank] != "pass";
        if (x.status[rank] != "pass") why += (why.empty() ? "" : "; ") + x.text[rank];
      }
      const bool fail = fails >= r.k, warn = !fail && warns >= r.k;
      o.status.push_back(fail ? "fail" : warn ? "warn" : "pass");
      o.text.push_back(fail || warn ? "rank " + std::to_string(rank) + ": " + std::to_string(fail ? fails : warns) +
                                          " of " + std::to_string(r.of.size()) + " rules " +
                                          (fail ? "failed" : "warned or failed") + " (rule " + r.name + ": fail when " +
                                          std::to_string(r.k) + " fail): " + why
                                    : "");
    }
    out.push_back(fold(r.name, o, nodes,
                       "no rank fails " + std::to_string(r.k) + " of " + std::to_string(r.of.size()) + " rules", values));
  }
  return out;
}

ValidateCheck valid_figures_check(const std::map<std::string, Metric>& measured, const std::vector<std::string>& nodes) {
  RankOutcomes o{std::vector<std::string>(nodes.size(), "pass"), std::vector<std::string>(nodes.size())};
  json values = json::object();
  for (const auto& [name, m] : measured)
    for (size_t r = 0; r < m.per_rank.size() && r < nodes.size(); ++r) {
      const std::string why = no_figure(m, r);
      if (why.empty()) continue;
      o.status[r] = "fail";
      o.text[r] += (o.text[r].empty() ? "rank " + std::to_string(r) + ": " : "; ") + name + " " + num_str(m.per_rank[r]) +
                   " (" + why + ")";
      values[name]["rank " + std::to_string(r)] = why;
    }
  for (std::string& t : o.text)
    if (!t.empty()) t += ": no valid figure, which fails";
  return fold("metrics/valid", o, nodes,
              "every figure of the " + std::to_string(measured.size()) + " metrics is a number (and positive where "
              "higher is better)", values);
}

ValidateCheck fleet_median_check(const std::string& name, const std::string& unit, const std::vector<double>& value,
                                 const std::vector<std::string>& nodes, double tolerance) {
  return evaluate_rules({{name, "fleet_drop", name, tolerance, tolerance / 2, true, 0, {}}},
                        {{name, {unit, value, true}}}, json(), nodes)
      .front();
}

double baseline_value(std::vector<double> v) {
  // Iterative outlier removal: drop what lies more than 3 x max(MAD, 1% of the median) from
  // the median, until nothing is dropped; the median of what stays.
  return median_without_outliers(std::move(v), 3.0, 0.01);
}

std::vector<ValidateCheck> baseline_checks(const json& baseline, const std::map<std::string, Metric>& measured,
                                           const std::vector<std::string>& nodes, double tolerance) {
  std::vector<ValidateRule> rules;
  for (const auto& [name, entry] : baseline.at("metrics").items())
    rules.push_back({"baseline/" + name, "baseline_drop", name, tolerance, tolerance / 2, true, 0, {}});
  return evaluate_rules(rules, measured, baseline, nodes);
}

}  // namespace dtb
