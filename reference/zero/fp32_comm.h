// The host side of ZeRO's communication_data_type "fp32" with half gradients
// (reference/zero/zero.cc): widening T tensors to fp32 for the wire and rounding the sums back.
// Not a device kernel: Ops has no conversion op, so off the CPU the tensors go through host
// buffers. Shapes: n elements, flat.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/half.h"
#include "kernels/ops.h"

namespace dtb {

// Each function below works elementwise on the host. With `host` (a CPU device) the tensors
// are host memory, used in place; otherwise they are in the backend's memory and go through
// host buffers (ops.synchronize first, then copy_to_host / copy_from_host), to the same
// values: each element is widened exactly and rounded (to nearest even, kernels/half.h) once
// either way. Called between collectives, where the queued ops are synchronised anyway.
// Errors: none of their own.

/// dst (n) = src (n) element by element (kernels/half.h convert: exact from T to fp32, to
/// nearest even from fp32 to T), D and S being fp32 and T in either order.
template <typename T, typename D, typename S>
inline void convert_into(Ops<T>& ops, bool host, D* dst, const S* src, size_t n) {
  if (host) return convert(dst, src, n);
  std::vector<S> from(n);
  std::vector<D> to(n);
  ops.synchronize();
  ops.copy_to_host(from.data(), src, n * sizeof(S));
  convert(to.data(), from.data(), n);
  ops.copy_from_host(dst, to.data(), n * sizeof(D));
}

/// dst (n, fp32) = src (n, T) widened (exact).
template <typename T>
inline void widen_into(Ops<T>& ops, bool host, float* dst, const T* src, size_t n) {
  convert_into(ops, host, dst, src, n);
}

/// dst (n, T) = src (n, fp32) rounded to T.
template <typename T>
inline void narrow_into(Ops<T>& ops, bool host, T* dst, const float* src, size_t n) {
  convert_into(ops, host, dst, src, n);
}

/// acc (n, T) = acc + add (n, fp32), added in fp32 and rounded to T once.
template <typename T>
inline void add_wide_into(Ops<T>& ops, bool host, T* acc, const float* add, size_t n) {
  auto sum = [](T* a, const float* b, size_t k) {
    for (size_t j = 0; j < k; ++j) a[j] = T(float(a[j]) + b[j]);
  };
  if (host) return sum(acc, add, n);
  std::vector<T> a(n);
  std::vector<float> b(n);
  ops.synchronize();
  ops.copy_to_host(a.data(), acc, n * sizeof(T));
  ops.copy_to_host(b.data(), add, n * sizeof(float));
  sum(a.data(), b.data(), n);
  ops.copy_from_host(acc, a.data(), n * sizeof(T));
}

}  // namespace dtb
