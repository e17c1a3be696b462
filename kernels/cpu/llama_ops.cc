// CPU forward/backward ops of the Llama block (contract: ops.h): RMSNorm, SwiGLU and rotary
// position embeddings. Grouped-query attention is attention.cc's. Plain loops, no allocation.
#include <cmath>
#include <cstddef>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_common.h"

namespace dtb::cpu {

using namespace detail;

// ---- RMSNorm ----

template <typename T>
DTB_VECTOR_CLONES void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, T eps, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    const T ms = sum_over<T>(C, [x](int i) DTB_INLINE_LAMBDA { return x[i] * x[i]; }) / T(C);
    const T s = T(1) / std::sqrt(ms + eps);
    T* o = out + size_t(n) * C;
    for (int i = 0; i < C; i++) o[i] = x[i] * s * weight[i];  // (x rstd) w, as Hugging Face's LlamaRMSNorm
    rstd[n] = s;
  }
}

template <typename T>
DTB_VECTOR_CLONES void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                                        const T* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    const T* d = dout + size_t(n) * C;
    const T s = rstd[n];
    // y = w x r with r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / C: dx = r (g - xhat mean(g xhat)).
    const T g_xhat_mean =
        sum_over<T>(C, [weight, d, x, s](int i) DTB_INLINE_LAMBDA { return weight[i] * d[i] * (x[i] * s); }) / T(C);
    T* dx = dinp + size_t(n) * C;
    for (int i = 0; i < C; i++) {
      const T xhat = x[i] * s;
      dweight[i] += xhat * d[i];
      dx[i] += (weight[i] * d[i] - xhat * g_xhat_mean) * s;
    }
  }
}

// ---- SwiGLU ----

// silu(g) = g sig(g), sig = 1 / (1 + e), e = e^-g (clamped as the softmaxes': ops_common.h). The
// derivative sig + g sig (1 - sig) uses 1 - sig = e sig, exact where sig -> 1.
template <typename T>
DTB_VECTOR_CLONES void swiglu_forward(T* out, const T* inp, int N, int F) {
  for (int n = 0; n < N; n++) {
    const T* gate = inp + size_t(n) * 2 * F;
    const T* up = gate + F;
    T* o = out + size_t(n) * F;
    for (int i = 0; i < F; i++) {
      const T g = gate[i];
      o[i] = g * (T(1) / (T(1) + exp_clamped(-g))) * up[i];
    }
  }
}

template <typename T>
DTB_VECTOR_CLONES void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) {
  for (int n = 0; n < N; n++) {
    const T* gate = inp + size_t(n) * 2 * F;
    const T* up = gate + F;
    const T* d = dout + size_t(n) * F;
    T* dgate = dinp + size_t(n) * 2 * F;
    T* dup = dgate + F;
    for (int i = 0; i < F; i++) {
      const T g = gate[i];
      const T e = exp_clamped(-g);
      const T sig = T(1) / (T(1) + e);
      dgate[i] += d[i] * up[i] * (sig * (T(1) + g * (e * sig)));
      dup[i] += d[i] * (g * sig);
    }
  }
}

// ---- rotary position embeddings ----

namespace {
// Rotates every (i, i + hs/2) pair of the NH + KV query and key heads (the first NH + KV heads of
// each packed row) by angle `sign` * a(p, i): the forward (+1) and its transpose (-1).
template <typename T>
void rope_rotate(T* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta, int sign) {
  const int half = hs / 2, W = (NH + 2 * KV) * hs, heads = NH + KV;
  for (int i = 0; i < half; i++) {
    const double inv_freq = 1.0 / std::pow(theta, double(2 * i) / double(hs));  // theta^(-2i/hs)
    for (int t = 0; t < Tn; t++) {
      const double a = double(pos0 + t) * inv_freq;
      const T c = T(std::cos(a)), s = T(sign * std::sin(a));
      for (int b = 0; b < B; b++) {
        T* row = qkv + (size_t(b) * Tn + t) * W;
        for (int h = 0; h < heads; h++) {
          T* p = row + size_t(h) * hs;
          const T x1 = p[i], x2 = p[i + half];
          p[i] = x1 * c - x2 * s;
          p[i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
}
}  // namespace

template <typename T>
void rope_forward(T* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  rope_rotate(qkv, B, Tn, NH, KV, hs, pos0, theta, +1);
}

template <typename T>
void rope_backward(T* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  rope_rotate(dqkv, B, Tn, NH, KV, hs, pos0, theta, -1);
}

#define DTB_INSTANTIATE_LLAMA_OPS(T)                                                                \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, T, int, int);                       \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);     \
  template void swiglu_forward<T>(T*, const T*, int, int);                                         \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int);                              \
  template void rope_forward<T>(T*, int, int, int, int, int, int, double);                         \
  template void rope_backward<T>(T*, int, int, int, int, int, int, double);

DTB_INSTANTIATE_LLAMA_OPS(float)
DTB_INSTANTIATE_LLAMA_OPS(double)
#undef DTB_INSTANTIATE_LLAMA_OPS

}  // namespace dtb::cpu
