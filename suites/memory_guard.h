// The estimates the GPT-training suites give check_fits_in_memory (suites/suite.h), written once.
// The guard refuses only a run that would not fit in the host's RAM, so each is a coarse upper
// bound for one rank holding the whole model, not a plan of the layout (reference/analytic/
// memory_model.h plans that, and the memory suite measures it).
#pragma once
#include "reference/analytic/memory_model.h"
#include "reference/model/gpt.h"
#include "reference/training/trainer.h"

namespace dtb {

/// Bytes of a GPT's training state on one rank with nothing sharded, for check_fits_in_memory:
/// the analytic memory model's model states at ZeRO stage 0 on one rank (zero_model_states(P,
/// fp32, 0, 1), device and host: weights, gradients, Adam's m and v, 16 B/param; mixed precision
/// is 16 B/param too) plus `margin_per_param` bytes per parameter (default 4: buffers the model
/// does not count, such as the DP all-reduce's bucket). P = gpt_num_params(m). Bytes; no errors
/// for a valid GptConfig.
inline double unsharded_training_state_bytes(const GptConfig& m, double margin_per_param = 4.0) {
  const double P = double(gpt_num_params(m));
  const MemoryBytes<double> s = zero_model_states(P, Precision::fp32, 0, 1);
  return s.model_states(Tier::device) + s.model_states(Tier::host) + margin_per_param * P;
}

/// Bytes of the reference trainer's fp32 activations for a whole step on one rank, an upper
/// bound for check_fits_in_memory: global_batch x seq_len tokens, each holding per layer 20 C
/// floats and NH x seq_len attention scores (4 B each). Bytes.
inline double fp32_step_activation_bytes(const GptConfig& m, const TrainConfig& t) {
  return 4.0 * t.global_batch * t.seq_len * (20.0 * m.C * m.L + m.NH * t.seq_len * m.L);
}

}  // namespace dtb
