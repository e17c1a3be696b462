// CpuOps<T>: the CPU backend's Ops<T> (kernels/ops.h) for T = float or double, each op
// forwarding to the kernel of kernels/cpu/ops.h (OpenBLAS for the GEMMs), which documents
// its shapes. Not the mixed-precision CPU ops: those are HalfCpuOps (kernels/cpu/half_ops.h).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cpu/fp8_gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/ops.h"

namespace dtb {

/// The CPU backend: each op forwards to kernels/cpu/ops.h (OpenBLAS for the GEMMs).
template <typename T>
class CpuOps final : public Ops<T> {
 public:
  std::string backend() const override { return "cpu"; }
  void zero(T* p, size_t n) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, Tn, C);
  }
  void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) override {
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, Tn, C);
  }
  void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N,
                         int C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                          const T* mean, const T* rstd, int N, int C) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) override {
    cpu::matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                       int OC) override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  // FP8 linears: float only (kernels/cpu/fp8_gemm.h directly); the float64 oracle has none.
  float amax(const T* x, size_t n) override {
    if constexpr (std::is_same_v<T, float>) return fp8_amax(x, n);
    return Ops<T>::amax(x, n);
  }
  void fp8_matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                          const Fp8Operand& x, const Fp8Operand& w) override {
    if constexpr (std::is_same_v<T, float>) cpu::fp8_linear_forward(out, inp, weight, bias, N, C, OC, x, w);
    else Ops<T>::fp8_matmul_forward(out, inp, weight, bias, N, C, OC, x, w);
  }
  void fp8_matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                           int OC, const Fp8Operand& dy, const Fp8Operand& x, const Fp8Operand& w) override {
    if constexpr (std::is_same_v<T, float>)
      cpu::fp8_linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dy, x, w);
    else Ops<T>::fp8_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dy, x, w);
  }
  void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) override {
    cpu::attention_forward(out, att, qkv, B, Tn, C, NH);
  }
  void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                          int NH) override {
    cpu::attention_backward(dqkv, scratch, dout, qkv, att, B, Tn, C, NH);
  }
  void gqa_attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KV, int hs) override {
    cpu::gqa_attention_forward(out, att, qkv, B, Tn, NH, KV, hs);
  }
  void gqa_attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int NH,
                              int KV, int hs) override {
    cpu::gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, Tn, NH, KV, hs);
  }
  void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, T eps, int N, int C) override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, eps, N, C);
  }
  void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N,
                        int C) override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void swiglu_forward(T* out, const T* inp, int N, int F) override { cpu::swiglu_forward(out, inp, N, F); }
  void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) override {
    cpu::swiglu_backward(dinp, inp, dout, N, F);
  }
  void rope_forward(T* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override {
    cpu::rope_forward(qkv, B, Tn, NH, KV, hs, pos0, theta);
  }
  void rope_backward(T* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override {
    cpu::rope_backward(dqkv, B, Tn, NH, KV, hs, pos0, theta);
  }
  void gelu_forward(T* out, const T* inp, size_t n) override { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(T* out, const T* a, const T* b, size_t n) override { cpu::residual_forward(out, a, b, n); }
  void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int N, int V) override {
    cpu::crossentropy_forward(losses, probs, logits, targets, N, V);
  }
  void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N, int V) override {
    cpu::crossentropy_backward(dlogits, probs, targets, dloss, N, V);
  }
  void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, const AdamWParams& hp, int t) override {
    cpu::adamw_update(param, grad, m, v, n, hp, t);
  }
  void embedding_shard_forward(T* out, const int32_t* tokens, const T* wte_shard, const T* wpe, int B, int Tn,
                               int C, int v_begin, int v_end) override {
    cpu::embedding_shard_forward(out, tokens, wte_shard, wpe, B, Tn, C, v_begin, v_end);
  }
  void embedding_shard_backward(T* dwte_shard, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                                int v_begin, int v_end) override {
    cpu::embedding_shard_backward(dwte_shard, dwpe, dout, tokens, B, Tn, C, v_begin, v_end);
  }
  void add_bias(T* out, const T* bias, int N, int OC) override { cpu::add_bias(out, bias, N, OC); }
  void scale(T* x, T a, size_t n) override { cpu::scale(x, a, n); }
  void crossentropy_shard_max(T* maxes, const T* logits, int N, int Vl) override {
    cpu::crossentropy_shard_max(maxes, logits, N, Vl);
  }
  void crossentropy_shard_sums(T* sums, const T* logits, const T* maxes, const int32_t* targets, int N, int Vl,
                               int v_begin) override {
    cpu::crossentropy_shard_sums(sums, logits, maxes, targets, N, Vl, v_begin);
  }
  void crossentropy_shard_forward(T* losses, T* probs, const T* logits, const T* maxes, const T* sums, int N,
                                  int Vl) override {
    cpu::crossentropy_shard_forward(losses, probs, logits, maxes, sums, N, Vl);
  }
  void crossentropy_shard_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N, int Vl,
                                   int v_begin) override {
    cpu::crossentropy_shard_backward(dlogits, probs, targets, dloss, N, Vl, v_begin);
  }
  void attention_block_forward(T* out, T* lse, T* scratch, const T* q, int q_stride, const T* k, const T* v,
                               int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0, int kpos0) override {
    cpu::attention_block_forward(out, lse, scratch, q, q_stride, k, v, kv_stride, B, Tq, Tk, C, NH, qpos0, kpos0);
  }
  void attention_merge(T* out, T* lse, const T* out2, const T* lse2, int N, int C, int NH) override {
    cpu::attention_merge(out, lse, out2, lse2, N, C, NH);
  }
  void attention_block_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* out, const T* lse,
                                const T* q, int q_stride, const T* k, const T* v, int kv_stride, int B, int Tq,
                                int Tk, int C, int NH, int qpos0, int kpos0) override {
    cpu::attention_block_backward(dq, dk, dv, scratch, dout, out, lse, q, q_stride, k, v, kv_stride, B, Tq, Tk, C,
                                  NH, qpos0, kpos0);
  }
};

template <typename T>
void CpuOps<T>::zero(T* p, size_t n) {
  std::fill(p, p + n, T(0));
}
template <typename T>
void CpuOps<T>::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
template <typename T>
void CpuOps<T>::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

}  // namespace dtb
