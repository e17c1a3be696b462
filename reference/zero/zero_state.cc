// The persistent state of a ZeroEngine (reference/zero/zero.h): its shape, the host copy a
// checkpoint saves and restores, and where each of its elements sits in the full model (the
// index a layout-independent checkpoint stores beside it, reference/checkpoint/checkpoint.h). Not here:
// sharding, reductions and the optimizer step (zero.cc).
#include <cstring>
#include <limits>

#include "kernels/error.h"
#include "kernels/half.h"
#include "reference/zero/zero.h"

namespace dtb {

template <typename T>
ZeroStateShape ZeroEngine<T>::state_shape() const {
  ZeroStateShape sh;
  sh.params = cfg_.stage < 3 ? model_.num_params() : shard_total_;
  sh.moments = size_t(m_.numel());
  if (host_master_.defined()) sh.master = size_t(host_master_.numel());
  if (master_.defined()) sh.master = size_t(master_.numel());
  return sh;
}

namespace {
// Host <-> tensor bytes: a host-tier tensor directly, a device one through the ops.
template <typename T>
void tensor_to_host(Ops<T>& ops, void* dst, const Tensor& t) {
  if (t.tier() == Tier::host) {
    std::memcpy(dst, t.raw(), t.bytes());
  } else {
    ops.copy_to_host(dst, t.raw(), t.bytes());
  }
}
template <typename T>
void tensor_from_host(Ops<T>& ops, Tensor& t, const void* src) {
  if (t.tier() == Tier::host) {
    std::memcpy(t.raw(), src, t.bytes());
  } else {
    ops.copy_from_host(t.raw(), src, t.bytes());
  }
}
}  // namespace

template <typename T>
ZeroState<T> ZeroEngine<T>::export_state() {
  DTB_CHECK(pending_.empty() && bucket_.empty() && unit_grad_.empty() && gathered_.empty(),
            "ZeroEngine::export_state inside a step");
  const ZeroStateShape sh = state_shape();
  ZeroState<T> s;
  s.params.resize(sh.params);
  s.master.resize(sh.master);
  s.m.resize(sh.moments);
  s.v.resize(sh.moments);
  s.t = t_;
  ops_.synchronize();
  tensor_to_host(ops_, s.params.data(), cfg_.stage < 3 ? full_param_ : shard_param_);
  if (host_master_.defined()) tensor_to_host(ops_, s.master.data(), host_master_);
  if (master_.defined()) tensor_to_host(ops_, s.master.data(), master_);
  tensor_to_host(ops_, s.m.data(), m_);
  tensor_to_host(ops_, s.v.data(), v_);
  return s;
}

template <typename T>
void ZeroEngine<T>::import_state(const ZeroState<T>& s) {
  DTB_CHECK(pending_.empty() && bucket_.empty() && unit_grad_.empty() && gathered_.empty(),
            "ZeroEngine::import_state inside a step");
  const ZeroStateShape sh = state_shape();
  DTB_CHECK(s.params.size() == sh.params && s.master.size() == sh.master && s.m.size() == sh.moments &&
                s.v.size() == sh.moments && s.t >= 0 && s.t <= std::numeric_limits<int>::max(),
            "ZeroEngine::import_state: a state of another shape (validate against state_shape() first)");
  ops_.synchronize();
  tensor_from_host(ops_, cfg_.stage < 3 ? full_param_ : shard_param_, s.params.data());
  if (host_master_.defined()) tensor_from_host(ops_, host_master_, s.master.data());
  if (master_.defined()) tensor_from_host(ops_, master_, s.master.data());
  tensor_from_host(ops_, m_, s.m.data());
  tensor_from_host(ops_, v_, s.v.data());
  t_ = int(s.t);
  ops_.synchronize();
}

template <typename T>
ZeroStateIndex ZeroEngine<T>::state_index() const {
  // Local flat position -> full-model index, from the model's tensors (every local element
  // lies in one tensor run).
  const size_t N = model_.num_params();
  std::vector<int64_t> flat(N, -1);
  for (const LocalTensor& t : model_.tensors())
    for (const LocalTensor::Run& r : t.runs)
      for (size_t i = 0; i < r.n; ++i) flat[t.offset + r.local + i] = int64_t(r.global + i);
  for (size_t i = 0; i < N; ++i) DTB_CHECK(flat[i] >= 0, "ZeroEngine::state_index: a local element in no tensor");
  // The shard layout (stages 1-3): unit u's shard at shard_off_[u], covering the unit's
  // elements [grank s, grank s + s), the tail past n being padding.
  std::vector<int64_t> shard(shard_total_, -1);
  if (cfg_.stage >= 1) {
    const auto& units = model_.units();
    for (size_t u = 0; u < units.size(); ++u) {
      const size_t s = shard_[u], first = size_t(grank(u)) * s;
      for (size_t j = 0; j < s && first + j < units[u].n; ++j)
        shard[shard_off_[u] + j] = flat[units[u].begin + first + j];
    }
  }
  ZeroStateIndex ix;
  ix.params = cfg_.stage < 3 ? flat : shard;
  ix.moments = cfg_.stage < 1 ? flat : shard;
  DTB_CHECK(ix.params.size() == state_shape().params && ix.moments.size() == state_shape().moments,
            "ZeroEngine::state_index: the index does not match the state's shape");
  return ix;
}

#define DTB_ZERO_STATE(T)                                                 \
  template ZeroStateShape ZeroEngine<T>::state_shape() const;             \
  template ZeroState<T> ZeroEngine<T>::export_state();                    \
  template void ZeroEngine<T>::import_state(const ZeroState<T>&);         \
  template ZeroStateIndex ZeroEngine<T>::state_index() const;
DTB_ZERO_STATE(float)
DTB_ZERO_STATE(double)
DTB_ZERO_STATE(bf16)
DTB_ZERO_STATE(fp16)
#undef DTB_ZERO_STATE

}  // namespace dtb
