// Test helpers shared by the multi-rank tests of the sharded GPT (parallel_trainer_test.cc,
// sequence_parallel_test.cc, the checkpoint and layout runner tests): the single-rank step-0
// gradient, a layout's gathered step-0 gradient, the relative norm difference between two
// gradients, and a temporary directory the ranks share.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/error.h"
#include "reference/parallel/parallel_trainer.h"
#include "reference/model/test_dataset.h"
#include "reference/training/trainer.h"

namespace dtb {

/// A directory unique to the test and shared by the job's ranks: rank 0 makes it (mkdtemp
/// under the temporary directory) and broadcasts its path; the destructor waits for every
/// rank, then rank 0 removes it. Collective over `w` (construction and destruction).
class SharedTempDir {
 public:
  explicit SharedTempDir(Communicator& w) : w_(w) {
    std::vector<char> buf(128, 0);
    if (w.rank() == 0) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "dtb-test-XXXXXX").string();
      DTB_CHECK(tmpl.size() < buf.size() && mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
      std::memcpy(buf.data(), tmpl.data(), tmpl.size());
    }
    w.broadcast(buf.data(), buf.size() / 4, DType::i32, 0);
    path_ = buf.data();
  }
  ~SharedTempDir() {
    w_.barrier();
    if (w_.rank() == 0) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  Communicator& w_;
  std::string path_;
};


/// ||a - ref|| / ||ref|| (2-norms over every element; a and ref the same length).
inline double rel_diff(const std::vector<double>& a, const std::vector<double>& ref) {
  double s = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - ref[i]) * (a[i] - ref[i]), r += ref[i] * ref[i];
  return std::sqrt(s / r);
}

/// The single-rank model's step-0 gradient (gpt.h's flat layout) and *loss, every rank
/// computing it alone.
template <typename T>
std::vector<double> baseline_grads(const GptConfig& model, const TrainConfig& cfg, double* loss) {
  CpuDevice dev;
  Gpt<T> m(model, dev);
  m.init(cfg.seed);
  auto self = make_mpi_self();
  *loss = compute_gradients(m, test_data(), cfg, 0, *self);
  return {m.grads(), m.grads() + m.num_params()};
}

/// A layout's step-0 loss, its full gradient gathered on every rank (ParallelGpt::gather), the
/// largest difference between copies of a replicated gradient element (0: bitwise equal) and
/// the gradient's global 2-norm as the optimizer step computes it (each element once).
struct LayoutGrads {
  std::vector<double> grads;
  double loss = 0, replica_diff = 0, grad_norm = 0;
};

/// Computes LayoutGrads for `layout` (of w.size() ranks; with its expert-parallel groups for an
/// MoE model) on the CPU. Collective over w.
template <typename T>
LayoutGrads layout_grads(const GptConfig& model, const ParallelLayout& layout, const TrainConfig& cfg,
                         Communicator& w, const ZeroConfig& zero = ZeroConfig{}, Recompute recompute = Recompute::none) {
  CpuDevice dev;
  OwnedGroups og = make_parallel_groups(w, layout);
  ParallelGroups g{w, *og.tp, *og.dp, *og.pp, og.pp_backward.get(), og.ep.get(), og.expert_dp.get()};
  ParallelGpt<T> m(model, layout, w.rank(), dev, *og.tp, nullptr, og.ep.get());
  m.set_recompute(recompute);
  ZeroEngine<T> engine(m, zero, *og.dp, cfg.adamw, og.expert_dp.get());
  engine.load(m.initial_params(cfg.seed));
  LayoutGrads r;
  r.loss = parallel_compute_gradients(m, engine, test_data(), cfg, 0, g);
  const std::vector<T> grads = engine.full_grads();
  r.grads = m.gather(grads, w);
  r.replica_diff = m.replica_max_diff(grads, w);
  TrainConfig no_clip = cfg;
  no_clip.grad_clip = 0;  // the norm is computed every step, clipping or not
  r.grad_norm = parallel_optimizer_step(engine, no_clip, nullptr, g).grad_norm;
  return r;
}

}  // namespace dtb
