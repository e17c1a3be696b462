// The shape model of a GPU's GEMMs and fused attention: a kernel's time from its M, N, K (or its
// batch, heads, sequence and head dimension) and precision, by tile and wave quantization over
// the device's SMs and the memory-bound floor. Not here: the step's ops (step_time_model.h), the
// figures (harness/hardware/*.json). Equations and sources: docs/plan.md#gemm-and-attention-shapes.
// Legend: M x K times K x N, tm x tn a tile, SMs the device's streaming multiprocessors, e the
// element's bytes, b sequences, h heads, s_q / s_k query / key rows, d the head dimension.
#pragma once
#include <array>
#include <vector>

#include "reference/analytic/memory_model.h"

namespace dtb {

/// A GEMM output tile a cuBLAS-like library picks from (rows of M by columns of N).
struct GemmTile {
  int m = 128, n = 128;
};

/// The fused attention kernel's achievable fraction of the dense peak at one head dimension,
/// for its forward and backward kernels (FlashAttention-2, Dao 2023, arXiv 2307.08691 Sec. 4.1).
struct FusedAttentionFraction {
  int head_dim = 128;
  double forward = 0, backward = 0;
};

/// What the shape model needs of a GPU (SI units). sm_count SMs; tiles the library's output
/// tiles, largest first (ties go to the earlier one); peak_flops the dense peak and
/// gemm_fraction the fraction of it a full wave of the largest tile reaches (a measured large
/// GEMM), per precision (index int(Precision)); l2_bytes_per_s the L2 bandwidth all SMs share,
/// which feeds the tiles' operands; memory_bytes_per_s the HBM bandwidth a memory-bound kernel
/// reaches; gemm_alpha_s / attention_alpha_s a call's fixed cost (launch and tail) per precision;
/// attention
/// the fused kernel's fractions by head dimension, ascending.
struct GemmShapeModel {
  int sm_count = 0;
  std::vector<GemmTile> tiles;
  std::array<double, 3> peak_flops{};
  std::array<double, 3> gemm_fraction{};
  double l2_bytes_per_s = 0;
  double memory_bytes_per_s = 0;
  std::array<double, 3> gemm_alpha_s{}, attention_alpha_s{};
  std::vector<FusedAttentionFraction> attention;
};

/// Refuses, with an InputError naming the figure, a model that cannot price: sm_count < 1, no
/// tiles or a tile side < 1, a peak, fraction, bandwidth or alpha that is not finite or out of
/// range (fractions in (0, 1], rates > 0, alphas >= 0), attention fractions not ascending by
/// head dimension or empty.
void validate_gemm_shape_model(const GemmShapeModel& g);

/// Seconds of one GEMM, C (M x N) = A (M x K) B (K x N), at precision p (NVIDIA's Matrix
/// Multiplication Background guide, docs.nvidia.com/deeplearning/performance/
/// dl-performance-matrix-multiplication: tile and wave quantization):
///   alpha + max(min over tiles of waves(tile) x tile_time(tile), e (M K + K N + M N) / HBM)
/// with waves = ceil(ceil(M / tm) ceil(N / tn) / SMs) and tile_time = K max(2 tm tn / R,
/// e (tm + tn) / B), R = fraction x peak / SMs an SM's tensor rate, B = L2 / SMs its share of
/// the L2 bandwidth that brings each K step's tm + tn operand elements (a small tile reuses each
/// element less, so it starves first). Errors: InputError for M, N or K < 1, or a model that
/// validate_gemm_shape_model refuses.
double gemm_seconds(const GemmShapeModel& g, int64_t M, int64_t N, int64_t K, Precision p);

/// Seconds of one fused attention kernel (FlashAttention-2, Dao 2023, arXiv 2307.08691 Sec. 3.2
/// and Algorithm 1-2): forward the grid's blocks are b h ceil(s_q / 128) tiles of 128 queries,
/// each running over ceil(s_k / 128) key tiles at 4 x 128^2 d FLOPs a pair (QK^T and PV);
/// backward the blocks are b h ceil(s_k / 128) key tiles, each over the query tiles at 10 x 128^2
/// d FLOPs a pair (five GEMMs, 2.5 times the forward's: flash-attn's benchmark convention).
/// Causal masking (bottom-right aligned, key j visible to query i when j <= i + s_k - s_q) skips
/// the pairs wholly above the diagonal, so a causal kernel does about half the square's pairs.
/// Blocks run longest first on the first free SM (wave quantization of unequal blocks) at
/// R = fraction(d) x peak / SMs, fraction linear in d between the model's head dimensions
/// (clamped at the ends); the floor is the HBM bytes of Q, K, V, O (and dO, dQ, dK, dV
/// backward) and the fp32 log-sum-exp. Errors: InputError for a size < 1, or an invalid model.
double fused_attention_seconds(const GemmShapeModel& g, int64_t b, int64_t heads, int64_t s_q, int64_t s_k,
                               int64_t head_dim, bool causal, bool forward, Precision p);

/// Seconds of attention's core as a materializing stack runs it (Megatron-LM's CoreAttention:
/// torch.baddbmm for Q K^T, the fused scale-mask-softmax kernel scaled_upper_triang_masked_softmax,
/// torch.bmm for P V), over b x heads (s_q x s_k) score matrices of head dimension d: the batched
/// GEMMs at their shapes (gemm_seconds with the batch folded into M: each matrix's tiles are its
/// own), and the softmax's pass over the scores at the HBM rate: it reads and writes them
/// (backward: reads P and dP, writes dS). Dropout on the probabilities is its own op
/// (step_time_model.cc's attention_dropout ops).
/// Forward: S = Q K^T (M b h s_q, N s_k, K d), P V (b h s_q, d, s_k); backward: dV = P^T dO
/// (b h s_k, d, s_q), dP = dO V^T (b h s_q, s_k, d), dQ = dS K (b h s_q, d, s_k), dK = dS^T Q
/// (b h s_k, d, s_q). Causal masking saves nothing: the full square is computed and stored.
/// Errors: InputError for a size < 1, or an invalid model.
double materialized_attention_seconds(const GemmShapeModel& g, int64_t b, int64_t heads, int64_t s_q, int64_t s_k,
                                      int64_t head_dim, bool forward, Precision p);

}  // namespace dtb
