// The FLOP count of a GEMM, the one formula behind every GEMM rate dtbench reports (the gemm
// suite's TFLOP/s, validate's GFLOP/s per rank): C (M,N) = A (M,K) B (K,N) takes M N K
// multiply-adds, 2 M N K floating-point operations. A count, not a timer.
#pragma once
#include <cstdint>

namespace dtb {

/// 2 M N K: the floating-point operations of C (M,N) = A (M,K) B (K,N). Divide by seconds
/// for FLOP/s.
inline double gemm_flops(int64_t M, int64_t N, int64_t K) { return 2.0 * double(M) * double(N) * double(K); }

}  // namespace dtb
