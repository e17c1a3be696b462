// The suites' checks can fail: each suite runs once on the world as it is (every check
// passes) and once through a Communicator that injects a fault (the matching checks
// fail). Runs in the multi-rank binary at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/comm/communicator.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

/// Forwards everything to `inner`, except that a SUM all_reduce of floats is multiplied by
/// `scale` afterwards (an averaging bug), and, when `corrupt` is set, rank 1 flips one
/// element of every all_reduce result (a bad link).
class FaultyCommunicator final : public ForwardingCommunicator {
 public:
  FaultyCommunicator(Communicator& inner, float scale, bool corrupt)
      : ForwardingCommunicator(inner), scale_(scale), corrupt_(corrupt) {}
  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    inner_.all_reduce(s, r, n, t, op);
    if (t == DType::f32 && op == ReduceOp::sum && scale_ != 1.0f)
      for (size_t i = 0; i < n; ++i) static_cast<float*>(r)[i] *= scale_;
    if (corrupt_ && rank() == 1 && n > 0 && t == DType::f32) static_cast<float*>(r)[n / 2] += 1.0f;
  }

 private:
  float scale_;
  bool corrupt_;
};

// Runs a registered suite with `section` over `comm`; rank 0's checks come back (the
// other ranks' are empty for the train suite), so the verdict is broadcast from rank 0.
struct Verdict {
  int failed = 0, total = 0;
  std::vector<std::string> failed_names;
};
Verdict run(const std::string& suite_name, Communicator& comm, Communicator& world, const json& config,
            const Dataset* data) {
  auto suite = suite_registry().at(suite_name)();
  CpuDevice device;
  SuiteContext ctx{comm, device, config, config.at(suite_name), data};
  const SuiteResult r = suite->run(ctx);
  Verdict v;
  for (const Check& c : r.checks) {
    v.total++;
    if (!c.passed) v.failed++, v.failed_names.push_back(c.name);
  }
  int counts[2] = {v.failed, v.total};
  world.broadcast(counts, 2, DType::i32, 0);
  v.failed = counts[0], v.total = counts[1];
  return v;
}

TEST(Faults, CollectivesCountACorruptedElement) {
  auto world = make_mpi_world();
  json s = suite_registry().at("collectives")()->defaults();
  s["ops"] = {"all_reduce"};
  s["max_bytes"] = 1024;
  s["iters"] = 1;
  s["repetitions"] = 1;
  const json config = {{"collectives", s}};
  const Verdict ok = run("collectives", *world, *world, config, nullptr);
  EXPECT_EQ(ok.failed, 0) << (ok.failed_names.empty() ? "" : ok.failed_names.front());
  EXPECT_EQ(ok.total, 2);
  FaultyCommunicator bad(*world, 1.0f, /*corrupt=*/true);
  const Verdict v = run("collectives", bad, *world, config, nullptr);
  EXPECT_EQ(v.failed, 2) << "one wrong element per size must fail both placements' checks";
}

Dataset text() {
  std::string t;
  for (int i = 0; i < 30; ++i)
    t += "It is a truth universally acknowledged, that a single man in possession of a good "
         "fortune, must be in want of a wife. ";
  Dataset d;
  d.path = "inline";
  d.bytes.assign(t.begin(), t.end());
  return d;
}

json train_config() {
  json train = suite_registry().at("train")()->defaults();
  train["steps"] = 30;
  train["lr"] = 0.01;
  train["global_batch"] = 8;
  train["micro_batches"] = 1;
  train["seq_len"] = 16;
  return {{"seed", 3}, {"model", {{"L", 1}, {"C", 16}, {"NH", 2}, {"T", 16}, {"V", 256}}}, {"train", train}};
}

TEST(Faults, TrainCatchesAGradientAveragedTwice) {
  auto world = make_mpi_world();
  const Dataset data = text();
  const Verdict ok = run("train", *world, *world, train_config(), &data);
  EXPECT_EQ(ok.failed, 0) << (ok.failed_names.empty() ? "" : ok.failed_names.front());
  EXPECT_GT(ok.total, 16);
  // Every SUM all-reduce divided by the world size once more: the DP gradient (and the
  // reported loss) is 1/n of the truth.
  FaultyCommunicator bad(*world, 1.0f / float(world->size()), false);
  const Verdict v = run("train", bad, *world, train_config(), &data);
  EXPECT_GE(v.failed, 16) << "every step-0 gradient tensor check must fail";
}

}  // namespace
}  // namespace dtb
