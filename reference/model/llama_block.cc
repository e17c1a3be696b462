// The Llama family's part of Gpt<T> (reference/model/gpt.h): its activations, and forward and
// backward from the token ids to the per-token losses. Per layer
//   x += attproj(attention(rope(qkv(rmsnorm1(x)))));  x += down(swiglu(fc(rmsnorm2(x))))
// after x = wte[tok], then rmsnormf and the untied head lmheadw. An MoE layer's MLP is moe.h's
// layer with SwiGLU experts (moe_layer_config), its balance and z losses added as the GPT's. No biases, no position table:
// positions enter through the rotary embeddings only (rows at positions 0..Tn-1).
// Shape legend: W = (NH + 2 KV) hs, the packed qkv's width; F the SwiGLU hidden size.
#include <algorithm>

#include "reference/model/gpt.h"

namespace dtb {

namespace {

// Parameter tensors, gpt_param_layout's Llama order.
enum LlamaParam { wte, ln1w, qkvw, attprojw, ln2w, fcw, fcprojw, lnfw, lmheadw };

// Activation tensors, indices into acts_. Per-layer ones hold L slices.
enum LlamaAct {
  kEmb,          // (B,T,C) wte[tok], the residual stream's start
  kLn1,          // (L,B,T,C)
  kLn1Rstd,      // (L,B,T)
  kQkv,          // (L,B,T,W) after the rotary embeddings
  kAtty,         // (L,B,T,C)
  kAtt,          // (L,B,NH,T,T)
  kRes2,         // (L,B,T,C) x + attention branch
  kLn2,          // (L,B,T,C)
  kLn2Rstd,      // (L,B,T)
  kFch,          // (L,B,T,2F) gate | up
  kSwiglu,       // (L,B,T,F)
  kRes3,         // (L,B,T,C) res2 + MLP branch: the layer's output
  kLnf,          // (B,T,C)
  kLnfRstd,      // (B,T)
  kLogits,       // (B,T,V)
  kProbs,        // (B,T,V)
  kLosses,       // (B,T)
  kBranch,       // (B,T,C) a branch's output before its residual add
  // gradient buffers for backward (workspace)
  kDRes,         // (B,T,C) gradient of the residual stream
  kDLn,          // (B,T,C)
  kDBig,         // (B,T,max(2F,W)): d of fch, d of qkv
  kDBig2,        // (B,T,max(F,C)): d of swiglu, d of atty
  kDAttScratch,  // (B,NH,T,T)
  kDLogits,      // (B,T,V)
  kNumLlamaActs
};

}  // namespace

template <typename T>
void Gpt<T>::ensure_llama_acts(int B, int Tn) {
  const int64_t L = cfg_.L, C = cfg_.C, NH = cfg_.NH, V = cfg_.V, W = qkv_width(cfg_), F = ffn_hidden(cfg_);
  const int64_t b = B, t = Tn;
  const std::vector<std::vector<int64_t>> shapes = {
      {b, t, C},        {L, b, t, C},     {L, b, t},    {L, b, t, W},    {L, b, t, C},
      {L, b, NH, t, t}, {L, b, t, C},     {L, b, t, C}, {L, b, t},       {L, b, t, 2 * F},
      {L, b, t, F},     {L, b, t, C},     {b, t, C},    {b, t},          {b, t, V},
      {b, t, V},        {b, t},           {b, t, C},
      {b, t, C},        {b, t, C},        {b, t, std::max(2 * F, W)},    {b, t, std::max(F, C)},
      {b, NH, t, t},    {b, t, V}};
  acts_.clear();  // free the old ones first, so the peak is not both sets
  for (int i = 0; i < kNumLlamaActs; ++i) {
    const auto cat = i >= kDRes ? MemCategory::workspace : MemCategory::activation;
    acts_.push_back(Tensor::empty(device_, shapes[size_t(i)], dtype_of<T>(), cat));
  }
  tokens_ = Tensor::empty(device_, {b, t}, DType::i32, MemCategory::activation);
  targets_ = Tensor::empty(device_, {b, t}, DType::i32, MemCategory::activation);
  B_ = B;
  Tn_ = Tn;
}

template <typename T>
void Gpt<T>::llama_forward(const int32_t* tok, const int32_t* tgt, int B, int Tn) {
  const int C = cfg_.C, NH = cfg_.NH, KV = kv_heads(cfg_), hs = C / NH, V = cfg_.V, W = qkv_width(cfg_);
  const int F = ffn_hidden(cfg_);
  const T eps = T(cfg_.norm_eps);
  const size_t BT = size_t(B) * Tn;
  auto A = [&](int i) { return acts_[size_t(i)].template data<T>(); };
  auto P = [&](int i) { return params() + layout_[size_t(i)].offset; };
  Ops<T>& ops = *ops_;
  ops.embedding_shard_forward(A(kEmb), tok, P(wte), nullptr, B, Tn, C, 0, V);
  T* branch = A(kBranch);
  for (int l = 0; l < cfg_.L; ++l) {
    const T* x = l == 0 ? A(kEmb) : A(kRes3) + size_t(l - 1) * BT * C;
    const size_t oC = size_t(l) * BT * C, oN = size_t(l) * BT;
    T* ln1 = A(kLn1) + oC;
    T* qkv = A(kQkv) + size_t(l) * BT * W;
    T* atty = A(kAtty) + oC;
    T* res2 = A(kRes2) + oC;
    T* ln2 = A(kLn2) + oC;
    T* fch = A(kFch) + size_t(l) * BT * 2 * F;
    T* sw = A(kSwiglu) + size_t(l) * BT * F;
    ops.rmsnorm_forward(ln1, A(kLn1Rstd) + oN, x, P(ln1w) + size_t(l) * C, eps, int(BT), C);
    ops.matmul_forward(qkv, ln1, P(qkvw) + size_t(l) * W * C, nullptr, int(BT), C, W);
    ops.rope_forward(qkv, B, Tn, NH, KV, hs, 0, cfg_.rope_theta);
    ops.gqa_attention_forward(atty, A(kAtt) + size_t(l) * B * NH * Tn * Tn, qkv, B, Tn, NH, KV, hs);
    ops.matmul_forward(branch, atty, P(attprojw) + size_t(l) * C * C, nullptr, int(BT), C, C);
    ops.residual_forward(res2, x, branch, BT * C);
    ops.rmsnorm_forward(ln2, A(kLn2Rstd) + oN, res2, P(ln2w) + size_t(l) * C, eps, int(BT), C);
    if (is_moe_layer(cfg_, l)) {  // SwiGLU experts (moe_layer_config), each sequence one routing group
      MoeActivations<T>& ma = moe_acts_[size_t(l / cfg_.moe_layer_freq)];
      moe_forward(ops, moe_layer_config(cfg_), moe_weights(params(), l), ln2, branch, int(BT), C, ma, Tn);
      moe_loss_sum_ += double(BT) * (ma.routing.aux_loss + ma.routing.z_loss);
    } else {
      const size_t d = size_t(dense_layer_index(cfg_, l));  // fcw, fcprojw stack the dense layers
      ops.matmul_forward(fch, ln2, P(fcw) + d * 2 * F * C, nullptr, int(BT), C, 2 * F);
      ops.swiglu_forward(sw, fch, int(BT), F);
      ops.matmul_forward(branch, sw, P(fcprojw) + d * C * F, nullptr, int(BT), F, C);
    }
    ops.residual_forward(A(kRes3) + oC, res2, branch, BT * C);
  }
  const T* xL = A(kRes3) + size_t(cfg_.L - 1) * BT * C;
  ops.rmsnorm_forward(A(kLnf), A(kLnfRstd), xL, P(lnfw), eps, int(BT), C);
  ops.matmul_forward(A(kLogits), A(kLnf), P(lmheadw), nullptr, int(BT), C, V);
  ops.crossentropy_forward(A(kLosses), A(kProbs), A(kLogits), tgt, int(BT), V);
  losses_host_.resize(BT);
  ops.copy_to_host(losses_host_.data(), A(kLosses), BT * sizeof(T));
}

template <typename T>
void Gpt<T>::llama_backward(T loss_scale) {
  const int B = last_B_, Tn = last_T_, C = cfg_.C, NH = cfg_.NH, KV = kv_heads(cfg_), hs = C / NH, V = cfg_.V;
  const int W = qkv_width(cfg_), F = ffn_hidden(cfg_);
  const size_t BT = size_t(B) * Tn;
  auto A = [&](int i) { return acts_[size_t(i)].template data<T>(); };
  auto P = [&](int i) { return params() + layout_[size_t(i)].offset; };
  auto G = [&](int i) { return grads() + layout_[size_t(i)].offset; };
  Ops<T>& ops = *ops_;
  auto zero = [&](int i, size_t n) { ops.zero(A(i), n); };
  const int32_t* tok = tokens_.data<int32_t>();
  const int32_t* tgt = targets_.data<int32_t>();

  // LM head and final RMSNorm.
  ops.crossentropy_backward(A(kDLogits), A(kProbs), tgt, loss_scale, int(BT), V);
  zero(kDLn, BT * C);
  ops.matmul_backward(A(kDLn), G(lmheadw), nullptr, A(kDLogits), A(kLnf), P(lmheadw), int(BT), C, V);
  zero(kDRes, BT * C);
  const T* xL = A(kRes3) + size_t(cfg_.L - 1) * BT * C;
  ops.rmsnorm_backward(A(kDRes), G(lnfw), A(kDLn), xL, P(lnfw), A(kLnfRstd), int(BT), C);

  T* dres = A(kDRes);  // running gradient of the residual stream, updated in place
  for (int l = cfg_.L - 1; l >= 0; --l) {
    const T* x = l == 0 ? A(kEmb) : A(kRes3) + size_t(l - 1) * BT * C;
    const size_t oC = size_t(l) * BT * C, oN = size_t(l) * BT;
    // MLP branch: res3 = res2 + down(swiglu(fc(rmsnorm2(res2)))), or the MoE layer's output.
    if (is_moe_layer(cfg_, l)) {  // the losses weigh BT * loss_scale, as forward added them
      zero(kDLn, BT * C);
      moe_backward(ops, moe_layer_config(cfg_), moe_weights(params(), l), moe_weights(grads(), l), A(kLn2) + oC,
                   dres, A(kDLn), int(BT), C, moe_acts_[size_t(l / cfg_.moe_layer_freq)],
                   double(loss_scale) * double(BT));
    } else {
      const size_t d = size_t(dense_layer_index(cfg_, l));
      T* dsw = A(kDBig2);
      zero(kDBig2, BT * F);
      ops.matmul_backward(dsw, G(fcprojw) + d * C * F, nullptr, dres, A(kSwiglu) + size_t(l) * BT * F,
                          P(fcprojw) + d * C * F, int(BT), F, C);
      T* dfch = A(kDBig);
      T* fch = A(kFch) + size_t(l) * BT * 2 * F;
      zero(kDBig, BT * 2 * F);
      ops.swiglu_backward(dfch, fch, dsw, int(BT), F);
      zero(kDLn, BT * C);
      ops.matmul_backward(A(kDLn), G(fcw) + d * 2 * F * C, nullptr, dfch, A(kLn2) + oC, P(fcw) + d * 2 * F * C,
                          int(BT), C, 2 * F);
    }
    ops.rmsnorm_backward(dres, G(ln2w) + size_t(l) * C, A(kDLn), A(kRes2) + oC, P(ln2w) + size_t(l) * C,
                         A(kLn2Rstd) + oN, int(BT), C);
    // Attention branch: res2 = x + attproj(attention(rope(qkv(rmsnorm1(x))))).
    T* datty = A(kDBig2);
    zero(kDBig2, BT * C);
    ops.matmul_backward(datty, G(attprojw) + size_t(l) * C * C, nullptr, dres, A(kAtty) + oC,
                        P(attprojw) + size_t(l) * C * C, int(BT), C, C);
    T* dqkv = A(kDBig);
    zero(kDBig, BT * W);
    ops.gqa_attention_backward(dqkv, A(kDAttScratch), datty, A(kQkv) + size_t(l) * BT * W,
                               A(kAtt) + size_t(l) * B * NH * Tn * Tn, B, Tn, NH, KV, hs);
    ops.rope_backward(dqkv, B, Tn, NH, KV, hs, 0, cfg_.rope_theta);
    zero(kDLn, BT * C);
    ops.matmul_backward(A(kDLn), G(qkvw) + size_t(l) * W * C, nullptr, dqkv, A(kLn1) + oC,
                        P(qkvw) + size_t(l) * W * C, int(BT), C, W);
    ops.rmsnorm_backward(dres, G(ln1w) + size_t(l) * C, A(kDLn), x, P(ln1w) + size_t(l) * C, A(kLn1Rstd) + oN,
                         int(BT), C);
  }
  ops.embedding_shard_backward(G(wte), nullptr, dres, tok, B, Tn, C, 0, V);
}

template void Gpt<float>::ensure_llama_acts(int, int);
template void Gpt<double>::ensure_llama_acts(int, int);
template void Gpt<float>::llama_forward(const int32_t*, const int32_t*, int, int);
template void Gpt<double>::llama_forward(const int32_t*, const int32_t*, int, int);
template void Gpt<float>::llama_backward(float);
template void Gpt<double>::llama_backward(double);

}  // namespace dtb
