// The stack profiles and the overlap equation (reference/analytic/stack_profile.h).
#include "reference/analytic/stack_profile.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"

namespace dtb {

const std::vector<StackProfile>& stack_profiles() {
  static const std::vector<StackProfile> kProfiles = [] {
    std::vector<StackProfile> p;
    p.push_back({"dtbench", StepOverlap{},
                 "dtbench's reference trainer: reference/zero/zero.cc all-reduces the stage 0-1 gradients in "
                 "reduce_bucket_size buckets after the backward and gathers ZeRO-3 units blocking; TP collectives and "
                 "pipeline sends block (reference/parallel)"});
    StepOverlap m21;
    m21.pp_scatter_gather = true;
    p.push_back({"megatron-2021", m21,
                 "Megatron-LM as measured by Narayanan et al. 2021 and Korthikanti et al. 2022: train_step all-reduces "
                 "the contiguous gradient buffer after the backward (megatron/training.py, "
                 "megatron/model/distributed.py allreduce_gradients); TP all-reduces block (mpu/mappings.py); p2p "
                 "blocking, with the scatter-gather optimisation (Narayanan et al. 2021 Sec. 4.1, "
                 "--scatter-gather-tensors-in-pipeline on by default); attention materialized (the fused "
                 "scaled_upper_triang_masked_softmax kernel of megatron/fused_kernels keeps the s x s "
                 "probabilities; FlashAttention, Dao et al. 2022, came after); dropout 0.1 on the probabilities "
                 "and the hidden states (megatron/arguments.py: --attention-dropout and --hidden-dropout default "
                 "0.1); each micro-batch's fp16 gradients added into the fp32 main_grad buffer by a backward "
                 "hook (megatron/model/distributed.py: param.main_grad.add_(param.grad.data); the fused "
                 "--gradient-accumulation-fusion came in 2022)"});
    p.back().attention = AttentionKernel::materialized, p.back().dropout = 0.1, p.back().main_grad_accumulation = true;
    StepOverlap mc;
    mc.dp_grad_reduce = true, mc.bucket_params = 40'000'000, mc.bucket_params_per_dp = 1'000'000;
    mc.param_gather_prefetch = true, mc.tp_comm = true, mc.pp_send = true;
    p.push_back({"megatron-core", mc,
                 "Megatron-Core with --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap: "
                 "megatron/core/distributed/distributed_data_parallel_config.py (overlap_grad_reduce, "
                 "overlap_param_gather, bucket_size default max(40000000, 1000000 dp)), "
                 "megatron/core/model_parallel_config.py (tp_comm_overlap: Transformer Engine userbuffers; "
                 "overlap_p2p_comm, set with virtual stages as NeMo's comm_overlap does); attention fused "
                 "(Transformer Engine's DotProductAttention, FlashAttention or cuDNN fused attention)"});
    p.back().attention = AttentionKernel::fused;
    StepOverlap f2;
    f2.dp_grad_reduce = true, f2.param_gather_prefetch = true;
    p.push_back({"fsdp2", f2,
                 "PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard, fully_shard per transformer layer): each "
                 "layer's all-gather on its own stream, prefetched one layer ahead in forward and backward; its "
                 "gradient reduce-scatter on another stream behind the rest of the backward; no TP or PP overlap; "
                 "attention fused (torch.nn.functional.scaled_dot_product_attention's flash or memory-efficient "
                 "kernel)"});
    p.back().attention = AttentionKernel::fused;
    StepOverlap z3;
    z3.dp_grad_reduce = true, z3.bucket_params = 500'000'000, z3.param_gather_prefetch = true;
    z3.prefetch_params = 50'000'000, z3.gather_per_tensor = true, z3.param_persistence_threshold = 100'000;
    p.push_back({"deepspeed-zero3-2021", z3,
                 "DeepSpeed ZeRO-3 as Narayanan et al. 2021 (Table 2) ran it, on Megatron-LM's GPT model: "
                 "deepspeed/runtime/zero/stage3.py's parameter coordinator prefetches the next modules' "
                 "all-gathers, at most stage3_prefetch_bucket_size = 5e7 elements ahead of use "
                 "(deepspeed/runtime/zero/config.py), each parameter tensor by its own all_gather "
                 "(stage3.py fetch_sub_module calls partition_parameters.py Init._all_gather(params, "
                 "async_op=True), one _allgather_param per parameter), but those under "
                 "stage3_param_persistence_threshold = 1e5 elements, never partitioned (ds_persist); "
                 "overlap_comm (on by default at stage 3: config.py's "
                 "overlap_comm_valid) reduce-scatters the gradients in reduce_bucket_size buckets (default 5e8 "
                 "elements) behind the backward; attention materialized and dropout 0.1, as megatron-2021"});
    p.back().attention = AttentionKernel::materialized, p.back().dropout = 0.1;
    return p;
  }();
  return kProfiles;
}

const StackProfile& find_stack_profile(const std::string& name) {
  std::string known;
  for (const StackProfile& s : stack_profiles()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw InputError("--stack " + printable(name, 40) + ": not a known stack (" + known + ")");
}

AttentionKernel plan_attention(std::optional<AttentionKernel> given, const StackProfile& stack, AttentionKernel hardware) {
  return given ? *given : stack.attention.value_or(hardware);
}

double overlapped_exposed(double comm_s, double compute_s, int64_t pieces) {
  const double k = double(std::max<int64_t>(1, pieces));
  const double c = std::max(0.0, comm_s) / k, w = std::max(0.0, compute_s) / k;
  return c + (k - 1) * std::max(0.0, c - w);
}

int64_t dp_bucket_count(const StepOverlap& o, double params, int dp, int layers) {
  if (o.bucket_params <= 0 && o.bucket_params_per_dp <= 0) return std::max(1, layers);
  const double bucket = double(std::max<int64_t>(o.bucket_params, o.bucket_params_per_dp * int64_t(dp)));
  return std::max<int64_t>(1, int64_t(std::ceil(params / bucket)));
}

std::string overlap_text(const StepOverlap& o) {
  std::string s;
  auto add = [&](bool on, const std::string& what) {
    if (on) s += (s.empty() ? "" : ", ") + what;
  };
  std::string bucket = o.bucket_params > 0 ? std::to_string(o.bucket_params / 1'000'000) + "M params" : "one per layer";
  if (o.bucket_params_per_dp > 0) bucket = "max(" + bucket + ", " + std::to_string(o.bucket_params_per_dp / 1'000'000) + "M x dp)";
  add(o.dp_grad_reduce, "grad reduce behind the backward (buckets: " + bucket + ")");
  add(o.param_gather_prefetch, o.prefetch_params > 0 ? "param gather prefetched (at most " +
                                                          std::to_string(o.prefetch_params / 1'000'000) + "M params ahead)"
                                                    : std::string("param gather prefetched"));
  add(o.gather_per_tensor, o.param_persistence_threshold > 0
                               ? "ZeRO-3 gathers per parameter tensor (none under " +
                                     std::to_string(o.param_persistence_threshold / 1000) + "K elements)"
                               : std::string("ZeRO-3 gathers per parameter tensor"));
  add(o.tp_comm, "TP comm overlapped");
  add(o.pp_send, "p2p overlapped (interleaved)");
  add(o.pp_scatter_gather, "p2p scatter-gather");
  return s.empty() ? "none" : s;
}

}  // namespace dtb
