// Mixed precision in the sharded trainer (kernels/half.h, kernels/cpu/half_ops.h,
// reference/zero/zero.h): bf16 / fp16 parameters, activations and gradients, fp32 master weights
// and Adam moments, gradients reduced over DP in the half type (or widened to fp32), dynamic
// loss scaling for fp16. Runs in the multi-rank binary at 2 and 4 ranks; a check that needs
// exactly two ranks runs on pairs of ranks split from the world ({0, 1} and {2, 3} at 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"
#include "kernels/cpu/ops.h"
#include "kernels/device.h"
#include "kernels/half.h"
#include "reference/training/loss_scaler.h"
#include "reference/analytic/memory_model.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/model/test_dataset.h"
#include "reference/layout/layout_runner.h"

namespace dtb {
namespace {

// parallel_trainer_test.cc's model: 4 layers (PP 2 or 4), 4 heads (TP 2 or 4), V 256.
const GptConfig kModel{4, 32, 4, 16, 256};

std::unique_ptr<Communicator> world() { return make_mpi_world(); }

// Two ranks holding this one: the world's ranks paired (2r, 2r + 1); at world 2 the world
// itself. Collective over the world; the caller skips odd world sizes first.
std::unique_ptr<Communicator> pair_of(Communicator& w) { return w.split(w.rank() / 2, w.rank() % 2, "pair"); }

std::string describe(const ParallelLayout& l) {
  return "tp" + std::to_string(l.tp) + " dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " " +
         l.schedule;
}

std::string describe(const ZeroConfig& z) {
  std::string s = "zero" + std::to_string(z.stage);
  if (z.offload_optimizer) s += " offload";
  if (z.reduce_bucket_size < 1000000) s += " bucket " + std::to_string(z.reduce_bucket_size);
  if (z.overlap_comm) s += " overlap";
  if (z.fp32_communication) s += " fp32-comm";
  return s;
}

ZeroConfig zero_of(int stage, bool offload = false, size_t bucket = 500000000, bool overlap = false,
                   bool fp32_comm = false) {
  ZeroConfig z;
  z.fp32_communication = fp32_comm;
  z.stage = stage;
  z.offload_optimizer = offload;
  z.reduce_bucket_size = z.allgather_bucket_size = bucket;
  z.overlap_comm = overlap;
  return z;
}

double unit_roundoff_of(Precision p) {
  return p == Precision::bf16 ? unit_roundoff<bf16>() : p == Precision::fp16 ? unit_roundoff<fp16>() : unit_roundoff<float>();
}

// Runs `layout` in `precision` over `comm` (all its ranks), gathering the step-0 gradient
// and the final parameters.
LayoutOutcome run(const ParallelLayout& layout, Precision precision, const TrainConfig& cfg, const ZeroConfig& zero,
                  Communicator& comm, Recompute recompute = Recompute::none, bool gather = true) {
  CpuDevice dev;
  return run_layout({.model = kModel,
                     .layout = {.l = layout, .z = zero, .recompute = recompute, .precision = precision},
                     .train = cfg, .device = dev, .host = comm, .data = test_data(), .gather = gather});
}

// The largest per-tensor ||a - ref|| / ||ref|| over gpt.h's tensors (each tensor all layers;
// ||a - ref|| where ref is 0), as the oracle's checks (suites/oracle.h rel_norm_diff).
double max_tensor_rel_diff(const std::vector<double>& a, const std::vector<double>& ref, std::string* which) {
  double worst = 0;
  for (const ParamTensor& t : gpt_param_layout(kModel)) {
    double num = 0, den = 0;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
    const double d = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (d > worst) {
      worst = d;
      if (which) *which = t.name;
    }
  }
  return worst;
}

// Elements where two gathered runs differ (0: bitwise equal; -0 == +0 does not arise, the
// values came from the same kind of computation).
size_t count_differ(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !(a[i] == b[i]);
  return n;
}

// ---------------------------------------------------------------------------------------
// 1. Master weights and the memory plan.

// Replays the recipe on the host from the engine's own reduced gradients and checks the
// engine against it, step by step: master_t = AdamW_fp32(master_{t-1}, float(grad_t)) with
// fp32 moments (cpu::adamw_update<float>, the function the half ops call), master_0 = the
// loaded half weights widened (exact), and every parameter the engine holds is T(master_t),
// bitwise. The engine does not expose its master copy, so the replay is the master: AdamW is
// elementwise, and every DP rank's shard of it is these elements. A parameter that is not
// the rounded master (AdamW run on the half weights, a master not updated, a shard gathered
// from the wrong rank, an offloaded shard not copied up) fails. The replay without a master
// (AdamW on float(param), rounded back every step) is also computed to show the check
// discriminates: the LayerNorm weights are 1, where a bf16 ulp is 2^-7 and an fp16 ulp
// 2^-10; an AdamW step of ~lr = 1e-3 is below half a bf16 ulp and is lost every step without
// the master, while the master accumulates it and moves the weight after a few steps.
template <typename T>
void expect_params_are_rounded_master(const ZeroConfig& zero, Communicator& w) {
  SCOPED_TRACE(describe(zero));
  constexpr int kSteps = 5;
  TrainConfig cfg;
  cfg.global_batch = 2 * w.size();
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  ParallelLayout l;
  l.dp = w.size();
  CpuDevice dev;
  OwnedGroups og = make_parallel_groups(w, l);
  ParallelGroups g{w, *og.tp, *og.dp, *og.pp};
  ParallelGpt<T> m(kModel, l, w.rank(), dev, *og.tp);
  ZeroEngine<T> engine(m, zero, *og.dp, cfg.adamw);
  const std::vector<T> init = m.initial_params(cfg.seed);
  engine.load(init);
  const size_t N = m.num_params();
  std::vector<float> master(N), mo(N, 0.0f), vo(N, 0.0f), gf(N);
  convert(master.data(), init.data(), N);
  std::vector<float> plain(master), pm(N, 0.0f), pv(N, 0.0f);  // the no-master replay
  const Dataset data = test_data();
  std::vector<T> p;
  for (int s = 0; s < kSteps; ++s) {
    parallel_compute_gradients(m, engine, data, cfg, s, g);
    const std::vector<T> grads = engine.full_grads();
    const StepOutcome o = parallel_optimizer_step(engine, cfg, nullptr, g);
    ASSERT_FALSE(o.skipped);
    p = engine.full_params();
    ASSERT_EQ(p.size(), N);
    convert(gf.data(), grads.data(), N);
    cpu::adamw_update<float>(master.data(), gf.data(), mo.data(), vo.data(), N, cfg.adamw, s + 1);
    cpu::adamw_update<float>(plain.data(), gf.data(), pm.data(), pv.data(), N, cfg.adamw, s + 1);
    for (float& x : plain) x = float(T(x));
    size_t differ = 0, first = N;
    for (size_t i = 0; i < N; ++i)
      if (T(master[i]).bits != p[i].bits) {
        if (!differ) first = i;
        ++differ;
      }
    EXPECT_EQ(differ, 0u) << "step " << s << ": first at local element " << first << ": param "
                          << (first < N ? float(p[first]) : 0.0f) << ", rounded master "
                          << (first < N ? float(T(master[first])) : 0.0f);
  }
  EXPECT_EQ(engine.steps_taken(), kSteps);
  size_t moved = 0, not_plain = 0;
  for (size_t i = 0; i < N; ++i) {
    moved += p[i].bits != init[i].bits;
    not_plain += p[i].bits != T(plain[i]).bits;
  }
  EXPECT_GT(moved, N / 2) << "the parameters moved from their initial values";
  EXPECT_GT(not_plain, 0u) << "the check cannot tell the master recipe from AdamW on the half weights";
  // The replicas hold bitwise equal parameters.
  EXPECT_EQ(m.replica_max_diff(p, w), 0.0);
}

TEST(MixedPrecisionMaster, ParamsAreTheRoundedFp32MasterAfterAdamSteps) {
  auto w = world();
  for (const ZeroConfig& z : {zero_of(0), zero_of(1), zero_of(1, true), zero_of(3)}) {
    {
      SCOPED_TRACE("bf16");
      expect_params_are_rounded_master<bf16>(z, *w);
    }
    {
      SCOPED_TRACE("fp16");
      expect_params_are_rounded_master<fp16>(z, *w);
    }
  }
}

// What each rank measures (Device accounting, peak from the model's construction through
// training) against plan_rank with the precision set, every category but comm_buffer on both
// tiers, byte for byte: param and grad 2 bytes per element, master 4 (device, or host with
// offload), moments 8, the offloaded half parameters going up 2, activations and scratch 2
// bytes per element except the fp32 LayerNorm and cross-entropy statistics. The layouts of
// the memory suite (DP over the world at ZeRO 0-3 and offload, TP 2 and PP 2 with DP over the
// rest), each recompute setting.
TEST(MixedPrecisionMemory, PeakBytesPerCategoryAreThePlansExactly) {
  auto w = world();
  const int n = w->size();
  struct Case {
    ParallelLayout layout;
    ZeroConfig zero;
  };
  std::vector<Case> cases;
  auto add = [&](int tp, int dp, int pp, const ZeroConfig& z) {
    ParallelLayout l;
    l.tp = tp, l.dp = dp, l.pp = pp;
    cases.push_back({l, z});
  };
  for (int stage = 0; stage <= 3; ++stage) add(1, n, 1, zero_of(stage));
  for (int stage = 1; stage <= 3; ++stage) add(1, n, 1, zero_of(stage, true));
  if (n % 2 == 0) {
    add(2, n / 2, 1, zero_of(0));
    add(1, n / 2, 2, zero_of(0));
    add(1, n / 2, 2, zero_of(3));
  }
  const int mbs = 2;
  for (Precision prec : {Precision::bf16, Precision::fp16})
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(to_string(prec)) + " " + describe(c.layout) + " " + describe(c.zero) + " recompute " +
                     std::string(to_string(rc)));
        TrainConfig cfg;
        cfg.steps = 1;
        cfg.micro_batches = 2;
        cfg.seq_len = 16;
        cfg.global_batch = mbs * c.layout.dp * cfg.micro_batches;
        const LayoutOutcome out = run(c.layout, prec, cfg, c.zero, *w, rc, false);
        PlanConfig pc;
        pc.model = kModel;
        pc.layout = c.layout;
        pc.layout.micro_batches = cfg.micro_batches;
        pc.zero = c.zero;
        pc.precision = prec;
        pc.recompute = rc;
        pc.seq_len = cfg.seq_len;
        pc.micro_batch_size = mbs;
        const RankPlan plan = plan_rank(pc, out.tp_rank, out.pp_rank);
        for (Tier t : {Tier::device, Tier::host})
          for (int k = 0; k < kNumMemCategories; ++k) {
            if (MemCategory(k) == MemCategory::comm_buffer) continue;
            EXPECT_EQ(out.peak_bytes[int(t)][k], double(plan.mem.get(t, MemCategory(k))))
                << to_string(MemCategory(k)) << " on " << to_string(t) << ", rank " << w->rank();
          }
        // The recipe's state bytes, independently of the plan: 2 (param) + 2 (grad) + 4
        // (master) + 8 (moments) per element held, at ZeRO 0 without offload.
        if (c.zero.stage == 0 && c.layout.tp == 1 && c.layout.pp == 1) {
          const double N = double(gpt_num_params(kModel));
          const auto& d = out.peak_bytes[int(Tier::device)];
          EXPECT_EQ(d[int(MemCategory::param)], 2 * N);
          EXPECT_EQ(d[int(MemCategory::grad)], 2 * N);
          EXPECT_EQ(d[int(MemCategory::master_param)], 4 * N);
          EXPECT_EQ(d[int(MemCategory::optimizer_state)], 8 * N);
        }
      }
}

// ---------------------------------------------------------------------------------------
// 2. ZeRO stages at DP 2: one rounded addition per reduced element, so bitwise equal.

// At DP 2 with one micro-batch per rank, every reduced gradient element is the two ranks'
// values added once and rounded once: the all-reduce (ZeRO 0-1) gives round(a + b), the
// reduce-scatter (ZeRO 2-3) gives the same round(a + b) for the rank's shard, added to a
// zeroed shard (0 + x is exact) and later gathered (a copy). AdamW on the fp32 master is
// elementwise, so a rank updating only its shard (stages 1-3), the full copy (stage 0) or
// the host's copy (offload, the same cpu::adamw_update<float> and rounding) computes the same
// bits. (With several micro-batches, ZeRO 2-3 reduce each micro-batch's gradient and then
// add the rounded sums, while ZeRO 0-1 accumulate locally and reduce once: a different
// rounding order, so the bitwise claim is for one micro-batch.) communication_data_type fp32
// reduces float(a) + float(b) in fp32 and rounds it to the half type once: the same bits
// (test 6), here under ZeRO 0, 2 (buckets of several units, overlapped) and 3 with offload.
// Losses, the step-0 gradient
// and the final parameters are compared exactly, in bf16 and in fp16.
TEST(MixedPrecisionZero, StagesAreBitwiseEqualAtDp2) {
  auto w = world();
  if (w->size() % 2) GTEST_SKIP() << "needs an even world size (ctest runs 2 and 4 ranks)";
  auto pair = pair_of(*w);
  ParallelLayout l;
  l.dp = 2;
  for (Precision prec : {Precision::bf16, Precision::fp16}) {
    TrainConfig cfg;
    cfg.steps = 3;
    cfg.global_batch = 4;
    cfg.micro_batches = 1;
    cfg.seq_len = 16;
    const LayoutOutcome ref = run(l, prec, cfg, zero_of(0), *pair);
    ASSERT_EQ(ref.losses.size(), 3u);
    for (const ZeroConfig& z : {zero_of(1), zero_of(2), zero_of(3), zero_of(1, true), zero_of(2, true),
                                zero_of(3, true), zero_of(2, false, 20000, true), zero_of(3, false, 20000, true),
                                zero_of(1, false, 20000), zero_of(0, false, 500000000, false, true),
                                zero_of(2, false, 20000, true, true), zero_of(3, true, 500000000, false, true)}) {
      SCOPED_TRACE(std::string(to_string(prec)) + " " + describe(z));
      const LayoutOutcome o = run(l, prec, cfg, z, *pair);
      EXPECT_EQ(o.losses, ref.losses);
      EXPECT_EQ(count_differ(o.grads0, ref.grads0), 0u);
      EXPECT_EQ(count_differ(o.params, ref.params), 0u);
      EXPECT_EQ(o.replica_grads0, 0.0);
      EXPECT_EQ(o.replica_params, 0.0);
    }
  }
}

// ---------------------------------------------------------------------------------------
// 3. Layouts against the one-rank bf16 run.

// The per-tensor bound of two bf16 runs that differ only in where they round, in units of
// u = 2^-8 (derivation below).
constexpr double kLayoutUlps = 8;

// TP 2, PP 2 (1F1B) and DP 2, each over a pair of ranks, against the one-rank bf16 layout
// (the same global batch of 4 sequences in 2 micro-batches of 2; DP 2 gives each rank one of
// those micro-batches): the step-0 gradient gathered in double, per gpt.h tensor.
//
// Error analysis. Every tensor is stored in bf16 in both runs; the runs differ only in where
// roundings happen. TP 2 rounds each rank's row-parallel partial product (attproj and fcproj
// outputs, the vocabulary-parallel embedding, the column-parallel matmuls' dinp in backward)
// to bf16 before the all-reduce adds the two and rounds again; PP 2 adds the tied wte's two
// gradient copies, each already rounded, and rounds once more; DP 2 adds the two ranks'
// rounded micro-batch gradients in the all-reduce, where the one rank accumulates the second
// micro-batch into the first's buffer op by op. So an element carries in each run its own
// final rounding (relative error <= u) plus a few differently placed upstream roundings
// (each <= u relative to the values added: 2 per TP-reduced activation, 1 per reduced
// gradient), carried through the remaining layers with gain O(1) (LayerNorm renormalises,
// the residual stream adds; 4 layers at their random init). Worst case per element: the 2
// final roundings plus ~6 upstream ones at full size u, k = 8, with no averaging; the
// per-tensor relative NORM is an RMS over thousands of elements whose rounding errors are
// nearly independent (RMS u / sqrt(3) each), which gives sqrt(2/3) u = 0.82 u for the final
// roundings alone: measured 0.83 u (PP 2, wte) and 0.89 u (DP 2), and 1.54 u with TP's
// upstream roundings (fcw). k = 8 is the worst case and 5x the largest measured; a wrong
// layout (a missing all-reduce, a wrong shard, a tied gradient counted twice, an average by
// the wrong count) errs by O(1) = 256 u. The loss is fp32 log-sum-exp of logits that differ
// by at most k u |logit| (|logit| << loss at init, the loss is ~ln 256): |dloss| <= k u loss
// with room (measured 0.005 u loss). Replicated elements (TP copies, the tied wte's two
// stages, DP replicas) must be bitwise equal, in the step-0 gradient and after 2 AdamW steps.
TEST(MixedPrecisionLayouts, Bf16LayoutsFollowTheOneRankBf16Gradient) {
  auto w = world();
  if (w->size() % 2) GTEST_SKIP() << "needs an even world size (ctest runs 2 and 4 ranks)";
  auto pair = pair_of(*w);
  auto self = make_mpi_self();
  const double u = unit_roundoff<bf16>();
  TrainConfig cfg;
  cfg.steps = 2;
  cfg.global_batch = 4;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  const LayoutOutcome base = run(ParallelLayout{}, Precision::bf16, cfg, zero_of(0), *self);
  auto layout = [](int tp, int dp, int pp) {
    ParallelLayout l;
    l.tp = tp, l.dp = dp, l.pp = pp;
    return l;
  };
  for (const ParallelLayout& l : {layout(2, 1, 1), layout(1, 1, 2), layout(1, 2, 1)}) {
    SCOPED_TRACE(describe(l));
    TrainConfig c = cfg;
    if (l.dp == 2) c.micro_batches = 1;  // each DP rank one micro-batch of the baseline's 2 sequences
    const LayoutOutcome o = run(l, Precision::bf16, c, zero_of(0), *pair);
    std::string worst;
    const double d = max_tensor_rel_diff(o.grads0, base.grads0, &worst);
    EXPECT_LE(d, kLayoutUlps * u) << "worst tensor " << worst << ": " << d / u << " u";
    EXPECT_LE(std::fabs(o.losses[0] - base.losses[0]), kLayoutUlps * u * base.losses[0]);
    EXPECT_EQ(o.replica_grads0, 0.0);
    EXPECT_EQ(o.replica_params, 0.0);
  }
}

// ---------------------------------------------------------------------------------------
// 4. Recompute in half precision.

// Selective and full recompute run the same ops on the same half values in the same order
// as the first forward (no dropout, the same fp32 statistics recomputed from the same bits),
// so losses, the step-0 gradient and the parameters after two AdamW steps are bitwise those
// of recompute none: on one rank, and on TP 2 and PP 2 (1F1B, two micro-batches) over a pair
// of ranks, in bf16 and fp16.
TEST(MixedPrecisionRecompute, FullAndSelectiveAreBitwiseNone) {
  auto w = world();
  if (w->size() % 2) GTEST_SKIP() << "needs an even world size (ctest runs 2 and 4 ranks)";
  auto pair = pair_of(*w);
  auto self = make_mpi_self();
  ParallelLayout one, tp2, pp2;
  tp2.tp = 2;
  pp2.pp = 2;
  for (Precision prec : {Precision::bf16, Precision::fp16}) {
    TrainConfig cfg;
    cfg.steps = 2;
    cfg.global_batch = 4;
    cfg.micro_batches = 2;
    cfg.seq_len = 16;
    struct On {
      const ParallelLayout& l;
      Communicator& comm;
    };
    for (const On& on : {On{one, *self}, On{tp2, *pair}, On{pp2, *pair}}) {
      const LayoutOutcome none = run(on.l, prec, cfg, zero_of(0), on.comm, Recompute::none);
      for (Recompute rc : {Recompute::selective, Recompute::full}) {
        SCOPED_TRACE(std::string(to_string(prec)) + " " + describe(on.l) + " recompute " + std::string(to_string(rc)));
        const LayoutOutcome r = run(on.l, prec, cfg, zero_of(0), on.comm, rc);
        EXPECT_EQ(r.losses, none.losses);
        EXPECT_EQ(count_differ(r.grads0, none.grads0), 0u);
        EXPECT_EQ(count_differ(r.params, none.params), 0u);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 5. fp16 dynamic loss scaling.

// fp16, DP over the world, GradScaler from 2^16 growing x2 after every 2 good steps: the
// scale each step carried is what GradScaler's rule gives for the skipped flags the run
// reports (replayed through reference/training/loss_scaler.h), and every rank reports the same
// trajectory (the skip is decided by all ranks together).
TEST(MixedPrecisionLossScaling, Fp16ScaleTrajectoryIsTheGradScalerRule) {
  auto w = world();
  TrainConfig cfg;
  cfg.steps = 10;
  cfg.global_batch = 2 * w->size();
  cfg.micro_batches = 1;
  cfg.seq_len = 16;
  cfg.loss_scaler.enabled = true;
  cfg.loss_scaler.init_scale = 65536.0;
  cfg.loss_scaler.growth_interval = 2;
  ParallelLayout l;
  l.dp = w->size();
  const LayoutOutcome o = run(l, Precision::fp16, cfg, zero_of(1), *w, Recompute::none, false);
  ASSERT_EQ(o.loss_scales.size(), size_t(cfg.steps));
  ASSERT_EQ(o.skipped.size(), size_t(cfg.steps));
  LossScaler replay(cfg.loss_scaler);
  int skipped = 0;
  double highest = 0;
  for (int s = 0; s < cfg.steps; ++s) {
    EXPECT_EQ(o.loss_scales[s], replay.scale()) << "step " << s;
    replay.update(o.skipped[s] != 0);
    skipped += o.skipped[s];
    highest = std::max(highest, o.loss_scales[s]);
  }
  // Not vacuous: this model's fp16 gradients overflow at 2^18 (the scale runs 2^16, 2^16,
  // 2^17, 2^17, 2^18 skipped, 2^17, ...), so the run both grows and backs off.
  EXPECT_GE(skipped, 1);
  EXPECT_GT(highest, cfg.loss_scaler.init_scale);
  // Every rank's trajectory and skips are rank 0's.
  std::vector<double> mine(o.loss_scales);
  for (int k : o.skipped) mine.push_back(k);
  std::vector<double> all(mine.size() * w->size());
  w->all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  for (int r = 0; r < w->size(); ++r)
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(all[r * mine.size() + i], mine[i]) << "rank " << r << " entry " << i;
}

// The skip trap in fp16 (parallel_trainer_test.cc's LossScaling test, fp32, is the model):
// ZeRO 1, DP over the world, an inf (then a NaN) placed only in rank 1's gradient, at an
// element of rank 1's own optimizer shard, after the gradients are computed and reduced and
// before the optimizer step. No rank held a non-finite gradient before the injection (so the
// skip is the injection's). Every rank skips, the scale halves each time, no rank steps
// AdamW (equal step counters), the parameters stay bitwise what they were and equal on every
// rank; the next clean step updates everyone alike and counts.
TEST(MixedPrecisionLossScaling, Fp16InfOnOneRankSkipsTheStepEverywhere) {
  auto w = world();
  TrainConfig cfg;
  cfg.global_batch = 2 * w->size();
  cfg.micro_batches = 1;
  cfg.seq_len = 16;
  cfg.loss_scaler.enabled = true;
  cfg.loss_scaler.init_scale = 65536.0;
  cfg.loss_scaler.growth_interval = 2;
  ParallelLayout l;
  l.dp = w->size();
  CpuDevice dev;
  OwnedGroups og = make_parallel_groups(*w, l);
  ParallelGroups g{*w, *og.tp, *og.dp, *og.pp};
  ParallelGpt<fp16> m(kModel, l, w->rank(), dev, *og.tp);
  ZeroEngine<fp16> engine(m, zero_of(1), *og.dp, cfg.adamw);
  engine.load(m.initial_params(cfg.seed));
  LossScaler scaler(cfg.loss_scaler);
  const Dataset data = test_data();
  const std::vector<fp16> before = engine.full_params();
  // Rank 1's shard of the first unit (wte) starts at ceil(n / dp).
  const size_t index = zero_shard_size(m.units()[0].n, l.dp) + 3;
  const fp16 poison[2] = {fp16(std::numeric_limits<float>::infinity()), fp16(std::numeric_limits<float>::quiet_NaN())};
  auto count_all = [&](double x) {
    std::vector<double> all(w->size());
    w->all_gather(&x, all.data(), 1, DType::f64);
    return all;
  };
  auto params_equal = [](const std::vector<fp16>& a, const std::vector<fp16>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].bits != b[i].bits) return false;
    return true;
  };
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    parallel_compute_gradients(m, engine, data, cfg, s, g, nullptr, nullptr, scaler.scale());
    for (double x : count_all(engine.local_nonfinite() ? 1 : 0)) ASSERT_EQ(x, 0.0) << "overflow before the injection";
    if (w->rank() == 1 % w->size()) engine.set_held_grad(index, poison[s]);
    const StepOutcome o = parallel_optimizer_step(engine, cfg, &scaler, g);
    EXPECT_TRUE(o.skipped);
    EXPECT_EQ(o.loss_scale, 65536.0 / (s == 0 ? 1 : 2));
    EXPECT_EQ(scaler.scale(), 65536.0 / (s == 0 ? 2 : 4));
    for (double x : count_all(engine.steps_taken())) EXPECT_EQ(x, 0.0);
    const std::vector<fp16> now = engine.full_params();
    EXPECT_TRUE(params_equal(now, before));
    EXPECT_EQ(m.replica_max_diff(now, *w), 0.0);
  }
  parallel_compute_gradients(m, engine, data, cfg, 2, g, nullptr, nullptr, scaler.scale());
  for (double x : count_all(engine.local_nonfinite() ? 1 : 0)) ASSERT_EQ(x, 0.0) << "the clean step overflowed";
  const StepOutcome o = parallel_optimizer_step(engine, cfg, &scaler, g);
  EXPECT_FALSE(o.skipped);
  for (double x : count_all(engine.steps_taken())) EXPECT_EQ(x, 1.0);
  const std::vector<fp16> after = engine.full_params();
  EXPECT_FALSE(params_equal(after, before));
  EXPECT_EQ(m.replica_max_diff(after, *w), 0.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.scale(), 65536.0 / 4);  // one good step of growth_interval 2: no growth yet
}

// ---------------------------------------------------------------------------------------
// 6. communication_data_type fp32 vs half.

// DP over the world at ZeRO 0 (the only DP traffic is the gradient all-reduce): widened to
// fp32 the reduction moves exactly twice the bytes. At 2 ranks both reduce each element as
// one addition rounded once to the half type (the half MPI operation rounds float(a) +
// float(b); the fp32 all-reduce adds the widened values in float and the result is rounded
// once), so the runs are bitwise equal. At 4 ranks the half reduction rounds after each of
// the 3 additions of its tree, the fp32 one once at the end: the step-0 gradients may differ,
// within test 3's per-tensor bound (each element's difference is at most the 3 roundings of
// the half tree plus the final one, each at most u relative to the partial sums: 4 u per
// element without averaging, within kLayoutUlps u = 8 u; measured 0.82 u bf16, 1.18 u fp16).
// The losses likewise (test 3's argument).
TEST(MixedPrecisionComm, Fp32CommunicationDoublesBytesAndRoundsOnce) {
  auto w = world();
  ParallelLayout l;
  l.dp = w->size();
  for (Precision prec : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(std::string(to_string(prec)));
    TrainConfig cfg;
    cfg.steps = 3;
    cfg.global_batch = 2 * w->size();
    cfg.micro_batches = 1;
    cfg.seq_len = 16;
    ZeroConfig wide = zero_of(0);
    wide.fp32_communication = true;
    const LayoutOutcome h = run(l, prec, cfg, zero_of(0), *w), f = run(l, prec, cfg, wide, *w);
    EXPECT_GT(h.dp_comm_bytes, 0.0);
    EXPECT_EQ(f.dp_comm_bytes, 2 * h.dp_comm_bytes);
    // (cfg.steps + 1) all-reduces of N half elements: the step-0 gradient and each step's.
    EXPECT_EQ(h.dp_comm_bytes, double(cfg.steps + 1) * 2 * double(gpt_num_params(kModel)));
    EXPECT_EQ(f.replica_grads0, 0.0);
    EXPECT_EQ(f.replica_params, 0.0);
    if (w->size() == 2) {
      EXPECT_EQ(f.losses, h.losses);
      EXPECT_EQ(count_differ(f.grads0, h.grads0), 0u);
      EXPECT_EQ(count_differ(f.params, h.params), 0u);
    } else {
      const double u = unit_roundoff_of(prec);
      std::string worst;
      const double d = max_tensor_rel_diff(f.grads0, h.grads0, &worst);
      EXPECT_LE(d, kLayoutUlps * u) << "worst tensor " << worst << ": " << d / u << " u";
      EXPECT_LE(std::fabs(f.losses[0] - h.losses[0]), kLayoutUlps * u * h.losses[0]);
    }
  }
}

}  // namespace
}  // namespace dtb
