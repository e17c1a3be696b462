// The judgement of `dtbench validate`'s metrics: the vocabulary of metrics, the rules (a
// rules file's or the defaults: the fleet median, the baseline, absolute bounds, k of n), the
// baseline value of a metric, and each rule turned into a check. Pure: no communication.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/validate/check.h"

namespace dtb {

/// What dtbench validate knows about a metric it can measure: unit, direction, whether its
/// value differs per rank (false: one value for a whole node or the world, repeated on each of
/// its ranks, so the fleet-median rule does not apply), the level that measures it, and how.
struct MetricInfo {
  std::string unit;
  bool higher_is_better = true;
  bool per_rank = true;
  std::string level, how;
  bool baseline = true;  // false: judged by absolute bounds, so --make-baseline leaves it out
};
/// Every metric by name ("compute/gemm_gflops", "pairs/sendrecv_GBps", ...): the vocabulary of
/// baselines and rules files.
const std::map<std::string, MetricInfo>& validate_metrics();

/// One rule of the fixed vocabulary (a rules file's entry; the defaults are rules too).
///  - fleet_drop: a rank worse than the median of all ranks by more than `fail` (a fraction in
///    (0, 1)) fails, by more than `warn` warns. "Worse": below for a higher-is-better metric.
///  - baseline_drop: the same against the baseline file's value for the metric.
///  - min / max: a rank below (min) or above (max) the absolute `fail` fails; `warn` likewise.
///  - k_of: a rank fails when at least `k` of the rules `of` fail for it (warns when k of them
///    warn or fail); the rules it names are then its inputs and give no verdict of their own,
///    except that an input whose metric is missing fails the run (and the k_of with it).
/// A rule over a metric the run did not measure (or the baseline lacks) fails: missing = fail.
struct ValidateRule {
  std::string name, type, metric;
  double fail = 0, warn = -1;
  bool has_warn = false;
  int k = 0;
  std::vector<std::string> of;
};

/// A rules file: {"kind": "validate-rules", "version": 1, "rules": [{"name", "type", "metric",
/// "fail", "warn"} or {"name", "type": "k_of", "k", "of": [names]}]}. Errors: InputError naming
/// `where`, the rule and the problem (unknown type, key or metric, thresholds out of range, k
/// out of [1, len(of)], a name used twice, "of" naming no rule, a rule twice or another k_of).
std::vector<ValidateRule> parse_rules(const nlohmann::json& doc, const std::string& where);

/// The rules without a rules file: fleet_drop at (tolerance, tolerance / 2) for every measured
/// per-rank metric, named as the metric (for the lateness metrics, lower is better and healthy
/// is near 0: max at 100 x tolerance, 50 x tolerance percent of the work); with a baseline (a JSON object, else null), also
/// baseline_drop for every metric it has, named "baseline/<metric>".
std::vector<ValidateRule> default_rules(const std::map<std::string, Metric>& measured,
                                        const nlohmann::json& baseline, double tolerance);

/// A baseline's value for one metric from a healthy run's per-rank values: iterative outlier
/// removal (drop values more than 3 x max(MAD, 1% of the median) from the median, until none
/// is dropped), then the median of the rest. Deterministic for the same inputs.
double baseline_value(std::vector<double> per_rank);

/// Each rule as a check (named as the rule; values: the rule, each rank's value, the median or
/// baseline), in rule order, k_of rules last. Deterministic for the same inputs. `nodes[r]` is
/// rank r's node. Errors: InputError for a baseline_drop rule without a baseline.
std::vector<ValidateCheck> evaluate_rules(const std::vector<ValidateRule>& rules,
                                          const std::map<std::string, Metric>& measured,
                                          const nlohmann::json& baseline, const std::vector<std::string>& nodes);


/// Every measured metric's figures checked for being figures at all, whatever the rules judge
/// (a rules file may name a few metrics only, and the world's metrics have no fleet rule): the
/// check "metrics/valid" fails naming each rank (and its node) whose value is NaN, infinite or,
/// where higher is better (a rate, a bandwidth), not positive; passes otherwise. `nodes[r]` is
/// rank r's node. Pure.
ValidateCheck valid_figures_check(const std::map<std::string, Metric>& measured, const std::vector<std::string>& nodes);

/// Level medium's rule over one metric measured on every rank (higher is better): a rank below
/// (1 - tolerance) x the median of all ranks fails, below (1 - tolerance / 2) x warns; the
/// check names each such rank, its node, value, the median and the deviation. `nodes[r]` is
/// rank r's node.
ValidateCheck fleet_median_check(const std::string& name, const std::string& unit, const std::vector<double>& value,
                                 const std::vector<std::string>& nodes, double tolerance);

/// Checks against a baseline file ({"kind": "validate-baseline", "platform", "metrics": {name:
/// {"value", "unit"}}}): per metric, a rank below (1 - tolerance) x the baseline fails (half of
/// it warns); a metric the baseline has and this run did not measure fails ("missing").
std::vector<ValidateCheck> baseline_checks(const nlohmann::json& baseline, const std::map<std::string, Metric>& measured,
                                           const std::vector<std::string>& nodes, double tolerance);

}  // namespace dtb
