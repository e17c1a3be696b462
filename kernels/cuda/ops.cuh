// CUDA forward/backward ops of a GPT-2 style transformer in float32, the GPU twins of
// kernels/cpu/ops.h (same shapes, same math, same accumulate-vs-write rules), after llm.c's
// train_gpt2.cu. Device pointers; every op is enqueued on `stream` and returns without
// synchronising; launch errors abort through the error sink (DTB_CUDA_CHECK). The matmuls
// live in kernels/cuda/gemm.h (cuBLASLt).
//
// Shape legend: B batch, T sequence length, C channels, NH heads (hs = C / NH),
// V vocabulary, N = number of rows (usually B*T), OC output channels.
// Backward ops ACCUMULATE (+=) into their d-outputs unless said otherwise.
// Ops with atomicAdd (encoder_backward's dwte) are not bitwise deterministic run to run;
// everything else is. Preconditions as on the CPU (unchecked): C % NH == 0, token and
// target ids in [0, V), non-overlapping buffers except where an op says out may alias.
// This header is plain C++ (no device code): host code compiled by g++ may include it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/tensor.h"   // DType

namespace dtb::cuda {

class Gemm;  // kernels/cuda/gemm.h

/// out (B,T,C) = wte[tokens[b,t]] (V,C) + wpe[t] (T,C). WRITES out. tokens (B,T) on device.
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C, cudaStream_t stream);
/// dwte (V,C) += scatter of dout (B,T,C) by token (atomicAdd: order of the adds varies);
/// dwpe (T,C) += sum over b of dout (in b order, as the CPU op).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C, cudaStream_t stream);

/// The vocabulary-parallel embedding's shard (cpu::embedding_shard_forward): this rank holds
/// rows [v_begin, v_end) of wte as wte_shard (v_end - v_begin, C). WRITES out (B,T,C) =
/// (v_begin <= tok < v_end ? wte_shard[tok - v_begin] : 0) + (wpe ? wpe[t] : 0), bitwise the
/// CPU's. wpe may be null.
void embedding_shard_forward(float* out, const int32_t* tokens, const float* wte_shard,
                             const float* wpe, int B, int T, int C, int v_begin, int v_end,
                             cudaStream_t stream);
/// dwte_shard (v_end - v_begin, C) += dout rows of the tokens in [v_begin, v_end), each row
/// summed by one block in (b, t) order (no atomics: deterministic, bitwise the CPU's);
/// dwpe (T,C) += sum over b of dout (in b order) unless dwpe is null.
void embedding_shard_backward(float* dwte_shard, float* dwpe, const float* dout,
                              const int32_t* tokens, int B, int T, int C, int v_begin, int v_end,
                              cudaStream_t stream);

/// LayerNorm over the last dim, eps 1e-5, two-pass variance (biased), one warp per row:
/// out (N,C) = (inp - mean) * rstd * weight (C) + bias (C). WRITES out, mean (N), rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, cudaStream_t stream);
/// dinp (N,C) +=, dweight (C) +=, dbias (C) += given dout (N,C) and the saved mean/rstd.
/// dinp: one warp per row; dweight/dbias: a column reduction kernel (deterministic).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream);

/// Causal self-attention, scale 1/sqrt(hs). qkv (B,T,3C) as on the CPU (head h uses channels
/// [h*hs, (h+1)*hs) of each of q, k, v). WRITES out (B,T,C) and att (B,NH,T,T), the softmax
/// probabilities with entries above the diagonal exactly 0. The two products per head are
/// fp32 cuBLASLt GEMMs (batched over b) through `gemm`; the softmax is a warp per row.
void attention_forward(Gemm& gemm, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH, cudaStream_t stream);
/// dqkv (B,T,3C) += gradient of out w.r.t. qkv given dout (B,T,C) and the saved att.
/// `scratch` (device, B*NH*T*T floats) is overwritten.
void attention_backward(Gemm& gemm, float* dqkv, float* scratch, const float* dout,
                        const float* qkv, const float* att, int B, int T, int C, int NH,
                        cudaStream_t stream);

/// Causal self-attention with grouped-query heads (cpu::gqa_attention_forward): qkv
/// (B,T,(NH+2KV)hs) holds the NH query heads, then KV key heads, then KV value heads; query
/// head h uses key/value head h / (NH/KV). WRITES out (B,T,NH hs) and att (B,NH,T,T), zero
/// above the diagonal. As attention_forward: fp32 batched GEMMs per head, a warp per row for
/// the softmax. KV = NH is attention_forward's computation. KV must divide NH (aborts if not).
void gqa_attention_forward(Gemm& gemm, float* out, float* att, const float* qkv, int B, int T, int NH,
                           int KV, int hs, cudaStream_t stream);
/// dqkv (B,T,(NH+2KV)hs) += gradient given dout (B,T,NH hs) and the saved att; a key/value
/// head's dk, dv add its query heads' contributions in head order (one GEMM each, beta 1, on
/// the stream: deterministic). `scratch` (B*NH*T*T floats) is overwritten.
void gqa_attention_backward(Gemm& gemm, float* dqkv, float* scratch, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int KV, int hs, cudaStream_t stream);

// ---- the Llama block (llama_ops.cu; contracts and the math in kernels/cpu/ops.h) ----

/// RMSNorm, one warp per row: rstd (N) = 1 / sqrt(mean(x^2) + eps), out (N,C) = (x rstd) w.
/// WRITES out and rstd.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float eps, int N, int C,
                     cudaStream_t stream);
/// dinp (N,C) += rstd (w dout - xhat mean(w dout xhat)), one warp per row; dweight (C) +=
/// column sums of xhat dout (the column-reduction kernel: deterministic).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, cudaStream_t stream);
/// SwiGLU: inp (N,2F) = gate | up per row; WRITES out (N,F) = silu(gate) up. The exponent is
/// clamped to [-80, 80] as on the CPU (so silu' has no inf * 0).
void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream);
/// dinp (N,2F) += (dout up silu'(gate) | dout silu(gate)).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream);
/// Rotary embeddings IN PLACE on the q and k heads of qkv (B,T,(NH+2KV)hs), rotate-half
/// pairs (i, i + hs/2), position pos0 + t, angle (pos0 + t) theta^(-2i/hs) computed in
/// double and its cos, sin rounded to float, as cpu::rope_forward. v untouched.
void rope_forward(float* qkv, int B, int T, int NH, int KV, int hs, int pos0, double theta, cudaStream_t stream);
/// The transpose (each pair rotated by -angle), in place on dqkv's q and k heads.
void rope_backward(float* dqkv, int B, int T, int NH, int KV, int hs, int pos0, double theta,
                   cudaStream_t stream);

/// GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
/// elementwise over n. WRITES out.
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
/// dinp += gelu'(inp) * dout, elementwise over n.
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream);

/// out = a + b, elementwise over n. WRITES out (which may alias a or b).
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
/// x (n) *= a, as cpu::scale.
void scale(float* x, float a, size_t n, cudaStream_t stream);

/// Softmax cross-entropy per row, one block per row. logits (N,V), targets (N) on device.
/// WRITES probs (N,V) = softmax(logits) and losses (N) = log-sum-exp - logit[target]
/// (max subtracted first: finite for any finite logits).
void crossentropy_forward(float* losses, float* probs, const float* logits,
                          const int32_t* targets, int N, int V, cudaStream_t stream);
/// dlogits (N,V) = (probs - onehot(targets)) * dloss, dloss the same for every row
/// (1 / global token count for a mean loss). WRITES, not accumulates.
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           float dloss, int N, int V, cudaStream_t stream);

/// Vocabulary-parallel cross-entropy (cpu::crossentropy_shard_*, which documents the three
/// steps and the all-reduces between them): logits (N, Vl) hold ids [v_begin, v_begin + Vl),
/// targets (N) on device. One block per row for the first three; the sums are a fixed
/// per-thread order then a block tree (deterministic, as crossentropy_forward).
/// WRITES maxes (N) = row max of the shard (-inf where Vl is 0).
void crossentropy_shard_max(float* maxes, const float* logits, int N, int Vl, cudaStream_t stream);
/// WRITES sums (2N) = [sum_j exp(l_nj - maxes_n) (N), the target's logit if it lies in the
/// shard, else 0 (N)].
void crossentropy_shard_sums(float* sums, const float* logits, const float* maxes,
                             const int32_t* targets, int N, int Vl, int v_begin,
                             cudaStream_t stream);
/// From the all-reduced maxes (N) and sums (2N): WRITES probs (N, Vl) = exp(l - max) / sum
/// and losses (N) = log(sum) - (target logit - max).
void crossentropy_shard_forward(float* losses, float* probs, const float* logits,
                                const float* maxes, const float* sums, int N, int Vl,
                                cudaStream_t stream);
/// dlogits (N, Vl) = (probs - onehot(targets - v_begin)) * dloss, the one-hot only where the
/// target lies in the shard. WRITES, bitwise the CPU's.
void crossentropy_shard_backward(float* dlogits, const float* probs, const int32_t* targets,
                                 float dloss, int N, int Vl, int v_begin, cudaStream_t stream);

/// One AdamW step (torch.optim.AdamW semantics, as cpu::adamw_update) at step t (1-based)
/// over n elements: param, m, v updated in place from grad. The bias corrections
/// 1 / (1 - beta^t) are computed on the host in double and passed to the kernel as float.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& hp, int t, cudaStream_t stream);

/// dst[i] = convert(src[i]) for n elements: f32 -> bf16 / f16 round to nearest even
/// (__float2bfloat16_rn / __float2half_rn; overflow gives inf, NaN stays NaN), bf16 / f16
/// -> f32 exact. Equal types copy. Any other pair aborts (error sink).
void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n,
          cudaStream_t stream);

/// *count_dev += number of inf / NaN elements of x (n floats). The caller zeroes (or reads
/// the previous value of) *count_dev, a device counter.
void count_nonfinite(const float* x, size_t n, unsigned int* count_dev, cudaStream_t stream);

/// out (N,OC) += bias (OC) broadcast over rows, bitwise cpu::add_bias. (Used by
/// Gemm::matmul_forward, and CudaOps::add_bias for the row-parallel linear's bias.)
void add_bias(float* out, const float* bias, int N, int OC, cudaStream_t stream);
/// dst (OC) += column sums of x (N,OC), summed in row order per column (deterministic).
/// (Used by Gemm::matmul_backward for dbias.)
void column_sum_accumulate(float* dst, const float* x, int N, int OC, cudaStream_t stream);
/// c = beta * c (or 0 where beta == 0, without reading c) on `batch` row-major (rows, cols)
/// matrices with leading dimension ld and batch stride (elements). (Gemm with K == 0.)
void scale_matrix(float* c, int rows, int cols, int ld, long long batch_stride, int batch,
                  float beta, cudaStream_t stream);

}  // namespace dtb::cuda
