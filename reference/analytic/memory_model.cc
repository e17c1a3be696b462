#include "reference/analytic/memory_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"
#include "reference/parallel/pipeline_schedule.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

namespace {
using u64 = uint64_t;
constexpr MemCategory kParam = MemCategory::param, kGrad = MemCategory::grad, kMaster = MemCategory::master_param,
                      kOptim = MemCategory::optimizer_state, kAct = MemCategory::activation,
                      kWork = MemCategory::workspace;

std::string num(long long x) { return std::to_string(x); }

void check_zero(int zero_stage, Offload offload) {
  validate_zero_stage(zero_stage, spelling(LayoutKey::zero_stage).config_key);
  if (offload == Offload::cpu && zero_stage == 0)
    throw InputError("offload_optimizer cpu needs ZeRO stage 1, 2 or 3 (the offloaded optimizer works on the rank's "
                     "shard), not stage 0");
}

// Bytes of one activation or workspace element: fp32, or 16-bit under a mixed recipe, except
// the statistics kept in fp32 (LayerNorm mean and rstd, the cross-entropy's max, sum-exp and
// losses: ParallelGpt's acc_t<T> slots, as llm.c and Megatron-LM).
u64 act_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }
// The residual stream's rows a rank holds of a micro-batch's BT tokens: BT / tp under
// sequence parallelism (ParallelGpt::rows), else BT.
u64 stream_rows(const PlanConfig& c) {
  const u64 BT = u64(c.micro_batch_size) * u64(c.tokens());
  return c.layout.sequence_parallel ? BT / u64(c.layout.tp) : BT;
}

// Of a stored activation set: the fp32 statistics' elements (4 R per kept layer, the LayerNorm
// statistics of its R rows; at the head lnf's 2 R and the cross-entropy's 4 BT).
u64 stat_floats(const PlanConfig& c, int virtual_stage) {
  const bool last_chunk = virtual_stage == c.layout.pp * c.layout.virtual_stages - 1;
  const u64 BT = u64(c.micro_batch_size) * u64(c.tokens()), Lc = u64(stage_layers(c.layout, c.model.L).at(size_t(virtual_stage)));
  const u64 R = stream_rows(c);
  return (c.recompute == Recompute::full ? 0 : Lc * 4 * R) + (last_chunk ? 2 * R + 4 * BT : 0);
}

// Elements of one transformer layer's stored activations in ParallelGpt::acquire: ln1 (R,C),
// its mean and rstd (2R), qkv (BT,3Cl), atty (BT,Cl), att (B,NHl,Tn,Tn), attproj, res2,
// ln2 (R,C each), its mean and rstd (2R), fch and fch_gelu (BT,4Cl each), fcproj and res3
// (R,C each); R = BT rows of the residual stream, BT / tp under sequence parallelism.
u64 layer_floats(u64 B, u64 Tn, u64 C, u64 Cl, u64 NHl, u64 R) {
  const u64 BT = B * Tn;
  return R * C + 2 * R + 3 * BT * Cl + BT * Cl + B * NHl * Tn * Tn + R * C + R * C + R * C + 2 * R +
         4 * BT * Cl + 4 * BT * Cl + R * C + R * C;
}
u64 attention_floats(u64 B, u64 Tn, u64 NHl) { return B * NHl * Tn * Tn; }
}  // namespace

std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}
std::string_view to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::full: return "full";
    case Recompute::selective: return "selective";
  }
  return "?";
}
std::string_view to_string(Offload o) { return o == Offload::cpu ? "cpu" : "none"; }

Precision parse_precision(const std::string& s) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
    if (s == to_string(p)) return p;
  throw InputError("unknown precision '" + s + "' (fp32, bf16, fp16)");
}
Recompute parse_recompute(const std::string& s) {
  for (Recompute r : {Recompute::none, Recompute::full, Recompute::selective})
    if (s == to_string(r)) return r;
  throw InputError("unknown recompute '" + s + "' (none, full, selective)");
}
Offload parse_offload(const std::string& s) {
  for (Offload o : {Offload::none, Offload::cpu})
    if (s == to_string(o)) return o;
  throw InputError("unknown offload_optimizer '" + s + "' (none, cpu)");
}

// ---- Level 1 ----

StateBytesPerParam state_bytes_per_param(Precision p) {
  if (p == Precision::fp32) return {4, 4, 0, 8};
  return {2, 2, 4, 8};
}

MemoryBytes<double> zero_model_states(double psi, Precision p, int zero_stage, int dp, Offload offload) {
  if (!(psi >= 0) || !std::isfinite(psi)) throw InputError("parameter count must be finite and >= 0");
  if (dp < 1) throw InputError("data_parallel must be >= 1, got " + num(dp));
  check_zero(zero_stage, offload);
  const StateBytesPerParam k = state_bytes_per_param(p);
  const double sharded = psi / dp;
  MemoryBytes<double> m;
  m.at(Tier::device, kParam) = k.param * (zero_stage >= 3 ? sharded : psi);
  m.at(Tier::device, kGrad) = k.grad * (zero_stage >= 2 ? sharded : psi);
  const double opt_elems = zero_stage >= 1 ? sharded : psi;
  if (offload == Offload::cpu) {
    m.at(Tier::host, kMaster) = 4 * sharded;
    m.at(Tier::host, kOptim) = 8 * sharded;
    m.at(Tier::host, kGrad) = 4 * sharded;
  } else {
    m.at(Tier::device, kMaster) = k.master_param * opt_elems;
    m.at(Tier::device, kOptim) = k.optimizer_state * opt_elems;
  }
  return m;
}

MoeParams moe_params(const GptConfig& m) {
  MoeParams r;
  r.total = double(gpt_num_params(m));
  r.active = double(gpt_active_params(m));
  r.experts = double(num_moe_layers(m)) * m.moe.num_experts * double(moe_expert_params(m));
  r.non_expert = r.total - r.experts;
  return r;
}

MemoryBytes<double> moe_model_states(const GptConfig& m, Precision p, int zero_stage, int dp, int ep, Offload offload) {
  const int E = m.moe.num_experts;
  if (ep < 1 || dp < 1) throw InputError("expert_parallel and data_parallel must be >= 1, got " + num(ep) + " and " + num(dp));
  if (E > 0 && E % ep != 0) throw InputError("expert_parallel " + num(ep) + " does not divide num_experts " + num(E));
  if (dp % ep != 0) throw InputError("expert_parallel " + num(ep) + " does not divide the data-parallel size " + num(dp));
  const MoeParams n = moe_params(m);
  MemoryBytes<double> r = zero_model_states(n.non_expert, p, zero_stage, dp, offload);
  const MemoryBytes<double> x = zero_model_states(n.experts / ep, p, zero_stage, dp / ep, offload);
  for (int t = 0; t < kNumTiers; ++t)
    for (int c = 0; c < kNumMemCategories; ++c) r.b[size_t(t)][size_t(c)] += x.b[size_t(t)][size_t(c)];
  return r;
}

DeepSpeedEstimate deepspeed_zero2_estimate(double P, int gpus_per_node, int num_nodes, bool cpu_offload,
                                           double f, bool legacy) {
  if (gpus_per_node < 1 || num_nodes < 1) throw InputError("DeepSpeed estimate: GPUs per node and nodes must be >= 1");
  const double total_gpus = double(num_nodes) * gpus_per_node;
  DeepSpeedEstimate e;
  if (cpu_offload) {
    e.gpu_bytes = 2 * P;
    e.cpu_bytes = P * std::max(4 * total_gpus, 16.0) * f;
  } else {
    e.gpu_bytes = legacy ? 4 * P + std::trunc(16 * P / total_gpus) : 2 * P + std::trunc(18 * P / total_gpus);
    e.cpu_bytes = P * 4 * gpus_per_node * f;
  }
  e.cpu_bytes = std::trunc(e.cpu_bytes);
  e.gpu_bytes = std::trunc(e.gpu_bytes);
  return e;
}

DeepSpeedEstimate deepspeed_zero3_estimate(double P, double largest, int gpn, int num_nodes, bool cpu_offload,
                                           bool cpu_offload_params, bool zero_init, double f) {
  if (gpn < 1 || num_nodes < 1) throw InputError("DeepSpeed estimate: GPUs per node and nodes must be >= 1");
  const double total_gpus = double(num_nodes) * gpn, gpus_factor = 1.0 / num_nodes;
  const double llm = 4 * largest;
  DeepSpeedEstimate e;
  if (cpu_offload) {
    const double k = cpu_offload_params ? 18 : 16;
    e.gpu_bytes = cpu_offload_params ? llm : llm + std::trunc(2 * P / total_gpus);
    e.cpu_bytes = zero_init ? P * k * gpus_factor * f : P * std::max(4.0 * gpn, k * gpus_factor) * f;
  } else {
    e.gpu_bytes = llm + std::trunc(18 * P / total_gpus);
    e.cpu_bytes = zero_init ? largest * 4 * gpn * f : P * 4 * gpn * f;
  }
  e.cpu_bytes = std::trunc(e.cpu_bytes);
  e.gpu_bytes = std::trunc(e.gpu_bytes);
  return e;
}

double megatron_weight_and_optimizer_bytes(const GptConfig& m, int tp, int pp, int dp, bool distributed_optimizer) {
  const double L = m.L, h = m.C;
  // 2 L h^2 ((1 + groups/heads) q/h + ffn/h + 2/h + 1/(L h)), MHA, ffn = 4h, no swiglu.
  const double transformer = 2 * L * h * h * (2.0 + 4.0 + 2.0 / h + 1.0 / (L * h));
  const double embedding = h * m.V;
  const double most_loaded = (transformer / pp + embedding) / tp;
  return most_loaded * (distributed_optimizer ? 6.0 + 12.0 / dp : 18.0);
}

double korthikanti_layer_activation_bytes(const GptConfig& m, int seq, int b, int tp, Recompute r,
                                          bool sequence_parallel) {
  const double s = seq, h = m.C, a = m.NH, t = tp, sbh = s * b * h;
  // Sequence parallelism divides the 10 s b h of the LayerNorm and dropout regions by t too
  // (eq. 4 without recompute, eq. 6's 34/t with selective recompute; full recompute's kept
  // input sharded as well, derived here).
  const double replicated = sequence_parallel ? 10 / t : 10;
  switch (r) {
    case Recompute::full: return 2 * sbh / (sequence_parallel ? t : 1);
    case Recompute::selective: return sbh * (replicated + 24 / t);
    case Recompute::none: break;
  }
  return sbh * (replicated + 24 / t + 5 * a * s / (h * t));
}

// ---- Level 2 ----

void validate_plan(const PlanConfig& c) {
  validate_gpt_config(c.model);
  if (c.model.moe.num_experts > 0)  // the plan is ParallelGpt's tensors and buffers
    throw InputError("the per-rank plan: " + moe_not_sharded(c.model));
  if (is_llama(c.model)) throw InputError(llama_not_supported("the per-rank memory plan"));
  if (c.micro_batch_size < 1) throw InputError("micro_batch_size must be >= 1, got " + num(c.micro_batch_size));
  if (c.seq_len < 0 || c.seq_len > c.model.T)
    throw InputError("seq_len " + num(c.seq_len) + " is outside [1, T = " + num(c.model.T) + "]");
  const int64_t g = c.global_batch();
  if (g > INT32_MAX) throw InputError("global batch " + num(g) + " is too large");
  validate_layout(c.layout, c.model, int(g), c.layout.world(), c.tokens());
  if (c.layout.cp > 1)
    throw InputError(std::string(spelling(LayoutKey::cp).config_key) + " = " + num(c.layout.cp) +
                     ": context parallelism is not in the memory plan yet (docs/context-parallel.md)");
  if (c.layout.schedule == "zb-h1")
    throw InputError("the per-rank plan does not model schedule zb-h1 yet (the output gradients B keeps for W)");
  check_zero(c.zero.stage, offload_of(c.zero));
}

std::vector<int> activation_sets_per_chunk(const std::string& schedule, int p, int m, int v, int stage) {
  std::vector<int> live(size_t(v), 0), most(size_t(v), 0);
  for (const PipeAction& a : pipeline_schedule(schedule, p, m, v, stage)) {
    int& n = live[size_t(a.chunk)];
    n += a.op == PipeOp::forward ? 1 : a.op == PipeOp::backward_input ? 0 : -1;  // held until W
    most[size_t(a.chunk)] = std::max(most[size_t(a.chunk)], n);
  }
  return most;
}

std::vector<PlanTensor> plan_tensors(const GptConfig& m, const ParallelLayout& l, int tp_rank, int pp_rank) {
  DTB_CHECK(tp_rank >= 0 && tp_rank < l.tp && pp_rank >= 0 && pp_rank < l.pp, "plan_tensors: rank out of range");
  const int v = l.virtual_stages, nv = l.pp * v;
  const u64 C = u64(m.C), Cl = C / u64(l.tp), Vl = u64(m.V) / u64(l.tp);
  const std::vector<int> per_stage = stage_layers(l, m.L);
  bool first = false, last = false;
  for (int c = 0; c < v; ++c) {
    const int s = c * l.pp + pp_rank;
    first = first || s == 0;
    last = last || s == nv - 1;
  }
  std::vector<PlanTensor> t;
  if (first || last) t.push_back({"wte", -1, Vl * C, false});
  if (first) t.push_back({"wpe", -1, u64(m.T) * C, true});
  for (int c = 0; c < v; ++c)
    for (int k = 0; k < per_stage[size_t(c * l.pp + pp_rank)]; ++k) {
      const int layer = stage_first_layer(l, m.L, c * l.pp + pp_rank) + k;
      const std::pair<const char*, u64> w[12] = {
          {"ln1w", C},          {"ln1b", C},         {"qkvw", 3 * Cl * C}, {"qkvb", 3 * Cl},
          {"attprojw", C * Cl}, {"attprojb", C},     {"ln2w", C},          {"ln2b", C},
          {"fcw", 4 * Cl * C},  {"fcb", 4 * Cl},     {"fcprojw", C * 4 * Cl}, {"fcprojb", C}};
      for (const auto& [name, n] : w) {
        const std::string s = name;
        const bool replicated = s == "ln1w" || s == "ln1b" || s == "attprojb" || s == "ln2w" || s == "ln2b" ||
                                s == "fcprojb";
        t.push_back({s, layer, n, replicated});
      }
    }
  if (last) {
    t.push_back({"lnfw", -1, C, true});
    t.push_back({"lnfb", -1, C, true});
  }
  return t;
}

std::vector<ZeroUnit> plan_zero_units(const std::vector<PlanTensor>& tensors, int dp) {
  DTB_CHECK(dp >= 1, "plan_zero_units: dp < 1");
  std::vector<ZeroUnit> units;
  for (const PlanTensor& t : tensors) {
    const std::string name = t.layer >= 0                          ? "layer." + std::to_string(t.layer)
                             : t.name == "lnfw" || t.name == "lnfb" ? std::string("lnf")
                                                                    : t.name;
    if (units.empty() || units.back().name != name) units.push_back({name, 0, 0});
    units.back().numel += t.numel;
  }
  for (ZeroUnit& u : units) u.shard = (u.numel + u64(dp) - 1) / u64(dp);
  return units;
}

uint64_t activation_set_floats(const PlanConfig& c, int virtual_stage) {
  const ParallelLayout& l = c.layout;
  const bool last_chunk = virtual_stage == l.pp * l.virtual_stages - 1;
  const u64 BT = u64(c.micro_batch_size) * u64(c.tokens()), C = u64(c.model.C), Vl = u64(c.model.V) / u64(l.tp),
            Lc = u64(stage_layers(l, c.model.L).at(size_t(virtual_stage))), R = stream_rows(c);
  // LM head (last chunk): lnf (BT,C; gathered whole under sequence parallelism), its mean
  // and rstd (2R), logits and probs (BT,Vl each), losses (BT), max (BT), sums (2BT).
  const u64 head = last_chunk ? BT * C + 2 * R + 2 * BT * Vl + BT + BT + 2 * BT : 0;
  // Planned full recompute: each layer's input (x0 the first's), and the last layer's
  // output for the head.
  if (c.recompute == Recompute::full) return Lc * layer_activation_floats(c) + (last_chunk ? R * C + head : 0);
  return R * C + Lc * layer_activation_floats(c) + head;  // x0 (R,C), the layers, the head
}

uint64_t layer_activation_floats(const PlanConfig& c) {
  const ParallelLayout& l = c.layout;
  const u64 B = u64(c.micro_batch_size), Tn = u64(c.tokens()), C = u64(c.model.C), Cl = C / u64(l.tp),
            NHl = u64(c.model.NH) / u64(l.tp), R = stream_rows(c);
  switch (c.recompute) {
    case Recompute::none: return layer_floats(B, Tn, C, Cl, NHl, R);
    case Recompute::selective: return layer_floats(B, Tn, C, Cl, NHl, R) - attention_floats(B, Tn, NHl);
    case Recompute::full: return R * C;
  }
  return 0;
}

uint64_t workspace_floats(const PlanConfig& c) {
  const ParallelLayout& l = c.layout;
  const u64 B = u64(c.micro_batch_size), Tn = u64(c.tokens()), BT = B * Tn, C = u64(c.model.C),
            Cl = C / u64(l.tp), NHl = u64(c.model.NH) / u64(l.tp), Vl = u64(c.model.V) / u64(l.tp);
  const u64 R = stream_rows(c);
  // ensure_scratch: dres, dln (BT,C each), two (BT,4Cl), datt (B,NHl,Tn,Tn), dlogits (BT,Vl), (BT);
  // sequence parallel: the TP linears' work buffer (2 BT C) and a LayerNorm's partial
  // gradients (2 C).
  u64 w = BT * C + BT * C + BT * 4 * Cl + BT * 4 * Cl + B * NHl * Tn * Tn + BT * Vl + BT;
  if (l.sequence_parallel) w += 2 * BT * C + 2 * C;
  // Planned: the one layer being recomputed in backward.
  if (c.recompute == Recompute::full) w += layer_floats(B, Tn, C, Cl, NHl, R);
  if (c.recompute == Recompute::selective) w += attention_floats(B, Tn, NHl);
  return w;
}

RankPlan plan_rank(const PlanConfig& c, int tp_rank, int pp_rank) {
  validate_plan(c);
  const ParallelLayout& l = c.layout;
  if (tp_rank < 0 || tp_rank >= l.tp || pp_rank < 0 || pp_rank >= l.pp)
    throw InputError("rank (tp " + num(tp_rank) + ", pp " + num(pp_rank) + ") is outside the layout");
  RankPlan r;
  r.tp_rank = tp_rank;
  r.pp_rank = pp_rank;
  r.tensors = plan_tensors(c.model, l, tp_rank, pp_rank);
  r.units = plan_zero_units(r.tensors, l.dp);
  for (const PlanTensor& t : r.tensors) r.N += t.numel;
  for (const ZeroUnit& u : r.units) r.S += u.shard;

  // Model states.
  const bool mixed = c.precision != Precision::fp32;
  const u64 pb = mixed ? 2 : 4, N = r.N, S = r.S;
  const int z = c.zero.stage;
  const u64 opt_elems = z >= 1 ? S : N;
  MemoryBytes<u64>& m = r.mem;
  m.at(Tier::device, kParam) = pb * (z >= 3 ? S : N);
  m.at(Tier::device, kGrad) = pb * (z >= 2 ? S : N);
  if (c.zero.offload_optimizer) {  // the fp32 master and moments CPU AdamW works on
    m.at(Tier::host, kMaster) = 4 * S;
    m.at(Tier::host, kOptim) = 8 * S;
    m.at(Tier::host, kGrad) = pb * S;            // the gradient shard moved down, in its own type
    m.at(Tier::host, kParam) = mixed ? 2 * S : 0;  // the rounded parameters going up (mixed)
  } else {
    m.at(Tier::device, kMaster) = mixed ? 4 * opt_elems : 0;
    m.at(Tier::device, kOptim) = 8 * opt_elems;
  }

  // Activations: pooled sets per chunk, as many as the schedule keeps in flight at once.
  const u64 ab = act_bytes(c.precision), BT = u64(c.micro_batch_size) * u64(c.tokens());
  r.activation_sets = activation_sets_per_chunk(l.schedule, l.pp, l.micro_batches, l.virtual_stages, pp_rank);
  for (int ch = 0; ch < l.virtual_stages; ++ch) {
    const u64 stats = stat_floats(c, ch * l.pp + pp_rank);
    const u64 set = (activation_set_floats(c, ch * l.pp + pp_rank) - stats) * ab + stats * 4 + 2 * BT * 4;  // + ids
    r.activation_set_bytes.push_back(set);
    m.at(Tier::device, kAct) += u64(r.activation_sets[size_t(ch)]) * set;
  }
  const u64 ws_stats = c.recompute == Recompute::full ? 4 * stream_rows(c) : 0;  // the recomputed layer's LayerNorm statistics
  r.workspace_bytes = (workspace_floats(c) - ws_stats) * ab + ws_stats * 4;
  m.at(Tier::device, kWork) = r.workspace_bytes;
  return r;
}

std::vector<RankPlan> plan_stages(const PlanConfig& c) {
  validate_plan(c);
  std::vector<RankPlan> out;
  for (int k = 0; k < c.layout.pp; ++k) out.push_back(plan_rank(c, 0, k));
  return out;
}

RankPlan plan_busiest_rank(const PlanConfig& c) {
  std::vector<RankPlan> all = plan_stages(c);
  size_t best = 0;
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i].device_total() > all[best].device_total()) best = i;
  return all[best];
}

}  // namespace dtb
