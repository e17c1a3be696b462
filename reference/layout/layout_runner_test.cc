// The layout runner (reference/layout/layout_runner.h): one rank through the runner trains bitwise
// as the single-rank Gpt<float> trainer does, and a run the runner checkpoints and resumes
// continues bitwise as the uninterrupted one, whole loss curve included; and layouts over
// a staged device world (ranks sharing a GPU) train bitwise as over MPI itself; the ops
// passed for each precision are the ones used, bitwise the CPU defaults, also on a device
// that is not the CPU's, and a half precision without its ops there is refused. Runs in the
// multi-rank binary (2 and 4 ranks); the checkpoint machinery itself is checkpoint_test.cc's.
#include "reference/layout/layout_runner.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/comm/staged_communicator.h"
#include "kernels/cpu/half_ops.h"
#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/training/counting_ops_test_util.h"
#include "reference/parallel/parallel_test_util.h"
#include "reference/model/test_dataset.h"

namespace dtb {
namespace {

namespace fs = std::filesystem;

// 4 layers, 4 heads (TP 2 or 4), V 256.
const GptConfig kModel{4, 32, 4, 16, 256};

TrainConfig small_config() {
  TrainConfig cfg;
  cfg.steps = 5;
  cfg.global_batch = 8;
  cfg.micro_batches = 2;
  cfg.seq_len = 16;
  cfg.adamw.lr = 1e-2f;
  return cfg;
}

// The sharded model on one rank runs gpt.cc's ops with the same arguments in the same order,
// and ZeRO 0's step is AdamW<float>'s: every loss, the step-0 gradient and the final
// parameters are bitwise the single-rank trainer's.
TEST(LayoutRunner, OneRankIsTheGptTrainerBitwise) {
  auto self = make_mpi_self();
  const TrainConfig cfg = small_config();
  const Dataset data = test_data();
  CpuDevice dev;
  Gpt<float> base(kModel, dev);
  base.init(cfg.seed);
  compute_gradients(base, data, cfg, 0, *self);
  const std::vector<double> grads0(base.grads(), base.grads() + base.num_params());
  const TrainRun ref = train(base, data, cfg, DpSync{}, *self);
  const std::vector<double> params(base.params(), base.params() + base.num_params());

  const LayoutOutcome out =
      run_layout({.model = kModel, .layout = {}, .train = cfg, .device = dev, .host = *self, .data = data,
                  .gather = true});
  EXPECT_EQ(out.losses, ref.losses);
  ASSERT_EQ(out.grads0.size(), grads0.size());
  for (size_t i = 0; i < grads0.size(); ++i) ASSERT_EQ(out.grads0[i], grads0[i]) << "step-0 gradient " << i;
  ASSERT_EQ(out.params.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) ASSERT_EQ(out.params[i], params[i]) << "parameter " << i;
  EXPECT_EQ(out.timings.size(), size_t(cfg.steps));
  EXPECT_TRUE(out.checkpoints.resumed_from.empty());
}

// TP 2 x DP n/2 (DP over the world at odd sizes) with ZeRO 1 and fp16 loss scaling: saved
// every 2 steps, then resumed from step 2 in a fresh run; the resumed run reports the whole
// curve (the steps before it from the checkpoint's history), times only its own steps, and
// ends with the uninterrupted run's parameters, bit for bit.
TEST(LayoutRunner, ResumeThroughTheRunnerContinuesBitwise) {
  auto w = make_mpi_world();
  const int n = w->size();
  TrainConfig cfg = small_config();
  cfg.loss_scaler.enabled = true;
  ParallelLayout l;
  l.tp = n % 2 == 0 ? 2 : 1;
  l.dp = n / l.tp;
  ZeroConfig zero;
  zero.stage = 1;
  const Dataset data = test_data();
  CpuDevice dev;
  const SharedTempDir tmp(*w);
  const std::string& dir = tmp.path();
  auto spec = [&](const LayoutCheckpoints* ck) {
    return LayoutRunSpec{.model = kModel, .layout = {.l = l, .z = zero, .precision = Precision::fp16}, .train = cfg,
                         .device = dev, .host = *w,
                         .data = data, .gather = true, .checkpoints = ck};
  };
  const LayoutOutcome full = run_layout(spec(nullptr));
  LayoutCheckpoints save{.dir = dir, .every = 2};
  const LayoutOutcome saved = run_layout(spec(&save));
  EXPECT_EQ(saved.checkpoints.saved, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(saved.checkpoints.save_error.empty());
  EXPECT_EQ(saved.losses, full.losses);  // saving does not change the run

  LayoutCheckpoints resume{.resume_step_dir = checkpoint_step_dir(dir, 2)};
  const LayoutOutcome resumed = run_layout(spec(&resume));
  EXPECT_EQ(resumed.checkpoints.resumed_from, checkpoint_step_dir(dir, 2));
  EXPECT_EQ(resumed.checkpoints.first_step, 2);
  EXPECT_EQ(resumed.timings.size(), size_t(cfg.steps - 2));
  EXPECT_TRUE(resumed.grads0.empty());
  EXPECT_EQ(resumed.losses, full.losses);
  EXPECT_EQ(resumed.loss_scales, full.loss_scales);
  EXPECT_EQ(resumed.skipped, full.skipped);
  if (w->rank() == 0) {
    ASSERT_EQ(resumed.params.size(), full.params.size());
    for (size_t i = 0; i < full.params.size(); ++i) ASSERT_EQ(resumed.params[i], full.params[i]) << "parameter " << i;
  }
}

// Ranks that share one GPU talk through a StagedCommunicator (kernels/comm/staged_communicator.h)
// as the device world: the groups split from it, every TP, PP and DP collective of the run
// staged through host buffers. On the CPU backend the staging is memcpy over the same MPI
// calls, so each layout must train bitwise as with the MPI world itself: every loss and the
// final parameters. Layouts at 4 ranks: TP 2 x PP 2 (1F1B), PP 2 x DP 2 interleaved, TP 2 x
// DP 2 under ZeRO 3 with 4-element buckets and overlap, DP 4 under ZeRO 2 with the optimizer
// offloaded; at 2 ranks the same with the other sizes 1.
TEST(LayoutRunner, StagedDeviceWorldTrainsBitwiseAsTheHostOne) {
  auto w = make_mpi_world();
  const int n = w->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "layouts for 2 and 4 ranks";
  auto cpu = make_cpu_backend();
  StagedCommunicator staged(w->split(0, w->rank(), "world"), *cpu);
  const TrainConfig cfg = small_config();
  const Dataset data = test_data();
  struct Case {
    ParallelLayout l;
    ZeroConfig z;
  };
  const int h = n / 2;
  std::vector<Case> cases = {
      {{.tp = 2, .dp = 1, .pp = h}, {}},
      {{.tp = 1, .dp = h, .pp = 2, .schedule = "interleaved", .virtual_stages = 2}, {}},
      {{.tp = 2, .dp = h}, {.stage = 3, .reduce_bucket_size = 4, .allgather_bucket_size = 4, .overlap_comm = true}},
      {{.tp = 1, .dp = n}, {.stage = 2, .offload_optimizer = true}},
  };
  for (const Case& c : cases) {
    CpuDevice dev_host, dev_staged;
    auto spec = [&](CpuDevice& dev, Communicator* device_comm) {
      return LayoutRunSpec{.model = kModel, .layout = {.l = c.l, .z = c.z}, .train = cfg, .device = dev, .host = *w,
                           .device_comm = device_comm, .data = data, .gather = true};
    };
    const LayoutOutcome ref = run_layout(spec(dev_host, nullptr));
    const LayoutOutcome out = run_layout(spec(dev_staged, &staged));
    const std::string what = "tp " + std::to_string(c.l.tp) + " dp " + std::to_string(c.l.dp) + " pp " +
                             std::to_string(c.l.pp) + " " + c.l.schedule + " zero " + std::to_string(c.z.stage);
    EXPECT_EQ(out.losses, ref.losses) << what;
    EXPECT_EQ(out.params, ref.params) << what;  // gathered on rank 0, empty elsewhere
    EXPECT_EQ(out.grads0, ref.grads0) << what;
  }
}

// The path a non-CPU backend takes, run on the CPU: each precision's ops passed explicitly
// (the CPU backend's CpuOps<float>, HalfCpuOps<bf16 / fp16>, through CountingOps) on a
// CpuDevice, and on a device that says it is not the CPU (HostAsDevice: the reference then
// needs the passed ops, reduces host scalars through device buffers and stages ZeRO's fp32
// communication of half gradients through host buffers). The same ops on the same values in the same order, so
// every loss, the step-0 gradient and the final parameters are bitwise those of the default
// run (null ops on a CpuDevice), and the passed ops did the work (their call count > 0).
// Layouts: TP 2 x DP n/2 under ZeRO 1; DP n under ZeRO 2 with 4-element buckets, overlap
// and, in half precision, fp32 communication; DP n under ZeRO 0, fp32 communication in half
// (the bucketed all-reduce). fp16 with dynamic loss scaling, as the recipe has it.
TEST(LayoutRunner, PassedOpsTrainBitwiseAsTheDefaultsOnANonCpuDeviceToo) {
  auto w = make_mpi_world();
  const int n = w->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "layouts for 2 and 4 ranks";
  auto cpu = make_cpu_backend();
  HalfCpuOps<bf16> half_b;
  HalfCpuOps<fp16> half_f;
  const Dataset data = test_data();
  for (const Precision prec : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    TrainConfig cfg = small_config();
    cfg.loss_scaler.enabled = prec == Precision::fp16;
    const bool half = prec != Precision::fp32;
    struct Case {
      ParallelLayout l;
      ZeroConfig z;
    };
    const std::vector<Case> cases = {
        {{.tp = 2, .dp = n / 2}, {.stage = 1}},
        {{.tp = 1, .dp = n},
         {.stage = 2, .reduce_bucket_size = 4, .overlap_comm = true, .fp32_communication = half}},
        {{.tp = 1, .dp = n}, {.stage = 0, .reduce_bucket_size = 1000, .fp32_communication = half}},
    };
    for (const Case& c : cases) {
      CpuDevice dev_cpu, dev_cpu2;
      HostAsDevice dev_other;
      const LayoutOutcome ref = run_layout({.model = kModel, .layout = {.l = c.l, .z = c.z, .precision = prec}, .train = cfg,
                                            .device = dev_cpu, .host = *w, .data = data, .gather = true});
      const std::string what = std::string(to_string(prec)) + " tp " + std::to_string(c.l.tp) + " dp " +
                               std::to_string(c.l.dp) + " zero " + std::to_string(c.z.stage) +
                               (c.z.fp32_communication ? " comm fp32" : "");
      for (Device* dev : {static_cast<Device*>(&dev_cpu2), static_cast<Device*>(&dev_other)}) {
        CountingOps<float> f32(cpu->ops());
        CountingOps<bf16> b16(half_b);
        CountingOps<fp16> f16(half_f);
        const LayoutOutcome out =
            run_layout({.model = kModel, .layout = {.l = c.l, .z = c.z, .precision = prec}, .train = cfg, .device = *dev,
                        .ops = {.fp32 = &f32, .bf16 = &b16, .fp16 = &f16}, .host = *w, .data = data, .gather = true});
        const std::string on = what + " on " + dev->name();
        EXPECT_EQ(out.losses, ref.losses) << on;
        EXPECT_EQ(out.params, ref.params) << on;  // gathered on rank 0, empty elsewhere
        EXPECT_EQ(out.grads0, ref.grads0) << on;
        EXPECT_EQ(out.skipped, ref.skipped) << on;
        const long used = prec == Precision::fp32 ? f32.calls : prec == Precision::bf16 ? b16.calls : f16.calls;
        EXPECT_GT(used, 0) << on << ": the passed ops were not used";
      }
    }
  }
}

// bf16 / fp16 on a device that is not the CPU's, whose ops for the precision are null (a
// backend without half ops): one InputError line naming the precision and the backend,
// before anything is built.
TEST(LayoutRunner, HalfPrecisionWithoutTheBackendsOpsIsRefused) {
  auto self = make_mpi_self();
  const Dataset data = test_data();
  HostAsDevice dev;
  for (const Precision prec : {Precision::bf16, Precision::fp16}) {
    const TrainConfig cfg = small_config();
    const std::string p(to_string(prec));
    try {
      run_layout({.model = kModel, .layout = {.precision = prec}, .train = cfg, .device = dev, .host = *self, .data = data});
      ADD_FAILURE() << p << " ran without its ops on a non-CPU device";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), "precision " + p + ": the host-as-device backend has no " + p + " ops");
    }
  }
}

// Pipeline sends waited at once (TrainConfig::overlap_p2p_comm false, the blocking baseline)
// train bitwise as overlapped ones, under GPipe, 1F1B and ZB-H1 at PP 2 and PP n, an uneven
// split included, without deadlocking; each step's point-to-point bytes are one (B Tn, C) message per micro-batch and
// direction a stage sends; and the part clock (ParallelGpt::set_part_times) times exactly the
// parts this rank holds.
TEST(LayoutRunner, BlockingSendsTrainBitwiseAsOverlappedOnes) {
  auto world = make_mpi_world();
  const int n = world->size();
  const Dataset data = test_data();
  // Messages of 2 x 64 x 128 fp32 = 64 KiB, past MPI's eager limit (a few KiB on shared memory),
  // so a send completes only once its receive is posted: a wait cycle would hang here.
  const GptConfig model{4, 128, 4, 64, 256};
  TrainConfig cfg = small_config();
  cfg.steps = 2;
  cfg.seq_len = 64;
  cfg.micro_batches = 4;
  cfg.global_batch = 4 * (n / 2) * 2;  // 2 sequences per micro-batch at DP n / 2
  struct Case { int pp; const char* schedule; std::vector<int> layers; };
  for (const Case& c : {Case{2, "1f1b", {}}, Case{2, "zb-h1", {3, 1}}, Case{2, "gpipe", {1, 3}},
                        Case{n, "1f1b", {}}, Case{n, "zb-h1", {}}}) {
    ParallelLayout l;
    l.pp = c.pp, l.dp = n / c.pp, l.schedule = c.schedule, l.pipeline_layers = c.layers;
    SCOPED_TRACE(std::string(c.schedule) + " layers " + pipeline_layers_text(c.layers));
    LayoutOutcome out[2];
    PartTimes parts(model.L);
    for (int blocking = 0; blocking < 2; ++blocking) {
      CpuDevice dev;
      TrainConfig t = cfg;
      t.overlap_p2p_comm = blocking == 0;
      out[blocking] = run_layout({.model = model, .layout = {.l = l}, .train = t, .device = dev, .host = *world,
                                  .data = data, .gather = true, .part_times = blocking ? nullptr : &parts});
    }
    EXPECT_EQ(out[0].losses, out[1].losses);
    EXPECT_EQ(out[0].params, out[1].params);
    EXPECT_FALSE(out[0].params.empty());
    const int stage = grid_coord(world->rank(), l).pp;
    const double msg = double(cfg.global_batch / (l.dp * cfg.micro_batches)) * cfg.seq_len * model.C * sizeof(float);
    const int sends = 2 - (stage == 0) - (stage == c.pp - 1);  // one per direction, less at the ends
    for (const LayoutOutcome& o : out)
      for (const StepTiming& st : o.timings) EXPECT_EQ(st.p2p_bytes, cfg.micro_batches * sends * msg);
    const std::vector<int> held = stage_layers(l, model.L);
    for (int part = 0; part < model.L + 2; ++part) {
      bool mine = part == 0 ? stage == 0 : part == model.L + 1 ? stage == c.pp - 1 : false;
      const int first = stage_first_layer(l, model.L, stage);
      if (part >= 1 && part <= model.L) mine = part - 1 >= first && part - 1 < first + held[size_t(stage)];
      EXPECT_EQ(parts.seconds[PartTimes::kForward][size_t(part)] > 0, mine) << "part " << part;
      EXPECT_EQ(parts.seconds[PartTimes::kBackward][size_t(part)] > 0, mine) << "part " << part;
      EXPECT_EQ(parts.seconds[PartTimes::kWeight][size_t(part)] > 0, mine && c.schedule == std::string("zb-h1"))
          << "part " << part;
    }
  }
  // Interleaving's ring of sends is refused in blocking mode (one line, every rank).
  ParallelLayout l;
  l.pp = 2, l.dp = n / 2, l.schedule = "interleaved", l.virtual_stages = 2;
  TrainConfig t = cfg;
  t.overlap_p2p_comm = false;
  CpuDevice dev;
  EXPECT_THROW(run_layout({.model = model, .layout = {.l = l}, .train = t, .device = dev, .host = *world, .data = data}),
               InputError);
}

// The layout's precision and DP sync recipe (the LayoutSpec, their one copy) are the ones the
// run trains with: not the fp32 / synchronous one. Stale gradients (staleness 1) over DP n; bf16
// on one rank.
TEST(LayoutRunner, PrecisionAndDpSyncComeFromTheLayoutSpec) {
  auto w = make_mpi_world();
  const int n = w->size();
  const Dataset data = test_data();
  CpuDevice dev;
  const TrainConfig plain = small_config();
  auto run_in = [&](Precision p) {
    auto self = make_mpi_self();
    return run_layout({.model = kModel, .layout = {.precision = p}, .train = plain, .device = dev, .host = *self,
                       .data = data, .gather = true});
  };
  const LayoutOutcome bf16_spec = run_in(Precision::bf16), fp32 = run_in(Precision::fp32);
  EXPECT_NE(bf16_spec.losses, fp32.losses) << "layout.precision bf16 trained in fp32";

  if (n < 2) GTEST_SKIP() << "stale gradients need DP >= 2";
  auto run_dp = [&](const DpSync& d) {
    return run_layout({.model = kModel, .layout = {.l = {.dp = n}, .dp_sync = d}, .train = plain, .device = dev,
                       .host = *w, .data = data, .gather = true});
  };
  const LayoutOutcome stale_spec = run_dp({.staleness = 1}), sync = run_dp(DpSync{});
  EXPECT_NE(stale_spec.losses, sync.losses) << "layout.dp_sync staleness 1 trained synchronously";
}

}  // namespace
}  // namespace dtb
