// A minimal suite built only for the tests (target dtbench_example), the one docs/adding-a-suite.md
// walks through: it times a sum of the integers 1..n on every rank and checks it against n(n+1)/2.
// It measures nothing worth knowing; its Python module and schema fragment live beside it.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

// The section, typed: the one parse that validate() and run() both use.
struct Params {
  int64_t n = 0;
  int repetitions = 0;
  static Params parse(const nlohmann::json& section, const nlohmann::json&, const WorldInfo&) {
    Params p;
    p.n = int_in_range(section, "n", "example.n", 1, int64_t(1) << 30);
    p.repetitions = int(int_in_range(section, "repetitions", "example.repetitions", 1, 1000));
    return p;
  }
  nlohmann::json to_json() const { return {{"n", n}, {"repetitions", repetitions}}; }
};

class ExampleSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "example"; }
  std::string description() const override { return "test-only: times a sum of 1..n and checks it"; }
  nlohmann::json defaults() const override { return {{"n", 100000}, {"repetitions", 5}}; }

  void validate(const nlohmann::json& section, const nlohmann::json& config, const WorldInfo& world) const override {
    Params::parse(section, config, world);
  }

  SuiteResult run(SuiteContext& ctx) override {
    const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const int64_t n = p.n;
    const int reps = p.repetitions;
    std::vector<double> times;  // s, the slowest rank's per repetition
    int64_t sum = 0;
    for (int r = 0; r < reps; ++r) {
      ctx.world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      volatile int64_t s = 0;  // volatile: the loop is what is timed, not its closed form
      for (int64_t i = 1; i <= n; ++i) s = s + i;
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ctx.world.all_reduce(&t, &t, 1, DType::f64, ReduceOp::max);
      times.push_back(t);
      sum = s;
    }
    const Summary st = summarize(times);
    nlohmann::json rec = benchmark_record("example/sum/n:" + std::to_string(n), 1, reps, st.median, st.median, "us");
    rec["n"] = n;
    rec["time_us"] = to_json(st, 1e6);
    rec["items_per_s"] = st.median > 0 ? double(n) / st.median : 0.0;
    SuiteResult out;
    out.benchmarks.push_back(rec);
    const int64_t expected = n * (n + 1) / 2;
    out.checks.push_back(make_check("example/sum/exact", sum == expected ? 0.0 : 1.0, 0.0,
                                    "the sum of 1..n is n(n+1)/2, exact in int64: value 1 when it differs"));
    out.data = {{"n", n}};
    return out;
  }
};

DTB_REGISTER_SUITE("example", ExampleSuite);

}  // namespace
}  // namespace dtb
