// The pair verdicts of `dtbench validate`: each pair's 4 MiB figure against the pairs of its
// link class (pairs/links: a slow link named as a pair, a slow rank as a node fault), and a
// group all-reduce's failure cross-checked with the pairs before it names a node. Pure: no
// communication, no measurement; the sweep that measures the pairs is in pairs.h.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "harness/validate/check.h"

namespace dtb {

/// The thresholds of pairs/links, as fractions of a link class's upper quartile. `link`: a pair
/// below it is slow. `node`: a rank whose pairs are below it with most of its partners is a node
/// fault (not a link's); looser than `link`, as a slow rank's pairs are all slower, though only
/// some cross `link` under noise (a rank's transfers slowed 2x on a loaded 2-core machine: one of
/// its two links at 22 % of the quartile, the other at 30 %).
struct LinkThresholds {
  double link, node;
};
/// On a machine of its own: half of the class is what a link trained at a lower rate, or
/// flapping, shows (0.031 against 1.5-2.2 GB/s on the first multi-host cluster), and a healthy
/// class spreads far less (1.5 to 2.2: 0.68 of its best); the node threshold is the sweep's
/// retest threshold (25 % below the quartile). The sweep retests suspects twice first
/// (scheduler noise halves a pair for a moment, not for three sweeps and two retests).
inline constexpr LinkThresholds kLinkThresholds = {0.5, 0.75};
/// Where the machine runs more ranks than it has cores (crowded()): there the scheduler has held
/// a clean pair at half speed through all its sweeps and retests (1 run in 40 of
/// harness/validate_test.sh on 2 cores), which must not be named a slow link. Not a bound: a
/// clean run there once measured a pair at 0.243 of its quartile (CI, 2026-12-07), so that test
/// retries a clean run whose only failure is this check.
inline constexpr LinkThresholds kLinkThresholdsCrowded = {0.25, 0.5};

/// A link class needs this many pairs to be judged: with fewer, its upper quartile would be one
/// of the pairs under judgement (two ranks per emulated node give two intra-node pairs).
inline constexpr int kLinkClassMinPairs = 3;

/// The p-quantile of `v` (not empty; p in [0, 1]), linear between the order statistics at
/// p (n - 1) (Hyndman and Fan 1996, definition 7; numpy's default): the quartiles pairs/links
/// and pairs/isolation judge a pair's GB/s against.
double quantile(std::vector<double> v, double p);

/// The verdict over every pair: `gbps` is the n x n matrix of 4 MiB send/recv bandwidths
/// (row-major, GB/s, both directions counted; a pair's figure is the lower of its two cells; 0
/// or not finite: not measured). node_of_rank and host_of_rank (n each) name the ranks' nodes
/// and hosts; a pair is intra-node when both ranks share a node. `retests`: how many times the
/// sweep measured suspect pairs again (the report's note). `th`: kLinkThresholds, or
/// kLinkThresholdsCrowded. The check "pairs/links":
///  - fail, naming no node, when a pair has no figure (a measurement missing fails);
///  - a rank below th.node with more than half of its judged partners is a node fault (values
///    "slow_ranks"): the per-rank metric pairs/sendrecv_GBps judges it, so its pairs are not
///    blamed as links and the check passes saying so;
///  - every other pair below th.link is a slow link: fail, its ranks named, no node (values
///    "slow_links": ranks, nodes, hosts, GB/s, class, and the class's q1, median, q3), so the
///    nodes stay accepted and the run exits 1 on a check about the run;
///  - a class with fewer than kLinkClassMinPairs pairs is not judged (said in the detail).
ValidateCheck links_check(const std::vector<double>& gbps, const std::vector<std::string>& node_of_rank,
                          const std::vector<std::string>& host_of_rank, int retests,
                          LinkThresholds th = kLinkThresholds);

/// The nodes that pairs/links found slow with most of their partners (its "slow_ranks"' nodes),
/// in rank order, or that pairs/isolation (--pairs adaptive) confirmed slow (its nodes); empty
/// for any other check.
std::vector<std::string> nodes_slow_by_pairs(const ValidateCheck& links, const std::vector<std::string>& node_of_rank);

/// Cross-checks a failing or warning check over the groups' all-reduce (a group's figure is the
/// same on each of its ranks, so it cannot tell its nodes apart) with the pairs: it keeps only
/// the nodes (and their ranks: node_of_rank) that `slow_nodes` (nodes_slow_by_pairs) also
/// names, listing the others in values "not_blamed"; with none left it still fails or warns,
/// naming no node (a check about the run: exit 1), and says that the pairs show none of the
/// group's nodes slow, quoting `links_detail` (the pair check's name and detail). A check of
/// any other status is left as it is.
void cross_check_group(ValidateCheck& c, const std::vector<std::string>& slow_nodes,
                       const std::vector<std::string>& node_of_rank, const std::string& links_detail);

}  // namespace dtb
