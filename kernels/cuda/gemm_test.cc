// Tests of kernels/cuda/gemm: Gemm::matmul in every precision and all four transpose
// combinations against a double-precision host GEMM, the batched/strided form attention
// uses (with padded leading dimensions and 4-byte-aligned pointers), the K = 0 edge, and the
// linear-layer wrappers against the CPU ops (kernels/cpu/ops.h). Written outputs are
// poisoned with NaN first; accumulate-into outputs start from random values. Without a usable
// GPU every test is skipped with the reason.
//
// Error measure: ||gpu - ref|| / ||mag||, where mag is the same computation on absolute
// values (|alpha| |op(A)| |op(B)| + |beta| |C|, plus |bias| or the |initial value| of an
// accumulated output). That is the scale of the standard GEMM error bound
// |fl(C) - C| <= (input rounding + K u) * mag elementwise, so the measure cannot blow up
// where an element cancels (e.g. -0.75 ab + 0.5 c ~ 0), while any indexing, transpose or
// beta bug still gives ~||C|| / ||mag|| >~ 1 / sqrt(K), i.e. >= 0.05 here. u = 2^-24.
//  - fp32 vs double: fp32 accumulation, typically ~u sqrt(K) of ||C||, far less of ||mag||;
//    tol_fp32(K) = 4 u (sqrt(K) + 4).
//  - bf16 / fp16 on inputs already representable in the half type (so the reference sees the
//    same inputs): the products are exact in fp32 and the sums fp32, bounded by K u <= 1.6e-5
//    of mag for K <= 257; we allow 1e-4 (any fp32 reduction scheme cuBLASLt picks stays
//    inside), still 40x below the input rounding a mis-typed operand would show.
//  - tf32 on float inputs: each input rounded to 10 mantissa bits (2^-11; 2^-10 if
//    truncated): <= 2 * 2^-10 of mag; 4e-3.
//  - matmul_forward/backward with bf16 / fp16 on float inputs (cast inside): <= 2 * 2^-9
//    (bf16) or 2 * 2^-12 (fp16) of mag, plus the CPU's own fp32 error: 1e-2 and 2e-3.
#include "kernels/cuda/gemm.h"

#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_test_util.h"

namespace dtb::cuda {
namespace {

using namespace dtb::cuda::test_util;
constexpr GemmPrecision kAll[] = {GemmPrecision::fp32, GemmPrecision::tf32, GemmPrecision::bf16,
                                  GemmPrecision::fp16};

double tol_fp32(double k) { return 4.0 * kU * (std::sqrt(k) + 4.0); }
bool is_half(GemmPrecision p) { return p == GemmPrecision::bf16 || p == GemmPrecision::fp16; }


// Half bits of x, round to nearest even (bf16 on the bits; fp16 by the host conversion).
uint16_t half_bits(GemmPrecision p, float x) {
  if (p == GemmPrecision::bf16) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  const __half h = __float2half_rn(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float half_value(GemmPrecision p, uint16_t bits) {
  if (p == GemmPrecision::bf16) {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// An operand on the device in precision p: float, or half bits. For half precisions `host`
// is rounded in place to the values the device holds, so a reference sees the same inputs.
class Operand {
 public:
  Operand(FVec& host, GemmPrecision p) : f_(is_half(p) ? 0 : host.size()), h_(is_half(p) ? host.size() : 0) {
    if (!is_half(p)) {
      f_.upload(host);
      return;
    }
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); i++) {
      bits[i] = half_bits(p, host[i]);
      host[i] = half_value(p, bits[i]);
    }
    h_.upload(bits);
  }
  const void* get() const { return f_.get() ? static_cast<const void*>(f_.get()) : h_.get(); }

 private:
  DevBuf<float> f_;
  DevBuf<uint16_t> h_;
};

// Row-major reference C = alpha op(A) op(B) + beta C0 in double (C0 unread when beta == 0),
// and its magnitude |alpha| |op(A)| |op(B)| + |beta| |C0|; both (M, ldc).
struct Ref {
  std::vector<double> value, mag;
};
Ref ref_gemm(const FVec& A, int lda, const FVec& B, int ldb, const FVec& C0, int ldc, int M,
             int N, int K, bool ta, bool tb, double alpha, double beta) {
  Ref r{std::vector<double>(size_t(M) * ldc, 0.0), std::vector<double>(size_t(M) * ldc, 0.0)};
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      double s = 0, m = 0;
      for (int k = 0; k < K; k++) {
        const double a = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        const double b = tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
        s += a * b;
        m += std::abs(a * b);
      }
      const size_t c = size_t(i) * ldc + j;
      const double c0 = beta == 0 ? 0.0 : double(C0[c]);
      r.value[c] = alpha * s + beta * c0;
      r.mag[c] = std::abs(alpha) * m + std::abs(beta * c0);
    }
  }
  return r;
}

// ||got - want|| / ||mag|| over the (M, N) block of row-major matrices with leading dim ld
// (got starting at `offset`); NaN if got has a NaN, 0 if equal.
double scaled_err(const FVec& got, const Ref& ref, int M, int N, int ld, size_t offset = 0) {
  double num = 0, den = 0;
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      const size_t c = size_t(i) * ld + j;
      const double d = double(got[offset + c]) - ref.value[c];
      num += d * d;
      den += ref.mag[c] * ref.mag[c];
    }
  }
  if (num == 0) return 0;
  return std::sqrt(num / den);
}
double scaled_err(const FVec& got, const FVec& want, const FVec& mag) {
  EXPECT_EQ(got.size(), want.size());
  const Ref r{std::vector<double>(want.begin(), want.end()),
              std::vector<double>(mag.begin(), mag.end())};
  return scaled_err(got, r, 1, int(want.size()), int(want.size()));
}
FVec abs_of(const FVec& v) {
  FVec a(v.size());
  for (size_t i = 0; i < v.size(); i++) a[i] = std::abs(v[i]);
  return a;
}

double matmul_tol(GemmPrecision p, int K) {
  switch (p) {
    case GemmPrecision::fp32: return tol_fp32(K);
    case GemmPrecision::tf32: return 4e-3;
    default: return 1e-4;  // half inputs exactly representable: fp32 accumulation only
  }
}
double layer_tol(GemmPrecision p, int K) {
  switch (p) {
    case GemmPrecision::fp32: return tol_fp32(K);
    case GemmPrecision::tf32: return 4e-3;
    case GemmPrecision::bf16: return 1e-2;
    case GemmPrecision::fp16: return 2e-3;
  }
  return 0;
}

TEST(CudaGemm, MatmulAllPrecisionsAndTransposes) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(21);
  Stream s;
  Gemm gemm;
  struct Shape { int M, N, K; };
  for (const GemmPrecision p : kAll) {
    for (const Shape sh : {Shape{1, 1, 1}, Shape{7, 5, 3}, Shape{33, 65, 17}, Shape{64, 48, 128},
                           Shape{130, 31, 257}}) {
      for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
          const auto [M, N, K] = sh;
          SCOPED_TRACE(testing::Message() << to_string(p) << " M=" << M << " N=" << N << " K=" << K
                                          << " transA=" << ta << " transB=" << tb);
          FVec A = uniform(size_t(M) * K, rng), B = uniform(size_t(K) * N, rng);
          const Operand dA(A, p), dB(B, p);  // A, B now hold the device's values
          const int lda = ta ? M : K, ldb = tb ? K : N;
          // beta = 0 into NaN, then alpha = -0.75, beta = 0.5 onto random C.
          DevBuf<float> dC(size_t(M) * N);
          dC.poison();
          gemm.matmul(dA.get(), dB.get(), dC.get(), M, N, K, ta, tb, 1.0f, 0.0f, p, s);
          s.sync();
          const FVec none;
          EXPECT_LE(scaled_err(dC.download(),
                               ref_gemm(A, lda, B, ldb, none, N, M, N, K, ta, tb, 1, 0), M, N, N),
                    matmul_tol(p, K));
          const FVec C0 = uniform(size_t(M) * N, rng);
          dC.upload(C0);
          gemm.matmul(dA.get(), dB.get(), dC.get(), M, N, K, ta, tb, -0.75f, 0.5f, p, s);
          s.sync();
          EXPECT_LE(scaled_err(dC.download(),
                               ref_gemm(A, lda, B, ldb, C0, N, M, N, K, ta, tb, -0.75, 0.5), M, N,
                               N),
                    matmul_tol(p, K));
        }
      }
    }
  }
}

TEST(CudaGemm, BatchedStridedWithPaddingAndOddAlignment) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(22);
  Stream s;
  Gemm gemm;
  const int batch = 3, M = 5, N = 7, K = 9;
  for (int ta = 0; ta < 2; ta++) {
    for (int tb = 0; tb < 2; tb++) {
      SCOPED_TRACE(testing::Message() << "transA=" << ta << " transB=" << tb);
      // Padded rows and odd batch strides and offsets: each problem's pointer is only
      // 4-byte aligned, as attention's per-head slices can be.
      const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
      const long long sA = (long long)(ta ? K : M) * lda + 11, sB = (long long)(tb ? N : K) * ldb + 5;
      const long long sC = (long long)M * ldc + 3;
      const FVec A = uniform(size_t(sA) * batch + 1, rng), B = uniform(size_t(sB) * batch + 1, rng);
      const FVec C0 = uniform(size_t(sC) * batch + 1, rng);
      DevBuf<float> dA(A), dB(B), dC(C0);
      gemm.matmul_batched(dA.get() + 1, lda, sA, dB.get() + 1, ldb, sB, dC.get() + 1, ldc, sC,
                          batch, M, N, K, ta, tb, 0.5f, 2.0f, GemmPrecision::fp32, s);
      s.sync();
      const FVec C = dC.download();
      FVec want_untouched = C0;  // everything outside the (M, N) blocks keeps its value
      for (int b = 0; b < batch; b++) {
        const FVec Ab(A.begin() + 1 + b * sA, A.end()), Bb(B.begin() + 1 + b * sB, B.end());
        const FVec Cb(C0.begin() + 1 + b * sC, C0.end());
        const auto want = ref_gemm(Ab, lda, Bb, ldb, Cb, ldc, M, N, K, ta, tb, 0.5, 2.0);
        EXPECT_LE(scaled_err(C, want, M, N, ldc, 1 + b * sC), tol_fp32(K)) << "batch " << b;
        for (int i = 0; i < M; i++) {
          for (int j = 0; j < N; j++) {
            const size_t c = 1 + b * sC + size_t(i) * ldc + j;
            want_untouched[c] = C[c];
          }
        }
      }
      EXPECT_EQ(std::memcmp(C.data(), want_untouched.data(), C.size() * 4), 0);
    }
  }
}

TEST(CudaGemm, EmptyKScalesC) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(23);
  Stream s;
  Gemm gemm;
  const int M = 4, N = 6;
  DevBuf<float> dC(size_t(M) * N);
  dC.poison();
  gemm.matmul(nullptr, nullptr, dC.get(), M, N, 0, false, false, 1.0f, 0.0f, GemmPrecision::fp32, s);
  s.sync();
  EXPECT_EQ(dC.download(), FVec(size_t(M) * N, 0.0f));
  const FVec C0 = uniform(size_t(M) * N, rng);
  dC.upload(C0);
  gemm.matmul(nullptr, nullptr, dC.get(), M, N, 0, true, true, 1.0f, 0.5f, GemmPrecision::bf16, s);
  s.sync();
  FVec want = C0;
  for (float& x : want) x *= 0.5f;
  EXPECT_EQ(dC.download(), want);
}

struct LayerShape { int N, C, OC; };
const LayerShape kLayerShapes[] = {{1, 1, 1}, {5, 3, 7}, {66, 96, 40}, {128, 257, 33}, {4, 0, 5}};

TEST(CudaGemm, MatmulForwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(24);
  Stream s;
  Gemm gemm;
  for (const GemmPrecision p : kAll) {
    for (const LayerShape sh : kLayerShapes) {
      for (const bool with_bias : {false, true}) {
        const auto [N, C, OC] = sh;
        SCOPED_TRACE(testing::Message() << to_string(p) << " N=" << N << " C=" << C << " OC=" << OC
                                        << " bias=" << with_bias);
        const FVec inp = uniform(size_t(N) * C, rng), w = uniform(size_t(OC) * C, rng);
        const FVec bias = uniform(OC, rng);
        FVec want(size_t(N) * OC), mag(want.size());
        cpu::matmul_forward(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N,
                            C, OC);
        const FVec abs_bias = abs_of(bias);
        cpu::matmul_forward(mag.data(), abs_of(inp).data(), abs_of(w).data(),
                            with_bias ? abs_bias.data() : nullptr, N, C, OC);
        DevBuf<float> d_inp(inp), d_w(w), d_bias(bias), d_out(want.size());
        d_out.poison();
        gemm.matmul_forward(d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_bias.get() : nullptr,
                            N, C, OC, p, s);
        s.sync();
        EXPECT_LE(scaled_err(d_out.download(), want, mag), layer_tol(p, C));
      }
    }
  }
}

TEST(CudaGemm, MatmulBackwardMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(25);
  Stream s;
  Gemm gemm;
  for (const GemmPrecision p : kAll) {
    for (const LayerShape sh : kLayerShapes) {
      for (const int variant : {0, 1, 2}) {  // all outputs; no dinp; no dbias
        const auto [N, C, OC] = sh;
        SCOPED_TRACE(testing::Message() << to_string(p) << " N=" << N << " C=" << C << " OC=" << OC
                                        << " variant=" << variant);
        const bool has_dinp = variant != 1, has_dbias = variant != 2;
        const FVec dout = uniform(size_t(N) * OC, rng), inp = uniform(size_t(N) * C, rng);
        const FVec w = uniform(size_t(OC) * C, rng);
        FVec dinp = uniform(size_t(N) * C, rng), dw = uniform(size_t(OC) * C, rng);
        FVec db = uniform(OC, rng);
        DevBuf<float> d_dout(dout), d_inp(inp), d_w(w), d_dinp(dinp), d_dw(dw), d_db(db);
        FVec m_dinp = abs_of(dinp), m_dw = abs_of(dw), m_db = abs_of(db);  // magnitudes
        cpu::matmul_backward(m_dinp.data(), m_dw.data(), m_db.data(), abs_of(dout).data(),
                             abs_of(inp).data(), abs_of(w).data(), N, C, OC);
        cpu::matmul_backward(has_dinp ? dinp.data() : nullptr, dw.data(),
                             has_dbias ? db.data() : nullptr, dout.data(), inp.data(), w.data(), N,
                             C, OC);
        gemm.matmul_backward(has_dinp ? d_dinp.get() : nullptr, d_dw.get(),
                             has_dbias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(), d_w.get(),
                             N, C, OC, p, s);
        s.sync();
        // Skipped outputs are compared too: they must keep their initial values.
        EXPECT_LE(scaled_err(d_dinp.download(), dinp, m_dinp), layer_tol(p, OC)) << "dinp";
        EXPECT_LE(scaled_err(d_dw.download(), dw, m_dw), layer_tol(p, N)) << "dweight";
        // dbias: fp32 column sums of the float dout, whatever p.
        EXPECT_LE(scaled_err(d_db.download(), db, m_db), tol_fp32(N)) << "dbias";
      }
    }
  }
}

}  // namespace
}  // namespace dtb::cuda
