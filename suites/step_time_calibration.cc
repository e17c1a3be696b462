// The step-time model's hardware measured on the machine at hand (suites/step_time_calibration.h).
#include "suites/step_time_calibration.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "kernels/comm/ring.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/half_ops.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/zero/zero.h"
#include "suites/stats.h"

namespace dtb {
namespace {

// Scratch buffers big enough for any op of the list: five of T, three of float (A), tokens.
template <typename T>
struct Scratch {
  std::vector<Tensor> t, a;
  Tensor tok;
  Scratch(Device& dev, int64_t n, int64_t rows) {
    for (int i = 0; i < 5; ++i) t.push_back(Tensor::zeros(dev, {n}, dtype_of<T>(), MemCategory::workspace));
    for (int i = 0; i < 3; ++i) a.push_back(Tensor::zeros(dev, {n}, DType::f32, MemCategory::workspace));
    tok = Tensor::zeros(dev, {std::max<int64_t>(rows, 1)}, DType::i32, MemCategory::workspace);
  }
  T* p(int i) const { return t[size_t(i)].template data<T>(); }
  float* f(int i) const { return a[size_t(i)].template data<float>(); }
  int32_t* k() const { return tok.data<int32_t>(); }
};

// The largest tensor an op touches, elements; and its rows (tokens) for the targets.
int64_t op_elems(const StepOp& o) {
  const auto& d = o.dims;
  const std::string& n = o.name;
  if (n == "matmul_forward" || n == "matmul_backward") return std::max({d[0] * d[1], d[1] * d[2], d[0] * d[2]});
  if (n == "attention_forward" || n == "attention_backward")
    return std::max(d[0] * d[1] * 3 * d[2], d[0] * d[3] * d[1] * d[1]);
  if (n == "embedding_shard_forward" || n == "embedding_shard_backward")
    return std::max({d[0] * d[1] * d[2], d[3] * d[2], d[1] * d[2]});
  if (n == "layernorm_forward" || n == "layernorm_backward" || n.rfind("crossentropy_shard_", 0) == 0)
    return d[0] * d[1];
  return d[0];
}

template <typename T>
void run_op(Ops<T>& ops, const StepOp& o, const Scratch<T>& s, Precision prec) {
  const auto& d = o.dims;
  const int a = int(d[0]), b = int(d[1]), c = int(d[2]), e = int(d[3]);
  const std::string& n = o.name;
  if (n == "matmul_forward") return ops.matmul_forward(s.p(0), s.p(1), s.p(2), s.p(3), a, b, c);
  if (n == "matmul_backward") return ops.matmul_backward(s.p(0), s.p(1), s.p(2), s.p(3), s.p(4), s.p(2), a, b, c);
  if (n == "attention_forward") return ops.attention_forward(s.p(0), s.p(1), s.p(2), a, b, c, e);
  if (n == "attention_backward") return ops.attention_backward(s.p(0), s.p(1), s.p(3), s.p(2), s.p(4), a, b, c, e);
  if (n == "layernorm_forward") return ops.layernorm_forward(s.p(0), s.f(0), s.f(1), s.p(1), s.p(2), s.p(3), a, b);
  if (n == "layernorm_backward")
    return ops.layernorm_backward(s.p(0), s.p(1), s.p(2), s.p(3), s.p(4), s.p(2), s.f(0), s.f(1), a, b);
  if (n == "gelu_forward") return ops.gelu_forward(s.p(0), s.p(1), size_t(a));
  if (n == "gelu_backward") return ops.gelu_backward(s.p(0), s.p(1), s.p(2), size_t(a));
  if (n == "residual_forward") return ops.residual_forward(s.p(0), s.p(1), s.p(2), size_t(a));
  // Token ids and targets are 0, inside every vocabulary shard [0, V/t).
  if (n == "embedding_shard_forward") return ops.embedding_shard_forward(s.p(0), s.k(), s.p(1), s.p(2), a, b, c, 0, e);
  if (n == "embedding_shard_backward")
    return ops.embedding_shard_backward(s.p(1), s.p(2), s.p(0), s.k(), a, b, c, 0, e);
  if (n == "crossentropy_shard_max") return ops.crossentropy_shard_max(s.f(0), s.p(0), a, b);
  if (n == "crossentropy_shard_sums") return ops.crossentropy_shard_sums(s.f(1), s.p(0), s.f(0), s.k(), a, b, 0);
  if (n == "crossentropy_shard_forward")
    return ops.crossentropy_shard_forward(s.f(2), s.p(1), s.p(0), s.f(0), s.f(1), a, b);
  if (n == "crossentropy_shard_backward")
    return ops.crossentropy_shard_backward(s.p(2), s.p(1), s.k(), 1.0f / float(a), a, b, 0);
  if (n == "zero") return ops.zero(s.p(0), size_t(a));
  if (n == "adamw_update") {
    if (prec == Precision::fp32) return ops.adamw_update(s.p(0), s.p(1), s.f(0), s.f(1), size_t(a), AdamWParams{}, 1);
    return ops.adamw_update_master(s.p(0), s.f(2), s.p(1), s.f(0), s.f(1), size_t(a), AdamWParams{}, 1);
  }
  DTB_CHECK(false, "calibrate_step_time: no runner for op " + n);
}

// The largest over ranks of each rank's median, per call (every rank measuring at once).
double timed(Communicator& comm, int samples, int inner, const std::function<void()>& call,
             const std::function<void()>& sync) {
  call();
  sync();
  comm.barrier();
  std::vector<double> t;
  for (int i = 0; i < samples; ++i) {
    Stopwatch sw;
    for (int k = 0; k < inner; ++k) call();
    sync();
    t.push_back(sw.elapsed() / inner);
  }
  double m = median(t);
  comm.all_reduce(&m, &m, 1, DType::f64, ReduceOp::max);
  return m;
}

const std::vector<double> kSizes = {64, 4096, 65536, 1 << 20};  // bytes

// Seconds per call of `call` as the ranks share the machine: after one untimed call, k calls back
// to back on every rank then a barrier, k (the same on every rank) such that the loop lasts about
// `window_s`; the loop's time over k. Timed over a window rather than per call, it includes the
// time the ranks wait for a core when there are more ranks than cores (a short sample's median
// would be a rank's time while it holds a core). Collective over `comm`.
double throughput_time(Communicator& comm, const std::function<void()>& call, const std::function<void()>& sync,
                       double window_s) {
  call();
  sync();
  Stopwatch probe;
  call();
  sync();
  double k = std::clamp(std::ceil(window_s / std::max(probe.elapsed(), 1e-7)), 1.0, 100000.0);
  comm.all_reduce(&k, &k, 1, DType::f64, ReduceOp::max);
  comm.barrier();
  Stopwatch sw;
  for (int i = 0; i < int(k); ++i) call();
  sync();
  comm.barrier();
  double t = sw.elapsed() / k;
  comm.all_reduce(&t, &t, 1, DType::f64, ReduceOp::max);
  return t;
}

template <typename T>
void time_ops(Communicator& comm, Device& dev, Ops<T>& ops, const StepTimeCalibrationSpec& spec, StepTimeHardware& hw) {
  int64_t n = 1, rows = 1;
  for (const StepOp& o : spec.ops) n = std::max(n, op_elems(o)), rows = std::max(rows, o.dims[0]);
  const Scratch<T> s(dev, n, rows);
  std::array<double, 3> flops{}, secs{};  // gemm, attention (by Kind); memory is fitted below
  std::vector<const StepOp*> mem_ops;
  auto op_time = [&](const StepOp& o) {
    return throughput_time(comm, [&] { run_op(ops, o, s, spec.precision); }, [&] { ops.synchronize(); },
                           spec.window_s);
  };
  for (const StepOp& o : spec.ops) {
    const std::string key = o.key(spec.precision);
    if (hw.op_seconds.count(key)) continue;
    const double t = op_time(o);
    hw.op_seconds[key] = t;
    if (o.kind == StepOp::Kind::memory) {
      mem_ops.push_back(&o);
    } else {
      flops[size_t(o.kind)] += o.flops, secs[size_t(o.kind)] += t;
    }
  }
  // The ops one after another, as a step runs them, against the sum of their own loops: in a step
  // each op starts with the caches, TLB and branch predictors the op before left, not its own.
  // The ratio (op_sequence_factor, 1.02-1.11 here) scales every op's time, never below its loop's.
  double looped = 0;
  for (const StepOp& o : spec.ops) looped += hw.op_seconds.at(o.key(spec.precision));
  const double in_sequence = throughput_time(
      comm, [&] { for (const StepOp& o : spec.ops) run_op(ops, o, s, spec.precision); }, [&] { ops.synchronize(); },
      spec.window_s * 4);
  hw.op_sequence_factor = std::max(1.0, in_sequence / looped);
  for (auto& kv : hw.op_seconds) kv.second *= hw.op_sequence_factor;
  for (double& x : secs) x *= hw.op_sequence_factor;
  const size_t p = size_t(spec.precision);
  if (secs[0] > 0) hw.gemm[p] = {0, flops[0] / secs[0]};
  if (secs[1] > 0) hw.attention[p] = {0, flops[1] / secs[1]};
  if (mem_ops.size() >= 2) {
    std::vector<double> mem_bytes;
    for (const StepOp* o : mem_ops) mem_bytes.push_back(o->bytes);
    // A round after the first times the op again and keeps the lesser (op_seconds with it).
    std::vector<int> timed_rounds(mem_ops.size(), 0);
    hw.memory = fit_alpha_beta_retimed(mem_bytes, [&](size_t i) {
      double& kept = hw.op_seconds.at(mem_ops[i]->key(spec.precision));
      if (timed_rounds[i]++ > 0) kept = std::min(kept, op_time(*mem_ops[i]) * hw.op_sequence_factor);
      return kept;
    });
  }
  // Communication in tight loops, every rank in the call: its own cost. The compute that keeps
  // ranks apart is in the ops' times above (measured as the ranks share the cores).
  auto sync = [&ops] { ops.synchronize(); };
  auto loop_time = [&](const std::function<void()>& call) { return timed(comm, spec.samples, 1, call, [] {}); };
  const int world = comm.size(), me = comm.rank();
  const Tensor a = Tensor::zeros(dev, {int64_t(kSizes.back()) / 4}, DType::f32, MemCategory::comm_buffer);
  const Tensor b = Tensor::zeros(dev, {int64_t(kSizes.back()) / 4}, DType::f32, MemCategory::comm_buffer);
  for (int g = 2; g <= world; ++g) {
    if (world % g) continue;
    std::unique_ptr<Communicator> grp = comm.split(me / g, me % g, "calibration_g" + std::to_string(g));
    std::vector<double> x;
    for (double bytes : kSizes) x.push_back(ring_all_reduce_factor(g) * bytes);
    hw.collectives.push_back({g, LinkClass::intra_node, fit_alpha_beta_retimed(x, [&](size_t i) {
                                return loop_time([&] {
                                  grp->all_reduce(a.raw(), b.raw(), size_t(kSizes[i] / 4), DType::f32, ReduceOp::sum);
                                });
                              })});
  }
  if (world >= 2 && world % 2 == 0) {
    hw.p2p_intra = hw.p2p_inter = fit_alpha_beta_retimed(kSizes, [&](size_t i) {
      return loop_time([&] { comm.sendrecv(a.raw(), b.raw(), size_t(kSizes[i] / 4), DType::f32, me ^ 1, me ^ 1); });
    });
  }
  // The host link and the trainer's host pass over the gradient, as the ranks share the cores.
  std::vector<char> host(size_t(kSizes.back()));
  const std::vector<double> copied = {4096.0, kSizes.back()};
  hw.host_link = fit_alpha_beta_retimed(copied, [&](size_t i) {
    return throughput_time(comm, [&] { ops.copy_to_host(host.data(), a.raw(), size_t(copied[i])); }, sync,
                           spec.window_s);
  });
  int64_t held = 1 << 16;  // the largest gradient an optimizer op covers
  for (const StepOp& o : spec.ops)
    if (o.name == "zero" || o.name == "adamw_update") held = std::max(held, o.dims[0]);
  std::vector<T> grad(size_t(held), T(1.0f));
  const std::vector<char> mask(size_t(held), 1);
  double sink = 0;
  const std::vector<double> passed = {double(held / 8), double(held)};
  hw.host_pass = fit_alpha_beta_retimed(passed, [&](size_t i) {
    return throughput_time(comm, [&] { sink += masked_sq_sum(grad.data(), mask.data(), size_t(passed[i]), 1.0f); },
                           [] {}, spec.window_s);
  });
  // The ranks of this machine over its cores (one machine: the world), when they outnumber them.
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0) hw.ranks_per_core = std::max(1.0, double(comm.size()) / cores);
  if (sink < 0) hw.host_pass.alpha_s = 0;  // keeps the sums from being optimised away (never true)
}

}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& t) {
  if (x.size() != t.size() || x.size() < 2) throw InputError("fit_alpha_beta: needs two or more (size, time) points");
  // Weighted least squares of t = a + b x with weights 1 / t^2 (relative error).
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(t[i] > 0)) throw InputError("fit_alpha_beta: a time <= 0");
    const double w = 1 / (t[i] * t[i]);
    sw += w, sx += w * x[i], st += w * t[i], sxx += w * x[i] * x[i], sxt += w * x[i] * t[i];
  }
  const double den = sw * sxx - sx * sx;
  double b = den != 0 ? (sw * sxt - sx * st) / den : 0, a = (st - b * sx) / sw;
  if (a < 0) {  // through the origin
    a = 0;
    b = sxx > 0 ? sxt / sxx : 0;
  }
  if (b <= 0) return {st / sw, 0};
  return {a, 1 / b};
}

AlphaBeta fit_alpha_beta_retimed(const std::vector<double>& x, const std::function<double(size_t)>& time_at,
                                 int rounds) {
  if (rounds < 1) throw InputError("fit_alpha_beta_retimed: rounds must be >= 1");
  std::vector<double> t(x.size(), std::numeric_limits<double>::infinity());
  AlphaBeta f;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < x.size(); ++i) t[i] = std::min(t[i], time_at(i));
    f = fit_alpha_beta(x, t);
    if (f.per_s > 0) break;
  }
  return f;
}

StepTimeHardware calibrate_step_time(Communicator& comm, Device& device, const PrecisionOps& ops,
                                     const StepTimeCalibrationSpec& spec) {
  StepTimeHardware hw;
  std::unique_ptr<CpuOps<float>> cpu_f;
  std::unique_ptr<HalfCpuOps<bf16>> cpu_b;
  std::unique_ptr<HalfCpuOps<fp16>> cpu_h;
  auto need_cpu = [&](const char* what) {
    if (!device.is_cpu())
      throw InputError(std::string("calibrate_step_time: the backend has no ") + what + " ops");
  };
  Ops<float>* f32 = ops.fp32;
  if (spec.precision == Precision::fp32) {
    if (!f32) need_cpu("fp32"), cpu_f = std::make_unique<CpuOps<float>>(), f32 = cpu_f.get();
    time_ops(comm, device, *f32, spec, hw);
  } else if (spec.precision == Precision::bf16) {
    Ops<bf16>* o = ops.bf16;
    if (!o) need_cpu("bf16"), cpu_b = std::make_unique<HalfCpuOps<bf16>>(), o = cpu_b.get();
    time_ops(comm, device, *o, spec, hw);
  } else {
    Ops<fp16>* o = ops.fp16;
    if (!o) need_cpu("fp16"), cpu_h = std::make_unique<HalfCpuOps<fp16>>(), o = cpu_h.get();
    time_ops(comm, device, *o, spec, hw);
  }
  return hw;
}

nlohmann::json step_time_hardware_json(const StepTimeHardware& hw) {
  using nlohmann::json;
  json j;
  for (int p = 0; p < 3; ++p) {
    const std::string name(to_string(Precision(p)));
    if (hw.gemm[size_t(p)].per_s > 0) j["gemm_gflops"][name] = hw.gemm[size_t(p)].per_s / 1e9;
    if (hw.attention[size_t(p)].per_s > 0) j["attention_gflops"][name] = hw.attention[size_t(p)].per_s / 1e9;
  }
  j["memory"] = {{"alpha_us", hw.memory.alpha_s * 1e6}, {"gb_per_s", hw.memory.per_s / 1e9}};
  j["collectives"] = json::array();
  for (const CollectiveFit& f : hw.collectives)
    j["collectives"].push_back({{"group", f.group}, {"link", f.link == LinkClass::intra_node ? "intra_node" : "inter_node"},
                                {"alpha_us", f.bus.alpha_s * 1e6}, {"bus_gb_per_s", f.bus.per_s / 1e9}});
  j["p2p"] = {{"alpha_us", hw.p2p_intra.alpha_s * 1e6}, {"gb_per_s", hw.p2p_intra.per_s / 1e9}};
  j["host_link"] = {{"alpha_us", hw.host_link.alpha_s * 1e6}, {"gb_per_s", hw.host_link.per_s / 1e9}};
  j["ranks_per_core"] = hw.ranks_per_core;
  j["op_sequence_factor"] = hw.op_sequence_factor;
  j["host_pass"] = {{"alpha_us", hw.host_pass.alpha_s * 1e6}, {"g_elements_per_s", hw.host_pass.per_s / 1e9}};
  j["op_us"] = json::object();
  for (const auto& [k, s] : hw.op_seconds) j["op_us"][k] = s * 1e6;
  return j;
}

}  // namespace dtb
