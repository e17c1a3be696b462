// AdamWParams: the optimizer's hyper-parameters, shared by every backend's AdamW step
// (kernels/cpu/ops.h, kernels/cuda/ops.cuh) and by the optimizers of reference/ (trainer.h,
// zero.h). The update itself is each backend's; this header holds only the numbers.
#pragma once

namespace dtb {

/// Hyper-parameters of AdamW (Loshchilov & Hutter 2019), torch.optim.AdamW semantics:
/// decoupled weight decay p -= lr * wd * p, then bias-corrected Adam. lr in parameter units
/// per step; beta1, beta2 the moments' decay; eps added to sqrt(v_hat).
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

}  // namespace dtb
