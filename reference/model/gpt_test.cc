// The reference GPT as a whole: parameter layout, sharding-invariant initialisation, and
// the full backward against finite differences in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "reference/model/gpt.h"
#include "reference/model/rng.h"

namespace dtb {

TEST(Gpt, ParamCountMatchesFormula) {
  const GptConfig c{3, 48, 4, 20, 97};
  // V*C + T*C + L*(12 C^2 + 13 C) + 2C: per layer qkv 3C^2+3C, proj C^2+C, fc 4C^2+4C,
  // fcproj 4C^2+C, two layernorms 4C.
  const size_t want = 97 * 48 + 20 * 48 + 3 * (12 * 48 * 48 + 13 * 48) + 2 * 48;
  EXPECT_EQ(gpt_num_params(c), want);
  const auto layout = gpt_param_layout(c);
  ASSERT_EQ(layout.size(), 16u);
  for (size_t i = 1; i < layout.size(); ++i)
    EXPECT_EQ(layout[i].offset, layout[i - 1].offset + layout[i - 1].numel);
}

// An MoE model (reference/model/moe.h): L = 5 layers, every second MoE (layers 0, 2, 4: Lm = 3, Ld = 2),
// E = 3 experts of hidden size F = 40. Per layer attention and two LayerNorms 4 C^2 + 8 C; per MoE layer a router E C and per expert fc F C + F and proj
// C F + C in place of the dense FFN's 8 C^2 + 5 C.
TEST(Gpt, MoeParamCountMatchesFormula) {
  GptConfig c{5, 48, 4, 20, 256};
  c.moe.num_experts = 3, c.moe.topk = 2, c.moe.ffn_hidden = 40, c.moe_layer_freq = 2;
  const size_t C = 48, F = 40, E = 3;
  const size_t want = 256 * C + 20 * C + 5 * (4 * C * C + 8 * C) + 2 * (8 * C * C + 5 * C) +
                      3 * (E * C + E * (2 * F * C + F + C)) + 2 * C;
  EXPECT_EQ(gpt_num_params(c), want);
  EXPECT_EQ(gpt_active_params(c), want - 3 * 1 * (2 * F * C + F + C));  // top-2 of 3: one expert idle per layer
  EXPECT_EQ(num_moe_layers(c), 3);
  EXPECT_TRUE(is_moe_layer(c, 4));
  EXPECT_FALSE(is_moe_layer(c, 3));
  EXPECT_EQ(dense_layer_index(c, 1), 0);
  EXPECT_EQ(dense_layer_index(c, 3), 1);
  const auto layout = gpt_param_layout(c);
  ASSERT_EQ(layout.size(), 21u);
  EXPECT_EQ(layout[10].shape, (std::vector<int64_t>{2, 4 * 48, 48}));  // fcw over the dense layers
  EXPECT_EQ(layout[17].shape, (std::vector<int64_t>{3, 3, 40, 48}));   // expfcw (Lm, E, F, C)
}

// A freshly initialised MoE model's losses are moe_initial_loss's: router logits of GPT-2's init
// are O(0.1) (weights 0.02, C = 64 LayerNorm outputs of size 1), so probabilities are 1/E within
// ~10 % and logsumexp is ln E within ~0.1: the balance loss alpha within ~10 % whatever the routing,
// the z-loss beta ln^2 E within ~2 x 0.1 / ln 4 = 15 %; 20 % bounds both. The train suite's
// step-0 check adds this to ln V (an MoE model with large coefficients failed it before).
TEST(Gpt, MoeLossesAtInitAreTheirClosedForm) {
  GptConfig c{2, 64, 4, 32, 256};
  c.moe.num_experts = 4, c.moe.topk = 2, c.moe.aux_loss_coeff = 1.0, c.moe.z_loss_coeff = 0.5;
  const double want = 2 * (1.0 + 0.5 * std::log(4.0) * std::log(4.0));
  EXPECT_DOUBLE_EQ(moe_initial_loss(c), want);
  CpuDevice dev;
  Gpt<double> m(c, dev);
  m.init(7);
  std::vector<int32_t> tok(2 * 32), tgt(2 * 32);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 37) % 256), tgt[i] = int32_t((i * 91 + 5) % 256);
  m.forward(tok.data(), tgt.data(), 2, 32);
  EXPECT_NEAR(m.moe_loss_sum() / 64.0, want, 0.2 * want);
  EXPECT_EQ(moe_initial_loss(GptConfig{2, 64, 4, 32, 256}), 0.0);
}

TEST(Gpt, InvalidConfigIsInputError) {
  EXPECT_THROW(validate_gpt_config({2, 30, 4, 16, 256}), InputError);
  EXPECT_THROW(validate_gpt_config({0, 32, 4, 16, 256}), InputError);
  GptConfig moe{2, 32, 4, 16, 256};
  moe.moe.num_experts = 4, moe.moe.topk = 2;
  EXPECT_NO_THROW(validate_gpt_config(moe));
  moe.moe_layer_freq = 3;  // above L
  EXPECT_THROW(validate_gpt_config(moe), InputError);
  moe.moe_layer_freq = 1, moe.moe.topk = 5;
  EXPECT_THROW(validate_gpt_config(moe), InputError);
  moe.moe.topk = 1, moe.moe.num_experts = -1;
  EXPECT_THROW(validate_gpt_config(moe), InputError);
}

TEST(Gpt, InitIsShardingInvariantAndGpt2Scaled) {
  const GptConfig c{2, 64, 4, 32, 256};
  const size_t P = gpt_num_params(c);
  std::vector<float> a(P), b(P);
  std::vector<double> d(P);
  gpt_init_params(a.data(), c, 11);
  gpt_init_params(b.data(), c, 11);
  gpt_init_params(d.data(), c, 11);
  EXPECT_EQ(a, b);
  for (size_t i = 0; i < P; ++i) ASSERT_EQ(double(a[i]), d[i]);  // oracle starts identical
  for (const auto& t : gpt_param_layout(c)) {
    // Element i of a tensor is the same function of (seed, name, i) a shard would use.
    if (t.name == "qkvw") {
      const size_t i = t.numel / 2 + 3;
      EXPECT_EQ(a[t.offset + i], float(0.02 * random_normal(11, stream_id("qkvw"), i)));
    }
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t.numel; ++i) s += a[t.offset + i], s2 += double(a[t.offset + i]) * a[t.offset + i];
    const double mean = s / t.numel, sd = std::sqrt(s2 / t.numel - mean * mean);
    if (t.name == "ln1w" || t.name == "lnfw") { EXPECT_EQ(mean, 1.0) << t.name; }
    if (t.name == "fcb" || t.name == "lnfb") { EXPECT_EQ(s2, 0.0) << t.name; }
    // Standard deviation within 5 standard errors (sd / sqrt(2n)) of its target.
    auto near_sd = [&](double want) { EXPECT_NEAR(sd, want, 5 * want / std::sqrt(2.0 * t.numel)) << t.name; };
    if (t.name == "wte" || t.name == "qkvw" || t.name == "fcw") near_sd(0.02);
    if (t.name == "attprojw" || t.name == "fcprojw") near_sd(0.02 / std::sqrt(2.0 * c.L));
  }
}

// The whole model's gradient against central differences, in double: every op's FD test
// passing does not prove they are wired together right (a residual branch dropped in
// backward, a layer's slice offset wrong). Error analysis as in kernels/cpu/ops_test.cc:
// with h = 1e-5 truncation (h^2 f''') and rounding (eps |L| / h) errors are ~1e-10
// relative, so 1e-6 relative to the largest gradient is strict.
TEST(FiniteDifference, WholeModelDouble) {
  const GptConfig c{2, 16, 2, 8, 13};
  CpuDevice dev;
  Gpt<double> m(c, dev);
  std::mt19937_64 gen(3);
  std::normal_distribution<double> nd(0, 0.3);
  for (size_t i = 0; i < m.num_params(); ++i) m.params()[i] = nd(gen);  // nonzero biases too
  const int B = 2, Tn = 7;
  std::vector<int32_t> tok(B * Tn), tgt(B * Tn);
  for (int i = 0; i < B * Tn; ++i) tok[i] = int(gen() % c.V), tgt[i] = int(gen() % c.V);
  m.zero_grad();
  m.forward(tok.data(), tgt.data(), B, Tn);
  m.backward(1.0);
  std::vector<double> g(m.grads(), m.grads() + m.num_params());
  double gmax = 0;
  for (double x : g) gmax = std::max(gmax, std::fabs(x));
  const double h = 1e-5;
  double worst = 0;
  int checked = 0;
  for (const auto& t : m.layout()) {
    // Every tensor, up to 12 elements spread over it.
    for (size_t k = 0; k < std::min<size_t>(12, t.numel); ++k) {
      const size_t i = t.offset + (k * 7919) % t.numel;
      const double x0 = m.params()[i];
      m.params()[i] = x0 + h;
      const double lp = m.forward(tok.data(), tgt.data(), B, Tn);
      m.params()[i] = x0 - h;
      const double lm = m.forward(tok.data(), tgt.data(), B, Tn);
      m.params()[i] = x0;
      const double fd = (lp - lm) / (2 * h);
      worst = std::max(worst, std::fabs(fd - g[i]) / std::max(1.0, gmax));
      ++checked;
    }
  }
  std::printf("fd check whole model: %d params, max rel err %.2e (tol 1e-6)\n", checked, worst);
  EXPECT_LE(worst, 1e-6);
}

}  // namespace dtb
