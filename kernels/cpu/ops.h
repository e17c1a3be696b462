// CPU compute ops of a GPT-2 style transformer and of the Llama block (RMSNorm, SwiGLU, rotary
// embeddings, grouped-query attention), forward and backward side by side, after llm.c's
// train_gpt2.c. Templated on the compute type T (float, or double for the oracle and the
// finite-difference tests); explicit instantiations for float and double live in ops.cc,
// attention.cc, crossentropy.cc and llama_ops.cc. Raw row-major pointers, no allocation inside an op.
//
// Shape legend: B batch, T sequence length, C channels, NH heads (hs = C / NH), KV key/value
// heads, F the SwiGLU hidden size, V vocabulary, N = number of rows (usually B*T), OC output channels.
// Backward functions ACCUMULATE (+=) into their d-outputs unless said otherwise, so
// gradient accumulation over micro-batches is just calling backward again.
// Preconditions, unchecked here (callers validate: reference/model/gpt.cc): C % NH == 0, token
// and target ids in [0, V), non-overlapping buffers except where an op says out may alias.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"

namespace dtb::cpu {

/// out (B,T,C) = wte[tokens[b,t]] (V,C) + wpe[t] (T,C). Tokens must be in [0, V).
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C);
/// dwte (V,C) += scatter of dout (B,T,C) by token; dwpe (T,C) += sum over b of dout.
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C);

/// The vocabulary-parallel embedding's shard (Megatron-LM VocabParallelEmbedding, Shoeybi
/// et al. 2019 Sec. 3): this rank holds rows [v_begin, v_end) of wte as wte_shard
/// (v_end - v_begin, C). WRITES out (B,T,C) = (v_begin <= tok < v_end ? wte_shard[tok -
/// v_begin] : 0) + (wpe ? wpe[t] : 0); summed over the TP group (one rank passing wpe) it
/// is encoder_forward's output, bitwise (every other term is an exact zero). With
/// v_begin = 0, v_end = V and wpe it is encoder_forward itself.
template <typename T>
void embedding_shard_forward(T* out, const int32_t* tokens, const T* wte_shard, const T* wpe, int B, int Tn,
                             int C, int v_begin, int v_end);
/// dwte_shard (v_end - v_begin, C) += dout rows of the tokens in [v_begin, v_end), in
/// (b, t) order as encoder_backward; dwpe (T,C) += sum over b of dout unless dwpe is null.
template <typename T>
void embedding_shard_backward(T* dwte_shard, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                              int v_begin, int v_end);

/// x (n) *= a, elementwise (a rounded product per element): loss-scale unscaling, gradient
/// clipping.
template <typename T>
void scale(T* x, T a, size_t n);

/// out (N, OC) += bias (OC) on every row (the replicated bias of a row-parallel linear,
/// added once after its all-reduce).
template <typename T>
void add_bias(T* out, const T* bias, int N, int OC);

/// LayerNorm over the last dim (eps 1e-5, as torch.nn.LayerNorm):
/// out (N,C) = (inp - mean) * rstd * weight (C) + bias (C); saves mean (N) and rstd (N).
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C);
/// dinp (N,C) +=, dweight (C) +=, dbias (C) +=, given dout (N,C) and the saved mean/rstd.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

/// out (N,OC) = inp (N,C) @ weight^T + bias, weight (OC,C) as torch.nn.Linear; bias may be null.
/// BLAS gemm (OpenBLAS sgemm / dgemm).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
/// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += column sums of
/// dout. Each of dinp, dweight and dbias may be null (nothing computed for it): a zero-bubble
/// schedule's input-gradient pass B passes null dweight and dbias, its weight pass W null dinp
/// (then weight is not read and may be null too), and B then W give bitwise the values of one
/// call with all three (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

/// Causal self-attention with grouped-query heads (Ainslie et al. 2023, GQA): qkv
/// (B,T,(NH+2KV)hs) holds on its last dim the NH query heads, then KV key heads, then KV value
/// heads, hs channels each; query head h attends with key/value head h / (NH/KV) (consecutive
/// query heads share one, as Hugging Face's repeat_kv and Megatron's query groups). KV divides NH.
/// Scale 1/sqrt(hs). Writes out (B,T,NH hs) (heads concatenated) and att (B,NH,T,T), the
/// softmax probabilities (zero above the diagonal). KV = NH is attention_forward below, bitwise.
template <typename T>
void gqa_attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KV, int hs);
/// dqkv (B,T,(NH+2KV)hs) += gradient of out w.r.t. qkv given dout (B,T,NH hs) and the saved att
/// (a key/value head's gradient sums its NH/KV query heads', in head order). `scratch` must hold
/// B*NH*T*T elements (overwritten).
template <typename T>
void gqa_attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int NH,
                            int KV, int hs);

/// Causal multi-head self-attention core. qkv (B,T,3C) holds q, k, v concatenated on the
/// last dim, head h using channels [h*hs, (h+1)*hs) of each. Scale 1/sqrt(hs).
/// Writes out (B,T,C) (heads concatenated) and att (B,NH,T,T), the softmax probabilities
/// (entries above the diagonal are 0), which backward needs.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH);
/// dqkv (B,T,3C) += gradient of out w.r.t. qkv given dout (B,T,C) and the saved att.
/// `scratch` must hold B*NH*T*T elements (its contents are overwritten).
template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH);

/// Blockwise causal attention (attention_block.cc): one block of queries against one block of
/// keys/values, at ABSOLUTE positions, for context parallelism's ring (Liu et al. 2023, "Ring
/// Attention with Blockwise Transformers"; Megatron-Core / Transformer Engine context
/// parallel) and flash attention's online softmax (Dao et al. 2022; Milakov & Gimelshein 2018).
/// Query row t (t < Tq) sits at position qpos0 + t, key row s (s < Tk) at kpos0 + s; the
/// score of (t, s) is masked when kpos0 + s > qpos0 + t. Scale 1/sqrt(hs), hs = C / NH.
/// Layout: token rows as the model's packed qkv (B, T, 3C): row (b, t) of q starts at
/// q + (b Tq + t) q_stride, head h at channels [h hs, (h+1) hs) of it; k and v likewise with
/// kv_stride over Tk rows. For a packed qkv pass q = qkv, k = qkv + C, v = qkv + 2C and
/// strides 3C; a packed kv block (B, Tk, 2C) is k = kv, v = kv + C, kv_stride 2C.
/// WRITES out (B, Tq, C) (heads concatenated, as attention_forward) = the block's own softmax
/// of the unmasked scores times v, and lse (B, Tq, NH) = log sum_s exp(score), the
/// log-sum-exp of the scaled unmasked scores (row-major by token as out, so a run of token
/// rows is one contiguous slice of both); a row with every key masked gets out 0 and lse
/// -inf. `scratch` holds Tq * Tk elements (overwritten). No other buffer may overlap out.
template <typename T>
void attention_block_forward(T* out, T* lse, T* scratch, const T* q, int q_stride, const T* k, const T* v,
                             int kv_stride, int B, int Tq, int Tk, int C, int NH, int qpos0, int kpos0);
/// The online-softmax merge of two blocks' results for the same queries, in place into the
/// first: lse' = logaddexp(lse, lse2), out' = e^(lse - lse') out + e^(lse2 - lse') out2, per
/// (row, head); out, out2 (N, C), lse, lse2 (N, NH), N = B Tq rows. A row of lse2 = -inf (all
/// masked) leaves the row bitwise as it was; a row of lse = -inf becomes out2, lse2 bitwise.
/// Merging blocks in any order gives the same result up to rounding (the order is the
/// caller's: context_parallel.h states what is bitwise).
template <typename T>
void attention_merge(T* out, T* lse, const T* out2, const T* lse2, int N, int C, int NH);
/// The block's part of the backward (flash attention's, Dao et al. 2022 Alg. 4), given the
/// FULL result of the queries (merged over every key block): out (B, Tq, C), lse (B, Tq, NH)
/// and dout (B, Tq, C): P = exp(score - lse) (0 where masked), dv += P^T dout, dP = dout v^T,
/// D = rowsum(dout * out), dS = P (dP - D), dq += scale dS k, dk += scale dS^T q. dq, dk, dv
/// ACCUMULATE, with q's stride (dq) and kv_stride (dk, dv), so a packed dqkv takes them as
/// qkv does. Summed over every key block, dq is attention_backward's; each block's dk, dv
/// summed over every query block are its. `scratch` holds 2 Tq Tk + Tq elements.
template <typename T>
void attention_block_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* out, const T* lse,
                              const T* q, int q_stride, const T* k, const T* v, int kv_stride, int B, int Tq,
                              int Tk, int C, int NH, int qpos0, int kpos0);
/// RMSNorm over the last dim (Zhang & Sennrich 2019; Llama, torch.nn.RMSNorm): rstd (N) =
/// 1 / sqrt(mean(x^2) + eps) is saved, out (N,C) = x * rstd * weight (C). No mean, no bias.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, T eps, int N, int C);
/// dinp (N,C) +=, dweight (C) +=, given dout (N,C) and the saved rstd: with xhat = x rstd and
/// g = weight * dout, dinp = rstd (g - xhat mean(g xhat)), dweight = sum over rows of xhat dout.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C);

/// SwiGLU (Shazeer 2020): inp (N,2F) is the fused gate|up projection (each row the F gate
/// values, then the F up values: Megatron's linear_fc1 with gated_linear_unit); WRITES out
/// (N,F) = silu(gate) * up, silu(g) = g / (1 + e^-g).
template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F);
/// dinp (N,2F) += the gradient given dout (N,F): d gate = dout up silu'(gate), d up = dout silu(gate).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F);

/// Rotary position embeddings (Su et al. 2021, RoFormer) IN PLACE on the query and key heads of
/// the packed qkv (B,T,(NH+2KV)hs) (the v heads untouched), in the rotate-half convention of
/// Hugging Face Llama and Megatron's default (rotary_interleaved false): in every head channel i
/// < hs/2 pairs with i + hs/2, and the pair (x1, x2) at position p becomes (x1 cos a - x2 sin a,
/// x2 cos a + x1 sin a), a = p theta^(-2i/hs). Row t of each sequence is at position
/// p = pos0 + t, so that a chunk of a sequence (context parallelism) gets its true positions.
/// The angle, cos and sin are computed in double and rounded to T.
template <typename T>
void rope_forward(T* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta);
/// The backward, IN PLACE: dqkv's q and k heads, holding the gradient w.r.t. the rotated q, k,
/// become the gradient w.r.t. the unrotated ones (each pair rotated by -a: the rotation's
/// transpose); v untouched. Not an accumulation: call it on the finished gradient.
template <typename T>
void rope_backward(T* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta);

/// GELU, tanh approximation (GPT-2; torch.nn.functional.gelu(approximate="tanh")):
/// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over n.
template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
/// dinp += gelu'(inp) * dout, elementwise over n.
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

/// out = a + b, elementwise over n (out may alias a or b).
template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n);

/// Softmax cross-entropy per row. logits (N,V); writes probs (N,V) = softmax(logits) and
/// losses (N) = -log probs[n, targets[n]], computed stably (max subtracted, log-sum-exp).
template <typename T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int N, int V);
/// dlogits (N,V) = (probs - onehot(targets)) * dloss, where dloss is d(total loss)/d(loss_n),
/// the same for every row (1 / global token count for a mean loss). WRITES, not accumulates.
template <typename T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N, int V);

/// Vocabulary-parallel cross-entropy (Megatron-LM cross_entropy.py
/// _VocabParallelCrossEntropy): rank r holds logits (N, Vl) for vocabulary ids
/// [v_begin, v_begin + Vl) and the full logits are never gathered. Three steps with two
/// all-reduces between them:
///   1. crossentropy_shard_max:  maxes (N) = row max of the shard        -> all-reduce MAX
///   2. crossentropy_shard_sums: sums (2N) = [sum_j exp(l_nj - max_n) (N), the target's
///      logit if it is in this shard, else 0 (N)]                         -> all-reduce SUM
///   3. crossentropy_shard_forward: probs (N, Vl) = exp(l - max) / sum, WRITES losses (N)
///      = log(sum) - (target logit - max).
/// With one shard (v_begin 0, Vl V) the three are crossentropy_forward, bitwise.
template <typename T>
void crossentropy_shard_max(T* maxes, const T* logits, int N, int Vl);
template <typename T>
void crossentropy_shard_sums(T* sums, const T* logits, const T* maxes, const int32_t* targets, int N, int Vl,
                             int v_begin);
template <typename T>
void crossentropy_shard_forward(T* losses, T* probs, const T* logits, const T* maxes, const T* sums, int N, int Vl);
/// dlogits (N, Vl) = (probs - onehot(targets - v_begin)) * dloss, the one-hot only where the
/// target lies in the shard. WRITES, as crossentropy_backward (which it is for one shard).
template <typename T>
void crossentropy_shard_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N, int Vl,
                                 int v_begin);

/// One AdamW step at step number `t` (1-based) over n elements with `hp` (kernels/adamw.h):
/// updates param, m and v in place from grad. m and v start at zero.
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, const AdamWParams& hp, int t);

}  // namespace dtb::cpu
