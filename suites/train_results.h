// What a train suite run reports (suites/train.cc): the slowest rank's step split and the step
// breakdown from the spans, the record train/gpt/<layout>, and the checks and data with or
// without the references (the float64 oracle and single-rank runs, suites/oracle.h), with the
// lines printed beside them. Not the training itself: train.cc runs it.
#pragma once
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/op_profile.h"
#include "reference/layout/layout_runner.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"
#include "suites/train_checkpoint.h"

namespace dtb::train_suite {

/// What a train run is, from its section: the parsed settings and what follows from them.
struct TrainFacts {
  const GptConfig& model;
  const TrainConfig& cfg;
  const LayoutSpec& spec;  // the layout with every setting: ZeRO, recompute, precision, DP sync, DP all-reduce
  const CheckpointPlan& plan;
  bool dp_only;             // the plain DP trainer (reference/training/trainer.h), not the sharded model
  std::string layout_name;  // the record's name after train/gpt/ (train/llama/)
  double tokens_per_step;
  double peak_tflops;  // the section's peak_tflops (0: no MFU)
};

/// Per step run here, the slowest rank's step time (it sets the pace), split as that rank saw
/// it; its communication time includes waiting for the others (exposed communication).
struct StepSplit {
  std::vector<double> step_s, compute_s, comm_s;
  std::vector<int> slowest_rank;  // per step
  Summary step, compute, comm;    // of the three, over the steps
  /// Per op family (kernels/op_profile.h), seconds per step: the mean over steps and ranks.
  std::array<double, kNumOpFamilies> op_s{};
};

/// Per step, the slowest rank's times of `run`, and the op families' mean over ranks; the
/// summaries on rank 0 only. Collective over `world`.
StepSplit slowest_split(const LayoutOutcome& run, Communicator& world);

/// The DP run's step breakdown from ctx.spans, when recorded (--trace): per span name, the
/// median over steps of the seconds the step's slowest rank (slowest[s], as for the step
/// times) spent in it, in ms; a name absent from a step counts 0 there. An empty object
/// when no spans were recorded. Collective over `world`; the result is rank 0's.
nlohmann::json step_breakdown_ms(const SuiteContext& ctx, Communicator& world, const std::vector<int>& slowest,
                                 int64_t first_step = 0);

/// The run's record, train/gpt/<layout> (train/llama/<layout> for a Llama model; `backend` its backend's name).
nlohmann::json train_record(const TrainFacts& f, const LayoutOutcome& run, const StepSplit& sp,
                            const nlohmann::json& breakdown, const std::string& backend);

/// Without the references (on a GPU, or references: false): the replicas, and that the model
/// starts near the uniform loss ln V (GPT-2 init: logits ~0; an MoE model's losses add
/// moe_initial_loss) and learns; res.data the model, the loss curve, the per-step data and the
/// checkpoints. On a GPU the CUDA ops are checked against the CPU's by the CUDA tests.
void device_results(const TrainFacts& f, const LayoutOutcome& run, const SuiteContext& ctx, SuiteResult& res);
/// "# train on <device>: tokens/s, step ms, model TFLOP/s (and MFU)", printed through ctx.
void print_device_line(const TrainFacts& f, const StepSplit& sp, const std::string& device, const SuiteContext& ctx);

/// On the CPU: the checks against the float64 oracle (and, in half precision, the stated bounds
/// of the fp32 trajectory), the replicas and learning; res.data the loss curves of the run and
/// the references, the dataset, the per-step data and the checkpoints.
void oracle_results(const TrainFacts& f, const LayoutOutcome& run, const ReferenceSet& refs, const SuiteContext& ctx,
                    SuiteResult& res);
/// "# train: <layout> tokens/s (step: compute, comm); final loss (1 rank, f64)" on `n` ranks,
/// printed through ctx.
void print_cpu_line(const TrainFacts& f, const StepSplit& sp, int n, const LayoutOutcome& run,
                    const ReferenceSet& refs, const SuiteContext& ctx);

}  // namespace dtb::train_suite
