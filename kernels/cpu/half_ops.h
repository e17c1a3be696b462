// HalfCpuOps<H>: the CPU backend's mixed-precision ops for H = bf16 or fp16 storage
// (kernels/half.h), the recipe of Micikevicius et al. 2018 ("Mixed Precision Training",
// ICLR 2018) emulated on the host so the reference model runs its bf16/fp16 configurations
// without a GPU and a GPU backend has a bitwise target to compare against.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/half.h"
#include "kernels/ops.h"

namespace dtb {

/// The CPU backend over half-precision storage. The recipe is "stores H, computes in
/// fp32":
///   - every op converts its H inputs to float (exact), runs the float kernel of
///     kernels/cpu/ops.h on them (cpu::layernorm_forward<float> etc.; matmuls and the
///     attention products through OpenBLAS sgemm, so fp32 accumulation), and rounds each H
///     output once, to nearest even. An output holds round(exact-float-kernel result).
///   - an op that ACCUMULATES into an H output (the d-outputs of every backward: dinp,
///     dweight, dbias, dwte/dwpe, gelu_backward's dinp, dqkv; add_bias's out) converts the
///     current output to float, lets the float kernel accumulate into it, and rounds once:
///     a gradient buffer in H receives one rounding per op call, as a GPU GEMM with beta = 1
///     and a bf16/fp16 C does.
///   - the A = float arguments (LayerNorm mean/rstd, per-token losses, the cross-entropy
///     shard maxes and sums, dloss, the scale factor, AdamW moments, master weights) are
///     never rounded to H and are passed to the float kernels as they are: statistics and
///     losses stay in fp32, as llm.c (train_gpt2.cu) and Megatron-LM do.
/// Op semantics, shapes (B batch, T sequence, C channels, NH heads, V vocabulary, N rows),
/// accumulate-vs-write rules and preconditions are those of kernels/cpu/ops.h; the
/// preconditions stay unchecked, as there. Results are bitwise those of "convert, float
/// kernel, round" on the whole tensors: elementwise and row-independent ops run in chunks
/// (of about kChunk elements) that the float kernel treats identically, GEMMs run whole.
///
/// Specific ops:
///   - zero: every element's bits set to 0 (+0). copy_from_host / copy_to_host: memcpy of
///     bytes (both sides are host memory).
///   - scale(x, a, n): x[i] = round(float(x[i]) * a). Note fp16's range: a value scaled
///     past 65504 rounds to inf (the overflow that dynamic loss scaling detects).
///   - residual_forward: out = round(float(a) + float(b)); out may alias a or b.
///   - attention_backward: the float kernel's (B,NH,T,T) scratch is this object's; the
///     caller's H `scratch` is not touched (its contents are unspecified afterwards anyway).
///   - adamw_update(param, grad, m, v, ...) on an H param: AdamW in float on float(param)
///     with the float moments, then param rounded to H. An update below half an ulp of
///     param (between 2^-9 and 2^-8 of |param| in bf16, 2^-12 and 2^-11 in fp16) rounds
///     back to the old value and is lost, every step: Adam's step is about lr, so lr = 1e-3
///     never moves a bf16 weight of 1. Mixed precision uses adamw_update_master instead.
///   - adamw_update_master(param, master, grad, m, v, n, hp, t, grad_scale):
///     cpu::adamw_update<float> on the fp32 master from float(grad) * grad_scale (one fp32
///     product; exact when grad_scale is 1), then param[i] = round(master[i]): the master
///     accumulates the small updates the H copy cannot hold (Micikevicius et al. Sec. 3.1).
///   - the cross-entropy shard ops take and return their A maxes, sums and losses as they
///     are (only logits, probs and dlogits are H).
///   - the Llama block's ops (half_llama_ops.cc): rmsnorm's rstd and the blockwise
///     attention's lse are A, written or read as they are. rope_forward / rope_backward
///     rotate in place: the q and k heads are converted, rotated by the float kernel (its
///     cos and sin rounded from double to float) and rounded once; the v heads are not
///     written. gqa_attention_backward, attention_block_forward and _backward use float
///     scratch of this object's; the caller's H `scratch` is not touched.
///   - attention_block_forward / _backward gather the strided rows of q, k, v (and dq, dk,
///     dv) into dense float (rows, C) copies and call the float kernel with strides C: the
///     sgemm of each (b, h) then sees the same operands as on the whole strided tensors.
///   - attention_merge: out = round(the float merge of float(out), float(out2)), lse
///     merged in A; a row merged with lse2 = -inf keeps its bits.
///
/// Memory: the conversion scratch is float buffers held in this object (grown to the
/// largest call seen, reused, so no allocation per call in the steady state; a token-row
/// map for the embeddings likewise). It is host memory outside the Device accounting: the
/// CPU's cost of emulating half storage, not part of the recipe's footprint. Its size is
/// the float copy of one op's tensors: chunked ops about kChunk elements per buffer; GEMMs
/// (inp, weight, out), the embeddings (the distinct rows touched, B*T*C at most) and the
/// layernorm and rmsnorm dweight/dbias whole; the attention ops (whole-sequence, GQA and
/// blockwise) one group of batch entries (about kChunk elements, at least one entry).
/// Errors: none of its own (bad shapes are the caller's, as for CpuOps). Not thread-safe:
/// one object per rank thread, as Device.
template <typename H>
class HalfCpuOps final : public Ops<H> {
  static_assert(is_half_v<H>, "HalfCpuOps is for bf16 and fp16 storage");

 public:
  using A = acc_t<H>;  // float
  /// Elements per conversion chunk of the elementwise and row-wise ops (a chunk is at
  /// least one row).
  static constexpr size_t kChunk = size_t(1) << 16;

  std::string backend() const override { return "cpu"; }
  void zero(H* p, size_t n) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;

  void encoder_forward(H* out, const int32_t* tokens, const H* wte, const H* wpe, int B, int Tn, int C) override;
  void encoder_backward(H* dwte, H* dwpe, const H* dout, const int32_t* tokens, int B, int Tn, int C) override;
  void layernorm_forward(H* out, A* mean, A* rstd, const H* inp, const H* weight, const H* bias, int N,
                         int C) override;
  void layernorm_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight,
                          const A* mean, const A* rstd, int N, int C) override;
  void matmul_forward(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC) override;
  void matmul_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight, int N, int C,
                       int OC) override;
  void attention_forward(H* out, H* att, const H* qkv, int B, int Tn, int C, int NH) override;
  void attention_backward(H* dqkv, H* scratch, const H* dout, const H* qkv, const H* att, int B, int Tn, int C,
                          int NH) override;
  void gelu_forward(H* out, const H* inp, size_t n) override;
  void gelu_backward(H* dinp, const H* inp, const H* dout, size_t n) override;
  void residual_forward(H* out, const H* a, const H* b, size_t n) override;
  void crossentropy_forward(A* losses, H* probs, const H* logits, const int32_t* targets, int N, int V) override;
  void crossentropy_backward(H* dlogits, const H* probs, const int32_t* targets, A dloss, int N, int V) override;
  void adamw_update(H* param, const H* grad, A* m, A* v, size_t n, const AdamWParams& hp, int t) override;
  void adamw_update_master(H* param, A* master, const H* grad, A* m, A* v, size_t n, const AdamWParams& hp,
                           int t, A grad_scale = A(1)) override;
  void embedding_shard_forward(H* out, const int32_t* tokens, const H* wte_shard, const H* wpe, int B, int Tn,
                               int C, int v_begin, int v_end) override;
  void embedding_shard_backward(H* dwte_shard, H* dwpe, const H* dout, const int32_t* tokens, int B, int Tn, int C,
                                int v_begin, int v_end) override;
  void add_bias(H* out, const H* bias, int N, int OC) override;
  void scale(H* x, A a, size_t n) override;
  void crossentropy_shard_max(A* maxes, const H* logits, int N, int Vl) override;
  void crossentropy_shard_sums(A* sums, const H* logits, const A* maxes, const int32_t* targets, int N, int Vl,
                               int v_begin) override;
  void crossentropy_shard_forward(A* losses, H* probs, const H* logits, const A* maxes, const A* sums, int N,
                                  int Vl) override;
  void crossentropy_shard_backward(H* dlogits, const H* probs, const int32_t* targets, A dloss, int N, int Vl,
                                   int v_begin) override;

  // The Llama block's ops and context parallelism's blockwise attention
  // (kernels/cpu/half_llama_ops.cc), by the same recipe.
  void rmsnorm_forward(H* out, A* rstd, const H* inp, const H* weight, A eps, int N, int C) override;
  void rmsnorm_backward(H* dinp, H* dweight, const H* dout, const H* inp, const H* weight, const A* rstd, int N,
                        int C) override;
  void swiglu_forward(H* out, const H* inp, int N, int F) override;
  void swiglu_backward(H* dinp, const H* inp, const H* dout, int N, int F) override;
  void rope_forward(H* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override;
  void rope_backward(H* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override;
  void gqa_attention_forward(H* out, H* att, const H* qkv, int B, int Tn, int NH, int KV, int hs) override;
  void gqa_attention_backward(H* dqkv, H* scratch, const H* dout, const H* qkv, const H* att, int B, int Tn, int NH,
                              int KV, int hs) override;
  void attention_block_forward(H* out, A* lse, H* scratch, const H* q, int q_stride, const H* k, const H* v,
                               int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0, int kpos0) override;
  void attention_merge(H* out, A* lse, const H* out2, const A* lse2, int N, int C, int NH) override;
  void attention_block_backward(H* dq, H* dk, H* dv, H* scratch, const H* dout, const H* out, const A* lse,
                                const H* q, int q_stride, const H* k, const H* v, int kv_stride, int B, int Tq,
                                int Tk, int C, int NH, int qpos0, int kpos0) override;

  // FP8 linears (kernels/cpu/half_fp8_ops.cc): the H operands widened to float, the float FP8
  // linear of kernels/cpu/fp8_gemm.h, each H output rounded once.
  float amax(const H* x, size_t n) override;
  void fp8_matmul_forward(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC,
                          const Fp8Operand& x, const Fp8Operand& w) override;
  void fp8_matmul_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight, int N, int C,
                           int OC, const Fp8Operand& dy, const Fp8Operand& x, const Fp8Operand& w) override;

  /// Bytes of conversion scratch this object holds now (floats and token maps): for tests
  /// and for reporting the emulation's host overhead. Grows only.
  size_t scratch_bytes() const;

 private:
  static constexpr int kSlots = 8;
  /// A linear's recipe around a float kernel (the matmuls, half_ops.cc; the FP8 linears,
  /// half_fp8_ops.cc): the H operands widened into scratch, `k` on the floats, each H output
  /// rounded once; the backward's accumulators widened first (k accumulates into them). Nothing
  /// for N or OC < 1. Forward: k(out, x, w, b), b null without a bias. Backward: k(dx, dw, db, d,
  /// x, w), each of dx, dw, db null where its H output is; x is widened for dw only, w for dx only.
  template <typename K>
  void linear_forward_in_float(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC,
                               const K& k);
  template <typename K>
  void linear_backward_in_float(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight, int N,
                                int C, int OC, const K& k);
  /// Scratch slot `slot` with room for at least n floats (grown, never shrunk).
  float* buf(int slot, size_t n);
  /// Builds tok_ (n remapped token ids: the index into rows_ of the token's row, or -1
  /// when the token is outside [lo, hi)) and rows_ (the distinct rows tok - lo touched, in
  /// first-seen order), so an embedding op converts only the rows it touches. Returns the
  /// number of rows.
  int compact_rows(const int32_t* tokens, size_t n, int64_t lo, int64_t hi);

  std::vector<float> bufs_[kSlots];
  std::vector<int32_t> map_;   // row -> compact index or -1; all -1 between calls
  std::vector<int32_t> rows_;  // compact index -> row
  std::vector<int32_t> tok_;   // remapped tokens
};

template <typename H>
template <typename K>
void HalfCpuOps<H>::linear_forward_in_float(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC,
                                            const K& k) {
  if (N < 1 || OC < 1) return;
  const size_t Ns = size_t(N), Cs = size_t(C > 0 ? C : 0), Os = size_t(OC);
  float* x = buf(0, Ns * Cs);
  float* w = buf(1, Os * Cs);
  float* b = bias ? buf(2, Os) : nullptr;
  float* o = buf(3, Ns * Os);
  convert_to_float(x, inp, Ns * Cs);
  convert_to_float(w, weight, Os * Cs);
  if (bias) convert_to_float(b, bias, Os);
  k(o, x, w, b);  // writes
  convert_from_float(out, o, Ns * Os);
}

template <typename H>
template <typename K>
void HalfCpuOps<H>::linear_backward_in_float(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp,
                                             const H* weight, int N, int C, int OC, const K& k) {
  if (N < 1 || OC < 1) return;
  const size_t Ns = size_t(N), Cs = size_t(C > 0 ? C : 0), Os = size_t(OC);
  float* d = buf(0, Ns * Os);
  float* x = dweight ? buf(1, Ns * Cs) : nullptr;  // the input is read for dweight only
  float* w = dinp ? buf(2, Os * Cs) : nullptr;      // the weight for dinp only
  float* dx = dinp ? buf(3, Ns * Cs) : nullptr;
  float* dw = dweight ? buf(4, Os * Cs) : nullptr;
  float* db = dbias ? buf(5, Os) : nullptr;
  convert_to_float(d, dout, Ns * Os);
  if (dweight) {
    convert_to_float(x, inp, Ns * Cs);
    convert_to_float(dw, dweight, Os * Cs);
  }
  if (dinp) {
    convert_to_float(w, weight, Os * Cs);
    convert_to_float(dx, dinp, Ns * Cs);
  }
  if (dbias) convert_to_float(db, dbias, Os);
  k(dx, dw, db, d, x, w);  // accumulates
  if (dinp) convert_from_float(dinp, dx, Ns * Cs);
  if (dweight) convert_from_float(dweight, dw, Os * Cs);
  if (dbias) convert_from_float(dbias, db, Os);
}

extern template class HalfCpuOps<bf16>;
extern template class HalfCpuOps<fp16>;

/// The CPU backend's Ops<T> for any storage type: HalfCpuOps<T> for bf16 / fp16, CpuOps<T>
/// (kernels/cpu/cpu_ops.h) for float and double: what a model builds for itself when it is
/// given no ops. Errors: none.
template <typename T>
std::unique_ptr<Ops<T>> make_cpu_ops() {
  if constexpr (is_half_v<T>) {
    return std::make_unique<HalfCpuOps<T>>();
  } else {
    return std::make_unique<CpuOps<T>>();
  }
}

}  // namespace dtb
