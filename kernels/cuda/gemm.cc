// cuBLASLt GEMM (see gemm.h for the row-major <-> column-major mapping) and the linear-layer
// wrappers with the CPU semantics. One plan per distinct (shape, leading dimensions, batch
// strides, transposes, precision, pointer alignments): descriptors, layouts and the first
// algorithm of cublasLtMatmulAlgoGetHeuristic, made on first use and kept until the Gemm
// goes, so the steady state makes one cublasLtMatmul call per GEMM.
#include "kernels/cuda/gemm.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/error.h"

namespace dtb::cuda {
namespace {

cudaDataType_t input_type(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::bf16: return CUDA_R_16BF;
    case GemmPrecision::fp16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}
size_t input_size(GemmPrecision p) {
  return p == GemmPrecision::bf16 || p == GemmPrecision::fp16 ? 2 : 4;
}
bool is_half(GemmPrecision p) { return input_size(p) == 2; }
DType half_dtype(GemmPrecision p) { return p == GemmPrecision::bf16 ? DType::bf16 : DType::f16; }

// The alignment (bytes, a power of two <= 256) that every batch's pointer ptr + i * stride
// of a matrix has: cuBLASLt's heuristic assumes 256 unless told, and attention passes
// per-head pointers that are only 4-byte aligned when hs is odd.
long long alignment(const void* ptr, long long stride_elems, size_t elem, int batch) {
  uintptr_t x = reinterpret_cast<uintptr_t>(ptr) | uintptr_t(256);
  if (batch > 1) x |= uintptr_t(stride_elems) * elem;
  return (long long)(x & (~x + 1));  // lowest set bit
}

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

std::string shape_text(const std::array<long long, 16>& k) {
  return "M=" + std::to_string(k[0]) + " N=" + std::to_string(k[1]) + " K=" + std::to_string(k[2]) +
         " lda=" + std::to_string(k[3]) + " ldb=" + std::to_string(k[4]) + " ldc=" +
         std::to_string(k[5]) + " batch=" + std::to_string(k[9]) + " transA=" +
         std::to_string(k[10]) + " transB=" + std::to_string(k[11]) + " precision=" +
         to_string(GemmPrecision(k[12])) + " align=" + std::to_string(k[13]) + "/" +
         std::to_string(k[14]) + "/" + std::to_string(k[15]);
}

}  // namespace

const char* to_string(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::fp32: return "fp32";
    case GemmPrecision::tf32: return "tf32";
    case GemmPrecision::bf16: return "bf16";
    case GemmPrecision::fp16: return "fp16";
  }
  return "?";
}

Gemm::Gemm() {
  DTB_CUBLAS_CHECK(cublasLtCreate(&handle_));
  DTB_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Gemm::~Gemm() {
  // No error checks: at process exit the context may already be gone.
  for (auto& [key, plan] : plans_) {
    (void)cublasLtMatrixLayoutDestroy(plan.a);
    (void)cublasLtMatrixLayoutDestroy(plan.b);
    (void)cublasLtMatrixLayoutDestroy(plan.c);
    (void)cublasLtMatmulDescDestroy(plan.desc);
  }
  if (cast_buf_) (void)cudaFree(cast_buf_);
  if (workspace_) (void)cudaFree(workspace_);
  if (handle_) (void)cublasLtDestroy(handle_);
}

void Gemm::reserve_cast_buffer(size_t bytes) {
  if (bytes <= cast_bytes_) return;
  if (cast_buf_) {
    DTB_CUDA_CHECK(cudaDeviceSynchronize());  // the old buffer may be in use on any stream
    DTB_CUDA_CHECK(cudaFree(cast_buf_));
    cast_buf_ = nullptr;
    cast_bytes_ = 0;
  }
  DTB_CUDA_CHECK(cudaMalloc(&cast_buf_, bytes));
  cast_bytes_ = bytes;
}

// key: M N K lda ldb ldc strideA strideB strideC batch transA transB precision
//      alignA alignB alignC   (our A, B, C; cuBLASLt's A is our B and vice versa)
const Gemm::Plan& Gemm::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const int M = int(key[0]), N = int(key[1]), K = int(key[2]);
  const int lda = int(key[3]), ldb = int(key[4]), ldc = int(key[5]);
  const long long strideA = key[6], strideB = key[7], strideC = key[8];
  const int batch = int(key[9]);
  const bool transA = key[10] != 0, transB = key[11] != 0;
  const GemmPrecision p = GemmPrecision(key[12]);
  const cudaDataType_t in_type = input_type(p);
  const cublasComputeType_t compute =
      p == GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

  Plan plan;
  DTB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
  // Column-major C^T (N,M) = op'(B') (N,K) @ op'(A') (K,M) with B' = our B, A' = our A.
  const cublasOperation_t op_a = transB ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our B
  const cublasOperation_t op_b = transA ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our A
  DTB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                  sizeof(op_a)));
  DTB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                  sizeof(op_b)));
  // Our B stored row-major (K,N) [or (N,K) if transB] = column-major (N,K) [or (K,N)], ld ldb.
  DTB_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.a, in_type, transB ? K : N, transB ? N : K, ldb));
  // Our A stored row-major (M,K) [or (K,M) if transA] = column-major (K,M) [or (M,K)], ld lda.
  DTB_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.b, in_type, transA ? M : K, transA ? K : M, lda));
  // Our C row-major (M,N) = column-major (N,M), ld ldc; also the layout of D (= C).
  DTB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, N, M, ldc));
  if (batch > 1) {
    const int32_t count = batch;
    const int64_t strides[3] = {strideB, strideA, strideC};  // plan.a, plan.b, plan.c
    cublasLtMatrixLayout_t layouts[3] = {plan.a, plan.b, plan.c};
    for (int i = 0; i < 3; i++) {
      DTB_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      DTB_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof(int64_t)));
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  DTB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  DTB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = uint32_t(key[14]);  // cuBLASLt's A is our B
  const uint32_t align_b = uint32_t(key[13]);
  const uint32_t align_c = uint32_t(key[15]);
  DTB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  DTB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  DTB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  DTB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b,
                                                           plan.c, plan.c, pref, 1, &result,
                                                           &returned);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
    dtb::fatal(__FILE__, __LINE__,
               "cuBLASLt has no algorithm (status " + std::to_string(int(st)) + ") for " +
                   shape_text(key));
  }
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

void Gemm::matmul_batched(const void* A, int lda, long long strideA, const void* B, int ldb,
                          long long strideB, float* C, int ldc, long long strideC, int batch,
                          int M, int N, int K, bool transA, bool transB, float alpha, float beta,
                          GemmPrecision p, cudaStream_t s) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  if (K <= 0) {  // empty product: C = beta * C (cuBLASLt does not take k = 0)
    scale_matrix(C, M, N, ldc, strideC, batch, beta, s);
    return;
  }
  DTB_CHECK(lda >= (transA ? M : K) && ldb >= (transB ? K : N) && ldc >= N,
            "Gemm: leading dimension smaller than the row length");
  const size_t elem = input_size(p);
  const Key key = {M, N, K, lda, ldb, ldc,
                   batch > 1 ? strideA : 0, batch > 1 ? strideB : 0, batch > 1 ? strideC : 0,
                   batch, transA, transB, (long long)p,
                   alignment(A, strideA, elem, batch), alignment(B, strideB, elem, batch),
                   alignment(C, strideC, sizeof(float), batch)};
  const Plan& plan = plan_for(key);
  // With beta == 0 cuBLASLt does not read C, so C may be uninitialised (even NaN).
  DTB_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, B, plan.a, A, plan.b, &beta, C,
                                  plan.c, C, plan.c, &plan.algo, workspace_, kWorkspaceBytes, s));
}

void Gemm::matmul(const void* A, const void* B, float* C, int M, int N, int K, bool transA,
                  bool transB, float alpha, float beta, GemmPrecision p, cudaStream_t s) {
  matmul_batched(A, transA ? M : K, 0, B, transB ? K : N, 0, C, N, 0, 1, M, N, K, transA, transB,
                 alpha, beta, p, s);
}

void Gemm::matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                          int N, int C, int OC, GemmPrecision p, cudaStream_t s) {
  if (N <= 0 || OC <= 0) return;
  const void* a = inp;
  const void* b = weight;
  if (is_half(p) && C > 0) {
    const size_t n_inp = size_t(N) * C, n_w = size_t(OC) * C;
    const size_t off_w = round_up(n_inp * 2, 256);
    reserve_cast_buffer(off_w + n_w * 2);
    char* buf = static_cast<char*>(cast_buf_);
    cast(buf, half_dtype(p), inp, DType::f32, n_inp, s);
    cast(buf + off_w, half_dtype(p), weight, DType::f32, n_w, s);
    a = buf;
    b = buf + off_w;
  }
  // out (N,OC) = inp (N,C) @ weight^T, weight stored (OC,C); then the bias row on top.
  matmul(a, b, out, N, OC, C, false, true, 1.0f, 0.0f, p, s);
  if (bias) add_bias(out, bias, N, OC, s);
}

void Gemm::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int N, int C, int OC,
                           GemmPrecision p, cudaStream_t s) {
  if (N <= 0 || OC <= 0) return;
  if (C > 0) {
    const void* d = dout;
    const void* x = inp;
    const void* w = weight;
    if (is_half(p)) {
      const size_t n_d = size_t(N) * OC, n_x = size_t(N) * C, n_w = size_t(OC) * C;
      const size_t off_x = round_up(n_d * 2, 256);
      const size_t off_w = off_x + round_up(n_x * 2, 256);
      reserve_cast_buffer(off_w + n_w * 2);
      char* buf = static_cast<char*>(cast_buf_);
      cast(buf, half_dtype(p), dout, DType::f32, n_d, s);
      if (dweight) cast(buf + off_x, half_dtype(p), inp, DType::f32, n_x, s);
      if (dinp) cast(buf + off_w, half_dtype(p), weight, DType::f32, n_w, s);
      d = buf;
      x = buf + off_x;
      w = buf + off_w;
    }
    // dinp (N,C) += dout (N,OC) @ weight (OC,C)
    if (dinp) matmul(d, w, dinp, N, C, OC, false, false, 1.0f, 1.0f, p, s);
    // dweight (OC,C) += dout^T (OC,N) @ inp (N,C); dout stored (N,OC)
    if (dweight) matmul(d, x, dweight, OC, C, N, true, false, 1.0f, 1.0f, p, s);
  }
  if (dbias) column_sum_accumulate(dbias, dout, N, OC, s);
}

}  // namespace dtb::cuda
