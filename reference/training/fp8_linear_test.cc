// Tests of the FP8 linear's recipes (reference/training/fp8_linear.h) on CpuOps<float>: the
// scales each recipe gives, worked by hand; the delayed recipe's records and update; and the
// distributed property the amax reduction exists for: a column-parallel shard whose amaxes are
// reduced over its TP group computes bitwise the columns of the unsharded linear, and without
// the reduction it does not (the negative control).
#include "reference/training/fp8_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace dtb {
namespace {

std::vector<float> rnd(size_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Fp8Settings settings(Fp8Recipe r, int history = 1) {
  Fp8Settings s;
  s.recipe = r;
  s.fp8_format = r == Fp8Recipe::delayed || r == Fp8Recipe::current ? Fp8FormatChoice::hybrid : Fp8FormatChoice::e4m3;
  s.delayed.amax_history_len = history;
  return s;
}

TEST(Fp8Recipes, CurrentScalingTakesEachTensorsAmax) {
  // The scales are 448 / amax (E4M3 input and weight) and 57344 / amax (E5M2 gradient), from the
  // tensors as they are; the fprop and the backward equal the ops called with those operands.
  CpuOps<float> ops;
  std::mt19937 rng(1);
  const int N = 6, C = 20, OC = 10;
  const std::vector<float> x = rnd(size_t(N) * C, rng, 1.0f), w = rnd(size_t(OC) * C, rng, 0.02f),
                           dy = rnd(size_t(N) * OC, rng, 1e-4f);
  const Fp8Settings s = settings(Fp8Recipe::current);
  Fp8LinearState st;
  int calls = 0;
  const AmaxReduce count = [&](float*, size_t n) {
    ++calls;
    EXPECT_EQ(n, calls == 1 ? 2u : 3u) << "the fprop reduces x and w; the backward dy, x and w";
  };
  std::vector<float> out(size_t(N) * OC), want(out.size());
  fp8_fprop<float>(ops, s, st, out.data(), x.data(), w.data(), nullptr, N, C, OC, count);
  const Fp8Operand ox{Fp8Format::e4m3, Fp8Scaling::per_tensor, 448.0f / fp8_amax(x.data(), x.size())},
      ow{Fp8Format::e4m3, Fp8Scaling::per_tensor, 448.0f / fp8_amax(w.data(), w.size())},
      oy{Fp8Format::e5m2, Fp8Scaling::per_tensor, 57344.0f / fp8_amax(dy.data(), dy.size())};
  ops.fp8_matmul_forward(want.data(), x.data(), w.data(), nullptr, N, C, OC, ox, ow);
  EXPECT_EQ(out, want);
  std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f), dx2 = dx, dw2 = dw;
  fp8_bprop<float>(ops, s, st, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC, count);
  ops.fp8_matmul_backward(dx2.data(), dw2.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC, oy, ox, ow);
  EXPECT_EQ(dx, dx2);
  EXPECT_EQ(dw, dw2);
  EXPECT_EQ(calls, 2);  // one reduction per GEMM call
  // The delayed states are neither read nor written by current scaling.
  EXPECT_EQ(st.x.amax_history[0], 0.0f);
  EXPECT_EQ(st.x.scale, 1.0f);
}

TEST(Fp8Recipes, DelayedRecordsThenUpdatesOncePerStep) {
  // A step at scale 1 (TE's initial scale), recording the local amaxes: x 2, w 0.5 in the fprop,
  // dy 4 in the backward; the update reduces all of them in one call (here: with a peer whose
  // amaxes are 3, 0.25 and 1) and sets scale = FP8_MAX / amax: x 448 / 3, w 448 / 0.5, dy
  // 57344 / 4.
  CpuOps<float> ops;
  const int N = 2, C = 2, OC = 2;
  const std::vector<float> x = {2.0f, -1.0f, 0.5f, 1.0f}, w = {0.5f, -0.25f, 0.125f, 0.0f},
                           dy = {-4.0f, 1.0f, 2.0f, 0.5f};
  const Fp8Settings s = settings(Fp8Recipe::delayed, 4);
  Fp8LinearState st(4);
  std::vector<float> out(4), dx(4, 0.0f), dw(4, 0.0f);
  fp8_fprop<float>(ops, s, st, out.data(), x.data(), w.data(), nullptr, N, C, OC);
  EXPECT_EQ(st.x.amax_history[0], 2.0f);
  EXPECT_EQ(st.w.amax_history[0], 0.5f);
  // At scale 1 every value here is an E4M3 code: the product is exact.
  EXPECT_EQ(out, (std::vector<float>{2.0f * 0.5f + -1.0f * -0.25f, 2.0f * 0.125f, 0.5f * 0.5f + 1.0f * -0.25f,
                                     0.5f * 0.125f}));
  fp8_bprop<float>(ops, s, st, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, C, OC);
  EXPECT_EQ(st.dy.amax_history[0], 4.0f);
  int calls = 0;
  const std::vector<float> peer = {3.0f, 0.25f, 1.0f};
  fp8_update({&st}, s, [&](float* a, size_t n) {
    ++calls;
    ASSERT_EQ(n, 3u);
    for (size_t i = 0; i < n; ++i) a[i] = std::max(a[i], peer[i]);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(st.x.scale, 448.0f / 3.0f);
  EXPECT_EQ(st.w.scale, 896.0f);
  EXPECT_EQ(st.dy.scale, 14336.0f);
  EXPECT_EQ(st.x.amax_history, (std::vector<float>{0, 0, 0, 3}));
  // The next step quantizes with the updated scales, the backward's three operands included.
  const Fp8Operand ox{Fp8Format::e4m3, Fp8Scaling::per_tensor, 448.0f / 3.0f},
      ow{Fp8Format::e4m3, Fp8Scaling::per_tensor, 896.0f}, oy{Fp8Format::e5m2, Fp8Scaling::per_tensor, 14336.0f};
  std::vector<float> out2(4), want(4);
  fp8_fprop<float>(ops, s, st, out2.data(), x.data(), w.data(), nullptr, N, C, OC);
  ops.fp8_matmul_forward(want.data(), x.data(), w.data(), nullptr, N, C, OC, ox, ow);
  EXPECT_EQ(out2, want);
  // Inputs that the updated scales round (1/3 is no FP8 value at any scale), so a wrong scale shows.
  const std::vector<float> x3 = {1.0f / 3, -1.1f, 0.7f, 1.9f}, w3 = {0.3f, -0.2f, 0.11f, 0.45f},
                           dy3 = {-3.3f, 1.7f, 0.9f, 2.2f};
  std::vector<float> dx2(4, 0.5f), dw2(4, 0.25f), dxw = dx2, dww = dw2;
  fp8_bprop<float>(ops, s, st, dx2.data(), dw2.data(), nullptr, dy3.data(), x3.data(), w3.data(), N, C, OC);
  ops.fp8_matmul_backward(dxw.data(), dww.data(), nullptr, dy3.data(), x3.data(), w3.data(), N, C, OC, oy, ox, ow);
  EXPECT_EQ(dx2, dxw);
  EXPECT_EQ(dw2, dww);
}

TEST(Fp8Recipes, BlockRecipesReduceNothing) {
  CpuOps<float> ops;
  std::mt19937 rng(3);
  const int N = 4, C = 160, OC = 8;
  const std::vector<float> x = rnd(size_t(N) * C, rng, 1.0f), w = rnd(size_t(OC) * C, rng, 0.02f);
  for (Fp8Recipe r : {Fp8Recipe::blockwise, Fp8Recipe::mxfp8}) {
    const Fp8Settings s = settings(r);
    Fp8LinearState st;
    std::vector<float> out(size_t(N) * OC), want(out.size());
    fp8_fprop<float>(ops, s, st, out.data(), x.data(), w.data(), nullptr, N, C, OC,
              [](float*, size_t) { ADD_FAILURE() << "a block recipe reduced an amax"; });
    ops.fp8_matmul_forward(want.data(), x.data(), w.data(), nullptr, N, C, OC, fp8_operand(s, Fp8Role::input),
                           fp8_operand(s, Fp8Role::weight));
    EXPECT_EQ(out, want) << to_string(r);
    fp8_update({&st}, s, [](float*, size_t) { ADD_FAILURE() << "a block recipe updated a history"; });
  }
}

TEST(Fp8Recipes, ColumnShardsWithTheReducedAmaxAreTheWholeLinearsColumns) {
  // Two TP ranks, each with half of the weight's rows (a column-parallel linear, the input
  // replicated): with the amaxes reduced over the pair, every code and scale is the unsharded
  // linear's, so each rank's output columns and weight-gradient rows equal the whole linear's bit
  // for bit (current and delayed scaling). Without the reduction (each rank its own amax) they
  // differ: the bug the reduction exists for.
  CpuOps<float> ops;
  std::mt19937 rng(5);
  const int N = 8, C = 24, OC = 12, half = OC / 2;
  const std::vector<float> x = rnd(size_t(N) * C, rng, 1.0f), w = rnd(size_t(OC) * C, rng, 0.02f),
                           dy = rnd(size_t(N) * OC, rng, 1e-3f);
  // Make the two halves' amaxes differ widely, so their own scales differ from the whole's.
  std::vector<float> wt = w;
  for (size_t i = size_t(half) * C; i < wt.size(); ++i) wt[i] *= 8.0f;
  auto rows = [](const std::vector<float>& m, int r0, int r1, int cols) {
    return std::vector<float>(m.begin() + ptrdiff_t(r0) * cols, m.begin() + ptrdiff_t(r1) * cols);
  };
  auto cols = [](const std::vector<float>& m, int n, int c0, int c1, int ncols) {
    std::vector<float> out;
    for (int i = 0; i < n; ++i)
      for (int c = c0; c < c1; ++c) out.push_back(m[size_t(i) * ncols + c]);
    return out;
  };
  for (Fp8Recipe r : {Fp8Recipe::current, Fp8Recipe::delayed}) {
    SCOPED_TRACE(to_string(r));
    const Fp8Settings s = settings(r);
    // The whole linear: one step (delayed: a step to fill the histories, an update, then the
    // compared step at the updated scales).
    auto run = [&](int r0, int r1, const AmaxReduce& fwd, const AmaxReduce& bwd, std::vector<float>& out,
                   std::vector<float>& dw) {
      Fp8LinearState st;
      const std::vector<float> ws = rows(wt, r0, r1, C), dys = cols(dy, N, r0, r1, OC);
      const int oc = r1 - r0;
      out.assign(size_t(N) * oc, 0.0f), dw.assign(size_t(oc) * C, 0.0f);
      for (int step = 0; step < (r == Fp8Recipe::delayed ? 2 : 1); ++step) {
        if (step == 1)
          fp8_update({&st}, s, [&](float* a, size_t n) {
            if (fwd) fwd(a, 2);  // x, w
            if (bwd) bwd(a + 2, n - 2);  // dy
          });
        std::fill(dw.begin(), dw.end(), 0.0f);
        fp8_fprop<float>(ops, s, st, out.data(), x.data(), ws.data(), nullptr, N, C, oc, fwd);
        fp8_bprop<float>(ops, s, st, nullptr, dw.data(), nullptr, dys.data(), x.data(), nullptr, N, C, oc, bwd);
      }
    };
    std::vector<float> out, dw;
    run(0, OC, {}, {}, out, dw);
    // The peer's amaxes (x, w) and (dy, x, w) as the other rank measures them.
    for (int rank : {0, 1}) {
      const int r0 = rank * half, r1 = r0 + half, p0 = half - r0, p1 = p0 + half;
      const std::vector<float> pw = rows(wt, p0, p1, C), pdy = cols(dy, N, p0, p1, OC);
      const float ax = fp8_amax(x.data(), x.size()), aw = fp8_amax(pw.data(), pw.size()),
                  ady = fp8_amax(pdy.data(), pdy.size());
      const AmaxReduce fwd = [&](float* a, size_t) { a[0] = std::max(a[0], ax), a[1] = std::max(a[1], aw); };
      const AmaxReduce bwd = [&](float* a, size_t n) {
        a[0] = std::max(a[0], ady);
        if (n > 1) a[1] = std::max(a[1], ax);
      };
      std::vector<float> o, d;
      run(r0, r1, fwd, bwd, o, d);
      EXPECT_EQ(o, cols(out, N, r0, r1, OC)) << "rank " << rank;
      EXPECT_EQ(d, rows(dw, r0, r1, C)) << "rank " << rank;
      // The negative control: rank 0's own weight amax is an eighth of the whole's, so its own
      // scale quantizes differently (rank 1's own amax is the whole's: it matches either way).
      run(r0, r1, {}, {}, o, d);
      if (rank == 0) {
        EXPECT_NE(o, cols(out, N, r0, r1, OC)) << "rank 0 matched without the reduction";
      }
    }
  }
}

TEST(Fp8Recipes, TilesMustNotStraddleAShard) {
  auto refusal = [](Fp8Recipe r, const GptConfig& m, const ParallelLayout& l, int64_t tokens,
                    int64_t seq = 1024) -> std::string {
    try {
      validate_fp8_shards(settings(r), m, l, tokens, seq);
      return "";
    } catch (const InputError& e) {
      return e.what();
    }
  };
  GptConfig gpt;
  gpt.C = 256, gpt.NH = 4;
  ParallelLayout tp2, tp4, dp2;
  tp2.tp = 2, tp4.tp = 4, dp2.dp = 2;
  // Per-tensor recipes have no tiles: nothing is refused.
  EXPECT_EQ(refusal(Fp8Recipe::delayed, gpt, tp4, 7), "");
  EXPECT_EQ(refusal(Fp8Recipe::current, gpt, dp2, 7), "");
  // Blockwise: C / tp = 128 at TP 2 fits; 64 at TP 4 does not.
  EXPECT_EQ(refusal(Fp8Recipe::blockwise, gpt, tp2, 100), "");  // tokens not split: not checked
  EXPECT_EQ(refusal(Fp8Recipe::blockwise, gpt, tp4, 128),
            "fp8 recipe blockwise: the attention's q features per TP rank (C / tp) = 64 is not a multiple of its "
            "128-wide tiles, so a tile would straddle a shard and scale differently from the whole tensor's; choose "
            "sizes that divide into whole tiles, or the delayed or current recipe");
  // MXFP8's 32-wide blocks fit 64, not 16 (C = 64 at TP 4).
  EXPECT_EQ(refusal(Fp8Recipe::mxfp8, gpt, tp4, 32), "");
  GptConfig small;  // C 64
  EXPECT_NE(refusal(Fp8Recipe::mxfp8, small, tp4, 32).find("(C / tp) = 16 is not a multiple of its 32-wide"),
            std::string::npos);
  // The tokens of a micro-batch, when the layout splits them.
  EXPECT_NE(refusal(Fp8Recipe::blockwise, gpt, dp2, 96).find("the tokens of a micro-batch on one rank (the wgrad's "
                                                             "reduction) = 96 is not a multiple of its 128-wide"),
            std::string::npos);
  EXPECT_EQ(refusal(Fp8Recipe::blockwise, gpt, dp2, 256), "");
  ParallelLayout mb;
  mb.micro_batches = 2;
  EXPECT_NE(refusal(Fp8Recipe::mxfp8, gpt, mb, 48).find("= 48 is not a multiple of its 32-wide"), std::string::npos);
  // Context parallelism: a rank's tokens are 2 chunks of seq / (2 cp) of each sequence; a tile must
  // not straddle two, though the rank's micro-batch (2 sequences of 128: 128 tokens a rank) divides.
  ParallelLayout cp2;
  cp2.cp = 2;
  EXPECT_EQ(refusal(Fp8Recipe::mxfp8, gpt, cp2, 128, 128), "");  // chunks of 32
  const std::string chunk = refusal(Fp8Recipe::blockwise, gpt, cp2, 128, 128);
  EXPECT_NE(chunk.find("a sequence's context-parallel chunk (seq_len / (2 context_parallel)) = 32 is not a multiple "
                       "of its 128-wide tiles"),
            std::string::npos)
      << chunk;
  // Under CP the current recipe is refused too (validate_fp8_layout): the advice names the delayed one.
  EXPECT_NE(chunk.find("whole tiles, or the delayed recipe"), std::string::npos) << chunk;
  EXPECT_EQ(refusal(Fp8Recipe::blockwise, gpt, cp2, 512, 512), "");
  // Llama: k and v of 2 KV heads of 64 at TP 2 are 64 features a rank; the SwiGLU's gate and up
  // F / tp (F = 768: 384) fit 128.
  GptConfig llama = gpt;
  llama.arch = ModelArch::llama, llama.num_kv_heads = 2;
  EXPECT_NE(refusal(Fp8Recipe::blockwise, llama, tp2, 128).find("k and v features per TP rank (KV heads a rank x "
                                                                "head_size) = 64"),
            std::string::npos);
  // Fewer KV heads than TP ranks: each rank holds one whole head (128 features here), not KV hs / tp.
  GptConfig wide = llama;
  wide.C = 512, wide.num_kv_heads = 2;  // hs 128; 2 KV heads over 4 ranks: one a rank
  EXPECT_EQ(refusal(Fp8Recipe::blockwise, wide, tp4, 128), "");
  EXPECT_EQ(refusal(Fp8Recipe::mxfp8, llama, tp2, 128), "");
  llama.num_kv_heads = 4;
  EXPECT_EQ(refusal(Fp8Recipe::blockwise, llama, tp2, 128), "");
  llama.ffn_hidden = 640;  // 320 a rank
  EXPECT_NE(refusal(Fp8Recipe::blockwise, llama, tp2, 128).find("gate and up features per TP rank (ffn_hidden / tp) = "
                                                                "320"),
            std::string::npos);
}

}  // namespace
}  // namespace dtb
