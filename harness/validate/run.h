// One run of `dtbench validate` while it measures: who this rank is among the others (its
// node, its turn on its host, every rank's inventory), its GPU when it has one, the steps of
// a check, and what has been measured so far, which the termination hook reads under `mu`.
// The levels (levels.h) fill it; the command (command.cc) judges and reports it.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/validate.h"
#include "harness/validate/check.h"
#include "harness/validate/faults.h"
#include "harness/validate/steps.h"
#include "kernels/backend.h"
#include "kernels/comm/communicator.h"

namespace dtb {

/// The checks of one pass over the measuring levels, and the metrics it measured.
struct ValidatePass {
  std::vector<ValidateCheck> checks;
  std::map<std::string, Metric> metrics;
};

/// Every rank's state of one validate run. Built collectively over `world` (level quick's
/// inventory: each rank's, gathered on all); the checks and metrics it holds are the same on
/// every rank (each figure is gathered before it is recorded).
class ValidateRun {
 public:
  /// Opens this rank's GPU (cuda backend; an error is recorded in its inventory), gathers the
  /// inventories and numbers the nodes. Collective. Errors: InputError (on every rank) when an
  /// emulated node spans two hosts.
  ValidateRun(Communicator& world, const ValidateArgs& args, const Injection& inj);
  ValidateRun(const ValidateRun&) = delete;
  ValidateRun& operator=(const ValidateRun&) = delete;

  Communicator& world;
  const ValidateArgs& args;
  const Injection inj;
  int n = 1, me = 0;            // world size, this rank
  int node_index = 0;           // this rank's node (emulated or real), numbered from 0
  int turn = 0, turns = 1;      // this rank's turn among the ranks of its machine, and their number
  std::vector<nlohmann::json> inv;        // every rank's inventory, in rank order
  std::vector<std::string> node_of_rank;  // every rank's node name
  std::unique_ptr<Backend> gpu;           // this rank's GPU (cuda backend), or null
  std::unique_ptr<Steps> steps;

  /// What the termination hook reads: the check running, the pass being measured, the checks
  /// and metrics of the finished passes (each rank's worst figure) and their number.
  std::mutex mu;
  std::string current;
  ValidatePass pass;
  std::vector<ValidateCheck> checks;
  std::map<std::string, Metric> metrics;
  int loops = 0;

  bool medium() const { return args.level != "quick"; }
  bool long_level() const { return args.level == "long" || args.level == "burnin"; }
  std::string host(int r) const { return inv[size_t(r)].value("host", "?"); }
  int node_index_of(int r) const { return inv[size_t(r)].value("node_index", 0); }
  /// The test-only compute slowdown of this rank (1: none).
  double compute_factor() const { return me == inj.rank ? inj.compute : 1.0; }

  /// Marks `name` as the check running (for the termination hook).
  void begin_check(const std::string& name);
  /// Records a check or a metric of the pass being measured.
  void add_check(ValidateCheck c);
  void add_metric(const std::string& name, Metric m);
  /// Every rank's `mine` (the same length on each), concatenated in rank order. Collective.
  std::vector<double> gather(const std::vector<double>& mine);
  /// Two per-rank figures of this rank, gathered into the metrics `first` and `second` (units
  /// from validate_metrics()). Collective.
  void add_two_metrics(std::pair<double, double> mine, const std::string& first, const std::string& second);
  /// The metrics of the finished passes, each rank's worse figure where the running pass has
  /// one too. The caller holds `mu`.
  std::map<std::string, Metric> measured_so_far() const;
};

}  // namespace dtb
