// Pipeline-parallel schedules as data: the ordered forward/backward actions of one pipeline
// rank under GPipe (Huang et al. 2019), 1F1B / PipeDream-Flush and interleaved 1F1B
// (Narayanan et al. 2021; Megatron-LM's schedules.py), and a discrete-event simulator that
// runs every rank's list with its data dependencies to give makespan, bubble and in-flight.
#pragma once
#include <string>
#include <vector>

namespace dtb {

/// backward: the whole backward; backward_input and backward_weight: its two halves under a
/// zero-bubble schedule, B (input gradients, on the critical path) and W (weight gradients,
/// deferrable) of Qi et al. 2024, "Zero Bubble Pipeline Parallelism".
enum class PipeOp { forward, backward, backward_input, backward_weight };

/// One compute action of a pipeline rank: the forward or backward (or B or W) of `micro_batch`
/// (0..m-1) through model chunk `chunk` (0..v-1) of this rank. Chunk c of rank `stage`
/// is virtual stage c * p + stage (Megatron's interleaved layer assignment); without
/// interleaving chunk is 0 and the virtual stage is the rank.
struct PipeAction {
  PipeOp op = PipeOp::forward;
  int micro_batch = 0;
  int chunk = 0;
  bool operator==(const PipeAction&) const = default;
};

/// Throws InputError naming the value unless: schedule is "gpipe", "1f1b", "interleaved" or
/// "zb-h1";
/// p >= 1; m >= 1; v == 1 outside "interleaved", and for "interleaved" v >= 2 and m a
/// multiple of p (Megatron-LM's requirement for its micro-batch groups).
void validate_pipeline(const std::string& schedule, int p, int m, int v);

/// The ordered compute actions of pipeline rank `stage` (0..p-1) for one step of m
/// micro-batches (m * v forwards and m * v backwards):
///  - "gpipe": F0..F(m-1), then B0..B(m-1). Backwards run in micro-batch order, as
///    torch.distributed.pipelining's ScheduleGPipe does (GPipe's paper leaves the order
///    open; with equal per-micro-batch costs the makespan is the same either way).
///  - "1f1b": warm-up of min(p - stage - 1, m) forwards, then one forward / one backward
///    until the forwards run out, then the remaining backwards (Megatron's
///    forward_backward_pipelining_without_interleaving).
///  - "interleaved": Megatron's forward_backward_pipelining_with_interleaving with v chunks:
///    the k-th forward is chunk (k mod pv) / p of micro-batch (k / pv) p + k mod p (groups
///    of p micro-batches per chunk), the k-th backward the same with chunk v - 1 - that;
///    warm-up min(2 (p - stage - 1) + (v - 1) p, m v) forwards, then 1F1B, then cool-down.
///  - "zb-h1": ZB-H1 of Qi et al. 2024 (Sec. 3.1, Fig. 3): 1F1B's warm-up of p - stage - 1
///    forwards, then each steady step a forward and a B, followed by the oldest pending W
///    except in the first `stage` steady steps (those W's are deferred), then each remaining B
///    followed by a W, then the deferred W's. Every stage thus holds at most p micro-batches'
///    activations (1F1B's most, on stage 0) and, with T_F = T_B = T_W and m >= p, idles
///    (p - 1) T_F instead of 1F1B's 3 (p - 1) T_F. W's run in micro-batch order, as 1F1B's
///    backwards.
/// Errors: InputError from validate_pipeline, or for stage outside [0, p).
std::vector<PipeAction> pipeline_schedule(const std::string& schedule, int p, int m, int v, int stage);

/// What simulate_pipeline found. Times in the unit of t_forward / t_backward.
struct PipelineSimulation {
  double makespan = 0;               // first action start (0) to the last action's end
  std::vector<double> busy;          // per stage: compute time, m (t_f + t_b)
  std::vector<double> idle;          // per stage: makespan - busy
  std::vector<double> stage_bubble;  // per stage: idle / makespan
  double bubble = 0;                 // sum(idle) / (p makespan)
  /// Per stage: the most forwards done whose backward has not run, in chunk activations
  /// ((mb, chunk) pairs) and in micro-batch equivalents (chunks / v: a chunk holds 1/v of
  /// the rank's layers, so its activations are 1/v of a micro-batch's).
  std::vector<int> peak_in_flight_chunks;
  std::vector<double> peak_in_flight;
};

/// Runs every stage's pipeline_schedule list in order, each action starting when its stage
/// is free and its inputs are ready, with zero communication time: forward of (mb, virtual
/// stage s) needs forward (mb, s - 1); backward (or B) (mb, s) needs forward (mb, s) and
/// backward (or B) (mb, s + 1) (the last virtual stage's only its own forward); W (mb, s) its
/// own B. A chunk costs t_forward / v and t_backward / v (the rank's layers split evenly over
/// its chunks); t_backward is the whole backward, of which t_weight is W's part (B costs
/// t_backward - t_weight; 0 <= t_weight < t_backward; only zero-bubble schedules split it).
/// Balanced stages give bubble = (p - 1) / (m + p - 1) for gpipe and 1f1b and
/// (p - 1) / (v m + p - 1) interleaved: the bubble (p - 1)(t_f + t_b) / v of Narayanan et
/// al. 2021 Sec. 2.2 as a fraction of the whole step, not of the ideal time.
/// Errors: InputError as pipeline_schedule, or for costs that are not finite and > 0;
/// std::logic_error if the lists deadlock (a schedule bug).
PipelineSimulation simulate_pipeline(const std::string& schedule, int p, int m, int v, double t_forward,
                                     double t_backward, double t_weight = 0);

/// The per-micro-batch compute times of one virtual stage: its forward, its whole backward, and
/// the part of that backward a zero-bubble schedule runs as W (B costs backward - weight). Any
/// one unit (seconds, ms): simulate_pipeline's makespan comes back in it.
struct StageCost {
  double forward = 0, backward = 0, weight = 0;
};

/// simulate_pipeline with each virtual stage's own times (p v entries, virtual-stage order):
/// unequal stages, as a model's (the first holds the embedding, the last the LM head) or a
/// measured run's. The uniform overload above is this with forward t_forward / v, backward
/// t_backward / v, weight t_weight / v for every virtual stage. Errors: InputError as
/// pipeline_schedule, for a cost count other than p v, or for times not finite, forward and
/// backward not > 0, or weight outside [0, backward).
PipelineSimulation simulate_pipeline(const std::string& schedule, int p, int m, int v,
                                     const std::vector<StageCost>& costs);

/// The closed-form bubble fraction of the whole step with equal stages: (p - 1) / (m + p - 1),
/// or (p - 1) / (v m + p - 1) for "interleaved", and for "zb-h1" with T_F = T_B = T_W
/// (p - 1) / (3 m + p - 1) for m >= p (below, where ZB-H1 has no steady phase, its unit-time
/// simulate_pipeline's bubble). No validation.
double pipeline_bubble_theory(const std::string& schedule, int p, int m, int v);

/// ZB-H1's bubble fraction of the whole step from the per-micro-batch times of one stage's
/// forward, B and W (Qi et al. 2024, Sec. 3.1: each stage idles (p - 1)(T_F + T_B - T_W)):
/// idle / (m (T_F + T_B + T_W) + idle). It is pipeline_schedule("zb-h1")'s bubble for m >= p
/// and T_W <= min(T_F, T_B) (tested); outside that, simulate_pipeline gives it. No validation.
double zb_h1_bubble_theory(int p, int m, double t_forward, double t_input, double t_weight);

}  // namespace dtb
