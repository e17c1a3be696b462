// The GEMM and fused-attention shape model (reference/analytic/gemm_model.h; docs/plan.md).
#include "reference/analytic/gemm_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <string>

#include "kernels/error.h"

namespace dtb {
namespace {

constexpr int64_t kAttnTile = 128;  // FlashAttention-2's query and key block rows (Br, Bc) for d <= 128

double elem_bytes(Precision p) { return p == Precision::fp32 ? 4.0 : 2.0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void need(bool ok, const std::string& what) {
  if (!ok) throw InputError("GEMM shape model: " + what);
}
bool positive(double x) { return std::isfinite(x) && x > 0; }

// The fused kernel's fraction of the peak at head dimension d: linear between the model's head
// dimensions, the end values beyond them.
double attention_fraction(const GemmShapeModel& g, int64_t d, bool forward) {
  auto of = [&](const FusedAttentionFraction& f) { return forward ? f.forward : f.backward; };
  const auto& a = g.attention;
  if (d <= a.front().head_dim) return of(a.front());
  for (size_t i = 1; i < a.size(); ++i)
    if (d <= a[i].head_dim) {
      const double w = double(d - a[i - 1].head_dim) / double(a[i].head_dim - a[i - 1].head_dim);
      return of(a[i - 1]) + w * (of(a[i]) - of(a[i - 1]));
    }
  return of(a.back());
}

// The makespan of `copies` copies of the blocks whose works (in tile pairs) are `work`, run
// longest first, each on the SM that frees first (the list scheduling a GPU's block scheduler
// approximates). Past 64 blocks an SM the quantization is under 1/64: the balanced bound
// max(total / SMs, the longest block) stands in for the simulation.
double makespan_pairs(const std::vector<int64_t>& work, int64_t copies, int sms) {
  int64_t total = 0, longest = 0;
  for (int64_t w : work) total += w, longest = std::max(longest, w);
  const int64_t blocks = int64_t(work.size()) * copies;
  if (blocks > 64 * int64_t(sms)) return std::max(double(total) * double(copies) / sms, double(longest));
  std::vector<int64_t> sorted = work;
  std::sort(sorted.rbegin(), sorted.rend());
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_at;
  for (int i = 0; i < sms; ++i) free_at.push(0);
  int64_t end = 0;
  for (int64_t w : sorted)
    for (int64_t c = 0; c < copies; ++c) {
      const int64_t t = free_at.top() + w;
      free_at.pop();
      free_at.push(t);
      end = std::max(end, t);
    }
  return double(end);
}

}  // namespace

void validate_gemm_shape_model(const GemmShapeModel& g) {
  need(g.sm_count >= 1, "sm_count must be >= 1, got " + std::to_string(g.sm_count));
  need(!g.tiles.empty(), "no GEMM tiles");
  for (const GemmTile& t : g.tiles)
    need(t.m >= 1 && t.n >= 1, "a tile side < 1 (" + std::to_string(t.m) + "x" + std::to_string(t.n) + ")");
  for (size_t p = 0; p < 3; ++p) {
    need(positive(g.peak_flops[p]), "a peak FLOP/s that is not > 0");
    need(positive(g.gemm_fraction[p]) && g.gemm_fraction[p] <= 1, "a GEMM fraction of the peak outside (0, 1]");
  }
  need(positive(g.l2_bytes_per_s) && positive(g.memory_bytes_per_s), "a bandwidth that is not > 0");
  for (size_t p = 0; p < 3; ++p)
    for (double a : {g.gemm_alpha_s[p], g.attention_alpha_s[p]}) need(std::isfinite(a) && a >= 0, "an alpha that is not >= 0");
  need(!g.attention.empty(), "no fused attention fractions");
  for (size_t i = 0; i < g.attention.size(); ++i) {
    const FusedAttentionFraction& f = g.attention[i];
    need(f.head_dim >= 1 && (i == 0 || f.head_dim > g.attention[i - 1].head_dim),
         "fused attention head dimensions must be >= 1 and ascending");
    need(positive(f.forward) && f.forward <= 1 && positive(f.backward) && f.backward <= 1,
         "a fused attention fraction outside (0, 1]");
  }
}

double gemm_seconds(const GemmShapeModel& g, int64_t M, int64_t N, int64_t K, Precision p) {
  validate_gemm_shape_model(g);
  need(M >= 1 && N >= 1 && K >= 1, "GEMM sizes must be >= 1, got " + std::to_string(M) + "x" + std::to_string(N) +
                                       "x" + std::to_string(K));
  const double e = elem_bytes(p), sms = g.sm_count;
  const double rate = g.gemm_fraction[size_t(p)] * g.peak_flops[size_t(p)] / sms;  // one SM's FLOP/s
  const double l2 = g.l2_bytes_per_s / sms;                                         // one SM's L2 share, bytes/s
  double best = HUGE_VAL;
  for (const GemmTile& t : g.tiles) {
    const int64_t tiles = ceil_div(M, t.m) * ceil_div(N, t.n);
    const double waves = double(ceil_div(tiles, g.sm_count));
    const double per_k = std::max(2.0 * t.m * t.n / rate, e * (t.m + t.n) / l2);  // one K step of a tile
    const double time = waves * per_k * double(K);
    if (time < best) best = time;
  }
  const double bytes = e * (double(M) * K + double(K) * N + double(M) * N);
  return g.gemm_alpha_s[size_t(p)] + std::max(best, bytes / g.memory_bytes_per_s);
}

double fused_attention_seconds(const GemmShapeModel& g, int64_t b, int64_t heads, int64_t s_q, int64_t s_k,
                               int64_t head_dim, bool causal, bool forward, Precision p) {
  validate_gemm_shape_model(g);
  need(b >= 1 && heads >= 1 && s_q >= 1 && s_k >= 1 && head_dim >= 1, "attention sizes must be >= 1");
  const int64_t nq = ceil_div(s_q, kAttnTile), nk = ceil_div(s_k, kAttnTile), off = s_k - s_q;
  // Key tiles query tile i visits: those starting at or before its last row's last visible key.
  auto keys_of = [&](int64_t i) {
    if (!causal) return nk;
    const int64_t last_key = std::min(s_q, (i + 1) * kAttnTile) - 1 + off;  // bottom-right aligned
    return last_key < 0 ? int64_t(0) : std::min(nk, last_key / kAttnTile + 1);
  };
  std::vector<int64_t> work;
  if (forward) {
    for (int64_t i = 0; i < nq; ++i) work.push_back(keys_of(i));
  } else {  // a key tile's block visits the query tiles that see it
    std::vector<int64_t> starts(size_t(nk) + 1, 0);  // query tile i adds one to key tiles [0, keys_of(i))
    for (int64_t i = 0; i < nq; ++i) ++starts[0], --starts[size_t(keys_of(i))];
    for (int64_t j = 0, run = 0; j < nk; ++j) work.push_back(run += starts[size_t(j)]);
  }
  const double pair_flops = (forward ? 4.0 : 10.0) * kAttnTile * kAttnTile * double(head_dim);
  const double rate = attention_fraction(g, head_dim, forward) * g.peak_flops[size_t(p)] / g.sm_count;
  const double compute = makespan_pairs(work, b * heads, g.sm_count) * pair_flops / rate;
  const double e = elem_bytes(p), bh = double(b) * heads, d = double(head_dim);
  // Forward: Q, O (s_q rows) and K, V (s_k) once, the log-sum-exp; backward: Q, O, dO, dQ and K,
  // V, dK, dV, the log-sum-exp and rowsum(dO O).
  const double bytes = forward ? bh * (e * d * (2.0 * s_q + 2.0 * s_k) + 4.0 * s_q)
                               : bh * (e * d * (4.0 * s_q + 4.0 * s_k) + 8.0 * s_q);
  return g.attention_alpha_s[size_t(p)] + std::max(compute, bytes / g.memory_bytes_per_s);
}

double materialized_attention_seconds(const GemmShapeModel& g, int64_t b, int64_t heads, int64_t s_q, int64_t s_k,
                                      int64_t head_dim, bool forward, Precision p) {
  validate_gemm_shape_model(g);
  need(b >= 1 && heads >= 1 && s_q >= 1 && s_k >= 1 && head_dim >= 1, "attention sizes must be >= 1");
  const int64_t bh = b * heads, d = head_dim;
  const double e = elem_bytes(p), scores = double(bh) * double(s_q) * double(s_k);
  auto pass = [&](double bytes) { return bytes / g.memory_bytes_per_s; };
  if (forward)
    return gemm_seconds(g, bh * s_q, s_k, d, p) + pass(2 * e * scores) + gemm_seconds(g, bh * s_q, d, s_k, p);
  return gemm_seconds(g, bh * s_k, d, s_q, p) + gemm_seconds(g, bh * s_q, s_k, d, p) + pass(3 * e * scores) +
         gemm_seconds(g, bh * s_q, d, s_k, p) + gemm_seconds(g, bh * s_k, d, s_q, p);
}

}  // namespace dtb
