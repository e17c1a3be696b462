// `dtbench memory`'s rules of thumb (harness/memory_cli.cc): each usual rule held against the
// exact per-rank plan (reference/analytic/memory_model.h), saying where and why it differs.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/analytic/memory_model.h"

namespace dtb {

/// One rule's record: {"rule", "plan" (what this plan gives), "holds"}.
nlohmann::json memory_rule(const std::string& rule, const std::string& plan, bool holds);

/// The rules of thumb, each held against the exact plan c of `stages` (b its busiest stage):
/// 16 B/param of model state (ZeRO over the DP x CP ranks), optimizer state 3x the weights,
/// params / (TP x PP) a rank, Korthikanti's activations per layer (kor bytes, ours_layer ours; left
/// out when kor is 0: the GPT block's formula, not compared for Llama or under CP), Megatron's weight
/// + optimizer bytes (meg; left out when 0, likewise), the schedule's activation sets; each a
/// memory_rule() record.
nlohmann::json memory_rules_of_thumb(const PlanConfig& c, const std::vector<RankPlan>& stages, const RankPlan& b,
                                     double ours_layer, double kor, double meg);

}  // namespace dtb
