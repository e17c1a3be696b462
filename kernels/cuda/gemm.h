// GEMM on the GPU through cuBLASLt (cublasLtMatmul), always accumulating in fp32, plus the
// row-major matmul_forward / matmul_backward of a linear layer with the CPU semantics of
// kernels/cpu/ops.h (after llm.c's train_gpt2.cu, matmul_cublaslt).
//
// Row-major <-> column-major mapping (cuBLASLt is column-major): a row-major matrix X
// (r, c) with leading dimension ld is, read column-major, X^T (c, r) with the same ld. So the
// row-major C (M,N) = op(A) (M,K) @ op(B) (K,N) is computed as the column-major
// C^T (N,M) = op(B)^T (N,K) @ op(A)^T (K,M): cuBLASLt's "A" is our B (transposed iff
// transB), its "B" is our A (transposed iff transA), and m' = N, n' = M, k' = K.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <map>

namespace dtb::cuda {

/// Input precision of a GEMM; the accumulation and the scale type (alpha, beta) are fp32
/// in every case, and C/D are always float.
///  - fp32: A, B float; CUBLAS_COMPUTE_32F (no TF32: IEEE fp32 products and sums).
///  - tf32: A, B float; CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores round the inputs to TF32,
///    10 mantissa bits; relative error ~1e-3).
///  - bf16: A, B __nv_bfloat16; C, D float; CUBLAS_COMPUTE_32F. The products of two bf16 are
///    exact in fp32, so the only error beyond fp32 accumulation is the caller's rounding of
///    the inputs. Float output is chosen so the result can be compared against (and used
///    like) the fp32 reference without a second rounding.
///  - fp16: as bf16 with __half inputs (fp16 has 5 exponent bits: values below ~6e-5 lose
///    precision and below ~6e-8 flush to 0, so unscaled small gradients underflow).
enum class GemmPrecision { fp32, tf32, bf16, fp16 };
/// "fp32", "tf32", "bf16", "fp16".
const char* to_string(GemmPrecision p);

/// A cuBLASLt handle, a 32 MiB device workspace for cuBLASLt (cudaMalloc'd in the
/// constructor, on the current device), a cache of matmul plans (descriptors, layouts and
/// the heuristic's algorithm) keyed by shape, strides, precision and pointer alignment, and
/// a growable device buffer for the half-precision casts of matmul_forward/backward.
/// Not thread-safe; use one Gemm per host thread and device. Nothing here synchronises,
/// except growing the cast buffer (see reserve_cast_buffer). The cast buffer is shared by
/// every bf16/fp16 matmul_forward/backward call, in stream order: such calls on different
/// streams must not overlap in time.
class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  /// Creates the handle and allocates the workspace; aborts (error sink) on failure.
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Row-major C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, op(X) = X^T when
  /// the flag is set; A is stored (M,K), or (K,M) when transA; B is stored (K,N), or (N,K)
  /// when transB; all dense (leading dimension = stored column count). A and B are float
  /// for fp32/tf32, __nv_bfloat16 / __half for bf16 / fp16; C is float. With beta == 0, C
  /// is not read (it may hold NaN). K == 0 gives C = beta * C. Enqueued on `s`.
  void matmul(const void* A, const void* B, float* C, int M, int N, int K, bool transA,
              bool transB, float alpha, float beta, GemmPrecision p, cudaStream_t s);

  /// As matmul, on `batch` independent problems with explicit row-major leading
  /// dimensions (elements between consecutive rows, >= the stored column count) and batch
  /// strides (elements between consecutive problems; ignored when batch == 1). Used by
  /// attention on the per-head (T, hs) slices of qkv (leading dimension 3C).
  void matmul_batched(const void* A, int lda, long long strideA, const void* B, int ldb,
                      long long strideB, float* C, int ldc, long long strideC, int batch, int M,
                      int N, int K, bool transA, bool transB, float alpha, float beta,
                      GemmPrecision p, cudaStream_t s);

  /// out (N,OC) = inp (N,C) @ weight^T + bias; weight (OC,C) as torch.nn.Linear; bias (OC)
  /// may be null. WRITES out. For bf16/fp16, inp and weight are first cast (round to nearest
  /// even) into the cast buffer: an extra read of 4 B and write of 2 B per input element
  /// on top of the GEMM, so it is correct but not a fast path.
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int N, int C, int OC, GemmPrecision p, cudaStream_t s);
  /// dinp (N,C) += dout (N,OC) @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) +=
  /// column sums of dout (in fp32 from the float dout, whatever p). ACCUMULATES (beta = 1).
  /// dinp, dweight and dbias may be null (skipped; with dinp null the weight is not read). For bf16/fp16 dout, weight and inp are cast into
  /// the cast buffer first (same cost note as matmul_forward).
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC,
                       GemmPrecision p, cudaStream_t s);

  /// Makes the cast buffer at least `bytes` large. Growing it synchronises the device (the
  /// old buffer may still be in use on any stream) and reallocates with cudaMalloc, so call
  /// this before a timed loop with the largest need: 2 * (N*C + OC*C) bytes for
  /// matmul_forward, 2 * (N*OC + OC*C + N*C) (+ 512 alignment) for matmul_backward.
  void reserve_cast_buffer(size_t bytes);
  size_t cast_buffer_bytes() const { return cast_bytes_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C=D
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::array<long long, 16>;
  const Plan& plan_for(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* cast_buf_ = nullptr;
  size_t cast_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace dtb::cuda
