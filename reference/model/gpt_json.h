// A GptConfig as JSON: the model section reports print (Suite::params_json) and checkpoint
// manifests keep (reference/checkpoint/checkpoint.h), one spelling for both.
#pragma once
#include <nlohmann/json.hpp>

#include "reference/model/gpt.h"

namespace dtb {

/// {"L", "C", "NH", "T", "V"}, and for an MoE model (moe.num_experts > 0) its keys as the config
/// names them after Megatron-LM: num_experts, moe_router_topk, moe_layer_freq,
/// moe_ffn_hidden_size, moe_aux_loss_coeff, moe_z_loss_coeff, moe_expert_capacity_factor (null:
/// no capacity limit); for a Llama model (arch llama) arch, num_kv_heads, ffn_hidden_size (both
/// resolved: never 0), rope_theta and norm_eps. A dense GPT-2 model's is the section as before MoE
/// and Llama existed. No errors.
nlohmann::json to_json(const GptConfig& m);

}  // namespace dtb
