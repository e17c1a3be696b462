#include "reference/zero/zero.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/half_ops.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/timer.h"
#include "reference/zero/fp32_comm.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

// Out of line, so that the sum stays in a register: inlined into owned_grad_sq_norm it was kept
// on the stack (a store and a reload on every element's dependent add, about 2.5 ns an element).
template <typename T>
[[gnu::noinline]] double masked_sq_sum(const T* h, const char* mask, size_t n, float multiplier) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (mask && !mask[i]) continue;
    double g;
    if constexpr (is_half_v<T>) g = double(float(h[i]) * multiplier);
    else g = double(h[i]);
    sum += g * g;
  }
  return sum;
}
template double masked_sq_sum<float>(const float*, const char*, size_t, float);
template double masked_sq_sum<double>(const double*, const char*, size_t, float);
template double masked_sq_sum<bf16>(const bf16*, const char*, size_t, float);
template double masked_sq_sum<fp16>(const fp16*, const char*, size_t, float);

void validate_zero_stage(int stage, const std::string& key) {
  if (stage < 0 || stage > kMaxZeroStage)
    throw InputError(key + " must be 0-" + std::to_string(kMaxZeroStage) + ", got " + std::to_string(stage));
}

void validate_zero(const ZeroConfig& c) {
  validate_zero_stage(c.stage, spelling(LayoutKey::zero_stage).config_key);
  if (c.reduce_bucket_size < 1 || c.allgather_bucket_size < 1)
    throw InputError("reduce_bucket_size and allgather_bucket_size must be >= 1 element");
  if (c.offload_optimizer && c.stage < 1)
    throw InputError("offload_optimizer \"cpu\" needs zero_stage 1, 2 or 3 (as DeepSpeed), not 0");
}

// One reduce-scatter in flight: its units, their offsets in the bucket, the buffers.
template <typename T>
struct ZeroEngine<T>::Pending {
  std::vector<int> units;
  std::vector<size_t> offsets;  // of each unit's shard in the bucket (recv) layout
  size_t total = 0;             // elements per rank
  Tensor send, recv;
  std::vector<Tensor> unit_grads;  // kept alive until the reduce-scatter completes
  std::unique_ptr<CommHandle> handle;
};


template <typename T>
ZeroEngine<T>::ZeroEngine(ParallelGpt<T>& model, const ZeroConfig& cfg, Communicator& dp,
                          const AdamWParams& hp, Communicator* expert_dp)
    : model_(model), cfg_(cfg), dp_(dp), expert_dp_(expert_dp), hp_(hp), ops_(model.ops()), device_(model.device()) {
  validate_zero(cfg);
  const auto& units = model.units();
  for (size_t u = 0; u < units.size(); ++u) {
    shard_off_.push_back(shard_total_);
    shard_.push_back(cfg.stage >= 1 ? zero_shard_size(units[u].n, gsize(u)) : units[u].n);
    shard_total_ += shard_.back();
  }
  const int64_t N = int64_t(model.num_params()), S = int64_t(shard_total_);
  // Zero-filled: all-zero bytes are 0.0 in every float type.
  auto make_as = [&](DType dt, int64_t n, MemCategory c, Tier tier) {
    Tensor t = Tensor::empty(device_, {n}, dt, c, tier);
    if (tier == Tier::device && dt == dtype_of<T>()) {
      ops_.zero(t.data<T>(), size_t(n));
    } else if (tier == Tier::device) {
      const std::vector<char> zeros(t.bytes(), 0);
      ops_.copy_from_host(t.raw(), zeros.data(), zeros.size());
    } else {
      std::memset(t.raw(), 0, t.bytes());
    }
    return t;
  };
  auto make = [&](int64_t n, MemCategory c, Tier tier = Tier::device) { return make_as(dtype_of<T>(), n, c, tier); };
  auto make_a = [&](int64_t n, MemCategory c, Tier tier = Tier::device) { return make_as(dtype_of<A>(), n, c, tier); };
  if (cfg.stage < 3) full_param_ = make(N, MemCategory::param);
  if (cfg.stage < 2) full_grad_ = make(N, MemCategory::grad);
  if (cfg.stage == 3) shard_param_ = make(S, MemCategory::param);
  if (cfg.stage >= 2) shard_grad_ = make(S, MemCategory::grad);
  const int64_t moments = cfg.stage == 0 ? N : S;
  const Tier opt_tier = cfg.offload_optimizer ? Tier::host : Tier::device;
  m_ = make_a(moments, MemCategory::optimizer_state, opt_tier);
  v_ = make_a(moments, MemCategory::optimizer_state, opt_tier);
  if (cfg.offload_optimizer) {
    host_master_ = make_a(S, MemCategory::master_param, Tier::host);
    host_grad_ = make(S, MemCategory::grad, Tier::host);
    if constexpr (is_half_v<T>) {
      host_param_ = make(S, MemCategory::param, Tier::host);
      host_ops_ = std::make_unique<HalfCpuOps<T>>();
    }
  } else if (is_half_v<T>) {
    master_ = make_a(moments, MemCategory::master_param);
  }
  model.attach(this);
}

template <typename T>
ZeroEngine<T>::~ZeroEngine() {
  for (auto& p : pending_)
    if (p->handle) p->handle->wait();
  model_.attach(nullptr);
}

template <typename T>
size_t ZeroEngine<T>::own_count(int unit) const {
  const size_t n = model_.units()[unit].n, s = shard_[unit], first = size_t(grank(size_t(unit))) * s;
  if (cfg_.stage == 0) return n;
  return first >= n ? 0 : std::min(s, n - first);
}

template <typename T>
T* ZeroEngine<T>::full_param_ptr(int unit) {
  return full_param_.data<T>() + model_.units()[unit].begin;
}

template <typename T>
T* ZeroEngine<T>::param(int unit) {
  if (cfg_.stage < 3) return full_param_ptr(unit);
  auto it = gathered_.find(unit);
  if (it != gathered_.end()) {
    it->second.second++;
    return it->second.first.template data<T>();
  }
  const size_t s = shard_[unit], n_dp = size_t(gsize(size_t(unit)));
  Tensor full = Tensor::empty(device_, {int64_t(s * n_dp)}, dtype_of<T>(), MemCategory::comm_buffer);
  ops_.synchronize();
  Stopwatch sw;
  group(size_t(unit)).all_gather(shard_param_.data<T>() + shard_off_[unit], full.data<T>(), s, dtype_of<T>());
  stats_.seconds += sw.elapsed();
  stats_.calls++;
  stats_.bytes += s * n_dp * sizeof(T);
  T* p = full.data<T>();
  gathered_.emplace(unit, std::make_pair(std::move(full), 1));
  return p;
}

template <typename T>
void ZeroEngine<T>::release_param(int unit) {
  if (cfg_.stage < 3) return;
  auto it = gathered_.find(unit);
  DTB_CHECK(it != gathered_.end(), "ZeroEngine: release of a parameter unit not gathered");
  if (--it->second.second == 0) {
    ops_.synchronize();  // queued ops may still read it
    gathered_.erase(it);
  }
}

template <typename T>
T* ZeroEngine<T>::grad(int unit) {
  if (cfg_.stage < 2) return full_grad_.data<T>() + model_.units()[unit].begin;
  if (std::find(bucket_.begin(), bucket_.end(), unit) != bucket_.end()) reduce_bucket();  // reused: flush first
  auto it = unit_grad_.find(unit);
  if (it != unit_grad_.end()) return it->second.template data<T>();
  const size_t padded = shard_[unit] * size_t(gsize(size_t(unit)));
  Tensor g = Tensor::empty(device_, {int64_t(padded)}, dtype_of<T>(), MemCategory::comm_buffer);
  ops_.zero(g.data<T>(), padded);
  T* p = g.data<T>();
  unit_grad_.emplace(unit, std::move(g));
  return p;
}

template <typename T>
void ZeroEngine<T>::grad_done(int unit) {
  if (cfg_.stage < 2) return;
  if (std::find(bucket_.begin(), bucket_.end(), unit) != bucket_.end()) return;
  // A bucket reduces over one group: an expert unit after a dense one (or back) flushes it.
  if (!bucket_.empty() && &group(size_t(bucket_.front())) != &group(size_t(unit))) reduce_bucket();
  bucket_.push_back(unit);
  bucket_elems_ += shard_[unit] * size_t(gsize(size_t(unit)));
  if (bucket_elems_ >= cfg_.reduce_bucket_size) reduce_bucket();
}

template <typename T>
void ZeroEngine<T>::reduce_bucket() {
  if (bucket_.empty()) return;
  auto p = std::make_unique<Pending>();
  p->units = bucket_;
  Communicator& g = group(size_t(bucket_.front()));
  const int n_dp = g.size();
  for (int u : bucket_) {
    p->offsets.push_back(p->total);
    p->total += shard_[u];
  }
  for (int u : bucket_) {
    auto it = unit_grad_.find(u);
    DTB_CHECK(it != unit_grad_.end(), "ZeroEngine: a unit's gradient reduced twice");
    p->unit_grads.push_back(std::move(it->second));
    unit_grad_.erase(it);
  }
  // The wire type: T, or fp32 widened on the host (communication_data_type "fp32", widen_into).
  const DType ct = comm_wide() ? DType::f32 : dtype_of<T>();
  if (p->units.size() == 1 && !comm_wide()) {
    p->send = std::move(p->unit_grads[0]);  // one unit is rank-major already
  } else {                                  // rank r's block: each unit's r-th shard, in order
    p->send = Tensor::empty(device_, {int64_t(p->total) * n_dp}, ct, MemCategory::comm_buffer);
    for (int r = 0; r < n_dp; ++r)
      for (size_t i = 0; i < p->units.size(); ++i) {
        const size_t s = shard_[p->units[i]], at = size_t(r) * p->total + p->offsets[i];
        const T* src = p->unit_grads[i].template data<T>() + size_t(r) * s;
        if (comm_wide()) {
          widen_into(ops_, device_.is_cpu(), p->send.template data<float>() + at, src, s);
        } else {
          copy_within(ops_, p->send.template data<T>() + at, src, s);
        }
      }
    p->unit_grads.clear();
  }
  p->recv = Tensor::empty(device_, {int64_t(p->total)}, ct, MemCategory::comm_buffer);
  bucket_.clear();
  bucket_elems_ = 0;
  ops_.synchronize();
  Stopwatch sw;
  if (cfg_.overlap_comm) {
    p->handle = g.reduce_scatter_async(p->send.raw(), p->recv.raw(), p->total, ct, ReduceOp::sum);
  } else {
    g.reduce_scatter(p->send.raw(), p->recv.raw(), p->total, ct, ReduceOp::sum);
  }
  stats_.seconds += sw.elapsed();
  stats_.calls++;
  stats_.bytes += p->total * n_dp * dtype_size(ct);
  pending_.push_back(std::move(p));
  // Complete in order; with overlap_comm keep the newest in flight while the backward goes on.
  const size_t keep = cfg_.overlap_comm ? 1 : 0;
  while (pending_.size() > keep) {
    complete(*pending_.front());
    pending_.erase(pending_.begin());
  }
}

template <typename T>
void ZeroEngine<T>::complete(Pending& p) {
  if (p.handle) {
    Stopwatch sw;
    p.handle->wait();
    stats_.seconds += sw.elapsed();
    p.handle.reset();
  }
  for (size_t i = 0; i < p.units.size(); ++i) {
    T* acc = shard_grad_.data<T>() + shard_off_[p.units[i]];
    if (comm_wide()) {  // the fp32 sum added and rounded to T once
      add_wide_into(ops_, device_.is_cpu(), acc, p.recv.template data<float>() + p.offsets[i], shard_[p.units[i]]);
    } else {
      ops_.residual_forward(acc, acc, p.recv.template data<T>() + p.offsets[i], shard_[p.units[i]]);
    }
  }
  ops_.synchronize();
}

template <typename T>
void ZeroEngine<T>::load(const std::vector<T>& local) {
  DTB_CHECK(local.size() == model_.num_params(), "ZeroEngine::load: not this rank's parameter count");
  const auto& units = model_.units();
  std::vector<T> shard(shard_total_, T(0));
  if (cfg_.stage >= 1)
    for (size_t u = 0; u < units.size(); ++u) {
      const size_t k = own_count(int(u));
      std::copy_n(local.data() + units[u].begin + size_t(grank(u)) * shard_[u], k, shard.data() + shard_off_[u]);
    }
  if (cfg_.stage < 3) {
    ops_.copy_from_host(full_param_.data<T>(), local.data(), local.size() * sizeof(T));
  } else {
    ops_.copy_from_host(shard_param_.data<T>(), shard.data(), shard.size() * sizeof(T));
  }
  // The master copy: the loaded values widened (exact), as Megatron-LM makes its fp32 main
  // params from the model's half params.
  if (cfg_.offload_optimizer) convert(host_master_.data<A>(), shard.data(), shard.size());
  if (master_.defined()) {
    const std::vector<T>& src = cfg_.stage == 0 ? local : shard;
    std::vector<A> wide(src.size());
    convert(wide.data(), src.data(), src.size());
    ops_.copy_from_host(master_.raw(), wide.data(), wide.size() * sizeof(A));
  }
}

template <typename T>
void ZeroEngine<T>::zero_grad() {
  DTB_CHECK(pending_.empty() && bucket_.empty() && unit_grad_.empty(), "ZeroEngine: zero_grad inside a backward");
  grad_multiplier_ = A(1);
  if (cfg_.stage < 2) {
    ops_.zero(full_grad_.data<T>(), model_.num_params());
  } else {
    ops_.zero(shard_grad_.data<T>(), shard_total_);
  }
}

template <typename T>
void ZeroEngine<T>::finish_gradients() {
  if (cfg_.stage >= 2) {
    reduce_bucket();
    while (!pending_.empty()) {
      complete(*pending_.front());
      pending_.erase(pending_.begin());
    }
    DTB_CHECK(unit_grad_.empty(), "ZeroEngine: a unit's gradient was never reduced");
    return;
  }
  ops_.synchronize();
  if (!dp_reduction_) return;
  // All-reduce in buckets of reduce_bucket_size elements, over each run of consecutive units
  // that share a group (the whole buffer over DP for a dense model).
  T* g = full_grad_.data<T>();
  const auto& units = model_.units();
  for (size_t u0 = 0, u1 = 0; u0 < units.size(); u0 = u1) {
    Communicator& comm = group(u0);
    while (u1 < units.size() && &group(u1) == &comm) ++u1;
    if (comm.size() == 1) continue;
    const size_t begin = units[u0].begin, end = units[u1 - 1].begin + units[u1 - 1].n;
    for (size_t off = begin; off < end; off += cfg_.reduce_bucket_size)
      dp_all_reduce(comm, g + off, std::min(cfg_.reduce_bucket_size, end - off));
  }
}

template <typename T>
void ZeroEngine<T>::set_dp_reduction(bool on) {
  DTB_CHECK(cfg_.stage == 0, "ZeroEngine: DP reduction can be turned off at stage 0 only");
  dp_reduction_ = on;
}

template <typename T>
T* ZeroEngine<T>::full_grad_data() {
  DTB_CHECK(cfg_.stage < 2, "ZeroEngine: no full gradient at stages 2-3");
  return full_grad_.data<T>();
}

template <typename T>
void ZeroEngine<T>::dp_all_reduce(Communicator& comm, T* buf, size_t n) {
  Stopwatch sw;
  if (comm_wide()) {  // widened on the host, summed in fp32, rounded once
    Tensor wide = Tensor::empty(device_, {int64_t(n)}, DType::f32, MemCategory::comm_buffer);
    float* w = wide.data<float>();
    widen_into(ops_, device_.is_cpu(), w, buf, n);
    comm.all_reduce(w, w, n, DType::f32, ReduceOp::sum);
    narrow_into(ops_, device_.is_cpu(), buf, w, n);
    stats_.bytes += n * sizeof(float);
  } else {
    comm.all_reduce(buf, buf, n, dtype_of<T>(), ReduceOp::sum);
    stats_.bytes += n * sizeof(T);
  }
  stats_.calls++;
  stats_.seconds += sw.elapsed();
}

template <typename T>
void ZeroEngine<T>::add_tied_gradient(Communicator& pp, int peer) {
  const int u = model_.wte_unit();
  DTB_CHECK(u >= 0, "ZeroEngine: this rank holds no tied embedding");
  T* g = cfg_.stage < 2 ? full_grad_.data<T>() + model_.units()[u].begin : shard_grad_.data<T>() + shard_off_[u];
  const size_t n = cfg_.stage < 2 ? model_.units()[u].n : shard_[u];
  Tensor other = Tensor::empty(device_, {int64_t(n)}, dtype_of<T>(), MemCategory::comm_buffer);
  ops_.synchronize();
  pp.sendrecv(g, other.raw(), n, dtype_of<T>(), peer, peer);
  ops_.residual_forward(g, g, other.data<T>(), n);
}

template <typename T>
void ZeroEngine<T>::gather_params_into_full() {
  const auto& units = model_.units();
  size_t u0 = 0;
  while (u0 < units.size()) {  // buckets of whole units of one group, up to allgather_bucket_size elements
    Communicator& g = group(u0);
    const int n_dp = g.size(), d = g.rank();
    size_t u1 = u0, total = 0;
    while (u1 < units.size() && &group(u1) == &g &&
           (u1 == u0 || (total + shard_[u1]) * size_t(n_dp) <= cfg_.allgather_bucket_size))
      total += shard_[u1++];
    Tensor send = Tensor::empty(device_, {int64_t(total)}, dtype_of<T>(), MemCategory::comm_buffer);
    Tensor recv = Tensor::empty(device_, {int64_t(total) * n_dp}, dtype_of<T>(), MemCategory::comm_buffer);
    ops_.zero(send.data<T>(), total);
    size_t off = 0;
    for (size_t u = u0; u < u1; ++u) {
      copy_within(ops_, send.data<T>() + off, full_param_ptr(int(u)) + size_t(d) * shard_[u],
                  own_count(int(u)));
      off += shard_[u];
    }
    ops_.synchronize();
    Stopwatch sw;
    g.all_gather(send.raw(), recv.raw(), total, dtype_of<T>());
    stats_.seconds += sw.elapsed();
    stats_.calls++;
    stats_.bytes += total * n_dp * sizeof(T);
    for (int r = 0; r < n_dp; ++r) {
      off = 0;
      for (size_t u = u0; u < u1; ++u) {
        const size_t n = units[u].n, s = shard_[u], first = size_t(r) * s;
        const size_t k = first >= n ? 0 : std::min(s, n - first);
        if (r != d) copy_within(ops_, full_param_ptr(int(u)) + first, recv.data<T>() + size_t(r) * total + off, k);
        off += s;
      }
    }
    ops_.synchronize();
    u0 = u1;
  }
}

template <typename T>
void ZeroEngine<T>::step() {
  ++t_;
  const auto& units = model_.units();
  A* m = m_.data<A>();
  A* v = v_.data<A>();
  // AdamW on n elements of this rank's share at offset o of the optimizer arrays.
  auto adamw = [&](T* param, const T* grad, size_t o, size_t n) {
    if (master_.defined()) {
      ops_.adamw_update_master(param, master_.data<A>() + o, grad, m + o, v + o, n, hp_, t_, grad_multiplier_);
    } else {
      ops_.adamw_update(param, grad, m + o, v + o, n, hp_, t_);
    }
  };
  if (cfg_.stage == 0) {
    adamw(full_param_.data<T>(), full_grad_.data<T>(), 0, model_.num_params());
    ops_.synchronize();
    return;
  }
  // This rank's shard of unit u: its parameters and its reduced gradient, wherever they are.
  auto my_param = [&](size_t u) {
    return cfg_.stage == 3 ? shard_param_.data<T>() + shard_off_[u] : full_param_ptr(int(u)) + size_t(grank(u)) * shard_[u];
  };
  auto my_grad = [&](size_t u) {
    return cfg_.stage >= 2 ? shard_grad_.data<T>() + shard_off_[u]
                           : full_grad_.data<T>() + units[u].begin + size_t(grank(u)) * shard_[u];
  };
  if (cfg_.offload_optimizer) {
    // Every unit's gradient shard goes down on the copy stream; AdamW runs on the CPU for a
    // unit as soon as its gradient is there (over the padded shard: padding stays 0), and the
    // unit's updated parameters go up while the next unit's AdamW runs (ZeRO-Offload's
    // pipelined transfers). Elementwise, so the same values as one call over the shard.
    std::vector<int64_t> down(units.size());
    for (size_t u = 0; u < units.size(); ++u)
      down[u] = ops_.copy_to_host_async(host_grad_.data<T>() + shard_off_[u], my_grad(u), own_count(int(u)) * sizeof(T));
    for (size_t u = 0; u < units.size(); ++u) {
      ops_.wait_copy(down[u]);
      const size_t o = shard_off_[u], n = shard_[u];
      A* master = host_master_.data<A>() + o;
      if constexpr (is_half_v<T>) {  // widen the gradient, step the fp32 master, round the parameters
        host_ops_->adamw_update_master(host_param_.data<T>() + o, master, host_grad_.data<T>() + o, m + o, v + o, n,
                                       hp_, t_, grad_multiplier_);
        ops_.copy_from_host_async(my_param(u), host_param_.data<T>() + o, own_count(int(u)) * sizeof(T));
      } else {
        cpu::adamw_update(master, host_grad_.data<T>() + o, m + o, v + o, n, hp_, t_);
        ops_.copy_from_host_async(my_param(u), master, own_count(int(u)) * sizeof(T));
      }
    }
    ops_.wait_copies();
  } else {
    for (size_t u = 0; u < units.size(); ++u) adamw(my_param(u), my_grad(u), shard_off_[u], own_count(int(u)));
  }
  ops_.synchronize();
  if (cfg_.stage < 3) gather_params_into_full();
}

template <typename T>
std::vector<T> ZeroEngine<T>::full_params() {
  std::vector<T> out(model_.num_params());
  if (cfg_.stage < 3) {
    ops_.copy_to_host(out.data(), full_param_.data<T>(), out.size() * sizeof(T));
    return out;
  }
  const auto& units = model_.units();
  for (size_t u = 0; u < units.size(); ++u) {
    const T* p = param(int(u));
    ops_.copy_to_host(out.data() + units[u].begin, p, units[u].n * sizeof(T));
    release_param(int(u));
  }
  return out;
}

template <typename T>
std::vector<T> ZeroEngine<T>::full_grads() {
  std::vector<T> out(model_.num_params());
  if (cfg_.stage < 2) {
    ops_.copy_to_host(out.data(), full_grad_.data<T>(), out.size() * sizeof(T));
    return out;
  }
  const auto& units = model_.units();
  for (size_t u = 0; u < units.size(); ++u) {
    const size_t s = shard_[u];
    Tensor full = Tensor::empty(device_, {int64_t(s) * gsize(u)}, dtype_of<T>(), MemCategory::comm_buffer);
    ops_.synchronize();
    group(u).all_gather(shard_grad_.data<T>() + shard_off_[u], full.data<T>(), s, dtype_of<T>());
    ops_.copy_to_host(out.data() + units[u].begin, full.data<T>(), units[u].n * sizeof(T));
  }
  return out;
}

template <typename T>
const std::vector<T>& ZeroEngine<T>::held_grads() {
  const bool full = cfg_.stage < 2;
  std::vector<T>& h = held_host_;
  h.resize(full ? model_.num_params() : shard_total_);
  ops_.copy_to_host(h.data(), full ? full_grad_.data<T>() : shard_grad_.data<T>(), h.size() * sizeof(T));
  return h;
}

template <typename T>
bool ZeroEngine<T>::local_nonfinite() {
  for (T g : held_grads())
    if (!std::isfinite(g)) return true;
  return false;
}

template <typename T>
double ZeroEngine<T>::owned_grad_sq_norm() {
  const std::vector<T>& h = held_grads();
  const size_t N = model_.num_params();
  if (norm_mask_.empty()) {  // per local element: whether this rank counts it (built once)
    norm_mask_.assign(N, 0);
    for (const LocalTensor& t : model_.tensors())
      if (cfg_.stage < 2 ? t.owner : t.primary) std::fill_n(norm_mask_.begin() + long(t.offset), t.numel, char(1));
  }
  const std::vector<char>& counts = norm_mask_;
  // The gradient the optimizer will see: in a half type, widened and multiplied by the
  // pending factor in fp32 (as adamw_update_master does).
  auto g = [&](size_t i) {
    if constexpr (is_half_v<T>) return double(float(h[i]) * grad_multiplier_);
    return double(h[i]);
  };
  double sum = 0;
  if (cfg_.stage < 2) return masked_sq_sum(h.data(), counts.data(), N, float(grad_multiplier_));
  const auto& units = model_.units();
  for (size_t u = 0; u < units.size(); ++u) {
    const size_t first = units[u].begin + size_t(grank(u)) * shard_[u];
    for (size_t j = 0; j < own_count(int(u)); ++j)
      if (counts[first + j]) sum += g(shard_off_[u] + j) * g(shard_off_[u] + j);
  }
  return sum;
}

template <typename T>
void ZeroEngine<T>::scale_grads(A a) {
  if constexpr (is_half_v<T>) {
    grad_multiplier_ *= a;
    return;
  }
  if (cfg_.stage < 2) {
    ops_.scale(full_grad_.data<T>(), a, model_.num_params());
  } else {
    ops_.scale(shard_grad_.data<T>(), a, shard_total_);
  }
}

template <typename T>
void ZeroEngine<T>::set_held_grad(size_t index, T value) {
  T* g = cfg_.stage < 2 ? full_grad_.data<T>() : shard_grad_.data<T>();
  DTB_CHECK(index < (cfg_.stage < 2 ? model_.num_params() : shard_total_), "set_held_grad: index out of range");
  ops_.copy_from_host(g + index, &value, sizeof(T));
}

template class ZeroEngine<float>;
template class ZeroEngine<double>;
template class ZeroEngine<bf16>;
template class ZeroEngine<fp16>;

}  // namespace dtb
