// Silent-data-corruption triage of `dtbench validate` (check sdc/replay): every rank replays
// the same few training steps of the reference GPT on its own (no communication), hashes what
// it computed, and the ranks whose hashes differ from the majority's are named. Also the
// majority rule the train check names its odd replicas by. Not the train check itself
// (level_long.cc), whose all-reduce averages one rank's corrupted gradient into every replica.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/validate.h"
#include "harness/validate/check.h"

namespace dtb {

class ValidateRun;

/// The outcome of the majority rule over one hash per rank (of one group of ranks).
struct MajorityVerdict {
  bool majority = false;   // some hash is held by more than half of the ranks
  uint64_t reference = 0;  // that hash (0 without a majority)
  int agree = 0;           // how many ranks hold it (0 without a majority)
  std::vector<int> odd;    // indices into the input whose hash is not the reference; all of them without a majority
};

/// The majority rule: the hash held by more than half of `hashes` is the reference and every
/// index holding another is odd; no hash held by more than half (a tie, as 2 ranks that
/// disagree, or 3 or more distinct hashes none of which has the majority) names every index.
/// One hash is its own majority; none: no majority, nothing odd. Pure.
MajorityVerdict majority_hash(const std::vector<uint64_t>& hashes);

/// The replay's steps, and sequences (of 64 tokens) per step.
inline constexpr int kSdcSteps = 3, kSdcBatch = 8;

/// The train check's replicas (level long; data-parallel replicas must stay bitwise equal):
/// the ranks whose parameter hash (`param_hashes`, one per rank, after `steps` steps) is not the
/// majority's (majority_hash; all of them without a majority), each named at its node
/// (`node_of_rank`), in a check "train/world" that fails; status "pass" and nothing named when
/// all agree. Pure.
ValidateCheck replicas_check(const std::vector<uint64_t>& param_hashes, const std::vector<std::string>& node_of_rank,
                             int steps);

/// What one rank computed in the SDC replay: per step, a running FNV-1a (64-bit) over the
/// bits of that step's loss (double), its gradient (float32, every parameter) and the
/// parameters after its AdamW step (float32), each step's hash chained on the one before, so
/// step_hashes.back() covers the whole replay.
struct SdcReplay {
  std::vector<uint64_t> step_hashes;  // one per step
  double first_loss = 0, last_loss = 0;  // the mean token loss of the first and last step, nats
  std::string model;  // one line: "GPT L2 C64 H4 T64 V256 (120576 params, fp32), 3 steps of 8 x 64 tokens, ..."
};

/// The replay on this rank alone: harness/configs/quick.json's GPT (L2 C64 NH4 T64 V256,
/// float32, seed 1234) built on the CPU (host memory, CpuOps, whatever the rank's device),
/// kSdcSteps steps of forward, backward and AdamW (lr 3e-3) on the same kSdcBatch sequences of
/// 64 tokens of reference/model/test_dataset.h's text per step on every rank, without communication:
/// the same binary on the same CPU model and BLAS computes the same bits. Cost: about 30 ms of
/// one core (3 steps of 512 tokens). `corrupt` (the test-only fault --inject RANK:sdc): the
/// first GEMM output of the second step (layer 0's qkv projection, (8 x 64, 192)) gets bit 0 of
/// one element's mantissa flipped (row 293, column 101: a key of token 37 of a sequence) inside
/// the op set the model runs on, as a faulty multiplier would leave it; everything after
/// computes from it. Not collective. Errors: none of its own
/// (a broken invariant aborts through the error sink).
SdcReplay sdc_replay(bool corrupt);

/// Ranks grouped by what must be equal for their replays to be bitwise equal: the inventory's
/// cpu_model and blas_version (the replay runs on the CPU; OpenBLAS picks its GEMM kernel by
/// CPU). Groups in the order of their first rank, ranks ascending. Pure.
std::vector<std::vector<int>> sdc_groups(const std::vector<nlohmann::json>& inv);

/// The check sdc/replay from every rank's step hashes (`hashes[r]`, kSdcSteps each, equal
/// lengths) and first-step loss (`first_loss[r]`, nats), the groups (sdc_groups) and every
/// rank's node: within each group of at least 2 ranks, the majority rule over the final hashes;
/// a rank off the majority fails at its node, with the first step its hashes differ from the
/// reference's at; a group without a majority fails all its ranks. The known value, on every
/// rank whatever its group: a first loss not within kSdcLossBand of ln 256 (a fresh model
/// predicts the 256 bytes about uniformly) fails that rank. Pass when every group agrees and
/// every first loss is near ln 256; skip when, so, no group has 2 ranks (one rank, or every CPU
/// model alone). `what` describes the replay (SdcReplay::model). Pure.
ValidateCheck judge_sdc(const std::vector<std::vector<uint64_t>>& hashes, const std::vector<double>& first_loss,
                        const std::vector<std::vector<int>>& groups, const std::vector<std::string>& node_of_rank,
                        const std::string& what);
/// How far from ln 256 a fresh model's first loss may be, nats (the replay's is 5.558, 0.013 off).
inline constexpr double kSdcLossBand = 0.1;

/// True when this run has the check sdc/replay: levels long and burnin, or --sdc at any level.
inline bool runs_sdc(const ValidateArgs& a) { return a.sdc || a.level == "long" || a.level == "burnin"; }

/// The check sdc/replay: the replay on every rank (corrupted on the rank --inject RANK:sdc
/// names), the hashes gathered, judged by judge_sdc into run.pass. Collective over the world;
/// its two steps time out as every check's.
void sdc_check(ValidateRun& run);

}  // namespace dtb
