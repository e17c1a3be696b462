// Ops<T>: the compute ops of the reference model as one interface over a backend's memory,
// so reference/ runs unchanged on the CPU (CpuOps, kernels/cpu/cpu_ops.h) and on CUDA
// (CudaOps, kernels/cuda/cuda_ops.h). The op semantics, shapes and accumulate-vs-write
// rules are those of kernels/cpu/ops.h, which documents each; here they take pointers into
// the backend's memory. Shape legend: B batch, T sequence, C channels, NH heads, KV key/value heads, hs head
// size, F the SwiGLU hidden size, V vocabulary, N rows.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/adamw.h"
#include "kernels/error.h"
#include "kernels/fp8.h"
#include "kernels/half.h"

namespace dtb {

//
// Mixed precision: T is the storage type of parameters, activations and gradients; A =
// acc_t<T> (kernels/half.h) is what an op computes in and what keeps the statistics that
// must not be rounded to T: LayerNorm mean/rstd, per-token losses, the cross-entropy's max
// and sum-exp, the loss scale, the AdamW moments and the master weights. A = T for float and
// double, so those instantiations are unchanged by it.
template <typename T>
class Ops {
 public:
  using A = acc_t<T>;
  virtual ~Ops() = default;
  /// "cpu" or "cuda".
  virtual std::string backend() const = 0;

  /// Memory: n elements set to 0; bytes copied between the host and the backend's memory
  /// (on the CPU backend both are host memory). Copies to the host are complete on return.
  virtual void zero(T* p, size_t n) = 0;
  /// Returns when every op queued so far has finished (a no-op on the CPU, where ops run
  /// when called): call it before reading a timer around queued work.
  virtual void synchronize() {}
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  /// Copies between the backend's memory and pinned host memory (Tier::host) that run on a
  /// stream of their own, after the work queued so far, so they overlap compute (ZeRO-
  /// Offload's transfers). Each returns a ticket for wait_copy(); wait_copies() waits for
  /// every copy started. The host buffer must stay untouched until its copy is waited for.
  /// On the CPU backend the copy happens at once and the tickets are complete.
  virtual int64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes) {
    copy_to_host(host_dst, src, bytes);
    return 0;
  }
  virtual int64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes) {
    copy_from_host(dst, host_src, bytes);
    return 0;
  }
  virtual void wait_copy(int64_t ticket) { (void)ticket; }
  virtual void wait_copies() {}

  virtual void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) = 0;
  virtual void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) = 0;
  virtual void layernorm_forward(T* out, A* mean, A* rstd, const T* inp, const T* weight, const T* bias, int N,
                                 int C) = 0;
  virtual void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                                  const A* mean, const A* rstd, int N, int C) = 0;
  virtual void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) = 0;
  virtual void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                               int C, int OC) = 0;
  virtual void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) = 0;
  virtual void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn,
                                  int C, int NH) = 0;
  virtual void gelu_forward(T* out, const T* inp, size_t n) = 0;
  virtual void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) = 0;
  virtual void residual_forward(T* out, const T* a, const T* b, size_t n) = 0;
  virtual void crossentropy_forward(A* losses, T* probs, const T* logits, const int32_t* targets, int N, int V) = 0;
  virtual void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, A dloss, int N, int V) = 0;
  virtual void adamw_update(T* param, const T* grad, A* m, A* v, size_t n, const AdamWParams& hp, int t) = 0;
  /// Mixed precision's optimizer step (Micikevicius et al. 2018 Sec. 3.1): AdamW on the fp32
  /// `master` (n) from `grad` (n, T) widened to A and multiplied by `grad_scale` in A (the
  /// loss scale's unscaling and the clipping coefficient, applied in fp32 as PyTorch's
  /// GradScaler.unscale_ does to fp32 gradients: in T a scaled gradient's small values would
  /// underflow), with the A moments m, v; then param (n) = master rounded to T.
  /// Errors: the default throws InputError (a backend without the recipe).
  virtual void adamw_update_master(T* param, A* master, const T* grad, A* m, A* v, size_t n,
                                   const AdamWParams& hp, int t, A grad_scale = A(1));

  // FP8 linears (Transformer Engine's recipes: reference/training/fp8_scaling.h): a linear's
  // three GEMMs on operands quantized as each Fp8Operand says, with the semantics of
  // kernels/cpu/fp8_gemm.h's fp8_linear_forward and fp8_linear_backward on T storage (the T
  // values widened to float and quantized; each T output rounded once from the float result,
  // dinp, dweight and dbias accumulated in float first, as matmul_backward does). amax is the
  // largest |x[i]| of n values (NaNs skipped; 0 for n = 0), what current scaling and the delayed
  // history take. The defaults throw InputError naming the backend (no FP8 path at this T).
  virtual float amax(const T* x, size_t n);
  virtual void fp8_matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                                  const Fp8Operand& x, const Fp8Operand& w);
  virtual void fp8_matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                                   int C, int OC, const Fp8Operand& dy, const Fp8Operand& x, const Fp8Operand& w);

  // The Llama block's ops (RMSNorm, SwiGLU, rotary embeddings, grouped-query attention):
  // semantics in kernels/cpu/ops.h. A backend without them throws InputError naming itself and the
  // op (the defaults below), so that a model it cannot run is refused, never computed wrongly.
  virtual void rmsnorm_forward(T* out, A* rstd, const T* inp, const T* weight, A eps, int N, int C);
  virtual void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const A* rstd,
                                int N, int C);
  virtual void swiglu_forward(T* out, const T* inp, int N, int F);
  virtual void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F);
  virtual void rope_forward(T* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta);
  virtual void rope_backward(T* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta);
  virtual void gqa_attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KV, int hs);
  virtual void gqa_attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn,
                                      int NH, int KV, int hs);

  // The sharded ops of tensor parallelism (vocabulary-parallel embedding and cross-entropy,
  // the row-parallel bias): semantics in kernels/cpu/ops.h.
  virtual void embedding_shard_forward(T* out, const int32_t* tokens, const T* wte_shard, const T* wpe, int B,
                                       int Tn, int C, int v_begin, int v_end) = 0;
  virtual void embedding_shard_backward(T* dwte_shard, T* dwpe, const T* dout, const int32_t* tokens, int B,
                                        int Tn, int C, int v_begin, int v_end) = 0;
  virtual void add_bias(T* out, const T* bias, int N, int OC) = 0;
  virtual void scale(T* x, A a, size_t n) = 0;
  virtual void crossentropy_shard_max(A* maxes, const T* logits, int N, int Vl) = 0;
  virtual void crossentropy_shard_sums(A* sums, const T* logits, const A* maxes, const int32_t* targets, int N,
                                       int Vl, int v_begin) = 0;
  virtual void crossentropy_shard_forward(A* losses, T* probs, const T* logits, const A* maxes, const A* sums,
                                          int N, int Vl) = 0;
  virtual void crossentropy_shard_backward(T* dlogits, const T* probs, const int32_t* targets, A dloss, int N,
                                           int Vl, int v_begin) = 0;

  // Blockwise causal attention at absolute positions, its log-sum-exp merge and its backward:
  // context parallelism's blocks (reference/parallel/context_parallel.h); semantics, layouts
  // and scratch sizes in kernels/cpu/ops.h. lse is kept in A. The defaults throw InputError
  // (a backend without them: so far the CPU's CpuOps and HalfCpuOps have them, CUDA not).
  virtual void attention_block_forward(T* out, A* lse, T* scratch, const T* q, int q_stride, const T* k,
                                       const T* v, int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0,
                                       int kpos0);
  virtual void attention_merge(T* out, A* lse, const T* out2, const A* lse2, int N, int C, int NH);
  virtual void attention_block_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* out,
                                        const A* lse, const T* q, int q_stride, const T* k, const T* v,
                                        int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0, int kpos0);

 private:
  [[noreturn]] void no_block_attention() const {
    throw InputError("blockwise attention (context parallelism) is not implemented on the " + backend() +
                     " backend at this precision");
  }
};

template <typename T>
void Ops<T>::attention_block_forward(T*, A*, T*, const T*, int, const T*, const T*, int, int, int, int, int, int,
                                     int, int) {
  no_block_attention();
}
template <typename T>
void Ops<T>::attention_merge(T*, A*, const T*, const A*, int, int, int) {
  no_block_attention();
}
template <typename T>
void Ops<T>::attention_block_backward(T*, T*, T*, T*, const T*, const T*, const A*, const T*, int, const T*,
                                      const T*, int, int, int, int, int, int, int, int) {
  no_block_attention();
}

template <typename T>
float Ops<T>::amax(const T*, size_t) {
  throw InputError("the " + backend() + " backend has no FP8 path (amax) at this precision");
}
template <typename T>
void Ops<T>::fp8_matmul_forward(T*, const T*, const T*, const T*, int, int, int, const Fp8Operand&,
                                const Fp8Operand&) {
  throw InputError("the " + backend() + " backend has no FP8 GEMMs at this precision");
}
template <typename T>
void Ops<T>::fp8_matmul_backward(T*, T*, T*, const T*, const T*, const T*, int, int, int, const Fp8Operand&,
                                 const Fp8Operand&, const Fp8Operand&) {
  throw InputError("the " + backend() + " backend has no FP8 GEMMs at this precision");
}

template <typename T>
void Ops<T>::adamw_update_master(T*, A*, const T*, A*, A*, size_t, const AdamWParams&, int, A) {
  throw InputError("the " + backend() + " backend has no mixed-precision optimizer step (fp32 master weights)");
}

template <typename T>
void Ops<T>::rmsnorm_forward(T*, A*, const T*, const T*, A, int, int) {
  throw InputError("the " + backend() + " backend has no rmsnorm_forward (the Llama block's RMSNorm) yet");
}
template <typename T>
void Ops<T>::rmsnorm_backward(T*, T*, const T*, const T*, const T*, const A*, int, int) {
  throw InputError("the " + backend() + " backend has no rmsnorm_backward (the Llama block's RMSNorm) yet");
}
template <typename T>
void Ops<T>::swiglu_forward(T*, const T*, int, int) {
  throw InputError("the " + backend() + " backend has no swiglu_forward (the Llama block's MLP) yet");
}
template <typename T>
void Ops<T>::swiglu_backward(T*, const T*, const T*, int, int) {
  throw InputError("the " + backend() + " backend has no swiglu_backward (the Llama block's MLP) yet");
}
template <typename T>
void Ops<T>::rope_forward(T*, int, int, int, int, int, int, double) {
  throw InputError("the " + backend() + " backend has no rope_forward (rotary embeddings) yet");
}
template <typename T>
void Ops<T>::rope_backward(T*, int, int, int, int, int, int, double) {
  throw InputError("the " + backend() + " backend has no rope_backward (rotary embeddings) yet");
}
template <typename T>
void Ops<T>::gqa_attention_forward(T*, T*, const T*, int, int, int, int, int) {
  throw InputError("the " + backend() + " backend has no gqa_attention_forward (grouped-query attention) yet");
}
template <typename T>
void Ops<T>::gqa_attention_backward(T*, T*, const T*, const T*, const T*, int, int, int, int, int) {
  throw InputError("the " + backend() + " backend has no gqa_attention_backward (grouped-query attention) yet");
}

/// dst = src, n elements, both in the backend's memory (non-overlapping): std::copy on the
/// CPU backend; elsewhere 0 + src through zero and residual_forward, which is exact (adding
/// 0 changes no float but -0), so a device copy needs no op of its own.
template <typename T>
void copy_within(Ops<T>& ops, T* dst, const T* src, size_t n) {
  if (n == 0) return;
  if (ops.backend() == "cpu") {
    std::copy_n(src, n, dst);
  } else {
    ops.zero(dst, n);
    ops.residual_forward(dst, dst, src, n);
  }
}

}  // namespace dtb
