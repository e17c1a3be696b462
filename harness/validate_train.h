// `dtbench validate --level long`'s trainer run: a few data-parallel training steps of the
// reference GPT on every rank of the world, so that an operator sees real training work end
// to end on the cluster (forward, backward, the gradient all-reduce, AdamW, replicas that
// stay identical) and which rank is slow.
//
// It is a data-parallel layout run through reference/layout/layout_runner.h (the sharded model at
// TP = PP = 1, ZeRO 0: micro-batches, the one division by the global token count, the SUM
// all-reduce over the DP group, AdamW; bitwise the losses and parameters of the train
// suite's plain-DP path), with each step timed through the layout runner's hooks and, for tests,
// one rank slowed.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/comm/communicator.h"

namespace dtb {

/// Result of a few data-parallel training steps of the reference GPT on every rank of `world`.
/// Times are this rank's, medians over the steps after the first (the warm-up: first-touch
/// allocation of the activations, OpenBLAS's buffers).
struct TrainProbe {
  int steps = 0;            // steps run, the warm-up included
  double step_seconds = 0;  // median wall time of a step (forward, backward, gradient all-reduce, optimizer), s
  /// Median of this rank's own work in a step, wall seconds: batch assembly, forward,
  /// backward and the AdamW step, plus the injected spin when this rank is slowed
  /// (compute_slowdown > 1); not the all-reduce, so not the time spent waiting there for
  /// slower ranks. The number to compare ranks on when each rank has its own cores: a slow
  /// rank's is high, the ranks that wait for it keep theirs. With more ranks than cores on a
  /// host it also counts the time a rank waited for a core, which depends on what the host's
  /// other ranks were doing meanwhile (a rank computing alone while the others wait in the
  /// all-reduce runs faster): compare compute_cpu_seconds there.
  double compute_seconds = 0;
  /// The same work in this process's CPU time (CLOCK_PROCESS_CPUTIME_ID, every thread), median
  /// seconds: independent of time-sharing, so it ranks a slowed rank correctly when ranks
  /// share cores (emulated nodes); misses a rank slowed by another process taking its cores.
  double compute_cpu_seconds = 0;
  /// Median time in the gradient and loss all-reduces, s, waiting for slower ranks included
  /// (what a fast rank's step grows by when another rank is slow).
  double comm_seconds = 0;
  double tokens_per_s = 0;  // this rank's tokens per step (its 64 sequences x 64 tokens) / step_seconds
  /// The global-batch mean loss (nats per token) of the first and the last step: the
  /// trainer all-reduces it, so it is the same on every rank.
  double first_loss = 0, last_loss = 0;
  bool finite = true;       // every step's loss finite
  /// FNV-1a (64-bit) over the bytes of this rank's float32 parameters after the last step:
  /// data parallelism keeps the replicas bitwise identical, so it is equal on every rank.
  uint64_t param_hash = 0;
  /// One line describing the model and layout, e.g. "GPT L2 C64 H4 T64 V256 (120576 params,
  /// fp32), DP4, 4 micro-batches of 16 x 64 tokens per rank, AdamW lr 0.003, cpu".
  std::string model;
};

/// Runs `steps` training steps of a tiny GPT (harness/configs/quick.json's model: L2 C64 NH4
/// T64 V256, 120,576 parameters, float32, initialised with seed 1234) on the CPU backend (host
/// memory and CpuOps, whatever device the ranks have), data parallel over all of `world`: a
/// global batch of 64 x world.size() sequences of 64 tokens per step, each rank's 64 in 4
/// micro-batches of 16 (gradient accumulation), drawn from reference/model/test_dataset.h's
/// in-memory text (no file), the gradients SUM-all-reduced once per step, then AdamW (lr 3e-3).
/// Cost: about 45 ms of one core per rank and step (4,096 tokens); 4 ranks sharing 2 cores
/// take about 90 ms a step, so 10 steps about 1 s. The loss falls from ln 256 = 5.55 to about
/// 3.9 in 6 steps. The runner computes step 0's gradient once before the first step (one more
/// forward and backward, not timed).
///
/// `compute_slowdown` >= 1 is a test-only fault (validate's --inject RANK:compute:FACTOR): in
/// every step, between its last backward and its gradient all-reduce, this rank spins for
/// (factor - 1) x the wall time of the step's batch assembly, forward and backward, keeping its
/// core busy as a device that many times slower would; the other ranks wait for it in the
/// all-reduce. compute_seconds and compute_cpu_seconds include the spin, comm_seconds does not;
/// step_seconds grows on every rank. (The spin sits inside the trainer's gradient reduction,
/// the DP group's communicator wrapped through LayoutHooks::wrap_dp: its first all-reduce of
/// a step spins first.)
/// Ranks may pass different factors (only the slowed rank's exceeds 1); a world of one rank
/// has no all-reduce, so no spin.
///
/// Collective over `world` (an MPI, host-memory communicator). Errors: throws InputError on
/// every rank when steps < 2 (one warm-up step plus one timed) or any rank's compute_slowdown
/// is not a finite number >= 1 (checked collectively, so no rank is left waiting in a
/// collective); a failure inside the trainer (a failed collective, a broken invariant) aborts
/// the job through the error sink (kernels/error.h), as in every suite.
TrainProbe validate_train_steps(Communicator& world, int steps, double compute_slowdown);

}  // namespace dtb
