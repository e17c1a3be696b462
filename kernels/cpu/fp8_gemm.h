// FP8 GEMMs emulated on the CPU: quantization of a matrix under each of the FP8 recipes' scaling
// granularities, and out = A · W^T over the quantized operands with fp32 accumulation, as the
// GPU's FP8 GEMMs define it (cuBLASLt's per-tensor A/B scales, DeepSeek-V3's and Transformer
// Engine's block-scaled GEMMs, MXFP8). The element conversions are kernels/fp8.h's.
//
// Shapes: A is N × K (activations or output gradients, row-major), W is OC × K (weights, as the
// reference model's matmul_forward stores them); K, the reduction dimension, is the rows' length.
//
// Scaling granularities (Fp8Scaling, kernels/fp8.h) and what each stores in Fp8Matrix::scale_inv (the multiplier
// that takes a code's value back to the tensor's: x ~ fp8_value(q) * scale_inv):
//   per_tensor     1 value (Transformer Engine's delayed and current scaling)
//   tile_1x128     rows × ceil(K/128): one scale per 128 consecutive elements of a row (DeepSeek-V3
//                  Sec. 3.3.1 and TE's Float8BlockScaling for activations and gradients)
//   block_128x128  ceil(rows/128) × ceil(K/128) (DeepSeek-V3's and TE's weights)
//   mx_1x32        rows × ceil(K/32), each a power of two 2^(e-127) from an E8M0 code (OCP MX v1.0)
// A tile or block at the matrix's edge covers what is there.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/fp8.h"

namespace dtb::cpu {


/// A quantized rows × cols matrix (row-major codes) with its dequantization multipliers laid out
/// as the file comment says; `e8m0` holds the MX scales' codes (mx_1x32 only).
struct Fp8Matrix {
  int rows = 0, cols = 0;
  Fp8Format format = Fp8Format::e4m3;
  Fp8Scaling scaling = Fp8Scaling::per_tensor;
  std::vector<uint8_t> q;
  std::vector<float> scale_inv;
  std::vector<uint8_t> e8m0;
  /// The multiplier of element (r, c), 0 <= r < rows, 0 <= c < cols (unchecked).
  float scale_inv_at(int r, int c) const;
};

/// Quantizes x (rows × cols, row-major) to `format` at granularity `scaling`:
///   per_tensor: q = fp8(x * scale), scale_inv = 1 / scale, with the caller's `scale` (delayed
///     scaling: the history's; current: fp8_scale_from_amax of the whole tensor's amax, which a
///     sharded tensor reduces over its group first);
///   tile_1x128, block_128x128: each tile's scale = fp8_scale_from_amax(its amax, fp8_max(format),
///     pow2 = true, 0, FLT_MAX) (TE's Float8BlockScaling defaults: power-of-two scales, no
///     epsilon), q = fp8(x * scale), scale_inv = 1 / scale (exact: a power of two);
///   mx_1x32: each block by mxfp8_quantize_block.
/// Aborts (DTB_CHECK: the callers validate) for rows or cols < 1, or a per-tensor scale that is
/// not positive and finite.
Fp8Matrix fp8_quantize(const float* x, int rows, int cols, Fp8Format format, Fp8Scaling scaling,
                       float scale = 1.0f);

/// What a quantization did to a tensor's values (fp8_count): of `values` elements, `zeros` were
/// 0 already, `flushed` were not but quantized to a zero code (underflow below half the smallest
/// subnormal at their scale), `saturated` were clamped to the format's largest finite value (|x| ·
/// scale at or beyond fp8_max plus half its ulp, 464 for E4M3 and 61440 for E5M2: the cast's
/// saturation, not a rounding down to fp8_max; an infinity is clamped too). The per-tensor multiplier
/// is 1 / scale rounded once, so a value within a rounding of the clamp boundary may be counted on
/// either side of it. NaNs are in values alone.
struct Fp8Counts {
  int64_t values = 0, zeros = 0, flushed = 0, saturated = 0;
  Fp8Counts& operator+=(const Fp8Counts& o) {
    values += o.values, zeros += o.zeros, flushed += o.flushed, saturated += o.saturated;
    return *this;
  }
};

/// The counts of `q` = fp8_quantize(x, q.rows, q.cols, ...) against its source `x` (q.rows ×
/// q.cols, row-major). Transformer Engine reports neither share; they are the precision suite's
/// (suites/precision.cc) view of how well a recipe's scales fit its tensors.
Fp8Counts fp8_count(const float* x, const Fp8Matrix& q);

/// The K-block over which `a` and `w` share their scales in a GEMM of reduction length K: K for
/// per_tensor with per_tensor; 128 for 1×128 with 1×128, 1×128 with 128×128 and 128×128 with 1×128
/// (TE's cublaslt_gemm.cu runs "1D by 1D, 1D by 2D, and 2D by 1D block scaling", not 2D by 2D); 32
/// for MX with MX; 0 for any other pair (a GEMM that no FP8 recipe runs).
int fp8_gemm_k_block(Fp8Scaling a, Fp8Scaling w, int K);

/// out (N × OC, WRITTEN) = A (N × K) · W (OC × K)^T from the quantized operands, in float:
/// for each K-block b (fp8_gemm_k_block), partial_b = sum of fp8(a)·fp8(w) over the block's k in
/// ascending order in float (every product is exact in float), then
/// out += partial_b * (a's scale_inv · w's scale_inv for that block), the blocks in ascending
/// order; per_tensor pairs are one block (cuBLASLt's D = scale_a·scale_b·(A·B)). Every product is
/// exact, so, barring underflow and overflow (scales' products beyond float's range), |out - the
/// exact product of the quantized values| <= gamma_{B + ceil(K/B)} · sum_k |a_k w_k| (values with
/// their scales; gamma_n = n u / (1 - n u), u = 2^-24, B the block: B - 1 additions in a block, the
/// scales' product and its multiply, ceil(K/B) - 1 additions of the blocks;
/// kernels/cpu/fp8_gemm_test.cc holds it to that). Every block is accumulated in float, as cuBLASLt
/// with split accumulation (TE's dgrad and wgrad); TE's Float8CurrentScaling runs the fprop
/// without it (use_split_accumulator False: Hopper's faster, narrower accumulator), which this
/// emulation does not model. Aborts (DTB_CHECK) when K differs,
/// fp8_gemm_k_block is 0, or both operands are E5M2 (cuBLASLt's FP8 GEMMs take at most one).
void fp8_gemm_nt(float* out, const Fp8Matrix& a, const Fp8Matrix& w);

/// An FP8 linear's forward GEMM (Transformer Engine's te.Linear fprop under fp8_autocast, the
/// reference model's matmul_forward with weight (OC, C) as torch.nn.Linear): out (N × OC,
/// WRITTEN) = fp8(inp) (N × C) · fp8(weight)^T + bias, by fp8_gemm_nt with K = C (inp as `x`,
/// weight as `w`), the bias (OC; may be null) added to the float result (cuBLASLt's bias
/// epilogue). Aborts (DTB_CHECK) on N, C or OC < 1 and as fp8_quantize and fp8_gemm_nt.
void fp8_linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                        const Fp8Operand& x, const Fp8Operand& w);

/// The FP8 linear's backward GEMMs, with matmul_backward's accumulate rules (kernels/cpu/ops.h;
/// each of dinp, dweight, dbias may be null, and B then W give bitwise one call's values):
///   dgrad  dinp (N × C) += fp8(dout) (N × OC) · fp8(weight) (OC × C): operands dout (`dy`) and
///          weight^T (C × OC, `w`), K = OC;
///   wgrad  dweight (OC × C) += fp8(dout)^T · fp8(inp): operands dout^T (OC × N, `dy`) and inp^T
///          (C × N, `x`), K = N;
///   dbias  (OC) += the column sums of dout in float, unquantized (TE's fused cast and dbias
///          reads the high-precision gradient), rows in ascending order.
/// Each GEMM's operands are quantized along its own K (a transposed operand from the high-precision
/// values, TE's columnwise usage): per-tensor codes are those of the untransposed tensor, as a
/// 128 × 128 block covers the same elements in W and W^T; 1 × 128 tiles and 1 × 32 MX blocks
/// run along the other dimension. `x` and `w` as for the forward; `dy` quantizes dout. Aborts as
/// the forward, and (DTB_CHECK) for dinp without weight or dweight without inp.
void fp8_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC, const Fp8Operand& dy, const Fp8Operand& x,
                         const Fp8Operand& w);

}  // namespace dtb::cpu
