// The `ffn_tp` suite: the transformer FFN block y = fc2(gelu(fc1(x))), h -> 4h -> h, split
// Megatron-style (Shoeybi et al. 2019, Sec. 3: fc1 ColumnParallelLinear, fc2
// RowParallelLinear, one all-reduce forward and one backward) at TP = 1, 2, 4, ...: time of
// forward and forward+backward, speedup over TP = 1, parallel efficiency and the share of
// time in the TP all-reduces; checks the output, dx and the weight gradients against TP = 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/layout/layout_spec.h"
#include "reference/model/rng.h"
#include "reference/parallel/tensor_parallel.h"
#include "suites/bandwidth.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// The section, typed: the one parse validate() and run() use.
struct Params {
  int h = 0, n = 0, warmup = 0, iters = 0, reps = 0;
  uint64_t seed = 0;
  static Params parse(const json& s, const json& config, const WorldInfo& world);
  json to_json() const {
    return {{"hidden", h}, {"tokens", n}, {"warmup", warmup}, {"iters", iters}, {"repetitions", reps}, {"seed", seed}};
  }
};
using Options = Params;

Params Params::parse(const json& s, const json&, const WorldInfo&) {
  Params o;
  o.h = int(int_in_range(s, "hidden", "ffn_tp.hidden", 1, 65536));
  o.n = int(int_in_range(s, "tokens", "ffn_tp.tokens", 1, 1 << 20));
  o.warmup = int(int_in_range(s, "warmup", "ffn_tp.warmup", 0, 1000));
  o.iters = int(int_in_range(s, "iters", "ffn_tp.iters", 1, 100000));
  o.reps = int(int_in_range(s, "repetitions", "ffn_tp.repetitions", 1, 1000));
  o.seed = uint64_t(int_in_range(s, "seed", "ffn_tp.seed", 0, int64_t(1) << 53));
  return o;
}

/// TP sizes measured: 1, 2, 4, ... up to the largest power of two <= world that divides h
/// (and so 4h): the split dimensions of fc1 (OC = 4h) and fc2 (C = 4h) and a whole h.
std::vector<int> tp_sizes(int world, int h) {
  std::vector<int> t = {1};
  while (2 * t.back() <= world && h % (2 * t.back()) == 0) t.push_back(2 * t.back());
  return t;
}

std::vector<float> to_host(Ops<float>& ops, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  ops.copy_to_host(v.data(), t.raw(), t.bytes());
  return v;
}

/// This rank's shard of the FFN with its activations (category activation), inputs x and
/// dy drawn from (seed, "ffn_tp.x" / "ffn_tp.dy", index), replicated on the TP group.
struct FfnShard {
  FfnShard(Ops<float>& ops_, Device& dev, Communicator& tp, const Options& o)
      : ops(ops_),
        n(o.n),
        fc1(ops_, dev, tp, "fc1", o.h, 4 * o.h, LinearInit{0.02, 0.02, o.seed}),
        fc2(ops_, dev, tp, "fc2", 4 * o.h, o.h, LinearInit{0.02, 0.02, o.seed}) {
    const int64_t h = o.h, f = fc1.local_out_features();
    auto act = [&](int64_t cols) { return Tensor::empty(dev, {int64_t(n), cols}, DType::f32, MemCategory::activation); };
    x = act(h), y = act(h), dy = act(h), dx = act(h), a = act(f), g = act(f), dg = act(f), da = act(f);
    for (auto [t, name] : {std::pair{&x, "ffn_tp.x"}, std::pair{&dy, "ffn_tp.dy"}}) {
      std::vector<float> v(size_t(t->numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(random_normal(o.seed, stream_id(name), i));
      ops.copy_from_host(t->raw(), v.data(), t->bytes());
    }
  }
  void forward() {
    fc1.forward(a.data<float>(), x.data<float>(), n);
    ops.gelu_forward(g.data<float>(), a.data<float>(), size_t(a.numel()));
    fc2.forward(y.data<float>(), g.data<float>(), n);
  }
  /// One training step's FFN work: gradients cleared, forward, backward to dx.
  void forward_backward() {
    fc1.zero_grad(), fc2.zero_grad();
    forward();
    fc2.backward(dg.data<float>(), dy.data<float>(), g.data<float>(), n);
    ops.zero(da.data<float>(), size_t(da.numel()));
    ops.gelu_backward(da.data<float>(), a.data<float>(), dg.data<float>(), size_t(da.numel()));
    fc1.backward(dx.data<float>(), da.data<float>(), x.data<float>(), n);
  }
  double comm_seconds() { return fc1.comm_stats().seconds + fc2.comm_stats().seconds; }
  void reset_comm() { fc1.comm_stats().reset(), fc2.comm_stats().reset(); }

  Ops<float>& ops;
  int n;
  ColumnParallelLinear<float> fc1;
  RowParallelLinear<float> fc2;
  Tensor x, y, dy, dx, a, g, dg, da;
};

/// The TP = 1 results every TP size is compared with (host copies).
struct Reference {
  std::vector<float> y, dx, dw1, db1, dw2, db2;
};

double rel_err(const std::vector<float>& a, const float* b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), r += double(b[i]) * b[i];
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}
/// Rows [r0, r1) x columns [c0, c1) of a row-major matrix with `cols` columns.
std::vector<float> slice(const std::vector<float>& m, int cols, int r0, int r1, int c0, int c1) {
  std::vector<float> s;
  for (int i = r0; i < r1; ++i)
    for (int j = c0; j < c1; ++j) s.push_back(m[size_t(i) * cols + j]);
  return s;
}

class FfnTpSuite final : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "ffn_tp"; }
  std::string description() const override {
    return "FFN (h -> 4h -> h) Megatron tensor parallel at TP = 1, 2, 4, ...: time, speedup, "
           "efficiency, comm share; output and gradients checked against TP = 1";
  }
  json defaults() const override {
    return {{"hidden", 256}, {"tokens", 512}, {"warmup", 2}, {"iters", 10}, {"repetitions", 5}, {"seed", 7}};
  }
  void validate(const json& s, const json& config, const WorldInfo& world) const override {
    const Params o = Params::parse(s, config, world);
    // At TP = 1 a rank holds W1, W2 and their gradients (16 h^2 floats), eight (n, h)-sized
    // activations of which four are 4h wide (20 n h), and the TP = 1 reference copies.
    const double h = o.h, n = o.n;
    if (config.value("backend", "cpu") == "cpu")
      check_fits_in_memory(4.0 * (24 * h * h + 22 * n * h), world.ranks_per_node, "ffn_tp: the FFN", world.options);
  }
  SuiteResult run(SuiteContext& ctx) override;
};

SuiteResult FfnTpSuite::run(SuiteContext& ctx) {
  const Params o = Params::parse(ctx.section, ctx.config, ctx.world_info());
  std::unique_ptr<Ops<float>> own_ops;
  if (!ctx.backend) own_ops = std::make_unique<CpuOps<float>>();
  Ops<float>& ops = ctx.backend ? ctx.backend->ops() : *own_ops;
  Communicator& world = ctx.world;  // control: barriers, timing and error reductions
  Communicator& base = ctx.device_world ? *ctx.device_world : ctx.world;  // TP collectives
  const int W = world.size(), me = world.rank();
  const std::vector<int> tps = tp_sizes(W, o.h);
  const double sh = std::sqrt(double(o.h)), sn = std::sqrt(double(o.n));

  SuiteResult res;
  res.data = {{"hidden", o.h}, {"tokens", o.n}, {"tp_sizes", tps}};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "# ffn_tp: h=%d -> 4h=%d -> h over %d tokens, fp32, %d rank(s); warmup %d, iters %d, "
                "%d repetitions; time = median of the slowest rank's time per iteration",
                o.h, 4 * o.h, o.n, W, o.warmup, o.iters, o.reps);
  ctx.print(buf);

  Reference ref;
  double base_ms[2] = {0, 0};
  struct Row { int tp; double ms[2], speedup[2], eff[2], comm[2]; };
  std::vector<Row> rows;
  for (const int t : tps) {
    // TP groups of t consecutive ranks; ranks past the last whole group sit this round out.
    auto tp = base.split(me / t, me % t, std::string(spelling(LayoutKey::tp).name_key) + std::to_string(t));
    const bool active = me < (W / t) * t;
    std::unique_ptr<FfnShard> ffn;
    if (active) ffn = std::make_unique<FfnShard>(ops, ctx.device, *tp, o);

    // 1. Conformance: one step's output, dx and weight gradients against TP = 1.
    double err[3] = {0, 0, 0};  // output, input grad, weight grads (max over the 4 tensors)
    if (active) {
      ffn->forward_backward();
      const auto y = to_host(ops, ffn->y), dx = to_host(ops, ffn->dx);
      const auto dw1 = to_host(ops, ffn->fc1.weight_grad()), db1 = to_host(ops, ffn->fc1.bias_grad());
      const auto dw2 = to_host(ops, ffn->fc2.weight_grad()), db2 = to_host(ops, ffn->fc2.bias_grad());
      if (t == 1) ref = {y, dx, dw1, db1, dw2, db2};
      const int F = 4 * o.h, r0 = ffn->fc1.out_offset(), lr = ffn->fc1.local_out_features();
      const int c0 = ffn->fc2.in_offset(), lc = ffn->fc2.local_in_features();
      err[0] = rel_err(y, ref.y.data());
      err[1] = rel_err(dx, ref.dx.data());
      err[2] = std::max({rel_err(dw1, slice(ref.dw1, o.h, r0, r0 + lr, 0, o.h).data()),
                         rel_err(db1, ref.db1.data() + r0),
                         rel_err(dw2, slice(ref.dw2, F, 0, o.h, c0, c0 + lc).data()),
                         rel_err(db2, ref.db2.data())});
    }
    world.all_reduce(err, err, 3, DType::f64, ReduceOp::max);
    if (t > 1) {
      // Tolerances (relative norm error, float32): TP regroups the float sums of fc2's
      // forward (length 4h, as tp partial sums added by the all-reduce) and of dx (length
      // 4h likewise); every other sum has the same length and order on both sides but may
      // be blocked differently by BLAS at another matrix width. A length-K sum of
      // random-sign terms is off by about u sqrt(K) relative (Higham & Mary 2019), so two
      // evaluations differ by at most 8 u sum_i sqrt(K_i) over the sums on the tensor's
      // path, a factor ~4 of margin per evaluation: y: fc1 (h), fc2 (4h); dx: fc1 (h),
      // fc2's dgrad (h), fc1's dgrad (4h); weight grads: fc1 (h), fc2's dgrad (h) and the
      // wgrad's own sum over tokens (n). u = 2^-24. At h = 256, n = 512: 2.3e-5, 3.1e-5,
      // 2.6e-5; measured errors there are 1.4e-7 to 3.4e-7 (about 1% of the tolerance).
      const std::string ts = std::to_string(t);
      const double tol[3] = {8 * kU * (sh + 2 * sh), 8 * kU * (2 * sh + 2 * sh), 8 * kU * (2 * sh + sn)};
      const char* what[3] = {"output", "input_grad", "weight_grad"};
      for (int k = 0; k < 3; ++k)
        res.checks.push_back(make_check(
            "ffn_tp/" + std::string(what[k]) + "/tp:" + ts, err[k], tol[k],
            std::string("relative norm error vs TP = 1 (") +
                (k == 2 ? "max over fc1/fc2 weight and bias gradient shards vs the matching slices"
                        : "identical on every TP rank") +
                "), max over ranks; tolerance 8 u sum sqrt(K) over the float sums on its path (u = 2^-24)"));
    }

    // 2. Timing: forward, and forward + backward (one step's FFN work).
    Row row{t, {}, {}, {}, {}};
    for (int pass = 0; pass < 2; ++pass) {
      double own_s = 0;
      auto op = [&] {
        if (!active) return;
        Stopwatch sw;
        pass == 0 ? ffn->forward() : ffn->forward_backward();
        ops.synchronize();
        own_s += sw.elapsed();
      };
      for (int i = 0; i < o.warmup; ++i) op();
      own_s = 0;
      if (active) ffn->reset_comm();
      const TimedResult tr = time_iterations(world, 0, o.iters, o.reps, op);
      // The comm share of the slowest rank (its all-reduce time over its pass time).
      double mine[2] = {own_s, active ? ffn->comm_seconds() : 0.0};
      std::vector<double> all(2 * size_t(W));
      world.all_gather(mine, all.data(), 2, DType::f64);
      size_t slow = 0;
      for (size_t r = 1; r < size_t(W); ++r)
        if (all[2 * r] > all[2 * slow]) slow = r;
      const double comm_fraction = all[2 * slow] > 0 ? all[2 * slow + 1] / all[2 * slow] : 0.0;
      const double per_iter = 1.0 / (double(o.iters) * o.reps);

      const Summary& s = tr.summary;
      if (t == 1) base_ms[pass] = s.median;
      const double speedup = base_ms[pass] / s.median;
      row.ms[pass] = s.median * 1e3, row.speedup[pass] = speedup, row.eff[pass] = speedup / t;
      row.comm[pass] = comm_fraction;
      const std::string pname = pass == 0 ? "forward" : "forward_backward";
      json rec = benchmark_record("ffn_tp/pass:" + pname + "/tp:" + std::to_string(t) + "/hidden:" +
                                      std::to_string(o.h) + "/tokens:" + std::to_string(o.n),
                                  o.iters, o.reps, s.median, s.median, "ms");
      rec["pass"] = pname;
      rec[field_key(LayoutKey::tp)] = t;
      rec["hidden"] = o.h;
      rec["tokens"] = o.n;
      rec["world_size"] = W;
      rec["idle_ranks"] = W - (W / t) * t;
      rec["time_ms"] = to_json(s, 1e3);
      rec["speedup"] = speedup;
      rec["efficiency"] = speedup / t;
      rec["comm_fraction"] = comm_fraction;
      rec["comm_ms"] = all[2 * slow + 1] * per_iter * 1e3;  // the slowest rank's, per iteration
      rec["tp_all_reduces_per_iteration"] = t == 1 ? 0 : pass == 0 ? 1 : 2;
      res.benchmarks.push_back(std::move(rec));
    }
    rows.push_back(row);
    world.barrier();
  }

  ctx.print("#  tp   fwd (ms)  fwd+bwd (ms)   speedup fwd / f+b   efficiency fwd / f+b   comm share fwd / f+b");
  for (const Row& r : rows) {
    std::snprintf(buf, sizeof buf, "   %2d  %9.3f  %12.3f   %8.2f / %-8.2f   %9.2f / %-9.2f   %8.1f%% / %.1f%%", r.tp,
                  r.ms[0], r.ms[1], r.speedup[0], r.speedup[1], r.eff[0], r.eff[1], 100 * r.comm[0],
                  100 * r.comm[1]);
    ctx.print(buf);
  }
  ctx.print_checks(res.checks, 28);
  return res;
}

}  // namespace

DTB_REGISTER_SUITE("ffn_tp", FfnTpSuite);

}  // namespace dtb
