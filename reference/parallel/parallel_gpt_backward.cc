// ParallelGpt's backward (reference/parallel/parallel_gpt.h): whole, as GPipe and 1F1B run it, or split
// into the input-gradient pass B and the weight-gradient pass W of a zero-bubble schedule
// (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2: B computes each op's input
// gradient and keeps its output gradient; W computes the weight gradients from the kept
// output gradients and the kept activations). B and W run the very ops of the whole backward
// with the same operands, the weight halves in the same order, so the gradients are bitwise
// those of 1F1B.
#include <string>

#include "kernels/error.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/parallel_gpt_detail.h"

namespace dtb {

using namespace parallel_gpt_detail;

template <typename T>
const T* ParallelGpt<T>::backward(int chunk, int mb, const T* dout, acc_t<T> loss_scale) {
  DTB_CHECK(!zero_bubble(), "ParallelGpt::backward: a zero-bubble layout runs backward_input and backward_weight");
  return backward_pass(chunk, mb, dout, loss_scale, false);
}

template <typename T>
const T* ParallelGpt<T>::backward_input(int chunk, int mb, const T* dout, acc_t<T> loss_scale) {
  DTB_CHECK(zero_bubble(), "ParallelGpt::backward_input: the layout's schedule does not split the backward");
  return backward_pass(chunk, mb, dout, loss_scale, true);
}

template <typename T>
const T* ParallelGpt<T>::backward_pass(int chunk, int mb, const T* dout, acc_t<T> loss_scale, bool split) {
  DTB_CHECK(chunk >= 0 && chunk < chunks(), "ParallelGpt::backward: chunk out of range");
  auto it = live_[chunk].find(mb);
  DTB_CHECK(it != live_[chunk].end() && !it->second->input_done, "ParallelGpt::backward: no forward of this micro-batch");
  ActSet& s = *it->second;
  const int B = s.B, Tn = s.Tn, C = cfg_.C, Vl = Vl_, Lc = s.Lc;
  const size_t BT = size_t(B) * Tn, R = size_t(rows(int64_t(BT)));
  ensure_scratch(B, Tn);
  auto S = [&](int i) { return scratch_[i].template data<T>(); };
  T* work = sp_ ? S(sSp) : nullptr;  // sequence parallel: the gathers' buffer
  Ops<T>& ops = *ops_;
  ParamStore<T>& st = store();
  const bool first = is_first(chunk), last = is_last(chunk);
  const int v0 = coord_.tp * Vl;
  // The wte unit's gradient is complete for this micro-batch after its last use: the
  // embedding's backward when this rank holds the first stage, else the LM head's (Llama's
  // head is a unit of its own, done after the head's backward).
  const bool head_done_at_head = !(holds_first_ && head_unit_ == wte_unit_);
  // Split (B): no weight gradient is computed or touched; the LayerNorms' go to sZb, and each
  // output gradient W needs is kept (s.k).
  T* drop = split ? S(sZb) : nullptr;
  // What B keeps for W (parallel_gpt_detail::Kept), held as activations until W; layer k's
  // slice of a buffer at k kept_stride(n).
  auto alloc = [&](int what, bool held, size_t n, int64_t layers) {
    if (held)
      s.kept[size_t(what)] =
          Tensor::empty(device_, {layers, int64_t(kept_stride<T>(n))}, dtype_of<T>(), MemCategory::activation);
  };
  auto slice = [&](int what, int layer, size_t n) { return s.k(what) + size_t(layer) * kept_stride<T>(n); };
  auto keep = [&](int what, int layer, const T* src, size_t n) {
    if (split) copy_within(ops, slice(what, layer, n), src, n);
  };
  if (split) {
    ops.zero(drop, 2 * size_t(C));
    s.kept.assign(kNumKept, Tensor());
    alloc(wLogits, last, BT * Vl, 1);  // the rest once the head's logits and probabilities are gone
  }
  T* dres = S(sDRes);  // the residual stream's gradient, replicated over TP
  if (last) {
    PartClock clock(part_times_, ops, PartTimes::kBackward, cfg_.L + 1);
    T* dlogits = split ? slice(wLogits, 0, BT * Vl) : S(sDLogits);
    head_ce_->backward(dlogits, s.p(kProbs), s.tgt(), loss_scale, int(BT));
    T* dhead = sp_ ? work : S(sDLn);  // the head input's gradient, all BT rows
    ops.zero(dhead, BT * C);
    ops.matmul_backward(dhead, split ? nullptr : st.grad(head_unit_), static_cast<T*>(nullptr), dlogits, s.p(kLnf),
                        st.param(head_unit_), int(BT), C, Vl);
    st.release_param(head_unit_);
    if (head_done_at_head && !split) st.grad_done(head_unit_);
    if (split) s.a[kLogits] = Tensor(), s.a[kProbs] = Tensor();  // W reads neither
    // The head's input is replicated; its gradient is partial over the vocabulary shards: summed
    // over TP (sequence parallel: reduce-scattered, g-bar backward, each rank its rows).
    if (sp_)
      gather_from_sequence_parallel_region<T>(Pass::backward, ops, tp_, dhead, S(sDLn), R * C, &stats_);
    else
      copy_to_tensor_parallel_region<T>(Pass::backward, ops, tp_, S(sDLn), BT * C, &stats_);
    ops.zero(dres, R * C);
    const T* xL = layer_acts(s, Lc - 1, true).res3;
    if (split) alloc(wLnf, true, R * C, 1);
    keep(wLnf, 0, S(sDLn), R * C);
    T* dlnf = split ? drop : st.grad(lnf_unit_);
    ln_backward(dres, dlnf, llama_ ? nullptr : dlnf + C, S(sDLn), xL, st.param(lnf_unit_),
                llama_ ? nullptr : s.pa(kLnfMean), s.pa(kLnfRstd), int(R));
    st.release_param(lnf_unit_);
    if (!split) st.grad_done(lnf_unit_);
  } else {
    DTB_CHECK(dout != nullptr, "ParallelGpt::backward: a chunk before the last needs its output's gradient");
    copy_within(ops, dres, dout, R * C);
  }
  if (split) {
    for (int what : {wResFc, wLn2, wResAtt, wLn1}) alloc(what, true, R * C, Lc);
    alloc(wFch, true, BT * size_t(fch_w_), Lc);
    alloc(wQkv, true, BT * size_t(qkv_w_), Lc);
    alloc(wEmb, first, BT * C, 1);
  }
  for (int k = Lc - 1; k >= 0; --k) layer_backward(s, layers_[chunk][k], k, last, split, dres, loss_scale);
  const T* result = dres;
  if (first) {
    PartClock clock(part_times_, ops, PartTimes::kBackward, 0);
    // g forward's backward is the identity: dres is the full gradient on every TP rank
    // (sequence parallel: the reduce-scatter's backward gathers the ranks' rows whole).
    const T* demb = dres;
    if (sp_) {
      reduce_scatter_to_sequence_parallel_region<T>(Pass::backward, ops, tp_, work, dres, R * C, &stats_);
      demb = work;
    }
    if (split) {
      keep(wEmb, 0, demb, BT * C);
    } else {
      embedding_backward(st.grad(wte_unit_), wpe_unit_ >= 0 ? st.grad(wpe_unit_) : nullptr, demb, s.tok(), B, Tn, v0);
      st.grad_done(wte_unit_);
      if (wpe_unit_ >= 0) st.grad_done(wpe_unit_);
    }
    result = nullptr;
  }
  if (split) {
    // The activations W does not read go now (acquire makes them again for the set's next
    // micro-batch): QKV, the attention matrix, the projections' outputs, fc's pre-GELU
    // output, the logits and probabilities. The layers' inputs and LayerNorm statistics stay.
    for (int i : {kQkv, kAtt, kAttproj, kFch, kFcproj}) s.a[size_t(i)] = Tensor();
    s.input_done = true;
  } else {
    pool_[chunk].push_back(std::move(it->second));
    live_[chunk].erase(it);
  }
  return result;
}

template <typename T>
void ParallelGpt<T>::layer_backward(ActSet& s, const LayerParams& lp, int k, bool last, bool split, T* dres,
                                    acc_t<T> loss_scale) {
  const int B = s.B, Tn = s.Tn, C = cfg_.C;
  const size_t BT = size_t(B) * Tn, R = size_t(rows(int64_t(BT)));
  auto S = [&](int i) { return scratch_[i].template data<T>(); };
  T* work = sp_ ? S(sSp) : nullptr;
  T* drop = split ? S(sZb) : nullptr;
  Ops<T>& ops = *ops_;
  ParamStore<T>& st = store();
  auto slice = [&](int what, int layer, size_t n) { return s.k(what) + size_t(layer) * kept_stride<T>(n); };
  auto keep = [&](int what, int layer, const T* src, size_t n) {
    if (split) copy_within(ops, slice(what, layer, n), src, n);
  };
  PartClock clock(part_times_, ops, PartTimes::kBackward, 1 + lp.layer);
  T* up = st.param(lp.unit);
  T* ug = split ? nullptr : st.grad(lp.unit);
  const auto absent = [&](int i) { return lp.o[i] == LayerParams::kAbsent; };  // Llama's biases
  auto W = [&](int i) { return absent(i) ? nullptr : up + lp.o[i]; };
  auto D = [&](int i) { return ug && !absent(i) ? ug + lp.o[i] : nullptr; };  // linears: null in B
  auto DL = [&](int i, int half) {  // LayerNorms: sZb in B
    return absent(i) ? nullptr : ug ? ug + lp.o[i] : drop + half * C;
  };
  const LayerActs a = layer_acts(s, k, last);
  // Full recompute: the layer's forward again from its kept input, the same ops on the
  // same values, so every activation is bitwise the first forward's.
  if (recompute_ == Recompute::full) layer_forward(a, up, lp, B, Tn, lp.moe ? &s.moe[size_t(k)] : nullptr, true);
  if (lp.moe) {  // its losses weigh BT * loss_scale, as forward added them
    ops.zero(S(sDLn), R * C);
    moe_ffn_backward(s.moe[size_t(k)], lp, a, up, ug, int(BT), dres, S(sDLn), double(loss_scale) * double(BT));
    // Full recompute keeps no MoE activations: the recomputed ones go with this layer's backward.
    if (recompute_ == Recompute::full) s.moe[size_t(k)] = MoeActivations<T>{};
  } else {
    // MLP branch; g backward (fcproj's input gradient) is the identity, f backward (fc's)
    // sums over TP.
    T* dfchg = S(sDBig);
    const size_t nfch = BT * size_t(fch_w_);
    T* dfch = split ? slice(wFch, k, nfch) : S(sDBig2);
    keep(wResFc, k, dres, R * C);
    fcproj_->backward(dfchg, dres, a.fchg, int(BT), W(Pfcprojw), D(Pfcprojw), D(Pfcprojb), work,
                      fp8_slot(lp.layer, kFp8Fcproj));
    ops.zero(dfch, nfch);
    if (llama_)
      ops.swiglu_backward(dfch, a.fch, dfchg, int(BT), fchg_w_);
    else
      ops.gelu_backward(dfch, a.fch, dfchg, nfch);
    fc_->backward(S(sDLn), dfch, a.ln2, int(BT), W(Pfcw), D(Pfcw), D(Pfcb), work, fp8_slot(lp.layer, kFp8Fc));
  }
  keep(wLn2, k, S(sDLn), R * C);
  ln_backward(dres, DL(Pln2w, 0), DL(Pln2b, 1), S(sDLn), a.res2, W(Pln2w), a.ln2_mean, a.ln2_rstd, int(R));
  // Attention branch.
  T* datty = S(sDBig2);
  keep(wResAtt, k, dres, R * C);
  attproj_->backward(datty, dres, a.atty, int(BT), W(Pattprojw), D(Pattprojw), D(Pattprojb), work,
                     fp8_slot(lp.layer, kFp8Attproj));
  const size_t nqkv = BT * size_t(qkv_w_);
  T* dqkv = split ? slice(wQkv, k, nqkv) : S(sDBig);
  // Selective recompute: the attention core's softmax again from the kept qkv (its output
  // into dqkv's buffer before that is zeroed; the kept atty is not touched).
  // (Context parallel: the log-sum-exp again, the CP group's ranks each in the same slot.)
  if (recompute_ == Recompute::selective) attention_forward(dqkv, a.att, a.qkv, B, Tn);
  ops.zero(dqkv, nqkv);
  attention_backward(dqkv, S(sDAtt), datty, a.qkv, a.atty, a.att, B, Tn);
  if (llama_) rope(dqkv, B, Tn, true);  // to the gradient of QKV's output, before the rotation
  // A KV head shared over TP ranks: this micro-batch's weight gradient apart, its k and v rows summed.
  T* dqkvw = kv_share_ > 1 && D(Pqkvw) ? kv_grad_.template data<T>() : D(Pqkvw);
  if (dqkvw != D(Pqkvw)) ops.zero(dqkvw, size_t(qkv_w_) * C);
  qkv_->backward(S(sDLn), dqkv, a.ln1, int(BT), W(Pqkvw), dqkvw, D(Pqkvb), work, fp8_slot(lp.layer, kFp8Qkv));
  if (dqkvw != D(Pqkvw)) add_qkv_grad(D(Pqkvw), dqkvw);
  keep(wLn1, k, S(sDLn), R * C);
  ln_backward(dres, DL(Pln1w, 0), DL(Pln1b, 1), S(sDLn), a.x, W(Pln1w), a.ln1_mean, a.ln1_rstd, int(R));
  st.release_param(lp.unit);
  if (!split) st.grad_done(lp.unit);
}

template <typename T>
void ParallelGpt<T>::backward_weight(int chunk, int mb) {
  DTB_CHECK(chunk >= 0 && chunk < chunks(), "ParallelGpt::backward_weight: chunk out of range");
  auto it = live_[chunk].find(mb);
  DTB_CHECK(it != live_[chunk].end() && it->second->input_done,
            "ParallelGpt::backward_weight: no input-gradient pass of this micro-batch");
  ActSet& s = *it->second;
  const int B = s.B, Tn = s.Tn, C = cfg_.C, Vl = Vl_, Lc = s.Lc;
  const size_t BT = size_t(B) * Tn, R = size_t(rows(int64_t(BT)));
  ensure_scratch(B, Tn);
  Ops<T>& ops = *ops_;
  ParamStore<T>& st = store();
  const bool first = is_first(chunk), last = is_last(chunk);
  const bool head_done_at_head = !(holds_first_ && head_unit_ == wte_unit_);
  const int v0 = coord_.tp * Vl;
  // The weight halves in the whole backward's order; a LayerNorm's input gradient (not wanted
  // here) goes to sZb. No linear reads its weight: only the LayerNorms' parameters are asked for.
  T* drop = scratch_[sZb].template data<T>() + 2 * size_t(C);
  auto ln_weight = [&](T* dw, T* db, const T* dout, const T* inp, const T* w, const acc_t<T>* mean,
                       const acc_t<T>* rstd) {
    ops.zero(drop, R * C);
    if (llama_)
      ops.rmsnorm_backward(drop, dw, dout, inp, w, rstd, int(R), C);
    else
      ops.layernorm_backward(drop, dw, db, dout, inp, w, mean, rstd, int(R), C);
  };
  if (last) {
    PartClock clock(part_times_, ops, PartTimes::kWeight, cfg_.L + 1);
    ops.matmul_backward(static_cast<T*>(nullptr), st.grad(head_unit_), static_cast<T*>(nullptr), s.k(wLogits),
                        s.p(kLnf), static_cast<const T*>(nullptr), int(BT), C, Vl);
    if (head_done_at_head) st.grad_done(head_unit_);
    T* dlnf = st.grad(lnf_unit_);
    ln_weight(dlnf, llama_ ? nullptr : dlnf + C, s.k(wLnf), layer_acts(s, Lc - 1, true).res3, st.param(lnf_unit_),
              llama_ ? nullptr : s.pa(kLnfMean), s.pa(kLnfRstd));
    st.release_param(lnf_unit_);
    st.grad_done(lnf_unit_);
  }
  for (int k = Lc - 1; k >= 0; --k) {
    const LayerParams& lp = layers_[chunk][k];
    PartClock clock(part_times_, ops, PartTimes::kWeight, 1 + lp.layer);
    const T* up = st.param(lp.unit);
    T* ug = st.grad(lp.unit);
    const auto absent = [&](int i) { return lp.o[i] == LayerParams::kAbsent; };  // Llama's biases
    auto W = [&](int i) { return absent(i) ? nullptr : up + lp.o[i]; };
    auto D = [&](int i) { return absent(i) ? nullptr : ug + lp.o[i]; };
    auto K = [&](int what, size_t n) { return s.k(what) + size_t(k) * kept_stride<T>(n); };
    const LayerActs a = layer_acts(s, k, last);
    const T* none = nullptr;
    const int l = lp.layer;
    fcproj_->backward(nullptr, K(wResFc, R * C), a.fchg, int(BT), none, D(Pfcprojw), D(Pfcprojb), nullptr,
                      fp8_slot(l, kFp8Fcproj));
    fc_->backward(nullptr, K(wFch, BT * size_t(fch_w_)), a.ln2, int(BT), none, D(Pfcw), D(Pfcb), nullptr,
                  fp8_slot(l, kFp8Fc));
    ln_weight(D(Pln2w), D(Pln2b), K(wLn2, R * C), a.res2, W(Pln2w), a.ln2_mean, a.ln2_rstd);
    attproj_->backward(nullptr, K(wResAtt, R * C), a.atty, int(BT), none, D(Pattprojw), D(Pattprojb), nullptr,
                       fp8_slot(l, kFp8Attproj));
    T* dqkvw = kv_share_ > 1 ? kv_grad_.template data<T>() : D(Pqkvw);
    if (kv_share_ > 1) ops.zero(dqkvw, size_t(qkv_w_) * C);
    qkv_->backward(nullptr, K(wQkv, BT * size_t(qkv_w_)), a.ln1, int(BT), none, dqkvw, D(Pqkvb), nullptr,
                   fp8_slot(l, kFp8Qkv));
    if (kv_share_ > 1) add_qkv_grad(D(Pqkvw), dqkvw);
    ln_weight(D(Pln1w), D(Pln1b), K(wLn1, R * C), a.x, W(Pln1w), a.ln1_mean, a.ln1_rstd);
    st.release_param(lp.unit);
    st.grad_done(lp.unit);
  }
  if (first) {
    PartClock clock(part_times_, ops, PartTimes::kWeight, 0);
    embedding_backward(st.grad(wte_unit_), wpe_unit_ >= 0 ? st.grad(wpe_unit_) : nullptr, s.k(wEmb), s.tok(), B, Tn,
                       v0);
    st.grad_done(wte_unit_);
    if (wpe_unit_ >= 0) st.grad_done(wpe_unit_);
  }
  s.input_done = false;
  s.kept.clear();
  pool_[chunk].push_back(std::move(it->second));
  live_[chunk].erase(it);
}

template <typename T>
void ParallelGpt<T>::embedding_backward(T* dwte, T* dwpe, const T* demb, const int32_t* tok, int B, int Tn, int v0) {
  Ops<T>& ops = *ops_;
  const int C = cfg_.C;
  if (!cp_ || !dwpe) {  // (Llama: no position table)
    ops.embedding_shard_backward(dwte, dwpe, demb, tok, B, Tn, C, v0, v0 + Vl_);
    return;
  }
  // Context parallel: wpe's gradient rows at this rank's global positions, taken out, accumulated
  // into (the same additions in the same order as on one rank's rows) and put back.
  const CpSplit split = cp_split(Tn);
  const size_t Tc = size_t(split.chunk_len()), n = Tc * size_t(C);
  Tensor rows = Tensor::empty(device_, {Tn, C}, dtype_of<T>(), MemCategory::workspace);
  T* local = rows.data<T>();
  for (int j = 0; j < 2; ++j) copy_within(ops, local + j * n, dwpe + size_t(split.chunk(j)) * n, n);
  ops.embedding_shard_backward(dwte, local, demb, tok, B, Tn, C, v0, v0 + Vl_);
  for (int j = 0; j < 2; ++j) copy_within(ops, dwpe + size_t(split.chunk(j)) * n, local + j * n, n);
}

template <typename T>
void ParallelGpt<T>::ln_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                                 const acc_t<T>* mean, const acc_t<T>* rstd, int R) {
  Ops<T>& ops = *ops_;
  const int C = cfg_.C;
  auto norm_backward = [&](T* dweight, T* dbias) {
    if (llama_)
      ops.rmsnorm_backward(dinp, dweight, dout, inp, w, rstd, R, C);
    else
      ops.layernorm_backward(dinp, dweight, dbias, dout, inp, w, mean, rstd, R, C);
  };
  if (!sp_) {
    norm_backward(dw, db);
    return;
  }
  // Each TP rank's rows give part of the weight and bias gradients: their sum over TP is the
  // gradient (Megatron-LM #1446 is this sum left out), accumulated into dw and db (an RMSNorm:
  // its weight's only).
  const size_t n = llama_ ? size_t(C) : 2 * size_t(C);
  T* part = scratch_[sLnPart].template data<T>();
  ops.zero(part, n);
  norm_backward(part, llama_ ? nullptr : part + C);
  sum_over_tensor_parallel<T>(ops, tp_, part, n, &stats_);
  ops.residual_forward(dw, dw, part, size_t(C));
  if (!llama_) ops.residual_forward(db, db, part + C, size_t(C));
}

template <typename T>
void ParallelGpt<T>::add_qkv_grad(T* dw, T* dqkvw) {
  Ops<T>& ops = *ops_;
  const size_t C = size_t(cfg_.C), hs = C / size_t(cfg_.NH), KV = size_t(kv_heads(cfg_));
  const size_t q = size_t(NHl_) * hs * C, kv = 2 * hs * C;  // this rank's q rows; its one KV head's k and v rows
  // Each rank's k and v rows at its head's slot of a (KV, 2 hs, C) buffer, zeros elsewhere: the sum
  // over TP adds the ranks sharing each head (the zeros add exactly), the same bits on every rank.
  T* buf = kv_grad_.template data<T>() + size_t(qkv_w_) * C;
  const size_t head = size_t(coord_.tp / kv_share_);
  ops.zero(buf, KV * kv);
  copy_within(ops, buf + head * kv, dqkvw + q, kv);
  sum_over_tensor_parallel<T>(ops, tp_, buf, KV * kv, &stats_);
  copy_within(ops, dqkvw + q, buf + head * kv, kv);
  ops.residual_forward(dw, dw, dqkvw, size_t(qkv_w_) * C);
}


// The members defined here, for the types parallel_gpt.cc instantiates the class in.
#define DTB_PARALLEL_GPT_BACKWARD(T)                                                                        \
  template const T* ParallelGpt<T>::backward(int, int, const T*, acc_t<T>);                                 \
  template const T* ParallelGpt<T>::backward_input(int, int, const T*, acc_t<T>);                           \
  template const T* ParallelGpt<T>::backward_pass(int, int, const T*, acc_t<T>, bool);                      \
  template void ParallelGpt<T>::layer_backward(ActSet&, const LayerParams&, int, bool, bool, T*, acc_t<T>);  \
  template void ParallelGpt<T>::backward_weight(int, int);                                                  \
  template void ParallelGpt<T>::embedding_backward(T*, T*, const T*, const int32_t*, int, int, int);         \
  template void ParallelGpt<T>::add_qkv_grad(T*, T*);                                                       \
  template void ParallelGpt<T>::ln_backward(T*, T*, T*, const T*, const T*, const T*, const acc_t<T>*,      \
                                            const acc_t<T>*, int);
DTB_PARALLEL_GPT_BACKWARD(float)
DTB_PARALLEL_GPT_BACKWARD(double)
DTB_PARALLEL_GPT_BACKWARD(bf16)
DTB_PARALLEL_GPT_BACKWARD(fp16)
#undef DTB_PARALLEL_GPT_BACKWARD

}  // namespace dtb
