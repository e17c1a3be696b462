// ZeRO's settings as one typed value (DeepSpeed's `zero_optimization` names): what the
// ZeRO engine runs (reference/zero/zero.h), what the memory model plans (reference/analytic/memory_model.h)
// and what a checkpoint records (reference/checkpoint/checkpoint.h). Only the settings; not the engine.
#pragma once
#include <cstddef>
#include <string>

namespace dtb {

/// ZeRO settings, DeepSpeed's `zero_optimization` names.
struct ZeroConfig {
  int stage = 0;                                 // 0-3
  bool offload_optimizer = false;                // offload_optimizer: cpu
  size_t reduce_bucket_size = 500'000'000;       // elements per reduce-scatter / all-reduce
  size_t allgather_bucket_size = 500'000'000;    // elements per parameter all-gather
  bool overlap_comm = false;                     // reduce-scatters overlap the backward
  bool fp32_communication = false;               // communication_data_type "fp32" (half T only)
};

/// The ZeRO stages: 0 (none) to kMaxZeroStage (parameters sharded too).
constexpr int kMaxZeroStage = 3;

/// The one check of a ZeRO stage's range (every reader of a stage calls it): throws InputError
/// "<key> must be 0-3, got <stage>" unless 0 <= stage <= kMaxZeroStage.
void validate_zero_stage(int stage, const std::string& key);

/// Throws InputError naming the value unless stage is 0-3 (validate_zero_stage, key
/// "zero_stage"), buckets >= 1, and offload has stage >= 1 (DeepSpeed offloads stages 1-3).
void validate_zero(const ZeroConfig& cfg);

}  // namespace dtb
