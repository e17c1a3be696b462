// The MoE FFN layer against PyTorch: scripts/make_golden.py --moe runs an independent float64
// torch implementation of the layer (moe_loss there: routing, capacity, gates, experts, both
// losses) and writes its inputs, routing, output, losses and every gradient; moe_forward and
// moe_backward in double rerun it here.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "reference/model/moe.h"

namespace dtb {
namespace {

// File format, little-endian, no padding:
//   char    magic[8]   "DTBMOE01"
//   int32   N, C, E, F, topk
//   float64 capacity_factor, aux_loss_coeff, z_loss_coeff
//   float32 x[N*C], R[N*C]                      the input and the loss's weights (loss = sum(out * R) + aux + z)
//   float32 router[E*C], fc[E*F*C], fc_bias[E*F], proj[E*C*F], proj_bias[E*C]
//   int32   slots[N*topk]                       row in the expert's batch, -1 dropped
//   float64 aux, z, out[N*C], dx[N*C], then the five weights' gradients in the order above
static_assert(std::endian::native == std::endian::little, "the golden file is little-endian");

template <typename X> std::vector<X> read_vec(std::ifstream& in, size_t n) {
  std::vector<X> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(X)));
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Both sides compute in float64 from the same real numbers (float32 values widened exactly);
// they differ in summation order and in GELU's formula (x * sigmoid(2z) here, 0.5 x (1 + tanh z)
// in torch), each a few ulps per operation. A value here sums at most F + C = 24 products of
// O(1) numbers, a gradient a few such sums: well under 100 ulps, about 2e-14 relative. The
// bound 1e-12 * max(1, |want|) leaves a margin of 50; a wrong term (a gate, a loss gradient,
// a dropped token's contribution) is O(1e-2) or more.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::fabs(want[i]))) << what << " " << i;
}

TEST(MoeGolden, ForwardAndBackwardMatchPyTorch) {
  const std::string path = std::string(DTB_TESTDATA_DIR) + "/moe_layer.bin";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing: /usr/bin/python3 scripts/make_golden.py --moe writes it";
  char magic[8];
  in.read(magic, 8);
  ASSERT_EQ(std::string(magic, 8), "DTBMOE01");
  const auto dims = read_vec<int32_t>(in, 5);
  const int N = dims[0], C = dims[1], E = dims[2], F = dims[3], K = dims[4];
  const auto coeffs = read_vec<double>(in, 3);
  MoeConfig cfg;
  cfg.num_experts = E, cfg.topk = K, cfg.capacity_factor = coeffs[0];
  cfg.aux_loss_coeff = coeffs[1], cfg.z_loss_coeff = coeffs[2], cfg.ffn_hidden = F;
  const size_t nc = size_t(N) * C;
  const std::vector<size_t> sizes = {size_t(E) * C, size_t(E) * F * C, size_t(E) * F, size_t(E) * C * F,
                                     size_t(E) * C};
  std::vector<double> x = widen(read_vec<float>(in, nc)), R = widen(read_vec<float>(in, nc)), w, g;
  for (size_t n : sizes) {
    const auto part = widen(read_vec<float>(in, n));
    w.insert(w.end(), part.begin(), part.end());
  }
  const auto slots = read_vec<int32_t>(in, size_t(N) * K);
  const auto losses = read_vec<double>(in, 2);
  const auto want_out = read_vec<double>(in, nc), want_dx = read_vec<double>(in, nc);
  const auto want_dw = read_vec<double>(in, w.size());
  ASSERT_TRUE(in) << path << " is shorter than its header says";
  g.assign(w.size(), 0.0);
  auto view = [&](std::vector<double>& b) {
    MoeWeights<double> v;
    double* p = b.data();
    v.router = p, p += sizes[0];
    v.fc = p, p += sizes[1];
    v.fc_bias = p, p += sizes[2];
    v.proj = p, p += sizes[3];
    v.proj_bias = p;
    return v;
  };

  CpuOps<double> ops;
  MoeActivations<double> acts;
  std::vector<double> out(nc), dx(nc, 0.0);
  moe_forward(ops, cfg, view(w), x.data(), out.data(), N, C, acts);
  EXPECT_EQ(acts.routing.slot, std::vector<int>(slots.begin(), slots.end()));
  EXPECT_GT(acts.routing.dropped, 0);  // the file exercises dropping
  EXPECT_NEAR(acts.routing.aux_loss, losses[0], 1e-12);
  EXPECT_NEAR(acts.routing.z_loss, losses[1], 1e-12);
  expect_close(out, want_out, "out");
  moe_backward(ops, cfg, view(w), view(g), x.data(), R.data(), dx.data(), N, C, acts);
  expect_close(dx, want_dx, "dx");
  expect_close(g, want_dw, "weight gradient");
}

}  // namespace
}  // namespace dtb
