#include "reference/model/gpt_json.h"

namespace dtb {

nlohmann::json to_json(const GptConfig& m) {
  nlohmann::json j = {{"L", m.L}, {"C", m.C}, {"NH", m.NH}, {"T", m.T}, {"V", m.V}};
  if (m.moe.num_experts == 0) return j;  // a dense model's section as before MoE existed
  j["num_experts"] = m.moe.num_experts;
  j["moe_router_topk"] = m.moe.topk;
  j["moe_layer_freq"] = m.moe_layer_freq;
  j["moe_ffn_hidden_size"] = m.moe.ffn_hidden;
  j["moe_aux_loss_coeff"] = m.moe.aux_loss_coeff;
  j["moe_z_loss_coeff"] = m.moe.z_loss_coeff;
  j["moe_expert_capacity_factor"] =
      m.moe.capacity_factor ? nlohmann::json(*m.moe.capacity_factor) : nlohmann::json(nullptr);
  return j;
}

}  // namespace dtb
