// The reference model, two families (model.arch): GPT-2 (token + position embedding, pre-LN
// blocks, tied LM head) and Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU,
// untied head, no biases: reference/model/llama_block.cc, docs/models.md), forward and backward on
// the CPU ops, templated on the compute type T (float; double for the oracle). Not the trainer:
// data, micro-batches, DP and the optimizer step are in reference/trainer.*.
//
// Shape legend: L layers, C channels, NH heads, KV key/value heads (Llama; NH for GPT-2),
// hs = C / NH head size, F the Llama FFN's hidden size, T max sequence length, V vocabulary,
// B batch (sequences in one forward). All parameters live in one buffer, in llm.c order
// (see gpt_param_layout), which is what the PyTorch golden file and ZeRO sharding use.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "kernels/ops.h"
#include "kernels/tensor.h"
#include "reference/model/moe.h"

namespace dtb {

/// The model family: "gpt2" (the default) or "llama".
enum class ModelArch { gpt2, llama };
const char* to_string(ModelArch a);
/// "gpt2" or "llama"; anything else throws InputError "<key>: 'x' is not \"gpt2\" or \"llama\"".
ModelArch parse_model_arch(const std::string& s, const std::string& key = "model.arch");

struct GptConfig {
  int L = 2;    // layers
  int C = 64;   // channels
  int NH = 4;   // heads
  int T = 64;   // max sequence length (position table rows)
  int V = 256;  // vocabulary (byte-level)
  /// Mixture of experts (reference/model/moe.h): moe.num_experts 0 is the dense model; otherwise layer
  /// l has moe.num_experts experts and a router in place of its FFN when l % moe_layer_freq == 0
  /// (Megatron-LM's --moe-layer-freq N: one MoE layer in every N, the first one MoE), routing
  /// each sequence as one group (MoeRouting).
  MoeConfig moe = dense_moe();
  int moe_layer_freq = 1;
  /// The family, and the Llama block's settings (Megatron-LM / Hugging Face names in the config:
  /// model.arch, num_kv_heads, ffn_hidden_size, rope_theta, norm_eps); with gpt2 they must stay
  /// at these defaults (validate_gpt_config).
  ModelArch arch = ModelArch::gpt2;
  int num_kv_heads = 0;      // KV, dividing NH (grouped-query attention); 0: NH
  int ffn_hidden = 0;        // F of the SwiGLU MLP; 0: llama_default_ffn_hidden(C)
  double rope_theta = 1e4;   // rotary base θ (Llama 2: 1e4; Llama 3: 5e5)
  double norm_eps = 1e-5;    // RMSNorm's eps
};

inline bool is_llama(const GptConfig& c) { return c.arch == ModelArch::llama; }
/// Llama's FFN size rule (meta-llama/llama, llama/model.py FeedForward: hidden = int(2 * 4C / 3),
/// rounded up to a multiple of multiple_of = 256): 11008 at C = 4096 (Llama 2 7B). Llama 3 scales
/// it further (ffn_dim_multiplier: 14336 at C = 4096), which a config gives as ffn_hidden_size.
inline int llama_default_ffn_hidden(int C) { return (int(int64_t(8) * C / 3) + 255) / 256 * 256; }
/// KV: num_kv_heads, or NH when 0 (and for GPT-2).
inline int kv_heads(const GptConfig& c) { return c.num_kv_heads > 0 ? c.num_kv_heads : c.NH; }
/// F: ffn_hidden, or Llama's rule when 0.
inline int ffn_hidden(const GptConfig& c) { return c.ffn_hidden > 0 ? c.ffn_hidden : llama_default_ffn_hidden(c.C); }
/// Rows of the packed qkv projection: (NH + 2 KV) hs (3C for GPT-2).
inline int qkv_width(const GptConfig& c) { return (c.NH + 2 * kv_heads(c)) * (c.C / c.NH); }
/// Why tensor parallelism of degree `tp` cannot shard Llama model `c`, or "" when it can (and for
/// GPT-2): grouped-query attention's k and v rows go by whole KV heads, sharded when tp divides
/// num_kv_heads or each replicated over tp / KV ranks when KV divides tp (Megatron-Core asks the
/// first; the second is the replication of Llama-style models with KV < tp), so a tp that neither
/// divides nor is divided by KV is refused; SwiGLU's gate and up rows are each column-parallel, so
/// tp must divide ffn_hidden_size. One line naming the numbers.
std::string llama_tp_refusal(const GptConfig& c, int tp);

/// The refusal of a Llama model where `by` has no Llama support yet: one line, as
/// moe_not_sharded, naming the key (`key` = llama). Where it trains: the train suite, fp32 on the CPU.
inline std::string llama_not_supported(const std::string& by, const std::string& key = "model.arch") {
  return key + " = llama: not supported by " + by + " yet (a Llama model trains in the train suite: data, tensor, "
         "sequence, context and pipeline parallel, ZeRO, recompute; fp32, bf16, fp16; CPU)";
}

/// True when layer l's FFN is a mixture of experts.
inline bool is_moe_layer(const GptConfig& c, int l) { return c.moe.num_experts > 0 && l % c.moe_layer_freq == 0; }
/// Lm, the MoE layers (0 when dense); layer l's index among them is l / moe_layer_freq.
inline int num_moe_layers(const GptConfig& c) {
  return c.moe.num_experts > 0 ? (c.L + c.moe_layer_freq - 1) / c.moe_layer_freq : 0;
}
/// The MoE layers' part of the loss at initialisation: router logits near 0 give each token
/// probabilities 1/E, so a layer's balance loss alpha E sum_e f_e (1/E) is alpha whatever the
/// routing, and its z-loss beta (ln E)^2; Lm (alpha + beta ln^2 E) in all (0 when dense). What a
/// freshly initialised MoE model's loss adds to the uniform ln V.
inline double moe_initial_loss(const GptConfig& c) {
  const double lnE = c.moe.num_experts > 0 ? std::log(double(c.moe.num_experts)) : 0.0;
  return num_moe_layers(c) * (c.moe.aux_loss_coeff + c.moe.z_loss_coeff * lnE * lnE);
}
/// The MoE layers' settings as the layer (moe.h) takes them: model.moe with the experts' form
/// and hidden size resolved from the family, the one place that says which. GPT-2: GELU
/// experts with biases (MoeExpert::gelu), F = moe_ffn_hidden_size or 4C. Llama: Mixtral's
/// SwiGLU experts without biases (MoeExpert::swiglu: Hugging Face MixtralSparseMoeBlock,
/// Megatron-Core's MoE with --swiglu), F = moe_ffn_hidden_size or, when 0, the dense
/// SwiGLU's ffn_hidden (ffn_hidden_size or Llama's rule). Errors: none.
inline MoeConfig moe_layer_config(const GptConfig& c) {
  MoeConfig m = c.moe;
  m.expert = is_llama(c) ? MoeExpert::swiglu : MoeExpert::gelu;
  m.ffn_hidden = is_llama(c) && m.ffn_hidden == 0 ? ffn_hidden(c) : moe_hidden(c.moe, c.C);
  return m;
}
/// An expert's hidden size F (moe_layer_config's).
inline int moe_expert_hidden(const GptConfig& c) { return moe_layer_config(c).ffn_hidden; }
/// One expert's parameters: GPT-2, fc F C + F, proj C F + C; Llama (SwiGLU, no biases), gate
/// and up 2 F C, down C F: 3 F C (F = moe_expert_hidden); 0 when dense.
inline size_t moe_expert_params(const GptConfig& c) {
  if (c.moe.num_experts <= 0) return 0;
  const size_t F = size_t(moe_expert_hidden(c)), C = size_t(c.C);
  return is_llama(c) ? 3 * F * C : 2 * F * C + F + C;
}
/// Dense layer l's index among the dense layers (the rows of fcw, fcb, fcprojw, fcprojb).
inline int dense_layer_index(const GptConfig& c, int l) {
  return c.moe.num_experts > 0 ? l - (l / c.moe_layer_freq + 1) : l;
}

/// One named parameter tensor inside the flat parameter buffer.
struct ParamTensor {
  std::string name;            // e.g. "qkvw"
  std::vector<int64_t> shape;  // e.g. {L, 3C, C}
  size_t offset = 0;           // in elements from the buffer's start
  size_t numel = 0;
};

/// The refusal of an MoE model where a tool has no MoE support yet (the per-rank memory plan):
/// one line naming num_experts and where one does train.
inline std::string moe_not_sharded(const GptConfig& cfg) {
  return "model.num_experts = " + std::to_string(cfg.moe.num_experts) +
         ": not supported here yet; an MoE model trains in the train suite (data, expert, pipeline and tensor "
         "parallel, ZeRO, recompute, checkpoints; fp32, bf16, fp16 on the CPU)";
}

/// GPT-2, the 16 parameter tensors in order: wte (V,C), wpe (T,C), ln1w (L,C), ln1b (L,C),
/// qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C),
/// fcw (Ld,4C,C), fcb (Ld,4C), fcprojw (Ld,C,4C), fcprojb (Ld,C), lnfw (C), lnfb (C), with
/// Ld = L - Lm dense layers; an MoE model (Lm = num_moe_layers MoE layers, E experts of hidden
/// size F = moe_hidden) appends routerw (Lm,E,C), expfcw (Lm,E,F,C), expfcb (Lm,E,F),
/// expprojw (Lm,E,C,F), expprojb (Lm,E,C) (MoeWeights' router, fc, fc_bias, proj, proj_bias).
/// Linear weights are (out, in) as torch.nn.Linear. The LM head is wte (tied).
/// Llama, 9 tensors, no biases, no position table: wte (V,C), ln1w (L,C) (RMSNorm weights),
/// qkvw (L,(NH+2KV)hs,C) (q rows, then k rows, then v rows, each head's hs rows together),
/// attprojw (L,C,C), ln2w (L,C), fcw (L,2F,C) (gate rows, then up rows: Megatron's fused
/// linear_fc1), fcprojw (L,C,F) (down), lnfw (C), lmheadw (V,C) (untied head). An MoE Llama
/// stacks fcw and fcprojw over its Ld dense layers and appends routerw (Lm,E,C), expfcw
/// (Lm,E,2Fe,C) (each expert's gate rows then up rows: Mixtral's w1 then w3, fused as
/// Megatron-Core's linear_fc1) and expprojw (Lm,E,C,Fe) (w2), Fe = moe_expert_hidden; no biases.
std::vector<ParamTensor> gpt_param_layout(const GptConfig& cfg);
/// Number of parameters: GPT-2 V C + T C + L (4 C^2 + 8 C) + Ld (8 C^2 + 5 C) + Lm E (C + 2 F C + F + C) + 2 C;
/// Llama 2 V C + L (2 C^2 + 2 KV hs C + 3 C F + 2 C) + C.
size_t gpt_num_params(const GptConfig& cfg);
/// Parameters a token uses: gpt_num_params less, per MoE layer, the E - topk experts it is not
/// routed to (each 2 F C + F + C); the dense model's count when dense. The "active parameters"
/// of an MoE model (Fedus et al. 2021; DeepSeek-V3's 37B of 671B), the N of 6 N flops per token.
size_t gpt_active_params(const GptConfig& cfg);
/// Model FLOPs per token trained, forward and backward: 6 N for the weights (N the active
/// parameters: an MoE token passes through its top-k experts only; the router and dropping not
/// counted) plus 12 L C seq_len for attention's scores and values (Chowdhery et al. 2022, PaLM,
/// appendix B; docs/metrics.md). Recompute is not counted: it is the MFU numerator, not HFU's.
/// Llama alike: N counts SwiGLU's three C x F matrices, grouped-query attention's smaller k, v
/// projections and the untied head; the attention term is per query head, so still 12 L C T.
double model_flops_per_token(const GptConfig& cfg, int seq_len);

/// Throws InputError when the config is not a valid model (C % NH != 0, sizes <= 0, a
/// num_experts < 0, an MoE config validate_moe_config refuses, moe_layer_freq outside [1, L]; for
/// llama num_kv_heads not dividing NH, an odd head size (rotary pairs), ffn_hidden_size,
/// rope_theta or norm_eps not positive, an MoE layer; for gpt2 any Llama setting off its default).
void validate_gpt_config(const GptConfig& cfg);

/// Sharding-invariant GPT-2 initialisation (Radford et al. 2019, as nanoGPT): linear and
/// embedding weights N(0, 0.02), residual projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)),
/// biases 0, layernorm weights 1; Llama the same rule on its tensors (the residual projections
/// attprojw and fcprojw N(0, 0.02/sqrt(2L)), RMSNorm weights 1). Element i of tensor `name` is a pure function of
/// (seed, name, i) (reference/model/rng.h), so any shard computes exactly its slice.
/// Writes all gpt_num_params(cfg) values into `params`.
template <typename T>
void gpt_init_params(T* params, const GptConfig& cfg, uint64_t seed);

/// The model in compute type T (float, or double for the oracle): parameters and their
/// gradients in one flat buffer each (layout above), activations kept from forward for
/// backward. Source: GPT-2 (Radford et al. 2019) as written in llm.c's train_gpt2.c,
/// checked against PyTorch (reference/model/golden_test.cc). Not thread-safe.
template <typename T>
class Gpt {
 public:
  /// Allocates parameters and gradients (categories param, grad) on `device`; activations
  /// are allocated at the first forward of a given (B, T) (category activation). `ops` is
  /// the backend's op set, which must own `device`'s memory (not owned here); null on a
  /// CPU device means CpuOps<T>. Errors: an invalid config throws InputError; a non-CPU
  /// device without ops aborts.
  Gpt(const GptConfig& cfg, Device& device, Ops<T>* ops = nullptr);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  Device& device() const { return device_; }
  Ops<T>& ops() const { return *ops_; }
  const std::vector<ParamTensor>& layout() const { return layout_; }
  size_t num_params() const { return num_params_; }
  /// Parameters and gradients in the backend's memory (host memory on the CPU backend).
  T* params() { return params_.data<T>(); }
  T* grads() { return grads_.data<T>(); }
  const T* params() const { return params_.data<T>(); }
  const T* grads() const { return grads_.data<T>(); }

  /// gpt_init_params(params(), config(), seed).
  void init(uint64_t seed);
  /// Sets every gradient to 0 (backward accumulates).
  void zero_grad();

  /// Forward over tokens (B,Tn) with next-token targets (B,Tn), Tn <= config().T, every id
  /// in [0, V). Returns the SUM over the B*Tn tokens of the cross-entropy loss (in double),
  /// so callers choose the normaliser (the global token count, docs/numerics.md); an MoE model
  /// adds, per MoE layer, B*Tn times its balance and z losses (moe_loss_sum()), so that over the
  /// global batch the objective is the mean token loss plus each layer's mean per-sequence balance
  /// loss and mean per-token z-loss. Errors: B <= 0, Tn outside [1, T] or an id outside [0, V)
  /// abort through the error sink.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int Tn);
  /// The MoE layers' part of the last forward's return (0 when dense).
  double moe_loss_sum() const { return moe_loss_sum_; }
  /// The routing of MoE layer i (of num_moe_layers) in the last forward.
  const MoeRouting& moe_routing(int i) const { return moe_acts_.at(size_t(i)).routing; }
  /// Per-token losses (B*Tn) of the last forward, on the host.
  const std::vector<T>& token_losses() const;
  /// Backward of the last forward: grads += d(loss_scale * sum of token losses)/d(params).
  /// Aborts when no forward came first.
  void backward(T loss_scale);

 private:
  void ensure_acts(int B, int Tn);
  // The Llama family's blocks (reference/model/llama_block.cc): its activations and the part of
  // forward and backward between the token ids and the cross-entropy's sum.
  void ensure_llama_acts(int B, int Tn);
  void llama_forward(const int32_t* tok, const int32_t* tgt, int B, int Tn);
  void llama_backward(T loss_scale);
  double sum_losses() const;  // of losses_host_, plus moe_loss_sum_
  GptConfig cfg_;
  Device& device_;
  std::vector<ParamTensor> layout_;
  size_t num_params_ = 0;
  Tensor params_, grads_;
  std::vector<Tensor> acts_;  // activations and backward buffers, enum Act in gpt.cc
  int B_ = 0, Tn_ = 0;        // shape of the allocated activations
  int last_B_ = 0, last_T_ = 0;
  Ops<T>* ops_ = nullptr;
  std::unique_ptr<Ops<T>> owned_ops_;
  Tensor tokens_, targets_;     // (B, Tn) ids of the last forward, in the backend's memory
  std::vector<T> losses_host_;  // per-token losses of the last forward
  std::vector<MoeActivations<T>> moe_acts_;  // per MoE layer, of the last forward
  double moe_loss_sum_ = 0;
  MoeWeights<T> moe_weights(T* base, int l) const;  // MoE layer l's tensors in params() or grads()
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace dtb
