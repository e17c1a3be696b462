#include "suites/suite.h"

#include <cmath>
#include <iostream>

#include "kernels/error.h"

namespace dtb {

Check make_check(std::string name, double value, double tolerance, std::string detail) {
  Check c;
  c.name = std::move(name);
  c.value = value;
  c.tolerance = tolerance;
  c.passed = value <= tolerance;  // false for NaN
  c.detail = std::move(detail);
  return c;
}

void SuiteContext::print(const std::string& line) const {
  if (world.rank() == 0) std::cout << line << '\n' << std::flush;
}

static std::map<std::string, SuiteFactory>& mutable_registry() {
  static std::map<std::string, SuiteFactory> registry;
  return registry;
}

const std::map<std::string, SuiteFactory>& suite_registry() { return mutable_registry(); }

bool register_suite(const std::string& name, SuiteFactory factory) {
  auto [it, inserted] = mutable_registry().emplace(name, std::move(factory));
  DTB_CHECK(inserted, "suite registered twice: " + name);
  return true;
}

nlohmann::json benchmark_record(const std::string& name, int64_t iterations, int repetitions,
                                double real_time_s, double cpu_time_s, const std::string& time_unit) {
  double scale = 1.0;
  if (time_unit == "ns") scale = 1e9;
  else if (time_unit == "us") scale = 1e6;
  else if (time_unit == "ms") scale = 1e3;
  else DTB_CHECK(time_unit == "s", "unknown time unit " + time_unit);
  return {{"name", name},
          {"run_name", name},
          {"run_type", "iteration"},
          {"repetitions", repetitions},
          {"repetition_index", 0},
          {"threads", 1},
          {"iterations", iterations},
          {"real_time", real_time_s * scale},
          {"cpu_time", cpu_time_s * scale},
          {"time_unit", time_unit}};
}

}  // namespace dtb
