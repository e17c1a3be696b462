// `dtbench memory` for an MoE model (harness/memory_cli.h moe_plan_json): what is stored is every
// expert, what a token computes is its top-k. The per-rank plan of the sharded trainer
// (reference/analytic/memory_model.h level 2) does not cover MoE layers yet; this is the paper-level
// accounting of reference/analytic/memory_model.h (moe_model_states: zero_model_states of the non-expert
// and of the expert parameters, each over its own group).
#include <string>

#include <fmt/format.h>

#include "harness/memory_cli.h"
#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

using nlohmann::json;

namespace {

// The layout's keys in `dtbench memory --json` (reference/layout/layout_spec.h): records' fields, and the
// expert-parallel size under its config key.
const std::string kDp = field_key(LayoutKey::dp), kEp = spelling(LayoutKey::ep).config_key;
const std::string kZeroStage = field_key(LayoutKey::zero_stage), kOffload = field_key(LayoutKey::offload);

json states_json(const MemoryBytes<double>& b) {
  return {{"param", b.get(Tier::device, MemCategory::param)},
          {"grad", b.get(Tier::device, MemCategory::grad)},
          {"master_param", b.get(Tier::device, MemCategory::master_param)},
          {"optimizer_state", b.get(Tier::device, MemCategory::optimizer_state)},
          {"total", b.model_states(Tier::device)},
          {"host_total", b.model_states(Tier::host)}};
}

}  // namespace

json moe_plan_json(const GptConfig& m, const std::string& name, const MemoryArgs& a, json notes) {
  if (a.tp != 1 || a.pp != 1)
    throw InputError("dtbench memory: an MoE model is planned over --dp, --expert-parallel and ZeRO only (tensor and "
                     "pipeline parallel MoE layers are not modelled yet)");
  const int E = m.moe.num_experts, k = m.moe.topk, ep = a.ep, dp = a.dp;
  if (ep < 1 || dp < 1) throw InputError("--expert-parallel and --dp must be >= 1");
  if (E % ep != 0)
    throw InputError(fmt::format("--expert-parallel {} does not divide --num-experts {}", ep, E));
  if (dp % ep != 0)
    throw InputError(fmt::format("--expert-parallel {} does not divide the data-parallel size --dp {} (the expert-"
                                 "parallel groups are made of data-parallel ranks, as Megatron-LM's)",
                                 ep, dp));
  const Precision p = parse_precision(a.precision);
  const Offload off = parse_offload(a.offload);
  const MoeParams n = moe_params(m);
  const double total = n.total, active = n.active, experts = n.experts, dense = n.non_expert;
  const double F = moe_hidden(m.moe, m.C);
  const MemoryBytes<double> rank = moe_model_states(m, p, a.zero_stage, dp, ep, off);
  const MemoryBytes<double> as_total = zero_model_states(total, p, a.zero_stage, dp, off);
  const MemoryBytes<double> as_active = zero_model_states(active, p, a.zero_stage, dp, off);

  json j;
  j["mode"] = "moe";
  j["model"] = {{"name", name}, {"L", m.L}, {"C", m.C}, {"NH", m.NH}, {"T", m.T}, {"V", m.V},
                {"num_experts", E}, {"moe_router_topk", k}, {"moe_ffn_hidden_size", int(F)},
                {"moe_layer_freq", m.moe_layer_freq}, {"moe_layers", num_moe_layers(m)}};
  j["params"] = {{"total", total}, {"active", active}, {"experts", experts}, {"non_expert", dense},
                 {"per_rank", n.per_rank(ep)}, {"active_share", active / total}};
  j["layout"] = {{kDp, dp}, {kEp, ep}, {"expert_data_parallel", dp / ep}, {kZeroStage, a.zero_stage},
                 {kOffload, std::string(to_string(off))}, {"precision", std::string(to_string(p))}};
  j["per_rank_bytes"] = states_json(rank);
  j["dense_total_bytes"] = states_json(as_total);
  j["dense_active_bytes"] = states_json(as_active);
  // Model FLOPs per token, forward and backward: 6 N (Kaplan et al. 2020), N the parameters used.
  j["flops_per_token"] = {{"moe", 6 * active}, {"dense_total", 6 * total}};
  const double per_rank = rank.model_states(Tier::device), dense_active = as_active.model_states(Tier::device);
  const double ratio = as_total.model_states(Tier::device) / per_rank;
  j["rules_of_thumb"] = json::array();
  j["rules_of_thumb"].push_back(
      {{"rule", fmt::format("an MoE with {:.3g} of {:.3g} parameters active needs {:.1f}x less memory than a dense "
                            "model of its size (the article, 6.2: 6B with 1.2B active, 5x less)",
                            active, total, total / active)},
       {"plan", fmt::format("model states per rank {:.3g} GB against {:.3g} GB dense at {:.3g} parameters: {:.2f}x less "
                            "({}; {:.2f}x less needs EP = E / k = {})",
                            per_rank / 1e9, as_total.model_states(Tier::device) / 1e9, total, ratio,
                            ep == 1 ? fmt::format("at EP 1 every expert is stored on every rank: memory follows the "
                                                  "{:.3g} total, not the {:.3g} active", total, active)
                                    : fmt::format("at EP {} a rank stores {} of each layer's {} experts beside the "
                                                  "{:.3g} non-expert parameters", ep, E / ep, E, dense),
                            total / active, E / k)},
       {"holds", std::abs(per_rank / dense_active - 1) <= 0.1}});
  j["rules_of_thumb"].push_back(
      {{"rule", "compute per token follows the active parameters"},
       {"plan", fmt::format("6 N = {:.3g} FLOPs per token against {:.3g} for a dense model of the total: {:.2f}x less",
                            6 * active, 6 * total, total / active)},
       {"holds", true}});
  notes.push_back("model states only (ZeRO paper's bytes per parameter); activations of MoE layers are not planned");
  notes.push_back("a token's top-k experts (no shared expert), routers counted as non-expert parameters; dropped tokens "
                  "do not change what is stored");
  j["notes"] = notes;
  return j;
}

std::string moe_plan_text(const json& j) {
  const json& m = j["model"];
  const json& p = j["params"];
  const json& l = j["layout"];
  std::string o = fmt::format(
      "dtbench memory: {} (L {}, C {}, NH {}, T {}, V {}), {} MoE layers of {} experts (hidden {}), top-{}: {} "
      "parameters, {} active ({:.1f}%)\n",
      m["name"].get<std::string>(), m["L"].get<int>(), m["C"].get<int>(), m["NH"].get<int>(), m["T"].get<int>(),
      m["V"].get<int>(), m["moe_layers"].get<int>(), m["num_experts"].get<int>(), m["moe_ffn_hidden_size"].get<int>(),
      m["moe_router_topk"].get<int>(), commas(uint64_t(p["total"].get<double>())),
      commas(uint64_t(p["active"].get<double>())), 100 * p["active_share"].get<double>());
  o += fmt::format("experts {} parameters, the rest {}; per rank at expert-parallel {}: {}\n",
                   commas(uint64_t(p["experts"].get<double>())), commas(uint64_t(p["non_expert"].get<double>())),
                   l[kEp].get<int>(), commas(uint64_t(p["per_rank"].get<double>())));
  o += fmt::format("layout: DP {}, EP {} (expert-data-parallel {}), ZeRO {}, offload_optimizer {}, {}\n\n",
                   l[kDp].get<int>(), l[kEp].get<int>(), l["expert_data_parallel"].get<int>(),
                   l[kZeroStage].get<int>(), l[kOffload].get<std::string>(),
                   l["precision"].get<std::string>());
  o += fmt::format("{:<34} {:>9} {:>9} {:>13} {:>16} {:>10}\n", "model states per rank, GB", "param", "grad",
                   "master_param", "optimizer_state", "total");
  for (const auto& [key, label] : {std::pair{"per_rank_bytes", "this MoE"},
                                   std::pair{"dense_total_bytes", "dense, as many parameters"},
                                   std::pair{"dense_active_bytes", "dense, the active parameters"}}) {
    const json& b = j[key];
    o += fmt::format("{:<34} {:>9.3g} {:>9.3g} {:>13.3g} {:>16.3g} {:>10.3g}\n", label, b["param"].get<double>() / 1e9,
                     b["grad"].get<double>() / 1e9, b["master_param"].get<double>() / 1e9,
                     b["optimizer_state"].get<double>() / 1e9, b["total"].get<double>() / 1e9);
  }
  return o;
}

}  // namespace dtb
