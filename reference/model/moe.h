// The mixture-of-experts FFN of the reference model: a learned router sends each token to its
// top-k of E experts, each the model family's FFN with its own weights (GPT: fc, GELU, proj with
// biases; Llama: Mixtral's SwiGLU expert, MoeExpert), and the token's
// output is the gate-weighted sum of its experts' outputs (Switch Transformer, Fedus et al.
// 2021, top-1; GShard, Lepikhin et al. 2020, top-2). Capacity with token dropping, the
// load-balancing loss (Fedus et al. eq. 4) and the router z-loss (ST-MoE, Zoph et al. 2022
// eq. 5), with config names after Megatron-LM's (--num-experts, --moe-router-topk,
// --moe-expert-capacity-factor, --moe-aux-loss-coeff, --moe-z-loss-coeff). One rank with all
// experts is the oracle's layer; expert parallelism (GShard's, Megatron-LM's expert-parallel
// group) splits the same computation by expert: each of ep ranks holds E / ep consecutive
// experts, routes its own tokens, and dispatches every kept assignment's row to the rank
// holding its expert and combines the results through all_to_allv.
#pragma once
#include <optional>
#include <vector>

#include "kernels/comm/communicator.h"
#include "kernels/ops.h"

namespace dtb {

/// An expert's FFN. gelu: the GPT's, proj(gelu(fc x + fc_bias)) + proj_bias, fc (F, C).
/// swiglu: Mixtral's (Hugging Face MixtralBlockSparseTop2MLP, w2(silu(w1 x) * w3 x); Megatron-Core's
/// MoE experts with --swiglu, gate and up fused as its linear_fc1), no biases: fc (2F, C) holds
/// the gate rows (w1) then the up rows (w3), proj (C, F) is w2, the activation the ops' swiglu.
enum class MoeExpert { gelu, swiglu };

/// The MoE settings of a layer. Errors: validate_moe_config.
struct MoeConfig {
  int num_experts = 1;  // E
  int topk = 1;         // experts per token (1: Switch, 2: GShard/Mixtral)
  /// Tokens an expert takes: ceil(capacity_factor * N * topk / E) of a call's N tokens
  /// (Megatron-LM's capacity), at most N * topk; unset: no token is dropped.
  std::optional<double> capacity_factor;
  double aux_loss_coeff = 0.01;  // alpha of the load-balancing loss (Fedus et al.: 1e-2)
  double z_loss_coeff = 0.0;     // beta of the router z-loss (ST-MoE: 1e-3)
  int ffn_hidden = 0;            // each expert's hidden size F; 0: 4C, as the dense FFN
  /// The experts' form. A model never sets it: moe_layer_config (reference/model/gpt.h) derives it
  /// from model.arch, the one place that says which.
  MoeExpert expert = MoeExpert::gelu;
};

/// No experts: the settings of a dense model's FFN (GptConfig's default).
inline MoeConfig dense_moe() {
  MoeConfig c;
  c.num_experts = 0;
  return c;
}

/// Throws InputError naming the numbers: E < 1, topk outside [1, E], a capacity factor <= 0
/// (or not finite), a negative or non-finite loss coefficient, ffn_hidden < 0.
void validate_moe_config(const MoeConfig& cfg);

/// Each expert's hidden size: cfg.ffn_hidden, or 4C when 0.
int moe_hidden(const MoeConfig& cfg, int C);

/// A layer's weights (or their gradients), row-major, linear weights (out, in) as
/// torch.nn.Linear: router (E, C); fc (E, F, C), fc_bias (E, F); proj (E, C, F), proj_bias (E, C).
/// SwiGLU experts (MoeExpert::swiglu): fc (E, 2F, C), each expert's F gate rows then its F up
/// rows; proj (E, C, F); fc_bias and proj_bias unused (null).
template <typename T> struct MoeWeights {
  T* router = nullptr;
  T* fc = nullptr;
  T* fc_bias = nullptr;
  T* proj = nullptr;
  T* proj_bias = nullptr;
};

/// Where a call's tokens went. A call's N tokens form N / G routing groups of G consecutive
/// tokens (the model passes one sequence, G = Tn: Megatron-LM's seq_aux_loss, DeepSeek-V3's
/// sequence-wise balance loss; so any layout that keeps sequences whole routes them as one
/// rank does, whatever its micro-batches). Capacity and the load-balancing loss are per group.
/// Within a group assignments are ranked first by choice (every token's first choice before any
/// second choice, as GShard), then by token index; an expert takes them in that order until its
/// capacity is full and drops the rest. Ties between equal router probabilities go to the lower
/// expert index. An expert's rows (its batch) are its kept assignments group by group.
struct MoeRouting {
  int N = 0, E = 0, topk = 0;
  int group = 0;                       // G, tokens per routing group (N when one)
  std::vector<int> expert;             // (N, topk): the chosen experts, best first
  std::vector<int> slot;               // (N, topk): row in the expert's batch; -1 dropped
  std::vector<int> tokens_per_expert;  // (E): assignments before dropping, over all groups
  std::vector<int> group_tokens;       // (N / G, E): assignments before dropping, per group
  std::vector<int> kept_per_expert;    // (E): assignments kept, over all groups
  int capacity = 0;                    // per expert and group; G * topk when nothing is dropped
  int dropped = 0;                     // assignments dropped, over all experts
  /// Mean over groups of alpha * E * sum_e f_e P_e (f_e = the group's assignments to e / (G topk),
  /// P_e its tokens' mean probability of e: Fedus et al. eq. 4).
  double aux_loss = 0;
  double z_loss = 0;  // beta * mean over tokens of logsumexp(router logits)^2
  /// max over mean tokens per expert (before dropping, over all groups): 1 is perfect balance.
  double imbalance() const;
};

/// An expert-parallel layer's exchanges (moe_forward, moe_backward), accumulated: "dispatch" is
/// the way to the experts (forward: the tokens' rows; backward: their output gradients),
/// "combine" the way back (forward: the experts' outputs; backward: the input gradients). Each
/// counts its seconds (the row-count all-to-all included) and the bytes this rank sent to other
/// ranks (rows to itself are not sent).
struct MoeCommStats {
  double dispatch_s = 0, combine_s = 0;
  size_t dispatch_bytes = 0, combine_bytes = 0;
};

/// What backward needs from forward. "Own" rows are this rank's tokens' kept assignments; "held"
/// rows are what this rank's experts computed: the rows every rank of the expert-parallel group
/// sent them, source rank by source rank (one rank: the own rows).
template <typename T> struct MoeActivations {
  MoeRouting routing;
  std::vector<T> probs;                // (N, E) router softmax
  std::vector<double> lse;             // (N) logsumexp of the router logits
  std::vector<std::vector<T>> in, pre, act;  // per held expert: (held, C), (held, F), (held, F)
  std::vector<std::vector<T>> out;     // per expert (all E): the own rows' outputs (kept, C)
  std::vector<std::vector<int>> token;  // per expert (all E): the token of each own row
  std::vector<int> held_rows;          // (ep, E / ep): rows source s sent held expert j
};

/// out (N, C) = sum over a token's kept assignments of gate * expert(x), gate = the router's
/// softmax probability of that expert (Switch's gate; not renormalised over the top-k, as
/// Megatron-LM's moe_router_pre_softmax). A dropped assignment contributes 0 (the residual
/// carries the token). Each expert runs ops' matmul and GELU (or, cfg.expert swiglu, matmul
/// without biases and swiglu: the Llama block's MLP ops) on its rows in assignment order
/// (MoeRouting's), so E = 1 without dropping is the dense FFN times gate 1, bitwise. A token's
/// output adds its experts' contributions best choice first. Fills `acts` for backward.
/// x (N, C); `group` tokens per routing group (MoeRouting), 0 for one group of N.
/// Expert parallelism: `ep` is the expert-parallel group (null: one rank holding every expert);
/// rank r of its P ranks holds experts [r E/P, (r+1) E/P), and w's fc, fc_bias, proj and
/// proj_bias point at those E/P experts alone (the router is whole). Each rank routes its own N
/// tokens, sends each held expert's rows to its rank (the row counts first, an all_to_all of
/// E/P ints per peer, then the rows, all_to_allv in T), the experts run on the rows of every
/// source rank in rank order, and the outputs come back the same way: a row's output is what
/// one rank computes for it, up to the matmul's blocking over the rows it shares a call with.
/// Collective over `ep` (every rank calls it for the same layer, even with N = 0). `stats`
/// (may be null) is charged with the exchanges.
/// Errors: InputError from validate_moe_config, when `group` does not divide N, or when P does
/// not divide E.
template <typename T>
void moe_forward(Ops<T>& ops, const MoeConfig& cfg, const MoeWeights<T>& w, const T* x, T* out, int N, int C,
                 MoeActivations<T>& acts, int group = 0, Communicator* ep = nullptr, MoeCommStats* stats = nullptr);

/// dx (N, C) += the input gradient of out given dout (N, C); the weight gradients `dw` +=
/// theirs, the router's including d(aux_loss + z_loss), the two losses counting as added to the
/// model's loss with weight `loss_scale` (1 unless the loss is scaled). An expert's weight
/// gradients sum over its rows in assignment order; dx gets the experts' parts in expert index
/// order, then the router's; the router's gradient sums over tokens in order. With `ep` (the
/// forward's group; dw's expert parts this rank's E/P experts): the output gradients of the own
/// rows go to the experts' ranks and the input gradients come back, as forward's rows; a held
/// expert's weight gradients sum over every source rank's rows (source by source), so they hold
/// the whole expert-parallel group's tokens and only the expert-data-parallel reduction remains.
/// Collective over `ep`.
template <typename T>
void moe_backward(Ops<T>& ops, const MoeConfig& cfg, const MoeWeights<T>& w, const MoeWeights<T>& dw, const T* x,
                  const T* dout, T* dx, int N, int C, const MoeActivations<T>& acts, double loss_scale = 1.0,
                  Communicator* ep = nullptr, MoeCommStats* stats = nullptr);

}  // namespace dtb
