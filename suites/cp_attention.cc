// The `cp_attention` suite: what context parallelism's attention costs and how much of its
// communication the computation hides (Megatron-Core `--cp-comm-type`; Liu et al. 2023, "Ring
// Attention"), at several sequence lengths over a CP group of every rank. Per sequence length
// Tn and comm type (p2p ring, all_gather), fp32, B sequences of C channels in NH query heads and
// KV key/value heads:
//  - attention_ms: one causal attention forward + backward of this rank's Tn / cp queries against
//    all Tn keys (context_parallel_attention_forward / _backward), median of the slowest rank;
//  - single_rank_ms: the whole-sequence attention forward + backward (gqa_attention_forward /
//    _backward), every rank at once (the same load on the machine), and speedup = single / CP;
//  - ring_bytes: bytes this rank sent in one forward + backward, counted at the communicator
//    (a bus-bytes count for the collectives: (g - 1) n per rank for an all-gather or
//    reduce-scatter of n per rank, nccl-tests' convention) and checked against the algorithm:
//    p2p (3 cp - 2) K/V blocks (cp - 1 forward, cp - 1 backward, cp dK/dV accumulator steps),
//    all_gather 3 (cp - 1) (gathers forward and backward, the dK/dV reduce-scatter), a block
//    being B (Tn / cp) 2 KV hs floats: only the KV heads travel;
//  - compute_alone_ms: the CP attention with every transfer replaced by a local copy (its
//    computation alone); comm_alone_ms: the same transfers with no attention between them; both
//    medians of the slowest rank; hidden_fraction = (compute + comm - attention) / comm, clamped to
//    [0, 1]: the share of the communication time the overlap took off the step (the usual overlap
//    efficiency; 0 when the two simply add up, 1 when the communication cost nothing), marked not
//    resolved (hidden_fraction_resolved false, "n/r") where comm_alone is below the two medians'
//    standard error: then the timings cannot tell;
//    exposed_comm_ms: the time the CP attention spent inside its communication calls (posting,
//    polling, waiting, blocking), the slowest rank's per iteration: it includes waiting for a
//    slower peer, so on an oversubscribed CPU it measures scheduling as much as transfers.
//    On MPI the ring's Isend/Irecv progress only inside MPI calls; the CP core polls between
//    attention blocks (reference/parallel/context_parallel.h), so the hidden share grows with the
//    blocks' compute; the backward's dK/dV step and all_gather's collectives are not overlapped.
// Check: the bytes above, exactly; CP's output against the whole-sequence attention's rows of this
// rank within 2 E_out of kernels/cpu/attention_block_test_util.h's error analysis.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/attention_block_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/layout/layout_spec.h"
#include "reference/model/rng.h"
#include "reference/parallel/context_parallel.h"
#include "suites/bandwidth.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// The section, typed: the one parse validate() and run() use.
struct Params {
  int B = 0, C = 0, NH = 0, KV = 0, warmup = 0, iters = 0, reps = 0;
  std::vector<int> seq_lens;
  std::vector<CpCommType> comm_types;
  uint64_t seed = 0;
  int hs() const { return C / NH; }
  static Params parse(const json& s, const json& config, const WorldInfo& world);
  json to_json() const {
    json types = json::array();
    for (CpCommType t : comm_types) types.push_back(dtb::to_string(t));
    return {{"batch", B},         {"channels", C},       {"heads", NH},      {"num_kv_heads", KV},
            {"seq_lens", seq_lens}, {"cp_comm_types", types}, {"warmup", warmup}, {"iters", iters},
            {"repetitions", reps}, {"seed", seed}};
  }
};

Params Params::parse(const json& s, const json&, const WorldInfo& world) {
  Params p;
  p.B = int(int_in_range(s, "batch", "cp_attention.batch", 1, 64));
  p.C = int(int_in_range(s, "channels", "cp_attention.channels", 1, 8192));
  p.NH = int(int_in_range(s, "heads", "cp_attention.heads", 1, 256));
  p.KV = int(int_in_range(s, "num_kv_heads", "cp_attention.num_kv_heads", 1, 256));
  p.warmup = int(int_in_range(s, "warmup", "cp_attention.warmup", 0, 100));
  p.iters = int(int_in_range(s, "iters", "cp_attention.iters", 1, 1000));
  p.reps = int(int_in_range(s, "repetitions", "cp_attention.repetitions", 1, 100));
  p.seed = uint64_t(int_in_range(s, "seed", "cp_attention.seed", 0, int64_t(1) << 53));
  if (p.C % p.NH != 0)
    throw InputError("cp_attention.channels = " + std::to_string(p.C) + " is not a multiple of heads = " +
                     std::to_string(p.NH));
  if (p.NH % p.KV != 0)
    throw InputError("cp_attention.num_kv_heads = " + std::to_string(p.KV) + " does not divide heads = " +
                     std::to_string(p.NH));
  const json& t = s.at("seq_lens");
  if (!t.is_array() || t.empty()) throw InputError("cp_attention.seq_lens must be a non-empty array");
  for (const json& v : t) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 16))
      throw InputError("cp_attention.seq_lens: every entry must be an integer in [1, 65536], got " + v.dump());
    const int Tn = v.get<int>();
    make_cp_split(world.size, 0, Tn);  // 2 cp must divide Tn: one line naming both
    p.seq_lens.push_back(Tn);
  }
  const json& c = s.at("cp_comm_types");
  if (!c.is_array() || c.empty()) throw InputError("cp_attention.cp_comm_types must be a non-empty array");
  for (const json& v : c) {
    if (!v.is_string()) throw InputError("cp_attention.cp_comm_types: every entry must be a string, got " + v.dump());
    p.comm_types.push_back(parse_cp_comm_type(v.get<std::string>()));
  }
  return p;
}

// A handle whose waiting and polling time is added to `exposed`.
class TimedHandle final : public CommHandle {
 public:
  TimedHandle(std::unique_ptr<CommHandle> inner, double& exposed) : inner_(std::move(inner)), exposed_(exposed) {}
  void wait() override {
    Stopwatch sw;
    inner_->wait();
    exposed_ += sw.elapsed();
  }
  bool test() override {
    Stopwatch sw;
    const bool done = inner_->test();
    exposed_ += sw.elapsed();
    return done;
  }

 private:
  std::unique_ptr<CommHandle> inner_;
  double& exposed_;
};

/// The CP group as the attention sees it, counting what it sends (bytes, bus-bytes for the
/// collectives) and the seconds spent inside communication calls: blocking calls whole, the
/// non-blocking ring step's post, polls and wait. Only the operations the CP core issues are
/// counted; any other would run uncounted, so the byte check would catch a change of algorithm.
class CommProbe final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  double exposed_s = 0;
  size_t bytes_sent = 0;
  void reset() { exposed_s = 0, bytes_sent = 0; }

  void all_gather(const void* s, void* r, size_t n, DType t) override {
    timed([&] { inner_.all_gather(s, r, n, t); });
    bytes_sent += size_t(size() - 1) * n * dtype_size(t);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    timed([&] { inner_.reduce_scatter(s, r, n, t, op); });
    bytes_sent += size_t(size() - 1) * n * dtype_size(t);
  }
  void sendrecv(const void* s, void* r, size_t n, DType t, int sp, int rp, int tag) override {
    timed([&] { inner_.sendrecv(s, r, n, t, sp, rp, tag); });
    bytes_sent += n * dtype_size(t);
  }
  std::unique_ptr<CommHandle> sendrecv_async(const void* s, void* r, size_t n, DType t, int sp, int rp,
                                             int tag) override {
    std::unique_ptr<CommHandle> h;
    timed([&] { h = inner_.sendrecv_async(s, r, n, t, sp, rp, tag); });
    bytes_sent += n * dtype_size(t);
    return std::make_unique<TimedHandle>(std::move(h), exposed_s);
  }

 private:
  template <typename F>
  void timed(F f) {
    Stopwatch sw;
    f();
    exposed_s += sw.elapsed();
  }
};

/// The CP group with every transfer replaced by a local copy (a ring step receives this rank's own
/// block, a gather every slot this rank's block, a reduce-scatter this rank's slot): the CP
/// attention's computation alone, the same block pairs in the same order on finite data, with no
/// waiting on any other rank. Its results are not the attention's; only its time is used.
class LocalCopyComm final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void all_gather(const void* s, void* r, size_t n, DType t) override {
    for (int i = 0; i < size(); ++i) std::memcpy(static_cast<char*>(r) + size_t(i) * n * dtype_size(t), s, n * dtype_size(t));
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp) override {
    std::memcpy(r, static_cast<const char*>(s) + size_t(rank()) * n * dtype_size(t), n * dtype_size(t));
  }
  void sendrecv(const void* s, void* r, size_t n, DType t, int, int, int) override { std::memcpy(r, s, n * dtype_size(t)); }
  std::unique_ptr<CommHandle> sendrecv_async(const void* s, void* r, size_t n, DType t, int, int, int) override {
    std::memcpy(r, s, n * dtype_size(t));
    return std::make_unique<CompletedHandle>();
  }
};

/// Bytes one rank sends in one CP attention forward + backward (the algorithm, written apart from
/// the code that sends them): a K/V block is B Tl 2 KV hs floats.
size_t expected_bytes(CpCommType type, int cp, size_t block_bytes) {
  if (cp == 1) return 0;
  return type == CpCommType::p2p ? size_t(3 * cp - 2) * block_bytes : size_t(3 * (cp - 1)) * block_bytes;
}

std::vector<float> random_vector(size_t n, uint64_t seed, const char* stream, double scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(scale * random_normal(seed, stream_id(stream), i));
  return v;
}

/// The transfers of one CP attention forward + backward with nothing between them, timed as
/// time_iterations does (the slowest rank's): p2p 2 (cp - 1) ring steps of n floats and cp dK/dV
/// steps; all_gather two gathers and a reduce-scatter of n floats per rank. Collective over `g`
/// (the CP group) and `world`.
TimedResult time_transfers(Communicator& g, Communicator& world, Device& dev, CpCommType type, size_t n,
                           const Params& p) {
  const int cp = g.size(), me = g.rank(), next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  const size_t elems = n * size_t(type == CpCommType::p2p ? 1 : cp);
  Tensor a = Tensor::empty(dev, {int64_t(elems)}, DType::f32, MemCategory::comm_buffer);
  Tensor z = Tensor::empty(dev, {int64_t(elems)}, DType::f32, MemCategory::comm_buffer);
  float *x = a.data<float>(), *y = z.data<float>();
  return time_iterations(world, p.warmup, p.iters, p.reps, [&] {
    if (cp == 1) return;
    if (type == CpCommType::p2p) {
      for (int i = 0; i < 2 * (cp - 1); ++i) g.sendrecv_async(x, y, n, DType::f32, next, prev, 71)->wait();
      for (int i = 0; i < cp; ++i) g.sendrecv(x, y, n, DType::f32, next, prev, 72);
    } else {
      g.all_gather(x, y, n, DType::f32);
      g.all_gather(x, y, n, DType::f32);
      g.reduce_scatter(y, x, n, DType::f32, ReduceOp::sum);
    }
  });
}

class CpAttentionSuite final : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "cp_attention"; }
  std::string description() const override {
    return "context-parallel causal attention over every rank (p2p ring, all_gather) at several sequence lengths: "
           "time against one rank's whole-sequence attention, bytes around the ring, the share of the "
           "communication the attention hid";
  }
  json defaults() const override {
    return {{"batch", 1},         {"channels", 256},     {"heads", 8},        {"num_kv_heads", 2},
            {"seq_lens", {256, 1024, 4096}}, {"cp_comm_types", {"p2p", "all_gather"}}, {"warmup", 1},
            {"iters", 2},         {"repetitions", 5},    {"seed", 11}};
  }
  void validate(const json& s, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(s, config, world);
    if (config.value("backend", "cpu") != "cpu")
      throw InputError("cp_attention: the block attention ops run on the CPU backend only so far");
    // The largest sequence's whole-sequence attention: probabilities and scratch (2 B NH Tn^2
    // floats), qkv, dqkv, out, dout and CP's local copies (about 4 B Tn (NH + 2 KV) hs floats).
    const double Tn = *std::max_element(p.seq_lens.begin(), p.seq_lens.end());
    const double W = double(p.NH + 2 * p.KV) * p.hs();
    check_fits_in_memory(4.0 * (2.0 * p.B * p.NH * Tn * Tn + 4.0 * p.B * Tn * W), world.ranks_per_node,
                         "cp_attention: the attention at the longest sequence", world.options);
  }
  SuiteResult run(SuiteContext& ctx) override;
};

SuiteResult CpAttentionSuite::run(SuiteContext& ctx) {
  const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
  std::unique_ptr<Ops<float>> own_ops;
  if (!ctx.backend) own_ops = std::make_unique<CpuOps<float>>();
  Ops<float>& ops = ctx.backend ? ctx.backend->ops() : *own_ops;
  Communicator& world = ctx.world;
  Communicator& base = ctx.device_world ? *ctx.device_world : ctx.world;
  const int cp = world.size(), me = world.rank(), B = p.B, C = p.C, NH = p.NH, KV = p.KV, hs = p.hs();
  const int W = (NH + 2 * KV) * hs;
  auto cp_group = base.split(0, me, std::string(spelling(LayoutKey::cp).name_key));
  CommProbe probe(*cp_group);
  LocalCopyComm local(*cp_group);

  SuiteResult res;
  res.data = {{field_key(LayoutKey::cp), cp}, {"batch", B}, {"channels", C}, {"heads", NH}, {"num_kv_heads", KV}};
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "# cp_attention: causal attention, B=%d C=%d NH=%d KV=%d, fp32, CP %d over every rank; "
                "forward + backward, median of the slowest rank over %d repetitions of %d",
                B, C, NH, KV, cp, p.reps, p.iters);
  ctx.print(buf);
  ctx.print("#  seq    comm        CP (ms)  1 rank (ms)  speedup   ring bytes/rank  compute (ms)  comm alone (ms)  "
            "in comm (ms)  hidden");

  for (const int Tn : p.seq_lens) {
    const CpSplit split = make_cp_split(cp, me, Tn);
    const int Tl = split.local_len();
    // Every rank draws the same full batch (the data loader's replication), then takes its rows.
    const std::vector<float> qkv = random_vector(size_t(B) * Tn * W, p.seed + Tn, "cp_attention.qkv", 1.0);
    const std::vector<float> dout = random_vector(size_t(B) * Tn * C, p.seed + Tn, "cp_attention.dout", 1.0);
    auto tensor = [&](size_t n, MemCategory c) { return Tensor::empty(ctx.device, {int64_t(n)}, DType::f32, c); };
    Tensor fqkv = tensor(qkv.size(), MemCategory::activation), fdout = tensor(dout.size(), MemCategory::activation);
    Tensor fout = tensor(dout.size(), MemCategory::activation), fdqkv = tensor(qkv.size(), MemCategory::activation);
    Tensor att = tensor(size_t(B) * NH * Tn * Tn, MemCategory::activation);
    Tensor scratch = tensor(size_t(B) * NH * Tn * Tn, MemCategory::workspace);
    ops.copy_from_host(fqkv.data<float>(), qkv.data(), fqkv.bytes());
    ops.copy_from_host(fdout.data<float>(), dout.data(), fdout.bytes());
    Tensor lqkv = tensor(size_t(B) * Tl * W, MemCategory::activation), ldout = tensor(size_t(B) * Tl * C, MemCategory::activation);
    Tensor lout = tensor(size_t(B) * Tl * C, MemCategory::activation), ldqkv = tensor(size_t(B) * Tl * W, MemCategory::activation);
    Tensor llse = Tensor::empty(ctx.device, {int64_t(B) * Tl * NH}, DType::f32, MemCategory::activation);
    cp_scatter_rows(ops, split, lqkv.data<float>(), fqkv.data<float>(), B, W);
    cp_scatter_rows(ops, split, ldout.data<float>(), fdout.data<float>(), B, C);

    // The whole sequence on every rank at once.
    auto single = [&] {
      ops.gqa_attention_forward(fout.data<float>(), att.data<float>(), fqkv.data<float>(), B, Tn, NH, KV, hs);
      ops.zero(fdqkv.data<float>(), qkv.size());
      ops.gqa_attention_backward(fdqkv.data<float>(), scratch.data<float>(), fdout.data<float>(), fqkv.data<float>(),
                                 att.data<float>(), B, Tn, NH, KV, hs);
      ops.synchronize();
    };
    // fout holds the last timed iteration's output: the reference rows below.
    const TimedResult t_single = time_iterations(world, p.warmup, p.iters, p.reps, single);
    std::vector<float> full_out(dout.size()), ref(size_t(B) * Tl * C);
    ops.copy_to_host(full_out.data(), fout.data<float>(), fout.bytes());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t)
        std::copy_n(full_out.data() + (size_t(b) * Tn + split.global_position(t)) * C, C,
                    ref.data() + (size_t(b) * Tl + t) * C);

    const size_t block_bytes = size_t(B) * Tl * 2 * KV * hs * sizeof(float);
    for (const CpCommType type : p.comm_types) {
      auto pass_on = [&](Communicator& group) {
        const CpAttention<float> cpa{.ops = ops, .dev = ctx.device, .group = group, .split = split, .comm_type = type};
        context_parallel_attention_forward(cpa, lout.data<float>(), llse.data<float>(), lqkv.data<float>(), B, C, NH, KV);
        ops.zero(ldqkv.data<float>(), size_t(B) * Tl * W);
        context_parallel_attention_backward(cpa, ldqkv.data<float>(), ldout.data<float>(), lqkv.data<float>(),
                                            lout.data<float>(), llse.data<float>(), B, C, NH, KV);
        ops.synchronize();
      };
      auto cp_pass = [&] { pass_on(probe); };
      // One pass counted alone: the bytes and the output checked.
      probe.reset();
      cp_pass();
      const size_t bytes = probe.bytes_sent, want = expected_bytes(type, cp, block_bytes);
      std::vector<float> out(ref.size());
      ops.copy_to_host(out.data(), lout.data<float>(), lout.bytes());
      const cpu::test::AttentionBound e = cpu::test::attention_bound(kU, hs, Tn, 2 * cp);
      double checks[2] = {double(bytes != want ? 1 : 0), cpu::test::out_ratio(out, ref, e)};
      world.all_reduce(checks, checks, 2, DType::f64, ReduceOp::max);

      // The attention, with the probe's exposed seconds over the timed iterations.
      for (int i = 0; i < p.warmup; ++i) cp_pass();
      probe.reset();
      const TimedResult t_cp = time_iterations(world, 0, p.iters, p.reps, cp_pass);
      double exposed = probe.exposed_s / (double(p.iters) * p.reps);
      world.all_reduce(&exposed, &exposed, 1, DType::f64, ReduceOp::max);

      // The computation alone (transfers replaced by local copies), then the same transfers with
      // nothing between them (on the plain group: not counted).
      const TimedResult t_compute = time_iterations(world, p.warmup, p.iters, p.reps, [&] { pass_on(local); });
      const TimedResult t_comm = time_transfers(*cp_group, world, ctx.device, type, block_bytes / sizeof(float), p);

      if (me != 0) continue;
      const std::string ct = to_string(type), ts = std::to_string(Tn);
      const double single_s = t_single.summary.median, cp_s = t_cp.summary.median, comm_s = t_comm.summary.median;
      const double compute_s = t_compute.summary.median;
      // What the overlap saved of the communication: (compute + comm - together) / comm.
      const double hidden = comm_s > 0 ? std::clamp((compute_s + comm_s - cp_s) / comm_s, 0.0, 1.0) : 0.0;
      // The difference of two medians resolves the communication only where it exceeds their
      // standard error (1.2533 sd / sqrt(n) each, the median's of a normal sample, added in
      // quadrature); below it the hidden share is noise and is reported as not resolved.
      const double se = 1.2533 * std::sqrt((t_cp.summary.stddev * t_cp.summary.stddev +
                                            t_compute.summary.stddev * t_compute.summary.stddev) /
                                           double(std::max(t_cp.summary.n, 1)));
      const bool resolved = comm_s > se;
      json rec = benchmark_record("cp_attention/seq:" + ts + "/cp:" + std::to_string(cp) + "/cp_comm_type:" + ct,
                                  p.iters, p.reps, cp_s, cp_s, "ms");
      rec["seq_len"] = Tn;
      rec[field_key(LayoutKey::cp)] = cp;
      rec[field_key(LayoutKey::cp_comm_type)] = ct;
      rec["attention_ms"] = to_json(t_cp.summary, 1e3);
      rec["single_rank_ms"] = to_json(t_single.summary, 1e3);
      rec["speedup"] = single_s / cp_s;
      rec["ring_bytes_per_rank"] = bytes;
      rec["ring_block_bytes"] = block_bytes;
      rec["comm_alone_ms"] = to_json(t_comm.summary, 1e3);
      rec["comm_algbw_GBps"] = comm_s > 0 ? double(bytes) / comm_s / 1e9 : 0.0;
      rec["compute_alone_ms"] = to_json(t_compute.summary, 1e3);
      rec["exposed_comm_ms"] = exposed * 1e3;
      rec["hidden_fraction"] = hidden;
      rec["hidden_fraction_resolved"] = resolved;
      res.benchmarks.push_back(std::move(rec));
      res.checks.push_back(make_check("cp_attention/ring_bytes/seq:" + ts + "/" + ct, checks[0], 0,
                                      "1 when any rank's counted bytes differ from the algorithm's: " +
                                          std::to_string(want) + " B per rank (" +
                                          (type == CpCommType::p2p ? "3 cp - 2" : "3 (cp - 1)") +
                                          " blocks of B Tn/cp 2 KV hs floats)"));
      res.checks.push_back(make_check("cp_attention/output/seq:" + ts + "/" + ct, checks[1], 1,
                                      "max over ranks of |out_CP - out_whole| / (2 E_out), E_out the float32 "
                                      "error bound of blockwise attention (kernels/cpu/attention_block_test_util.h, "
                                      "2 cp blocks per row)"));
      std::snprintf(buf, sizeof buf, "   %5d  %-10s %9.2f  %11.2f  %7.2f   %15zu  %13.2f  %13.3f  %12.3f  %s", Tn,
                    ct.c_str(), cp_s * 1e3, single_s * 1e3, single_s / cp_s, bytes, compute_s * 1e3, comm_s * 1e3,
                    exposed * 1e3, resolved ? (std::to_string(int(std::lround(100 * hidden))) + "%").c_str() : "n/r");
      ctx.print(buf);
    }
    world.barrier();
  }
  ctx.print_checks(res.checks, 40);
  return res;
}

}  // namespace

DTB_REGISTER_SUITE("cp_attention", CpAttentionSuite);

}  // namespace dtb
