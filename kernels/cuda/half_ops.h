// CudaHalfOps<H>: the CUDA backend's mixed-precision ops for H = bf16 or fp16 storage
// (kernels/half.h), the recipe of kernels/cpu/half_ops.h ("stores H, computes in fp32") on
// one GPU: the fp32 kernels of kernels/cuda/ops.cuh and the cuBLASLt GEMMs of gemm.h, with
// the H <-> fp32 conversions done by cuda::cast. Not a fused fast path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/half.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace dtb {

/// Ops<H> over a GPU's memory with the semantics of HalfCpuOps<H> (kernels/cpu/half_ops.h,
/// whose comment is the contract; shapes B batch, T sequence, C channels, NH heads, V
/// vocabulary, N rows, and accumulate-vs-write rules as in kernels/cpu/ops.h):
///   - each op casts its H inputs into fp32 device scratch (exact), runs the fp32 CUDA
///     kernel, and casts each H output back once, round to nearest even
///     (__float2bfloat16_rn / __float2half_rn). An op that ACCUMULATES into an H output
///     casts the current output to fp32 too, lets the kernel accumulate, and rounds once.
///   - the A = float arguments (LayerNorm mean/rstd, losses, the cross-entropy shard maxes
///     and sums, dloss, scale factors, AdamW moments, master weights) are device floats
///     passed to the fp32 kernels as they are, never rounded to H.
/// So an output is round_H(fp32 CUDA kernel on the widened inputs), where HalfCpuOps gives
/// round_H(fp32 CPU kernel on the same inputs): the two differ by what the fp32 kernels
/// differ by (summation order, FMA, expf/tanhf) plus at most one rounding step of H.
///
/// GEMMs:
///   - matmul_forward / matmul_backward: cuBLASLt on the H operands themselves
///     (GemmPrecision::bf16 / fp16: H inputs, CUBLAS_COMPUTE_32F, fp32 C): the products of
///     two H values are exact in fp32 and the sums fp32, which is the fp32 GEMM on the
///     widened inputs up to summation order, without widening the operands. The output
///     (or, for the accumulating backward, the widened current gradient, beta = 1) is fp32
///     scratch, rounded to H once; the bias is added in fp32 (cuda::add_bias) before that
///     rounding, and dbias is cuda::column_sum_accumulate over the widened dout.
///   - attention: the fp32 path on widened inputs (cuda::attention_forward/backward, their
///     fp32 batched GEMMs): its second product multiplies the unrounded fp32 softmax, which
///     an H GEMM could only take rounded, a second rounding the recipe does not have.
///   These do not follow Backend::set_matmul_precision: the operands are H already, so an
///   H GEMM with fp32 accumulation is the recipe's GEMM whatever the float ops are set to
///   (tf32 would round H's 8 or 11 significant bits to 11, fp16 on bf16 values would round
///   them again).
///
/// Specific ops (as HalfCpuOps unless said):
///   - zero: cudaMemsetAsync of 2n bytes (+0). The copies are CudaOps's (bytes; the
///     synchronous ones complete on return, the async ones on a copy stream of their own).
///   - encoder_forward / encoder_backward: the token ids are read back to the host (one
///     synchronising copy of B*T int32) for their range [lo, hi]; only wte rows lo..hi are
///     widened (and, for the backward, rounded back: a row no token touched rounds to
///     itself). The kernels are cuda::embedding_shard_forward / _backward over [lo, hi + 1),
///     which equal the encoder's for tokens in range; the backward's dwte is so summed per
///     row in (b, t) order, deterministic and bitwise the CPU float kernel's, unlike
///     cuda::encoder_backward's atomicAdd.
///   - attention_backward: the fp32 kernel's (B,NH,T,T) scratch is this object's; the
///     caller's H `scratch` is not touched.
///   - adamw_update: AdamW in fp32 on the widened param, then param rounded to H (an update
///     below half an ulp is lost). adamw_update_master: the widened grad times grad_scale in
///     fp32 (cuda::scale, skipped when grad_scale is 1), cuda::adamw_update on the fp32
///     master and moments, then param = round_H(master).
///   - the cross-entropy ops run in chunks of rows (about kChunk elements, at least one
///     row), which the row-independent kernels compute exactly as one call.
///
/// Memory: fp32 scratch on the CudaDevice, MemCategory::workspace (so it is in the memory
/// accounting), kSlots buffers each grown to the largest need seen and then reused: no
/// allocation per call in the steady state. Its size is the fp32 copy of one op's tensors:
/// the GEMMs' fp32 outputs (out; dinp, dweight and, with dbias, dout), whole activations
/// for the elementwise and LayerNorm ops, the touched wte rows, (B,NH,T,T) twice for the
/// attention backward, about 2 * kChunk floats for the cross-entropy. Growing a buffer
/// frees the old one to the device's caching allocator, safe in compute-stream order.
/// Every op is enqueued on the device's compute stream and returns without synchronising,
/// except the encoders (above) and the synchronous copies.
/// Errors: none of its own (preconditions unchecked, as CudaOps); CUDA and cuBLASLt
/// failures abort through the error sink. Not thread-safe: one object per rank thread.
/// Has not yet run on a GPU: kernels/cuda/half_ops_test.cc and half_ops_gemm_test.cc
/// (label gpu) check it against HalfCpuOps<H>.
template <typename H>
class CudaHalfOps final : public Ops<H> {
  static_assert(is_half_v<H>, "CudaHalfOps is for bf16 and fp16 storage");

 public:
  using A = acc_t<H>;  // float
  /// Elements per chunk of the cross-entropy ops (a chunk is at least one row).
  static constexpr size_t kChunk = size_t(1) << 24;

  /// Ops on `device`'s compute stream, GEMMs through `gemm` (neither owned; both must
  /// outlive this object).
  CudaHalfOps(CudaDevice& device, cuda::Gemm& gemm);
  std::string backend() const override { return "cuda"; }

  void zero(H* p, size_t n) override;
  void synchronize() override { f32_.synchronize(); }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  int64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes) override;
  int64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes) override;
  void wait_copy(int64_t ticket) override { f32_.wait_copy(ticket); }
  void wait_copies() override { f32_.wait_copies(); }

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
  /// The Llama block's ops: the fp32 kernels of llama_ops.cu and attention.cu's
  /// gqa_attention_* on whole widened tensors; rstd in A. rope_forward / _backward round
  /// the rotated tensor into H scratch and copy back only the q and k heads of each row
  /// (cudaMemcpy2DAsync), so v is not written, as HalfCpuOps. gqa_attention_backward's fp32
  /// scratch is this object's; the caller's H `scratch` is not touched. Not yet run on a GPU:
  /// half_llama_ops_test.cc checks them against HalfCpuOps<H>.
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

  /// Bytes of fp32 device scratch this object holds now (grows only): for tests and for
  /// reporting the conversions' footprint (also under MemCategory::workspace).
  size_t scratch_bytes() const;

 private:
  static constexpr int kSlots = 6;
  cudaStream_t s() const { return device_.compute_stream(); }
  /// Scratch slot `slot` with room for at least n floats (grown, never shrunk).
  float* buf(int slot, size_t n);
  /// dst (n floats) = src (n H values) widened (exact).
  void to_float(float* dst, const H* src, size_t n);
  /// buf(slot, n) holding src (n H values) widened to fp32.
  float* widen(int slot, const H* src, size_t n);
  /// dst (n H) = src (n floats) rounded to nearest even.
  void round_to(H* dst, const float* src, size_t n);
  /// The rows [lo, end) of the vocabulary shard [v_begin, v_end) that the n token ids on
  /// the device touch, from their smallest to their largest (a synchronising copy to the
  /// host); lo = end = v_begin when none does (n = 0, or every id outside the shard).
  std::pair<int64_t, int64_t> touched_rows(const int32_t* tokens, size_t n, int v_begin, int v_end);
  /// rope_forward (sign +1) or rope_backward (-1) by the recipe (see rope_forward above).
  void rope(H* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta, int sign);

  CudaDevice& device_;
  cuda::Gemm& gemm_;
  CudaOps f32_;  // the copies and their streams
  Tensor bufs_[kSlots];
  std::vector<int32_t> host_tokens_;
};

extern template class CudaHalfOps<bf16>;
extern template class CudaHalfOps<fp16>;

}  // namespace dtb
