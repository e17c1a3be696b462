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

class ExampleSuite : public Suite {
 public:
  std::string name() const override { return "example"; }
  std::string description() const override { return "test-only: times a sum of 1..n and checks it"; }
  nlohmann::json defaults() const override { return {{"n", 100000}, {"repetitions", 5}}; }

  void validate(const nlohmann::json& section, const nlohmann::json&, const WorldInfo&) const override {
    int_in_range(section, "n", "example.n", 1, int64_t(1) << 30);
    int_in_range(section, "repetitions", "example.repetitions", 1, 1000);
  }

  SuiteResult run(SuiteContext& ctx) override {
    const int64_t n = int_in_range(ctx.section, "n", "example.n", 1, int64_t(1) << 30);
    const int reps = int(int_in_range(ctx.section, "repetitions", "example.repetitions", 1, 1000));
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
