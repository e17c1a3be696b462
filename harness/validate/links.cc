// The pair verdicts of `dtbench validate` (see links.h): pairs/links over the pair matrix, and
// the group all-reduce's cross-check with it.
#include "harness/validate/links.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/validate/format.h"
#include "suites/stats.h"

namespace dtb {

using nlohmann::json;
using namespace validate_detail;

double quantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double x = p * double(v.size() - 1);
  const size_t lo = size_t(std::floor(x)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (x - double(lo)) * (v[hi] - v[lo]);
}

namespace {

struct Pair {
  int a, b;
  double gbps;
  bool intra;
};

}  // namespace

ValidateCheck links_check(const std::vector<double>& gbps, const std::vector<std::string>& node_of_rank,
                          const std::vector<std::string>& host_of_rank, int retests, LinkThresholds th) {
  const double slow_fraction = th.link;
  const int n = int(node_of_rank.size());
  ValidateCheck c{"pairs/links", "pass", "", {}, {}, json::object(), {}};
  std::vector<Pair> pairs;
  std::vector<std::string> unmeasured;
  auto cell = [&](int x, int y) { return gbps[size_t(x) * size_t(n) + size_t(y)]; };
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const double g = std::min(cell(a, b), cell(b, a));
      if (!(g > 0) || !std::isfinite(g)) {
        unmeasured.push_back(std::to_string(a) + "-" + std::to_string(b));
        continue;
      }
      pairs.push_back({a, b, g, node_of_rank[size_t(a)] == node_of_rank[size_t(b)]});
    }
  if (!unmeasured.empty()) {  // fail closed: a pair without a figure is not a healthy pair
    std::string list;
    for (const std::string& p : unmeasured) list += (list.empty() ? "" : ", ") + p;
    c.status = "fail";
    c.detail = "no figure for the pairs " + list + " (a measurement missing, 0 or not a number): not judged, so not "
               "passed";
    c.values["unmeasured"] = unmeasured;
    return c;
  }
  // Each class's distribution and its slow pairs.
  json classes = json::object();
  std::map<bool, double> q3;
  std::string unjudged;
  for (const bool intra : {false, true}) {
    std::vector<double> v;
    for (const Pair& p : pairs)
      if (p.intra == intra) v.push_back(p.gbps);
    const std::string cls = intra ? "intra-node" : "inter-node";
    if (v.empty()) continue;
    if (int(v.size()) < kLinkClassMinPairs) {
      unjudged += (unjudged.empty() ? "" : "; ") + cls + ": " + std::to_string(v.size()) + " pairs, too few to judge";
      continue;
    }
    q3[intra] = quantile(v, 0.75);
    classes[cls] = {{"pairs", v.size()}, {"q1_GBps", quantile(v, 0.25)}, {"median_GBps", quantile(v, 0.5)},
                    {"q3_GBps", q3[intra]}, {"slow_below_GBps", slow_fraction * q3[intra]}};
  }
  std::vector<int> judged(size_t(n), 0), slow_with(size_t(n), 0);
  std::vector<const Pair*> slow;
  for (const Pair& p : pairs) {
    if (!q3.count(p.intra)) continue;
    ++judged[size_t(p.a)], ++judged[size_t(p.b)];
    if (p.gbps < th.node * q3[p.intra]) ++slow_with[size_t(p.a)], ++slow_with[size_t(p.b)];
    if (p.gbps < slow_fraction * q3[p.intra]) slow.push_back(&p);
  }
  // A rank slow with most of its partners is the fault; its partners' links are not blamed.
  std::vector<int> slow_ranks;
  for (int r = 0; r < n; ++r)
    if (judged[size_t(r)] > 0 && 2 * slow_with[size_t(r)] > judged[size_t(r)]) slow_ranks.push_back(r);
  auto is_slow_rank = [&](int r) { return std::find(slow_ranks.begin(), slow_ranks.end(), r) != slow_ranks.end(); };
  json links = json::array();
  std::string named;
  for (const Pair* p : slow) {
    if (is_slow_rank(p->a) || is_slow_rank(p->b)) continue;
    const std::string cls = p->intra ? "intra-node" : "inter-node";
    const json& k = classes[cls];
    links.push_back({{"ranks", {p->a, p->b}},
                     {"nodes", {node_of_rank[size_t(p->a)], node_of_rank[size_t(p->b)]}},
                     {"hosts", {host_of_rank[size_t(p->a)], host_of_rank[size_t(p->b)]}},
                     {"GBps", p->gbps}, {"class", cls}, {"q1_GBps", k["q1_GBps"]}, {"median_GBps", k["median_GBps"]},
                     {"q3_GBps", k["q3_GBps"]}});
    c.ranks.push_back(p->a), c.ranks.push_back(p->b);
    named += (named.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p->a) + " (" +
             node_of_rank[size_t(p->a)] + ") - rank " + std::to_string(p->b) + " (" + node_of_rank[size_t(p->b)] +
             "): " + num_str(p->gbps) + " GB/s against the " + cls + " pairs' median " +
             num_str(k["median_GBps"].get<double>()) + " (quartiles " + num_str(k["q1_GBps"].get<double>()) + ", " +
             num_str(k["q3_GBps"].get<double>()) + ")";
  }
  std::sort(c.ranks.begin(), c.ranks.end());
  c.ranks.erase(std::unique(c.ranks.begin(), c.ranks.end()), c.ranks.end());
  std::string ranks_text;
  for (int r : slow_ranks)
    ranks_text += (ranks_text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " (" +
                  node_of_rank[size_t(r)] + ") slow with " + std::to_string(slow_with[size_t(r)]) + " of its " +
                  std::to_string(judged[size_t(r)]) + " partners (below " + pct(th.node) + " of the quartile)";
  c.values = {{"classes", classes}, {"slow_links", links}, {"slow_ranks", slow_ranks},
              {"slow_fraction", slow_fraction}, {"node_fraction", th.node}, {"retests", retests}};
  const std::string retested = " (suspects retested " + std::to_string(retests) + " times)";
  if (!links.empty()) {
    c.status = "fail";
    c.detail = "slow link" + std::string(links.size() > 1 ? "s" : "") + ", below " + pct(slow_fraction) +
               " of the upper quartile of " + (links.size() > 1 ? "their" : "its") + " class" + retested + ": " +
               named + "; no node blamed: both ends are fast with their other partners";
  } else {
    c.detail = "no slow link (no pair below " + pct(slow_fraction) + " of its class's upper quartile between ranks "
               "fast with most of their partners)" + retested;
    for (const auto& [cls, k] : classes.items())
      c.detail += "; " + cls + ": median " + num_str(k["median_GBps"].get<double>()) + " GB/s (quartiles " +
                  num_str(k["q1_GBps"].get<double>()) + ", " + num_str(k["q3_GBps"].get<double>()) + ")";
  }
  if (!ranks_text.empty())
    c.detail += "; node faults, judged by pairs/sendrecv_GBps, their partners' links not blamed: " + ranks_text;
  if (!unjudged.empty()) c.detail += "; " + unjudged;
  if (classes.empty() && c.status == "pass") c.status = "skip", c.detail = "no link class has " +
                                                                         std::to_string(kLinkClassMinPairs) +
                                                                         " pairs to compare: " + unjudged;
  return c;
}

std::vector<std::string> nodes_slow_by_pairs(const ValidateCheck& links, const std::vector<std::string>& node_of_rank) {
  std::vector<std::string> out;
  if (links.name == "pairs/isolation") return links.nodes;  // its confirmed node faults
  if (links.name != "pairs/links" || !links.values.contains("slow_ranks")) return out;
  for (const json& r : links.values["slow_ranks"]) {
    const int rank = r.get<int>();
    if (rank >= 0 && size_t(rank) < node_of_rank.size()) add_once(out, node_of_rank[size_t(rank)]);
  }
  return out;
}

void cross_check_group(ValidateCheck& c, const std::vector<std::string>& slow_nodes,
                       const std::vector<std::string>& node_of_rank, const std::string& links_detail) {
  if (c.status != "fail" && c.status != "warn") return;
  std::vector<std::string> kept, cleared;
  for (const std::string& nd : c.nodes)
    (std::find(slow_nodes.begin(), slow_nodes.end(), nd) != slow_nodes.end() ? kept : cleared).push_back(nd);
  if (cleared.empty()) return;
  std::string names;
  for (const std::string& nd : cleared) {
    names += (names.empty() ? "" : ", ") + nd;
    c.node_detail.erase(nd);
    c.node_status.erase(nd);
  }
  c.nodes = kept;
  std::vector<int> ranks;  // only the ranks of the nodes still named
  for (int r : c.ranks)
    if (r >= 0 && size_t(r) < node_of_rank.size() &&
        std::find(kept.begin(), kept.end(), node_of_rank[size_t(r)]) != kept.end())
      ranks.push_back(r);
  c.ranks = ranks;
  c.values["not_blamed"] = cleared;
  if (kept.empty()) {
    c.detail = "a group's all-reduce is slow, but the pairs show none of its nodes slow, so no node is blamed (a link "
               "or switch between them, or the collective itself): " + c.detail + "; " + links_detail;
  } else {
    c.detail += "; not blamed, as the pairs show them fast: " + names;
  }
}

}  // namespace dtb
