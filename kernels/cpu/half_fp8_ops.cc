// HalfCpuOps<H>'s FP8 linears by half_ops.h's recipe: the H operands widened to float (exact),
// the float FP8 linear of kernels/cpu/fp8_gemm.h (which quantizes them as each Fp8Operand says),
// each H output rounded once; the accumulated outputs (dinp, dweight, dbias) are widened, added
// to in float and rounded once, as matmul_backward does.
#include <cstddef>

#include "kernels/cpu/fp8_gemm.h"
#include "kernels/cpu/half_ops.h"

namespace dtb {

namespace {

size_t dim(int x) { return x > 0 ? size_t(x) : 0; }

}  // namespace

template <typename H>
float HalfCpuOps<H>::amax(const H* x, size_t n) {
  float* f = buf(0, n);
  convert_to_float(f, x, n);
  return fp8_amax(f, n);
}

template <typename H>
void HalfCpuOps<H>::fp8_matmul_forward(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC,
                                       const Fp8Operand& xo, const Fp8Operand& wo) {
  const size_t Ns = dim(N), Cs = dim(C), Os = dim(OC);
  float* x = buf(0, Ns * Cs);
  float* w = buf(1, Os * Cs);
  float* b = bias ? buf(2, Os) : nullptr;
  float* o = buf(3, Ns * Os);
  convert_to_float(x, inp, Ns * Cs);
  convert_to_float(w, weight, Os * Cs);
  if (bias) convert_to_float(b, bias, Os);
  cpu::fp8_linear_forward(o, x, w, b, N, C, OC, xo, wo);
  convert_from_float(out, o, Ns * Os);
}

template <typename H>
void HalfCpuOps<H>::fp8_matmul_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight,
                                        int N, int C, int OC, const Fp8Operand& dy, const Fp8Operand& xo,
                                        const Fp8Operand& wo) {
  const size_t Ns = dim(N), Cs = dim(C), Os = dim(OC);
  float* d = buf(0, Ns * Os);
  float* x = dweight ? buf(1, Ns * Cs) : nullptr;  // the input is read for dweight only
  float* w = dinp ? buf(2, Os * Cs) : nullptr;      // the weight for dinp only
  float* dx = dinp ? buf(3, Ns * Cs) : nullptr;
  float* dw = dweight ? buf(4, Os * Cs) : nullptr;
  float* db = dbias ? buf(5, Os) : nullptr;
  convert_to_float(d, dout, Ns * Os);
  if (dweight) {
    convert_to_float(x, inp, Ns * Cs);
    convert_to_float(dw, dweight, Os * Cs);
  }
  if (dinp) {
    convert_to_float(w, weight, Os * Cs);
    convert_to_float(dx, dinp, Ns * Cs);
  }
  if (dbias) convert_to_float(db, dbias, Os);
  cpu::fp8_linear_backward(dx, dw, db, d, x, w, N, C, OC, dy, xo, wo);  // accumulates
  if (dinp) convert_from_float(dinp, dx, Ns * Cs);
  if (dweight) convert_from_float(dweight, dw, Os * Cs);
  if (dbias) convert_from_float(dbias, db, Os);
}

#define DTB_INSTANTIATE_HALF_FP8_OPS(H)                                                                          \
  template float HalfCpuOps<H>::amax(const H*, size_t);                                                          \
  template void HalfCpuOps<H>::fp8_matmul_forward(H*, const H*, const H*, const H*, int, int, int,               \
                                                  const Fp8Operand&, const Fp8Operand&);                         \
  template void HalfCpuOps<H>::fp8_matmul_backward(H*, H*, H*, const H*, const H*, const H*, int, int, int,      \
                                                   const Fp8Operand&, const Fp8Operand&, const Fp8Operand&);
DTB_INSTANTIATE_HALF_FP8_OPS(bf16)
DTB_INSTANTIATE_HALF_FP8_OPS(fp16)
#undef DTB_INSTANTIATE_HALF_FP8_OPS

}  // namespace dtb
