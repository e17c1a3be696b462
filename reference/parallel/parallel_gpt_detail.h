// ParallelGpt's internals shared by its source files (parallel_gpt.cc: construction, forward;
// parallel_gpt_params.cc: the local parameter layout, initialisation, gathers;
// parallel_gpt_backward.cc: backward, whole or split into B and W; parallel_moe.cc): the
// index of each per-layer tensor, activation and scratch buffer, and the activation set of one
// (chunk, micro-batch). Not part of the interface: include it from those files only.
#pragma once
#include <vector>

#include "kernels/tensor.h"
#include "reference/parallel/parallel_gpt.h"

namespace dtb {
namespace parallel_gpt_detail {

// Per-layer parameter tensors in gpt.h's order, and the index of each in LayerParams::o.
enum { Pln1w, Pln1b, Pqkvw, Pqkvb, Pattprojw, Pattprojb, Pln2w, Pln2b, Pfcw, Pfcb, Pfcprojw, Pfcprojb };
inline const char* const kLayerNames[12] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                            "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb"};

// Activations of one (chunk, micro-batch): per-layer ones stacked over the chunk's Lc layers.
enum Act {
  kX0,  // chunk input (BT, C): the embedding's output or the received activation
  kLn1, kLn1Mean, kLn1Rstd, kQkv, kAtty, kAtt, kAttproj, kRes2, kLn2, kLn2Mean, kLn2Rstd, kFch, kFchGelu,
  kFcproj, kRes3,
  kLnf, kLnfMean, kLnfRstd, kLogits, kProbs, kLosses, kMax, kSums,  // last chunk only
  kNumActs
};
// The activations kept in the accumulation type A (LayerNorm statistics, the cross-entropy's
// max, sum-exp and per-token losses: fp32 under mixed precision, as llm.c and Megatron-LM).
inline bool is_stat(int act) {
  return act == kLn1Mean || act == kLn1Rstd || act == kLn2Mean || act == kLn2Rstd || act == kLnfMean ||
         act == kLnfRstd || act == kLosses || act == kMax || act == kSums;
}
// Backward scratch, one set per rank (backwards run one at a time).
// Sequence parallel only: sSp, the TP linears' work buffer (2 BT C: a gathered input and a
// full input gradient; the embedding's and the head's whole rows too), and sLnPart, a
// LayerNorm's partial weight and bias gradients (2 C). Zero-bubble schedules only: sZb, where
// the split passes put what they do not keep (2 C of LayerNorm weight gradients in B, R C of
// LayerNorm input gradient in W).
enum Scratch { sDRes, sDLn, sDBig, sDBig2, sDAtt, sDLogits, sDMax, sSp, sLnPart, sZb, kNumScratch };

// The output gradients a zero-bubble schedule's input pass B keeps for its weight pass W, per
// (chunk, micro-batch): per layer (stacked over the chunk's Lc layers) the residual gradient at
// fcproj (R, C), fc's output gradient (BT, 4Cl), ln2's (R, C), the residual gradient at the
// attention projection (R, C), QKV's output gradient (BT, 3Cl), ln1's (R, C); the last chunk's
// logits gradient (BT, Vl) and final LayerNorm's (R, C); the first chunk's embedding output
// gradient (BT, C).
enum Kept { wResFc, wFch, wLn2, wResAtt, wQkv, wLn1, wLogits, wLnf, wEmb, kNumKept };
// Elements between two layers' slices of a Kept buffer holding n a layer: n rounded up to
// 256 bytes, so every slice starts as aligned as the backward's scratch (cuBLASLt chooses its
// algorithm by the operands' alignment: the same alignment, the same bits as the whole backward).
template <typename T>
size_t kept_stride(size_t n) {
  const size_t a = 256 / sizeof(T);
  return (n + a - 1) / a * a;
}

}  // namespace parallel_gpt_detail

template <typename T>
struct ParallelGpt<T>::ActSet {
  int B = 0, Tn = 0;
  int Lc = 0;  // the chunk's layers (layout.pipeline_layers may make chunks unequal)
  std::vector<Tensor> a;
  Tensor tokens, targets;
  std::vector<MoeActivations<T>> moe;  // per layer of the chunk (an MoE layer's routing and rows)
  std::vector<Tensor> kept;            // zero-bubble schedules: parallel_gpt_detail::Kept, B to W
  bool input_done = false;             // B ran, W has not (zero-bubble schedules)
  T* p(int i) { return a[i].template data<T>(); }
  acc_t<T>* pa(int i) { return a[i].template data<acc_t<T>>(); }
  T* k(int i) { return kept[size_t(i)].template data<T>(); }
  int32_t* tok() { return tokens.data<int32_t>(); }
  int32_t* tgt() { return targets.data<int32_t>(); }
};

}  // namespace dtb
