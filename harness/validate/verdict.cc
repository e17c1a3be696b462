// The verdict, the report and the input files of `dtbench validate` (see verdict.h).
#include "harness/validate/verdict.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "harness/report.h"
#include "harness/validate/inventory.h"
#include "suites/suite.h"
#include "kernels/error.h"

namespace dtb {

using nlohmann::json;

json read_json_file(Communicator& world, const std::string& option, const std::string& path) {
  const std::string text = on_root(world, [&] {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw InputError(option + " " + path + ": is a directory, not a file");
    if (!std::filesystem::exists(path, ec)) throw InputError(option + " " + path + ": no such file");
    if (!std::filesystem::is_regular_file(path, ec)) throw InputError(option + " " + path + ": not a regular file");
    std::ifstream f(path, std::ios::binary);
    std::string t((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) throw InputError(option + " " + path + ": cannot read it");
    return t;
  });
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse errors, numbers beyond a double
    throw InputError(option + " " + path + ": malformed JSON (" + e.what() + ")");
  }
}

void check_output_path(Communicator& world, const std::string& option, const std::string& path) {
  on_root(world, [&] {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (path.empty()) throw InputError(option + " is empty");
    const fs::file_status st = fs::symlink_status(path, ec);
    if (fs::exists(st) && !fs::is_regular_file(st))
      throw InputError(option + " " + path + ": exists and is not a regular file (a directory, link, FIFO or device)");
    for (fs::path p = fs::path(path).parent_path(); !p.empty(); p = p.parent_path()) {
      const fs::file_status ps = fs::status(p, ec);
      if (fs::exists(ps)) {
        if (!fs::is_directory(ps)) throw InputError(option + " " + path + ": " + p.string() + " is not a directory");
        break;
      }
      if (p == p.parent_path()) break;
    }
    // Written at the end, after every measurement: a place that cannot be written must be found
    // now, not after hours of a burn-in (the directories are made as the final write makes them).
    const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
    check_dir_writable(dir.string(), option + " " + path + ": its directory");  // run's own check (suites/suite.h)
    return std::string();
  });
}

int write_verdict(const ValidateArgs& a, const std::vector<json>& inv, const std::vector<ValidateCheck>& checks,
                  std::chrono::steady_clock::time_point t0, const ReportExtra& extra) {
  // Per node: accepted unless a failed check (or a warning, with --werror) names it.
  std::vector<std::string> node_order;
  for (const json& r : inv)
    if (std::find(node_order.begin(), node_order.end(), r["node"].get<std::string>()) == node_order.end())
      node_order.push_back(r["node"]);
  // A check that could not run fails; an input of a k_of rule gives no verdict of its own.
  auto bad_status = [&](const std::string& st) {
    return st == "fail" || st == "not_run" || (a.werror && st == "warn");
  };
  auto bad = [&](const ValidateCheck& c) { return c.counts && bad_status(c.status); };
  // The check's status at node n (a check failing for one node may only warn for another).
  auto status_at = [](const ValidateCheck& c, const std::string& n) {
    const auto it = c.node_status.find(n);
    return it == c.node_status.end() ? c.status : it->second;
  };
  json nodes = json::array();
  bool world_failed = false;
  for (const ValidateCheck& c : checks)
    if (bad(c) && c.nodes.empty()) world_failed = true;
  int defective = 0;
  for (const std::string& n : node_order) {
    json violations = json::array(), ranks = json::array();
    for (const json& r : inv)
      if (r["node"] == n) ranks.push_back(r["rank"]);
    for (const ValidateCheck& c : checks)
      if (c.counts && (status_at(c, n) == "fail" || status_at(c, n) == "warn") &&
          std::find(c.nodes.begin(), c.nodes.end(), n) != c.nodes.end()) {
        json v = {{"check", c.name},
                  {"status", status_at(c, n)},
                  {"detail", c.node_detail.count(n) ? c.node_detail.at(n) : c.detail},
                  {"values", c.values}};
        for (const char* k : {"rule", "metric", "baseline", "median", "reference"})
          if (c.values.contains(k)) v[k] = c.values[k];
        violations.push_back(v);
      }
    bool accepted = true;
    for (const ValidateCheck& c : checks)
      if (c.counts && bad_status(status_at(c, n)) && std::find(c.nodes.begin(), c.nodes.end(), n) != c.nodes.end())
        accepted = false;
    defective += accepted ? 0 : 1;
    nodes.push_back({{"node", n}, {"ranks", ranks}, {"accepted", accepted}, {"violations", violations}});
  }
  const int code = extra.incomplete ? 3 : defective > 0 || world_failed ? 1 : 0;
  json jchecks = json::array();
  for (const ValidateCheck& c : checks)
    jchecks.push_back({{"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"nodes", c.nodes},
                       {"ranks", c.ranks}, {"values", c.values}, {"counts", c.counts}});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const json out = {{"kind", "validate"},
                    {"version", 1},
                    {"level", a.level},
                    {"levels_run", extra.levels_run},
                    {"loops", extra.loops},
                    {"check_timeout_s", a.check_timeout},
                    {"tolerance", a.tolerance},
                    {"rules_file", a.rules.empty() ? json(nullptr) : json(a.rules)},
                    {"rules", extra.rules},
                    {"metrics", extra.metrics},
                    {"baseline", a.baseline.empty() ? json(nullptr) : json(a.baseline)},
                    {"injected_fault", a.inject.empty() ? json(nullptr) : json(a.inject)},
                    {"expect", parse_expectations(a.expect)},
                    {"emulated_ranks_per_node", a.ranks_per_node > 0 ? json(a.ranks_per_node) : json(nullptr)},
                    {"world_size", inv.size()},
                    {"duration_s", secs},
                    {"inventory", inv},
                    {"checks", jchecks},
                    {"nodes", nodes},
                    {"verdict", code == 0 ? "accepted" : code == 3 ? "incomplete" : "defective"},
                    {"exit_status", code}};
  for (const ValidateCheck& c : checks)
    std::printf("  %-8s %-28s %s\n", c.status.c_str(), c.name.c_str(),
                c.name.find("matrix") != std::string::npos ? (c.detail + " (in the report)").c_str() : c.detail.c_str());
  for (const json& n : nodes) {
    std::printf("node %s (ranks %s): %s\n", n["node"].get<std::string>().c_str(), n["ranks"].dump().c_str(),
                n["accepted"].get<bool>() ? "accepted" : "DEFECTIVE");
    for (const json& v : n["violations"])
      std::printf("    %s %s: %s\n", v["status"].get<std::string>().c_str(), v["check"].get<std::string>().c_str(),
                  v["detail"].get<std::string>().c_str());
  }
  try {
    const std::filesystem::path p(a.output);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    write_json_atomic(a.output, out);
  } catch (const std::exception& e) {  // writable when checked at the start; keep what was measured
    const std::string kept =
        (std::filesystem::temp_directory_path() / ("dtbench-validate-" + std::to_string(::getpid()) + ".json")).string();
    std::string where;
    try {
      write_json_atomic(kept, out);
      where = "; the report is in " + kept;
    } catch (const std::exception&) {
      where = "; nor could " + kept + " be written";
    }
    throw InputError("--output " + a.output + ": cannot write it (" + e.what() + ")" + where);
  }
  int world_fails = 0;
  for (const ValidateCheck& c : checks) world_fails += bad(c) && c.nodes.empty() ? 1 : 0;
  std::printf("validate %s: %zu of %zu nodes accepted%s; %.1f s; report %s\n", a.level.c_str(),
              node_order.size() - size_t(defective), node_order.size(),
              world_fails ? ("; " + std::to_string(world_fails) + " failed checks about the whole run").c_str() : "", secs,
              a.output.c_str());
  return code;
}

json metric_json(const Metric& m, bool with_extra) {
  json j = {{"unit", m.unit}, {"higher_is_better", m.higher_is_better}, {"per_rank", m.per_rank}};
  if (with_extra && m.extra.is_object()) j["extra"] = m.extra;
  return j;
}

json rules_json(const std::vector<ValidateRule>& rules) {
  json out = json::array();
  for (const ValidateRule& r : rules) {
    json j = {{"name", r.name}, {"type", r.type}};
    if (r.type == "k_of") j["k"] = r.k, j["of"] = r.of;
    else j["metric"] = r.metric, j["fail"] = r.fail;
    if (r.has_warn && r.warn > 0) j["warn"] = r.warn;
    out.push_back(j);
  }
  return out;
}

json read_baseline(Communicator& world, const std::string& path) {
  json baseline = read_json_file(world, "--baseline", path);
  const std::string where = "--baseline " + path + ": ";
  if (!baseline.is_object() || !baseline.contains("kind") || baseline["kind"] != "validate-baseline" ||
      !baseline.contains("metrics") || !baseline["metrics"].is_object())
    throw InputError(where + "not a validate baseline (kind \"validate-baseline\")");
  if (baseline["metrics"].empty()) throw InputError(where + "no metrics: it would judge nothing");
  for (const auto& [k, v] : baseline["metrics"].items()) {
    const auto info = validate_metrics().find(k);
    if (info == validate_metrics().end()) throw InputError(where + "unknown metric '" + k + "'");
    if (!v.is_object() || !v.contains("value") || !v["value"].is_number() || !std::isfinite(v["value"].get<double>()) ||
        !(v["value"].get<double>() > 0))
      throw InputError(where + "metric " + k + " has no positive numeric \"value\"");
    if (v.contains("unit") && v["unit"] != info->second.unit)
      throw InputError(where + "metric " + k + " is in " + v["unit"].dump() + ", dtbench measures it in " +
                       info->second.unit);
  }
  return baseline;
}

int write_baseline(const ValidateArgs& a, const std::vector<json>& inv, const std::map<std::string, Metric>& metrics,
                   int code) {
  // A baseline comes from an accepted run only: a defective node's figures would pull it down
  // and let the next slow node pass.
  if (code != 0) {
    std::fprintf(stderr, "dtbench: error: --make-baseline: not written, the run was not accepted (exit %d)\n", code);
    return code;
  }
  json m = json::object();
  for (const auto& [name, metric] : metrics) {
    const auto info = validate_metrics().find(name);
    if (info != validate_metrics().end() && !info->second.baseline) continue;  // judged by absolute bounds
    m[name] = {{"value", baseline_value(metric.per_rank)}, {"unit", metric.unit}, {"ranks", metric.per_rank.size()}};
  }
  const json b = {{"kind", "validate-baseline"}, {"version", 1}, {"platform", majority(inv, "device")},
                  {"level", a.level},
                  {"method", "per metric: the median of the ranks' values after iterative removal of those more than 3 "
                             "x max(MAD, 1% of the median) from the median"},
                  {"metrics", m}};
  try {
    const std::filesystem::path bp(a.make_baseline);
    if (bp.has_parent_path()) std::filesystem::create_directories(bp.parent_path());
    write_json_atomic(a.make_baseline, b);
    std::printf("baseline of %zu metrics written to %s\n", m.size(), a.make_baseline.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtbench: error: --make-baseline: %s\n", e.what());
    return 2;
  }
  return code;
}

}  // namespace dtb
