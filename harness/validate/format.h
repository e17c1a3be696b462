// The few text helpers every part of `dtbench validate` writes its lines with: numbers as
// the report prints them, rank lists, percentages. Formatting only; no judgement here.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace dtb::validate_detail {

/// 2 -> "2", 2.5 -> "2.5" (printf's %.6g).
inline std::string num_str(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

/// {1, 3} -> "1, 3".
inline std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

/// 0.25 -> "25%" (rounded to whole percent).
inline std::string pct(double f) { return std::to_string(int(std::lround(100 * f))) + "%"; }

/// Appends `node` to `nodes` unless it is there already (the order of first appearance).
inline void add_once(std::vector<std::string>& nodes, const std::string& node) {
  if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
}

}  // namespace dtb::validate_detail
