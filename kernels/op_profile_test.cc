// ProfiledOps (kernels/op_profile.h): every op reaches the wrapped ops unchanged (outputs
// bitwise those of calling CpuOps directly), is bracketed once, in the family the report
// names it by, and the host clock's seconds are those of the bracketed calls.
#include "kernels/op_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/timer.h"

namespace dtb {
namespace {

// Records each bracket: its family, and whether begin and end paired up.
class RecordingClock final : public OpClock {
 public:
  void begin(OpFamily f) override {
    EXPECT_FALSE(open_) << "nested bracket in " << to_string(f);
    open_ = true;
    current_ = f;
  }
  void end(OpFamily f) override {
    EXPECT_TRUE(open_ && current_ == f) << "end without its begin: " << to_string(f);
    open_ = false;
    families.push_back(f);
    ++calls_[int(f)];
  }
  std::array<double, kNumOpFamilies> seconds() override { return {}; }
  std::vector<OpFamily> families;

 private:
  bool open_ = false;
  OpFamily current_ = OpFamily::gemm;
};

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Every compute op once, on small valid shapes, through `ops`; the outputs in `out`.
std::vector<std::vector<float>> run_every_op(Ops<float>& ops) {
  const int B = 1, Tn = 4, C = 8, NH = 2, V = 16, N = B * Tn, OC = 12;
  std::vector<std::vector<float>> o;
  const std::vector<int32_t> tok = {1, 5, 7, 2}, tg = {5, 7, 2, 3};
  auto wte = random_vec(size_t(V) * C, 1), wpe = random_vec(size_t(Tn) * C, 2), x = random_vec(size_t(N) * C, 3);
  auto w = random_vec(size_t(OC) * C, 4), b = random_vec(OC, 5), qkv = random_vec(size_t(N) * 3 * C, 6);
  auto logits = random_vec(size_t(N) * V, 7);
  std::vector<float> enc(size_t(N) * C), dwte(wte.size()), dwpe(wpe.size());
  ops.encoder_forward(enc.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
  ops.encoder_backward(dwte.data(), dwpe.data(), x.data(), tok.data(), B, Tn, C);
  std::vector<float> ln(size_t(N) * C), mean(N), rstd(N), dx(size_t(N) * C), dlw(C), dlb(C);
  ops.layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), wpe.data(), wpe.data() + C, N, C);
  ops.layernorm_backward(dx.data(), dlw.data(), dlb.data(), ln.data(), x.data(), wpe.data(), mean.data(), rstd.data(),
                         N, C);
  std::vector<float> mm(size_t(N) * OC), dmi(size_t(N) * C), dmw(w.size()), dmb(OC);
  ops.matmul_forward(mm.data(), x.data(), w.data(), b.data(), N, C, OC);
  ops.matmul_backward(dmi.data(), dmw.data(), dmb.data(), mm.data(), x.data(), w.data(), N, C, OC);
  // The FP8 linear's (docs/fp8.md): an amax, then its GEMMs on E4M3 / E5M2 operands at scale 64.
  const Fp8Operand e4{Fp8Format::e4m3, Fp8Scaling::per_tensor, 64.f}, e5{Fp8Format::e5m2, Fp8Scaling::per_tensor, 64.f};
  std::vector<float> am(1, ops.amax(x.data(), x.size())), f8(size_t(N) * OC), f8i(size_t(N) * C), f8w(w.size()),
      f8b(OC);
  ops.fp8_matmul_forward(f8.data(), x.data(), w.data(), b.data(), N, C, OC, e4, e4);
  ops.fp8_matmul_backward(f8i.data(), f8w.data(), f8b.data(), mm.data(), x.data(), w.data(), N, C, OC, e5, e4, e4);
  std::vector<float> att_out(size_t(N) * C), att(size_t(B) * NH * Tn * Tn), dqkv(qkv.size()), scratch(att.size() * 2);
  ops.attention_forward(att_out.data(), att.data(), qkv.data(), B, Tn, C, NH);
  ops.attention_backward(dqkv.data(), scratch.data(), x.data(), qkv.data(), att.data(), B, Tn, C, NH);
  std::vector<float> ge(x.size()), dge(x.size()), res(x.size());
  ops.gelu_forward(ge.data(), x.data(), x.size());
  ops.gelu_backward(dge.data(), x.data(), ln.data(), x.size());
  ops.residual_forward(res.data(), x.data(), ln.data(), x.size());
  std::vector<float> losses(N), probs(logits.size()), dlogits(logits.size());
  ops.crossentropy_forward(losses.data(), probs.data(), logits.data(), tg.data(), N, V);
  ops.crossentropy_backward(dlogits.data(), probs.data(), tg.data(), 0.25f, N, V);
  std::vector<float> p = w, m(w.size()), v(w.size());  // (CpuOps<float> has no master-weight step)
  ops.adamw_update(p.data(), dmw.data(), m.data(), v.data(), p.size(), AdamWParams{}, 1);
  std::vector<float> es(size_t(N) * C), dws(size_t(V / 2) * C), dwps(wpe.size());
  ops.embedding_shard_forward(es.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C, 0, V / 2);
  ops.embedding_shard_backward(dws.data(), dwps.data(), x.data(), tok.data(), B, Tn, C, 0, V / 2);
  std::vector<float> ab = mm, sc = x;
  ops.add_bias(ab.data(), b.data(), N, OC);
  ops.scale(sc.data(), 0.5f, sc.size());
  std::vector<float> mx(N), sums(2 * N), sl(N), sp(logits.size()), sd(logits.size());
  ops.crossentropy_shard_max(mx.data(), logits.data(), N, V);
  ops.crossentropy_shard_sums(sums.data(), logits.data(), mx.data(), tg.data(), N, V, 0);
  ops.crossentropy_shard_forward(sl.data(), sp.data(), logits.data(), mx.data(), sums.data(), N, V);
  ops.crossentropy_shard_backward(sd.data(), sp.data(), tg.data(), 0.25f, N, V, 0);
  std::vector<float> z(7, 1.f), h(7);
  ops.zero(z.data(), z.size());
  ops.copy_to_host(h.data(), x.data(), h.size() * sizeof(float));
  ops.copy_from_host(z.data(), h.data(), h.size() * sizeof(float));
  for (auto* r : {&enc, &dwte, &dwpe, &ln, &mean, &rstd, &dx, &dlw, &dlb, &mm, &dmi, &dmw, &dmb, &att_out, &att, &dqkv,
                  &ge, &dge, &res, &losses, &probs, &dlogits, &p, &m, &v, &es, &dws, &dwps, &ab, &sc,
                  &mx, &sums, &sl, &sp, &sd, &z, &h, &am, &f8, &f8i, &f8w, &f8b})
    o.push_back(*r);
  return o;
}

TEST(ProfiledOps, ForwardsEveryOpUnchangedInItsFamily) {
  CpuOps<float> cpu;
  const auto direct = run_every_op(cpu);
  RecordingClock clock;
  ProfiledOps<float> profiled(cpu, clock);
  const auto through = run_every_op(profiled);
  ASSERT_EQ(through.size(), direct.size());
  for (size_t i = 0; i < direct.size(); ++i) EXPECT_EQ(through[i], direct[i]) << "output " << i;
  using F = OpFamily;
  const std::vector<F> expected = {F::pointwise, F::pointwise, F::pointwise, F::pointwise, F::gemm,      F::gemm,
                                   F::pointwise, F::gemm,      F::gemm,  // the FP8 linear's amax and GEMMs
                                   F::attention, F::attention, F::pointwise, F::pointwise, F::pointwise, F::loss,
                                   F::loss,      F::optimizer, F::pointwise, F::pointwise, F::pointwise,
                                   F::pointwise, F::loss,      F::loss,      F::loss,      F::loss,      F::memory,
                                   F::memory,    F::memory};
  ASSERT_EQ(clock.families.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(to_string(clock.families[i]), std::string(to_string(expected[i]))) << "call " << i;
  EXPECT_EQ(clock.calls()[int(F::gemm)], 4);
  EXPECT_EQ(clock.calls()[int(F::loss)], 6);
}

// The host clock adds up steady_clock time inside the brackets: a 256^3 GEMM is counted
// under gemm (more than 0 s, less than the wall time around all calls) and nothing else is.
TEST(ProfiledOps, HostClockTimesTheBracketedCalls) {
  auto be = make_cpu_backend();
  auto clock = be->make_op_clock();
  ProfiledOps<float> ops(be->ops(), *clock);
  const int n = 256;
  const auto a = random_vec(size_t(n) * n, 8), w = random_vec(size_t(n) * n, 9);
  std::vector<float> out(size_t(n) * n);
  const double t0 = now_seconds();
  for (int i = 0; i < 3; ++i) ops.matmul_forward(out.data(), a.data(), w.data(), nullptr, n, n, n);
  const double wall = now_seconds() - t0;
  const auto s = clock->seconds();
  EXPECT_GT(s[int(OpFamily::gemm)], 0.0);
  EXPECT_LE(s[int(OpFamily::gemm)], wall);
  EXPECT_EQ(clock->calls()[int(OpFamily::gemm)], 3);
  for (int f = 0; f < kNumOpFamilies; ++f) {
    if (f != int(OpFamily::gemm)) {
      EXPECT_EQ(s[size_t(f)], 0.0) << to_string(OpFamily(f));
    }
  }
  clock->reset();
  EXPECT_EQ(clock->seconds()[int(OpFamily::gemm)], 0.0);
  EXPECT_EQ(clock->calls()[int(OpFamily::gemm)], 0);
}

}  // namespace
}  // namespace dtb
