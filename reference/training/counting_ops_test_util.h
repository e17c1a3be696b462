// Test doubles for running the reference's non-CPU paths on the CPU: CountingOps<T>, an
// Ops<T> that forwards every op to another and counts the calls (so a test sees that the ops
// it passed are the ones used), and HostAsDevice, host memory that says it is not the CPU's
// (so the reference takes the branches it takes on a GPU: the backend's ops required, host
// scalars reduced through a device buffer, ZeRO's fp32 communication staged through host
// buffers). Not a backend: tests only.
#pragma once
#include <cstddef>
#include <functional>
#include <new>
#include <string>

#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtb {

/// Forwards every op of Ops<T> to `inner` (same arguments), counting the calls in `calls` and
/// calling `on_call` first when set.
template <typename T>
class CountingOps final : public Ops<T> {
 public:
  using A = acc_t<T>;
  explicit CountingOps(Ops<T>& inner) : in_(inner) {}
  long calls = 0;
  /// Called with the op's name before each counted call, when set (a test's extra cost per op).
  std::function<void(const char*)> on_call;

  std::string backend() const override { return in_.backend(); }
  void zero(T* p, size_t n) override { tick(__func__), in_.zero(p, n); }
  void synchronize() override { in_.synchronize(); }
  void copy_from_host(void* d, const void* s, size_t b) override { tick(__func__), in_.copy_from_host(d, s, b); }
  void copy_to_host(void* d, const void* s, size_t b) override { tick(__func__), in_.copy_to_host(d, s, b); }
  void encoder_forward(T* o, const int32_t* t, const T* wte, const T* wpe, int B, int Tn, int C) override {
    tick(__func__), in_.encoder_forward(o, t, wte, wpe, B, Tn, C);
  }
  void encoder_backward(T* dwte, T* dwpe, const T* d, const int32_t* t, int B, int Tn, int C) override {
    tick(__func__), in_.encoder_backward(dwte, dwpe, d, t, B, Tn, C);
  }
  void layernorm_forward(T* o, A* m, A* r, const T* i, const T* w, const T* b, int N, int C) override {
    tick(__func__), in_.layernorm_forward(o, m, r, i, w, b, N, C);
  }
  void layernorm_backward(T* di, T* dw, T* db, const T* d, const T* i, const T* w, const A* m, const A* r, int N,
                          int C) override {
    tick(__func__), in_.layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  void matmul_forward(T* o, const T* i, const T* w, const T* b, int N, int C, int OC) override {
    tick(__func__), in_.matmul_forward(o, i, w, b, N, C, OC);
  }
  void matmul_backward(T* di, T* dw, T* db, const T* d, const T* i, const T* w, int N, int C, int OC) override {
    tick(__func__), in_.matmul_backward(di, dw, db, d, i, w, N, C, OC);
  }
  void attention_forward(T* o, T* att, const T* qkv, int B, int Tn, int C, int NH) override {
    tick(__func__), in_.attention_forward(o, att, qkv, B, Tn, C, NH);
  }
  void attention_backward(T* dqkv, T* s, const T* d, const T* qkv, const T* att, int B, int Tn, int C,
                          int NH) override {
    tick(__func__), in_.attention_backward(dqkv, s, d, qkv, att, B, Tn, C, NH);
  }
  void gelu_forward(T* o, const T* i, size_t n) override { tick(__func__), in_.gelu_forward(o, i, n); }
  void gelu_backward(T* di, const T* i, const T* d, size_t n) override { tick(__func__), in_.gelu_backward(di, i, d, n); }
  void residual_forward(T* o, const T* a, const T* b, size_t n) override { tick(__func__), in_.residual_forward(o, a, b, n); }
  void crossentropy_forward(A* l, T* p, const T* z, const int32_t* t, int N, int V) override {
    tick(__func__), in_.crossentropy_forward(l, p, z, t, N, V);
  }
  void crossentropy_backward(T* dz, const T* p, const int32_t* t, A dl, int N, int V) override {
    tick(__func__), in_.crossentropy_backward(dz, p, t, dl, N, V);
  }
  void adamw_update(T* p, const T* g, A* m, A* v, size_t n, const AdamWParams& hp, int t) override {
    tick(__func__), in_.adamw_update(p, g, m, v, n, hp, t);
  }
  void adamw_update_master(T* p, A* w, const T* g, A* m, A* v, size_t n, const AdamWParams& hp, int t,
                           A s) override {
    tick(__func__), in_.adamw_update_master(p, w, g, m, v, n, hp, t, s);
  }
  void embedding_shard_forward(T* o, const int32_t* t, const T* wte, const T* wpe, int B, int Tn, int C, int v0,
                               int v1) override {
    tick(__func__), in_.embedding_shard_forward(o, t, wte, wpe, B, Tn, C, v0, v1);
  }
  void embedding_shard_backward(T* dwte, T* dwpe, const T* d, const int32_t* t, int B, int Tn, int C, int v0,
                                int v1) override {
    tick(__func__), in_.embedding_shard_backward(dwte, dwpe, d, t, B, Tn, C, v0, v1);
  }
  void add_bias(T* o, const T* b, int N, int OC) override { tick(__func__), in_.add_bias(o, b, N, OC); }
  void scale(T* x, A a, size_t n) override { tick(__func__), in_.scale(x, a, n); }
  void crossentropy_shard_max(A* mx, const T* z, int N, int Vl) override {
    tick(__func__), in_.crossentropy_shard_max(mx, z, N, Vl);
  }
  void crossentropy_shard_sums(A* s, const T* z, const A* mx, const int32_t* t, int N, int Vl, int v0) override {
    tick(__func__), in_.crossentropy_shard_sums(s, z, mx, t, N, Vl, v0);
  }
  void crossentropy_shard_forward(A* l, T* p, const T* z, const A* mx, const A* s, int N, int Vl) override {
    tick(__func__), in_.crossentropy_shard_forward(l, p, z, mx, s, N, Vl);
  }
  void crossentropy_shard_backward(T* dz, const T* p, const int32_t* t, A dl, int N, int Vl, int v0) override {
    tick(__func__), in_.crossentropy_shard_backward(dz, p, t, dl, N, Vl, v0);
  }

 private:
  void tick(const char* op) {
    ++calls;
    if (on_call) on_call(op);
  }
  Ops<T>& in_;
};

/// Host memory (64-byte aligned, accounted like CpuDevice's) whose is_cpu() is false.
class HostAsDevice final : public Device {
 public:
  std::string name() const override { return "host-as-device"; }
  bool is_cpu() const override { return false; }
  void* allocate(size_t bytes, MemCategory cat, Tier tier) override {
    void* p = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{64});
    account_alloc(bytes, cat, tier);
    return p;
  }
  void deallocate(void* ptr, size_t bytes, MemCategory cat, Tier tier) override {
    if (!ptr) return;
    ::operator delete(ptr, std::align_val_t{64});
    account_free(bytes, cat, tier);
  }
};

}  // namespace dtb
