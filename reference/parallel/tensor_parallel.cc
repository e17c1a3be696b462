// Megatron-LM's tensor-parallel mappings and linear layers; see tensor_parallel.h.
// Each layer is one matmul op on its shard plus, in exactly one direction, one all-reduce
// SUM over the TP group: ColumnParallelLinear in backward (dx), RowParallelLinear in
// forward (the output) — the f / g pair of Shoeybi et al. 2019, Fig. 3.
#include "reference/parallel/tensor_parallel.h"

#include <utility>
#include <vector>

#include "kernels/error.h"
#include "kernels/timer.h"
#include "reference/model/rng.h"

namespace dtb {
namespace {

/// All-reduce (SUM unless said) of buf (count) in place over tp, timed into `stats` (may be
/// null). The backend's queued compute is finished first, so the stopwatch sees only the
/// collective (including the wait for the slowest peer). A group of one is bypassed,
/// nothing called or counted (mappings.py: "Bypass the function if we are using only 1 GPU").
template <typename T, typename U>
void timed_all_reduce(Ops<T>& ops, Communicator& tp, U* buf, size_t count, CommStats* stats,
                      ReduceOp op = ReduceOp::sum) {
  if (tp.size() == 1) return;
  ops.synchronize();
  Stopwatch sw;
  tp.all_reduce(buf, buf, count, dtype_of<U>(), op);
  if (stats) {
    stats->seconds += sw.elapsed();
    stats->calls += 1;
    stats->bytes += count * sizeof(U);
  }
}

/// Runs `collective` (a TP collective moving `bytes` of the full buffer) after the backend's
/// queued compute, timed into `stats` (may be null).
template <typename T, typename F>
void timed(Ops<T>& ops, CommStats* stats, size_t bytes, const F& collective) {
  ops.synchronize();
  Stopwatch sw;
  collective();
  if (stats) {
    stats->seconds += sw.elapsed();
    stats->calls += 1;
    stats->bytes += bytes;
  }
}

std::string divisibility_message(const std::string& cls, const std::string& name, const char* what,
                                 int value, int tp) {
  return cls + " '" + name + "': " + what + " = " + std::to_string(value) +
         " is not divisible by the tensor-parallel size " + std::to_string(tp);
}

void check_sizes(const std::string& cls, const std::string& name, int C, int OC) {
  if (C < 1 || OC < 1)
    throw InputError(cls + " '" + name + "': needs C >= 1 and OC >= 1 (got C = " + std::to_string(C) +
                     ", OC = " + std::to_string(OC) + ")");
}

/// Allocates a shard's parameter (initialised on the host, then copied to the backend's
/// memory) and its zeroed gradient.
template <typename T>
std::pair<Tensor, Tensor> make_param(Ops<T>& ops, Device& device, const std::string& name, int64_t rows,
                                     int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                     double std, uint64_t seed, bool vector) {
  const int64_t lr = r1 - r0, lc = c1 - c0;
  std::vector<int64_t> shape = vector ? std::vector<int64_t>{lr * lc} : std::vector<int64_t>{lr, lc};
  Tensor p = Tensor::empty(device, shape, dtype_of<T>(), MemCategory::param);
  Tensor g = Tensor::empty(device, shape, dtype_of<T>(), MemCategory::grad);
  std::vector<T> host(size_t(lr * lc));
  init_parameter_slice(host.data(), name, rows, cols, r0, r1, c0, c1, std, seed);
  ops.copy_from_host(p.raw(), host.data(), host.size() * sizeof(T));
  ops.zero(g.data<T>(), size_t(g.numel()));
  return {p, g};
}

}  // namespace

template <typename T>
void copy_to_tensor_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* buf, size_t count,
                                    CommStats* stats) {
  if (pass == Pass::backward) timed_all_reduce(ops, tp, buf, count, stats);
}

template <typename T>
void reduce_from_tensor_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* buf, size_t count,
                                        CommStats* stats) {
  if (pass == Pass::forward) timed_all_reduce(ops, tp, buf, count, stats);
}

template <typename T>
void gather_from_sequence_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* full, T* local,
                                          size_t local_count, CommStats* stats) {
  if (tp.size() == 1) {
    if (pass == Pass::forward) copy_within(ops, full, static_cast<const T*>(local), local_count);
    else copy_within(ops, local, static_cast<const T*>(full), local_count);
    return;
  }
  const size_t bytes = local_count * size_t(tp.size()) * sizeof(T);
  if (pass == Pass::forward)
    timed(ops, stats, bytes, [&] { tp.all_gather(local, full, local_count, dtype_of<T>()); });
  else
    timed(ops, stats, bytes, [&] { tp.reduce_scatter(full, local, local_count, dtype_of<T>(), ReduceOp::sum); });
}

template <typename T>
void reduce_scatter_to_sequence_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* full, T* local,
                                                size_t local_count, CommStats* stats) {
  // The conjugate: g-bar's backward is this forward, and the other way round.
  gather_from_sequence_parallel_region(pass == Pass::forward ? Pass::backward : Pass::forward, ops, tp, full, local,
                                       local_count, stats);
}

template <typename T>
void sum_over_tensor_parallel(Ops<T>& ops, Communicator& tp, T* buf, size_t count, CommStats* stats) {
  timed_all_reduce(ops, tp, buf, count, stats);
}

template <typename T>
void init_parameter_slice(T* host, const std::string& name, int64_t rows, int64_t cols, int64_t r0,
                          int64_t r1, int64_t c0, int64_t c1, double std, uint64_t seed) {
  DTB_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows && 0 <= c0 && c0 <= c1 && c1 <= cols,
            "init_parameter_slice '" + name + "': slice [" + std::to_string(r0) + "," + std::to_string(r1) +
                ") x [" + std::to_string(c0) + "," + std::to_string(c1) + ") outside (" +
                std::to_string(rows) + ", " + std::to_string(cols) + ")");
  const uint64_t stream = stream_id(name);
  const int64_t lc = c1 - c0;
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = c0; j < c1; ++j) {
      const uint64_t global = uint64_t(i * cols + j);
      // Rounded through float, as gpt_init_params, so float and double shards agree.
      host[(i - r0) * lc + (j - c0)] = std == 0 ? T(0) : T(float(std * random_normal(seed, stream, global)));
    }
}

namespace {

// The GEMMs of a sharded linear: the plain ones, or with `f` set the FP8 ones, their amaxes
// reduced (max) over the TP group, charged to `stats`.
template <typename T>
void linear_fprop(Ops<T>& ops, Communicator& tp, CommStats* stats, const Fp8Slot& f, T* out, const T* inp,
                  const T* w, const T* b, int N, int C, int OC) {
  if (!f.settings) return ops.matmul_forward(out, inp, w, b, N, C, OC);
  DTB_CHECK(f.state != nullptr, "an FP8 linear without its scaling state");
  fp8_fprop(ops, *f.settings, *f.state, out, inp, w, b, N, C, OC,
            [&](float* a, size_t n) { timed_all_reduce(ops, tp, a, n, stats, ReduceOp::max); });
}
template <typename T>
void linear_bprop(Ops<T>& ops, Communicator& tp, CommStats* stats, const Fp8Slot& f, T* dinp, T* dw, T* db,
                  const T* dout, const T* inp, const T* w, int N, int C, int OC) {
  if (!f.settings) return ops.matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  DTB_CHECK(f.state != nullptr, "an FP8 linear without its scaling state");
  fp8_bprop(ops, *f.settings, *f.state, dinp, dw, db, dout, inp, w, N, C, OC,
            [&](float* a, size_t n) { timed_all_reduce(ops, tp, a, n, stats, ReduceOp::max); });
}

}  // namespace

// ---- ColumnParallelLinear ----

template <typename T>
ColumnParallelLinear<T>::ColumnParallelLinear(Ops<T>& ops, Communicator& tp, std::string name, int C, int OC,
                                              CommStats* stats, bool sequence_parallel)
    : ops_(ops), tp_(tp), name_(std::move(name)), C_(C), OC_(OC), sp_(sequence_parallel), stats_(stats) {
  DTB_CHECK(stats != nullptr, "ColumnParallelLinear '" + name_ + "': null CommStats");
  check_sizes("ColumnParallelLinear", name_, C, OC);
  if (OC % tp.size() != 0)
    throw InputError(divisibility_message("ColumnParallelLinear", name_, "output features OC", OC, tp.size()));
}

template <typename T>
ColumnParallelLinear<T>::ColumnParallelLinear(Ops<T>& ops, Device& device, Communicator& tp, std::string name,
                                              int C, int OC, const LinearInit& init)
    : ColumnParallelLinear(ops, tp, std::move(name), C, OC, &own_stats_) {
  const int r0 = out_offset(), r1 = r0 + local_out_features();
  std::tie(w_, dw_) = make_param(ops, device, name_ + ".weight", OC, C, r0, r1, 0, C, init.weight_std,
                                 init.seed, false);
  std::tie(b_, db_) = make_param(ops, device, name_ + ".bias", 1, OC, 0, 1, r0, r1, init.bias_std,
                                 init.seed, true);
}

namespace {
void check_sp_rows(const std::string& name, int N, int tp, const void* work) {
  DTB_CHECK(N % tp == 0, "'" + name + "': sequence parallel needs rows divisible by the TP size");
  DTB_CHECK(work != nullptr, "'" + name + "': sequence parallel needs a work buffer");
}
}  // namespace

template <typename T>
void ColumnParallelLinear<T>::forward(T* out, const T* inp, int N, const T* w, const T* b, T* work, Fp8Slot fp8) {
  if (sp_) {
    // g-bar forward: the sequence-sharded input is gathered whole.
    check_sp_rows(name_, N, tp_.size(), work);
    const size_t local = size_t(N / tp_.size()) * C_;
    gather_from_sequence_parallel_region<T>(Pass::forward, ops_, tp_, work, const_cast<T*>(inp), local, stats_);
    inp = work;
  }
  // f forward is the identity: the replicated input enters the region as is, uncommunicated.
  linear_fprop(ops_, tp_, stats_, fp8, out, inp, w, b, N, C_, local_out_features());
}

template <typename T>
void ColumnParallelLinear<T>::backward(T* dinp, const T* dout, const T* inp, int N, const T* w, T* dw, T* db,
                                       T* work, Fp8Slot fp8) {
  if (sp_) {
    // The input again, gathered (it was kept sharded); dx whole, then g-bar backward: each
    // rank keeps its block of the sum over TP.
    check_sp_rows(name_, N, tp_.size(), work);
    const size_t local = size_t(N / tp_.size()) * C_, whole = size_t(N) * C_;
    T* gathered = work;
    T* dfull = work + whole;
    gather_from_sequence_parallel_region<T>(Pass::forward, ops_, tp_, gathered, const_cast<T*>(inp), local, stats_);
    if (dinp) ops_.zero(dfull, whole);
    linear_bprop(ops_, tp_, stats_, fp8, dinp ? dfull : nullptr, dw, db, dout, gathered, w, N, C_,
                 local_out_features());
    if (dinp) gather_from_sequence_parallel_region<T>(Pass::backward, ops_, tp_, dfull, dinp, local, stats_);
    return;
  }
  if (dinp) ops_.zero(dinp, size_t(N) * C_);  // matmul_backward accumulates; this is a write
  linear_bprop(ops_, tp_, stats_, fp8, dinp, dw, db, dout, inp, w, N, C_, local_out_features());
  // f backward: each rank holds dout_r @ W_r, its share of dx; the sum over TP is dx.
  if (dinp) copy_to_tensor_parallel_region<T>(Pass::backward, ops_, tp_, dinp, size_t(N) * C_, stats_);
}

template <typename T>
void ColumnParallelLinear<T>::zero_grad() {
  ops_.zero(dw_.data<T>(), size_t(dw_.numel()));
  ops_.zero(db_.data<T>(), size_t(db_.numel()));
}

// ---- RowParallelLinear ----

template <typename T>
RowParallelLinear<T>::RowParallelLinear(Ops<T>& ops, Communicator& tp, std::string name, int C, int OC,
                                        CommStats* stats, BiasAtTp1 bias_at_tp1, bool sequence_parallel)
    : ops_(ops),
      tp_(tp),
      name_(std::move(name)),
      C_(C),
      OC_(OC),
      bias_at_tp1_(bias_at_tp1),
      sp_(sequence_parallel),
      stats_(stats) {
  DTB_CHECK(stats != nullptr, "RowParallelLinear '" + name_ + "': null CommStats");
  check_sizes("RowParallelLinear", name_, C, OC);
  if (C % tp.size() != 0)
    throw InputError(divisibility_message("RowParallelLinear", name_, "input features C", C, tp.size()));
}

template <typename T>
RowParallelLinear<T>::RowParallelLinear(Ops<T>& ops, Device& device, Communicator& tp, std::string name, int C,
                                        int OC, const LinearInit& init)
    : RowParallelLinear(ops, tp, std::move(name), C, OC, &own_stats_, BiasAtTp1::after_gemm) {
  const int c0 = in_offset(), c1 = c0 + local_in_features();
  std::tie(w_, dw_) = make_param(ops, device, name_ + ".weight", OC, C, 0, OC, c0, c1, init.weight_std,
                                 init.seed, false);
  std::tie(b_, db_) = make_param(ops, device, name_ + ".bias", 1, OC, 0, 1, 0, OC, init.bias_std, init.seed,
                                 true);
}

template <typename T>
void RowParallelLinear<T>::forward(T* out, const T* inp, int N, const T* w, const T* b, T* work, Fp8Slot fp8) {
  if (sp_) {
    // The partial products whole, then reduce-scattered: this rank's block of the sum, and
    // the bias on its rows.
    check_sp_rows(name_, N, tp_.size(), work);
    const int Nl = N / tp_.size();
    linear_fprop(ops_, tp_, stats_, fp8, work, inp, w, static_cast<const T*>(nullptr), N, local_in_features(), OC_);
    reduce_scatter_to_sequence_parallel_region<T>(Pass::forward, ops_, tp_, work, out, size_t(Nl) * OC_, stats_);
    if (b) ops_.add_bias(out, b, Nl, OC_);
    return;
  }
  // tp = 1 and BiasAtTp1::in_gemm: the unsharded linear of reference/model/gpt.cc, bias and all.
  const bool in_gemm = tp_.size() == 1 && bias_at_tp1_ == BiasAtTp1::in_gemm;
  linear_fprop(ops_, tp_, stats_, fp8, out, inp, w, in_gemm ? b : nullptr, N, local_in_features(), OC_);
  if (in_gemm) return;
  // g forward: the partial products over this rank's C/tp input features are summed.
  reduce_from_tensor_parallel_region<T>(Pass::forward, ops_, tp_, out, size_t(N) * OC_, stats_);
  // The replicated bias, added once after the reduction (layers.py: output = output_ + bias).
  if (b) ops_.add_bias(out, b, N, OC_);
}

template <typename T>
void RowParallelLinear<T>::backward(T* dinp, const T* dout, const T* inp, int N, const T* w, T* dw, T* db,
                                    T* work, Fp8Slot fp8) {
  if (sp_) {
    // The sharded output gradient gathered whole; the bias gradient from it is whole too.
    check_sp_rows(name_, N, tp_.size(), work);
    const size_t local = size_t(N / tp_.size()) * OC_;
    reduce_scatter_to_sequence_parallel_region<T>(Pass::backward, ops_, tp_, work, const_cast<T*>(dout), local,
                                                  stats_);
    dout = work;
  }
  // g backward is the identity: dout is replicated already, nothing is communicated.
  if (dinp) ops_.zero(dinp, size_t(N) * local_in_features());
  linear_bprop(ops_, tp_, stats_, fp8, dinp, dw, db, dout, inp, w, N, local_in_features(), OC_);
}

template <typename T>
void RowParallelLinear<T>::zero_grad() {
  ops_.zero(dw_.data<T>(), size_t(dw_.numel()));
  ops_.zero(db_.data<T>(), size_t(db_.numel()));
}

// ---- VocabParallelCrossEntropy ----

template <typename T>
VocabParallelCrossEntropy<T>::VocabParallelCrossEntropy(Ops<T>& ops, Communicator& tp, int V, CommStats* stats)
    : ops_(ops), tp_(tp), Vl_(V / tp.size()), stats_(stats) {
  DTB_CHECK(stats != nullptr, "VocabParallelCrossEntropy: null CommStats");
  if (V < 1) throw InputError("VocabParallelCrossEntropy: needs V >= 1 (got V = " + std::to_string(V) + ")");
  if (V % tp.size() != 0)
    throw InputError(divisibility_message("VocabParallelCrossEntropy", "head", "vocabulary V", V, tp.size()));
}

template <typename T>
void VocabParallelCrossEntropy<T>::forward(A* losses, T* probs, const T* logits, A* maxes, A* sums,
                                           const int32_t* targets, int N) {
  ops_.crossentropy_shard_max(maxes, logits, N, Vl_);
  timed_all_reduce(ops_, tp_, maxes, size_t(N), stats_, ReduceOp::max);
  ops_.crossentropy_shard_sums(sums, logits, maxes, targets, N, Vl_, vocab_offset());
  timed_all_reduce(ops_, tp_, sums, 2 * size_t(N), stats_, ReduceOp::sum);
  ops_.crossentropy_shard_forward(losses, probs, logits, maxes, sums, N, Vl_);
}

template <typename T>
void VocabParallelCrossEntropy<T>::backward(T* dlogits, const T* probs, const int32_t* targets, A dloss, int N) {
  ops_.crossentropy_shard_backward(dlogits, probs, targets, dloss, N, Vl_, vocab_offset());
}

#define DTB_INSTANTIATE_TP(T)                                                                              \
  template void copy_to_tensor_parallel_region<T>(Pass, Ops<T>&, Communicator&, T*, size_t, CommStats*);     \
  template void reduce_from_tensor_parallel_region<T>(Pass, Ops<T>&, Communicator&, T*, size_t, CommStats*); \
  template void gather_from_sequence_parallel_region<T>(Pass, Ops<T>&, Communicator&, T*, T*, size_t,         \
                                                        CommStats*);                                         \
  template void reduce_scatter_to_sequence_parallel_region<T>(Pass, Ops<T>&, Communicator&, T*, T*, size_t,   \
                                                              CommStats*);                                   \
  template void sum_over_tensor_parallel<T>(Ops<T>&, Communicator&, T*, size_t, CommStats*);                  \
  template void init_parameter_slice<T>(T*, const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                        int64_t, double, uint64_t);                                          \
  template class ColumnParallelLinear<T>;                                                                   \
  template class RowParallelLinear<T>;                                                                      \
  template class VocabParallelCrossEntropy<T>;

// float and double, and the half types of mixed precision (ParallelGpt<bf16>, <fp16>).
DTB_INSTANTIATE_TP(float)
DTB_INSTANTIATE_TP(double)
DTB_INSTANTIATE_TP(bf16)
DTB_INSTANTIATE_TP(fp16)
#undef DTB_INSTANTIATE_TP

}  // namespace dtb
