// The point-to-point probes of `dtbench validate`: the round-robin schedule of pairs, a
// bidirectional exchange with a deadline, each pair's best time per message size (three
// sweeps, slow pairs retested before blamed), the bandwidth matrix and each rank's median over
// its partners, and Hockney's alpha-beta fit per link class. Levels medium (within each node)
// and long (every pair) both use them.
#pragma once
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/validate/check.h"
#include "harness/validate/faults.h"
#include "harness/validate/steps.h"
#include "kernels/comm/communicator.h"

namespace dtb {

/// The round-robin schedule of all pairs among n ranks (the circle method): n - 1 rounds of
/// n / 2 disjoint pairs (n even; odd n: n rounds, one rank idle in each). Every pair meets
/// exactly once. n >= 1.
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n);

/// Hockney's latency-bandwidth model t(n) = alpha + n / beta fitted by least squares with
/// relative residuals (weights 1 / t^2) to (bytes, seconds) points, as the MPI literature and
/// nccl-tests' users summarise a link: returns
/// {alpha in seconds, beta in bytes/s}; {0, 0} with fewer than two distinct sizes, beta 0 when
/// the fitted slope is not positive.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& points);


/// The message sizes of the pair sweeps, bytes each way: latency, middle, bandwidth (the last
/// is the bandwidth metric's). The alpha-beta fit uses all three.
inline const std::vector<size_t> kPairSizes = {8, size_t(64) << 10, size_t(4) << 20};

/// This rank's best time with each partner per size: seconds[size][partner], 0 where not a
/// partner.
struct PairSweep {
  std::vector<std::vector<double>> seconds;
  std::vector<std::vector<std::pair<int, int>>> retested;  // per retest (two), the pairs measured again
};

/// A sweep of pairs: rounds of disjoint pairs (world ranks); pairs of a round that share a
/// machine (machine_of_rank: a host, or hosts of one kernel) take turns (slots), as ranks do for compute: two transfers through one host's memory
/// would measure each other. Three sweeps, each pair's best: where ranks share cores, one
/// sweep's figure for a pair can depend on where the scheduler put its two ranks at that
/// moment; then slow pairs are retested: a pair more than 25% slower than the upper quartile of
/// its link class (intra-node, inter-node), twice, keeping its best. A transfer that does not finish within the check's
/// timeout is reported at the next step's barrier, where rank 0 ends the run naming the pair
/// (CheckTimeout). Collective over the world (every rank takes every step).
/// The transfers are send_async/recv_async on `world` (its ranks are the pairs'), the retest's
/// figures an all_gather over it.
PairSweep sweep_pairs(Communicator& world, const std::vector<std::vector<std::pair<int, int>>>& rounds,
                      const std::vector<nlohmann::json>& inv, const Injection& inj, Steps& steps,
                      const std::string& check);

/// The n x n matrix `m` of seconds (r * n + p) as bandwidths, 2 x bytes / seconds in GB/s
/// (both directions counted; 0 where no time).
nlohmann::json bandwidth_matrix_json(const std::vector<double>& m, int n, size_t bytes);

/// Per rank: the median over its partners (those with a time in `m`) of 2 x bytes / seconds,
/// GB/s.
std::vector<double> median_bandwidth(const std::vector<double>& m, int n, size_t bytes);

/// Alpha-beta per link class (intra-node, inter-node: `node_of_rank` decides) over the measured
/// pairs of `m_by_size` ([size][r * n + p], seconds), each size's median over the pairs: the
/// check `name`. Called where pairs were measured, so it fails (closed) when no class has two
/// sizes, or a class's fit is not finite or its beta not positive.
ValidateCheck alpha_beta_check(const std::vector<std::vector<double>>& m_by_size,
                               const std::vector<std::string>& node_of_rank, const std::string& name);

}  // namespace dtb
