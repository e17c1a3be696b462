// The experiment of results/logs/llama-half.md: the conformance model trained in float64 for 20 steps
// from its initialisation, then again from that initialisation rounded once to bf16 (what every bf16
// run starts from) or perturbed by relative noise p (1 + s z), z uniform in [-1, 1]; prints the
// per-step global gradient norms' differences. No half-precision op runs. Not built by CMake.
// Usage: perturbed_init MODEL S [SEEDS] [DUMP_STEP]   MODEL llama | llama-eps1e-2 | llama-L2 | gpt;
// S = bf16 (round once) or a number; DUMP_STEP writes both runs' parameters and that step's batch
// (float64 params, int32 tokens, int32 targets) to run<i>.bin for check_torch.py.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "kernels/half.h"
#include "reference/model/data.h"
#include "reference/model/gpt.h"
#include "reference/training/trainer.h"

using namespace dtb;

namespace {

// The conformance suite's defaults (suites/conformance.cc) and the shape of the Llama finding.
GptConfig model(const std::string& name) {
  GptConfig c{name == "llama-L2" ? 2 : 8, 64, 4, 32, 256};
  if (name == "gpt") return c;
  c.arch = ModelArch::llama, c.num_kv_heads = 2, c.ffn_hidden = 176;
  c.norm_eps = name == "llama-eps1e-2" ? 1e-2 : 1e-5;
  return c;
}

double bf16_round(double x) {
  float f = float(x);
  bf16 h;
  convert_from_float(&h, &f, 1);
  convert_to_float(&f, &h, 1);
  return f;
}

void dump(const Gpt<double>& m, const Dataset& data, const TrainConfig& tc, int step, const std::string& path) {
  const size_t n = size_t(tc.global_batch) * size_t(tc.seq_len);
  std::vector<int32_t> tok(n), tgt(n);
  fill_batch(data, tc.seed, step, tc.global_batch, 0, tc.global_batch, tc.seq_len, tok.data(), tgt.data());
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(m.params(), sizeof(double), m.num_params(), f);
  std::fwrite(tok.data(), sizeof(int32_t), tok.size(), f);
  std::fwrite(tgt.data(), sizeof(int32_t), tgt.size(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string name = argc > 1 ? argv[1] : "llama", how = argc > 2 ? argv[2] : "bf16";
  const bool round_once = how == "bf16";
  const double s = round_once ? 0 : std::atof(how.c_str());
  const int seeds = round_once ? 1 : argc > 3 ? std::atoi(argv[3]) : 3, dump_step = argc > 4 ? std::atoi(argv[4]) : -1;
  TrainConfig tc;
  tc.steps = 20, tc.global_batch = 16, tc.micro_batches = 1, tc.seq_len = 32, tc.seed = 1234;
  tc.adamw.lr = 1e-3f, tc.adamw.beta1 = 0.9f, tc.adamw.beta2 = 0.95f, tc.adamw.eps = 1e-8f, tc.adamw.weight_decay = 0;
  const Dataset data = load_dataset("/usr/share/games/fortunes/cookie", 64);  // dtbench's default data
  CpuDevice dev;
  auto self = make_mpi_self();
  Gpt<double> m(model(name), dev);
  auto run = [&](int seed, const std::string& out) {  // seed < 0: unperturbed
    m.init(tc.seed);
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::uniform_real_distribution<double> z(-1, 1);
    if (seed >= 0)
      for (size_t i = 0; i < m.num_params(); ++i)
        m.params()[i] = round_once ? bf16_round(m.params()[i]) : m.params()[i] * (1 + s * z(rng));
    TrainConfig first = tc;
    if (dump_step >= 0) first.steps = dump_step;
    TrainRun r = train(m, data, first, DpSync{}, *self);
    if (dump_step >= 0) {
      dump(m, data, tc, dump_step, out);
      m.zero_grad();
      compute_gradients(m, data, tc, dump_step, *self);
      double sq = 0;
      for (size_t i = 0; i < m.num_params(); ++i) sq += m.grads()[i] * m.grads()[i];
      std::printf("%s: step %d gradient norm %.6f\n", out.c_str(), dump_step, std::sqrt(sq));
    }
    return r;
  };
  const TrainRun ref = run(-1, "run0.bin");
  if (dump_step >= 0) {
    run(0, "run1.bin");
    MPI_Finalize();
    return 0;
  }
  std::printf("%s, init %s\n", name.c_str(), round_once ? "rounded to bf16 once" : ("perturbed by s = " + how).c_str());
  double worst_all = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    const TrainRun r = run(seed, "");
    double worst = 0;
    int at = 0;
    for (int k = 0; k < tc.steps; ++k)
      if (std::fabs(r.grad_norms[k] - ref.grad_norms[k]) > worst) worst = std::fabs(r.grad_norms[k] - ref.grad_norms[k]), at = k;
    std::printf("  seed %d: max |norm - norm_ref| %.4f at step %d (%.4f against %.4f)\n", seed, worst, at,
                r.grad_norms[at], ref.grad_norms[at]);
    worst_all = std::max(worst_all, worst);
  }
  std::printf("  max over seeds %.4f\n", worst_all);
  MPI_Finalize();
}
