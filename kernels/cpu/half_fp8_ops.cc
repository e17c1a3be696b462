// HalfCpuOps<H>'s FP8 linears by half_ops.h's recipe: the H operands widened to float (exact),
// the float FP8 linear of kernels/cpu/fp8_gemm.h (which quantizes them as each Fp8Operand says),
// each H output rounded once; the accumulated outputs (dinp, dweight, dbias) are widened, added
// to in float and rounded once, as matmul_backward does.
#include <cstddef>

#include "kernels/cpu/fp8_gemm.h"
#include "kernels/cpu/half_ops.h"

namespace dtb {

template <typename H>
float HalfCpuOps<H>::amax(const H* x, size_t n) {
  float* f = buf(0, n);
  convert_to_float(f, x, n);
  return fp8_amax(f, n);
}

template <typename H>
void HalfCpuOps<H>::fp8_matmul_forward(H* out, const H* inp, const H* weight, const H* bias, int N, int C, int OC,
                                       const Fp8Operand& xo, const Fp8Operand& wo) {
  linear_forward_in_float(out, inp, weight, bias, N, C, OC, [&](float* o, const float* x, const float* w,
                                                                 const float* b) {
    cpu::fp8_linear_forward(o, x, w, b, N, C, OC, xo, wo);
  });
}

template <typename H>
void HalfCpuOps<H>::fp8_matmul_backward(H* dinp, H* dweight, H* dbias, const H* dout, const H* inp, const H* weight,
                                        int N, int C, int OC, const Fp8Operand& dy, const Fp8Operand& xo,
                                        const Fp8Operand& wo) {
  linear_backward_in_float(dinp, dweight, dbias, dout, inp, weight, N, C, OC,
                           [&](float* dx, float* dw, float* db, const float* d, const float* x, const float* w) {
                             cpu::fp8_linear_backward(dx, dw, db, d, x, w, N, C, OC, dy, xo, wo);
                           });
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
