// Fault isolation in rounds (see isolate.h): the groups, their rings, the splits, the
// confirmations and the check pairs/isolation.
#include "harness/validate/isolate.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "harness/validate/format.h"
#include "harness/validate/links.h"

namespace dtb {

using nlohmann::json;
using namespace validate_detail;

namespace {

double figure(const PairFigure& fig, int a, int b) {
  const double g = fig(a, b);
  return std::isfinite(g) && g > 0 ? g : 0.0;
}

std::string group_str(const std::vector<int>& g) { return "{" + join_ranks(g) + "}"; }

}  // namespace

std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& group) {
  std::vector<std::pair<int, int>> out;
  const size_t k = group.size();
  if (k == 2) out.emplace_back(group[0], group[1]);
  if (k >= 3)
    for (size_t i = 0; i < k; ++i) out.emplace_back(group[i], group[(i + 1) % k]);
  return out;
}

std::vector<std::vector<std::pair<int, int>>> disjoint_rounds(const std::vector<std::pair<int, int>>& pairs) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  std::vector<std::set<int>> busy;
  for (const auto& [a, b] : pairs) {
    size_t r = 0;
    while (r < rounds.size() && (busy[r].count(a) || busy[r].count(b))) ++r;
    if (r == rounds.size()) rounds.emplace_back(), busy.emplace_back();
    rounds[r].emplace_back(a, b);
    busy[r].insert({a, b});
  }
  return rounds;
}

Isolation isolation_start(int n, double fraction) {
  Isolation iso;
  iso.n = n, iso.fraction = fraction;
  const int k = std::max(3, int(std::ceil(std::sqrt(double(n)))));
  const int groups = std::max(1, n / k);
  for (int g = 0, r = 0; g < groups; ++g) {
    const int size = n / groups + (g < n % groups ? 1 : 0);
    std::vector<int> group;
    for (int i = 0; i < size; ++i) group.push_back(r++);
    iso.pending.push_back(group);
  }
  return iso;
}

void isolation_judge_round(Isolation& iso, const PairFigure& fig) {
  if (iso.rounds.empty()) {
    std::vector<double> all;
    for (const auto& g : iso.pending)
      for (const auto& [a, b] : ring_pairs(g)) all.push_back(figure(fig, a, b));
    iso.reference = all.empty() ? 0.0 : quantile(all, 0.75);
  }
  const double below = iso.fraction * iso.reference;
  std::vector<IsolationGroup> round;
  std::vector<std::vector<int>> next;
  std::set<int> suspects(iso.suspects.begin(), iso.suspects.end());
  auto suspect_pair = [&](std::pair<int, int> p) {
    p = {std::min(p.first, p.second), std::max(p.first, p.second)};
    iso.suspect_pairs.push_back(p), iso.suspect_gbps.push_back(figure(fig, p.first, p.second));
    suspects.insert({p.first, p.second});
  };
  for (const auto& ranks : iso.pending) {
    IsolationGroup g{ranks, 0, false, {}};
    bool first = true;
    for (const auto& [a, b] : ring_pairs(ranks)) {
      const double v = figure(fig, a, b);
      g.gbps = first ? v : std::min(g.gbps, v), first = false;
      if (!(v >= below)) g.slow_pairs.emplace_back(a, b);
    }
    g.failed = !g.slow_pairs.empty();
    if (g.failed && ranks.size() >= 4) {
      const size_t half = ranks.size() / 2;
      const std::vector<int> lo(ranks.begin(), ranks.begin() + long(half)), hi(ranks.begin() + long(half), ranks.end());
      next.push_back(lo), next.push_back(hi);
      const std::set<int> in_lo(lo.begin(), lo.end());
      for (const auto& p : g.slow_pairs)  // a pair across the halves: no half's ring measures it again
        if (in_lo.count(p.first) != in_lo.count(p.second)) suspect_pair(p);
    } else if (g.failed) {
      for (const auto& p : g.slow_pairs) suspect_pair(p);
    }
    round.push_back(g);
  }
  iso.rounds.push_back(round);
  iso.pending = next;
  iso.suspects.assign(suspects.begin(), suspects.end());
}

std::vector<int> isolation_last_status(const Isolation& iso) {
  std::vector<int> last(size_t(iso.n), -1);
  for (const auto& round : iso.rounds)
    for (const auto& g : round)
      for (int r : g.ranks) last[size_t(r)] = g.failed ? 0 : 1;
  return last;
}

std::vector<std::pair<int, int>> isolation_confirm_pairs(const Isolation& iso) {
  const std::vector<int> last = isolation_last_status(iso);
  std::vector<int> good;
  for (int r = 0; r < iso.n; ++r)
    if (last[size_t(r)] == 1) good.push_back(r);
  std::vector<std::pair<int, int>> out;
  if (good.empty()) return out;
  size_t next = 0;
  for (int s : iso.suspects)
    if (last[size_t(s)] != 1) out.emplace_back(s, good[next++ % good.size()]);
  return out;
}

void isolation_confirm(Isolation& iso, const PairFigure& fig) {
  iso.confirms.clear();
  for (const auto& [s, p] : isolation_confirm_pairs(iso)) {
    const double v = figure(fig, s, p);
    iso.confirms.push_back({s, p, v, !(v >= iso.fraction * iso.reference)});
  }
}

namespace {

// The rounds and confirmations as values and one line.
json rounds_json(const Isolation& iso, std::string& line) {
  json rounds = json::array();
  for (size_t r = 0; r < iso.rounds.size(); ++r) {
    json groups = json::array();
    line += (r ? "; round " : "round ") + std::to_string(r + 1) + ":";
    for (const auto& g : iso.rounds[r]) {
      json slow = json::array();
      for (const auto& [a, b] : g.slow_pairs) slow.push_back({a, b});
      groups.push_back({{"ranks", g.ranks}, {"GBps", g.gbps}, {"failed", g.failed}, {"slow_pairs", slow}});
      line += " " + group_str(g.ranks) + " " + num_str(g.gbps) + (g.failed ? " failed" : " ok");
    }
    rounds.push_back({{"round", r + 1}, {"groups", groups}});
  }
  json confirms = json::array();
  if (!iso.confirms.empty()) line += "; confirmations:";
  for (const auto& c : iso.confirms) {
    confirms.push_back({{"suspect", c.suspect}, {"partner", c.partner}, {"GBps", c.gbps}, {"slow", c.slow}});
    line += " " + std::to_string(c.suspect) + " with " + std::to_string(c.partner) + " " + num_str(c.gbps) +
            (c.slow ? " slow" : " ok");
  }
  rounds.push_back({{"confirmations", confirms}});
  return rounds;
}

}  // namespace

ValidateCheck isolation_check(const Isolation& iso, const std::vector<std::string>& node_of_rank,
                              const std::vector<std::string>& host_of_rank) {
  ValidateCheck c{"pairs/isolation", "pass", "", {}, {}, json::object(), {}};
  int groups = 0, transfers = 0;
  for (const auto& round : iso.rounds)
    for (const auto& g : round) ++groups, transfers += int(ring_pairs(g.ranks).size());
  const int confirms = int(iso.confirms.size()), rounds = int(iso.rounds.size()) + (confirms ? 1 : 0);
  const int all_pairs = iso.n * (iso.n - 1) / 2;
  std::string line;
  c.values["rounds"] = rounds_json(iso, line);
  c.values["reference_q3_GBps"] = iso.reference;
  c.values["slow_below_GBps"] = iso.fraction * iso.reference;
  c.values["totals"] = {{"rounds", rounds}, {"group_tests", groups}, {"confirmations", confirms},
                        {"tests", groups + confirms}, {"pair_transfers", transfers + confirms},
                        {"all_pairs", all_pairs}};
  const std::string cost = std::to_string(rounds) + " rounds, " + std::to_string(groups + confirms) + " tests (" +
                           std::to_string(groups) + " group rings, " + std::to_string(confirms) +
                           " confirmations; " + std::to_string(transfers + confirms) +
                           " pair transfers) against " + std::to_string(all_pairs) + " for every pair";
  std::set<int> slow_nodes;
  for (const auto& k : iso.confirms)
    if (k.slow) slow_nodes.insert(k.suspect);
  std::string verdict;
  for (const auto& k : iso.confirms) {
    if (!k.slow) continue;
    const std::string node = node_of_rank[size_t(k.suspect)];
    c.ranks.push_back(k.suspect), add_once(c.nodes, node);
    c.node_detail[node] = "rank " + std::to_string(k.suspect) + " slow with its group's ring and with known-good rank " +
                          std::to_string(k.partner) + ": " + num_str(k.gbps) + " GB/s, below " +
                          num_str(iso.fraction * iso.reference) + " (" + pct(iso.fraction) +
                          " of the ring pairs' upper quartile " + num_str(iso.reference) + ")";
    verdict += "; node fault: " + c.node_detail[node];
  }
  json links = json::array();
  const std::vector<int> last = isolation_last_status(iso);
  const bool unconfirmed = iso.confirms.empty() &&
                           std::any_of(iso.suspects.begin(), iso.suspects.end(), [&](int s) { return last[size_t(s)] != 1; });
  for (size_t i = 0; i < iso.suspect_pairs.size(); ++i) {
    const auto [a, b] = iso.suspect_pairs[i];
    if (unconfirmed || slow_nodes.count(a) || slow_nodes.count(b)) continue;  // explained by a slow node
    links.push_back({{"ranks", {a, b}}, {"nodes", {node_of_rank[size_t(a)], node_of_rank[size_t(b)]}},
                     {"hosts", {host_of_rank[size_t(a)], host_of_rank[size_t(b)]}}, {"GBps", iso.suspect_gbps[i]}});
    verdict += "; slow link " + std::to_string(a) + "-" + std::to_string(b) + " (" + host_of_rank[size_t(a)] + "-" +
               host_of_rank[size_t(b)] + ", " + num_str(iso.suspect_gbps[i]) +
               " GB/s): both ranks fast with healthy rings or known-good partners";
  }
  c.values["slow_links"] = links;
  if (unconfirmed) {
    c.status = "fail";
    verdict += "; suspects " + join_ranks(iso.suspects) + " without a known-good partner to confirm with (every group failed)";
  }
  if (!c.ranks.empty() || !links.empty()) c.status = "fail";
  c.detail = cost + (verdict.empty() ? "; nothing slow" : verdict) + "; " + line;
  return c;
}

}  // namespace dtb
