// Silent-data-corruption triage of `dtbench validate` (see sdc.h): the replay on each rank, the
// majority rule and the check's verdict.
#include "harness/validate/sdc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "harness/validate/format.h"
#include "harness/validate/run.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/device.h"
#include "reference/model/data.h"
#include "reference/model/gpt.h"
#include "reference/model/test_dataset.h"
#include "reference/training/trainer.h"

namespace dtb {
namespace {

using nlohmann::json;
using namespace validate_detail;

// FNV-1a, 64-bit, over n bytes, continuing from h.
uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// CpuOps<float> with the test-only fault: once armed, the next matmul_forward's output (N, OC)
// gets bit 0 of one element flipped, row N / 2 + 37 and column OC / 2 + 5 (in the replay: a key
// of token 37 of a sequence, which the later tokens attend to; a first token's query would be
// masked, its softmax being 1 whatever the score), then the hook disarms. Every other op
// forwards unchanged.
class SdcOps final : public Ops<float> {
 public:
  void arm() { armed_ = true; }
  std::string backend() const override { return cpu_.backend(); }
  void zero(float* p, size_t n) override { cpu_.zero(p, n); }
  void copy_from_host(void* d, const void* s, size_t b) override { cpu_.copy_from_host(d, s, b); }
  void copy_to_host(void* d, const void* s, size_t b) override { cpu_.copy_to_host(d, s, b); }
  void encoder_forward(float* o, const int32_t* t, const float* wte, const float* wpe, int B, int Tn, int C) override {
    cpu_.encoder_forward(o, t, wte, wpe, B, Tn, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* d, const int32_t* t, int B, int Tn, int C) override {
    cpu_.encoder_backward(dwte, dwpe, d, t, B, Tn, C);
  }
  void layernorm_forward(float* o, float* mean, float* rstd, const float* in, const float* w, const float* b, int N,
                         int C) override {
    cpu_.layernorm_forward(o, mean, rstd, in, w, b, N, C);
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* in, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    cpu_.layernorm_backward(di, dw, db, d, in, w, mean, rstd, N, C);
  }
  void matmul_forward(float* o, const float* in, const float* w, const float* b, int N, int C, int OC) override {
    cpu_.matmul_forward(o, in, w, b, N, C, OC);
    if (!armed_) return;
    armed_ = false;
    uint32_t bits;
    float* x = o + std::min(size_t(N) * size_t(OC) - 1, (size_t(N) / 2 + 37) * size_t(OC) + size_t(OC) / 2 + 5);
    std::memcpy(&bits, x, sizeof bits);
    bits ^= 1u;  // the lowest mantissa bit: a relative error of at most 2^-23
    std::memcpy(x, &bits, sizeof bits);
  }
  void matmul_backward(float* di, float* dw, float* db, const float* d, const float* in, const float* w, int N, int C,
                       int OC) override {
    cpu_.matmul_backward(di, dw, db, d, in, w, N, C, OC);
  }
  void attention_forward(float* o, float* att, const float* qkv, int B, int Tn, int C, int NH) override {
    cpu_.attention_forward(o, att, qkv, B, Tn, C, NH);
  }
  void attention_backward(float* dqkv, float* s, const float* d, const float* qkv, const float* att, int B, int Tn,
                          int C, int NH) override {
    cpu_.attention_backward(dqkv, s, d, qkv, att, B, Tn, C, NH);
  }
  void gelu_forward(float* o, const float* in, size_t n) override { cpu_.gelu_forward(o, in, n); }
  void gelu_backward(float* di, const float* in, const float* d, size_t n) override {
    cpu_.gelu_backward(di, in, d, n);
  }
  void residual_forward(float* o, const float* a, const float* b, size_t n) override {
    cpu_.residual_forward(o, a, b, n);
  }
  void crossentropy_forward(float* l, float* p, const float* lg, const int32_t* t, int N, int V) override {
    cpu_.crossentropy_forward(l, p, lg, t, N, V);
  }
  void crossentropy_backward(float* dl, const float* p, const int32_t* t, float dloss, int N, int V) override {
    cpu_.crossentropy_backward(dl, p, t, dloss, N, V);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWParams& hp, int t) override {
    cpu_.adamw_update(p, g, m, v, n, hp, t);
  }
  void embedding_shard_forward(float* o, const int32_t* t, const float* wte, const float* wpe, int B, int Tn, int C,
                               int v0, int v1) override {
    cpu_.embedding_shard_forward(o, t, wte, wpe, B, Tn, C, v0, v1);
  }
  void embedding_shard_backward(float* dwte, float* dwpe, const float* d, const int32_t* t, int B, int Tn, int C,
                                int v0, int v1) override {
    cpu_.embedding_shard_backward(dwte, dwpe, d, t, B, Tn, C, v0, v1);
  }
  void add_bias(float* o, const float* b, int N, int OC) override { cpu_.add_bias(o, b, N, OC); }
  void scale(float* x, float a, size_t n) override { cpu_.scale(x, a, n); }
  void crossentropy_shard_max(float* mx, const float* lg, int N, int Vl) override {
    cpu_.crossentropy_shard_max(mx, lg, N, Vl);
  }
  void crossentropy_shard_sums(float* s, const float* lg, const float* mx, const int32_t* t, int N, int Vl,
                               int v0) override {
    cpu_.crossentropy_shard_sums(s, lg, mx, t, N, Vl, v0);
  }
  void crossentropy_shard_forward(float* l, float* p, const float* lg, const float* mx, const float* s, int N,
                                  int Vl) override {
    cpu_.crossentropy_shard_forward(l, p, lg, mx, s, N, Vl);
  }
  void crossentropy_shard_backward(float* dl, const float* p, const int32_t* t, float dloss, int N, int Vl,
                                   int v0) override {
    cpu_.crossentropy_shard_backward(dl, p, t, dloss, N, Vl, v0);
  }

 private:
  CpuOps<float> cpu_;
  bool armed_ = false;
};

std::string hex(uint64_t h) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace

MajorityVerdict majority_hash(const std::vector<uint64_t>& hashes) {
  MajorityVerdict v;
  std::map<uint64_t, int> count;
  for (uint64_t h : hashes) ++count[h];
  for (const auto& [h, k] : count)
    if (2 * k > int(hashes.size())) v.majority = true, v.reference = h, v.agree = k;
  for (size_t i = 0; i < hashes.size(); ++i)
    if (!v.majority || hashes[i] != v.reference) v.odd.push_back(int(i));
  return v;
}

ValidateCheck replicas_check(const std::vector<uint64_t>& param_hashes, const std::vector<std::string>& node_of_rank,
                             int steps) {
  ValidateCheck c{"train/world", "pass", "", {}, {}, json::object(), {}};
  const MajorityVerdict v = majority_hash(param_hashes);
  if (v.odd.empty()) return c;
  const std::string than = v.majority ? "the majority's (" + std::to_string(v.agree) + " ranks)" : "any majority's";
  c.status = "fail", c.ranks = v.odd;
  for (int r : v.odd) {
    const std::string& nd = node_of_rank[size_t(r)];
    add_once(c.nodes, nd);
    c.node_detail[nd] += (c.node_detail[nd].empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                         "'s parameters differ from " + than;
  }
  c.detail = "after " + std::to_string(steps) + " steps, ranks " + join_ranks(v.odd) + " hold other parameters than " +
             than + (v.majority ? "" : ": no parameters held by more than half of the ranks") +
             " (data-parallel replicas must stay bitwise equal)";
  return c;
}

SdcReplay sdc_replay(bool corrupt) {
  const GptConfig model_cfg{2, 64, 4, 64, 256};  // L, C, NH, T, V
  constexpr uint64_t kSeed = 1234;
  const int Tn = model_cfg.T;
  CpuDevice device;
  SdcOps ops;
  Gpt<float> model(model_cfg, device, &ops);
  model.init(kSeed);
  AdamWParams hp;
  hp.lr = 3e-3f;
  AdamW<float> opt(model.num_params(), device, ops, hp);
  const Dataset data = test_data();
  std::vector<int32_t> tokens(size_t(kSdcBatch) * Tn), targets(tokens.size());
  SdcReplay r;
  uint64_t h = 14695981039346656037ull;
  for (int s = 0; s < kSdcSteps; ++s) {
    if (corrupt && s == 1) ops.arm();
    fill_batch(data, kSeed, s, kSdcBatch, 0, kSdcBatch, Tn, tokens.data(), targets.data());
    model.zero_grad();
    const double loss = model.forward(tokens.data(), targets.data(), kSdcBatch, Tn) / (double(kSdcBatch) * Tn);
    model.backward(float(1.0 / (double(kSdcBatch) * Tn)));
    opt.step(model.params(), model.grads());
    h = fnv1a(h, &loss, sizeof loss);
    h = fnv1a(h, model.grads(), model.num_params() * sizeof(float));
    h = fnv1a(h, model.params(), model.num_params() * sizeof(float));
    r.step_hashes.push_back(h);
    if (s == 0) r.first_loss = loss;
    r.last_loss = loss;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "GPT L%d C%d H%d T%d V%d (%zu params, fp32), %d steps of %d x %d tokens, AdamW lr %g, cpu, "
                "no communication",
                model_cfg.L, model_cfg.C, model_cfg.NH, model_cfg.T, model_cfg.V, gpt_num_params(model_cfg),
                kSdcSteps, kSdcBatch, Tn, double(hp.lr));
  r.model = line;
  return r;
}

std::vector<std::vector<int>> sdc_groups(const std::vector<json>& inv) {
  std::vector<std::string> keys;
  std::vector<std::vector<int>> groups;
  for (size_t r = 0; r < inv.size(); ++r) {
    const json& x = inv[r];
    const std::string key = x.value("cpu_model", json()).dump() + "\n" + x.value("blas_version", json()).dump();
    size_t g = 0;
    while (g < keys.size() && keys[g] != key) ++g;
    if (g == keys.size()) keys.push_back(key), groups.emplace_back();
    groups[g].push_back(int(r));
  }
  return groups;
}

ValidateCheck judge_sdc(const std::vector<std::vector<uint64_t>>& hashes, const std::vector<double>& first_loss,
                        const std::vector<std::vector<int>>& groups, const std::vector<std::string>& node_of_rank,
                        const std::string& what) {
  ValidateCheck c{"sdc/replay", "pass", "", {}, {}, json::object(), {}};
  json per_rank = json::object(), losses = json::object();
  for (size_t r = 0; r < hashes.size(); ++r) {
    per_rank["rank " + std::to_string(r)] = hex(hashes[r].back());
    losses["rank " + std::to_string(r)] = first_loss[r];
  }
  c.values = {{"replay", what}, {"final_hash", per_rank}, {"first_loss", losses}, {"groups", groups}};
  std::string why, alone;
  auto name = [&](int r, const std::string& said) {
    const std::string& nd = node_of_rank[size_t(r)];
    if (std::find(c.ranks.begin(), c.ranks.end(), r) == c.ranks.end()) c.ranks.push_back(r);
    add_once(c.nodes, nd);
    c.node_detail[nd] += (c.node_detail[nd].empty() ? "" : "; ") + said + " (silent data corruption suspected)";
    why += (why.empty() ? "" : "; ") + said;
  };
  // The known value: a fresh model's loss, whatever the CPU, is near ln V (uniform predictions).
  const double ln_v = std::log(256.0);
  for (size_t r = 0; r < first_loss.size(); ++r)
    if (!(std::fabs(first_loss[r] - ln_v) <= kSdcLossBand))
      name(int(r), "rank " + std::to_string(r) + "'s first loss " + num_str(first_loss[r]) + " is not within " +
                       num_str(kSdcLossBand) + " of ln 256 = " + num_str(ln_v) + " (a fresh model's)");
  int compared = 0;
  for (const std::vector<int>& g : groups) {
    if (g.size() < 2) {
      alone += (alone.empty() ? "" : ", ") + std::to_string(g[0]);
      continue;
    }
    compared += int(g.size());
    std::vector<uint64_t> final;
    for (int r : g) final.push_back(hashes[size_t(r)].back());
    const MajorityVerdict v = majority_hash(final);
    for (int i : v.odd) {
      const int r = g[size_t(i)];
      std::string said = "rank " + std::to_string(r);
      if (v.majority) {  // the first step whose chained hash left the reference rank's
        const auto& ref = hashes[size_t(g[size_t(std::find(final.begin(), final.end(), v.reference) - final.begin())])];
        size_t s = 0;
        while (s + 1 < ref.size() && hashes[size_t(r)][s] == ref[s]) ++s;
        said += "'s replay differs from the majority's (" + std::to_string(v.agree) + " of " +
                std::to_string(g.size()) + " ranks agree) from step " + std::to_string(s + 1) + " of " +
                std::to_string(ref.size()) + " on";
      } else {
        said += " in a group with no majority (" + std::to_string(g.size()) + " ranks, no hash held by more than half)";
      }
      name(r, said);
    }
  }
  std::sort(c.ranks.begin(), c.ranks.end());
  const std::string within =
      groups.size() > 1 ? " within " + std::to_string(groups.size()) + " groups of identical CPU model and BLAS build"
                        : "";
  const std::string unchecked = alone.empty() ? ""
                                : (alone.find(',') == std::string::npos ? "; rank " : "; ranks ") + alone +
                                      " alone with its CPU model and BLAS build: not compared";
  if (!c.ranks.empty()) {
    c.status = "fail";
    c.detail = why + within + unchecked + "; " + what;
  } else if (compared == 0) {
    c.status = "skip";
    c.detail = hashes.size() < 2
                   ? "one rank: no other replica to compare its replay with"
                   : "no two ranks share a CPU model and BLAS build, so no replay has another to agree with";
    c.detail += " (first losses near ln 256)";
  } else {
    c.detail = what + ": " + std::to_string(compared) + " ranks bitwise equal" + within + unchecked +
               ", first losses near ln 256";
  }
  return c;
}

void sdc_check(ValidateRun& run) {
  run.begin_check("sdc");
  run.steps->arrive(run.current);
  const SdcReplay mine = sdc_replay(run.inj.sdc && run.me == run.inj.rank);
  run.steps->arrive(run.current);
  std::vector<double> mine_d = {mine.first_loss};  // then each 64-bit hash as two 32-bit halves, exact in a double
  for (uint64_t h : mine.step_hashes) mine_d.push_back(double(h >> 32)), mine_d.push_back(double(h & 0xffffffffu));
  const std::vector<double> all = run.gather(mine_d);
  std::vector<std::vector<uint64_t>> hashes(size_t(run.n));
  std::vector<double> first_loss;
  for (int r = 0; r < run.n; ++r) {
    const size_t at = size_t(r) * mine_d.size();
    first_loss.push_back(all[at]);
    for (size_t i = at + 1; i < at + mine_d.size(); i += 2)
      hashes[size_t(r)].push_back(uint64_t(all[i]) << 32 | uint64_t(all[i + 1]));
  }
  run.add_check(judge_sdc(hashes, first_loss, sdc_groups(run.inv), run.node_of_rank, mine.model));
  run.begin_check("");
}

}  // namespace dtb
