// CudaOps: each op forwards to its CUDA kernel or cuBLASLt GEMM on the compute stream.
#include "kernels/cuda/cuda_ops.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.cuh"

namespace dtb {

void CudaOps::zero(float* p, size_t n) { DTB_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), s())); }

void CudaOps::synchronize() { DTB_CUDA_CHECK(cudaStreamSynchronize(s())); }

void CudaOps::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (!bytes) return;
  DTB_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s()));
  DTB_CUDA_CHECK(cudaStreamSynchronize(s()));  // the host buffer may be pageable and reused
}

void CudaOps::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (!bytes) return;
  DTB_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s()));
  DTB_CUDA_CHECK(cudaStreamSynchronize(s()));
}

int64_t CudaOps::start_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (!copy_stream_) DTB_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  cudaEvent_t after_compute, done;
  DTB_CUDA_CHECK(cudaEventCreateWithFlags(&after_compute, cudaEventDisableTiming));
  DTB_CUDA_CHECK(cudaEventRecord(after_compute, s()));
  DTB_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, after_compute, 0));
  DTB_CUDA_CHECK(cudaEventDestroy(after_compute));  // released once the wait is done
  if (bytes) DTB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream_));
  DTB_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  DTB_CUDA_CHECK(cudaEventRecord(done, copy_stream_));
  copy_events_.push_back(done);
  return int64_t(copy_events_.size()) - 1;
}

int64_t CudaOps::copy_to_host_async(void* host_dst, const void* src, size_t bytes) {
  return start_copy(host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

int64_t CudaOps::copy_from_host_async(void* dst, const void* host_src, size_t bytes) {
  return start_copy(dst, host_src, bytes, cudaMemcpyHostToDevice);
}

void CudaOps::wait_copy(int64_t ticket) {
  DTB_CHECK(ticket >= 0 && size_t(ticket) < copy_events_.size(), "CudaOps::wait_copy: unknown ticket");
  DTB_CUDA_CHECK(cudaEventSynchronize(copy_events_[size_t(ticket)]));
}

void CudaOps::wait_copies() {
  if (!copy_stream_) return;
  DTB_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  for (cudaEvent_t e : copy_events_) DTB_CUDA_CHECK(cudaEventDestroy(e));
  copy_events_.clear();
}

CudaOps::~CudaOps() {
  if (!copy_stream_) return;
  cudaStreamSynchronize(copy_stream_);
  for (cudaEvent_t e : copy_events_) cudaEventDestroy(e);
  cudaStreamDestroy(copy_stream_);
}

void CudaOps::encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                              int Tn, int C) {
  cuda::encoder_forward(out, tokens, wte, wpe, B, Tn, C, s());
}
void CudaOps::encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn,
                               int C) {
  cuda::encoder_backward(dwte, dwpe, dout, tokens, B, Tn, C, s());
}
void CudaOps::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int N, int C) {
  cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, s());
}
void CudaOps::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd, int N, int C) {
  cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, s());
}
void CudaOps::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                             int OC) {
  gemm_.matmul_forward(out, inp, weight, bias, N, C, OC, precision_, s());
}
void CudaOps::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, int N, int C, int OC) {
  gemm_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, precision_, s());
}
void CudaOps::attention_forward(float* out, float* att, const float* qkv, int B, int Tn, int C, int NH) {
  cuda::attention_forward(gemm_, out, att, qkv, B, Tn, C, NH, s());
}
void CudaOps::attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                 const float* att, int B, int Tn, int C, int NH) {
  cuda::attention_backward(gemm_, dqkv, scratch, dout, qkv, att, B, Tn, C, NH, s());
}
void CudaOps::gelu_forward(float* out, const float* inp, size_t n) { cuda::gelu_forward(out, inp, n, s()); }
void CudaOps::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  cuda::gelu_backward(dinp, inp, dout, n, s());
}
void CudaOps::scale(float* x, float a, size_t n) { cuda::scale(x, a, n, s()); }

void CudaOps::residual_forward(float* out, const float* a, const float* b, size_t n) {
  cuda::residual_forward(out, a, b, n, s());
}
void CudaOps::crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                                   int N, int V) {
  cuda::crossentropy_forward(losses, probs, logits, targets, N, V, s());
}
void CudaOps::crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                                    int N, int V) {
  cuda::crossentropy_backward(dlogits, probs, targets, dloss, N, V, s());
}
void CudaOps::adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                           const AdamWParams& hp, int t) {
  cuda::adamw_update(param, grad, m, v, n, hp, t, s());
}
void CudaOps::embedding_shard_forward(float* out, const int32_t* tokens, const float* wte_shard, const float* wpe,
                                      int B, int Tn, int C, int v_begin, int v_end) {
  cuda::embedding_shard_forward(out, tokens, wte_shard, wpe, B, Tn, C, v_begin, v_end, s());
}
void CudaOps::embedding_shard_backward(float* dwte_shard, float* dwpe, const float* dout, const int32_t* tokens,
                                       int B, int Tn, int C, int v_begin, int v_end) {
  cuda::embedding_shard_backward(dwte_shard, dwpe, dout, tokens, B, Tn, C, v_begin, v_end, s());
}
void CudaOps::add_bias(float* out, const float* bias, int N, int OC) { cuda::add_bias(out, bias, N, OC, s()); }
void CudaOps::crossentropy_shard_max(float* maxes, const float* logits, int N, int Vl) {
  cuda::crossentropy_shard_max(maxes, logits, N, Vl, s());
}
void CudaOps::crossentropy_shard_sums(float* sums, const float* logits, const float* maxes, const int32_t* targets,
                                      int N, int Vl, int v_begin) {
  cuda::crossentropy_shard_sums(sums, logits, maxes, targets, N, Vl, v_begin, s());
}
void CudaOps::crossentropy_shard_forward(float* losses, float* probs, const float* logits, const float* maxes,
                                         const float* sums, int N, int Vl) {
  cuda::crossentropy_shard_forward(losses, probs, logits, maxes, sums, N, Vl, s());
}
void CudaOps::crossentropy_shard_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                                          int N, int Vl, int v_begin) {
  cuda::crossentropy_shard_backward(dlogits, probs, targets, dloss, N, Vl, v_begin, s());
}

void CudaOps::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float eps, int N,
                              int C) {
  cuda::rmsnorm_forward(out, rstd, inp, weight, eps, N, C, s());
}
void CudaOps::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int N, int C) {
  cuda::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, s());
}
void CudaOps::swiglu_forward(float* out, const float* inp, int N, int F) { cuda::swiglu_forward(out, inp, N, F, s()); }
void CudaOps::swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
  cuda::swiglu_backward(dinp, inp, dout, N, F, s());
}
void CudaOps::rope_forward(float* qkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  cuda::rope_forward(qkv, B, Tn, NH, KV, hs, pos0, theta, s());
}
void CudaOps::rope_backward(float* dqkv, int B, int Tn, int NH, int KV, int hs, int pos0, double theta) {
  cuda::rope_backward(dqkv, B, Tn, NH, KV, hs, pos0, theta, s());
}
void CudaOps::gqa_attention_forward(float* out, float* att, const float* qkv, int B, int Tn, int NH, int KV,
                                    int hs) {
  cuda::gqa_attention_forward(gemm_, out, att, qkv, B, Tn, NH, KV, hs, s());
}
void CudaOps::gqa_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                     const float* att, int B, int Tn, int NH, int KV, int hs) {
  cuda::gqa_attention_backward(gemm_, dqkv, scratch, dout, qkv, att, B, Tn, NH, KV, hs, s());
}

}  // namespace dtb
