// Tests of the MoE FFN (reference/model/moe.h): its gradients against central differences in
// float64, routing by hand (ties, capacity, first choices first), the losses' closed forms,
// E = 1 as the dense FFN bitwise, and the config's refusals.
#include "reference/model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"
#include "reference/model/rng.h"

namespace dtb {
namespace {

/// A layer's weights and gradients in one buffer each, with MoeWeights views.
/// SwiGLU experts (cfg.expert): fc (E, 2F, C), no biases.
template <typename T> struct Layer {
  Layer(const MoeConfig& cfg, int C)
      : E(cfg.num_experts), C(C), F(moe_hidden(cfg, C)), glu(cfg.expert == MoeExpert::swiglu) {
    const size_t n = size_t(E) * C + size_t(E) * (glu ? 2 : 1) * F * C + size_t(E) * C * F +
                     (glu ? 0 : size_t(E) * F + size_t(E) * C);
    w.assign(n, T(0)), g.assign(n, T(0));
  }
  MoeWeights<T> view(std::vector<T>& b) {
    T* p = b.data();
    MoeWeights<T> v;
    v.router = p, p += size_t(E) * C;
    v.fc = p, p += size_t(E) * (glu ? 2 : 1) * F * C;
    if (!glu) v.fc_bias = p, p += size_t(E) * F;
    v.proj = p, p += size_t(E) * C * F;
    if (!glu) v.proj_bias = p;
    return v;
  }
  void randomise(uint64_t seed, double scale) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = T(scale * random_normal(seed, 7, i));
  }
  int E, C, F;
  bool glu;
  std::vector<T> w, g;
};

std::vector<double> normal(size_t n, uint64_t stream, double scale = 1.0) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * random_normal(42, stream, i);
  return v;
}

// The loss sum(out * R) + scale (aux + z): its gradient by moe_backward (dout = R) against central
// differences of every weight and input. Error analysis: with h = 1e-5 the truncation error is
// about h^2 |f'''| / 6 (below 1e-9 here, the weights O(0.5)), the rounding error about
// eps |f| / h = 1e-16 * 10 / 1e-5 = 1e-10; so 1e-7 absolute plus 1e-6 relative leaves a margin
// of 100 while a missing term (the aux loss's alpha E f / N = 0.025 per probability) is far
// above it. No routing decision changes under a 1e-5 step with these seeds (asserted).
// SwiGLU experts (the MoE Llama's) take the same checks: their gate and up rows, down, the input.
TEST(Moe, GradientsMatchCentralDifferences) {
  // loss_scale: the losses' weight in the model's loss (a scaled loss), 1 and 3; group: tokens per
  // routing group (0: the call's 10 as one; 5: two groups, each with its own capacity and balance loss).
  for (MoeExpert form : {MoeExpert::gelu, MoeExpert::swiglu})
  for (auto [topk, scale, group] : {std::tuple{1, 1.0, 0}, std::tuple{2, 3.0, 0}, std::tuple{2, 1.0, 5}}) {
    SCOPED_TRACE(std::string(form == MoeExpert::swiglu ? "swiglu" : "gelu") + " topk " + std::to_string(topk) +
                 ", loss scale " + std::to_string(scale) + ", group " + std::to_string(group));
    MoeConfig cfg;
    cfg.expert = form;
    cfg.num_experts = 4, cfg.topk = topk, cfg.capacity_factor = 1.0;
    cfg.aux_loss_coeff = 0.1, cfg.z_loss_coeff = 0.01, cfg.ffn_hidden = 6;
    const int N = 10, C = 5;
    Layer<double> layer(cfg, C);
    layer.randomise(3, 0.5);
    std::vector<double> x = normal(size_t(N) * C, 1), R = normal(size_t(N) * C, 2), out(size_t(N) * C);
    CpuOps<double> ops;
    MoeActivations<double> acts;
    auto loss = [&](MoeActivations<double>& a) {
      moe_forward(ops, cfg, layer.view(layer.w), x.data(), out.data(), N, C, a, group);
      double s = scale * (a.routing.aux_loss + a.routing.z_loss);
      for (size_t i = 0; i < out.size(); ++i) s += out[i] * R[i];
      return s;
    };
    loss(acts);
    EXPECT_GT(acts.routing.dropped, 0);  // capacity 1.0 drops here: the test covers dropping
    std::vector<double> dx(x.size(), 0.0);
    moe_backward(ops, cfg, layer.view(layer.w), layer.view(layer.g), x.data(), R.data(), dx.data(), N, C, acts,
                 scale);
    const double h = 1e-5;
    auto check = [&](std::vector<double>& v, const std::vector<double>& grad, const char* what) {
      for (size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i];
        MoeActivations<double> up, down;
        v[i] = keep + h;
        const double fu = loss(up);
        v[i] = keep - h;
        const double fd = loss(down);
        v[i] = keep;
        ASSERT_EQ(up.routing.slot, acts.routing.slot) << what << " " << i << ": routing changed under the step";
        ASSERT_EQ(down.routing.slot, acts.routing.slot) << what << " " << i;
        const double fdiff = (fu - fd) / (2 * h);
        EXPECT_NEAR(grad[i], fdiff, 1e-7 + 1e-6 * std::fabs(fdiff)) << what << " " << i;
      }
    };
    check(layer.w, layer.g, "weight");
    check(x, dx, "input");
  }
}

// A zero router makes every probability 1/E: ties go to the lower index, so every token picks
// expert 0 (and 1 as its second choice). Then f = (1, 0, ...) and P_e = 1/E, so the aux loss
// alpha E sum f_e P_e = alpha, the imbalance is E; capacity ceil(1.0 * 8 * 1 / 4) = 2 keeps
// tokens 0 and 1, and the dropped tokens' outputs are 0.
TEST(Moe, TiesCapacityAndTheBalanceLossByHand) {
  MoeConfig cfg;
  cfg.num_experts = 4, cfg.topk = 1, cfg.capacity_factor = 1.0, cfg.aux_loss_coeff = 0.01;
  const int N = 8, C = 3;
  Layer<double> layer(cfg, C);
  layer.randomise(5, 0.5);
  std::fill(layer.w.begin(), layer.w.begin() + 4 * C, 0.0);  // the router
  std::vector<double> x = normal(size_t(N) * C, 3), out(size_t(N) * C);
  CpuOps<double> ops;
  MoeActivations<double> a;
  moe_forward(ops, cfg, layer.view(layer.w), x.data(), out.data(), N, C, a);
  const MoeRouting& r = a.routing;
  EXPECT_EQ(r.expert, std::vector<int>(N, 0));
  EXPECT_EQ(r.capacity, 2);
  EXPECT_EQ(r.slot, (std::vector<int>{0, 1, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(r.dropped, 6);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int>{8, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(r.aux_loss, 0.01);
  EXPECT_DOUBLE_EQ(r.imbalance(), 4.0);
  for (int t = 2; t < N; ++t)
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[size_t(t) * C + c], 0.0) << t;

  // Top-2 at capacity ceil(0.5 * 4 * 2 / 2) = 2: first choices (all expert 0) are placed before
  // second choices (all expert 1), each expert keeping tokens 0 and 1. f = (1/2, 1/2): aux = alpha.
  cfg.num_experts = 2, cfg.topk = 2, cfg.capacity_factor = 0.5;
  Layer<double> two(cfg, C);
  two.randomise(6, 0.5);
  std::fill(two.w.begin(), two.w.begin() + 2 * C, 0.0);
  moe_forward(ops, cfg, two.view(two.w), x.data(), out.data(), 4, C, a);
  EXPECT_EQ(a.routing.expert, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(a.routing.slot, (std::vector<int>{0, 0, 1, 1, -1, -1, -1, -1}));
  EXPECT_DOUBLE_EQ(a.routing.aux_loss, 0.01);
  EXPECT_DOUBLE_EQ(a.routing.imbalance(), 1.0);
}

// One expert, top-1, nothing dropped: the gate is softmax over one logit, exactly 1, so the
// layer is the dense FFN (fc, GELU, proj) bitwise, forward and backward; the router's gradient
// is exactly 0 (p (d - p d) with p = 1) without a z-loss.
TEST(Moe, OneExpertIsTheDenseFfnBitwise) {
  MoeConfig cfg;
  cfg.num_experts = 1, cfg.topk = 1, cfg.aux_loss_coeff = 0.01;
  const int N = 16, C = 8, F = 32;
  Layer<float> layer(cfg, C);
  layer.randomise(9, 0.3);
  std::vector<float> x(size_t(N) * C), R(size_t(N) * C), out(size_t(N) * C);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(random_normal(1, 1, i)), R[i] = float(random_normal(1, 2, i));
  CpuOps<float> ops;
  MoeActivations<float> a;
  const MoeWeights<float> w = layer.view(layer.w), g = layer.view(layer.g);
  moe_forward(ops, cfg, w, x.data(), out.data(), N, C, a);
  std::vector<float> pre(size_t(N) * F), act(size_t(N) * F), dense(size_t(N) * C);
  ops.matmul_forward(pre.data(), x.data(), w.fc, w.fc_bias, N, C, F);
  ops.gelu_forward(act.data(), pre.data(), pre.size());
  ops.matmul_forward(dense.data(), act.data(), w.proj, w.proj_bias, N, F, C);
  EXPECT_EQ(out, dense);

  std::vector<float> dx(x.size(), 0.f);
  moe_backward(ops, cfg, w, g, x.data(), R.data(), dx.data(), N, C, a);
  std::vector<float> want(layer.g.size(), 0.f), dact(act.size(), 0.f), dpre(pre.size(), 0.f), wdx(x.size(), 0.f);
  Layer<float> ref(cfg, C);
  const MoeWeights<float> rg = ref.view(want);
  ops.matmul_backward(dact.data(), rg.proj, rg.proj_bias, R.data(), act.data(), w.proj, N, F, C);
  ops.gelu_backward(dpre.data(), pre.data(), dact.data(), pre.size());
  ops.matmul_backward(wdx.data(), rg.fc, rg.fc_bias, dpre.data(), x.data(), w.fc, N, C, F);
  EXPECT_EQ(layer.g, want);  // the router's part of both is 0
  EXPECT_EQ(dx, wdx);
}

// SwiGLU experts, E = 1, top-1, nothing dropped: the gate is exactly 1, so the layer is the
// Llama block's dense MLP (fc without bias, the ops' swiglu on [gate | up], down) bitwise, forward
// and backward. And each expert is Mixtral's w2(silu(w1 x) * w3 x) with w1 its first F fc rows and
// w3 the next F: at E = 2, top-2, the output against that definition written out in double
// (the gates the router's probabilities), within the roundings of a few dozen terms (1e-13,
// the values O(1)); gate and up swapped errs by O(0.1).
TEST(Moe, SwigluExpertsAreTheDenseLlamaMlpAndMixtralsDefinition) {
  MoeConfig cfg;
  cfg.expert = MoeExpert::swiglu;
  cfg.num_experts = 1, cfg.topk = 1, cfg.aux_loss_coeff = 0.01, cfg.ffn_hidden = 12;
  const int N = 16, C = 8, F = 12;
  {
    Layer<float> layer(cfg, C);
    layer.randomise(9, 0.3);
    std::vector<float> x(size_t(N) * C), R(size_t(N) * C), out(size_t(N) * C);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(random_normal(1, 1, i)), R[i] = float(random_normal(1, 2, i));
    CpuOps<float> ops;
    MoeActivations<float> a;
    const MoeWeights<float> w = layer.view(layer.w), g = layer.view(layer.g);
    EXPECT_EQ(w.fc_bias, nullptr);
    moe_forward(ops, cfg, w, x.data(), out.data(), N, C, a);
    std::vector<float> pre(size_t(N) * 2 * F), act(size_t(N) * F), dense(size_t(N) * C);
    ops.matmul_forward(pre.data(), x.data(), w.fc, nullptr, N, C, 2 * F);
    ops.swiglu_forward(act.data(), pre.data(), N, F);
    ops.matmul_forward(dense.data(), act.data(), w.proj, nullptr, N, F, C);
    EXPECT_EQ(out, dense);
    std::vector<float> dx(x.size(), 0.f);
    moe_backward(ops, cfg, w, g, x.data(), R.data(), dx.data(), N, C, a);
    std::vector<float> want(layer.g.size(), 0.f), dact(act.size(), 0.f), dpre(pre.size(), 0.f), wdx(x.size(), 0.f);
    Layer<float> ref(cfg, C);
    const MoeWeights<float> rg = ref.view(want);
    ops.matmul_backward(dact.data(), rg.proj, nullptr, R.data(), act.data(), w.proj, N, F, C);
    ops.swiglu_backward(dpre.data(), pre.data(), dact.data(), N, F);
    ops.matmul_backward(wdx.data(), rg.fc, nullptr, dpre.data(), x.data(), w.fc, N, C, 2 * F);
    EXPECT_EQ(layer.g, want);  // the router's part of both is 0
    EXPECT_EQ(dx, wdx);
  }
  cfg.num_experts = 2, cfg.topk = 2;
  Layer<double> layer(cfg, C);
  layer.randomise(5, 0.5);
  std::vector<double> x = normal(size_t(N) * C, 3), out(size_t(N) * C);
  CpuOps<double> ops;
  MoeActivations<double> a;
  const MoeWeights<double> w = layer.view(layer.w);
  moe_forward(ops, cfg, w, x.data(), out.data(), N, C, a);
  double worst = 0;
  for (int t = 0; t < N; ++t)
    for (int c = 0; c < C; ++c) {
      double want = 0;
      for (int e = 0; e < 2; ++e) {
        const double* w1 = w.fc + size_t(e) * 2 * F * C;  // gate rows
        const double* w3 = w1 + size_t(F) * C;             // up rows
        const double* w2 = w.proj + size_t(e) * C * F;
        double y = 0;
        for (int f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int i = 0; i < C; ++i) g += w1[size_t(f) * C + i] * x[size_t(t) * C + i], u += w3[size_t(f) * C + i] * x[size_t(t) * C + i];
          y += w2[size_t(c) * F + f] * (g / (1 + std::exp(-g))) * u;
        }
        want += a.probs[size_t(t) * 2 + e] * y;
      }
      worst = std::max(worst, std::fabs(out[size_t(t) * C + c] - want));
    }
  EXPECT_LE(worst, 1e-13);
}

// Routing groups: one call of two groups routes, gates and computes each group as a call of its
// own would, its slots numbering an expert's rows group after group, its balance loss the mean of
// the groups' and its z-loss the mean over all tokens. Computing the balance loss from the call's
// counts instead of each group's fails it (the two groups' counts differ).
// The outputs agree to rounding, not bitwise: the BLAS may choose its kernel by the number of rows
// (OpenBLAS on AMD Zen does), reordering a row's sums. Bound (Higham 2002, Eq. 3.5, a sum of n
// terms reordered moves by at most 2 gamma_n sum|terms|, gamma_n ~ n u, u = 1.1e-16): x ~ N(0, 1)
// (|x| <= 4 here), weights N(0, 0.64) (|w| <= 3.2): fc, n = C + 1 = 6 terms of at most 12.8, moves
// <= 2 x 6u x 77 = 1e-13; gelu (slope <= 1.13) then proj, n = F + 1 = 21 terms of at most 3.2 x
// 87: <= 2 x 21u x 5.8e3 + 21 x 3.2 x 1.13 x 1e-13 = 3.5e-11; two experts, probabilities <= 1:
// 7e-11. A misrouted row or slot moves an output by O(1).
double max_abs_diff(const double* a, const double* b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

TEST(Moe, GroupsRouteAsSeparateCalls) {
  MoeConfig cfg;
  cfg.num_experts = 4, cfg.topk = 2, cfg.capacity_factor = 1.0, cfg.aux_loss_coeff = 0.1, cfg.z_loss_coeff = 0.01;
  const int G = 6, N = 2 * G, C = 5;
  Layer<double> layer(cfg, C);
  layer.randomise(11, 0.8);
  std::vector<double> x = normal(size_t(N) * C, 4), out(size_t(N) * C), part(size_t(G) * C);
  CpuOps<double> ops;
  MoeActivations<double> all, a0, a1;
  moe_forward(ops, cfg, layer.view(layer.w), x.data(), out.data(), N, C, all, G);
  moe_forward(ops, cfg, layer.view(layer.w), x.data(), part.data(), G, C, a0);
  const double bound = 7e-11;  // the reordered sums' bound above
  EXPECT_LE(max_abs_diff(part.data(), out.data(), part.size()), bound);
  moe_forward(ops, cfg, layer.view(layer.w), x.data() + size_t(G) * C, part.data(), G, C, a1);
  EXPECT_LE(max_abs_diff(part.data(), out.data() + size_t(G) * C, part.size()), bound);
  const MoeRouting &r = all.routing, &r0 = a0.routing, &r1 = a1.routing;
  EXPECT_GT(r.dropped, 0);
  EXPECT_EQ(r.dropped, r0.dropped + r1.dropped);
  EXPECT_EQ(r.capacity, r0.capacity);
  EXPECT_NE(r0.tokens_per_expert, r1.tokens_per_expert);
  for (int t = 0; t < N; ++t)
    for (int i = 0; i < cfg.topk; ++i) {
      const MoeRouting& own = t < G ? r0 : r1;
      const size_t j = size_t(t) * cfg.topk + i, jo = size_t(t % G) * cfg.topk + i;
      ASSERT_EQ(r.expert[j], own.expert[jo]);
      const int e = r.expert[j];
      const int shift = t < G ? 0 : r0.kept_per_expert[size_t(e)];
      EXPECT_EQ(r.slot[j], own.slot[jo] < 0 ? -1 : own.slot[jo] + shift) << "token " << t << " choice " << i;
    }
  EXPECT_NEAR(r.aux_loss, (r0.aux_loss + r1.aux_loss) / 2, 1e-15);
  EXPECT_NEAR(r.z_loss, (r0.z_loss + r1.z_loss) / 2, 1e-15);
  EXPECT_THROW(moe_forward(ops, cfg, layer.view(layer.w), x.data(), out.data(), N, C, all, 5), InputError);
}

TEST(Moe, RefusesBadConfigsNamingTheNumbers) {
  auto refused = [](MoeConfig c, const std::string& words) {
    try {
      validate_moe_config(c);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  MoeConfig c;
  c.num_experts = 0;
  refused(c, "num_experts = 0");
  c.num_experts = 2, c.topk = 3;
  refused(c, "moe_router_topk = 3 is outside [1, num_experts = 2]");
  c.topk = 1, c.capacity_factor = 0.0;
  refused(c, "moe_expert_capacity_factor = 0");
  c.capacity_factor = -1.5;
  refused(c, "moe_expert_capacity_factor = -1.5");
  c.capacity_factor.reset(), c.aux_loss_coeff = -1;
  refused(c, "moe_aux_loss_coeff");
  c.aux_loss_coeff = 0.01;
  EXPECT_NO_THROW(validate_moe_config(c));
}

}  // namespace
}  // namespace dtb
