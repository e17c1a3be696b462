// CudaOps: the model's ops (kernels/ops.h) on one GPU — the kernels of kernels/cuda/ops.cuh
// and the cuBLASLt GEMMs of kernels/cuda/gemm.h, enqueued on the device's compute stream.
// float32 storage; the GEMMs' input precision is settable (fp32, tf32, bf16, fp16), always
// with fp32 accumulation.
#pragma once
#include <vector>
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/ops.h"

namespace dtb {

class CudaOps final : public Ops<float> {
 public:
  /// Ops on `device`'s compute stream through `gemm` (neither owned; both must outlive this).
  CudaOps(CudaDevice& device, cuda::Gemm& gemm) : device_(device), gemm_(gemm) {}
  std::string backend() const override { return "cuda"; }
  void set_precision(cuda::GemmPrecision p) { precision_ = p; }
  cuda::GemmPrecision precision() const { return precision_; }

  /// zero is a cudaMemsetAsync on the compute stream; the copies wait for the stream, so
  /// a host buffer may be reused as soon as they return.
  void zero(float* p, size_t n) override;
  void synchronize() override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  /// On a copy stream of their own (created at the first use), each after an event recorded
  /// on the compute stream; a ticket is an event recorded after the copy. wait_copies()
  /// also makes the compute stream's later work wait for the copies to the device.
  int64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes) override;
  int64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes) override;
  void wait_copy(int64_t ticket) override;
  void wait_copies() override;
  ~CudaOps() override;

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int Tn,
                       int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn,
                        int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override;
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                      int OC) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override;
  void attention_forward(float* out, float* att, const float* qkv, int B, int Tn, int C, int NH) override;
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                          int B, int Tn, int C, int NH) override;
  void gelu_forward(float* out, const float* inp, size_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void residual_forward(float* out, const float* a, const float* b, size_t n) override;
  void scale(float* x, float a, size_t n) override;
  void crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int N,
                            int V) override;
  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int N,
                             int V) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, const AdamWParams& hp,
                    int t) override;
  void embedding_shard_forward(float* out, const int32_t* tokens, const float* wte_shard, const float* wpe, int B,
                               int Tn, int C, int v_begin, int v_end) override;
  void embedding_shard_backward(float* dwte_shard, float* dwpe, const float* dout, const int32_t* tokens, int B,
                                int Tn, int C, int v_begin, int v_end) override;
  void add_bias(float* out, const float* bias, int N, int OC) override;
  void crossentropy_shard_max(float* maxes, const float* logits, int N, int Vl) override;
  void crossentropy_shard_sums(float* sums, const float* logits, const float* maxes, const int32_t* targets, int N,
                               int Vl, int v_begin) override;
  void crossentropy_shard_forward(float* losses, float* probs, const float* logits, const float* maxes,
                                  const float* sums, int N, int Vl) override;
  void crossentropy_shard_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int N,
                                   int Vl, int v_begin) override;
  /// The Llama block's ops (kernels/cuda/llama_ops.cu, attention.cu's gqa_attention_*).
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float eps, int N,
                       int C) override;
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int N, int C) override;
  void swiglu_forward(float* out, const float* inp, int N, int F) override;
  void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) override;
  void rope_forward(float* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override;
  void rope_backward(float* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) override;
  void gqa_attention_forward(float* out, float* att, const float* qkv, int B, int Tn, int NH, int KV,
                             int hs) override;
  void gqa_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                              int B, int Tn, int NH, int KV, int hs) override;

 private:
  cudaStream_t s() const { return device_.compute_stream(); }
  int64_t start_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  cudaStream_t copy_stream_ = nullptr;
  std::vector<cudaEvent_t> copy_events_;  // ticket i: copy_events_[i]
  CudaDevice& device_;
  cuda::Gemm& gemm_;
  cuda::GemmPrecision precision_ = cuda::GemmPrecision::fp32;
};

}  // namespace dtb
