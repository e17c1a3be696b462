// CPU softmax cross-entropy, forward and backward, and its vocabulary-parallel shards
// (contract: ops.h): row max, blocked sum of exps and normalisation in plain loops, the shards
// summing exactly as the whole op so that one shard is it, bitwise. No allocation.
#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/ops_common.h"

namespace dtb::cpu {

using namespace detail;

template <typename T>
DTB_VECTOR_CLONES void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int N,
                          int V) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + size_t(n) * V;
    T* p = probs + size_t(n) * V;
    const T mx = max_of(l, V);
    const T sum = exp_shifted_blocks(p, l, V, mx);
    const T inv = T(1) / sum;
    for (int i = 0; i < V; i++) p[i] *= inv;
    // -log p[target] = log(sum) - (l[target] - mx): stays finite and accurate when
    // p[target] underflows to 0, where -log(p) would be inf.
    losses[n] = std::log(sum) - (l[targets[n]] - mx);
  }
}

template <typename T>
DTB_VECTOR_CLONES void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N,
                           int V) {
  for (int n = 0; n < N; n++) {
    const T* p = probs + size_t(n) * V;
    T* d = dlogits + size_t(n) * V;
    for (int i = 0; i < V; i++) d[i] = p[i] * dloss;
    d[targets[n]] = (p[targets[n]] - T(1)) * dloss;
  }
}

template <typename T>
void crossentropy_shard_max(T* maxes, const T* logits, int N, int Vl) {
  for (int n = 0; n < N; n++) {
    maxes[n] = max_of(logits + size_t(n) * Vl, Vl);
  }
}

template <typename T>
DTB_VECTOR_CLONES void crossentropy_shard_sums(T* sums, const T* logits, const T* maxes, const int32_t* targets, int N, int Vl,
                             int v_begin) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + size_t(n) * Vl;
    sums[n] = exp_shifted_blocks(static_cast<T*>(nullptr), l, Vl, maxes[n]);  // the logits stay as they are
    const int32_t j = targets[n] - v_begin;
    sums[N + n] = j >= 0 && j < Vl ? l[j] : T(0);
  }
}

template <typename T>
DTB_VECTOR_CLONES void crossentropy_shard_forward(T* losses, T* probs, const T* logits, const T* maxes, const T* sums, int N, int Vl) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + size_t(n) * Vl;
    T* p = probs + size_t(n) * Vl;
    const T inv = T(1) / sums[n];
    for (int i = 0; i < Vl; i++) p[i] = exp_clamped(l[i] - maxes[n]) * inv;
    losses[n] = std::log(sums[n]) - (sums[N + n] - maxes[n]);
  }
}

template <typename T>
void crossentropy_shard_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss, int N, int Vl,
                                 int v_begin) {
  for (int n = 0; n < N; n++) {
    const T* p = probs + size_t(n) * Vl;
    T* d = dlogits + size_t(n) * Vl;
    for (int i = 0; i < Vl; i++) d[i] = p[i] * dloss;
    const int32_t j = targets[n] - v_begin;
    if (j >= 0 && j < Vl) d[j] = (p[j] - T(1)) * dloss;
  }
}

#define DTB_INSTANTIATE_CROSSENTROPY(T)                                                          \
  template void crossentropy_forward<T>(T*, T*, const T*, const int32_t*, int, int);             \
  template void crossentropy_backward<T>(T*, const T*, const int32_t*, T, int, int);             \
  template void crossentropy_shard_max<T>(T*, const T*, int, int);                               \
  template void crossentropy_shard_sums<T>(T*, const T*, const T*, const int32_t*, int, int, int); \
  template void crossentropy_shard_forward<T>(T*, T*, const T*, const T*, const T*, int, int);   \
  template void crossentropy_shard_backward<T>(T*, const T*, const int32_t*, T, int, int, int);

DTB_INSTANTIATE_CROSSENTROPY(float)
DTB_INSTANTIATE_CROSSENTROPY(double)
#undef DTB_INSTANTIATE_CROSSENTROPY

}  // namespace dtb::cpu
