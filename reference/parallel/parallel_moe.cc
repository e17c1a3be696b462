// ParallelGpt's MoE layers (reference/parallel/parallel_gpt.h): where an MoE layer's router and held
// experts sit in the rank's flat layout, and its FFN forward and backward through moe.h's
// expert-parallel dispatch. The rest of the layer (LayerNorms, attention, residuals) is the
// dense layer's, in parallel_gpt.cc.
#include "reference/parallel/parallel_gpt.h"

#include "kernels/error.h"

namespace dtb {

template <typename T>
void ParallelGpt<T>::reset_moe_stats() {
  moe_counts_.assign(size_t(num_moe_layers(cfg_)) * size_t(cfg_.moe.num_experts + 1), 0.0);
  moe_comm_ = MoeCommStats{};
}

template <typename T>
void ParallelGpt<T>::add_moe_tensors(LayerParams& lp, int l, const std::map<std::string, size_t>& full) {
  const size_t C = size_t(cfg_.C), E = size_t(cfg_.moe.num_experts), F = size_t(moe_expert_hidden(cfg_));
  const size_t mi = size_t(l / cfg_.moe_layer_freq);  // the layer's index among the MoE layers
  lp.moe_index = int(mi);
  // The router (E, C), whole on every rank, closes the layer's unit.
  lp.router = num_params_ - units_[lp.unit].begin;
  // Router and experts are replicated over TP (the layer's input is): TP rank 0 owns them.
  add_tensor("routerw", l, {{full.at("routerw") + mi * E * C, 0, E * C}}, true);
  close_unit();
  // Experts [e0, e0 + El) of the layer: this rank's expert-parallel share, a unit of its own.
  const size_t El = E / size_t(layout_.ep), e0 = size_t(ep_rank(coord_.dp, layout_)) * El;
  lp.expert_unit = open_unit("experts." + std::to_string(l));
  units_.back().expert = true;
  // GELU experts: fc (F, C), its bias, proj (C, F), its bias. SwiGLU experts (Llama,
  // moe_layer_config): fc (2F, C), an expert's gate rows and up rows together, as one rank holds
  // them, proj (C, F), no biases (their offsets kAbsent).
  const bool glu = moe_layer_config(cfg_).expert == MoeExpert::swiglu;
  const char* const names[4] = {"expfcw", "expfcb", "expprojw", "expprojb"};
  const size_t per_expert[4] = {(glu ? 2 * F : F) * C, glu ? 0 : F, C * F, glu ? 0 : C};
  for (int i = 0; i < 4; ++i) {
    lp.ex[i] = LayerParams::kAbsent;
    if (per_expert[i] == 0) continue;
    lp.ex[i] = num_params_ - units_[lp.expert_unit].begin;
    const size_t n = per_expert[i];
    add_tensor(names[i], l, {{full.at(names[i]) + (mi * E + e0) * n, 0, El * n}}, true, true);
  }
  close_unit();
}

// An MoE layer's tensors: the router in the layer's unit `layer`, the held experts in `ex`, their
// absent biases (SwiGLU experts) null.
template <typename T>
MoeWeights<T> ParallelGpt<T>::moe_weights(T* layer, T* ex, const LayerParams& lp) {
  auto at = [&](int i) { return lp.ex[i] == LayerParams::kAbsent ? nullptr : ex + lp.ex[i]; };
  return {layer + lp.router, at(0), at(1), at(2), at(3)};
}

template <typename T>
void ParallelGpt<T>::moe_ffn_forward(MoeActivations<T>& ma, const LayerParams& lp, const LayerActs& a, const T* up,
                                     int BT, int Tn, bool recomputing) {
  ParamStore<T>& st = store();
  T* ex = st.param(lp.expert_unit);
  const MoeWeights<T> w = moe_weights(const_cast<T*>(up), ex, lp);
  // Each sequence one routing group, as Gpt: every layout that keeps sequences whole routes alike.
  moe_forward(*ops_, moe_layer_config(cfg_), w, a.ln2, a.fcproj, BT, cfg_.C, ma, Tn, layout_.ep > 1 ? ep_ : nullptr,
              &moe_comm_);
  st.release_param(lp.expert_unit);
  if (recomputing) return;  // counted by the forward this recomputes
  moe_loss_ += double(BT) * (ma.routing.aux_loss + ma.routing.z_loss);
  if (coord_.tp == 0) {
    const int E = cfg_.moe.num_experts;
    double* c = moe_counts_.data() + size_t(lp.moe_index) * size_t(E + 1);
    for (int e = 0; e < E; ++e) c[e] += ma.routing.tokens_per_expert[size_t(e)];
    c[E] += ma.routing.dropped;
  }
}

template <typename T>
void ParallelGpt<T>::moe_ffn_backward(const MoeActivations<T>& ma, const LayerParams& lp, const LayerActs& a,
                                      const T* up, T* ug, int BT, const T* dres, T* dln, double loss_scale) {
  ParamStore<T>& st = store();
  T* ex = st.param(lp.expert_unit);
  T* dex = st.grad(lp.expert_unit);
  const MoeWeights<T> w = moe_weights(const_cast<T*>(up), ex, lp);
  const MoeWeights<T> dw = moe_weights(ug, dex, lp);
  moe_backward(*ops_, moe_layer_config(cfg_), w, dw, a.ln2, dres, dln, BT, cfg_.C, ma, loss_scale,
               layout_.ep > 1 ? ep_ : nullptr, &moe_comm_);
  st.release_param(lp.expert_unit);
  st.grad_done(lp.expert_unit);
}

// The members defined here, for the types parallel_gpt.cc instantiates the class in.
#define DTB_PARALLEL_MOE(T)                                                                                         \
  template void ParallelGpt<T>::reset_moe_stats();                                                                  \
  template MoeWeights<T> ParallelGpt<T>::moe_weights(T*, T*, const LayerParams&);                                   \
  template void ParallelGpt<T>::add_moe_tensors(LayerParams&, int, const std::map<std::string, size_t>&);          \
  template void ParallelGpt<T>::moe_ffn_forward(MoeActivations<T>&, const LayerParams&, const LayerActs&, const T*, \
                                                int, int, bool);                                                    \
  template void ParallelGpt<T>::moe_ffn_backward(const MoeActivations<T>&, const LayerParams&, const LayerActs&,    \
                                                 const T*, T*, int, const T*, T*, double);
DTB_PARALLEL_MOE(float)
DTB_PARALLEL_MOE(double)
DTB_PARALLEL_MOE(bf16)
DTB_PARALLEL_MOE(fp16)
#undef DTB_PARALLEL_MOE

}  // namespace dtb
