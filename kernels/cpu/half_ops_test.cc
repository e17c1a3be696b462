// Tests of HalfCpuOps<H> (kernels/cpu/half_ops.h), H = bf16 and fp16. Every op is pinned
// bitwise to its recipe: inputs representable in H (random floats rounded to H), then the
// float kernel of kernels/cpu/ops.h on the converted inputs, each H output rounded once, the
// float (A) outputs untouched. Accumulating ops start from a non-zero output; sizes that
// cross the chunk boundaries of the chunked ops are included. Then the mixed-precision
// points: master weights keep updates a plain H parameter loses, fp16 overflows where bf16
// does not, the conversion scratch is reused across calls.
#include "kernels/cpu/half_ops.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/fp8_gemm.h"
#include "kernels/cpu/half_ops_test_util.h"
#include "kernels/cpu/ops.h"

namespace dtb {
namespace {

using namespace half_test;

template <typename H>
class HalfOps : public ::testing::Test {
 protected:
  HalfCpuOps<H> ops;
  Rng rng{42};
};

TYPED_TEST_SUITE(HalfOps, HalfTypes, HalfNames);

TYPED_TEST(HalfOps, InterfaceAndMemory) {
  using H = TypeParam;
  static_assert(std::is_same_v<typename Ops<H>::A, float>);
  Ops<H>& ops = this->ops;
  EXPECT_EQ(ops.backend(), "cpu");
  // zero: bits 0, whatever was there (-0, NaN, inf).
  HVec<H> x = {H(-0.0f), H(NAN), H(INFINITY), H(3.5f)};
  ops.zero(x.data(), x.size());
  for (H v : x) EXPECT_EQ(v.bits, 0u);
  // copies: bytes.
  HVec<H> src = rand_h<H>(37, this->rng), dst(37), back(37);
  ops.copy_from_host(dst.data(), src.data(), src.size() * sizeof(H));
  EXPECT_TRUE(same_bits(dst, src));
  ops.copy_to_host(back.data(), dst.data(), dst.size() * sizeof(H));
  EXPECT_TRUE(same_bits(back, src));
  ops.copy_to_host(nullptr, nullptr, 0);  // zero bytes: nothing touched
}

TYPED_TEST(HalfOps, EncoderForwardAndBackward) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int B = 3, Tn = 7, C = 12, V = 9;  // V < B*T: tokens repeat, rows accumulate twice or more
  const size_t BTC = size_t(B) * Tn * C;
  const Tok tok = rand_tokens(size_t(B) * Tn, 0, V, rng);
  const HVec<H> wte = rand_h<H>(size_t(V) * C, rng), wpe = rand_h<H>(size_t(Tn) * C, rng);
  HVec<H> out = rand_h<H>(BTC, rng);  // garbage: forward writes
  this->ops.encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
  FVec of(BTC), wtef = widen(wte), wpef = widen(wpe);
  cpu::encoder_forward<float>(of.data(), tok.data(), wtef.data(), wpef.data(), B, Tn, C);
  EXPECT_TRUE(same_bits(out, round_to<H>(of)));

  const HVec<H> dout = rand_h<H>(BTC, rng);
  HVec<H> dwte = rand_h<H>(size_t(V + 3) * C, rng), dwpe = rand_h<H>(size_t(Tn) * C, rng);  // rows >= V untouched
  FVec dwtef = widen(dwte), dwpef = widen(dwpe), doutf = widen(dout);
  this->ops.encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, Tn, C);
  cpu::encoder_backward<float>(dwtef.data(), dwpef.data(), doutf.data(), tok.data(), B, Tn, C);
  EXPECT_TRUE(same_bits(dwte, round_to<H>(dwtef)));
  EXPECT_TRUE(same_bits(dwpe, round_to<H>(dwpef)));
}

TYPED_TEST(HalfOps, EmbeddingShardForwardAndBackward) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int B = 2, Tn = 9, C = 8, V = 30, vb = 10, ve = 22, Vl = ve - vb;
  const size_t BTC = size_t(B) * Tn * C;
  const Tok tok = rand_tokens(size_t(B) * Tn, 0, V, rng);
  const HVec<H> wte = rand_h<H>(size_t(Vl) * C, rng), wpe = rand_h<H>(size_t(Tn) * C, rng);
  const HVec<H> dout = rand_h<H>(BTC, rng);
  for (bool with_wpe : {true, false}) {
    SCOPED_TRACE(with_wpe ? "with wpe" : "without wpe");
    HVec<H> out = rand_h<H>(BTC, rng);
    this->ops.embedding_shard_forward(out.data(), tok.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, Tn,
                                      C, vb, ve);
    FVec of(BTC), wtef = widen(wte), wpef = widen(wpe);
    cpu::embedding_shard_forward<float>(of.data(), tok.data(), wtef.data(), with_wpe ? wpef.data() : nullptr, B,
                                        Tn, C, vb, ve);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));

    HVec<H> dwte = rand_h<H>(size_t(Vl) * C, rng), dwpe = rand_h<H>(size_t(Tn) * C, rng);
    FVec dwtef = widen(dwte), dwpef = widen(dwpe), doutf = widen(dout);
    this->ops.embedding_shard_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, dout.data(), tok.data(), B,
                                       Tn, C, vb, ve);
    cpu::embedding_shard_backward<float>(dwtef.data(), with_wpe ? dwpef.data() : nullptr, doutf.data(), tok.data(),
                                         B, Tn, C, vb, ve);
    EXPECT_TRUE(same_bits(dwte, round_to<H>(dwtef)));
    EXPECT_TRUE(same_bits(dwpe, round_to<H>(dwpef)));  // untouched when null
  }
}

TYPED_TEST(HalfOps, LayernormForwardAndBackward) {
  using H = TypeParam;
  Rng& rng = this->rng;
  // 5000 rows of 16 cross the row chunks (kChunk / 16 rows each).
  for (int N : {6, 5000}) {
    const int C = 16;
    SCOPED_TRACE("N " + std::to_string(N));
    const size_t NC = size_t(N) * C;
    const HVec<H> inp = rand_h<H>(NC, rng, 1.f, 3.f), w = rand_h<H>(C, rng, 0.5f, 1.5f), b = rand_h<H>(C, rng);
    HVec<H> out = rand_h<H>(NC, rng);
    FVec mean(N, -7.f), rstd(N, -7.f);
    this->ops.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    FVec of(NC), mf(N), rf(N), inpf = widen(inp), wf = widen(w), bf = widen(b);
    cpu::layernorm_forward<float>(of.data(), mf.data(), rf.data(), inpf.data(), wf.data(), bf.data(), N, C);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));
    EXPECT_TRUE(same_bits(mean, mf));  // A: fp32 statistics, not rounded to H
    EXPECT_TRUE(same_bits(rstd, rf));

    const HVec<H> dout = rand_h<H>(NC, rng);
    HVec<H> dinp = rand_h<H>(NC, rng), dw = rand_h<H>(C, rng), db = rand_h<H>(C, rng);
    FVec dinpf = widen(dinp), dwf = widen(dw), dbf = widen(db), doutf = widen(dout);
    this->ops.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                                 rstd.data(), N, C);
    cpu::layernorm_backward<float>(dinpf.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), wf.data(),
                                   mf.data(), rf.data(), N, C);
    EXPECT_TRUE(same_bits(dinp, round_to<H>(dinpf)));
    EXPECT_TRUE(same_bits(dw, round_to<H>(dwf)));  // one rounding for all N rows' sum
    EXPECT_TRUE(same_bits(db, round_to<H>(dbf)));
  }
}

TYPED_TEST(HalfOps, MatmulForwardAndBackward) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int N = 19, C = 24, OC = 40;
  const HVec<H> inp = rand_h<H>(size_t(N) * C, rng), w = rand_h<H>(size_t(OC) * C, rng);
  const HVec<H> bias = rand_h<H>(OC, rng), dout = rand_h<H>(size_t(N) * OC, rng);
  const FVec inpf = widen(inp), wf = widen(w), biasf = widen(bias), doutf = widen(dout);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    HVec<H> out = rand_h<H>(size_t(N) * OC, rng);
    this->ops.matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
    FVec of(size_t(N) * OC);
    cpu::matmul_forward<float>(of.data(), inpf.data(), wf.data(), with_bias ? biasf.data() : nullptr, N, C, OC);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));

    // dinp and dweight each present or null (a zero-bubble schedule's B and W halves).
    for (int parts : {3, 1, 2}) {
      const bool with_dinp = parts & 1, with_dw = parts & 2;
      SCOPED_TRACE(std::string(with_dinp ? "dinp" : "no dinp") + (with_dw ? ", dweight" : ", no dweight"));
      HVec<H> dinp = rand_h<H>(size_t(N) * C, rng), dw = rand_h<H>(size_t(OC) * C, rng), db = rand_h<H>(OC, rng);
      FVec dinpf = widen(dinp), dwf = widen(dw), dbf = widen(db);
      this->ops.matmul_backward(with_dinp ? dinp.data() : nullptr, with_dw ? dw.data() : nullptr,
                                with_bias ? db.data() : nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
      cpu::matmul_backward<float>(with_dinp ? dinpf.data() : nullptr, with_dw ? dwf.data() : nullptr,
                                  with_bias ? dbf.data() : nullptr, doutf.data(), inpf.data(), wf.data(), N, C, OC);
      EXPECT_TRUE(same_bits(dinp, round_to<H>(dinpf)));  // untouched when null
      EXPECT_TRUE(same_bits(dw, round_to<H>(dwf)));
      EXPECT_TRUE(same_bits(db, round_to<H>(dbf)));
    }
  }
}

TYPED_TEST(HalfOps, Fp8MatmulForwardAndBackward) {
  // The FP8 linear's recipe: the float FP8 linear (kernels/cpu/fp8_gemm.h) on the widened
  // values, each H output rounded once, accumulators widened first; under each recipe's
  // operands, with C = 140 crossing a 128-tile edge. amax: fp8_amax of the widened values.
  using H = TypeParam;
  Rng& rng = this->rng;
  const int N = 9, C = 140, OC = 36;
  const HVec<H> inp = rand_h<H>(size_t(N) * C, rng), w = rand_h<H>(size_t(OC) * C, rng);
  const HVec<H> bias = rand_h<H>(OC, rng), dout = rand_h<H>(size_t(N) * OC, rng, -1e-3f, 1e-3f);
  const FVec inpf = widen(inp), wf = widen(w), biasf = widen(bias), doutf = widen(dout);
  EXPECT_EQ(this->ops.amax(w.data(), w.size()), fp8_amax(wf.data(), wf.size()));
  EXPECT_EQ(this->ops.amax(w.data(), 0), 0.0f);
  const HVec<H> last = {H(0.5f), H(-2.0f), H(1.0f), H(-7.0f)};  // the largest magnitude, negative, at the end
  EXPECT_EQ(this->ops.amax(last.data(), last.size()), 7.0f);
  struct Recipe { Fp8Operand dy, x, w; };
  const Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  for (const Recipe& r : {Recipe{{e5, Fp8Scaling::per_tensor, 3e6f}, {e4, Fp8Scaling::per_tensor, 300.0f},
                                 {e4, Fp8Scaling::per_tensor, 400.0f}},
                          Recipe{{e4, Fp8Scaling::tile_1x128}, {e4, Fp8Scaling::tile_1x128},
                                 {e4, Fp8Scaling::block_128x128}},
                          Recipe{{e5, Fp8Scaling::mx_1x32}, {e4, Fp8Scaling::mx_1x32}, {e4, Fp8Scaling::mx_1x32}}}) {
    SCOPED_TRACE(to_string(r.x.scaling));
    HVec<H> out = rand_h<H>(size_t(N) * OC, rng);
    this->ops.fp8_matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC, r.x, r.w);
    FVec of(size_t(N) * OC);
    cpu::fp8_linear_forward(of.data(), inpf.data(), wf.data(), biasf.data(), N, C, OC, r.x, r.w);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));
    HVec<H> dinp = rand_h<H>(size_t(N) * C, rng), dw = rand_h<H>(size_t(OC) * C, rng), db = rand_h<H>(OC, rng);
    FVec dinpf = widen(dinp), dwf = widen(dw), dbf = widen(db);
    this->ops.fp8_matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC, r.dy,
                                  r.x, r.w);
    cpu::fp8_linear_backward(dinpf.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), wf.data(), N, C, OC,
                             r.dy, r.x, r.w);
    EXPECT_TRUE(same_bits(dinp, round_to<H>(dinpf)));
    EXPECT_TRUE(same_bits(dw, round_to<H>(dwf)));
    EXPECT_TRUE(same_bits(db, round_to<H>(dbf)));
  }
}

TEST(CpuOpsFp8, FloatRunsTheFp8LinearTheOracleRefuses) {
  CpuOps<float> f;
  const std::vector<float> x = {1.0f, -3.0f, 0.5f, 2.0f};
  std::vector<float> out(4), want(4);
  const Fp8Operand op{Fp8Format::e4m3, Fp8Scaling::per_tensor, 1.0f};
  EXPECT_EQ(f.amax(x.data(), x.size()), 3.0f);
  f.fp8_matmul_forward(out.data(), x.data(), x.data(), nullptr, 2, 2, 2, op, op);
  cpu::fp8_linear_forward(want.data(), x.data(), x.data(), nullptr, 2, 2, 2, op, op);
  EXPECT_EQ(out, want);
  CpuOps<double> d;
  const std::vector<double> y(4, 1.0);
  std::vector<double> o(4);
  EXPECT_THROW(d.amax(y.data(), y.size()), InputError);
  EXPECT_THROW(d.fp8_matmul_forward(o.data(), y.data(), y.data(), nullptr, 2, 2, 2, op, op), InputError);
  EXPECT_THROW(d.fp8_matmul_backward(o.data(), nullptr, nullptr, y.data(), y.data(), y.data(), 2, 2, 2, op, op, op),
               InputError);
}

TYPED_TEST(HalfOps, AttentionForwardAndBackward) {
  using H = TypeParam;
  Rng& rng = this->rng;
  struct Shape {
    int B, Tn, C, NH;
  };
  // The second shape's batch entries do not fit one chunk: several chunks per call.
  for (Shape s : {Shape{2, 8, 16, 4}, Shape{6, 64, 32, 2}}) {
    const int B = s.B, Tn = s.Tn, C = s.C, NH = s.NH;
    SCOPED_TRACE("B " + std::to_string(B) + " T " + std::to_string(Tn));
    const size_t nq = size_t(B) * Tn * 3 * C, no = size_t(B) * Tn * C, na = size_t(B) * NH * Tn * Tn;
    const HVec<H> qkv = rand_h<H>(nq, rng, -2.f, 2.f);
    HVec<H> out = rand_h<H>(no, rng), att = rand_h<H>(na, rng);
    this->ops.attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
    FVec of(no), af(na), qkvf = widen(qkv);
    cpu::attention_forward<float>(of.data(), af.data(), qkvf.data(), B, Tn, C, NH);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));
    EXPECT_TRUE(same_bits(att, round_to<H>(af)));

    // Backward reads the stored (H) att, as a half model does.
    const HVec<H> dout = rand_h<H>(no, rng);
    HVec<H> dqkv = rand_h<H>(nq, rng), scratch(na);
    FVec dqkvf = widen(dqkv), doutf = widen(dout), attf = widen(att), scratchf(na);
    this->ops.attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH);
    cpu::attention_backward<float>(dqkvf.data(), scratchf.data(), doutf.data(), qkvf.data(), attf.data(), B, Tn, C,
                                   NH);
    EXPECT_TRUE(same_bits(dqkv, round_to<H>(dqkvf)));
  }
}

TYPED_TEST(HalfOps, GeluResidualScale) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const size_t big = 2 * HalfCpuOps<H>::kChunk + 77;  // three chunks
  for (size_t n : {size_t(33), big}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const HVec<H> x = rand_h<H>(n, rng, -4.f, 4.f), dout = rand_h<H>(n, rng);
    const FVec xf = widen(x), doutf = widen(dout);
    HVec<H> out = rand_h<H>(n, rng);
    this->ops.gelu_forward(out.data(), x.data(), n);
    FVec of(n);
    cpu::gelu_forward<float>(of.data(), xf.data(), n);
    EXPECT_TRUE(same_bits(out, round_to<H>(of)));

    HVec<H> dinp = rand_h<H>(n, rng);
    FVec dinpf = widen(dinp);
    this->ops.gelu_backward(dinp.data(), x.data(), dout.data(), n);
    cpu::gelu_backward<float>(dinpf.data(), xf.data(), doutf.data(), n);
    EXPECT_TRUE(same_bits(dinp, round_to<H>(dinpf)));

    // residual: a separate out, then out aliasing a, then out aliasing b.
    const HVec<H> a = rand_h<H>(n, rng), b = rand_h<H>(n, rng);
    FVec sum(n);
    const FVec af = widen(a), bf = widen(b);
    cpu::residual_forward<float>(sum.data(), af.data(), bf.data(), n);
    const HVec<H> want = round_to<H>(sum);
    HVec<H> r(n), ra = a, rb = b;
    this->ops.residual_forward(r.data(), a.data(), b.data(), n);
    this->ops.residual_forward(ra.data(), ra.data(), b.data(), n);
    this->ops.residual_forward(rb.data(), a.data(), rb.data(), n);
    EXPECT_TRUE(same_bits(r, want));
    EXPECT_TRUE(same_bits(ra, want));
    EXPECT_TRUE(same_bits(rb, want));

    const float factor = 0.3719f;  // an A argument: not rounded to H
    HVec<H> sx = x;
    FVec sxf = xf;
    this->ops.scale(sx.data(), factor, n);
    cpu::scale<float>(sxf.data(), factor, n);
    EXPECT_TRUE(same_bits(sx, round_to<H>(sxf)));
  }
}

TYPED_TEST(HalfOps, AddBias) {
  using H = TypeParam;
  Rng& rng = this->rng;
  for (int N : {5, 5000}) {
    const int OC = 16;
    SCOPED_TRACE("N " + std::to_string(N));
    const HVec<H> bias = rand_h<H>(OC, rng);
    HVec<H> out = rand_h<H>(size_t(N) * OC, rng);
    FVec outf = widen(out), biasf = widen(bias);
    this->ops.add_bias(out.data(), bias.data(), N, OC);
    cpu::add_bias<float>(outf.data(), biasf.data(), N, OC);
    EXPECT_TRUE(same_bits(out, round_to<H>(outf)));
  }
}

TYPED_TEST(HalfOps, CrossEntropyForwardAndBackward) {
  using H = TypeParam;
  Rng& rng = this->rng;
  for (int N : {7, 1700}) {  // 1700 rows of 40 cross the row chunks
    const int V = 40;
    SCOPED_TRACE("N " + std::to_string(N));
    const size_t NV = size_t(N) * V;
    const HVec<H> logits = rand_h<H>(NV, rng, -4.f, 4.f);
    const Tok tgt = rand_tokens(N, 0, V, rng);
    HVec<H> probs = rand_h<H>(NV, rng);
    FVec losses(N, -1.f);
    this->ops.crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
    FVec pf(NV), lf(N), logitsf = widen(logits);
    cpu::crossentropy_forward<float>(lf.data(), pf.data(), logitsf.data(), tgt.data(), N, V);
    EXPECT_TRUE(same_bits(probs, round_to<H>(pf)));
    EXPECT_TRUE(same_bits(losses, lf));  // A: fp32 losses

    const float dloss = 1.f / float(N);
    HVec<H> dlogits = rand_h<H>(NV, rng);  // garbage: backward writes
    FVec dlf(NV, 5.f), probsf = widen(probs);
    this->ops.crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, V);
    cpu::crossentropy_backward<float>(dlf.data(), probsf.data(), tgt.data(), dloss, N, V);
    EXPECT_TRUE(same_bits(dlogits, round_to<H>(dlf)));
  }
}

TYPED_TEST(HalfOps, CrossEntropyShardOps) {
  using H = TypeParam;
  Rng& rng = this->rng;
  for (int N : {7, 3500}) {  // 3500 rows of 20 cross the row chunks
    const int V = 40, Vl = 20, vb = 20;  // the second half of the vocabulary; targets in either half
    SCOPED_TRACE("N " + std::to_string(N));
    const size_t NV = size_t(N) * Vl;
    const HVec<H> logits = rand_h<H>(NV, rng, -4.f, 4.f);
    const FVec logitsf = widen(logits);
    const Tok tgt = rand_tokens(N, 0, V, rng);

    FVec maxes(N), mf(N);
    this->ops.crossentropy_shard_max(maxes.data(), logits.data(), N, Vl);
    cpu::crossentropy_shard_max<float>(mf.data(), logitsf.data(), N, Vl);
    EXPECT_TRUE(same_bits(maxes, mf));

    FVec sums(2 * size_t(N)), sf(2 * size_t(N));
    this->ops.crossentropy_shard_sums(sums.data(), logits.data(), maxes.data(), tgt.data(), N, Vl, vb);
    cpu::crossentropy_shard_sums<float>(sf.data(), logitsf.data(), mf.data(), tgt.data(), N, Vl, vb);
    EXPECT_TRUE(same_bits(sums, sf));

    HVec<H> probs = rand_h<H>(NV, rng);
    FVec losses(N), lf(N), pf(NV);
    this->ops.crossentropy_shard_forward(losses.data(), probs.data(), logits.data(), maxes.data(), sums.data(), N,
                                         Vl);
    cpu::crossentropy_shard_forward<float>(lf.data(), pf.data(), logitsf.data(), mf.data(), sf.data(), N, Vl);
    EXPECT_TRUE(same_bits(probs, round_to<H>(pf)));
    EXPECT_TRUE(same_bits(losses, lf));

    const float dloss = 0.01f;
    HVec<H> dlogits = rand_h<H>(NV, rng);
    FVec dlf(NV), probsf = widen(probs);
    this->ops.crossentropy_shard_backward(dlogits.data(), probs.data(), tgt.data(), dloss, N, Vl, vb);
    cpu::crossentropy_shard_backward<float>(dlf.data(), probsf.data(), tgt.data(), dloss, N, Vl, vb);
    EXPECT_TRUE(same_bits(dlogits, round_to<H>(dlf)));
  }
}

TYPED_TEST(HalfOps, AdamWOnHalfParams) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const size_t n = HalfCpuOps<H>::kChunk + 1000;  // two chunks
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  HVec<H> param = rand_h<H>(n, rng);
  const HVec<H> grad = rand_h<H>(n, rng);
  FVec m = rand_f(n, rng, -0.1f, 0.1f), v = rand_f(n, rng, 0.f, 0.01f);
  FVec pf = widen(param), gf = widen(grad), mf = m, vf = v;
  this->ops.adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hp, 3);
  cpu::adamw_update<float>(pf.data(), gf.data(), mf.data(), vf.data(), n, hp, 3);
  EXPECT_TRUE(same_bits(param, round_to<H>(pf)));
  EXPECT_TRUE(same_bits(m, mf));  // A: fp32 moments
  EXPECT_TRUE(same_bits(v, vf));
}

TYPED_TEST(HalfOps, AdamWMasterKeepsParamRoundedMaster) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const size_t n = HalfCpuOps<H>::kChunk + 1000;
  AdamWParams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  FVec master = rand_f(n, rng);  // fp32, not representable in H in general
  HVec<H> param = round_to<H>(master);
  const HVec<H> grad = rand_h<H>(n, rng);
  FVec m = rand_f(n, rng, -0.1f, 0.1f), v = rand_f(n, rng, 0.f, 0.01f);
  FVec masterf = master, gf = widen(grad), mf = m, vf = v;
  for (int t = 1; t <= 3; ++t) {
    this->ops.adamw_update_master(param.data(), master.data(), grad.data(), m.data(), v.data(), n, hp, t);
    cpu::adamw_update<float>(masterf.data(), gf.data(), mf.data(), vf.data(), n, hp, t);
  }
  EXPECT_TRUE(same_bits(master, masterf));  // the master stays float: the float optimizer's result
  EXPECT_TRUE(same_bits(m, mf));
  EXPECT_TRUE(same_bits(v, vf));
  EXPECT_TRUE(same_bits(param, round_to<H>(master)));  // param = round(master), bitwise
}

// Why master weights exist (Micikevicius et al. 2018 Sec. 3.1): with lr 1e-4 each AdamW step
// moves a weight of 1 by about 1e-4, below half the spacing of H under 1 (2^-9 ~ 2e-3 in
// bf16, 2^-12 ~ 2.4e-4 in fp16), so an H parameter rounds back to 1 every step and never
// moves, while the fp32 master accumulates 100 steps (~1e-2) and its rounding does move.
TYPED_TEST(HalfOps, MasterWeightsKeepTinyUpdatesAPlainHalfParamLoses) {
  using H = TypeParam;
  const size_t n = 8;
  AdamWParams hp;
  hp.lr = 1e-4f;
  const HVec<H> grad(n, H(1e-3f));
  HVec<H> plain(n, H(1.f)), param(n, H(1.f));
  FVec master(n, 1.f), m1(n, 0.f), v1(n, 0.f), m2(n, 0.f), v2(n, 0.f);
  for (int t = 1; t <= 100; ++t) {
    this->ops.adamw_update(plain.data(), grad.data(), m1.data(), v1.data(), n, hp, t);
    this->ops.adamw_update_master(param.data(), master.data(), grad.data(), m2.data(), v2.data(), n, hp, t);
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(float(plain[i]), 1.f) << "the plain H update should stall at " << i;
    EXPECT_NEAR(master[i], 1.f - 100 * 1e-4f, 1e-4f) << i;  // ~100 steps of ~lr each
    EXPECT_EQ(param[i].bits, H(master[i]).bits) << i;
    EXPECT_LT(float(param[i]), 1.f) << "the master-rounded param should have moved at " << i;
  }
}

TYPED_TEST(HalfOps, ScratchIsReusedAcrossCalls) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const int N = 12, C = 16, OC = 24, V = 10, B = 2, Tn = 6, NH = 2;
  const HVec<H> inp = rand_h<H>(size_t(N) * C, rng), w = rand_h<H>(size_t(OC) * C, rng), b = rand_h<H>(OC, rng);
  const HVec<H> wte = rand_h<H>(size_t(V) * C, rng), wpe = rand_h<H>(size_t(Tn) * C, rng);
  const HVec<H> qkv = rand_h<H>(size_t(N) * 3 * C, rng), dout = rand_h<H>(size_t(N) * OC, rng);
  const Tok tok = rand_tokens(size_t(B) * Tn, 0, V, rng);
  HVec<H> out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C), db(OC), emb(size_t(N) * C);
  HVec<H> dwte(size_t(V) * C), dwpe(size_t(Tn) * C), att(size_t(B) * NH * Tn * Tn), ao(size_t(N) * C);
  auto step = [&] {
    this->ops.encoder_forward(emb.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
    this->ops.matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    this->ops.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    this->ops.attention_forward(ao.data(), att.data(), qkv.data(), B, Tn, C, NH);
    this->ops.encoder_backward(dwte.data(), dwpe.data(), emb.data(), tok.data(), B, Tn, C);
    this->ops.gelu_forward(dinp.data(), inp.data(), inp.size());
  };
  step();
  const size_t bytes = this->ops.scratch_bytes();
  EXPECT_GT(bytes, 0u);
  for (int i = 0; i < 3; ++i) step();
  EXPECT_EQ(this->ops.scratch_bytes(), bytes) << "steady state: no scratch growth";
}

// The ops' bulk conversions (kernels/half.h: F16C for fp16 on x86, vectorised loops for
// bf16) give bitwise the recipe's scalar conversions on every input pattern: all 65536 H
// patterns (NaNs with every payload, infs, subnormals, -0) through residual_forward and
// scale (factors that overflow fp16 and that make subnormals), and special floats (the
// rounding ties, NaN payloads, +-0, inf) as fp32 master weights rounded by
// adamw_update_master; lengths not a multiple of the vector width, from misaligned offsets.
TYPED_TEST(HalfOps, EveryPatternThroughTheOpsMatchesTheScalarRecipe) {
  using H = TypeParam;
  Rng& rng = this->rng;
  const size_t n = 0x10000 + 13;
  HVec<H> a(n + 1), b(n + 1);
  for (size_t i = 0; i < n; ++i) a[i + 1] = H::from_bits(uint16_t(i));  // every pattern, then 13 more
  std::uniform_int_distribution<uint32_t> bits16(0, 0xffff);
  for (H& x : b) x = H::from_bits(uint16_t(bits16(rng)));
  const H* pa = a.data() + 1;  // one element in: not 4-, 16- or 32-byte aligned
  const H* pb = b.data() + 1;
  auto widen_bits = [](const H* p, size_t k) {  // the scalar functions, element by element
    FVec f(k);
    for (size_t i = 0; i < k; ++i) f[i] = float(p[i]);
    return f;
  };
  auto round_bits = [](const FVec& f) {
    HVec<H> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = H(f[i]);
    return h;
  };
  const FVec af = widen_bits(pa, n), bf = widen_bits(pb, n);
  FVec sum(n);
  cpu::residual_forward<float>(sum.data(), af.data(), bf.data(), n);
  HVec<H> out(n);
  this->ops.residual_forward(out.data(), pa, pb, n);
  EXPECT_TRUE(same_bits(out, round_bits(sum)));

  for (float factor : {1.0f, 65536.f, 0x1p-12f, -3.0f}) {
    SCOPED_TRACE("factor " + std::to_string(factor));
    HVec<H> x(pa, pa + n);
    FVec xf = af;
    this->ops.scale(x.data(), factor, n);
    cpu::scale<float>(xf.data(), factor, n);
    EXPECT_TRUE(same_bits(x, round_bits(xf)));
  }

  // Master weights holding the special floats and random ones; a zero learning rate keeps
  // them (NaN payloads included) so the rounding of exactly those values is checked.
  FVec master;
  for (uint32_t u : {0x477fe000u, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33400000u, 0x3f801000u, 0x80000000u,
                     0x00000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fc00001u, 0x7f800001u, 0xffc02000u,
                     0x7fffffffu, 0x7fa00000u, 0x3f808000u, 0x7f7f8000u, 0x00000001u})
    master.push_back(std::bit_cast<float>(u));
  const FVec r = rand_f(1000, rng, -70000.f, 70000.f), tiny = rand_f(1000, rng, -1e-6f, 1e-6f);
  master.insert(master.end(), r.begin(), r.end());
  master.insert(master.end(), tiny.begin(), tiny.end());
  const size_t m_n = master.size();
  AdamWParams hp;
  hp.lr = 0.0f;
  const HVec<H> grad = rand_h<H>(m_n, rng);
  FVec want_master = master, m1(m_n, 0.f), v1(m_n, 0.f), m2(m_n, 0.f), v2(m_n, 0.f);
  HVec<H> param(m_n);
  this->ops.adamw_update_master(param.data(), master.data(), grad.data(), m1.data(), v1.data(), m_n, hp, 1);
  const FVec gf = widen_bits(grad.data(), m_n);
  cpu::adamw_update<float>(want_master.data(), gf.data(), m2.data(), v2.data(), m_n, hp, 1);
  EXPECT_TRUE(same_bits(master, want_master));
  EXPECT_TRUE(same_bits(param, round_bits(want_master)));
}

// fp16's range ends at 65504: a loss-scaled value 2 * 2^16 overflows to inf in fp16 (what
// dynamic loss scaling detects and backs off from), while bf16, with fp32's exponent range,
// holds it exactly.
TEST(HalfOpsOverflow, ScaleBy2To16OverflowsFp16NotBf16) {
  HalfCpuOps<fp16> h;
  HalfCpuOps<bf16> b;
  fp16 xh(2.f);
  bf16 xb(2.f);
  h.scale(&xh, 65536.f, 1);
  b.scale(&xb, 65536.f, 1);
  EXPECT_TRUE(std::isinf(float(xh)));
  EXPECT_EQ(xh.bits, 0x7c00u);  // +inf
  EXPECT_TRUE(std::isfinite(float(xb)));
  EXPECT_EQ(float(xb), 131072.f);
}

}  // namespace
}  // namespace dtb
