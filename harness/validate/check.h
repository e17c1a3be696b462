// The two values every part of `dtbench validate` passes around: a Metric (one figure per
// rank) and a ValidateCheck (one check's outcome, with the nodes and ranks it names). Data
// only; the rules that judge metrics are in rules.h, the verdict in verdict.h.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtb {

/// One metric measured on every rank, in rank order.
struct Metric {
  std::string unit;
  std::vector<double> per_rank;
  bool higher_is_better = true;
  nlohmann::json extra = nullptr;  // more values for the report (e.g. lateness in ms), or null
};

/// One check's outcome. status: "pass", "warn", "fail", "skip" or "not_run"; detail says why
/// in one line; nodes and ranks name what it is about (empty: the whole world).
struct ValidateCheck {
  std::string name, status, detail;
  std::vector<std::string> nodes;
  std::vector<int> ranks;
  nlohmann::json values = nlohmann::json::object();
  std::map<std::string, std::string> node_detail;  // per named node: what is wrong there
  bool counts = true;  // false: an input of a k_of rule, which gives the verdict instead
  /// Per named node, its own status where it differs from the check's (the check fails for
  /// one node's rank and only warns for another's: that node is warned, not failed).
  std::map<std::string, std::string> node_status = {};
};

}  // namespace dtb
