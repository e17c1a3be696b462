// The MoE FFN (moe.h). The router's logits, softmax, losses and their gradients are computed in
// double and rounded to T where they meet the model's tensors (the gates, the router's and the
// input's gradients); the experts run the model's own matmul and GELU (or SwiGLU) ops on
// gathered rows.
#include "reference/model/moe.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {

namespace {
// a += v rounded to T once; the half types add in float (acc_t), as their ops accumulate.
template <typename T> void add_to(T& a, acc_t<T> v) { a = T(acc_t<T>(a) + v); }
std::string num(double v) { return fmt::format("{}", v); }  // shortest round-trip form: 0, -1.5, 1e+300
}  // namespace

void validate_moe_config(const MoeConfig& c) {
  if (c.num_experts < 1)
    throw InputError("model.num_experts = " + std::to_string(c.num_experts) + ": at least 1 expert");
  if (c.topk < 1 || c.topk > c.num_experts)
    throw InputError("model.moe_router_topk = " + std::to_string(c.topk) + " is outside [1, num_experts = " +
                     std::to_string(c.num_experts) + "]");
  if (c.capacity_factor && !(std::isfinite(*c.capacity_factor) && *c.capacity_factor > 0))
    throw InputError("model.moe_expert_capacity_factor = " + num(*c.capacity_factor) +
                     ": must be > 0 (null or left out: no token is dropped)");
  if (!(std::isfinite(c.aux_loss_coeff) && c.aux_loss_coeff >= 0))
    throw InputError("model.moe_aux_loss_coeff = " + num(c.aux_loss_coeff) + ": must be >= 0");
  if (!(std::isfinite(c.z_loss_coeff) && c.z_loss_coeff >= 0))
    throw InputError("model.moe_z_loss_coeff = " + num(c.z_loss_coeff) + ": must be >= 0");
  if (c.ffn_hidden < 0)
    throw InputError("model.moe_ffn_hidden_size = " + std::to_string(c.ffn_hidden) + ": must be >= 0 (0: 4C)");
}

int moe_hidden(const MoeConfig& cfg, int C) { return cfg.ffn_hidden > 0 ? cfg.ffn_hidden : 4 * C; }

double MoeRouting::imbalance() const {
  if (E == 0 || N == 0) return 0;
  const int most = *std::max_element(tokens_per_expert.begin(), tokens_per_expert.end());
  return double(most) / (double(N) * topk / E);
}

namespace {

/// Router logits of token t in double: x_t . router_j for each expert j.
template <typename T> void router_logits(const T* x, const T* router, int t, int C, int E, std::vector<double>& l) {
  for (int j = 0; j < E; ++j) {
    double s = 0;
    for (int c = 0; c < C; ++c) s += double(x[size_t(t) * C + c]) * double(router[size_t(j) * C + c]);
    l[size_t(j)] = s;
  }
}

/// Softmax, top-k (ties: the lower index), counts, capacity and the losses into acts, group by
/// group of G tokens.
template <typename T>
void route(const MoeConfig& cfg, const T* x, const T* router, int N, int G, int C, MoeActivations<T>& a) {
  const int E = cfg.num_experts, k = cfg.topk, groups = G > 0 ? N / G : 0;
  MoeRouting& r = a.routing;
  r = MoeRouting{};
  r.N = N, r.E = E, r.topk = k, r.group = G;
  r.expert.assign(size_t(N) * k, -1);
  r.slot.assign(size_t(N) * k, -1);
  r.tokens_per_expert.assign(size_t(E), 0);
  r.group_tokens.assign(size_t(groups) * E, 0);
  r.kept_per_expert.assign(size_t(E), 0);
  a.probs.assign(size_t(N) * E, T(0));
  a.lse.assign(size_t(N), 0.0);
  a.token.assign(size_t(E), {});
  // At most G k (no expert can get more), computed in double so that a huge factor cannot overflow.
  r.capacity = cfg.capacity_factor ? int(std::min(double(G) * k, std::ceil(*cfg.capacity_factor * G * k / E))) : G * k;
  std::vector<double> l(static_cast<size_t>(E)), p(static_cast<size_t>(E)), mean_p(static_cast<size_t>(E));
  std::vector<int> order(static_cast<size_t>(E)), kept(static_cast<size_t>(E));
  double z = 0, aux = 0;
  for (int g = 0; g < groups; ++g) {
    int* counts = r.group_tokens.data() + size_t(g) * E;
    std::fill(mean_p.begin(), mean_p.end(), 0.0);
    for (int t = g * G; t < (g + 1) * G; ++t) {
      router_logits(x, router, t, C, E, l);
      const double m = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (int j = 0; j < E; ++j) sum += p[size_t(j)] = std::exp(l[size_t(j)] - m);
      a.lse[size_t(t)] = m + std::log(sum);
      z += a.lse[size_t(t)] * a.lse[size_t(t)];
      for (int j = 0; j < E; ++j) {
        p[size_t(j)] /= sum;
        a.probs[size_t(t) * E + j] = T(p[size_t(j)]);
        mean_p[size_t(j)] += p[size_t(j)] / G;
      }
      for (int j = 0; j < E; ++j) order[size_t(j)] = j;
      std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return p[size_t(i)] > p[size_t(j)]; });
      for (int i = 0; i < k; ++i) {
        r.expert[size_t(t) * k + i] = order[size_t(i)];
        ++counts[order[size_t(i)]];
        ++r.tokens_per_expert[size_t(order[size_t(i)])];
      }
    }
    std::fill(kept.begin(), kept.end(), 0);
    for (int i = 0; i < k; ++i)  // every first choice before any second choice (GShard)
      for (int t = g * G; t < (g + 1) * G; ++t) {
        const int e = r.expert[size_t(t) * k + i];
        if (kept[size_t(e)] < r.capacity) {
          ++kept[size_t(e)];
          r.slot[size_t(t) * k + i] = r.kept_per_expert[size_t(e)]++;
          a.token[size_t(e)].push_back(t);
        } else {
          ++r.dropped;
        }
      }
    double balance = 0;
    for (int j = 0; j < E; ++j) balance += double(counts[j]) / (double(G) * k) * mean_p[size_t(j)];
    aux += cfg.aux_loss_coeff * E * balance;
  }
  if (N == 0) return;  // no token: both losses 0
  r.aux_loss = aux / groups;
  r.z_loss = cfg.z_loss_coeff * z / N;
}

}  // namespace

namespace {

// An expert's FFN form (MoeExpert): glu for SwiGLU, whose fc has F1 = 2F rows (gate | up) and
// no biases; the GPT's GELU FFN has F1 = F rows and biases.
struct ExpertShape {
  bool glu = false;
  size_t F1 = 0;
};
ExpertShape expert_shape(const MoeConfig& cfg, int F) {
  const bool glu = cfg.expert == MoeExpert::swiglu;
  return {glu, size_t(glu ? 2 * F : F)};
}

// The expert-parallel group at one call: P ranks, this one r, El = E / P experts held.
struct EpShape {
  int P = 1, r = 0, El = 0;
};

EpShape ep_shape(const MoeConfig& cfg, Communicator* ep) {
  EpShape s;
  s.P = ep ? ep->size() : 1;
  s.r = ep ? ep->rank() : 0;
  if (cfg.num_experts % s.P != 0)
    throw InputError("expert_parallel = " + std::to_string(s.P) + " does not divide model.num_experts = " +
                     std::to_string(cfg.num_experts));
  s.El = cfg.num_experts / s.P;
  return s;
}

// Rows travel grouped by expert in index order: experts [q El, (q+1) El) are rank q's, so "own"
// rows in expert order are already grouped by destination. rows[e] counts expert e's own rows.
// Sends them and returns what arrives, source rank by source rank, each source's rows by held
// expert; held_rows (P, El) says how many. One rank: the rows themselves (moved, not copied). Adds the seconds to
// *seconds and the bytes sent to other ranks to *bytes (when not null).
template <typename T>
std::vector<T> dispatch(Communicator* ep, const EpShape& sh, std::vector<T> own, const std::vector<int>& rows,
                        const std::vector<int>& held_rows, size_t width, double* seconds = nullptr,
                        size_t* bytes = nullptr) {
  if (sh.P == 1) return own;
  Stopwatch sw;
  std::vector<size_t> sc(size_t(sh.P)), sd(size_t(sh.P)), rc(size_t(sh.P)), rd(size_t(sh.P));
  size_t so = 0, ro = 0;
  for (int q = 0; q < sh.P; ++q) {
    size_t s = 0, r = 0;
    for (int j = 0; j < sh.El; ++j) s += size_t(rows[size_t(q * sh.El + j)]), r += size_t(held_rows[size_t(q * sh.El + j)]);
    sc[size_t(q)] = s * width, sd[size_t(q)] = so, rc[size_t(q)] = r * width, rd[size_t(q)] = ro;
    so += s * width, ro += r * width;
  }
  std::vector<T> held(ro);
  ep->all_to_allv(own.data(), sc, sd, held.data(), rc, rd, dtype_of<T>());
  if (seconds) *seconds += sw.elapsed();
  if (bytes) *bytes += (so - sc[size_t(sh.r)]) * sizeof(T);
  return held;
}

// The inverse of dispatch: held rows (source-major) go back to their sources, which receive their
// own rows in expert order.
template <typename T>
std::vector<T> combine_rows(Communicator* ep, const EpShape& sh, std::vector<T> held,
                            const std::vector<int>& rows, const std::vector<int>& held_rows, size_t width,
                            MoeCommStats* stats) {
  return dispatch(ep, sh, std::move(held), held_rows, rows, width, stats ? &stats->combine_s : nullptr,
                  stats ? &stats->combine_bytes : nullptr);
}

// Source-major held rows -> one buffer per held expert (its rows from source 0, 1, ...), and back.
template <typename T>
std::vector<std::vector<T>> by_expert(const std::vector<T>& held, const EpShape& sh, const std::vector<int>& held_rows,
                                      size_t width) {
  std::vector<std::vector<T>> per(static_cast<size_t>(sh.El));
  size_t at = 0;
  for (int s = 0; s < sh.P; ++s)
    for (int j = 0; j < sh.El; ++j) {
      const size_t n = size_t(held_rows[size_t(s * sh.El + j)]) * width;
      per[size_t(j)].insert(per[size_t(j)].end(), held.begin() + at, held.begin() + at + n);
      at += n;
    }
  return per;
}

template <typename T>
std::vector<T> by_source(const std::vector<std::vector<T>>& per, const EpShape& sh, const std::vector<int>& held_rows,
                         size_t width) {
  std::vector<T> held;
  std::vector<size_t> at(static_cast<size_t>(sh.El), 0);
  for (int s = 0; s < sh.P; ++s)
    for (int j = 0; j < sh.El; ++j) {
      const size_t n = size_t(held_rows[size_t(s * sh.El + j)]) * width;
      held.insert(held.end(), per[size_t(j)].begin() + at[size_t(j)], per[size_t(j)].begin() + at[size_t(j)] + n);
      at[size_t(j)] += n;
    }
  return held;
}

// The own rows' counts per expert (E), and the held ones (P, El) from every source.
std::vector<int> held_counts(Communicator* ep, const EpShape& sh, const std::vector<int>& rows, MoeCommStats* stats) {
  if (sh.P == 1) return rows;
  Stopwatch sw;
  std::vector<int> held(rows.size());
  ep->all_to_all(rows.data(), held.data(), size_t(sh.El), DType::i32);
  if (stats) stats->dispatch_s += sw.elapsed(), stats->dispatch_bytes += size_t(sh.P - 1) * sh.El * sizeof(int);
  return held;
}

}  // namespace

template <typename T>
void moe_forward(Ops<T>& ops, const MoeConfig& cfg, const MoeWeights<T>& w, const T* x, T* out, int N, int C,
                 MoeActivations<T>& a, int group, Communicator* ep, MoeCommStats* stats) {
  validate_moe_config(cfg);
  const EpShape sh = ep_shape(cfg, ep);
  const int E = cfg.num_experts, k = cfg.topk, F = moe_hidden(cfg, C);
  if (group == 0) group = N;
  if (group < 0 || (N > 0 && N % group != 0))
    throw InputError("moe_forward: a routing group of " + std::to_string(group) + " tokens does not divide the call's " +
                     std::to_string(N));
  route(cfg, x, w.router, N, group, C, a);
  // The own rows, expert by expert, to the experts' ranks.
  std::vector<int> rows(static_cast<size_t>(E));
  std::vector<T> own;
  for (int e = 0; e < E; ++e) {
    rows[size_t(e)] = int(a.token[size_t(e)].size());
    for (int t : a.token[size_t(e)]) own.insert(own.end(), x + size_t(t) * C, x + size_t(t + 1) * C);
  }
  a.held_rows = held_counts(ep, sh, rows, stats);
  a.in = by_expert(dispatch(ep, sh, std::move(own), rows, a.held_rows, size_t(C), stats ? &stats->dispatch_s : nullptr,
                            stats ? &stats->dispatch_bytes : nullptr),
                   sh, a.held_rows, size_t(C));
  a.pre.assign(size_t(sh.El), {}), a.act.assign(size_t(sh.El), {});
  std::vector<std::vector<T>> y(static_cast<size_t>(sh.El));
  const ExpertShape x_ = expert_shape(cfg, F);
  for (int j = 0; j < sh.El; ++j) {
    const int n = int(a.in[size_t(j)].size() / size_t(C));
    if (n == 0) continue;
    a.pre[size_t(j)].resize(size_t(n) * x_.F1), a.act[size_t(j)].resize(size_t(n) * F), y[size_t(j)].resize(size_t(n) * C);
    ops.matmul_forward(a.pre[size_t(j)].data(), a.in[size_t(j)].data(), w.fc + size_t(j) * x_.F1 * C,
                       x_.glu ? nullptr : w.fc_bias + size_t(j) * F, n, C, x_.F1);
    if (x_.glu)
      ops.swiglu_forward(a.act[size_t(j)].data(), a.pre[size_t(j)].data(), n, F);
    else
      ops.gelu_forward(a.act[size_t(j)].data(), a.pre[size_t(j)].data(), size_t(n) * F);
    ops.matmul_forward(y[size_t(j)].data(), a.act[size_t(j)].data(), w.proj + size_t(j) * C * F,
                       x_.glu ? nullptr : w.proj_bias + size_t(j) * C, n, F, C);
  }
  // The outputs back to their tokens' ranks, in expert order: expert e's own rows.
  const std::vector<T> back =
      combine_rows(ep, sh, by_source(y, sh, a.held_rows, size_t(C)), rows, a.held_rows, size_t(C), stats);
  a.out.assign(size_t(E), {});
  size_t at = 0;
  for (int e = 0; e < E; ++e) {
    const size_t n = size_t(rows[size_t(e)]) * C;
    a.out[size_t(e)].assign(back.begin() + at, back.begin() + at + n);
    at += n;
  }
  const MoeRouting& r = a.routing;
  std::fill(out, out + size_t(N) * C, T(0));
  for (int t = 0; t < N; ++t)
    for (int i = 0; i < k; ++i) {
      const int e = r.expert[size_t(t) * k + i], s = r.slot[size_t(t) * k + i];
      if (s < 0) continue;
      const T gate = a.probs[size_t(t) * E + e];
      const T* yr = a.out[size_t(e)].data() + size_t(s) * C;
      for (int c = 0; c < C; ++c) add_to(out[size_t(t) * C + c], acc_t<T>(gate) * acc_t<T>(yr[c]));
    }
}

template <typename T>
void moe_backward(Ops<T>& ops, const MoeConfig& cfg, const MoeWeights<T>& w, const MoeWeights<T>& dw, const T* x,
                  const T* dout, T* dx, int N, int C, const MoeActivations<T>& a, double loss_scale, Communicator* ep,
                  MoeCommStats* stats) {
  const EpShape sh = ep_shape(cfg, ep);
  const int E = cfg.num_experts, k = cfg.topk, F = moe_hidden(cfg, C);
  const MoeRouting& r = a.routing;
  // The gates' gradients (d out / d gate = the expert's output) and the own rows' output gradients.
  std::vector<double> dp(size_t(N) * E, 0.0);
  std::vector<std::vector<T>> dy(static_cast<size_t>(E));
  std::vector<int> rows(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    rows[size_t(e)] = int(a.token[size_t(e)].size());
    dy[size_t(e)].assign(a.token[size_t(e)].size() * size_t(C), T(0));
  }
  for (int t = 0; t < N; ++t)
    for (int i = 0; i < k; ++i) {
      const int e = r.expert[size_t(t) * k + i], s = r.slot[size_t(t) * k + i];
      if (s < 0) continue;
      const T gate = a.probs[size_t(t) * E + e];
      const T* y = a.out[size_t(e)].data() + size_t(s) * C;
      const T* g = dout + size_t(t) * C;
      double d = 0;
      for (int c = 0; c < C; ++c) {
        d += double(g[c]) * double(y[c]);
        dy[size_t(e)][size_t(s) * C + c] = gate * g[c];
      }
      dp[size_t(t) * E + e] += d;
    }
  // The held experts, in index order, on every source's rows.
  std::vector<T> own;
  for (const auto& v : dy) own.insert(own.end(), v.begin(), v.end());
  const auto dyh = by_expert(dispatch(ep, sh, std::move(own), rows, a.held_rows, size_t(C), stats ? &stats->dispatch_s : nullptr,
                                      stats ? &stats->dispatch_bytes : nullptr),
                             sh, a.held_rows, size_t(C));
  std::vector<std::vector<T>> dinh(static_cast<size_t>(sh.El));
  const ExpertShape x_ = expert_shape(cfg, F);
  for (int j = 0; j < sh.El; ++j) {
    const int n = int(dyh[size_t(j)].size() / size_t(C));
    if (n == 0) continue;
    std::vector<T> dact(size_t(n) * F, T(0)), dpre(size_t(n) * x_.F1, T(0));
    dinh[size_t(j)].assign(size_t(n) * C, T(0));
    ops.matmul_backward(dact.data(), dw.proj + size_t(j) * C * F, x_.glu ? nullptr : dw.proj_bias + size_t(j) * C,
                        dyh[size_t(j)].data(), a.act[size_t(j)].data(), w.proj + size_t(j) * C * F, n, F, C);
    if (x_.glu)
      ops.swiglu_backward(dpre.data(), a.pre[size_t(j)].data(), dact.data(), n, F);
    else
      ops.gelu_backward(dpre.data(), a.pre[size_t(j)].data(), dact.data(), size_t(n) * F);
    ops.matmul_backward(dinh[size_t(j)].data(), dw.fc + size_t(j) * x_.F1 * C, x_.glu ? nullptr : dw.fc_bias + size_t(j) * F,
                        dpre.data(), a.in[size_t(j)].data(), w.fc + size_t(j) * x_.F1 * C, n, C, x_.F1);
  }
  // The input gradients back to their tokens, scattered in expert index order.
  const std::vector<T> din =
      combine_rows(ep, sh, by_source(dinh, sh, a.held_rows, size_t(C)), rows, a.held_rows, size_t(C), stats);
  size_t at = 0;
  for (int e = 0; e < E; ++e)
    for (int t : a.token[size_t(e)]) {
      for (int c = 0; c < C; ++c) add_to(dx[size_t(t) * C + c], acc_t<T>(din[at + size_t(c)]));
      at += size_t(C);
    }
  // The router: for token t of group g, d(aux) / d p_tj = alpha E f_gj / G / groups = alpha E f_gj / N
  // (f counts, not differentiated, as Fedus et al.); softmax backward; d(z) / d l_tj = beta 2 lse_t p_tj / N.
  // A half type sums the router's gradient over the tokens in double and rounds it once (a
  // bf16 running sum over N tokens would lose it); float and double add token by token into T.
  std::vector<double> dl(static_cast<size_t>(E)), drouter(is_half_v<T> ? size_t(E) * C : 0, 0.0);
  for (int t = 0; t < N; ++t) {
    double dot = 0;
    for (int j = 0; j < E; ++j) {
      double& d = dp[size_t(t) * E + j];
      const int f = r.group_tokens[size_t(t / r.group) * E + j];
      d += loss_scale * cfg.aux_loss_coeff * E * (double(f) / (double(r.group) * k)) / N;
      dot += double(a.probs[size_t(t) * E + j]) * d;
    }
    for (int j = 0; j < E; ++j) {
      const double p = double(a.probs[size_t(t) * E + j]);
      dl[size_t(j)] = p * (dp[size_t(t) * E + j] - dot) + loss_scale * cfg.z_loss_coeff * 2.0 * a.lse[size_t(t)] * p / N;
    }
    for (int j = 0; j < E; ++j)
      for (int c = 0; c < C; ++c) {
        const double v = dl[size_t(j)] * double(x[size_t(t) * C + c]);
        if constexpr (is_half_v<T>)
          drouter[size_t(j) * C + c] += v;
        else
          dw.router[size_t(j) * C + c] += T(v);
      }
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < E; ++j) s += dl[size_t(j)] * double(w.router[size_t(j) * C + c]);
      add_to(dx[size_t(t) * C + c], acc_t<T>(s));
    }
  }
  if constexpr (is_half_v<T>)
    for (size_t i = 0; i < drouter.size(); ++i) add_to(dw.router[i], acc_t<T>(drouter[i]));
}

// The half types (ParallelGpt<bf16>, <fp16>): the router in double as above, the experts on
// the half ops (kernels/cpu/half_ops.h: convert, the float kernel, round).
#define DTB_MOE_HALF(T)                                                                                              \
  template void moe_forward<T>(Ops<T>&, const MoeConfig&, const MoeWeights<T>&, const T*, T*, int, int,              \
                               MoeActivations<T>&, int, Communicator*, MoeCommStats*);                               \
  template void moe_backward<T>(Ops<T>&, const MoeConfig&, const MoeWeights<T>&, const MoeWeights<T>&, const T*,     \
                                const T*, T*, int, int, const MoeActivations<T>&, double, Communicator*, MoeCommStats*);
DTB_MOE_HALF(bf16)
DTB_MOE_HALF(fp16)
#undef DTB_MOE_HALF

template void moe_forward<float>(Ops<float>&, const MoeConfig&, const MoeWeights<float>&, const float*, float*, int,
                                 int, MoeActivations<float>&, int, Communicator*, MoeCommStats*);
template void moe_forward<double>(Ops<double>&, const MoeConfig&, const MoeWeights<double>&, const double*, double*,
                                  int, int, MoeActivations<double>&, int, Communicator*, MoeCommStats*);
template void moe_backward<float>(Ops<float>&, const MoeConfig&, const MoeWeights<float>&, const MoeWeights<float>&,
                                  const float*, const float*, float*, int, int, const MoeActivations<float>&, double, Communicator*,
                                  MoeCommStats*);
template void moe_backward<double>(Ops<double>&, const MoeConfig&, const MoeWeights<double>&,
                                   const MoeWeights<double>&, const double*, const double*, double*, int, int,
                                   const MoeActivations<double>&, double, Communicator*,
                                   MoeCommStats*);

}  // namespace dtb
