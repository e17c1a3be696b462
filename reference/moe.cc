// The MoE FFN (moe.h). The router's logits, softmax, losses and their gradients are computed in
// double and rounded to T where they meet the model's tensors (the gates, the router's and the
// input's gradients); the experts run the model's own matmul and GELU ops on gathered rows.
#include "reference/moe.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/error.h"

namespace dtb {

namespace {
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

template <typename T>
void moe_forward(Ops<T>& ops, const MoeConfig& cfg, const MoeWeights<T>& w, const T* x, T* out, int N, int C,
                 MoeActivations<T>& a, int group) {
  validate_moe_config(cfg);
  const int E = cfg.num_experts, k = cfg.topk, F = moe_hidden(cfg, C);
  if (group == 0) group = N;
  if (group < 0 || (N > 0 && N % group != 0))
    throw InputError("moe_forward: a routing group of " + std::to_string(group) + " tokens does not divide the call's " +
                     std::to_string(N));
  route(cfg, x, w.router, N, group, C, a);
  a.in.assign(size_t(E), {}), a.pre.assign(size_t(E), {}), a.act.assign(size_t(E), {}), a.out.assign(size_t(E), {});
  for (int e = 0; e < E; ++e) {
    const auto& rows = a.token[size_t(e)];
    const int n = int(rows.size());
    if (n == 0) continue;
    auto& in = a.in[size_t(e)];
    in.resize(size_t(n) * C);
    for (int s = 0; s < n; ++s) std::copy_n(x + size_t(rows[size_t(s)]) * C, C, in.begin() + size_t(s) * C);
    a.pre[size_t(e)].resize(size_t(n) * F), a.act[size_t(e)].resize(size_t(n) * F), a.out[size_t(e)].resize(size_t(n) * C);
    ops.matmul_forward(a.pre[size_t(e)].data(), in.data(), w.fc + size_t(e) * F * C, w.fc_bias + size_t(e) * F, n, C, F);
    ops.gelu_forward(a.act[size_t(e)].data(), a.pre[size_t(e)].data(), size_t(n) * F);
    ops.matmul_forward(a.out[size_t(e)].data(), a.act[size_t(e)].data(), w.proj + size_t(e) * C * F,
                       w.proj_bias + size_t(e) * C, n, F, C);
  }
  const MoeRouting& r = a.routing;
  std::fill(out, out + size_t(N) * C, T(0));
  for (int t = 0; t < N; ++t)
    for (int i = 0; i < k; ++i) {
      const int e = r.expert[size_t(t) * k + i], s = r.slot[size_t(t) * k + i];
      if (s < 0) continue;
      const T gate = a.probs[size_t(t) * E + e];
      const T* y = a.out[size_t(e)].data() + size_t(s) * C;
      for (int c = 0; c < C; ++c) out[size_t(t) * C + c] += gate * y[c];
    }
}

template <typename T>
void moe_backward(Ops<T>& ops, const MoeConfig& cfg, const MoeWeights<T>& w, const MoeWeights<T>& dw, const T* x,
                  const T* dout, T* dx, int N, int C, const MoeActivations<T>& a, double loss_scale) {
  const int E = cfg.num_experts, k = cfg.topk, F = moe_hidden(cfg, C);
  const MoeRouting& r = a.routing;
  // The gates' gradients (d out / d gate = the expert's output) and each expert's output gradient.
  std::vector<double> dp(size_t(N) * E, 0.0);
  std::vector<std::vector<T>> dy(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) dy[size_t(e)].assign(a.token[size_t(e)].size() * size_t(C), T(0));
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
  // The experts, in index order; their input gradients scattered back to the tokens.
  for (int e = 0; e < E; ++e) {
    const auto& rows = a.token[size_t(e)];
    const int n = int(rows.size());
    if (n == 0) continue;
    std::vector<T> dact(size_t(n) * F, T(0)), dpre(size_t(n) * F, T(0)), din(size_t(n) * C, T(0));
    ops.matmul_backward(dact.data(), dw.proj + size_t(e) * C * F, dw.proj_bias + size_t(e) * C, dy[size_t(e)].data(),
                        a.act[size_t(e)].data(), w.proj + size_t(e) * C * F, n, F, C);
    ops.gelu_backward(dpre.data(), a.pre[size_t(e)].data(), dact.data(), size_t(n) * F);
    ops.matmul_backward(din.data(), dw.fc + size_t(e) * F * C, dw.fc_bias + size_t(e) * F, dpre.data(),
                        a.in[size_t(e)].data(), w.fc + size_t(e) * F * C, n, C, F);
    for (int s = 0; s < n; ++s)
      for (int c = 0; c < C; ++c) dx[size_t(rows[size_t(s)]) * C + c] += din[size_t(s) * C + c];
  }
  // The router: for token t of group g, d(aux) / d p_tj = alpha E f_gj / G / groups = alpha E f_gj / N
  // (f counts, not differentiated, as Fedus et al.); softmax backward; d(z) / d l_tj = beta 2 lse_t p_tj / N.
  std::vector<double> dl(static_cast<size_t>(E));
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
      for (int c = 0; c < C; ++c) dw.router[size_t(j) * C + c] += T(dl[size_t(j)] * double(x[size_t(t) * C + c]));
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < E; ++j) s += dl[size_t(j)] * double(w.router[size_t(j) * C + c]);
      dx[size_t(t) * C + c] += T(s);
    }
  }
}

template void moe_forward<float>(Ops<float>&, const MoeConfig&, const MoeWeights<float>&, const float*, float*, int,
                                 int, MoeActivations<float>&, int);
template void moe_forward<double>(Ops<double>&, const MoeConfig&, const MoeWeights<double>&, const double*, double*,
                                  int, int, MoeActivations<double>&, int);
template void moe_backward<float>(Ops<float>&, const MoeConfig&, const MoeWeights<float>&, const MoeWeights<float>&,
                                  const float*, const float*, float*, int, int, const MoeActivations<float>&, double);
template void moe_backward<double>(Ops<double>&, const MoeConfig&, const MoeWeights<double>&,
                                   const MoeWeights<double>&, const double*, const double*, double*, int, int,
                                   const MoeActivations<double>&, double);

}  // namespace dtb
