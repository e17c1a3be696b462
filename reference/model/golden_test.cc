// The reference GPT against PyTorch, after llm.c's test_gpt2: scripts/make_golden.py runs an
// independent float64 torch implementation of the model and writes the weights, a batch, the
// mean loss and every parameter gradient; Gpt<double> and Gpt<float> rerun that batch here and
// must agree within the error bounds derived below.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "reference/model/gpt.h"

namespace dtb {
namespace {

// File format (written by scripts/make_golden.py), little-endian, no padding:
//   char    magic[8]      "DTBGOLD1" (dense, gpt_tiny.bin) or "DTBGOLD2" (MoE, gpt_moe.bin)
//   int32   L, C, NH, T, V, B, Tn
//   DTBGOLD2 only: int32 num_experts, topk, moe_layer_freq, moe_ffn_hidden;
//                  float64 capacity_factor, aux_loss_coeff, z_loss_coeff
//   int32   tokens[B*Tn], targets[B*Tn]      row-major (B, Tn)
//   float32 params[P]                        gpt_param_layout order, P = gpt_num_params
//   float64 loss                             mean cross-entropy over the B*Tn tokens (+ the MoE losses)
//   float64 grads[P]                         d(loss)/d(params), same layout
//   DTBGOLD2 only: int32 slots[Lm][B*Tn*topk] each MoE layer's routing (MoeRouting::slot)
static_assert(std::endian::native == std::endian::little, "the golden file is little-endian");

struct Golden {
  GptConfig cfg;
  int B = 0, Tn = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<float> params;
  double loss = 0;
  std::vector<double> grads;
  std::vector<std::vector<int>> slots;  // per MoE layer
};

template <typename X>
bool read_n(std::ifstream& in, X* dst, size_t n) {
  in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n * sizeof(X)));
  return static_cast<bool>(in);
}

// The layout as the golden script defines it, written out again independently of gpt.cc so a
// reordering on either side fails here by name rather than as a wall of gradient mismatches.
// An MoE file's model (layer 0 MoE, layer 1 dense) has one dense layer's FFN and one MoE layer's.
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_layout(const GptConfig& c) {
  const int64_t L = c.L, C = c.C, T = c.T, V = c.V, E = c.moe.num_experts, F = c.moe.ffn_hidden;
  const int64_t Ld = E > 0 ? 1 : L;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
      {"wte", {V, C}},           {"wpe", {T, C}},         {"ln1w", {L, C}},
      {"ln1b", {L, C}},          {"qkvw", {L, 3 * C, C}}, {"qkvb", {L, 3 * C}},
      {"attprojw", {L, C, C}},   {"attprojb", {L, C}},    {"ln2w", {L, C}},
      {"ln2b", {L, C}},          {"fcw", {Ld, 4 * C, C}}, {"fcb", {Ld, 4 * C}},
      {"fcprojw", {Ld, C, 4 * C}}, {"fcprojb", {Ld, C}},  {"lnfw", {C}},
      {"lnfb", {C}}};
  if (E > 0)
    out.insert(out.end(), {{"routerw", {1, E, C}}, {"expfcw", {1, E, F, C}}, {"expfcb", {1, E, F}},
                           {"expprojw", {1, E, C, F}}, {"expprojb", {1, E, C}}});
  return out;
}

void load_golden(Golden* g, const std::string& file) {
  const std::string path = std::string(DTB_TESTDATA_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "cannot open " << path
                  << " (regenerate it with /usr/bin/python3 scripts/make_golden.py [--gpt-moe])";
  char magic[8];
  ASSERT_TRUE(read_n(in, magic, 8) && (std::memcmp(magic, "DTBGOLD1", 8) == 0 || std::memcmp(magic, "DTBGOLD2", 8) == 0))
      << path << ": bad magic, not a DTBGOLD1 or DTBGOLD2 golden file";
  const bool moe = std::memcmp(magic, "DTBGOLD2", 8) == 0;
  int32_t hdr[7];
  ASSERT_TRUE(read_n(in, hdr, 7)) << path << ": truncated header";
  g->cfg = GptConfig{hdr[0], hdr[1], hdr[2], hdr[3], hdr[4]};
  g->B = hdr[5];
  g->Tn = hdr[6];
  if (moe) {
    int32_t m[4];
    double f[3];
    ASSERT_TRUE(read_n(in, m, 4) && read_n(in, f, 3)) << path << ": truncated MoE header";
    g->cfg.moe.num_experts = m[0], g->cfg.moe.topk = m[1], g->cfg.moe_layer_freq = m[2], g->cfg.moe.ffn_hidden = m[3];
    g->cfg.moe.capacity_factor = f[0], g->cfg.moe.aux_loss_coeff = f[1], g->cfg.moe.z_loss_coeff = f[2];
    ASSERT_EQ(num_moe_layers(g->cfg), 1) << path << ": expected_layout below knows one MoE layer";
  }
  ASSERT_NO_THROW(validate_gpt_config(g->cfg));
  ASSERT_TRUE(g->B > 0 && g->Tn > 0 && g->Tn <= g->cfg.T) << "bad batch shape in " << path;

  const size_t n_tok = size_t(g->B) * g->Tn;
  const size_t P = gpt_num_params(g->cfg);
  g->tokens.resize(n_tok);
  g->targets.resize(n_tok);
  g->params.resize(P);
  g->grads.resize(P);
  ASSERT_TRUE(read_n(in, g->tokens.data(), n_tok) && read_n(in, g->targets.data(), n_tok) &&
              read_n(in, g->params.data(), P) && read_n(in, &g->loss, 1) &&
              read_n(in, g->grads.data(), P))
      << path << ": truncated; its sizes do not match gpt_num_params = " << P;
  for (int i = 0; i < num_moe_layers(g->cfg); ++i) {
    g->slots.emplace_back(n_tok * size_t(g->cfg.moe.topk));
    ASSERT_TRUE(read_n(in, g->slots.back().data(), g->slots.back().size())) << path << ": truncated routing";
  }
  in.peek();
  ASSERT_TRUE(in.eof()) << path << ": trailing bytes; its sizes do not match gpt_num_params";
  for (size_t i = 0; i < n_tok; ++i) {
    ASSERT_TRUE(g->tokens[i] >= 0 && g->tokens[i] < g->cfg.V && g->targets[i] >= 0 &&
                g->targets[i] < g->cfg.V)
        << "token id out of range at " << i;
  }

  const auto layout = gpt_param_layout(g->cfg);
  const auto want = expected_layout(g->cfg);
  ASSERT_EQ(layout.size(), want.size());
  size_t offset = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(layout[i].name, want[i].first) << "tensor " << i;
    EXPECT_EQ(layout[i].shape, want[i].second) << want[i].first;
    EXPECT_EQ(layout[i].offset, offset) << want[i].first;
    offset += layout[i].numel;
  }
  ASSERT_EQ(offset, P);
}

// Runs Gpt<T> on the golden batch and compares the mean loss and each tensor's gradient.
// Relative norm error per tensor: ||g - g_ref||_2 / ||g_ref||_2; max abs error is printed.
template <typename T>
void check_against_golden(const char* tag, const std::string& file, double loss_tol, double grad_tol) {
  Golden g;
  ASSERT_NO_FATAL_FAILURE(load_golden(&g, file));
  CpuDevice device;
  Gpt<T> model(g.cfg, device);
  ASSERT_EQ(model.num_params(), g.params.size());
  for (size_t i = 0; i < g.params.size(); ++i) model.params()[i] = static_cast<T>(g.params[i]);
  model.zero_grad();
  const double n_tok = double(g.B) * g.Tn;
  const double loss = model.forward(g.tokens.data(), g.targets.data(), g.B, g.Tn) / n_tok;
  model.backward(static_cast<T>(1.0 / n_tok));  // 1/64: exact in float too
  for (size_t i = 0; i < g.slots.size(); ++i)  // every token routed, and dropped, as torch did
    EXPECT_EQ(model.moe_routing(int(i)).slot, g.slots[i]) << tag << " MoE layer " << i << "'s routing";

  const double loss_err = std::abs(loss - g.loss) / std::abs(g.loss);
  std::printf("golden %s loss: %.17g (torch %.17g), rel err %.1e (tol %.0e, %.1f%% of tol)\n",
              tag, loss, g.loss, loss_err, loss_tol, 100 * loss_err / loss_tol);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LE(loss_err, loss_tol) << tag << " loss";

  for (const ParamTensor& p : model.layout()) {
    double err2 = 0, ref2 = 0, max_abs = 0;
    bool finite = true;
    for (size_t i = p.offset; i < p.offset + p.numel; ++i) {
      const double got = static_cast<double>(model.grads()[i]);
      const double d = got - g.grads[i];
      finite = finite && std::isfinite(got);
      err2 += d * d;
      ref2 += g.grads[i] * g.grads[i];
      max_abs = std::max(max_abs, std::abs(d));
    }
    // Every tensor gets a nonzero gradient from this batch (wte through the tied head, wpe
    // because Tn = T), so a zero reference means a broken golden file, not a pass.
    ASSERT_GT(ref2, 0.0) << "golden gradient of " << p.name << " is zero";
    const double rel = std::sqrt(err2 / ref2);
    std::printf("golden %s %s: rel err %.1e (tol %.0e, %.1f%% of tol), max abs err %.1e\n", tag,
                p.name.c_str(), rel, grad_tol, 100 * rel / grad_tol, max_abs);
    EXPECT_TRUE(finite) << tag << " gradient of " << p.name << " is not finite";
    EXPECT_LE(rel, grad_tol) << tag << " gradient of " << p.name;
  }
}

// Gpt<double> vs the float64 torch model: the same real-number function and the same exact
// inputs (float32 -> float64 is exact), so they differ only in rounding order. Each op adds
// ~sqrt(n) u64 relative error with u64 = 2^-53 ~ 1.1e-16 and n <= 4C = 128, so ~1e-15 per op;
// forward plus backward chain some ~50 ops, giving ~1e-14 at worst (measured ~3e-16). 1e-11
// leaves three orders of magnitude for cancellation while a real bug shows far above it: swapping
// the tanh GELU for the erf one, whose difference is tiny at these small activations, still
// gives 2e-6..2e-5 (and a loss error of 5e-9), an eps or mask error 1e-3 or more.
TEST(GoldenPyTorch, LossAndGradsFloat64) {
  check_against_golden<double>("f64", "gpt_tiny.bin", 1e-11, 1e-11);
}

// Gpt<float> vs the float64 golden: only float32 rounding, u = 2^-24 ~ 6e-8. A dot product of
// length n (n <= 4C = 128 in the MLP, C = 32 in the LM head, hs = 8 and Tn = 16 in attention)
// has relative error ~ sqrt(n) u ~ 7e-7 for random-sign rounding; softmax, layernorm and gelu
// add O(u) each. The loss passes through ~2L+2 such stages (each layer's two matmul pairs, the
// head, log-sum-exp over V = 256) and the gradients through about twice that, so independent
// errors give ~ sqrt(20) * 7e-7 ~ 3e-6 per gradient tensor at worst, and the loss (a mean of
// 64 log-sum-exps of small logits) ~1e-7. Hence 1e-5 relative norm per tensor and 1e-6 on
// the loss. Measured: ~2e-7 per tensor (~3u) and ~5e-9 on the loss, so the margin is ~50x.
TEST(GoldenPyTorch, LossAndGradsFloat32) {
  check_against_golden<float>("f32", "gpt_tiny.bin", 1e-6, 1e-5);
}

// The MoE model (gpt_moe.bin: layer 0 a mixture of 4 experts, top-2, capacity factor 1 per sequence,
// 10 of 128 assignments dropped; balance loss 0.1, z-loss 0.01; layer 1 dense) against torch, the same
// bounds as the dense model's, by the same analysis: the MoE layer adds the router (a length-C dot
// product in double, its softmax, and the gates rounded to T once), a gate-weighted sum of at most
// topk = 2 expert outputs, and experts that are the FFN's ops on gathered rows; its losses' gradients
// are sums over at most Tn = 16 tokens in double. No new chain longer than the dense FFN's. The
// routing must be torch's exactly (the float model's router logits are computed in double from
// float activations whose relative error, ~1e-7, is far below the gaps between these logits).
TEST(GoldenPyTorch, MoeLossAndGradsFloat64) {
  check_against_golden<double>("moe f64", "gpt_moe.bin", 1e-11, 1e-11);
}

TEST(GoldenPyTorch, MoeLossAndGradsFloat32) {
  check_against_golden<float>("moe f32", "gpt_moe.bin", 1e-6, 1e-5);
}

}  // namespace
}  // namespace dtb
