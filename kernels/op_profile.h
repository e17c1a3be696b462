// Where a training step's compute time goes, op family by op family: ProfiledOps<T> wraps a
// backend's Ops<T> (kernels/ops.h) and brackets every call with an OpClock, which times the
// work each call queued — steady_clock around the call on the CPU, where ops run when called
// (make_host_op_clock); CUDA events recorded on the compute stream before and after each
// call on a GPU (the backend's make_op_clock), so the sum is device time, not launch time,
// as Nsight Systems' per-kernel "CUDA GPU Kernel Summary" adds it up. The families are the
// ones the GPT step's time is usually split into (llm.c's and Megatron-LM's profiles): GEMMs,
// attention (and the rotary embeddings), the memory-bound ops (LayerNorm, RMSNorm, GELU, SwiGLU,
// residual, bias, scale, embeddings), the loss, the optimizer, and memory (zeroing, copies).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/ops.h"

namespace dtb {

enum class OpFamily : int { gemm, attention, pointwise, loss, optimizer, memory };
inline constexpr int kNumOpFamilies = 6;
/// "gemm", "attention", "pointwise", "loss", "optimizer", "memory": the report's names.
const char* to_string(OpFamily f);

/// Seconds per op family over calls bracketed by begin() and end(). Brackets do not nest.
class OpClock {
 public:
  virtual ~OpClock() = default;
  /// Marks the start and the end of one call's work (its queued work on a device).
  virtual void begin(OpFamily f) = 0;
  virtual void end(OpFamily f) = 0;
  /// Seconds per family (indexed by int(OpFamily)) and bracketed calls per family, since
  /// construction or the last reset(); on a device this first waits for the work bracketed.
  virtual std::array<double, kNumOpFamilies> seconds() = 0;
  std::array<int64_t, kNumOpFamilies> calls() const { return calls_; }
  /// Forgets what was timed so far.
  virtual void reset() { calls_ = {}; }

 protected:
  std::array<int64_t, kNumOpFamilies> calls_{};
};

/// An OpClock of steady_clock readings around each call: right for ops that finish before
/// they return (the CPU backend's).
std::unique_ptr<OpClock> make_host_op_clock();

/// `inner` with every compute op bracketed by `clock` (both must outlive it); results are
/// inner's, bitwise: the wrapper only forwards. synchronize, wait_copy and wait_copies are
/// forwarded untimed (they wait, they queue no work). Errors: inner's.
template <typename T>
class ProfiledOps final : public Ops<T> {
 public:
  using A = acc_t<T>;
  ProfiledOps(Ops<T>& inner, OpClock& clock) : in_(inner), clock_(clock) {}
  std::string backend() const override { return in_.backend(); }
  void synchronize() override { in_.synchronize(); }
  void wait_copy(int64_t ticket) override { in_.wait_copy(ticket); }
  void wait_copies() override { in_.wait_copies(); }

  void zero(T* p, size_t n) override { timed(OpFamily::memory, [&] { in_.zero(p, n); }); }
  void copy_from_host(void* d, const void* s, size_t b) override {
    timed(OpFamily::memory, [&] { in_.copy_from_host(d, s, b); });
  }
  void copy_to_host(void* d, const void* s, size_t b) override {
    timed(OpFamily::memory, [&] { in_.copy_to_host(d, s, b); });
  }
  int64_t copy_to_host_async(void* d, const void* s, size_t b) override { return in_.copy_to_host_async(d, s, b); }
  int64_t copy_from_host_async(void* d, const void* s, size_t b) override {
    return in_.copy_from_host_async(d, s, b);
  }

  void encoder_forward(T* out, const int32_t* tok, const T* wte, const T* wpe, int B, int Tn, int C) override {
    timed(OpFamily::pointwise, [&] { in_.encoder_forward(out, tok, wte, wpe, B, Tn, C); });
  }
  void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tok, int B, int Tn, int C) override {
    timed(OpFamily::pointwise, [&] { in_.encoder_backward(dwte, dwpe, dout, tok, B, Tn, C); });
  }
  void layernorm_forward(T* out, A* mean, A* rstd, const T* inp, const T* w, const T* b, int N, int C) override {
    timed(OpFamily::pointwise, [&] { in_.layernorm_forward(out, mean, rstd, inp, w, b, N, C); });
  }
  void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const A* mean,
                          const A* rstd, int N, int C) override {
    timed(OpFamily::pointwise, [&] { in_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
  }
  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) override {
    timed(OpFamily::gemm, [&] { in_.matmul_forward(out, inp, w, b, N, C, OC); });
  }
  void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int N, int C,
                       int OC) override {
    timed(OpFamily::gemm, [&] { in_.matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC); });
  }
  // FP8 linears (docs/fp8.md): the GEMMs as GEMMs, the amax as a pointwise pass.
  float amax(const T* x, size_t n) override {
    float r = 0;
    timed(OpFamily::pointwise, [&] { r = in_.amax(x, n); });
    return r;
  }
  void fp8_matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                          const Fp8Operand& x, const Fp8Operand& w) override {
    timed(OpFamily::gemm, [&] { in_.fp8_matmul_forward(out, inp, weight, bias, N, C, OC, x, w); });
  }
  void fp8_matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                           int OC, const Fp8Operand& dy, const Fp8Operand& x, const Fp8Operand& w) override {
    timed(OpFamily::gemm, [&] { in_.fp8_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dy, x, w); });
  }
  void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) override {
    timed(OpFamily::attention, [&] { in_.attention_forward(out, att, qkv, B, Tn, C, NH); });
  }
  void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                          int NH) override {
    timed(OpFamily::attention, [&] { in_.attention_backward(dqkv, scratch, dout, qkv, att, B, Tn, C, NH); });
  }
  void attention_block_forward(T* out, A* lse, T* scratch, const T* q, int qs, const T* k, const T* v, int ks,
                               int B, int Tq, int Tk, int C, int NH, int qp, int kp) override {
    timed(OpFamily::attention,
          [&] { in_.attention_block_forward(out, lse, scratch, q, qs, k, v, ks, B, Tq, Tk, C, NH, qp, kp); });
  }
  void attention_merge(T* out, A* lse, const T* out2, const A* lse2, int N, int C, int NH) override {
    timed(OpFamily::attention, [&] { in_.attention_merge(out, lse, out2, lse2, N, C, NH); });
  }
  void attention_block_backward(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* out, const A* lse,
                                const T* q, int qs, const T* k, const T* v, int ks, int B, int Tq, int Tk, int C,
                                int NH, int qp, int kp) override {
    timed(OpFamily::attention, [&] {
      in_.attention_block_backward(dq, dk, dv, scratch, dout, out, lse, q, qs, k, v, ks, B, Tq, Tk, C, NH, qp, kp);
    });
  }
  void gqa_attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KV, int hs) override {
    timed(OpFamily::attention, [&] { in_.gqa_attention_forward(out, att, qkv, B, Tn, NH, KV, hs); });
  }
  void gqa_attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int NH,
                              int KV, int hs) override {
    timed(OpFamily::attention, [&] { in_.gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, Tn, NH, KV, hs); });
  }
  void rope_forward(T* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override {
    timed(OpFamily::attention, [&] { in_.rope_forward(qkv, B, Tn, NH, KV, hs, pos0, theta); });
  }
  void rope_backward(T* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override {
    timed(OpFamily::attention, [&] { in_.rope_backward(dqkv, B, Tn, NH, KV, hs, pos0, theta); });
  }
  void rmsnorm_forward(T* out, A* rstd, const T* inp, const T* w, A eps, int N, int C) override {
    timed(OpFamily::pointwise, [&] { in_.rmsnorm_forward(out, rstd, inp, w, eps, N, C); });
  }
  void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const A* rstd, int N,
                        int C) override {
    timed(OpFamily::pointwise, [&] { in_.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C); });
  }
  void swiglu_forward(T* out, const T* inp, int N, int F) override {
    timed(OpFamily::pointwise, [&] { in_.swiglu_forward(out, inp, N, F); });
  }
  void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) override {
    timed(OpFamily::pointwise, [&] { in_.swiglu_backward(dinp, inp, dout, N, F); });
  }
  void gelu_forward(T* out, const T* inp, size_t n) override {
    timed(OpFamily::pointwise, [&] { in_.gelu_forward(out, inp, n); });
  }
  void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) override {
    timed(OpFamily::pointwise, [&] { in_.gelu_backward(dinp, inp, dout, n); });
  }
  void residual_forward(T* out, const T* a, const T* b, size_t n) override {
    timed(OpFamily::pointwise, [&] { in_.residual_forward(out, a, b, n); });
  }
  void crossentropy_forward(A* losses, T* probs, const T* logits, const int32_t* tg, int N, int V) override {
    timed(OpFamily::loss, [&] { in_.crossentropy_forward(losses, probs, logits, tg, N, V); });
  }
  void crossentropy_backward(T* dlogits, const T* probs, const int32_t* tg, A dloss, int N, int V) override {
    timed(OpFamily::loss, [&] { in_.crossentropy_backward(dlogits, probs, tg, dloss, N, V); });
  }
  void adamw_update(T* p, const T* g, A* m, A* v, size_t n, const AdamWParams& hp, int t) override {
    timed(OpFamily::optimizer, [&] { in_.adamw_update(p, g, m, v, n, hp, t); });
  }
  void adamw_update_master(T* p, A* master, const T* g, A* m, A* v, size_t n, const AdamWParams& hp, int t,
                           A grad_scale) override {
    timed(OpFamily::optimizer, [&] { in_.adamw_update_master(p, master, g, m, v, n, hp, t, grad_scale); });
  }
  void embedding_shard_forward(T* out, const int32_t* tok, const T* wte, const T* wpe, int B, int Tn, int C,
                               int v0, int v1) override {
    timed(OpFamily::pointwise, [&] { in_.embedding_shard_forward(out, tok, wte, wpe, B, Tn, C, v0, v1); });
  }
  void embedding_shard_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tok, int B, int Tn, int C, int v0,
                                int v1) override {
    timed(OpFamily::pointwise, [&] { in_.embedding_shard_backward(dwte, dwpe, dout, tok, B, Tn, C, v0, v1); });
  }
  void add_bias(T* out, const T* bias, int N, int OC) override {
    timed(OpFamily::pointwise, [&] { in_.add_bias(out, bias, N, OC); });
  }
  void scale(T* x, A a, size_t n) override { timed(OpFamily::pointwise, [&] { in_.scale(x, a, n); }); }
  void crossentropy_shard_max(A* maxes, const T* logits, int N, int Vl) override {
    timed(OpFamily::loss, [&] { in_.crossentropy_shard_max(maxes, logits, N, Vl); });
  }
  void crossentropy_shard_sums(A* sums, const T* logits, const A* maxes, const int32_t* tg, int N, int Vl,
                               int v0) override {
    timed(OpFamily::loss, [&] { in_.crossentropy_shard_sums(sums, logits, maxes, tg, N, Vl, v0); });
  }
  void crossentropy_shard_forward(A* losses, T* probs, const T* logits, const A* maxes, const A* sums, int N,
                                  int Vl) override {
    timed(OpFamily::loss, [&] { in_.crossentropy_shard_forward(losses, probs, logits, maxes, sums, N, Vl); });
  }
  void crossentropy_shard_backward(T* dlogits, const T* probs, const int32_t* tg, A dloss, int N, int Vl,
                                   int v0) override {
    timed(OpFamily::loss, [&] { in_.crossentropy_shard_backward(dlogits, probs, tg, dloss, N, Vl, v0); });
  }

 private:
  template <typename F>
  void timed(OpFamily f, F&& call) {
    clock_.begin(f);
    call();
    clock_.end(f);
  }
  Ops<T>& in_;
  OpClock& clock_;
};

}  // namespace dtb
