// Fault isolation in rounds for `dtbench validate --pairs adaptive` (level long): groups of nodes
// measured at once as rings of send/recv pairs, only the groups that fail split again, each
// suspect confirmed with a known-good partner. Pure planning and judging over pair figures (GB/s);
// the probe that measures the pairs is in level_long.cc (sweep_pairs, pairs.h).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness/validate/check.h"

namespace dtb {

/// The 4 MiB figure of a measured pair (a, b), GB/s (both directions counted, the lower of
/// the two); 0 or not finite: no figure (judged slow: a missing measurement fails).
using PairFigure = std::function<double(int, int)>;

/// One group of one round: its ranks (one per node), its figure (the slowest pair of its ring)
/// and the ring's pairs below the threshold.
struct IsolationGroup {
  std::vector<int> ranks;
  double gbps = 0;
  bool failed = false;
  std::vector<std::pair<int, int>> slow_pairs;
};

/// A suspect rank's confirmation: a pair with a known-good partner, slow or not.
struct IsolationConfirm {
  int suspect = 0, partner = -1;
  double gbps = 0;
  bool slow = false;
};

/// The state of an isolation over n ranks: the rounds judged so far, the groups to measure next,
/// the suspects and suspect pairs, then the confirmations. Built by isolation_start, advanced by
/// isolation_judge_round until `pending` is empty, closed by isolation_confirm.
struct Isolation {
  int n = 0;
  double fraction = 0.5;   // a pair below fraction x `reference` is slow (LinkThresholds::link)
  double reference = 0;    // the upper quartile of round 1's ring pairs, GB/s
  std::vector<std::vector<IsolationGroup>> rounds;
  std::vector<std::vector<int>> pending;            // the next round's groups
  std::vector<int> suspects;                        // sorted, unique
  std::vector<std::pair<int, int>> suspect_pairs;   // slow ring pairs that no later ring measures
  std::vector<double> suspect_gbps;                 // their figures
  std::vector<IsolationConfirm> confirms;
};

/// The pairs of a group's ring: (g0, g1), ..., (g[k-1], g0); one pair for two ranks, none for one.
std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& group);

/// `pairs` in rounds of disjoint pairs (greedy, first round where neither rank is busy: a ring's
/// pairs take two or three), as sweep_pairs measures them.
std::vector<std::vector<std::pair<int, int>>> disjoint_rounds(const std::vector<std::pair<int, int>>& pairs);

/// Round 1's groups over ranks 0..n-1 (n >= 3): consecutive ranks in groups of about sqrt(n),
/// at least 3 each (a ring of 3 or more pairs), as even as may be (8 -> 4 + 4, 16 -> 4 x 4;
/// fewer than 6 -> one group of all). `fraction`: the slow threshold (0 < fraction < 1).
Isolation isolation_start(int n, double fraction);

/// Judges the pending groups by their rings' figures (`fig`) and plans the next round: in
/// round 1 the reference is the upper quartile of every ring pair measured (the same rule shape
/// as pairs/links). A group fails when a pair of its ring is below fraction x reference (its
/// figure is its slowest pair). A failed group of 4 or more ranks is split into two halves (the
/// next round); its slow pairs between the halves, which neither half's ring measures, become
/// suspect pairs at once. A failed group of 2 or 3 ranks is not split: its slow pairs are suspect
/// pairs. The ranks of suspect pairs are the suspects. Healthy groups are not tested further.
void isolation_judge_round(Isolation& iso, const PairFigure& fig);

/// Per rank, how the last group it was in fared: 1 passed, 0 failed, -1 in no group.
std::vector<int> isolation_last_status(const Isolation& iso);

/// The confirmation pairs once no group is pending: each suspect whose last group failed with a
/// known-good partner (a rank whose last group passed), partners taken in turn. A suspect whose
/// last group passed needs none: its ring was fast with ranks of a healthy ring. Empty when no
/// suspect needs one, or no rank is known good.
std::vector<std::pair<int, int>> isolation_confirm_pairs(const Isolation& iso);

/// Records the confirmations (`fig` over isolation_confirm_pairs' pairs): a suspect slow with its
/// known-good partner too is slow with three partners or more (two of its ring's and this one).
void isolation_confirm(Isolation& iso, const PairFigure& fig);

/// The check "pairs/isolation" of a finished isolation: a confirmed suspect is a node fault
/// (fail naming its rank and node); a suspect pair neither of whose ranks is confirmed is a slow
/// link (fail naming no node; values "slow_links" with ranks, nodes, hosts and GB/s, as
/// pairs/links); suspects without a known-good partner fail naming no node; else pass. Values:
/// every round's groups, figures and verdicts, the confirmations, the reference and the totals:
/// rounds, tests (group rings + confirmations), pair transfers, and all_pairs = n(n-1)/2.
ValidateCheck isolation_check(const Isolation& iso, const std::vector<std::string>& node_of_rank,
                              const std::vector<std::string>& host_of_rank);

}  // namespace dtb
