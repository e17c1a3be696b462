#include "reference/model/gpt_json.h"

namespace dtb {

nlohmann::json to_json(const GptConfig& m) {
  nlohmann::json j = {{"L", m.L}, {"C", m.C}, {"NH", m.NH}, {"T", m.T}, {"V", m.V}};
  if (is_llama(m)) {  // a GPT-2 section as before the Llama family existed; Llama's with its settings resolved
    j["arch"] = to_string(m.arch);
    j["num_kv_heads"] = kv_heads(m);
    j["ffn_hidden_size"] = ffn_hidden(m);
    j["rope_theta"] = m.rope_theta;
    j["norm_eps"] = m.norm_eps;
  }
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
