// Context parallelism's attention core (contract: context_parallel.h): the chunk split, the row
// moves between full and local layouts, and the p2p ring / all-gather forms of causal attention
// over the CP group, built on the block ops of Ops<T> (kernels/cpu/attention_block.cc).
#include "reference/parallel/context_parallel.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/error.h"
#include "kernels/tensor.h"

namespace dtb {

CpSplit make_cp_split(int cp, int rank, int Tn) {
  if (cp < 1) throw InputError("context parallel size must be >= 1, got " + std::to_string(cp));
  if (rank < 0 || rank >= cp)
    throw InputError("CP rank " + std::to_string(rank) + " outside [0, " + std::to_string(cp) + ")");
  if (Tn <= 0 || Tn % (2 * cp) != 0)
    throw InputError("sequence length " + std::to_string(Tn) + " is not divisible by 2 * context parallel size = " +
                     std::to_string(2 * cp) + " (each CP rank holds 2 of 2*cp equal chunks)");
  return CpSplit{cp, rank, Tn};
}

std::string to_string(CpCommType t) { return t == CpCommType::p2p ? "p2p" : "all_gather"; }

CpCommType parse_cp_comm_type(const std::string& text) {
  for (CpCommType t : {CpCommType::p2p, CpCommType::all_gather})
    if (text == to_string(t)) return t;
  throw InputError("CP communication type '" + printable(text, 40) + "' is not " + to_string(CpCommType::p2p) + " or " +
                   to_string(CpCommType::all_gather));
}

template <typename T>
void cp_scatter_rows(Ops<T>& ops, const CpSplit& split, T* local, const T* full, int B, int W) {
  const int Tc = split.chunk_len(), Tl = split.local_len();
  for (int b = 0; b < B; b++)
    for (int j = 0; j < 2; j++)
      copy_within(ops, local + (size_t(b) * Tl + size_t(j) * Tc) * W,
                  full + (size_t(b) * split.Tn + size_t(split.chunk(j)) * Tc) * W, size_t(Tc) * W);
}

template <typename T>
void cp_place_rows(Ops<T>& ops, const CpSplit& split, T* full, const T* local, int B, int W) {
  const int Tc = split.chunk_len(), Tl = split.local_len();
  for (int b = 0; b < B; b++)
    for (int j = 0; j < 2; j++)
      copy_within(ops, full + (size_t(b) * split.Tn + size_t(split.chunk(j)) * Tc) * W,
                  local + (size_t(b) * Tl + size_t(j) * Tc) * W, size_t(Tc) * W);
}

template <typename T>
void cp_gather_rows(Ops<T>& ops, Device& dev, Communicator& cp, const CpSplit& split, T* full, const T* local, int B,
                    int W) {
  DTB_CHECK(cp.size() == split.cp && cp.rank() == split.rank, "cp_gather_rows: the communicator is not the split's");
  const size_t n = size_t(B) * split.local_len() * W;
  Tensor all = Tensor::empty(dev, {int64_t(n * split.cp)}, dtype_of<T>(), MemCategory::comm_buffer);
  ops.synchronize();
  cp.all_gather(local, all.data<T>(), n, dtype_of<T>());
  for (int o = 0; o < split.cp; o++)
    cp_place_rows(ops, CpSplit{split.cp, o, split.Tn}, full, all.data<T>() + o * n, B, W);
}

namespace {

// The buffers and shape of one CP attention pass.
template <typename T>
struct CpPass {
  using A = acc_t<T>;
  const CpAttention<T>& cpa;
  int B, C, NH, KV, Tc, Tl;
  int hs, g;                            // head size; query heads per KV head (grouped-query attention)
  size_t W, KVW;                        // qkv's row width (NH + 2 KV) hs; packed K/V's 2 KV hs
  size_t kv_count;                      // B Tl KVW: one rank's packed K/V (or dK/dV)
  Tensor bout, blse, scratch, merge_tmp;  // a block's result (1, Tc, C) and (1, Tc, NH); op scratch
  Tensor rep, drep;  // g > 1: a block's K/V, and its dK/dV, repeated to NH heads (Tc, 2C)

  CpPass(const CpAttention<T>& a, int B_, int C_, int NH_, int KV_)
      : cpa(a), B(B_), C(C_), NH(NH_), KV(KV_ > 0 ? KV_ : NH_), Tc(a.split.chunk_len()), Tl(a.split.local_len()),
        hs(C_ / NH_), g(NH_ / (KV_ > 0 ? KV_ : NH_)), W(size_t(NH_ + 2 * KV) * size_t(C_ / NH_)),
        KVW(2 * size_t(KV) * size_t(C_ / NH_)), kv_count(size_t(B_) * a.split.local_len() * KVW) {
    DTB_CHECK(C % NH == 0, "context parallel attention: C % NH != 0");
    DTB_CHECK(NH % KV == 0, "context parallel attention: NH % KV != 0");
    if (g > 1) {
      rep = Tensor::empty(a.dev, {Tc, 2 * int64_t(C)}, dtype_of<T>(), MemCategory::workspace);
      drep = Tensor::empty(a.dev, {Tc, 2 * int64_t(C)}, dtype_of<T>(), MemCategory::workspace);
    }
    DTB_CHECK(a.group.size() == a.split.cp && a.group.rank() == a.split.rank,
              "context parallel attention: the communicator is not the split's CP group");
    bout = Tensor::empty(a.dev, {Tc, C}, dtype_of<T>(), MemCategory::workspace);
    blse = Tensor::empty(a.dev, {Tc, NH}, dtype_of<A>(), MemCategory::workspace);
    scratch = Tensor::empty(a.dev, {2 * int64_t(Tc) * Tc + Tc}, dtype_of<T>(), MemCategory::workspace);
    if (a.fault == CpFault::merge_without_lse)
      merge_tmp = Tensor::empty(a.dev, {Tc, C}, dtype_of<T>(), MemCategory::workspace);
  }
  Tensor buffer(size_t n, MemCategory cat) const { return Tensor::empty(cpa.dev, {int64_t(n)}, dtype_of<T>(), cat); }

  // Global position of the first row of local chunk j of rank `of` (the fault: as if the two
  // chunks were rows 0..Tl-1 of a sequence of their own).
  int chunk_start(int of, int j) const {
    return cpa.fault == CpFault::no_chunk_offset ? j * Tc : cpa.split.global_position_of(of, j * Tc);
  }

  // kv (B, Tl, KVW) = the k and v parts of qkv (B, Tl, W): only the KV heads travel.
  void pack_kv(T* kv, const T* qkv) const {
    for (size_t row = 0; row < size_t(B) * Tl; row++) copy_within(cpa.ops, kv + row * KVW, qkv + row * W + C, KVW);
  }
  // The k and v parts of dqkv (B, Tl, W) += dkv (B, Tl, KVW).
  void add_dkv(T* dqkv, const T* dkv) const {
    for (size_t row = 0; row < size_t(B) * Tl; row++)
      cpa.ops.residual_forward(dqkv + row * W + C, dqkv + row * W + C, dkv + row * KVW, KVW);
  }
  // The block of Tc packed K/V rows at kv as the block ops read it: itself (g = 1), or repeated
  // to NH heads in `rep` (query head h reads KV head h / g, as gqa_attention_forward).
  const T* block_kv(const T* kv) const {
    if (g == 1) return kv;
    T* r = rep.template data<T>();
    const size_t n = size_t(hs), kvhs = size_t(KV) * n;
    for (size_t t = 0; t < size_t(Tc); t++)
      for (size_t h = 0; h < size_t(NH); h++) {
        copy_within(cpa.ops, r + t * 2 * C + h * n, kv + t * KVW + (h / g) * n, n);
        copy_within(cpa.ops, r + t * 2 * C + C + h * n, kv + t * KVW + kvhs + (h / g) * n, n);
      }
    return r;
  }
  // Where the block ops write a block's dK/dV: dkv itself (g = 1), or `drep` zeroed, which
  // fold_dkv then sums into dkv's KV heads.
  T* block_dkv(T* dkv) const {
    if (g == 1) return dkv;
    cpa.ops.zero(drep.template data<T>(), size_t(Tc) * 2 * C);
    return drep.template data<T>();
  }
  void fold_dkv(T* dkv) const {
    if (g == 1) return;
    const T* d = drep.template data<T>();
    const size_t n = size_t(hs), kvhs = size_t(KV) * n;
    for (size_t t = 0; t < size_t(Tc); t++)
      for (size_t h = 0; h < size_t(NH); h++) {
        T* k = dkv + t * KVW + (h / g) * n;
        T* v = dkv + t * KVW + kvhs + (h / g) * n;
        cpa.ops.residual_forward(k, k, d + t * 2 * C + h * n, n);
        cpa.ops.residual_forward(v, v, d + t * 2 * C + C + h * n, n);
      }
  }

  // Calls fn(j, jj, qpos0, kpos0) for every pair of a local query chunk j and a key chunk jj of
  // rank `src` that has an unmasked score, in the order (j, jj) = (0,0) (0,1) (1,0) (1,1);
  // counts the pairs and their unmasked scores.
  template <typename F>
  void for_each_pair(int src, F fn) const {
    for (int j = 0; j < 2; j++) {
      for (int jj = 0; jj < 2; jj++) {
        const int qpos0 = chunk_start(cpa.split.rank, j), kpos0 = chunk_start(src, jj);
        if (kpos0 > qpos0 + Tc - 1) {  // every key after every query
          if (cpa.stats) cpa.stats->blocks_skipped++;
          continue;
        }
        if (cpa.stats) {
          cpa.stats->blocks_computed++;
          for (int t = 0; t < Tc; t++) cpa.stats->scores += std::clamp(qpos0 + t - kpos0 + 1, 0, Tc);
        }
        fn(j, jj, qpos0, kpos0);
      }
    }
  }

  // Local queries against rank src's packed K/V, merged into out (B, Tl, C), lse (B, Tl, NH).
  // `inflight`, the next block's transfer (or null), is polled after every block so that a
  // backend that progresses only inside its calls (MPI) moves it while this one is attended to.
  void forward_source(int src, const T* kv, T* out, A* lse, const T* qkv, CommHandle* inflight = nullptr) {
    T* bo = bout.data<T>();
    A* bl = blse.data<A>();
    for_each_pair(src, [&](int j, int jj, int qpos0, int kpos0) {
      for (int b = 0; b < B; b++) {
        const size_t qr = size_t(b) * Tl + size_t(j) * Tc, kr = size_t(b) * Tl + size_t(jj) * Tc;
        const T* k = block_kv(kv + kr * KVW);
        const int ks = g == 1 ? int(KVW) : 2 * C;
        cpa.ops.attention_block_forward(bo, bl, scratch.data<T>(), qkv + qr * W, int(W), k, k + C, ks, 1, Tc, Tc, C,
                                        NH, qpos0, kpos0);
        T* o = out + qr * C;
        A* l = lse + qr * NH;
        if (cpa.fault == CpFault::merge_without_lse) {  // lse merged right, out a plain sum
          copy_within(cpa.ops, merge_tmp.data<T>(), o, size_t(Tc) * C);
          cpa.ops.attention_merge(o, l, bo, bl, Tc, C, NH);
          cpa.ops.residual_forward(o, merge_tmp.data<T>(), bo, size_t(Tc) * C);
        } else {
          cpa.ops.attention_merge(o, l, bo, bl, Tc, C, NH);
        }
        if (inflight) inflight->test();
      }
    });
  }

  // The gradient through local queries x rank src's K/V: dq into dqkv, dk and dv into dkv (B, Tl, 2C).
  void backward_source(int src, const T* kv, T* dkv, T* dqkv, const T* dout, const T* qkv, const T* out,
                       const A* lse, CommHandle* inflight = nullptr) {
    for_each_pair(src, [&](int j, int jj, int qpos0, int kpos0) {
      for (int b = 0; b < B; b++) {
        const size_t qr = size_t(b) * Tl + size_t(j) * Tc, kr = size_t(b) * Tl + size_t(jj) * Tc;
        const T* k = block_kv(kv + kr * KVW);
        T* dk = block_dkv(dkv + kr * KVW);
        const int ks = g == 1 ? int(KVW) : 2 * C;
        cpa.ops.attention_block_backward(dqkv + qr * W, dk, dk + C, scratch.data<T>(), dout + qr * C, out + qr * C,
                                         lse + qr * NH, qkv + qr * W, int(W), k, k + C, ks, 1, Tc, Tc, C, NH, qpos0,
                                         kpos0);
        fold_dkv(dkv + kr * KVW);
        if (inflight) inflight->test();
      }
    });
  }

  // The source rank of the K/V held at ring step i: r, r-1, ..., r+1.
  int source(int i) const { return (cpa.split.rank - i + cpa.split.cp) % cpa.split.cp; }
  int next() const { return (cpa.split.rank + 1) % cpa.split.cp; }
  int prev() const { return (cpa.split.rank - 1 + cpa.split.cp) % cpa.split.cp; }
  void sent(size_t count) const {
    if (cpa.stats) cpa.stats->bytes_sent += count * sizeof(T);
  }
};

constexpr int kTagKv = 71, kTagDkv = 72;

}  // namespace

template <typename T>
void context_parallel_attention_forward(const CpAttention<T>& cpa, T* out, acc_t<T>* lse, const T* qkv, int B, int C,
                                        int NH, int KV) {
  using A = acc_t<T>;
  CpPass<T> p(cpa, B, C, NH, KV);
  const int cp = cpa.split.cp;
  cpa.ops.zero(out, size_t(B) * p.Tl * C);
  const std::vector<A> neg_inf(size_t(B) * p.Tl * NH, -std::numeric_limits<A>::infinity());
  cpa.ops.copy_from_host(lse, neg_inf.data(), neg_inf.size() * sizeof(A));
  Tensor kv = p.buffer(p.kv_count, MemCategory::comm_buffer);
  p.pack_kv(kv.data<T>(), qkv);
  cpa.ops.synchronize();
  if (cpa.comm_type == CpCommType::all_gather) {
    Tensor all = p.buffer(p.kv_count * cp, MemCategory::comm_buffer);
    cpa.group.all_gather(kv.data<T>(), all.data<T>(), p.kv_count, dtype_of<T>());
    p.sent(p.kv_count * (cp - 1));  // a ring all-gather's bytes per rank
    for (int i = 0; i < cp; i++) p.forward_source(p.source(i), all.data<T>() + p.source(i) * p.kv_count, out, lse, qkv);
    return;
  }
  Tensor kv_next = p.buffer(p.kv_count, MemCategory::comm_buffer);
  for (int i = 0; i < cp; i++) {
    std::unique_ptr<CommHandle> h;
    if (i + 1 < cp) {  // the next block travels while this one is attended to
      h = cpa.group.sendrecv_async(kv.data<T>(), kv_next.data<T>(), p.kv_count, dtype_of<T>(), p.next(), p.prev(),
                                   kTagKv);
      p.sent(p.kv_count);
    }
    p.forward_source(p.source(i), kv.data<T>(), out, lse, qkv, h.get());
    if (h) {
      h->wait();
      std::swap(kv, kv_next);
    }
  }
}

template <typename T>
void context_parallel_attention_backward(const CpAttention<T>& cpa, T* dqkv, const T* dout, const T* qkv,
                                         const T* out, const acc_t<T>* lse, int B, int C, int NH, int KV) {
  CpPass<T> p(cpa, B, C, NH, KV);
  const int cp = cpa.split.cp;
  Tensor kv = p.buffer(p.kv_count, MemCategory::comm_buffer);
  p.pack_kv(kv.data<T>(), qkv);
  Tensor dkv = p.buffer(p.kv_count, MemCategory::comm_buffer);
  cpa.ops.synchronize();
  if (cpa.comm_type == CpCommType::all_gather) {
    Tensor all = p.buffer(p.kv_count * cp, MemCategory::comm_buffer);
    Tensor dall = p.buffer(p.kv_count * cp, MemCategory::comm_buffer);
    cpa.group.all_gather(kv.data<T>(), all.data<T>(), p.kv_count, dtype_of<T>());
    cpa.ops.zero(dall.data<T>(), p.kv_count * cp);
    for (int i = 0; i < cp; i++) {
      const size_t o = p.source(i) * p.kv_count;
      p.backward_source(p.source(i), all.data<T>() + o, dall.data<T>() + o, dqkv, dout, qkv, out, lse);
    }
    cpa.ops.synchronize();
    cpa.group.reduce_scatter(dall.data<T>(), dkv.data<T>(), p.kv_count, dtype_of<T>(), ReduceOp::sum);
    p.sent(2 * p.kv_count * (cp - 1));  // ring all-gather + ring reduce-scatter, per rank
    p.add_dkv(dqkv, dkv.data<T>());
    return;
  }
  Tensor kv_next = p.buffer(p.kv_count, MemCategory::comm_buffer);
  Tensor dkv_next = p.buffer(p.kv_count, MemCategory::comm_buffer);
  cpa.ops.zero(dkv.data<T>(), p.kv_count);
  for (int i = 0; i < cp; i++) {
    std::unique_ptr<CommHandle> h;
    if (i + 1 < cp) {
      h = cpa.group.sendrecv_async(kv.data<T>(), kv_next.data<T>(), p.kv_count, dtype_of<T>(), p.next(), p.prev(),
                                   kTagKv);
      p.sent(p.kv_count);
    }
    p.backward_source(p.source(i), kv.data<T>(), dkv.data<T>(), dqkv, dout, qkv, out, lse, h.get());
    if (h) h->wait();
    // The dK/dV accumulator of the keys held goes to the next rank with them; after the last
    // step that rank is their owner (step cp - 1 holds rank r+1's keys).
    const bool last = i + 1 == cp;
    if (cp > 1 && !(last && cpa.fault == CpFault::dkv_not_returned)) {
      cpa.ops.synchronize();
      cpa.group.sendrecv(dkv.data<T>(), dkv_next.data<T>(), p.kv_count, dtype_of<T>(), p.next(), p.prev(), kTagDkv);
      p.sent(p.kv_count);
      std::swap(dkv, dkv_next);
    }
    if (h) std::swap(kv, kv_next);
  }
  p.add_dkv(dqkv, dkv.data<T>());
}

#define DTB_INSTANTIATE_CP(T)                                                                                    \
  template void cp_scatter_rows<T>(Ops<T>&, const CpSplit&, T*, const T*, int, int);                             \
  template void cp_place_rows<T>(Ops<T>&, const CpSplit&, T*, const T*, int, int);                               \
  template void cp_gather_rows<T>(Ops<T>&, Device&, Communicator&, const CpSplit&, T*, const T*, int, int);      \
  template void context_parallel_attention_forward<T>(const CpAttention<T>&, T*, acc_t<T>*, const T*, int, int,   \
                                                      int, int);                                                 \
  template void context_parallel_attention_backward<T>(const CpAttention<T>&, T*, const T*, const T*, const T*,  \
                                                       const acc_t<T>*, int, int, int, int);

DTB_INSTANTIATE_CP(float)
DTB_INSTANTIATE_CP(double)
DTB_INSTANTIATE_CP(bf16)
DTB_INSTANTIATE_CP(fp16)
#undef DTB_INSTANTIATE_CP

}  // namespace dtb
