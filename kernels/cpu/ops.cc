// CPU forward/backward ops of a GPT-2 style transformer (see ops.h for the contract), written
// after llm.c's train_gpt2.c: the embedding (and its vocabulary shards), LayerNorm, the
// linear layer, GELU, the residual and AdamW. Attention and cross-entropy have files of their
// own (attention.cc, crossentropy.cc). Matmuls go through OpenBLAS gemm; everything else is
// plain loops. Ops never allocate: they work in place in their outputs.
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "kernels/cpu/ops_common.h"

namespace dtb::cpu {

using namespace detail;

// ---- encoder ----

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      T* o = out + (size_t(b) * Tn + t) * C;
      const T* we = wte + size_t(tokens[size_t(b) * Tn + t]) * C;
      const T* pe = wpe + size_t(t) * C;
      for (int i = 0; i < C; i++) o[i] = we[i] + pe[i];
    }
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                      int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      const T* d = dout + (size_t(b) * Tn + t) * C;
      T* dwe = dwte + size_t(tokens[size_t(b) * Tn + t]) * C;
      T* dpe = dwpe + size_t(t) * C;
      for (int i = 0; i < C; i++) {
        dwe[i] += d[i];
        dpe[i] += d[i];
      }
    }
  }
}

template <typename T>
void embedding_shard_forward(T* out, const int32_t* tokens, const T* wte_shard, const T* wpe, int B, int Tn,
                             int C, int v_begin, int v_end) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      T* o = out + (size_t(b) * Tn + t) * C;
      const int32_t tok = tokens[size_t(b) * Tn + t];
      const bool mine = tok >= v_begin && tok < v_end;
      const T* we = mine ? wte_shard + size_t(tok - v_begin) * C : nullptr;
      const T* pe = wpe ? wpe + size_t(t) * C : nullptr;
      for (int i = 0; i < C; i++) o[i] = (we ? we[i] : T(0)) + (pe ? pe[i] : T(0));
    }
  }
}

template <typename T>
void embedding_shard_backward(T* dwte_shard, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                              int v_begin, int v_end) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < Tn; t++) {
      const T* d = dout + (size_t(b) * Tn + t) * C;
      const int32_t tok = tokens[size_t(b) * Tn + t];
      if (tok >= v_begin && tok < v_end) {
        T* dwe = dwte_shard + size_t(tok - v_begin) * C;
        for (int i = 0; i < C; i++) dwe[i] += d[i];
      }
      if (dwpe) {
        T* dpe = dwpe + size_t(t) * C;
        for (int i = 0; i < C; i++) dpe[i] += d[i];
      }
    }
  }
}

template <typename T>
void scale(T* x, T a, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

template <typename T>
void add_bias(T* out, const T* bias, int N, int OC) {
  for (int n = 0; n < N; n++) {
    T* o = out + size_t(n) * OC;
    for (int i = 0; i < OC; i++) o[i] += bias[i];
  }
}

// ---- layernorm ----

template <typename T>
DTB_VECTOR_CLONES void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
  const T eps = T(1e-5);
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    // Two passes (mean, then centred squares) rather than E[x^2] - m^2, which cancels
    // catastrophically in float when |mean| >> std.
    const T m = sum_over<T>(C, [x](int i) DTB_INLINE_LAMBDA { return x[i]; }) / T(C);
    const T var = sum_over<T>(C, [x, m](int i) DTB_INLINE_LAMBDA { return (x[i] - m) * (x[i] - m); }) / T(C);  // biased, as torch
    const T s = T(1) / std::sqrt(var + eps);
    T* o = out + size_t(n) * C;
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
DTB_VECTOR_CLONES void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    const T* d = dout + size_t(n) * C;
    const T m = mean[n], s = rstd[n];
    // With xhat = (x - m) * s and g = weight * dout, the input gradient is
    // s * (g - mean(g) - xhat * mean(g * xhat)): the two means are the paths through m and s.
    const T g_mean = sum_over<T>(C, [weight, d](int i) DTB_INLINE_LAMBDA { return weight[i] * d[i]; }) / T(C);
    const T g_xhat_mean =
        sum_over<T>(C, [weight, d, x, m, s](int i) DTB_INLINE_LAMBDA { return weight[i] * d[i] * (x[i] - m) * s; }) / T(C);
    T* dx = dinp + size_t(n) * C;
    for (int i = 0; i < C; i++) {
      const T xhat = (x[i] - m) * s;
      dbias[i] += d[i];
      dweight[i] += xhat * d[i];
      dx[i] += (weight[i] * d[i] - g_mean - xhat * g_xhat_mean) * s;
    }
  }
}

// ---- matmul ----

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  // Seed out with the bias rows and let gemm accumulate (beta = 1): no second pass over out.
  if (bias) {
    for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + size_t(n) * OC);
  } else {
    std::fill(out, out + size_t(N) * OC, T(0));
  }
  if (C <= 0) return;  // BLAS rejects lda = 0; the product is empty anyway
  gemm(false, true, N, OC, C, T(1), inp, C, weight, C, T(1), out, OC);
}

template <typename T>
DTB_VECTOR_CLONES void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C > 0) {
    if (dinp) gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
    if (dweight) gemm(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  }
  if (dbias) {
    for (int n = 0; n < N; n++) {
      const T* d = dout + size_t(n) * OC;
      for (int o = 0; o < OC; o++) dbias[o] += d[o];
    }
  }
}

// ---- gelu ----

// GELU (tanh form) as x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3), since
// 0.5 (1 + tanh z) = 1 / (1 + e^-2z): one exponential, no cancellation where tanh z -> -1.
// The backward uses 1 + tanh z = 2 sig and sech^2 z = 4 sig (1 - sig) = 4 e sig^2 (e = e^-2z),
// exact where sig -> 1 (1 - sig would cancel there).
template <typename T>
DTB_VECTOR_CLONES void gelu_forward(T* out, const T* inp, size_t n) {
  const T s = T(std::sqrt(2.0 / std::numbers::pi));
  for (size_t i = 0; i < n; i++) {
    const T x = inp[i];
    const T e = exp_clamped(T(-2) * s * (x + T(0.044715) * x * x * x));
    out[i] = x * (T(1) / (T(1) + e));
  }
}

template <typename T>
DTB_VECTOR_CLONES void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T s = T(std::sqrt(2.0 / std::numbers::pi));
  for (size_t i = 0; i < n; i++) {
    const T x = inp[i];
    const T a = T(-2) * s * (x + T(0.044715) * x * x * x);
    const T e = exp_clamped(a);
    const T sig = T(1) / (T(1) + e);
    // d/dx [x sig(2z)] = sig + x * 2 sig (1 - sig) * z', z' = s (1 + 3 * 0.044715 x^2). Where
    // the exponent is clamped (|2z| >= the clamp) the second term is 0 in exact arithmetic
    // (below 1e-30 at the clamp, and falling like x^3 e^(-2z) beyond it), but the clamped e
    // would make it grow like x^3 e^-80: it is dropped there. NaN fails both tests: NaN.
    const T t2 = T(2) * x * (e * sig * sig) * s * (T(1) + T(3 * 0.044715) * x * x);
    const T grad = sig + (a > -exp_clamp_bound<T>() && a < exp_clamp_bound<T>() ? t2 : T(0));
    dinp[i] += grad * dout[i];
  }
}

// ---- residual ----

template <typename T>
DTB_VECTOR_CLONES void residual_forward(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}


// ---- AdamW ----

template <typename T>
DTB_VECTOR_CLONES void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, const AdamWParams& hp, int t) {
  const T lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps;
  const T decay = T(1) - lr * T(hp.weight_decay);
  // Bias corrections in double: 1 - beta2^t is a small difference of numbers near 1.
  const T inv_bc1 = T(1.0 / (1.0 - std::pow(double(hp.beta1), t)));
  const T inv_bc2 = T(1.0 / (1.0 - std::pow(double(hp.beta2), t)));
  for (size_t i = 0; i < n; i++) {
    const T g = grad[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    // Decay is applied to the pre-step parameter and kept out of m and v (decoupled).
    param[i] = param[i] * decay - lr * (mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps);
  }
}

// ---- explicit instantiations ----

#define DTB_INSTANTIATE_OPS(T)                                                                   \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int);       \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int);            \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);        \
  template void embedding_shard_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, int, int); \
  template void embedding_shard_backward<T>(T*, T*, const T*, const int32_t*, int, int, int, int, int);     \
  template void add_bias<T>(T*, const T*, int, int);                                                     \
  template void scale<T>(T*, T, size_t);                                                                 \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,        \
                                      const T*, int, int);                                       \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);              \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);     \
  template void gelu_forward<T>(T*, const T*, size_t);                                           \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);                                \
  template void residual_forward<T>(T*, const T*, const T*, size_t);                             \
  template void adamw_update<T>(T*, const T*, T*, T*, size_t, const AdamWParams&, int);

DTB_INSTANTIATE_OPS(float)
DTB_INSTANTIATE_OPS(double)
#undef DTB_INSTANTIATE_OPS

}  // namespace dtb::cpu
