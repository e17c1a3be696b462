// The single-rank references and the float64 oracle that the train and conformance suites
// compare every layout with (docs/numerics.md), and the checks that do it.
// The tolerance argument is train.cc's, in oracle.cc: a float32 run's deviation from the
// oracle is scaled by the largest deviation of several single-rank float32 references.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "reference/model/gpt.h"
#include "reference/layout/layout_runner.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/training/trainer.h"
#include "suites/suite.h"

namespace dtb {

/// One single-rank run's step-0 gradient, per-step losses and global gradient norms
/// (TrainRun::grad_norms: NaN where skipped) and final parameters, in double, over the full
/// model (gpt.h layout).
struct Reference {
  Reference(int steps = 0, size_t P = 0) : losses(steps), grad_norms(steps), params(P), grads0(P) {}
  std::vector<double> losses, grad_norms, params, grads0;
};

/// The single-rank references in the run's precision (micro-batches 1, 2 and 4, those that
/// divide the global batch) and the float64 oracle, as rank 0 holds them after
/// run_references.
struct ReferenceSet {
  std::vector<int> micro_batches;  // of each single-rank reference
  std::vector<Reference> single;
  Reference oracle;
  Precision precision = Precision::fp32;  // of the single-rank references
  /// Unit roundoff of the precision's storage: 2^-24 (fp32), 2^-8 (bf16), 2^-11 (fp16).
  double unit_roundoff() const;
  /// k of the tolerance k x (largest reference deviation), from how many references there
  /// are: 10 for 3, 25 for 2, 640 for 1 (derivation in oracle.cc).
  double factor() const;
  std::string how() const;  // "k=10 x max deviation of 3 single-rank fp32 references"
};

/// A train section's TrainConfig: steps, global_batch, micro_batches, seq_len, lr, beta1,
/// beta2, eps, weight_decay (range-checked, InputError naming "<path>.<key>"); the seed from
/// the run config.
TrainConfig train_config_from_json(const nlohmann::json& section, const nlohmann::json& config,
                                   const std::string& path);

/// Runs the references of `cfg` in `precision` under `sync` (the layout's recipe: stale
/// gradients or local steps, whose one-rank references are train()'s; micro-batches that divide
/// each DiLoCo replica's share) on one rank each (job j on rank j % world.size(), side by
/// side) with the CPU ops, and collects them on rank 0 (other ranks get an empty set):
/// fp32 through the single-rank Gpt<float>, bf16 / fp16 through the sharded model on a
/// one-rank layout (which with tp = 1 runs gpt.cc's ops); the oracle is Gpt<double>.
/// Collective over `world`.
/// `oracle` (optional): a float64 oracle of the same model, data and steps from an earlier
/// call (rank 0's), used instead of running it again (it does not depend on `precision`);
/// every rank must pass one or none alike.
/// `fp8` (optional): FP8 linears (docs/fp8.md) over `precision`'s storage in the single-rank
/// references (one-rank layout runs, as the half precisions'); not in the oracle.
ReferenceSet run_references(const GptConfig& model, Device& device, const Dataset& data, const TrainConfig& cfg,
                            Precision precision, const DpSync& sync, Communicator& world,
                            const Reference* oracle = nullptr, const std::optional<Fp8Settings>& fp8 = {});

/// ||a - ref|| / ||ref|| (||a - ref|| when ref is 0).
double rel_norm_diff(const double* a, const double* ref, size_t n);

/// A run's checks against the oracle, named "<prefix>loss/step:s", "<prefix>grads/step:0/
/// <tensor>" (when grads0 is not empty) and "<prefix>params/<tensor>": per-step loss within
/// k x the references' largest deviation so far + u |loss| / sqrt(tokens), each tensor's
/// relative norm error within k x the references' largest + 4 ulp.
std::vector<Check> oracle_checks(const std::string& prefix, const ReferenceSet& refs, const GptConfig& model,
                                 double tokens_per_step, const std::vector<double>& losses,
                                 const std::vector<double>& grads0, const std::vector<double>& params);

/// A run's global gradient norm per step (LayoutOutcome::grad_norms) against the oracle's,
/// "<prefix>grad_norm/step:s": |norm - norm_f64| within k x the references' largest deviation
/// up to step s + 4 ulp of norm_f64 (derivation in oracle.cc). A step the run skipped (NaN)
/// passes only where a single-rank reference skipped it too.
std::vector<Check> grad_norm_checks(const std::string& prefix, const ReferenceSet& refs,
                                    const std::vector<double>& grad_norms);

/// A bf16 / fp16 run's losses against the fp32 trajectory `ref` (the float64 oracle or an
/// fp32 run of the same model, data and steps), the stated bounds of the mixed-precision
/// recipe (derivation in oracle.cc): "<prefix>loss_vs_fp32/step:0", |loss_0 - ref_0| <= u
/// |ref_0| with u the precision's unit roundoff; "<prefix>loss_vs_fp32/tail_mean", the mean
/// loss over the last quarter of the steps within 2^-4 (6.25%) of ref's, relative.
std::vector<Check> half_vs_fp32_checks(const std::string& prefix, Precision precision,
                                       const std::vector<double>& losses, const std::vector<double>& ref);

/// Two loss curves over the last quarter of the steps (at least one step): `gap` the mean of the
/// per-step differences losses - ref over ref's mean loss (signed, relative; the difference of the
/// two means), `se_rel` the standard error of that mean difference (the differences' sample
/// standard deviation / sqrt(steps); 0 for one step) over ref's mean loss, `steps` the quarter's
/// length. Aborts (DTB_CHECK) for curves of different lengths or none.
struct TailGap {
  double gap = 0, se_rel = 0;
  int steps = 0;
};
TailGap tail_gap(const std::vector<double>& losses, const std::vector<double>& ref);

/// The largest per-step |losses - ref| / |ref| (same lengths; aborts otherwise).
double max_rel_deviation(const std::vector<double>& losses, const std::vector<double>& ref);

/// FP8's own share of the last quarter's loss gap to bf16 (fp8_vs_bf16_checks): E5M2's unit
/// roundoff squared.
inline constexpr double kFp8TailGap = 0x1p-6;

/// An FP8 run's losses (docs/fp8.md: FP8 linears over bf16) against the bf16 run `ref` of the same
/// model, data and steps, the bounds derived in oracle.cc: "<prefix>loss_vs_bf16/step:0",
/// |loss_0 - ref_0| <= 2^-4 |ref_0| (E4M3's unit roundoff: the forward's operands); and
/// "<prefix>loss_vs_bf16/tail_mean", |tail_gap's gap| <= kFp8TailGap = 2^-6 (E5M2's unit
/// roundoff squared: FP8's own share) + 3 se_rel (tail_gap's; the trajectories' decorrelation, as
/// the run measures it). Errors: aborts (DTB_CHECK) for curves of different lengths or none.
std::vector<Check> fp8_vs_bf16_checks(const std::string& prefix, const std::vector<double>& losses,
                                      const std::vector<double>& ref);

/// How far a run sits from its one-rank twin (the same recipe and micro-batches on one rank):
/// `loss`, per step, the largest |loss - twin's| up to that step (an envelope); `grads0` and
/// `params`, ||run - twin|| / ||twin|| over the whole model's step-0 gradient and final
/// parameters (gpt.h layout; the gathered copies; rel_norm_diff: ||run - twin|| where the twin's is
/// 0), NaN where either run has none (a resumed run's step-0 gradient). A NaN anywhere stays NaN (the
/// envelope too), so that its check fails. Aborts (DTB_CHECK) on outcomes of different lengths.
struct TwinDeviation {
  std::vector<double> loss;
  double grads0 = 0, params = 0;
};
TwinDeviation twin_deviation(const LayoutOutcome& run, const LayoutOutcome& twin);

/// Whether a layout splits a sum before a quantization of FP8 linears (tensor parallelism: the
/// row-parallel GEMMs and the column-parallel dgrads; context parallelism: the attention's merge),
/// which moves operands quantized after it by ~fp32's rounding (fp8_twin_bound's flip model).
inline bool fp8_splits_before_quantizing(const ParallelLayout& l) { return l.tp > 1 || l.cp > 1; }

/// The regime the FP8 layout contract holds in (oracle.cc): a layout's first kFp8TwinSteps steps (new
/// batches each, the delayed recipe's amax history filling) with the parameters held (learning rate
/// kFp8TwinLr = 0), so that every step's operands are the twin's up to the layout's own arithmetic.
/// Adam's first update moves every parameter by +-lr whatever its gradient's size, so a gradient a
/// rounding carries across 0 moves its parameter by 2 lr and, through one FP8 flip at the next
/// step, forks the two trajectories (docs/fp8.md).
inline constexpr int kFp8TwinSteps = 3;
inline constexpr double kFp8TwinLr = 0.0;

/// The FP8 layout contract (docs/fp8.md; derivation in oracle.cc): the bound on an FP8 layout's
/// deviation from its FP8 one-rank twin, given `dev32` (the same layout's deviation from its fp32
/// twin, the same quantity: a loss envelope or a relative norm) and `scale` (|loss| of the twin at
/// that step, or 1 for a relative norm). `flips` false (PP, DP: every quantized operand is the
/// twin's): k dev32 + 4 u32 scale; true (TP, CP: fp8_splits_before_quantizing): k sqrt(2 u8
/// dev32) + 4 u32 scale; k = 10, u32 = 2^-24, u8 = 2^-3 (E5M2).
double fp8_twin_bound(bool flips, double dev32, double scale);

/// Why the FP8 layout contract does not cover recipe `s` on layout `l` ("" when it does): the
/// current recipe under tensor parallelism, whose per-GEMM scales follow the whole tensor's amax,
/// which one flip can move, re-rounding every value of the tensor (an amax cascade, measured in
/// docs/fp8.md); under context parallelism the layout rule refuses it already.
std::string fp8_twin_uncovered(const Fp8Settings& s, const ParallelLayout& l);

/// The checks of an FP8 layout `run` against its FP8 one-rank `twin` in the contract's regime (the
/// parameters held), given the same layout's fp32 run `run32` and its fp32 twin `twin32` (the same
/// micro-batches): "<prefix>fp8_vs_twin/loss/step:s" (the largest |loss - twin's| up to step s) and
/// "<prefix>fp8_vs_twin/grads/step:0" (the step-0 gradient's relative norm), each within
/// fp8_twin_bound(flips, dev32, scale); under the delayed recipe (LayoutOutcome::fp8_state)
/// "<prefix>fp8_vs_twin/amax_history/weight", the weights' amax histories, scales and scale_invs bitwise
/// the twin's, and without TP and CP "<prefix>fp8_vs_twin/amax_history/activations", the inputs' and
/// output gradients' within the step-0 gradient's bound (oracle.cc says why not under TP and CP);
/// replicas are checked by the caller. Aborts (DTB_CHECK) on
/// outcomes of different lengths.
std::vector<Check> fp8_twin_checks(const std::string& prefix, bool flips, const LayoutOutcome& run,
                                   const LayoutOutcome& twin, const LayoutOutcome& run32, const LayoutOutcome& twin32);

}  // namespace dtb

namespace dtb {

/// Per step, the slowest rank's step time in seconds (it sets the pace), on every rank of
/// `world` (which ran `out`'s layout). Collective over `world`.
std::vector<double> slowest_step_times(const LayoutOutcome& out, Communicator& world);

/// The step period in seconds: the slowest rank's mean step time over steps [1, n) (step 0
/// allocates), the time a step takes at the rate the run goes, as Megatron-LM's "elapsed time per
/// iteration" is a mean over its logging interval. Where the ranks' steps jitter out of phase (ranks
/// sharing cores take turns), the per-step maximum over ranks overstates it: a traced DP4 with two
/// ranks per core went at 7.35 ms a step while the median of slowest_step_times was 9.56 ms.
/// Needs n >= 2 steps (InputError otherwise). Collective over `world`.
double step_period(const LayoutOutcome& out, Communicator& world);

/// The model, TrainConfig and DP-over-every-rank layout that the offload and overlap suites
/// time: section keys model {L, C, NH, T, V}, steps, micro_batches, micro_batch_size,
/// seq_len (global batch = micro_batch_size x world x micro_batches), the run's seed.
/// Errors: InputError naming "<path>.<key>".
struct TimedDpSetup {
  GptConfig model;
  TrainConfig cfg;
  ParallelLayout layout;
};
TimedDpSetup timed_dp_setup(const nlohmann::json& section, const nlohmann::json& config, const std::string& path,
                            int world_size);
/// A comparable printable form of every field (for the suites' Params::to_json).
nlohmann::json to_json(const TimedDpSetup& t);

}  // namespace dtb
