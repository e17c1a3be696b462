#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/parallel_gpt_detail.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/half_ops.h"
#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {

using namespace parallel_gpt_detail;

template <typename T>
ParallelGpt<T>::ParallelGpt(const GptConfig& cfg, const ParallelLayout& layout, int rank, Device& device,
                            Communicator& tp, Ops<T>* ops, Communicator* ep, Communicator* cp)
    : cfg_(cfg), layout_(layout), device_(device), tp_(tp), ep_(ep), cp_(layout.cp > 1 ? cp : nullptr), ops_(ops) {
  validate_gpt_config(cfg);
  // The layout validator refuses these first (validate_arch_layout); this keeps any other caller
  // from running a Llama model on a layout it cannot shard.
  if (const std::string why = llama_tp_refusal(cfg, layout.tp); !why.empty()) throw InputError(why);
  DTB_CHECK(layout.cp == 1 || (cp != nullptr && cp->size() == layout.cp && cp->rank() == grid_coord(rank, layout).cp),
            "ParallelGpt: context_parallel > 1 needs the CP group (of layout.cp ranks, this rank's CP coordinate)");
  if (layout.cp > 1 && cfg.moe.num_experts > 0)
    throw InputError("context_parallel = " + std::to_string(layout.cp) + " with an MoE model is not supported yet");
  if (cfg.moe.num_experts > 0) {
    if (cfg.moe.num_experts % layout.ep != 0)
      throw InputError("ParallelGpt: an MoE model needs expert_parallel dividing num_experts");
  }
  DTB_CHECK(layout.ep == 1 || (ep != nullptr && ep->size() == layout.ep),
            "ParallelGpt: expert_parallel > 1 needs the expert-parallel group (of layout.ep ranks)");
  DTB_CHECK(tp.size() == layout.tp, "ParallelGpt: the TP communicator's size is not layout.tp");
  DTB_CHECK(tp.rank() == grid_coord(rank, layout).tp,
            "ParallelGpt: the TP communicator's rank is not this rank's TP coordinate");
  if (cfg.NH % layout.tp || cfg.V % layout.tp ||
      (layout.pipeline_layers.empty() && cfg.L % (layout.pp * layout.virtual_stages)))
    throw InputError("ParallelGpt: layout tp " + std::to_string(layout.tp) + " pp " + std::to_string(layout.pp) +
                     " x " + std::to_string(layout.virtual_stages) + " does not divide NH " +
                     std::to_string(cfg.NH) + ", V " + std::to_string(cfg.V) + ", L " + std::to_string(cfg.L));
  if (!layout.pipeline_layers.empty())
    check_pipeline_layers(layout.pipeline_layers, int64_t(layout.pp) * layout.virtual_stages, cfg.L,
                          "ParallelGpt: pp x virtual_stages");
  if (!ops_) {
    DTB_CHECK(device.is_cpu(), "ParallelGpt on a non-CPU device needs that backend's Ops");
    owned_ops_ = make_cpu_ops<T>();
    ops_ = owned_ops_.get();
  }
  coord_ = grid_coord(rank, layout);
  const int v = layout.virtual_stages, C = cfg.C, tpn = layout.tp;
  Cl_ = C / tpn;
  NHl_ = cfg.NH / tpn;
  Vl_ = cfg.V / tpn;
  sp_ = layout.sequence_parallel;
  llama_ = is_llama(cfg);
  DTB_CHECK(!sp_ || (tpn > 1 && cfg.moe.num_experts == 0),
            "ParallelGpt: sequence_parallel on a layout validate_layout refuses");
  const int hs = C / cfg.NH, KV = kv_heads(cfg), F = llama_ ? ffn_hidden(cfg) : 4 * C;
  // GPT-2: KV = NH, so KVl = NHl. Llama: tp divides KV, or KV divides tp (llama_tp_refusal).
  KVl_ = KV % tpn == 0 ? KV / tpn : 1;
  kv_share_ = KV % tpn == 0 ? 1 : tpn / KV;
  qkv_w_ = (NHl_ + 2 * KVl_) * hs;
  fch_w_ = llama_ ? 2 * (F / tpn) : 4 * Cl_;
  fchg_w_ = llama_ ? F / tpn : 4 * Cl_;
  // NH % tp == 0 and C % NH == 0, so tp divides C, 3C and 4C (Llama: F, by llama_tp_refusal); the
  // QKV layer's full width is tp x the local one (more than (NH + 2 KV) hs when KV heads are shared).
  qkv_ = std::make_unique<ColumnParallelLinear<T>>(*ops_, tp, "qkv", C, tpn * qkv_w_, &stats_, sp_);
  // The row-parallel projections: with tp = 1 the bias inside the GEMM, exactly as gpt.cc.
  attproj_ =
      std::make_unique<RowParallelLinear<T>>(*ops_, tp, "attproj", C, C, &stats_, BiasAtTp1::in_gemm, sp_);
  fc_ = std::make_unique<ColumnParallelLinear<T>>(*ops_, tp, "fc", C, tpn * fch_w_, &stats_, sp_);
  fcproj_ = std::make_unique<RowParallelLinear<T>>(*ops_, tp, "fcproj", F, C, &stats_, BiasAtTp1::in_gemm, sp_);
  head_ce_ = std::make_unique<VocabParallelCrossEntropy<T>>(*ops_, tp, cfg.V, &stats_);
  if (kv_share_ > 1)
    kv_grad_ = Tensor::empty(device, {int64_t(qkv_w_ + 2 * KV * hs) * C}, dtype_of<T>(), MemCategory::workspace);

  // The local flat layout, unit by unit: wte shard, wpe, the chunks' layers, final LayerNorm
  // (Llama: wte, the layers, the final RMSNorm, the head).
  std::map<std::string, size_t> full;  // full-buffer offset of each tensor
  for (const auto& t : gpt_param_layout(cfg)) full[t.name] = t.offset;
  bool holds_last = false;
  for (int c = 0; c < v; ++c) holds_first_ = holds_first_ || is_first(c), holds_last = holds_last || is_last(c);
  const LocalTensor::Run vocab_shard{size_t(coord_.tp) * Vl_ * C, 0, size_t(Vl_) * C};  // rows [r Vl, (r+1) Vl)
  if (holds_first_ || (holds_last && !llama_)) {
    wte_unit_ = open_unit("wte");
    add_tensor("wte", -1, {{full["wte"] + vocab_shard.global, 0, vocab_shard.n}}, false);
    // The tied copy on the last stage is not the owner when the first stage is elsewhere.
    tensors_.back().owner = tensors_.back().owner && (holds_first_ || layout.pp == 1);
    tensors_.back().primary = tensors_.back().primary && (holds_first_ || layout.pp == 1);
    close_unit();
  }
  if (holds_first_ && !llama_) {
    wpe_unit_ = open_unit("wpe");
    add_tensor("wpe", -1, {{full["wpe"], 0, size_t(cfg.T) * C}}, true);
    close_unit();
  }
  layers_.resize(v);
  const std::vector<int> per_stage = stage_layers(layout, cfg.L);
  for (int c = 0; c < v; ++c)
    for (int k = 0; k < per_stage[size_t(virtual_stage(c))]; ++k) add_layer(c, k, full);
  if (holds_last) {
    lnf_unit_ = open_unit("lnf");
    add_tensor("lnfw", -1, {{full["lnfw"], 0, size_t(C)}}, true);
    if (!llama_) add_tensor("lnfb", -1, {{full["lnfb"], 0, size_t(C)}}, true);
    close_unit();
    head_unit_ = wte_unit_;
    if (llama_) {
      head_unit_ = open_unit("lmhead");
      add_tensor("lmheadw", -1, {{full["lmheadw"] + vocab_shard.global, 0, vocab_shard.n}}, false);
      close_unit();
    }
  }
  live_.resize(v);
  if (cfg.moe.num_experts > 0) reset_moe_stats();  // the routing counts' shape
  pool_.resize(v);
}

template <typename T>
ParallelGpt<T>::PartClock::PartClock(PartTimes* t, Ops<T>& ops, int pass, int part)
    : t(t), ops(ops), pass(pass), part(part) {
  if (!t) return;
  ops.synchronize();
  t0 = now_seconds();
}

template <typename T>
ParallelGpt<T>::PartClock::~PartClock() {
  if (!t) return;
  ops.synchronize();
  t->seconds[pass][size_t(part)] += now_seconds() - t0;
}

template <typename T>
ParallelGpt<T>::~ParallelGpt() = default;

template <typename T>
typename ParallelGpt<T>::ActSet& ParallelGpt<T>::acquire(int chunk, int mb, int B, int Tn) {
  DTB_CHECK(!live_[chunk].count(mb), "ParallelGpt: micro-batch already in flight in this chunk");
  std::unique_ptr<ActSet> s;
  auto& pool = pool_[chunk];
  for (auto it = pool.begin(); it != pool.end(); ++it)
    if ((*it)->B == B && (*it)->Tn == Tn) {
      s = std::move(*it);
      pool.erase(it);
      break;
    }
  const bool fresh = !s;
  if (fresh) {
    s = std::make_unique<ActSet>();
    s->B = B;
    s->Tn = Tn;
    s->Lc = chunk_layers(chunk);
    s->a.resize(kNumActs);
  }
  if (fresh || zero_bubble()) {  // a pooled set is whole unless a zero-bubble B freed some
    const int64_t b = B, t = Tn, C = cfg_.C, Cl = Cl_, NH = NHl_, V = Vl_, Wq = qkv_w_, F1 = fch_w_, Fa = fchg_w_;
    const int64_t r = rows(b * t);  // the residual stream's rows here (sequence parallel: BT / tp)
    const bool last = is_last(chunk), full = recompute_ == Recompute::full;
    // Layers' stacks: none keeps every activation of every layer; selective all but the
    // attention matrix; full only each layer's input (x0, then res3 of the layer before)
    // and, in the last chunk, the last layer's output for the head.
    const int64_t Lc = chunk_layers(chunk), L = full ? 0 : Lc, La = recompute_ == Recompute::none ? Lc : 0;
    const int64_t Lres = full ? Lc - 1 + (last ? 1 : 0) : Lc;
    const int64_t Lm = llama_ ? 0 : L, m = llama_ ? 0 : r;  // LayerNorm means (an RMSNorm has none)
    // Sequence parallel: the residual stream's activations and LayerNorm statistics hold r
    // rows; the final LayerNorm's output is gathered whole for the head (kLnf, (BT, C)).
    const std::vector<std::vector<int64_t>> shapes = {
        {r, C},
        {L, r, C}, {Lm, r}, {L, r}, {L, b, t, Wq}, {L, b, t, Cl},
        cp_ ? std::vector<int64_t>{La, b, t, NH * int64_t(kLseT)} : std::vector<int64_t>{La, b, NH, t, t}, {L, r, C},
        {L, r, C}, {L, r, C}, {Lm, r}, {L, r}, {L, b, t, F1}, {L, b, t, Fa}, {L, r, C},
        {Lres, r, C},
        {b, t, C}, {m}, {r}, {b, t, V}, {b, t, V}, {b, t}, {b, t}, {2, b, t}};
    // Every activation a fresh set holds; a pooled one may lack those a zero-bubble B freed.
    for (int i = 0; i < kNumActs; ++i) {
      const bool skip = (i >= kLnf && !last) || shapes[i][0] == 0;
      const DType dt = is_stat(i) ? dtype_of<acc_t<T>>() : dtype_of<T>();
      if (!skip && !s->a[size_t(i)].defined())
        s->a[size_t(i)] = Tensor::empty(device_, shapes[i], dt, MemCategory::activation);
    }
  }
  if (fresh) {
    const int64_t b = B, t = Tn;
    s->moe.resize(size_t(chunk_layers(chunk)));
    s->tokens = Tensor::empty(device_, {b, t}, DType::i32, MemCategory::activation);
    s->targets = Tensor::empty(device_, {b, t}, DType::i32, MemCategory::activation);
  }
  ActSet& ref = *s;
  live_[chunk][mb] = std::move(s);
  return ref;
}

template <typename T>
void ParallelGpt<T>::ensure_scratch(int B, int Tn) {
  if (B == sB_ && Tn == sT_) return;
  scratch_.clear();
  const int64_t b = B, t = Tn, C = cfg_.C, NH = NHl_, V = Vl_, r = rows(b * t);
  const int64_t Wq = qkv_w_, F1 = fch_w_, Fa = fchg_w_, m = llama_ ? 0 : r;
  // sDBig, sDBig2: the largest of a layer's per-rank widths (the MLP's, QKV's, the attention's Cl).
  const int64_t big = std::max({F1, Fa, Wq, int64_t(Cl_)});
  std::vector<std::vector<int64_t>> shapes = {{b, t, C},      {b, t, C}, {b, t, big}, {b, t, big},
                                              {b, NH, t, t}, {b, t, V}, {b, t},
                                              {sp_ ? 2 : 0, b, t, C}, {sp_ ? 2 : 0, C},  // sSp, sLnPart
                                              {zero_bubble() ? 1 : 0, 2 * C + r * C}};   // sZb
  // Recompute buffers after the backward scratch: selective, one attention matrix; full, one
  // layer's activations (kLn1 .. kRes3), where the forward and its recomputation write.
  if (recompute_ == Recompute::selective) shapes.push_back({b, NH, t, t});
  std::vector<DType> types(shapes.size(), dtype_of<T>());
  if (recompute_ == Recompute::full) {
    const std::vector<std::vector<int64_t>> layer = {{r, C},        {m},    {r},    {b, t, Wq},     {b, t, Cl_},
                                                     {b, NH, t, t}, {r, C}, {r, C}, {r, C},          {m},
                                                     {r},           {b, t, F1},     {b, t, Fa},     {r, C}, {r, C}};
    for (size_t i = 0; i < layer.size(); ++i) {  // kLn1 .. kRes3
      shapes.push_back(layer[i]);
      types.push_back(is_stat(kLn1 + int(i)) ? dtype_of<acc_t<T>>() : dtype_of<T>());
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    scratch_.push_back(shapes[i][0] == 0 ? Tensor() : Tensor::empty(device_, shapes[i], types[i], MemCategory::workspace));
  sB_ = B;
  sT_ = Tn;
}

template <typename T>
typename ParallelGpt<T>::LayerActs ParallelGpt<T>::layer_acts(ActSet& s, int k, bool last_chunk) {
  const size_t BT = size_t(s.B) * s.Tn, C = cfg_.C, Cl = Cl_, att = att_elems(s.B, s.Tn);
  const size_t R = size_t(rows(int64_t(BT)));  // the residual stream's rows
  LayerActs a;
  auto Rs = [&](int act) { return scratch_[kNumScratch + (act - kLn1)].template data<T>(); };
  auto RA = [&](int act) {
    const Tensor& x = scratch_[kNumScratch + (act - kLn1)];
    return x.defined() ? x.template data<acc_t<T>>() : nullptr;
  };
  if (recompute_ == Recompute::full) {  // everything in the one-layer scratch set but the kept inputs
    a.x = k == 0 ? s.p(kX0) : s.p(kRes3) + size_t(k - 1) * R * C;
    a.ln1 = Rs(kLn1), a.ln1_mean = RA(kLn1Mean), a.ln1_rstd = RA(kLn1Rstd), a.qkv = Rs(kQkv), a.atty = Rs(kAtty);
    a.att = Rs(kAtt), a.attproj = Rs(kAttproj), a.res2 = Rs(kRes2), a.ln2 = Rs(kLn2), a.ln2_mean = RA(kLn2Mean);
    a.ln2_rstd = RA(kLn2Rstd), a.fch = Rs(kFch), a.fchg = Rs(kFchGelu), a.fcproj = Rs(kFcproj);
    a.res3 = k < s.Lc - 1 || last_chunk ? s.p(kRes3) + size_t(k) * R * C : Rs(kRes3);
    return a;
  }
  const size_t oC = size_t(k) * R * C, oCl = size_t(k) * BT * Cl, oN = size_t(k) * R;
  const size_t oQkv = size_t(k) * BT * size_t(qkv_w_), oFch = size_t(k) * BT * size_t(fch_w_);
  const size_t oFchg = size_t(k) * BT * size_t(fchg_w_);
  auto PA = [&](int act, size_t off) { return s.a[size_t(act)].defined() ? s.pa(act) + off : nullptr; };
  // A zero-bubble B frees what W does not read: null for those.
  auto P = [&](int act, size_t off) { return s.a[size_t(act)].defined() ? s.p(act) + off : nullptr; };
  a.x = k == 0 ? s.p(kX0) : s.p(kRes3) + size_t(k - 1) * R * C;
  a.ln1 = s.p(kLn1) + oC, a.ln1_mean = PA(kLn1Mean, oN), a.ln1_rstd = s.pa(kLn1Rstd) + oN;
  a.qkv = P(kQkv, oQkv), a.atty = s.p(kAtty) + oCl;
  a.att = recompute_ == Recompute::selective ? scratch_[kNumScratch].template data<T>() : P(kAtt, size_t(k) * att);
  a.attproj = P(kAttproj, oC), a.res2 = s.p(kRes2) + oC, a.ln2 = s.p(kLn2) + oC;
  a.ln2_mean = PA(kLn2Mean, oN), a.ln2_rstd = s.pa(kLn2Rstd) + oN;
  a.fch = P(kFch, oFch), a.fchg = s.p(kFchGelu) + oFchg, a.fcproj = P(kFcproj, oC);
  a.res3 = s.p(kRes3) + oC;
  return a;
}

template <typename T>
void ParallelGpt<T>::layer_forward(const LayerActs& a, const T* up, const LayerParams& lp, int B, int Tn,
                                   MoeActivations<T>* ma, bool recomputing) {
  Ops<T>& ops = *ops_;
  const int C = cfg_.C;
  const size_t BT = size_t(B) * Tn, R = size_t(rows(int64_t(BT)));
  T* work = sp_ ? scratch_[sSp].template data<T>() : nullptr;  // sequence parallel: the gathers' buffer
  auto W = [&](int i) { return lp.o[i] == LayerParams::kAbsent ? nullptr : up + lp.o[i]; };
  norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, W(Pln1w), W(Pln1b), int(R));
  // Column-parallel QKV on the replicated ln1 (f forward is the identity; sequence parallel:
  // ln1's blocks gathered first); Llama's rotary embeddings on its q and k.
  qkv_->forward(a.qkv, a.ln1, int(BT), W(Pqkvw), W(Pqkvb), work, fp8_slot(lp.layer, kFp8Qkv));
  if (llama_) rope(a.qkv, B, Tn, false);
  attention_forward(a.atty, a.att, a.qkv, B, Tn);
  // Row-parallel projection: partial sums, g forward (sequence parallel: a reduce-scatter),
  // then the bias once (tp = 1: the bias inside the GEMM, exactly as gpt.cc).
  attproj_->forward(a.attproj, a.atty, int(BT), W(Pattprojw), W(Pattprojb), work, fp8_slot(lp.layer, kFp8Attproj));
  ops.residual_forward(a.res2, a.x, a.attproj, R * C);
  norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, W(Pln2w), W(Pln2b), int(R));
  if (lp.moe) {
    moe_ffn_forward(*ma, lp, a, up, int(BT), Tn, recomputing);
  } else {
    fc_->forward(a.fch, a.ln2, int(BT), W(Pfcw), W(Pfcb), work, fp8_slot(lp.layer, kFp8Fc));
    if (llama_)
      ops.swiglu_forward(a.fchg, a.fch, int(BT), fchg_w_);  // this rank's gate | up rows
    else
      ops.gelu_forward(a.fchg, a.fch, BT * size_t(fchg_w_));
    fcproj_->forward(a.fcproj, a.fchg, int(BT), W(Pfcprojw), W(Pfcprojb), work, fp8_slot(lp.layer, kFp8Fcproj));
  }
  ops.residual_forward(a.res3, a.res2, a.fcproj, R * C);
}

template <typename T>
const T* ParallelGpt<T>::forward(int chunk, int mb, const int32_t* tokens, const int32_t* targets, const T* x,
                                 int B, int Tn, double* loss_sum) {
  DTB_CHECK(chunk >= 0 && chunk < chunks(), "ParallelGpt::forward: chunk out of range");
  DTB_CHECK(B > 0 && Tn > 0 && Tn <= cfg_.T, "ParallelGpt::forward: sequence length out of range");
  const int C = cfg_.C, Vl = Vl_;
  const size_t BT = size_t(B) * Tn;
  DTB_CHECK(!sp_ || BT % size_t(layout_.tp) == 0, "ParallelGpt::forward: sequence parallel needs BT divisible by tp");
  const size_t R = size_t(rows(int64_t(BT)));
  const bool first = is_first(chunk), last = is_last(chunk);
  ActSet& s = acquire(chunk, mb, B, Tn);
  ensure_scratch(B, Tn);  // the recompute buffers are written in forward too
  T* work = sp_ ? scratch_[sSp].template data<T>() : nullptr;
  Ops<T>& ops = *ops_;
  ParamStore<T>& st = store();
  const int v0 = coord_.tp * Vl, v1 = v0 + Vl;
  auto check_ids = [&](const int32_t* ids) {
    for (size_t i = 0; i < BT; ++i) DTB_CHECK(ids[i] >= 0 && ids[i] < cfg_.V, "forward: token id out of [0, V)");
  };
  if (first) {
    PartClock clock(part_times_, ops, PartTimes::kForward, 0);
    check_ids(tokens);
    ops.copy_from_host(s.tok(), tokens, BT * sizeof(int32_t));
    // Vocabulary-parallel embedding: rows outside the shard are 0, wpe added on TP rank 0,
    // then g (all-reduce SUM): each sum has one non-zero term per input, so it is exact.
    // Sequence parallel: the sum reduce-scattered instead, each TP rank keeping its rows.
    T* emb = sp_ ? work : s.p(kX0);
    // (Llama: no position table.)
    const bool wpe_here = coord_.tp == 0 && wpe_unit_ >= 0;
    Tensor wpe_rows;  // context parallel: wpe's rows at this rank's global positions
    if (cp_ && wpe_here) wpe_rows = Tensor::empty(device_, {Tn, C}, dtype_of<T>(), MemCategory::workspace);
    const T* wpe = wpe_here ? local_wpe(st.param(wpe_unit_), cp_ ? wpe_rows.data<T>() : nullptr, Tn) : nullptr;
    ops.embedding_shard_forward(emb, s.tok(), st.param(wte_unit_), wpe, B, Tn, C, v0, v1);
    st.release_param(wte_unit_);
    if (wpe_here) st.release_param(wpe_unit_);
    if (sp_)
      reduce_scatter_to_sequence_parallel_region<T>(Pass::forward, ops, tp_, emb, s.p(kX0), R * C, &stats_);
    else
      reduce_from_tensor_parallel_region<T>(Pass::forward, ops, tp_, s.p(kX0), BT * C, &stats_);
  } else {
    DTB_CHECK(x != nullptr, "ParallelGpt::forward: a chunk after the first needs its input");
    copy_within(ops, s.p(kX0), x, R * C);
  }
  if (last) {
    check_ids(targets);
    ops.copy_from_host(s.tgt(), targets, BT * sizeof(int32_t));
  }
  moe_loss_ = 0;
  const int Lc = chunk_layers(chunk);
  for (int k = 0; k < Lc; ++k) {
    const LayerParams& lp = layers_[chunk][k];
    PartClock clock(part_times_, ops, PartTimes::kForward, 1 + lp.layer);
    const T* up = st.param(lp.unit);
    layer_forward(layer_acts(s, k, last), up, lp, B, Tn, &s.moe[size_t(k)]);
    st.release_param(lp.unit);
    if (recompute_ == Recompute::full && lp.moe) s.moe[size_t(k)] = MoeActivations<T>{};  // backward routes again
  }
  const T* out = layer_acts(s, Lc - 1, last).res3;  // full recompute, not last: in scratch
  if (!last) {
    if (loss_sum) *loss_sum = moe_loss_;
    return out;
  }

  // LM head on the wte shard (Llama: the lmheadw shard); vocabulary-parallel cross-entropy.
  PartClock clock(part_times_, ops, PartTimes::kForward, cfg_.L + 1);
  const T* lnf = st.param(lnf_unit_);
  // Sequence parallel: this rank's rows into its block of kLnf, gathered in place (g-bar).
  T* lnf_mine = s.p(kLnf) + (sp_ ? size_t(coord_.tp) * R * C : 0);
  norm_forward(lnf_mine, llama_ ? nullptr : s.pa(kLnfMean), s.pa(kLnfRstd), out, lnf, llama_ ? nullptr : lnf + C,
               int(R));
  st.release_param(lnf_unit_);
  if (sp_) gather_from_sequence_parallel_region<T>(Pass::forward, ops, tp_, s.p(kLnf), lnf_mine, R * C, &stats_);
  ops.matmul_forward(s.p(kLogits), s.p(kLnf), st.param(head_unit_), static_cast<const T*>(nullptr), int(BT), C, Vl);
  st.release_param(head_unit_);
  // The max and the sum-exp travel in A (fp32 under mixed precision).
  head_ce_->forward(s.pa(kLosses), s.p(kProbs), s.p(kLogits), s.pa(kMax), s.pa(kSums), s.tgt(), int(BT));
  using A = acc_t<T>;
  std::vector<A> losses(BT);
  ops.copy_to_host(losses.data(), s.pa(kLosses), BT * sizeof(A));
  double sum = 0;
  for (A l : losses) sum += double(l);
  if (loss_sum) *loss_sum = sum + moe_loss_;
  return nullptr;
}

template <typename T>
void ParallelGpt<T>::norm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* w, const T* b, int R) {
  if (llama_)
    ops_->rmsnorm_forward(out, rstd, inp, w, acc_t<T>(cfg_.norm_eps), R, cfg_.C);
  else
    ops_->layernorm_forward(out, mean, rstd, inp, w, b, R, cfg_.C);
}

template <typename T>
void ParallelGpt<T>::rope(T* qkv, int B, int Tn, bool backward) {
  const int hs = cfg_.C / cfg_.NH;
  auto apply = [&](T* x, int b, int n, int pos0) {
    if (backward)
      ops_->rope_backward(x, b, n, NHl_, KVl_, hs, pos0, cfg_.rope_theta);
    else
      ops_->rope_forward(x, b, n, NHl_, KVl_, hs, pos0, cfg_.rope_theta);
  };
  if (!cp_) {
    apply(qkv, B, Tn, 0);
    return;
  }
  // Context parallel: each sequence's two local chunks at their global positions.
  const CpSplit split = cp_split(Tn);
  const int Tc = split.chunk_len();
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < 2; ++j)
      apply(qkv + (size_t(b) * Tn + size_t(j) * Tc) * size_t(qkv_w_), 1, Tc, split.global_position(j * Tc));
}

template <typename T>
const T* ParallelGpt<T>::local_wpe(const T* wpe, T* local, int Tn) {
  if (!cp_) return wpe;
  // A CP rank's rows are its two chunks, each Tc consecutive positions: two copies.
  const CpSplit split = cp_split(Tn);
  const size_t Tc = size_t(split.chunk_len()), C = size_t(cfg_.C);
  for (int j = 0; j < 2; ++j) copy_within(*ops_, local + j * Tc * C, wpe + size_t(split.chunk(j)) * Tc * C, Tc * C);
  return local;
}

template <typename T>
void ParallelGpt<T>::attention_forward(T* out, T* att, const T* qkv, int B, int Tn) {
  if (llama_ && !cp_) {  // grouped-query attention: NHl query heads on KVl KV heads
    ops_->gqa_attention_forward(out, att, qkv, B, Tn, NHl_, KVl_, cfg_.C / cfg_.NH);
    return;
  }
  if (!cp_) {
    ops_->attention_forward(out, att, qkv, B, Tn, Cl_, NHl_);
    return;
  }
  const CpAttention<T> cpa{*ops_, device_, *cp_, cp_split(Tn), parse_cp_comm_type(layout_.cp_comm_type)};
  // att: the (B, Tn, NHl) log-sum-exp in acc_t<T> (att_elems; the recompute scratch holds it too, Tn >= 2)
  context_parallel_attention_forward(cpa, out, reinterpret_cast<acc_t<T>*>(att), qkv, B, Cl_, NHl_, KVl_);
}

template <typename T>
void ParallelGpt<T>::attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* out, const T* att,
                                        int B, int Tn) {
  if (llama_ && !cp_) {
    ops_->gqa_attention_backward(dqkv, datt, dout, qkv, att, B, Tn, NHl_, KVl_, cfg_.C / cfg_.NH);
    return;
  }
  if (!cp_) {
    ops_->attention_backward(dqkv, datt, dout, qkv, att, B, Tn, Cl_, NHl_);
    return;
  }
  const CpAttention<T> cpa{*ops_, device_, *cp_, cp_split(Tn), parse_cp_comm_type(layout_.cp_comm_type)};
  context_parallel_attention_backward(cpa, dqkv, dout, qkv, out, reinterpret_cast<const acc_t<T>*>(att), B, Cl_, NHl_,
                                      KVl_);
}

template <typename T>
void ParallelGpt<T>::set_fp8(const Fp8Settings& s) {
  if (cfg_.moe.num_experts > 0)
    throw InputError("fp8: an MoE model (model.num_experts = " + std::to_string(cfg_.moe.num_experts) +
                     ") is not supported yet (its experts are not FP8 linears)");
  fp8_ = &s;
  fp8_state_.clear();
  for (int l = 0; l < cfg_.L; ++l) {
    const Fp8LinearState one(s.delayed.amax_history_len);
    fp8_state_.push_back({one, one, one, one});
  }
}

template <typename T>
std::vector<int> ParallelGpt<T>::fp8_layers() const {
  std::vector<int> held;
  if (!fp8_) return held;
  for (const auto& chunk : layers_)
    for (const LayerParams& lp : chunk) held.push_back(lp.layer);
  std::sort(held.begin(), held.end());
  return held;
}

template <typename T>
std::vector<Fp8LinearState*> ParallelGpt<T>::fp8_states() {
  std::vector<Fp8LinearState*> out;
  for (int l : fp8_layers())
    for (Fp8LinearState& st : fp8_state_[size_t(l)]) out.push_back(&st);
  return out;
}

template <typename T>
Fp8Checkpoint ParallelGpt<T>::fp8_checkpoint() {
  return fp8_ ? dtb::fp8_checkpoint(*fp8_, fp8_layers(), fp8_states()) : Fp8Checkpoint{};
}

template <typename T>
void ParallelGpt<T>::set_fp8_census(Fp8Census* census) {
  for (Fp8LinearState* st : fp8_states()) st->census = census;
}

template <typename T>
void ParallelGpt<T>::restore_fp8(const Fp8Checkpoint& c) {
  if (c.history_len > 0) fp8_restore(c, fp8_layers(), fp8_states());
}

template <typename T>
void ParallelGpt<T>::fp8_update(Communicator& dp) {
  if (!fp8_) return;
  Ops<T>& ops = *ops_;
  dtb::fp8_update(fp8_states(), *fp8_, [&](float* a, size_t n) {
    ops.synchronize();
    for (Communicator* g : {&tp_, &dp})
      if (g->size() > 1) g->all_reduce(a, a, n, DType::f32, ReduceOp::max);
  });
}

template class ParallelGpt<float>;
template class ParallelGpt<double>;
template class ParallelGpt<bf16>;
template class ParallelGpt<fp16>;

}  // namespace dtb
