// The step-time model's hardware measured on the machine at hand (reference/analytic/step_time_model.h):
// the compute ops of the layouts to predict timed at their own shapes on the backend, and the
// all-reduce and send/receive timed at a few sizes over groups of the world and fitted to
// alpha-beta — every rank measuring at once, as the ranks train. Not the model; not a suite.
#pragma once
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "reference/layout/layout_runner.h"
#include "reference/analytic/step_time_model.h"

namespace dtb {

/// What to measure: the ops (StepOp, step_ops of each layout; repeated keys are timed once) in
/// `precision`, each over a loop of about `window_s` seconds on every rank at once; each
/// collective size the median of `samples` calls.
struct StepTimeCalibrationSpec {
  std::vector<StepOp> ops;
  Precision precision = Precision::fp32;
  int samples = 9;
  double window_s = 0.004;
};

/// Measures StepTimeHardware on `comm` (every rank, at once; collective over it):
///  - op_seconds: each op of spec.ops on `ops` (the backend's ops for spec.precision; the CPU's
///    own for a null pointer on a CPU device), per call, over a loop of spec.window_s run by every
///    rank at once and closed by a barrier: the throughput the ranks get together, so that ranks
///    sharing cores (more ranks than cores) see the ops slow down as in training; the largest
///    over ranks;
///  - op_sequence_factor: every op of spec.ops once, in order, over a loop of 4 spec.window_s, over
///    the sum of the ops' own times (at least 1); op_seconds and the fits below are multiplied by
///    it, so that an op costs what it costs between other ops, as in a step;
///  - gemm, attention: the rate fitted to those times (total FLOPs / total seconds, alpha 0);
///    memory: alpha-beta fitted to the memory-bound ops' (bytes, seconds);
///  - collectives: for every group size g > 1 dividing the world, the all-reduce over groups of
///    g consecutive ranks (all groups at once) at 64 B to 1 MiB, fitted to alpha + busbytes / bw
///    (CollectiveFit), intra-node (one node: ranks_per_node is left 0);
///  - p2p_intra (and p2p_inter, the same): sendrecv between ranks r and r xor 1 at the same
///    sizes. Collectives are timed in tight loops (each call's median of spec.samples, the
///    largest over ranks): their own cost;
///  - host_link: copy_to_host of 4 KiB and 1 MiB; host_pass: masked_sq_sum (reference/zero/zero.h)
///    over the largest optimizer op's element count and an eighth of it; both as the ops, over a
///    window on every rank at once.
/// Fits minimise the squared relative error (small messages count as much as large); the memory,
/// collective, p2p and host fits time their sizes again when a fit finds no bandwidth
/// (fit_alpha_beta_retimed).
/// Errors: InputError for a precision whose ops the backend lacks on a non-CPU device.
StepTimeHardware calibrate_step_time(Communicator& comm, Device& device, const PrecisionOps& ops,
                                     const StepTimeCalibrationSpec& spec);

/// The fits of `hw` as JSON (the sweep suite's data.calibration): gemm and attention rates
/// (GFLOP/s) and alphas (us) per precision, memory alpha (us) and GB/s, each collective fit's
/// group, alpha (us) and bus GB/s, p2p and host link the same, and op_us: op_seconds in us.
nlohmann::json step_time_hardware_json(const StepTimeHardware& hw);

/// Fits t = alpha + x / per over points (x, t), minimising sum ((t_i - alpha - x_i / per) /
/// t_i)^2, with alpha >= 0 and per > 0 (a non-positive slope gives per 0: the size costs
/// nothing). Errors: InputError for fewer than two points or a time <= 0.
AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& t);

/// fit_alpha_beta over times measured by `time_at(i)` (seconds per call at size x[i]), timed
/// again when the fit finds no bandwidth: other work on the machine (a busy CI runner) can leave
/// a small size slower than a large one. Each round times every size once more and keeps each
/// size's least time (the one least disturbed); it stops at the first fit with a bandwidth, or
/// after `rounds` rounds with the last fit (per 0; the caller says whether that is an error). A
/// quiet machine costs one round, as a single fit. time_at must give every rank the same time
/// (reduced over the ranks, as the calibration's timers do), so that every rank times the same
/// rounds. Errors: InputError for rounds < 1, and fit_alpha_beta's.
AlphaBeta fit_alpha_beta_retimed(const std::vector<double>& x, const std::function<double(size_t)>& time_at,
                                 int rounds = 4);

}  // namespace dtb
