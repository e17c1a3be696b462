#include "reference/analytic/stage_balance.h"

#include <cmath>
#include <limits>
#include <string>

#include "kernels/error.h"
#include "reference/layout/process_grid.h"

namespace dtb {

namespace {
void check_costs(const PartCosts& c) {
  const size_t n = c.forward.size();
  if (n < 3 || c.backward.size() != n || c.weight.size() != n)
    throw InputError("stage balance: part costs must be three lists of L + 2 values (embedding, L layers, head)");
  for (const auto* v : {&c.forward, &c.backward, &c.weight})
    for (double x : *v)
      if (!std::isfinite(x) || x < 0) throw InputError("stage balance: a part cost is not a finite value >= 0");
}
}  // namespace

std::vector<int> balance_stages(const PartCosts& c, int p) {
  check_costs(c);
  const int L = c.layers();
  if (p < 1 || p > L)
    throw InputError("stage balance: " + std::to_string(p) + " stages for " + std::to_string(L) +
                     " layers (each stage needs one)");
  // prefix[i]: the cost of layers 0..i-1.
  std::vector<double> prefix(size_t(L) + 1, 0.0);
  for (int l = 0; l < L; ++l) prefix[size_t(l) + 1] = prefix[size_t(l)] + c.total(1 + l);
  const double emb = c.total(0), head = c.total(L + 1);
  auto stage = [&](int s, int a, int b) {  // stage s holding layers [a, b)
    return prefix[size_t(b)] - prefix[size_t(a)] + (s == 0 ? emb : 0.0) + (s == p - 1 ? head : 0.0);
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][b]: the smallest bottleneck of stages 0..s holding layers [0, b); cut[s][b] the
  // first layer of stage s there.
  std::vector<std::vector<double>> best(size_t(p), std::vector<double>(size_t(L) + 1, kInf));
  std::vector<std::vector<int>> cut(size_t(p), std::vector<int>(size_t(L) + 1, 0));
  for (int b = 1; b <= L; ++b) best[0][size_t(b)] = stage(0, 0, b);
  for (int s = 1; s < p; ++s)
    for (int b = s + 1; b <= L; ++b)
      for (int a = s; a < b; ++a) {  // stage s's first layer; strict < keeps the smallest a among equals
        const double x = std::max(best[size_t(s) - 1][size_t(a)], stage(s, a, b));
        if (x < best[size_t(s)][size_t(b)]) best[size_t(s)][size_t(b)] = x, cut[size_t(s)][size_t(b)] = a;
      }
  std::vector<int> layers(static_cast<size_t>(p));
  int b = L;
  for (int s = p - 1; s > 0; --s) {
    const int a = cut[size_t(s)][size_t(b)];
    layers[size_t(s)] = b - a;
    b = a;
  }
  layers[0] = b;
  return layers;
}

std::vector<StageCost> stage_costs(const PartCosts& c, const std::vector<int>& layers) {
  check_costs(c);
  const int L = c.layers(), p = int(layers.size());
  check_pipeline_layers(layers, p, L, "stage balance: its stages");
  std::vector<StageCost> out(static_cast<size_t>(p));
  int l = 0;
  for (int s = 0; s < p; ++s) {
    auto add = [&](int part) {
      out[size_t(s)].forward += c.forward[size_t(part)];
      out[size_t(s)].backward += c.backward[size_t(part)];
      out[size_t(s)].weight += c.weight[size_t(part)];
    };
    if (s == 0) add(0);
    for (int k = 0; k < layers[size_t(s)]; ++k) add(1 + l++);
    if (s == p - 1) add(L + 1);
  }
  return out;
}

}  // namespace dtb
