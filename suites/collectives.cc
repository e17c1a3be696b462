// The collectives suite: nccl-tests' sweep over the world communicator. For each op and
// message size S (min_bytes, *step_factor, ..., max_bytes), out of place and in place: an
// exact data check (#wrong) and the time per iteration, algbw and busbw (suites/bandwidth.h).
// Printed as nccl-tests' table; recorded as one benchmark record per (op, S, placement). When
// the world spans two nodes or more (real, or emulated by `dtbench run --ranks-per-node`),
// all_reduce is measured twice: flat, and hierarchical (kernels/comm/hierarchical_communicator.h)
// as op all_reduce_hierarchical; every all_reduce row carries the ring model's cross-node bytes.
#include <algorithm>
#include <cstring>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>

#include "kernels/error.h"
#include "kernels/tensor.h"
#include "kernels/comm/hierarchical_communicator.h"
#include "kernels/comm/mpi_communicator.h"
#include "kernels/comm/ring.h"
#include "suites/bandwidth.h"
#include "suites/calibration.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

enum class Placement { out_of_place, in_place };
constexpr Placement kPlacements[] = {Placement::out_of_place, Placement::in_place};

std::string_view to_string(Placement p) {
  return p == Placement::in_place ? "in_place" : "out_of_place";
}

/// Whether the Communicator has `op` in placement `p`: every op has both (broadcast out of
/// place is NCCL's ncclBroadcast, sendrecv in place is MPI_Sendrecv_replace) except the
/// all-to-alls, out of place only (nccl-tests' has no in-place form; dtbench's follows it). A
/// placement without an implementation prints N/A and gets no record and no check.
bool supported(CollectiveOp op, Placement p) {
  const bool all_to_all = op == CollectiveOp::all_to_all || op == CollectiveOp::all_to_allv;
  return !(all_to_all && p == Placement::in_place);
}

/// A validated config section: the suite's Params (parse() below, used by validate and run).
struct Params {
  std::vector<CollectiveOp> ops;
  size_t min_bytes = 0, max_bytes = 0, step_factor = 2, max_bytes_per_batch = 0;
  DType dtype = DType::f32;
  int warmup = 0, iters = 0, repetitions = 0;
  bool in_place = true, out_of_place = true;
  bool enabled(Placement p) const { return p == Placement::in_place ? in_place : out_of_place; }
  static Params parse(const json& section, const json& config, const WorldInfo& world);
  json to_json() const {
    json names = json::array();
    for (CollectiveOp op : ops) names.push_back(std::string(dtb::to_string(op)));
    return {{"ops", names}, {"min_bytes", min_bytes}, {"max_bytes", max_bytes}, {"step_factor", step_factor},
            {"max_bytes_per_batch", max_bytes_per_batch}, {"dtype", std::string(dtb::to_string(dtype))},
            {"warmup", warmup}, {"iters", iters}, {"repetitions", repetitions}, {"in_place", in_place},
            {"out_of_place", out_of_place}};
  }
};
using Options = Params;

bool get_bool(const json& s, const char* key) {
  if (!s.contains(key) || !s[key].is_boolean())
    throw InputError(std::string("collectives.") + key + ": expected true or false");
  return s[key].get<bool>();
}

/// Parses and range-checks a section (defaults filled). Throws InputError naming the key.
Params Params::parse(const json& s, const json&, const WorldInfo&) {
  Params o;
  if (!s.contains("ops") || !s["ops"].is_array() || s["ops"].empty())
    throw InputError("collectives.ops: expected a non-empty list of collective names");
  for (const json& name : s["ops"]) {
    if (!name.is_string()) throw InputError("collectives.ops: expected strings");
    try {
      o.ops.push_back(parse_collective_op(name.get<std::string>()));
    } catch (const InputError& e) {
      throw InputError(std::string("collectives.ops: ") + e.what());
    }
  }
  std::string dtype;
  if (s.contains("dtype") && s["dtype"].is_string()) dtype = s["dtype"].get<std::string>();
  if (dtype == "f32") o.dtype = DType::f32;
  else if (dtype == "f64") o.dtype = DType::f64;
  else throw InputError("collectives.dtype: '" + dtype + "' is not supported (f32, f64)");

  // Counts are ints for MPI; byte sizes are limited by INT_MAX elements below.
  const int64_t big = int64_t(1) << 53;
  const int64_t min_b = int_in_range(s, "min_bytes", "collectives.min_bytes", 4, big);
  const int64_t max_b = int_in_range(s, "max_bytes", "collectives.max_bytes", 4, big);
  const int64_t step = int_in_range(s, "step_factor", "collectives.step_factor", 2, 1 << 20);
  const int64_t per_batch = int_in_range(s, "max_bytes_per_batch", "collectives.max_bytes_per_batch", 1, big);
  const int64_t warmup = int_in_range(s, "warmup_iters", "collectives.warmup_iters", 0, INT_MAX);
  const int64_t iters = int_in_range(s, "iters", "collectives.iters", 1, INT_MAX);
  const int64_t reps = int_in_range(s, "repetitions", "collectives.repetitions", 1, INT_MAX);
  if (min_b > max_b)
    throw InputError("collectives.min_bytes = " + std::to_string(min_b) + " is greater than max_bytes = " +
                     std::to_string(max_b));
  if (size_t(max_b) / dtype_size(o.dtype) > size_t(INT_MAX))
    throw InputError("collectives.max_bytes: more than INT_MAX elements per rank (MPI counts)");
  o.min_bytes = size_t(min_b), o.max_bytes = size_t(max_b), o.step_factor = size_t(step);
  o.max_bytes_per_batch = size_t(per_batch);
  o.warmup = int(warmup), o.iters = int(iters), o.repetitions = int(reps);
  o.in_place = get_bool(s, "in_place");
  o.out_of_place = get_bool(s, "out_of_place");
  if (!o.in_place && !o.out_of_place)
    throw InputError("collectives.in_place, out_of_place: at least one must be true");
  return o;
}

/// Elements per rank for a nominal size S: all_gather's send count, reduce_scatter's recv
/// count and all_to_all's block per peer are S / (type size * n); all_to_allv's unit is
/// S / (type size * R) (alltoallv_split); the other ops' buffer holds S / type size. At least 1.
size_t per_rank_count(CollectiveOp op, size_t bytes, size_t type_size, int n) {
  const bool split = op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter ||
                     op == CollectiveOp::all_to_all;
  const size_t parts = op == CollectiveOp::all_to_allv ? alltoallv_row_sum(n) : split ? size_t(n) : 1;
  return std::max<size_t>(1, bytes / (type_size * parts));
}

size_t total(const std::vector<size_t>& counts) {
  size_t t = 0;
  for (size_t c : counts) t += c;
  return t;
}

/// all_to_all's blocks as a split: `count` to and from every rank, in rank order.
AlltoallvSplit alltoallv_split_even(int n, size_t count) {
  AlltoallvSplit s;
  s.send_counts.assign(size_t(n), count);
  s.recv_counts = s.send_counts;
  s.send_displs = s.recv_displs = exclusive_prefix_sum(s.send_counts);
  return s;
}

/// Rank r's input element i: a small positive integer, so that a sum over ranks is exact
/// whatever the reduction order (nccl-tests' verifiable inputs do the same with mantissas).
template <typename T> T input(int r, size_t i) { return T((i * 7 + size_t(r) * 13) % 17 + 1); }
template <typename T> T sum_over_ranks(int n, size_t i) {
  T acc = 0;
  for (int r = 0; r < n; ++r) acc += input<T>(r, i);
  return acc;
}
constexpr int kRoot = 0;  // broadcast root

/// Whether the ops run on device buffers (ctx.device_world, NCCL on CUDA) and are timed as
/// nccl-tests times them: back-to-back launches, one completion (time_async_iterations).
/// Otherwise (MPI on host buffers) each call blocks and time_iterations times them.
bool device_timed(const SuiteContext& ctx) { return ctx.device_world && ctx.backend; }

/// The nodes the all_reduce rows see: `count` nodes of `per_node` consecutive world ranks
/// (suite.h node_size), emulated or real.
struct Nodes {
  int count = 1, per_node = 1;
  bool emulated = false;
  /// Hierarchical rows: two nodes or more, each holding per_node >= 2 ranks (with one rank per
  /// node the hierarchical all-reduce is the flat ring itself).
  bool hierarchical(int n) const { return count >= 2 && per_node >= 2 && n % per_node == 0; }
};
Nodes nodes_of(const SuiteContext& ctx) {
  Nodes d;
  const int n = ctx.world.size();
  d.per_node = std::min(n, std::max(1, node_size(ctx.ranks_per_node, ctx.options)));
  d.count = (n + d.per_node - 1) / d.per_node;
  d.emulated = ctx.options.emulated_ranks_per_node > 0;
  return d;
}
constexpr const char* kHierarchicalName = "all_reduce_hierarchical";

/// One (op, size, placement) case.
struct Measurement {
  bool ran = false;
  int iterations = 0;
  int64_t n_wrong = 0;  // summed over ranks
  TimedResult timed;
  double algbw = 0, busbw = 0;  // GB/s, from the median time
  /// The bare MPI loop of the same op and size, timed right after (suites/calibration.h);
  /// n = 0 when not measured (in place, or not on an MPI communicator).
  Summary bare;
};

/// The elements of hrecv (recv_len of them, as rank `me` of n holds them after `op` on
/// per-rank count `count`; split: the all-to-alls' blocks) that differ from the exact result
/// of the inputs input<T>; a NaN counts as wrong.
template <typename T>
int64_t count_wrong(CollectiveOp op, const T* hrecv, size_t recv_len, size_t count, int n, int me,
                    const AlltoallvSplit& split) {
  const bool to_all = op == CollectiveOp::all_to_all, to_allv = op == CollectiveOp::all_to_allv;
  const int prev = (me + n - 1) % n;
  std::vector<size_t> from_offset(size_t(n), 0);  // rank i's send offset of its block for me
  for (int i = 0; to_allv && i < n; ++i) from_offset[size_t(i)] = alltoallv_split(n, i, count).send_displs[size_t(me)];
  for (int i = 0; to_all && i < n; ++i) from_offset[size_t(i)] = size_t(me) * count;
  int64_t wrong = 0;
  for (size_t j = 0, from = 0; j < recv_len; ++j) {
    const size_t i = j % count;
    // The all-to-alls: the block of recv that j falls in comes from rank `from`.
    while ((to_all || to_allv) && j >= split.recv_displs[from] + split.recv_counts[from]) ++from;
    T want = 0;
    switch (op) {
      case CollectiveOp::all_reduce: want = sum_over_ranks<T>(n, i); break;
      case CollectiveOp::all_gather: want = input<T>(int(j / count), i); break;
      case CollectiveOp::reduce_scatter: want = sum_over_ranks<T>(n, me * count + i); break;
      case CollectiveOp::broadcast: want = input<T>(kRoot, i); break;
      case CollectiveOp::sendrecv: want = input<T>(prev, i); break;
      case CollectiveOp::all_to_all:
      case CollectiveOp::all_to_allv:
        want = input<T>(int(from), from_offset[from] + (j - split.recv_displs[from]));
        break;
    }
    wrong += !(hrecv[j] == want);  // NaN counts as wrong
  }
  return wrong;
}

/// The non-blocking launch of `op` on c (suites/bandwidth.h's AsyncLaunch), with the blocking
/// call's operands; split (the all-to-alls' blocks) must outlive it.
template <typename T>
AsyncLaunch async_launch(Communicator& c, CollectiveOp op, T* send, T* recv, size_t count, DType dt, int next, int prev,
                         const AlltoallvSplit& split) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return [=, &c] { return c.all_reduce_async(send, recv, count, dt, ReduceOp::sum); };
    case CollectiveOp::all_gather:
      return [=, &c] { return c.all_gather_async(send, recv, count, dt); };
    case CollectiveOp::reduce_scatter:
      return [=, &c] { return c.reduce_scatter_async(send, recv, count, dt, ReduceOp::sum); };
    case CollectiveOp::broadcast:
      return [=, &c] { return c.broadcast_out_of_place_async(send, recv, count, dt, kRoot); };
    case CollectiveOp::sendrecv:
      return [=, &c] { return c.sendrecv_async(send, recv, count, dt, next, prev); };
    case CollectiveOp::all_to_all:
    case CollectiveOp::all_to_allv:
      return [=, &c, &split] {
        return c.all_to_allv_async(send, split.send_counts, split.send_displs, recv, split.recv_counts,
                                   split.recv_displs, dt);
      };
  }
  return {};
}

/// Allocates the buffers, fills them, runs the op once and counts wrong elements (summed
/// over ranks), then times it. Buffers are freed on return, outside any timed region.
/// The op runs on ctx.device_world (NCCL on device buffers on CUDA) when set, else on
/// ctx.world; inputs are written and results read on the host, copied through the backend.
/// With `with_bare` (out of place, on an MpiCommunicator), the bare MPI call of the op is timed
/// the same way right after, as the row's calibration. `via`, when set, runs the op instead (the
/// hierarchical all_reduce over the same group).
template <typename T>
Measurement measure(SuiteContext& ctx, const Options& o, CollectiveOp op, size_t count,
                    Placement placement, int iterations, bool with_bare, Communicator* via) {
  Communicator& c = via ? *via : ctx.device_world ? *ctx.device_world : ctx.world;
  Communicator& host = ctx.world;  // barriers and host-side reductions
  const int n = c.size(), me = c.rank();
  const DType dt = o.dtype;
  const bool in_place = placement == Placement::in_place;
  const bool gathered = op == CollectiveOp::all_gather;
  const bool scattered = op == CollectiveOp::reduce_scatter;
  // The all-to-alls' blocks: equal (count each) or alltoallv_split's (count the unit).
  const bool to_all = op == CollectiveOp::all_to_all, to_allv = op == CollectiveOp::all_to_allv;
  const AlltoallvSplit split = to_allv ? alltoallv_split(n, me, count)
                                       : to_all ? alltoallv_split_even(n, count) : AlltoallvSplit{};
  const size_t send_len = scattered ? count * n : (to_all || to_allv) ? total(split.send_counts) : count;
  const size_t recv_len = gathered ? count * n : (to_all || to_allv) ? total(split.recv_counts) : count;
  auto alloc = [&](size_t elems) {
    return Tensor::empty(ctx.device, {int64_t(elems)}, dt, MemCategory::comm_buffer);
  };
  // In place, one buffer: NCCL's layout (send = recv + me*count, recv = send + me*count).
  // Offsets (elements) of send and recv in buffer a, or send in b when out of place.
  const size_t a_len = scattered && in_place ? send_len : recv_len;
  size_t send_off = 0, recv_off = 0;
  if (in_place && scattered) recv_off = me * count;
  if (in_place && gathered) send_off = me * count;
  Tensor a = alloc(a_len), b;
  if (!in_place) b = alloc(send_len);
  std::vector<T> ha(a_len), hb(in_place ? 0 : send_len);
  T* hsend = in_place ? ha.data() + send_off : hb.data();
  T* hrecv = ha.data() + recv_off;
  std::fill(hrecv, hrecv + recv_len, T(-1));  // never a valid result
  if (op == CollectiveOp::broadcast) {
    if (me == kRoot) for (size_t i = 0; i < count; ++i) hsend[i] = input<T>(kRoot, i);
  } else {
    for (size_t i = 0; i < send_len; ++i) hsend[i] = input<T>(me, i);
  }
  auto to_device = [&](Tensor& t, const std::vector<T>& h) {
    if (ctx.backend) ctx.backend->copy_from_host(t.raw(), h.data(), h.size() * sizeof(T));
    else std::memcpy(t.raw(), h.data(), h.size() * sizeof(T));
  };
  to_device(a, ha);
  if (!in_place) to_device(b, hb);
  T* send = in_place ? a.data<T>() + send_off : b.data<T>();
  T* recv = a.data<T>() + recv_off;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::function<void()> call;
  switch (op) {
    case CollectiveOp::all_reduce: {
      // Test-only: DTB_INJECT_SLOWDOWN's all_reduce band (kernels/slowdown.h), on the host path.
      const double slow = ctx.options.slowdown.all_reduce_at(count * dtype_size(dt));
      call = [&, slow, fastest = double(INFINITY)]() mutable {
        slowed(slow, fastest, [&] { c.all_reduce(send, recv, count, dt, ReduceOp::sum); });
      };
      break;
    }
    case CollectiveOp::all_gather: call = [&] { c.all_gather(send, recv, count, dt); }; break;
    case CollectiveOp::reduce_scatter:
      call = [&] { c.reduce_scatter(send, recv, count, dt, ReduceOp::sum); };
      break;
    case CollectiveOp::broadcast:
      call = [&] { c.broadcast(send, recv, count, dt, kRoot); };
      break;
    case CollectiveOp::sendrecv:
      call = [&] { c.sendrecv(send, recv, count, dt, next, prev); };
      break;
    case CollectiveOp::all_to_all: call = [&] { c.all_to_all(send, recv, count, dt); }; break;
    case CollectiveOp::all_to_allv:
      call = [&] {
        c.all_to_allv(send, split.send_counts, split.send_displs, recv, split.recv_counts, split.recv_displs, dt);
      };
      break;
  }

  // The device path's launches: the same operation, non-blocking (suites/bandwidth.h).
  const AsyncLaunch launch = async_launch(c, op, send, recv, count, dt, next, prev, split);

  call();
  if (ctx.backend) ctx.backend->copy_to_host(ha.data(), a.raw(), a_len * sizeof(T));
  else std::memcpy(ha.data(), a.raw(), a_len * sizeof(T));
  const int64_t wrong = count_wrong<T>(op, hrecv, recv_len, count, n, me, split);
  double total = double(wrong);
  host.all_reduce(&total, &total, 1, DType::f64, ReduceOp::sum);

  Measurement m;
  m.ran = true;
  m.iterations = iterations;
  m.n_wrong = int64_t(total);
  if (device_timed(ctx)) {
    m.timed = time_async_iterations(host, [&] { ctx.backend->synchronize(); }, o.warmup,
                                    iterations, o.repetitions, launch);
  } else {
    m.timed = time_iterations(host, o.warmup, iterations, o.repetitions, call);
    const auto* mpi = dynamic_cast<const MpiCommunicator*>(&c);
    if (with_bare && !in_place && mpi) {
      const auto bare = bare_mpi_call(op, *mpi, send, recv, count, dt, kRoot, next, prev);
      m.bare = time_iterations(host, o.warmup, iterations, o.repetitions, bare).summary;
    }
  }
  return m;
}

/// nccl-tests' time column: fewer decimals as the value grows.
std::string format_time_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 10000 ? "%7.0f" : us >= 100 ? "%7.1f" : "%7.2f", us);
  return buf;
}

std::string format_row(size_t bytes, size_t count, DType dt, CollectiveOp op,
                       const Measurement (&m)[2]) {
  const bool reduces = op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%12zu  %12zu  %8s  %6s  %6d", bytes, count,
                std::string(to_string(dt)).c_str(), reduces ? "sum" : "none",
                op == CollectiveOp::broadcast ? kRoot : -1);
  std::string line = buf;
  for (const Measurement& x : m) {
    if (!x.ran) {
      std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    } else {
      std::snprintf(buf, sizeof buf, "  %7s  %6.2f  %6.2f  %6lld",
                    format_time_us(x.timed.summary.median * 1e6).c_str(), x.algbw, x.busbw,
                    static_cast<long long>(x.n_wrong));
    }
    line += buf;
  }
  return line;
}

/// Prints `line` on rank 0 without trailing blanks.
void print_line(SuiteContext& ctx, std::string line) {
  line.erase(line.find_last_not_of(' ') + 1);
  ctx.print(line);
}

void print_header(SuiteContext& ctx, CollectiveOp op, const std::string& op_name, int n, const Nodes& nodes) {
  char buf[320];
  std::snprintf(buf, sizeof buf, "# %s: %s; busbw = algbw * %.4g (%d rank%s)", op_name.c_str(),
                std::string(size_definition(op)).c_str(), bus_factor(op, n), n, n == 1 ? "" : "s");
  ctx.print(buf);
  if (op == CollectiveOp::all_reduce && nodes.count >= 2) {
    std::snprintf(buf, sizeof buf, "# %d %snodes of %d ranks; %s; cross-node bytes per op (ring model): flat %.4g S, "
                  "hierarchical %.4g S", nodes.count, nodes.emulated ? "emulated " : "", nodes.per_node,
                  op_name == kHierarchicalName ? "reduce_scatter in the node, all_reduce across, all_gather in the node"
                                               : "one ring over all ranks",
                  ring_all_reduce_factor(n), ring_all_reduce_factor(nodes.count));
    ctx.print(buf);
  }
  std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s  %-31s  %-31s", "", "", "", "", "",
                "|-------- out-of-place -------|", "|---------- in-place ---------|");
  ctx.print(buf);
  std::snprintf(buf, sizeof buf,
                "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
  ctx.print(buf);
  std::snprintf(buf, sizeof buf,
                "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
  print_line(ctx, buf);
}

class CollectivesSuite final : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "collectives"; }
  std::string description() const override {
    return "latency, algbw and busbw of each collective over a message-size sweep, in and "
           "out of place, with an exact data check (nccl-tests' definitions)";
  }
  json defaults() const override {
    return {{"ops", {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all", "all_to_allv"}},
            {"min_bytes", 8},
            {"max_bytes", 67108864},
            {"step_factor", 2},
            {"dtype", "f32"},
            {"warmup_iters", 2},
            {"iters", 20},
            {"repetitions", 5},
            {"max_bytes_per_batch", 268435456},
            {"in_place", true},
            {"out_of_place", true}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const Params o = Params::parse(section, config, world);
    // A rank holds at most two buffers of S bytes (send and recv).
    check_fits_in_memory(2.0 * double(o.max_bytes), world.ranks_per_node,
                         "collectives.max_bytes = " + std::to_string(o.max_bytes), world.options);
  }
  SuiteResult run(SuiteContext& ctx) override;
};

/// What every row adds to the suite's closing lines.
struct Totals {
  int64_t out_of_bounds = 0;
  double busbw_sum = 0;
  int busbw_lines = 0;
};

/// One op's sweep over sizes and placements: its table, records and #wrong checks. `via` runs the
/// op instead of the world (the hierarchical all_reduce, named `op_name`).
void sweep(SuiteContext& ctx, const Params& o, CollectiveOp op, const std::string& op_name, Communicator* via,
           const Nodes& nodes, SuiteResult& result, Totals& t) {
  const int n = ctx.world.size();
  const size_t ts = dtype_size(o.dtype);
  const bool hier = via != nullptr;
  result.data["size_definitions"][op_name] = std::string(size_definition(op));
  print_header(ctx, op, op_name, n, nodes);
  const std::vector<int> node_of = consecutive_nodes(n, nodes.per_node);
  int64_t wrong_per_placement[2] = {0, 0};
  size_t last_bytes = 0;
  for (size_t nominal = o.min_bytes; nominal <= o.max_bytes;) {
    const size_t count = per_rank_count(op, nominal, ts, n);
    const size_t bytes = bandwidth_bytes(op, count, ts, n);
    // Small sizes that round to the same message (count clamped to 1) are measured once.
    if (bytes != last_bytes) {
      last_bytes = bytes;
      const int iterations = iterations_for_size(o.iters, bytes, o.max_bytes_per_batch);
      Measurement m[2];
      for (int k = 0; k < 2; ++k) {
        const Placement p = kPlacements[k];
        if (!o.enabled(p) || !supported(op, p)) continue;
        m[k] = o.dtype == DType::f32 ? measure<float>(ctx, o, op, count, p, iterations, k == 0, via)
                                     : measure<double>(ctx, o, op, count, p, iterations, k == 0, via);
        const Summary& s = m[k].timed.summary;
        m[k].algbw = algbw_GBps(bytes, s.median);
        m[k].busbw = m[k].algbw * bus_factor(op, n);
        wrong_per_placement[k] += m[k].n_wrong;
        t.out_of_bounds += m[k].n_wrong;
        t.busbw_sum += m[k].busbw;
        ++t.busbw_lines;
        const std::string pname(to_string(p));
        json rec = benchmark_record("collectives/" + op_name + "/bytes:" + std::to_string(bytes) + "/placement:" + pname,
                                    iterations, o.repetitions, s.median, s.median, "us");
        rec["op"] = op_name;
        rec["bytes"] = bytes;
        rec["count"] = count;
        rec["dtype"] = std::string(to_string(o.dtype));
        rec["placement"] = pname;
        rec["world_size"] = n;
        rec["time_us"] = to_json(s, 1e6);
        rec["algbw_GBps"] = m[k].algbw;
        rec["busbw_GBps"] = m[k].busbw;
        rec["bus_factor"] = bus_factor(op, n);
        rec["size_definition"] = std::string(size_definition(op));
        rec["n_wrong"] = m[k].n_wrong;
        if (op == CollectiveOp::all_reduce) {  // the nodes and the bytes that leave the busiest one
          rec["nodes"] = nodes.count;
          rec["ranks_per_node"] = nodes.per_node;
          rec["nodes_emulated"] = nodes.emulated;
          rec["cross_node_bytes"] = hier ? cross_node_bytes_hierarchical(node_of, count, ts)
                                         : cross_node_bytes_flat(node_of, count, ts);
        }
        // The calibration: the bare MPI loop measured with the out-of-place row serves both.
        const Summary& bare = m[0].bare;
        if (bare.n > 0 && bare.median > 0) {
          rec["calibration"] = "bare_mpi";
          rec["bare_mpi_time_us"] = bare.median * 1e6;
          rec["real_time_cal"] = s.median / bare.median;
        } else {
          rec["calibration"] = "none";
        }
        result.benchmarks.push_back(std::move(rec));
      }
      ctx.print(format_row(bytes, count, o.dtype, op, m));
    }
    if (nominal > o.max_bytes / o.step_factor) break;  // the next step would pass max_bytes
    nominal *= o.step_factor;
  }
  for (int k = 0; k < 2; ++k) {
    const Placement p = kPlacements[k];
    if (!o.enabled(p) || !supported(op, p)) continue;
    result.checks.push_back(make_check(
        "collectives/" + op_name + "/" + std::string(to_string(p)) + "/n_wrong", double(wrong_per_placement[k]), 0,
        "result elements differing from the expected value, summed over ranks and sizes; "
        "inputs are small integers, so the exact result holds in any reduction order "
        "(as nccl-tests' #wrong), hence tolerance 0"));
  }
}

SuiteResult CollectivesSuite::run(SuiteContext& ctx) {
  const Params o = Params::parse(ctx.section, ctx.config, ctx.world_info());
  const int n = ctx.world.size();
  const Nodes nodes = nodes_of(ctx);
  SuiteResult result;
  result.data = {{"size_definitions", json::object()}, {"world_size", n}, {"nodes", nodes.count},
                 {"ranks_per_node", nodes.per_node}, {"nodes_emulated", nodes.emulated}};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "# collectives: %d ranks (%s), %s, warmup %d, iters %d (fewer when "
                "iters*S > %zu B), %d repetitions; time = median over repetitions of the "
                "slowest rank's time per iteration, %s",
                n, (ctx.device_world ? ctx.device_world : &ctx.world)->backend().c_str(),
                std::string(to_string(o.dtype)).c_str(), o.warmup, o.iters,
                o.max_bytes_per_batch, o.repetitions,
                device_timed(ctx) ? "iters launched back to back, one completion at the end"
                                  : "iters blocking calls");
  ctx.print(buf);
  Totals t;
  for (CollectiveOp op : o.ops) {
    sweep(ctx, o, op, std::string(to_string(op)), nullptr, nodes, result, t);
    if (op != CollectiveOp::all_reduce || !nodes.hierarchical(n)) continue;
    // Beside the flat rows: the two-level all-reduce over the same group, nodes of consecutive ranks.
    Communicator& c = ctx.device_world ? *ctx.device_world : ctx.world;
    HierarchicalCommunicator hier(c, c.rank() / nodes.per_node);
    sweep(ctx, o, op, kHierarchicalName, &hier, nodes, result, t);
  }
  std::snprintf(buf, sizeof buf, "# Out of bounds values : %lld %s",
                static_cast<long long>(t.out_of_bounds), t.out_of_bounds == 0 ? "OK" : "FAILED");
  ctx.print(buf);
  std::snprintf(buf, sizeof buf, "# Avg bus bandwidth    : %g GB/s (mean of every line's busbw)",
                t.busbw_lines ? t.busbw_sum / t.busbw_lines : 0.0);
  ctx.print(buf);
  return result;
}

}  // namespace

DTB_REGISTER_SUITE("collectives", CollectivesSuite);

}  // namespace dtb
