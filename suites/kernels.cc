// The `kernels` suite: the Google Benchmark microbenchmarks of the compute ops
// (kernels/cpu/ops_bench.cc: GEMM at the FFN's shapes, attention, LayerNorm, AdamW, with
// FLOP/s and bytes/s counters) run inside dtbench on rank 0 while the other ranks wait, and
// folded into the report (the others sleep until it is done, not spinning in a barrier): one
// record per benchmark, "kernels/<benchmark name>", Google
// Benchmark's fields (real_time and cpu_time as the median over repetitions, time_unit,
// iterations) plus the counters' medians and the per-repetition real times as samples. The
// same benchmarks run standalone as build/dtb_kernel_bench. Measurements only: no checks
// beyond each benchmark having run without error.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

// Collects Google Benchmark's runs (each repetition; aggregates ignored: we summarise).
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  struct Rep {
    double real = 0, cpu = 0;  // per iteration, in the run's time unit
    int64_t iterations = 0;
    std::map<std::string, double> counters;
    std::string unit;
    std::string error;
  };
  std::map<std::string, std::vector<Rep>> runs;  // benchmark name -> repetitions
  std::vector<std::string> order;

  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& reports) override {
    for (const Run& r : reports) {
      if (r.run_type == Run::RT_Aggregate) continue;
      const std::string name = r.benchmark_name();
      if (!runs.count(name)) order.push_back(name);
      Rep rep;
      rep.real = r.GetAdjustedRealTime();
      rep.cpu = r.GetAdjustedCPUTime();
      rep.iterations = int64_t(r.iterations);
      rep.unit = benchmark::GetTimeUnitString(r.time_unit);
      if (r.error_occurred) rep.error = r.error_message;
      for (const auto& [k, c] : r.counters) rep.counters[k] = c.value;
      runs[name].push_back(std::move(rep));
    }
  }
};

// The section, typed: the one parse validate() and run() use.
struct Params {
  std::string filter;
  double min_time_s = 0;
  int repetitions = 0;
  static Params parse(const json& s, const json&, const WorldInfo&) {
    Params o;
    o.filter = s.at("filter").get<std::string>();
    if (o.filter.empty()) throw InputError("kernels.filter: empty (\".\" runs every benchmark)");
    try {  // Google Benchmark matches names with POSIX extended regular expressions
      std::regex re(o.filter.front() == '-' ? o.filter.substr(1) : o.filter, std::regex::extended);
    } catch (const std::regex_error& e) {
      throw InputError("kernels.filter: '" + printable(o.filter, 40) + "' is not a regular expression (" + e.what() +
                       ")");
    }
    o.min_time_s = number_in_range(s, "min_time_s", "kernels.min_time_s", 0.001, 60.0);
    o.repetitions = int(int_in_range(s, "repetitions", "kernels.repetitions", 1, 100));
    return o;
  }
  json to_json() const { return {{"filter", filter}, {"min_time_s", min_time_s}, {"repetitions", repetitions}}; }
};

class KernelsSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "kernels"; }
  std::string description() const override {
    return "Google Benchmark microbenchmarks of the ops (GEMM at FFN shapes, attention, LayerNorm, AdamW) with "
           "FLOP/s and bytes/s, on rank 0";
  }
  json defaults() const override { return {{"filter", "."}, {"min_time_s", 0.05}, {"repetitions", 3}}; }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    Params::parse(section, config, world);
  }

  SuiteResult run(SuiteContext& ctx) override {
    SuiteResult res;
    Communicator& world = ctx.world;
    const Params o = Params::parse(ctx.section, ctx.config, ctx.world_info());
    if (world.rank() == 0) {
      const std::string& filter = o.filter;
      char min_time[64], reps[64];
      std::snprintf(min_time, sizeof min_time, "--benchmark_min_time=%g", o.min_time_s);
      std::snprintf(reps, sizeof reps, "--benchmark_repetitions=%d", o.repetitions);
      std::vector<std::string> args = {"dtbench", min_time, reps};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      int argc = int(argv.size());
      benchmark::Initialize(&argc, argv.data());
      CollectingReporter rep;
      const size_t ran = benchmark::RunSpecifiedBenchmarks(&rep, filter);
      // A filter that matches nothing is a failed check, not an exception: the other ranks
      // wait below, and an exception on one rank would end the job.
      res.checks.push_back(make_check("kernels/matched", ran > 0 ? 0.0 : 1.0, 0.0,
                                      "kernels.filter '" + printable(filter, 40) + "' matches at least one benchmark (0 "
                                      "when it does)"));
      ctx.print("# kernels: " + std::to_string(ran) + " benchmark runs (" + std::string(reps + 2) + ", " +
                std::string(min_time + 2) + "); time and counters = median over repetitions");
      ctx.print("#  benchmark                                   time        unit   counters");
      for (const std::string& name : rep.order) {
        const auto& rs = rep.runs.at(name);
        std::vector<double> real, cpu;
        std::map<std::string, std::vector<double>> counters;
        std::string error;
        int64_t iterations = 0;
        for (const auto& r : rs) {
          real.push_back(r.real);
          cpu.push_back(r.cpu);
          iterations += r.iterations;
          for (const auto& [k, v] : r.counters) counters[k].push_back(v);
          if (!r.error.empty()) error = r.error;
        }
        const Summary s = summarize(real), c = summarize(cpu);
        json rec = {{"name", "kernels/" + name},    {"run_name", "kernels/" + name}, {"run_type", "iteration"},
                    {"repetitions", int(rs.size())}, {"repetition_index", 0},          {"threads", 1},
                    {"iterations", iterations},      {"real_time", s.median},          {"cpu_time", c.median},
                    {"time_unit", rs.front().unit},  {"real_time_stats", to_json(s)}};
        std::string line_counters;
        for (const auto& [k, v] : counters) {
          const double med = summarize(v).median;
          rec[k] = med;
          char b[64];
          std::snprintf(b, sizeof b, "  %s %.3g", k.c_str(), med);
          line_counters += b;
        }
        res.benchmarks.push_back(rec);
        res.checks.push_back(make_check("kernels/" + name + "/ran", error.empty() ? 0.0 : 1.0, 0.0,
                                        error.empty() ? "ran without error (0)" : "error: " + error));
        char line[300];
        std::snprintf(line, sizeof line, "   %-42s %10.4g  %6s %s", name.c_str(), s.median, rs.front().unit.c_str(),
                      line_counters.c_str());
        ctx.print(line);
      }
    }
    // The other ranks wait without spinning: an MPI barrier polls and would take the cores the
    // benchmarks run on (an oversubscribed machine, or ranks sharing a socket).
    int32_t done = 1;
    auto h = world.broadcast_async(&done, 1, DType::i32, 0);
    while (!h->test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return res;
  }
};

}  // namespace

DTB_REGISTER_SUITE("kernels", KernelsSuite);

}  // namespace dtb
