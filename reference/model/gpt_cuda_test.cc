// The reference GPT on the CUDA backend against the same model on the CPU: the op tests
// check each kernel alone; this checks them wired into the model (offsets, accumulation,
// the order of the backward) and through a few training steps. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_ops.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/training/trainer.h"

namespace dtb {
namespace {

double rel_diff(const std::vector<float>& a, const std::vector<float>& b, size_t off, size_t n) {
  double s = 0, r = 0;
  for (size_t i = off; i < off + n; ++i) s += std::pow(double(a[i]) - b[i], 2), r += double(b[i]) * b[i];
  return r > 0 ? std::sqrt(s / r) : std::sqrt(s);
}

// Both sides are float32 computations of the same sums in different orders (cuBLASLt and
// the CUDA reductions vs OpenBLAS and loops); each is ~2e-7 (relative, per tensor) from
// the exact value, as the PyTorch golden test measures for the CPU, so their difference
// is ~5e-7. 1e-5 leaves 20x; a wrong offset or a lost term is off by 1e-2 or more.
constexpr double kTol = 1e-5;

TEST(CudaGpt, LossAndGradsMatchCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  const GptConfig cfg{2, 64, 4, 16, 256};
  const int B = 4, Tn = 16;
  std::mt19937 gen(5);
  std::vector<int32_t> tok(B * Tn), tgt(B * Tn);
  for (int i = 0; i < B * Tn; ++i) tok[i] = int32_t(gen() % 256), tgt[i] = int32_t(gen() % 256);

  CpuDevice cdev;
  Gpt<float> cpu(cfg, cdev);
  CudaDevice gdev(0);
  cuda::Gemm gemm;
  CudaOps ops(gdev, gemm);
  Gpt<float> gpu(cfg, gdev, &ops);
  for (Gpt<float>* m : {&cpu, &gpu}) {
    m->init(7);
    m->zero_grad();
  }
  const double lc = cpu.forward(tok.data(), tgt.data(), B, Tn);
  const double lg = gpu.forward(tok.data(), tgt.data(), B, Tn);
  cpu.backward(1.0f / (B * Tn));
  gpu.backward(1.0f / (B * Tn));
  std::vector<float> gc(cpu.grads(), cpu.grads() + cpu.num_params()), gg(gpu.num_params());
  ops.copy_to_host(gg.data(), gpu.grads(), gg.size() * sizeof(float));
  std::printf("cuda vs cpu loss: %.9f vs %.9f\n", lg, lc);
  EXPECT_NEAR(lg, lc, 1e-6 * lc);
  for (const auto& t : cpu.layout()) {
    const double d = rel_diff(gg, gc, t.offset, t.numel);
    std::printf("cuda vs cpu grad %s: rel err %.2e (tol %.0e)\n", t.name.c_str(), d, kTol);
    EXPECT_LE(d, kTol) << t.name;
  }
}

TEST(CudaGpt, TrainingStepsMatchCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  const GptConfig model{2, 64, 4, 32, 256};
  std::string text;
  for (int i = 0; i < 20; ++i) text += "The quick brown fox jumps over the lazy dog; pack my box with five dozen jugs. ";
  Dataset data;
  data.bytes.assign(text.begin(), text.end());
  TrainConfig cfg;
  cfg.steps = 5;
  cfg.global_batch = 4;
  cfg.seq_len = 32;
  cfg.adamw.lr = 1e-3f;
  auto self = make_mpi_self();
  CpuDevice cdev;
  Gpt<float> cpu(model, cdev);
  CudaDevice gdev(0);
  cuda::Gemm gemm;
  CudaOps ops(gdev, gemm);
  Gpt<float> gpu(model, gdev, &ops);
  cpu.init(cfg.seed);
  gpu.init(cfg.seed);
  const TrainRun rc = train(cpu, data, cfg, DpSync{}, *self);
  const TrainRun rg = train(gpu, data, cfg, DpSync{}, *self);
  // Five Adam steps from identical weights: the runs differ by rounding only, which Adam
  // can amplify to lr-sized steps in near-zero-gradient weights; the loss stays within
  // 1e-4 relative of the CPU's over so few steps (as trainer_test measures for DP).
  for (int s = 0; s < cfg.steps; ++s) EXPECT_NEAR(rg.losses[s], rc.losses[s], 1e-4 * rc.losses[s]) << s;
}


// The sharded model (reference/parallel/parallel_gpt.h) on the CUDA backend, one rank: plain, and
// split into two chunks under the interleaved schedule (chunk 0 hands its activations to
// chunk 1 on the same rank), against the CPU's single-rank model. Same tolerance and
// reasoning as LossAndGradsMatchCpu: float32 sums in different orders on both sides.
TEST(CudaGpt, ParallelGptOnOneGpuMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  const GptConfig model{2, 64, 4, 32, 256};
  std::string text;
  for (int i = 0; i < 20; ++i) text += "The quick brown fox jumps over the lazy dog; pack my box with five dozen jugs. ";
  Dataset data;
  data.bytes.assign(text.begin(), text.end());
  TrainConfig cfg;
  cfg.global_batch = 4;
  cfg.micro_batches = 2;
  cfg.seq_len = 32;
  auto self = make_mpi_self();
  CpuDevice cdev;
  Gpt<float> cpu(model, cdev);
  cpu.init(cfg.seed);
  const double lc = compute_gradients(cpu, data, cfg, 0, *self);
  const std::vector<float> gc(cpu.grads(), cpu.grads() + cpu.num_params());
  CudaDevice gdev(0);
  cuda::Gemm gemm;
  CudaOps ops(gdev, gemm);
  for (const char* schedule : {"1f1b", "interleaved"}) {
    ParallelLayout layout;
    layout.schedule = schedule;
    layout.virtual_stages = std::string(schedule) == "interleaved" ? 2 : 1;
    layout.micro_batches = cfg.micro_batches;
    OwnedGroups og = make_parallel_groups(*self, layout);
    ParallelGroups g{*self, *og.tp, *og.dp, *og.pp};
    ParallelGpt<float> gpu(model, layout, 0, gdev, *og.tp, &ops);
    ZeroEngine<float> engine(gpu, ZeroConfig{}, *og.dp, cfg.adamw);
    engine.load(gpu.initial_params(cfg.seed));
    const double lg = parallel_compute_gradients(gpu, engine, data, cfg, 0, g);
    const std::vector<double> full = gpu.gather(engine.full_grads(), *self);
    const std::vector<float> gg(full.begin(), full.end());
    std::printf("cuda parallel gpt (%s) vs cpu loss: %.9f vs %.9f\n", schedule, lg, lc);
    EXPECT_NEAR(lg, lc, 1e-6 * lc) << schedule;
    for (const auto& t : cpu.layout()) EXPECT_LE(rel_diff(gg, gc, t.offset, t.numel), kTol) << schedule << " " << t.name;
  }
}

// ZeRO 2 and 3 with the optimizer offloaded to the CPU (pinned host memory, transfers on the
// copy stream) on one GPU: five AdamW steps follow the CPU's single-rank run as
// TrainingStepsMatchCpu does (1e-4 relative in the loss; the CPU AdamW here and the CPU's
// there are the same code, the GPU's forward and backward differ by rounding).
TEST(CudaGpt, ZeroOffloadOnOneGpuTrainsLikeCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  const GptConfig model{2, 64, 4, 32, 256};
  std::string text;
  for (int i = 0; i < 20; ++i) text += "The quick brown fox jumps over the lazy dog; pack my box with five dozen jugs. ";
  Dataset data;
  data.bytes.assign(text.begin(), text.end());
  TrainConfig cfg;
  cfg.steps = 5;
  cfg.global_batch = 4;
  cfg.micro_batches = 2;
  cfg.seq_len = 32;
  cfg.adamw.lr = 1e-3f;
  auto self = make_mpi_self();
  CpuDevice cdev;
  Gpt<float> cpu(model, cdev);
  cpu.init(cfg.seed);
  const TrainRun rc = train(cpu, data, cfg, DpSync{}, *self);
  CudaDevice gdev(0);
  cuda::Gemm gemm;
  CudaOps ops(gdev, gemm);
  for (int stage : {2, 3}) {
    ParallelLayout layout;
    layout.micro_batches = cfg.micro_batches;
    OwnedGroups og = make_parallel_groups(*self, layout);
    ParallelGroups g{*self, *og.tp, *og.dp, *og.pp};
    ParallelGpt<float> gpu(model, layout, 0, gdev, *og.tp, &ops);
    ZeroConfig z;
    z.stage = stage;
    z.offload_optimizer = true;
    ZeroEngine<float> engine(gpu, z, *og.dp, cfg.adamw);
    engine.load(gpu.initial_params(cfg.seed));
    EXPECT_GT(gdev.stats().bytes(Tier::host, MemCategory::optimizer_state), 0u);  // pinned host tier
    EXPECT_EQ(gdev.stats().bytes(Tier::device, MemCategory::optimizer_state), 0u);
    const TrainRun rg = parallel_train(gpu, engine, data, cfg, DpSync{}, g);
    for (int s = 0; s < cfg.steps; ++s)
      EXPECT_NEAR(rg.losses[s], rc.losses[s], 1e-4 * rc.losses[s]) << "zero " << stage << " step " << s;
  }
}

}  // namespace
}  // namespace dtb
