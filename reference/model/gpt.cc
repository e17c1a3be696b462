// The reference GPT: forward and backward over the CPU ops, llm.c's structure with the
// activations of every layer kept for backward (no recompute here).
#include "reference/model/gpt.h"

#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "reference/model/rng.h"

namespace dtb {

const char* to_string(ModelArch a) { return a == ModelArch::llama ? "llama" : "gpt2"; }

ModelArch parse_model_arch(const std::string& s, const std::string& key) {
  if (s == "gpt2") return ModelArch::gpt2;
  if (s == "llama") return ModelArch::llama;
  throw InputError(key + ": '" + printable(s, 40) + "' is not \"gpt2\" or \"llama\"");
}

namespace {
std::vector<ParamTensor> llama_param_layout(const GptConfig& c) {
  const int64_t L = c.L, C = c.C, V = c.V, F = ffn_hidden(c), W = qkv_width(c), Lm = num_moe_layers(c), Ld = L - Lm;
  std::vector<ParamTensor> out = {{"wte", {V, C}},         {"ln1w", {L, C}},   {"qkvw", {L, W, C}},
                                  {"attprojw", {L, C, C}},  {"ln2w", {L, C}},   {"fcw", {Ld, 2 * F, C}},
                                  {"fcprojw", {Ld, C, F}},  {"lnfw", {C}},      {"lmheadw", {V, C}}};
  if (Lm > 0) {  // SwiGLU experts, no biases (moe_layer_config)
    const int64_t E = c.moe.num_experts, Fe = moe_expert_hidden(c);
    out.insert(out.end(), {{"routerw", {Lm, E, C}}, {"expfcw", {Lm, E, 2 * Fe, C}}, {"expprojw", {Lm, E, C, Fe}}});
  }
  return out;
}
}  // namespace

std::vector<ParamTensor> gpt_param_layout(const GptConfig& c) {
  const int64_t L = c.L, C = c.C, V = c.V, T = c.T, Lm = num_moe_layers(c), Ld = L - Lm;
  std::vector<ParamTensor> out = is_llama(c) ? llama_param_layout(c) : std::vector<ParamTensor>{
      {"wte", {V, C}},          {"wpe", {T, C}},          {"ln1w", {L, C}},
      {"ln1b", {L, C}},         {"qkvw", {L, 3 * C, C}},  {"qkvb", {L, 3 * C}},
      {"attprojw", {L, C, C}},  {"attprojb", {L, C}},     {"ln2w", {L, C}},
      {"ln2b", {L, C}},         {"fcw", {Ld, 4 * C, C}},  {"fcb", {Ld, 4 * C}},
      {"fcprojw", {Ld, C, 4 * C}}, {"fcprojb", {Ld, C}},  {"lnfw", {C}},
      {"lnfb", {C}}};
  if (Lm > 0 && !is_llama(c)) {
    const int64_t E = c.moe.num_experts, F = moe_expert_hidden(c);
    out.insert(out.end(), {{"routerw", {Lm, E, C}}, {"expfcw", {Lm, E, F, C}}, {"expfcb", {Lm, E, F}},
                           {"expprojw", {Lm, E, C, F}}, {"expprojb", {Lm, E, C}}});
  }
  size_t offset = 0;
  for (auto& p : out) {
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= size_t(d);
    p.offset = offset;
    offset += p.numel;
  }
  return out;
}

size_t gpt_num_params(const GptConfig& cfg) {
  const auto layout = gpt_param_layout(cfg);
  return layout.back().offset + layout.back().numel;
}

size_t gpt_active_params(const GptConfig& c) {
  const size_t idle = c.moe.num_experts > 0 ? size_t(c.moe.num_experts - c.moe.topk) : 0;
  return gpt_num_params(c) - size_t(num_moe_layers(c)) * idle * moe_expert_params(c);
}

double model_flops_per_token(const GptConfig& c, int seq_len) {
  return 6.0 * double(gpt_active_params(c)) + 12.0 * c.L * double(c.C) * seq_len;
}

namespace {
// The Llama keys: valid for llama, at their defaults for gpt2 (a Llama option given to GPT-2 would
// otherwise be ignored without a word).
void validate_arch_settings(const GptConfig& c) {
  const GptConfig d;
  if (!is_llama(c)) {
    for (auto [key, off] : {std::pair{"num_kv_heads", c.num_kv_heads != d.num_kv_heads},
                            {"ffn_hidden_size", c.ffn_hidden != d.ffn_hidden},
                            {"rope_theta", c.rope_theta != d.rope_theta}, {"norm_eps", c.norm_eps != d.norm_eps}})
      if (off) throw InputError(std::string("model.") + key + " is a Llama option: set model.arch \"llama\" (arch is gpt2)");
    return;
  }
  const int KV = kv_heads(c);
  if (c.num_kv_heads < 0 || c.NH % KV != 0)
    throw InputError("model.num_kv_heads = " + std::to_string(c.num_kv_heads) + " does not divide NH = " +
                     std::to_string(c.NH));
  if ((c.C / c.NH) % 2 != 0)
    throw InputError("model: head size C / NH = " + std::to_string(c.C / c.NH) +
                     " is odd; rotary embeddings rotate pairs of channels");
  if (c.ffn_hidden < 0) throw InputError("model.ffn_hidden_size = " + std::to_string(c.ffn_hidden) + ": must be > 0 (0: Llama's rule)");
  if (!(c.rope_theta > 1)) throw InputError("model.rope_theta must be > 1, got " + std::to_string(c.rope_theta));
  if (!(c.norm_eps > 0)) throw InputError("model.norm_eps must be > 0, got " + std::to_string(c.norm_eps));
}
}  // namespace

void validate_gpt_config(const GptConfig& c) {
  if (c.L <= 0 || c.C <= 0 || c.NH <= 0 || c.T <= 0 || c.V <= 0)
    throw InputError("model: L, C, NH, T and V must be positive");
  if (c.C % c.NH != 0)
    throw InputError("model: C = " + std::to_string(c.C) + " is not divisible by NH = " +
                     std::to_string(c.NH));
  if (c.moe.num_experts < 0)
    throw InputError("model.num_experts = " + std::to_string(c.moe.num_experts) + ": must be >= 0 (0: dense)");
  validate_arch_settings(c);
  if (c.moe.num_experts == 0) return;
  validate_moe_config(c.moe);
  if (c.moe_layer_freq < 1 || c.moe_layer_freq > c.L)
    throw InputError("model.moe_layer_freq = " + std::to_string(c.moe_layer_freq) + " is outside [1, L = " +
                     std::to_string(c.L) + "]");
}

std::string llama_tp_refusal(const GptConfig& c, int tp) {
  if (!is_llama(c) || tp <= 1) return "";
  const int KV = kv_heads(c), F = ffn_hidden(c);
  if (KV % tp != 0 && tp % KV != 0)
    return "tensor_parallel = " + std::to_string(tp) + " neither divides nor is a multiple of model.num_kv_heads = " +
           std::to_string(KV) + " (grouped-query attention shards whole KV heads, or replicates each over tp / KV ranks)";
  if (F % tp != 0)
    return "tensor_parallel = " + std::to_string(tp) + " does not divide model.ffn_hidden_size = " + std::to_string(F) +
           " (SwiGLU's gate and up rows are each column-parallel)";
  return "";
}

template <typename T>
void gpt_init_params(T* params, const GptConfig& cfg, uint64_t seed) {
  const double std_w = 0.02;
  const double std_proj = 0.02 / std::sqrt(2.0 * cfg.L);  // GPT-2's residual scaling
  for (const auto& p : gpt_param_layout(cfg)) {
    T* dst = params + p.offset;
    const std::string& n = p.name;
    if (n == "ln1w" || n == "ln2w" || n == "lnfw") {
      for (size_t i = 0; i < p.numel; ++i) dst[i] = T(1);
    } else if (n.back() == 'b' && n != "wpe") {
      for (size_t i = 0; i < p.numel; ++i) dst[i] = T(0);
    } else {
      const double s = (n == "attprojw" || n == "fcprojw" || n == "expprojw") ? std_proj : std_w;
      const uint64_t stream = stream_id(n);
      // Rounded through float so the float32 model and the float64 oracle start from
      // identical weights.
      for (size_t i = 0; i < p.numel; ++i) dst[i] = T(float(s * random_normal(seed, stream, i)));
    }
  }
}
template void gpt_init_params<float>(float*, const GptConfig&, uint64_t);
template void gpt_init_params<double>(double*, const GptConfig&, uint64_t);

// Activation tensors, indices into acts_. Per-layer ones hold L slices.
enum Act {
  kEncoded,   // (B,T,C)
  kLn1,       // (L,B,T,C)
  kLn1Mean,   // (L,B,T)
  kLn1Rstd,   // (L,B,T)
  kQkv,       // (L,B,T,3C)
  kAtty,      // (L,B,T,C)
  kAtt,       // (L,B,NH,T,T)
  kAttproj,   // (L,B,T,C)
  kRes2,      // (L,B,T,C)
  kLn2,       // (L,B,T,C)
  kLn2Mean,   // (L,B,T)
  kLn2Rstd,   // (L,B,T)
  kFch,       // (L,B,T,4C)
  kFchGelu,   // (L,B,T,4C)
  kFcproj,    // (L,B,T,C)
  kRes3,      // (L,B,T,C)
  kLnf,       // (B,T,C)
  kLnfMean,   // (B,T)
  kLnfRstd,   // (B,T)
  kLogits,    // (B,T,V)
  kProbs,     // (B,T,V)
  kLosses,    // (B,T)
  // gradient buffers for backward (workspace)
  kDRes,      // (B,T,C) gradient of the residual stream
  kDLn,       // (B,T,C)
  kDBig,      // (B,T,4C): d of fch_gelu, also d of qkv (3C) and d of atty (C)
  kDBig2,     // (B,T,4C): d of fch
  kDAttScratch,  // (B,NH,T,T)
  kDLogits,   // (B,T,V)
  kNumActs
};

template <typename T>
Gpt<T>::Gpt(const GptConfig& cfg, Device& device, Ops<T>* ops) : cfg_(cfg), device_(device), ops_(ops) {
  validate_gpt_config(cfg);
  if (cfg.moe.num_experts > 0 && !device.is_cpu())  // moe.cc routes and gathers on the host
    throw InputError("model.num_experts = " + std::to_string(cfg.moe.num_experts) +
                     ": MoE layers run on the CPU backend only so far");
  moe_acts_.resize(size_t(num_moe_layers(cfg)));
  if (!ops_) {
    DTB_CHECK(device.is_cpu(), "Gpt on a non-CPU device needs that backend's Ops");
    owned_ops_ = std::make_unique<CpuOps<T>>();
    ops_ = owned_ops_.get();
  }
  layout_ = gpt_param_layout(cfg);
  num_params_ = gpt_num_params(cfg);
  params_ = Tensor::empty(device, {int64_t(num_params_)}, dtype_of<T>(), MemCategory::param);
  grads_ = Tensor::empty(device, {int64_t(num_params_)}, dtype_of<T>(), MemCategory::grad);
  ops_->zero(params(), num_params_);
  ops_->zero(grads(), num_params_);
}

template <typename T>
Gpt<T>::~Gpt() = default;

template <typename T>
MoeWeights<T> Gpt<T>::moe_weights(T* base, int l) const {
  const size_t m = size_t(l / cfg_.moe_layer_freq);
  auto at = [&](size_t i) { return base + layout_[i].offset + m * (layout_[i].numel / size_t(num_moe_layers(cfg_))); };
  // After the dense tensors: Llama's 9, then routerw expfcw expprojw (no biases); GPT-2's 16,
  // then routerw expfcw expfcb expprojw expprojb.
  if (is_llama(cfg_)) return {at(9), at(10), nullptr, at(11), nullptr};
  constexpr size_t kRouterw = 16;
  return {at(kRouterw), at(kRouterw + 1), at(kRouterw + 2), at(kRouterw + 3), at(kRouterw + 4)};
}

template <typename T>
void Gpt<T>::init(uint64_t seed) {
  std::vector<T> host(num_params_);  // initialised on the host, then copied to the backend
  gpt_init_params(host.data(), cfg_, seed);
  ops_->copy_from_host(params(), host.data(), num_params_ * sizeof(T));
}

template <typename T>
void Gpt<T>::zero_grad() {
  ops_->zero(grads(), num_params_);
}

template <typename T>
void Gpt<T>::ensure_acts(int B, int Tn) {
  if (B == B_ && Tn == Tn_) return;
  if (is_llama(cfg_)) return ensure_llama_acts(B, Tn);
  const int64_t L = cfg_.L, C = cfg_.C, NH = cfg_.NH, V = cfg_.V, b = B, t = Tn;
  const std::vector<std::vector<int64_t>> shapes = {
      {b, t, C},     {L, b, t, C},  {L, b, t},        {L, b, t},     {L, b, t, 3 * C},
      {L, b, t, C},  {L, b, NH, t, t}, {L, b, t, C},  {L, b, t, C},  {L, b, t, C},
      {L, b, t},     {L, b, t},     {L, b, t, 4 * C}, {L, b, t, 4 * C}, {L, b, t, C},
      {L, b, t, C},  {b, t, C},     {b, t},           {b, t},        {b, t, V},
      {b, t, V},     {b, t},
      {b, t, C},     {b, t, C},     {b, t, 4 * C},    {b, t, 4 * C}, {b, NH, t, t},
      {b, t, V}};
  acts_.clear();  // free the old ones first, so the peak is not both sets
  for (int i = 0; i < kNumActs; ++i) {
    const auto cat = i >= kDRes ? MemCategory::workspace : MemCategory::activation;
    acts_.push_back(Tensor::empty(device_, shapes[i], dtype_of<T>(), cat));
  }
  tokens_ = Tensor::empty(device_, {b, t}, DType::i32, MemCategory::activation);
  targets_ = Tensor::empty(device_, {b, t}, DType::i32, MemCategory::activation);
  B_ = B;
  Tn_ = Tn;
}

template <typename T>
double Gpt<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int Tn) {
  const int C = cfg_.C, NH = cfg_.NH, V = cfg_.V;
  DTB_CHECK(B > 0 && Tn > 0 && Tn <= cfg_.T, "forward: sequence length out of range");
  ensure_acts(B, Tn);
  const size_t BT = size_t(B) * Tn;
  for (size_t i = 0; i < BT; ++i)
    DTB_CHECK(tokens[i] >= 0 && tokens[i] < V && targets[i] >= 0 && targets[i] < V,
              "forward: token id out of [0, V)");
  int32_t* tok = tokens_.data<int32_t>();
  int32_t* tgt = targets_.data<int32_t>();
  ops_->copy_from_host(tok, tokens, BT * sizeof(int32_t));
  ops_->copy_from_host(tgt, targets, BT * sizeof(int32_t));
  last_B_ = B;
  last_T_ = Tn;
  moe_loss_sum_ = 0;
  if (is_llama(cfg_)) {
    llama_forward(tok, tgt, B, Tn);
    return sum_losses();
  }
  auto A = [&](int i) { return acts_[i].template data<T>(); };
  auto P = [&](int i) { return params() + layout_[i].offset; };
  // Parameter indices in layout order.
  enum { wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
         fcprojb, lnfw, lnfb };

  Ops<T>& ops = *ops_;
  ops.encoder_forward(A(kEncoded), tok, P(wte), P(wpe), B, Tn, C);
  for (int l = 0; l < cfg_.L; ++l) {
    const T* x = l == 0 ? A(kEncoded) : A(kRes3) + size_t(l - 1) * BT * C;
    const size_t oC = size_t(l) * BT * C, oN = size_t(l) * BT;
    T* ln1 = A(kLn1) + oC;
    T* qkv = A(kQkv) + 3 * oC;
    T* atty = A(kAtty) + oC;
    T* att = A(kAtt) + size_t(l) * B * NH * Tn * Tn;
    T* attproj = A(kAttproj) + oC;
    T* res2 = A(kRes2) + oC;
    T* ln2 = A(kLn2) + oC;
    T* fch = A(kFch) + 4 * oC;
    T* fchg = A(kFchGelu) + 4 * oC;
    T* fcproj = A(kFcproj) + oC;
    T* res3 = A(kRes3) + oC;
    ops.layernorm_forward(ln1, A(kLn1Mean) + oN, A(kLn1Rstd) + oN, x, P(ln1w) + l * C,
                           P(ln1b) + l * C, int(BT), C);
    ops.matmul_forward(qkv, ln1, P(qkvw) + size_t(l) * 3 * C * C, P(qkvb) + l * 3 * C, int(BT), C,
                        3 * C);
    ops.attention_forward(atty, att, qkv, B, Tn, C, NH);
    ops.matmul_forward(attproj, atty, P(attprojw) + size_t(l) * C * C, P(attprojb) + l * C,
                        int(BT), C, C);
    ops.residual_forward(res2, x, attproj, BT * C);
    ops.layernorm_forward(ln2, A(kLn2Mean) + oN, A(kLn2Rstd) + oN, res2, P(ln2w) + l * C,
                           P(ln2b) + l * C, int(BT), C);
    if (is_moe_layer(cfg_, l)) {  // each sequence one routing group
      MoeActivations<T>& ma = moe_acts_[size_t(l / cfg_.moe_layer_freq)];
      moe_forward(ops, moe_layer_config(cfg_), moe_weights(params(), l), ln2, fcproj, int(BT), C, ma, Tn);
      moe_loss_sum_ += double(BT) * (ma.routing.aux_loss + ma.routing.z_loss);
    } else {
      const size_t d = size_t(dense_layer_index(cfg_, l));
      ops.matmul_forward(fch, ln2, P(fcw) + d * 4 * C * C, P(fcb) + d * 4 * C, int(BT), C, 4 * C);
      ops.gelu_forward(fchg, fch, BT * 4 * C);
      ops.matmul_forward(fcproj, fchg, P(fcprojw) + d * 4 * C * C, P(fcprojb) + d * C, int(BT), 4 * C, C);
    }
    ops.residual_forward(res3, res2, fcproj, BT * C);
  }
  const T* xL = A(kRes3) + size_t(cfg_.L - 1) * BT * C;
  ops.layernorm_forward(A(kLnf), A(kLnfMean), A(kLnfRstd), xL, P(lnfw), P(lnfb), int(BT), C);
  ops.matmul_forward(A(kLogits), A(kLnf), P(wte), static_cast<const T*>(nullptr), int(BT), C, V);
  ops.crossentropy_forward(A(kLosses), A(kProbs), A(kLogits), tgt, int(BT), V);
  losses_host_.resize(BT);
  ops.copy_to_host(losses_host_.data(), A(kLosses), BT * sizeof(T));
  return sum_losses();
}

template <typename T>
double Gpt<T>::sum_losses() const {
  double sum = 0;
  for (T l : losses_host_) sum += double(l);
  return sum + moe_loss_sum_;
}

template <typename T>
const std::vector<T>& Gpt<T>::token_losses() const {
  return losses_host_;
}

template <typename T>
void Gpt<T>::backward(T loss_scale) {
  DTB_CHECK(last_B_ > 0, "backward without forward");
  if (is_llama(cfg_)) return llama_backward(loss_scale);
  const int B = last_B_, Tn = last_T_, C = cfg_.C, NH = cfg_.NH, V = cfg_.V;
  const size_t BT = size_t(B) * Tn;
  auto A = [&](int i) { return acts_[i].template data<T>(); };
  auto P = [&](int i) { return params() + layout_[i].offset; };
  auto G = [&](int i) { return grads() + layout_[i].offset; };
  Ops<T>& ops = *ops_;
  auto zero = [&](int i, size_t n) { ops.zero(A(i), n); };
  const int32_t* tok = tokens_.data<int32_t>();
  const int32_t* tgt = targets_.data<int32_t>();
  enum { wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
         fcprojb, lnfw, lnfb };

  // LM head and final layernorm.
  ops.crossentropy_backward(A(kDLogits), A(kProbs), tgt, loss_scale, int(BT), V);
  zero(kDLn, BT * C);
  ops.matmul_backward(A(kDLn), G(wte), static_cast<T*>(nullptr), A(kDLogits), A(kLnf), P(wte),
                       int(BT), C, V);
  zero(kDRes, BT * C);
  const T* xL = A(kRes3) + size_t(cfg_.L - 1) * BT * C;
  ops.layernorm_backward(A(kDRes), G(lnfw), G(lnfb), A(kDLn), xL, P(lnfw), A(kLnfMean),
                          A(kLnfRstd), int(BT), C);

  T* dres = A(kDRes);  // running gradient of the residual stream, updated in place
  for (int l = cfg_.L - 1; l >= 0; --l) {
    const T* x = l == 0 ? A(kEncoded) : A(kRes3) + size_t(l - 1) * BT * C;
    const size_t oC = size_t(l) * BT * C, oN = size_t(l) * BT;
    // MLP branch: res3 = res2 + fcproj(gelu(fc(ln2(res2)))), or the MoE layer's output.
    if (is_moe_layer(cfg_, l)) {  // the losses weigh BT * loss_scale, as forward added them
      zero(kDLn, BT * C);
      moe_backward(ops, moe_layer_config(cfg_), moe_weights(params(), l), moe_weights(grads(), l), A(kLn2) + oC, dres, A(kDLn),
                   int(BT), C, moe_acts_[size_t(l / cfg_.moe_layer_freq)], double(loss_scale) * double(BT));
    } else {
      const size_t d = size_t(dense_layer_index(cfg_, l));
      T* dfchg = A(kDBig);
      T* dfch = A(kDBig2);
      zero(kDBig, BT * 4 * C);
      ops.matmul_backward(dfchg, G(fcprojw) + d * 4 * C * C, G(fcprojb) + d * C, dres, A(kFchGelu) + 4 * oC,
                          P(fcprojw) + d * 4 * C * C, int(BT), 4 * C, C);
      zero(kDBig2, BT * 4 * C);
      ops.gelu_backward(dfch, A(kFch) + 4 * oC, dfchg, BT * 4 * C);
      zero(kDLn, BT * C);
      ops.matmul_backward(A(kDLn), G(fcw) + d * 4 * C * C, G(fcb) + d * 4 * C, dfch, A(kLn2) + oC,
                          P(fcw) + d * 4 * C * C, int(BT), C, 4 * C);
    }
    ops.layernorm_backward(dres, G(ln2w) + l * C, G(ln2b) + l * C, A(kDLn), A(kRes2) + oC,
                            P(ln2w) + l * C, A(kLn2Mean) + oN, A(kLn2Rstd) + oN, int(BT), C);
    // Attention branch: res2 = x + attproj(attention(qkv(ln1(x)))).
    T* datty = A(kDBig2);
    zero(kDBig2, BT * C);
    ops.matmul_backward(datty, G(attprojw) + size_t(l) * C * C, G(attprojb) + l * C, dres,
                         A(kAtty) + oC, P(attprojw) + size_t(l) * C * C, int(BT), C, C);
    T* dqkv = A(kDBig);
    zero(kDBig, BT * 3 * C);
    ops.attention_backward(dqkv, A(kDAttScratch), datty, A(kQkv) + 3 * oC,
                            A(kAtt) + size_t(l) * B * NH * Tn * Tn, B, Tn, C, NH);
    zero(kDLn, BT * C);
    ops.matmul_backward(A(kDLn), G(qkvw) + size_t(l) * 3 * C * C, G(qkvb) + l * 3 * C, dqkv,
                         A(kLn1) + oC, P(qkvw) + size_t(l) * 3 * C * C, int(BT), C, 3 * C);
    ops.layernorm_backward(dres, G(ln1w) + l * C, G(ln1b) + l * C, A(kDLn), x, P(ln1w) + l * C,
                            A(kLn1Mean) + oN, A(kLn1Rstd) + oN, int(BT), C);
  }
  ops.encoder_backward(G(wte), G(wpe), dres, tok, B, Tn, C);
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace dtb
