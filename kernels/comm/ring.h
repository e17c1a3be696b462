// The ring algorithm's traffic factors, written once for every layer that models or measures
// it (the collectives suite's bus factors, the emulated links, the hierarchical all-reduce's
// byte count, the step-time model, the calibration, the claims): in a ring over g ranks each
// rank sends (and receives) (g - 1) / g of the buffer in a reduce-scatter or an all-gather, and
// twice that in an all-reduce, one of each (Patarasuk and Yuan 2009; nccl-tests'
// doc/PERFORMANCE.md bus factors). Header-only, no dependency: kernels/ and reference/ use it.
#pragma once

namespace dtb {

/// The share of a buffer each of g ranks sends in a ring reduce-scatter or all-gather:
/// (g - 1) / g, unitless (0 at g = 1). For g >= 1; nothing is checked (a plain formula).
constexpr double ring_gather_factor(double g) { return (g - 1) / g; }

/// The share of a buffer each of g ranks sends in a ring all-reduce (a reduce-scatter, then an
/// all-gather): 2 (g - 1) / g, unitless (0 at g = 1), nccl-tests' all-reduce bus factor. For
/// g >= 1; nothing is checked.
constexpr double ring_all_reduce_factor(double g) { return 2.0 * (g - 1) / g; }

}  // namespace dtb
