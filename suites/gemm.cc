// The `gemm` suite: matrix-multiply throughput of this rank's device, the number every
// other compute figure is read against. Each GEMM is timed in `repetitions` batches of `iters`. A square GEMM gives the measured peak per
// precision; the FFN's two GEMMs (h -> 4h -> h over `tokens` rows) are reported as TFLOP/s
// and as a fraction of that peak. FLOPs of C (M,N) = A (M,K) B (K,N): 2 M N K.
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "suites/gemm_rate.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

// The section, typed: the one parse validate() and run() use.
struct Params {
  int h = 0, n = 0, p = 0, warmup = 0, iters = 0, repetitions = 1;
  std::vector<std::string> precisions;
  static Params parse(const json& s, const json&, const WorldInfo&) {
    Params o;
    o.h = int(int_in_range(s, "hidden", "gemm.hidden", 1, 65536));
    o.n = int(int_in_range(s, "tokens", "gemm.tokens", 1, 1 << 20));
    o.p = int(int_in_range(s, "peak_size", "gemm.peak_size", 1, 65536));
    o.warmup = int(int_in_range(s, "warmup", "gemm.warmup", 0, 1000));
    o.iters = int(int_in_range(s, "iters", "gemm.iters", 1, 100000));
    o.repetitions = int(int_in_range(s, "repetitions", "gemm.repetitions", 1, 1000));
    if (s.at("precisions").empty()) throw InputError("gemm.precisions is empty");
    for (const auto& x : s.at("precisions")) {
      const std::string v = x.get<std::string>();
      if (v != "fp32" && v != "tf32" && v != "bf16" && v != "fp16")
        throw InputError("gemm.precisions: '" + v + "' is not one of fp32, tf32, bf16, fp16");
      o.precisions.push_back(v);
    }
    return o;
  }
  json to_json() const {
    return {{"hidden", h}, {"tokens", n}, {"peak_size", p}, {"warmup", warmup}, {"iters", iters},
            {"repetitions", repetitions}, {"precisions", precisions}};
  }
};

class GemmSuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "gemm"; }
  std::string description() const override {
    return "GEMM TFLOP/s per precision: square peak and the FFN's GEMMs at a hidden size";
  }
  json defaults() const override {
    return {{"precisions", {"fp32"}}, {"hidden", 1024}, {"tokens", 1024}, {"peak_size", 2048},
            {"warmup", 2},            {"iters", 5},          {"repetitions", 1}};
  }
  void validate(const json& s, const json& config, const WorldInfo& world) const override {
    const Params o = Params::parse(s, config, world);
    const double h = o.h, n = o.n, p = o.p;
    // The largest GEMM holds A, B and C in float32 at once.
    const double ffn = 4.0 * (double(n) * h + 4.0 * h * h + 4.0 * n * h);
    const double peak = 4.0 * 3.0 * double(p) * p;
    if (config.value("backend", "cpu") == "cpu")  // a GPU holds them in its own memory
      check_fits_in_memory(std::max(ffn, peak), world.ranks_per_node, "gemm: the matrices", world.options);
  }

  SuiteResult run(SuiteContext& ctx) override {
    DTB_CHECK(ctx.backend != nullptr, "gemm suite needs a backend");
    Backend& be = *ctx.backend;
    const Params o = Params::parse(ctx.section, ctx.config, ctx.world_info());
    const int h = o.h, n = o.n, p = o.p, warmup = o.warmup, iters = o.iters;
    const auto supported = be.gemm_precisions();
    SuiteResult res;
    ctx.print("# gemm on " + be.device_name() + (be.device_name() == be.name() ? "" : " (" + be.name() + ")") + ", slowest of " +
              std::to_string(ctx.world.size()) + " rank(s); TFLOP/s = 2 M N K / t");
    ctx.print("#  precision  GEMM                       M       N       K    time (ms)   TFLOP/s  of peak");
    for (const std::string& prec : o.precisions) {
      if (std::find(supported.begin(), supported.end(), prec) == supported.end()) {
        json rec = benchmark_record("gemm/peak/precision:" + prec, 0, 1, 0, 0, "ms");
        rec["skipped"] = true;
        rec["skip_message"] = "backend '" + be.name() + "' has no " + prec + " GEMM";
        res.benchmarks.push_back(rec);
        ctx.print("#  " + prec + ": skipped, " + rec["skip_message"].get<std::string>());
        continue;
      }
      struct Shape { std::string name; int M, N, K; };
      const Shape shapes[] = {{"peak", p, p, p}, {"ffn_fc1", n, 4 * h, h}, {"ffn_fc2", n, h, 4 * h}};
      double peak_tflops = 0;
      for (const Shape& sh : shapes) {
        // `repetitions` timed batches of `iters` GEMMs (the warm-up before the first), each the
        // slowest rank's time per GEMM; the figure is their median.
        std::vector<double> batches(static_cast<size_t>(o.repetitions));
        for (size_t r = 0; r < batches.size(); ++r)
          batches[r] = be.time_gemm(sh.M, sh.N, sh.K, prec, r == 0 ? warmup : 0, iters, ctx.options.slowdown.gemm);
        ctx.world.all_reduce(batches.data(), batches.data(), batches.size(), DType::f64, ReduceOp::max);
        const Summary batch = summarize(batches);
        const double t = batch.median;
        const double tflops = gemm_flops(sh.M, sh.N, sh.K) / t / 1e12;
        if (sh.name == "peak") peak_tflops = tflops;
        const std::string key = sh.name == "peak" ? "gemm/peak/precision:" + prec + "/size:" + std::to_string(p)
                                                  : "gemm/" + sh.name + "/precision:" + prec + "/hidden:" +
                                                        std::to_string(h) + "/tokens:" + std::to_string(n);
        json rec = benchmark_record(key, iters, o.repetitions, t, t, "ms");
        rec["time_ms"] = to_json(batch, 1e3);
        rec["precision"] = prec;
        rec["M"] = sh.M, rec["N"] = sh.N, rec["K"] = sh.K;
        rec["tflops"] = tflops;
        rec["fraction_of_peak"] = tflops / peak_tflops;
        res.benchmarks.push_back(rec);
        char line[160];
        std::snprintf(line, sizeof line, "   %-9s  %-18s %7d %7d %7d %12.3f %9.3f %7.1f%%", prec.c_str(),
                      sh.name.c_str(), sh.M, sh.N, sh.K, t * 1e3, tflops, 100 * tflops / peak_tflops);
        ctx.print(line);
      }
    }
    res.data = {{"device", be.device_name()}, {"backend", be.name()}};
    return res;
  }
};

}  // namespace

DTB_REGISTER_SUITE("gemm", GemmSuite);

}  // namespace dtb
