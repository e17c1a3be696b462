#include "reference/analytic/memory_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"
#include "reference/parallel/pipeline_schedule.h"
#include "reference/layout/layout_spec.h"
#include "reference/layout/layout_validate.h"

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
// The per-rank shapes ParallelGpt's constructor derives from the model and layout (parallel_gpt.cc),
// and the micro-batch's local shape: B sequences of Tn = tokens / cp rows (context parallelism:
// each CP rank's two chunks of every sequence, CpSplit), BT = B Tn, R the residual stream's rows
// (BT / tp under sequence parallelism, ParallelGpt::rows, else BT). GPT-2: Wq = 3 Cl (KVl = NHl),
// F1 = Fa = 4 Cl. Llama: KVl = KV / tp when tp divides KV, else 1 (one KV head shared by tp / KV
// ranks, kv_share); Wq = (NHl + 2 KVl) hs; F1 = 2 Fl (gate | up rows), Fa = Fl = F / tp (SwiGLU's
// output). norm_stats: a norm's fp32 statistics per row, 2 (LayerNorm's mean and rstd) or 1
// (RMSNorm's rstd).
struct Dims {
  bool llama = false, cp = false, fused = false;
  u64 B = 0, Tn = 0, BT = 0, R = 0, C = 0, Cl = 0, NHl = 0, KV = 0, KVl = 0, kv_share = 1, hs = 0, Vl = 0;
  u64 Wq = 0, F1 = 0, Fa = 0, norm_stats = 2;
};
Dims dims(const PlanConfig& c) {
  const ParallelLayout& l = c.layout;
  const GptConfig& m = c.model;
  const u64 tp = u64(l.tp);
  Dims d;
  d.llama = is_llama(m);
  d.cp = l.cp > 1;
  d.fused = c.attention == AttentionKernel::fused;
  d.B = u64(c.micro_batch_size);
  d.Tn = u64(c.local_tokens());
  d.BT = d.B * d.Tn;
  d.R = l.sequence_parallel ? d.BT / tp : d.BT;
  d.C = u64(m.C);
  d.Cl = d.C / tp;
  d.NHl = u64(m.NH) / tp;
  d.hs = d.C / u64(m.NH);
  d.Vl = u64(m.V) / tp;
  d.KV = u64(kv_heads(m));
  d.KVl = d.KV % tp == 0 ? d.KV / tp : 1;
  d.kv_share = d.KV % tp == 0 ? 1 : tp / d.KV;
  d.Wq = (d.NHl + 2 * d.KVl) * d.hs;
  const u64 F = d.llama ? u64(ffn_hidden(m)) : 4 * d.C;
  d.F1 = d.llama ? 2 * (F / tp) : 4 * d.Cl;
  d.Fa = d.llama ? F / tp : 4 * d.Cl;
  d.norm_stats = d.llama ? 1 : 2;
  return d;
}

// One layer's kept attention activation (ParallelGpt::att_elems): the (B, NHl, Tn, Tn)
// probabilities of T, or under context parallelism or a fused kernel the (B, Tn, NHl)
// log-sum-exp the core returns, in acc_t<T> (fp32 under every recipe: a statistic here).
u64 attention_floats(const Dims& d) { return d.cp || d.fused ? 0 : d.B * d.NHl * d.Tn * d.Tn; }
u64 attention_lse_floats(const Dims& d) { return d.cp || d.fused ? d.B * d.Tn * d.NHl : 0; }
// The (B, NHl, Tn, Tn) buffers of T the backward scratch and the recompute scratch hold whatever
// the attention keeps (ensure_scratch: datt, the selective recompute's matrix, the full
// recompute layer's att, which under context parallelism holds the log-sum-exp, Tn >= 2). A
// fused kernel has none: its score and probability tiles live in on-chip memory.
u64 attention_matrix_floats(const Dims& d) { return d.fused ? 0 : d.B * d.NHl * d.Tn * d.Tn; }
// A fused kernel's fp32 workspace (0 materialized): its backward's softmax_d, rowsum(dO O), per
// head and query row, and dq_accum, the fp32 dQ (B, Tr, NHl, hs), Tr = Tn rounded up to 128
// (flash-attn's mha_bwd, csrc/flash_attn/flash_api.cpp: seqlen_q_rounded); under recompute
// (selective or full) also the recomputed layer's log-sum-exp (B, Tn, NHl).
u64 fused_fp32_workspace_floats(const Dims& d, Recompute r) {
  if (!d.fused) return 0;
  const u64 Tr = (d.Tn + 127) / 128 * 128;
  return d.B * d.NHl * Tr + d.B * Tr * d.Cl + (r != Recompute::none ? d.B * d.Tn * d.NHl : 0);
}

// Of one layer's stored activations in ParallelGpt::acquire (recompute none), the elements of
// T apart from the attention's: ln1 (R,C), qkv (BT,Wq), atty (BT,Cl), attproj, res2, ln2 (R,C
// each), fch (BT,F1), its activation (BT,Fa), fcproj and res3 (R,C each): 6 R C + BT (Wq + Cl +
// F1 + Fa) (GPT-2: 6 R C + 12 BT Cl). Its fp32 statistics: each norm's norm_stats R.
u64 layer_body_floats(const Dims& d) { return 6 * d.R * d.C + d.BT * (d.Wq + d.Cl + d.F1 + d.Fa); }
u64 layer_stat_floats(const Dims& d) { return 2 * d.norm_stats * d.R; }

// Of a stored activation set: the fp32 statistics' elements (per kept layer its norms'
// statistics and, under context parallelism with recompute none, its log-sum-exp; at the head
// lnf's statistics of R rows and the cross-entropy's losses, max and sums, 4 BT).
u64 stat_floats(const PlanConfig& c, int virtual_stage) {
  const Dims d = dims(c);
  const bool last_chunk = virtual_stage == c.layout.pp * c.layout.virtual_stages - 1;
  const u64 Lc = u64(stage_layers(c.layout, c.model.L).at(size_t(virtual_stage)));
  u64 per_layer = 0;
  if (c.recompute != Recompute::full) per_layer += layer_stat_floats(d);
  if (c.recompute == Recompute::none) per_layer += attention_lse_floats(d);
  return Lc * per_layer + (last_chunk ? d.norm_stats * d.R + 4 * d.BT : 0);
}
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
std::string_view to_string(AttentionKernel a) { return a == AttentionKernel::fused ? "fused" : "materialized"; }

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
AttentionKernel parse_attention_kernel(const std::string& s) {
  for (AttentionKernel a : {AttentionKernel::materialized, AttentionKernel::fused})
    if (s == to_string(a)) return a;
  throw InputError("unknown attention kernel '" + printable(s, 40) + "' (materialized, fused)");
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
  if (c.micro_batch_size < 1) throw InputError("micro_batch_size must be >= 1, got " + num(c.micro_batch_size));
  if (c.seq_len < 0 || c.seq_len > c.model.T)
    throw InputError("seq_len " + num(c.seq_len) + " is outside [1, T = " + num(c.model.T) + "]");
  const int64_t g = c.global_batch();
  if (g > INT32_MAX) throw InputError("global batch " + num(g) + " is too large");
  // Sizes, heads, vocabulary, layers, batch, schedule, sequence parallelism, and context
  // parallelism's 2 cp dividing the sequence (validate_layout's own messages).
  validate_layout(c.layout, c.model, int(g), c.layout.world(), c.tokens());
  // Llama: a tp that neither divides nor is divided by num_kv_heads, or does not divide
  // ffn_hidden_size, as ParallelGpt refuses it (llama_tp_refusal).
  if (const std::string why = llama_tp_refusal(c.model, c.layout.tp); !why.empty()) throw InputError(why);
  // Context parallelism: what it does not compose with yet, the layout validator's rule and
  // messages (layout_validate.h validate_cp_layout; the plan has no backend, so none is refused).
  LayoutSpec spec;
  spec.l = c.layout, spec.z = c.zero, spec.recompute = c.recompute, spec.precision = c.precision;
  validate_cp_layout(spec, c.model, "cpu");
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

namespace {
// A zero-bubble schedule's activation peak on pipeline rank `pp_rank` (one chunk: ZB-H1 has no
// virtual stages), walking its actions as ParallelGpt allocates (parallel_gpt_backward.cc
// backward_pass with split, backward_weight; parallel_gpt.cc acquire). A forward takes a pooled
// set and makes again what its B freed, or makes a whole one (`set` bytes). B keeps for W the
// output gradients of the ops with weights (parallel_gpt_detail::Kept, each layer's slice
// rounded up to 256 bytes): on the last chunk first the logits' gradient (BT, Vl), then it frees
// the logits and probabilities, then keeps the final norm's (R, C); then per layer fcproj's
// residual, ln2's, the attention projection's residual and ln1's gradients (R, C each), fc's
// (BT, F1) and QKV's (BT, Wq), and on the first chunk the embedding's (BT, C); after the layers it
// frees what W does not read: QKV, the attention kept, the projection, fc and fcproj outputs. W
// frees what B kept and pools the set.
u64 zero_bubble_activation_peak(const PlanConfig& c, int pp_rank, u64 set) {
  const ParallelLayout& l = c.layout;
  const Dims d = dims(c);
  const u64 e = act_bytes(c.precision), Lc = u64(stage_layers(l, c.model.L).at(size_t(pp_rank)));
  const bool first = pp_rank == 0, last = pp_rank == l.pp - 1;
  const u64 align = 256 / e;
  auto kept = [&](u64 n) { return (n + align - 1) / align * align * e; };
  const u64 attention = c.recompute == Recompute::none ? attention_floats(d) * e + attention_lse_floats(d) * 4 : 0;
  const u64 freed = Lc * (d.BT * d.Wq * e + attention + d.R * d.C * e + d.BT * d.F1 * e + d.R * d.C * e);
  const u64 head = last ? 2 * d.BT * d.Vl * e : 0;  // the logits and probabilities
  const u64 kept_logits = last ? kept(d.BT * d.Vl) : 0, kept_lnf = last ? kept(d.R * d.C) : 0;
  const u64 kept_layers = Lc * (4 * kept(d.R * d.C) + kept(d.BT * d.F1) + kept(d.BT * d.Wq)) + (first ? kept(d.BT * d.C) : 0);
  u64 now = 0, peak = 0, pooled = 0;
  auto add = [&](u64 b) { now += b, peak = std::max(peak, now); };
  for (const PipeAction& a : pipeline_schedule(l.schedule, l.pp, l.micro_batches, 1, pp_rank)) {
    if (a.op == PipeOp::forward) {
      add(pooled > 0 ? freed + head : set);
      if (pooled > 0) --pooled;
    } else if (a.op == PipeOp::backward_input) {
      add(kept_logits);
      now -= head;
      add(kept_lnf + kept_layers);
      now -= freed;
    } else {
      now -= kept_logits + kept_lnf + kept_layers;
      ++pooled;
    }
  }
  return peak;
}
}  // namespace

std::vector<PlanTensor> plan_tensors(const GptConfig& m, const ParallelLayout& l, int tp_rank, int pp_rank) {
  DTB_CHECK(tp_rank >= 0 && tp_rank < l.tp && pp_rank >= 0 && pp_rank < l.pp, "plan_tensors: rank out of range");
  const int v = l.virtual_stages, nv = l.pp * v;
  const bool llama = is_llama(m);
  const u64 tp = u64(l.tp), C = u64(m.C), Cl = C / tp, Vl = u64(m.V) / tp, NHl = u64(m.NH) / tp, hs = C / u64(m.NH);
  // Llama's KV heads here (ParallelGpt's KVl_, kv_share_) and SwiGLU's rows per projection (Fl).
  const u64 KV = u64(kv_heads(m)), KVl = KV % tp == 0 ? KV / tp : 1, kv_share = KV % tp == 0 ? 1 : tp / KV;
  const u64 Fl = llama ? u64(ffn_hidden(m)) / tp : 0;
  const std::vector<int> per_stage = stage_layers(l, m.L);
  bool first = false, last = false;
  for (int c = 0; c < v; ++c) {
    const int s = c * l.pp + pp_rank;
    first = first || s == 0;
    last = last || s == nv - 1;
  }
  std::vector<PlanTensor> t;
  // GPT-2's wte is the tied head too (on the first and the last stage); Llama's only the
  // embedding (first stage), its head lmheadw a unit of its own on the last.
  if (first || (last && !llama)) t.push_back({"wte", -1, Vl * C, false});
  if (first && !llama) t.push_back({"wpe", -1, u64(m.T) * C, true});
  for (int c = 0; c < v; ++c)
    for (int k = 0; k < per_stage[size_t(c * l.pp + pp_rank)]; ++k) {
      const int layer = stage_first_layer(l, m.L, c * l.pp + pp_rank) + k;
      if (!llama) {
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
        continue;
      }
      // Llama (parallel_gpt_params.cc add_layer, no biases): ln1w (C, replicated); qkvw's
      // NHl hs query rows and its KVl KV heads' k and v rows (2 KVl hs), of C columns each; a
      // KV head shared by kv_share > 1 ranks is a second qkvw tensor (its 2 hs rows; not
      // TP-replicated: the ranks sharing it are a part of the TP group); attprojw (C rows of Cl
      // columns); ln2w; fcw's Fl gate rows and Fl up rows (2 Fl C); fcprojw (C rows of Fl).
      t.push_back({"ln1w", layer, C, true});
      if (kv_share > 1) {
        t.push_back({"qkvw", layer, NHl * hs * C, false});
        t.push_back({"qkvw", layer, 2 * KVl * hs * C, false});
      } else {
        t.push_back({"qkvw", layer, (NHl + 2 * KVl) * hs * C, false});
      }
      t.push_back({"attprojw", layer, C * Cl, false});
      t.push_back({"ln2w", layer, C, true});
      t.push_back({"fcw", layer, 2 * Fl * C, false});
      t.push_back({"fcprojw", layer, C * Fl, false});
    }
  if (last) {
    t.push_back({"lnfw", -1, C, true});
    if (!llama) t.push_back({"lnfb", -1, C, true});
    if (llama) t.push_back({"lmheadw", -1, Vl * C, false});  // rows [r Vl, (r+1) Vl), as wte's
  }
  return t;
}

std::vector<ZeroUnit> plan_zero_units(const std::vector<PlanTensor>& tensors, int dp) {
  DTB_CHECK(dp >= 1, "plan_zero_units: dp < 1");
  std::vector<ZeroUnit> units;
  for (const PlanTensor& t : tensors) {
    const std::string name = t.layer >= 0                          ? "layer." + std::to_string(t.layer)
                             : t.name == "lnfw" || t.name == "lnfb" ? std::string("lnf")
                             : t.name == "lmheadw"                  ? std::string("lmhead")
                                                                    : t.name;
    if (units.empty() || units.back().name != name) units.push_back({name, 0, 0});
    units.back().numel += t.numel;
  }
  for (ZeroUnit& u : units) u.shard = (u.numel + u64(dp) - 1) / u64(dp);
  return units;
}

uint64_t activation_set_floats(const PlanConfig& c, int virtual_stage) {
  const ParallelLayout& l = c.layout;
  const Dims d = dims(c);
  const bool last_chunk = virtual_stage == l.pp * l.virtual_stages - 1;
  const u64 Lc = u64(stage_layers(l, c.model.L).at(size_t(virtual_stage))), R = d.R, BT = d.BT, C = d.C;
  // LM head (last chunk): lnf (BT,C; gathered whole under sequence parallelism), its
  // statistics (LayerNorm's mean and rstd 2R, RMSNorm's rstd R), logits and probs (BT,Vl
  // each), losses (BT), max (BT), sums (2BT).
  const u64 head = last_chunk ? BT * C + d.norm_stats * R + 2 * BT * d.Vl + BT + BT + 2 * BT : 0;
  // Planned full recompute: each layer's input (x0 the first's), and the last layer's
  // output for the head.
  if (c.recompute == Recompute::full) return Lc * layer_activation_floats(c) + (last_chunk ? R * C + head : 0);
  return R * C + Lc * layer_activation_floats(c) + head;  // x0 (R,C), the layers, the head
}

uint64_t layer_activation_floats(const PlanConfig& c) {
  const Dims d = dims(c);
  switch (c.recompute) {
    case Recompute::none:
      return layer_body_floats(d) + layer_stat_floats(d) + attention_floats(d) + attention_lse_floats(d);
    case Recompute::selective: return layer_body_floats(d) + layer_stat_floats(d);  // no attention kept
    case Recompute::full: return d.R * d.C;
  }
  return 0;
}

uint64_t workspace_floats(const PlanConfig& c) {
  const Dims d = dims(c);
  const u64 BT = d.BT, C = d.C;
  // ensure_scratch: dres, dln (BT,C each), two (BT,big) of the largest per-rank width (GPT-2's
  // 4Cl; Llama's max of 2 Fl, Wq, Cl), datt (B,NHl,Tn,Tn), dlogits (BT,Vl), (BT); sequence
  // parallel: the TP linears' work buffer (2 BT C) and a norm's partial gradients (2 C).
  const u64 big = std::max({d.F1, d.Fa, d.Wq, d.Cl});
  u64 w = BT * C + BT * C + 2 * BT * big + attention_matrix_floats(d) + BT * d.Vl + BT;
  if (c.layout.sequence_parallel) w += 2 * BT * C + 2 * C;
  // A zero-bubble schedule's sZb: the LayerNorm parameter gradients B drops (2 C) and a norm's
  // input gradient W drops (R, C).
  if (c.layout.schedule == "zb-h1") w += 2 * C + d.R * C;
  // Planned: selective, the one attention matrix recomputed in backward; full, the one layer's
  // activations recomputed (its statistics included, its attention buffer (B,NHl,Tn,Tn)
  // whatever the attention keeps).
  if (c.recompute == Recompute::full) w += layer_body_floats(d) + layer_stat_floats(d) + attention_matrix_floats(d);
  if (c.recompute == Recompute::selective) w += attention_matrix_floats(d);
  w += fused_fp32_workspace_floats(d, c.recompute);
  // Llama with a KV head shared by kv_share > 1 TP ranks: kv_grad_, a layer's QKV weight
  // gradient (Wq, C) then (KV, 2 hs, C) to sum over the sharing ranks, held from construction.
  if (d.kv_share > 1) w += (d.Wq + 2 * d.KV * d.hs) * C;
  return w;
}

uint64_t transient_workspace_bytes(const PlanConfig& c, int pp_rank) {
  const Dims d = dims(c);
  if (!d.cp) return 0;
  const ParallelLayout& l = c.layout;
  const u64 ab = act_bytes(c.precision), Tc = d.Tn / 2, g = d.NHl / d.KVl;
  // context_parallel.cc CpPass, alive through one attention forward or backward (C = Cl, NH =
  // NHl, KV = KVl there): a block's output (Tc, Cl) and log-sum-exp (Tc, NHl, acc_t<T>), the
  // block ops' scratch (2 Tc^2 + Tc), and with grouped-query attention (g = NHl / KVl > 1) a
  // block's K/V and its dK/dV repeated to NHl heads ((Tc, 2 Cl) each).
  // A fused kernel keeps the block's output and log-sum-exp only: its scratch is on-chip, and it
  // reads grouped K/V heads in place (FlashAttention-2's GQA support).
  const u64 pass = d.fused ? Tc * d.Cl * ab + Tc * d.NHl * 4
                           : (Tc * d.Cl + 2 * Tc * Tc + Tc + (g > 1 ? 4 * Tc * d.Cl : 0)) * ab + Tc * d.NHl * 4;
  // GPT-2's first stage: wpe's rows at this rank's positions, (Tn, C), in the embedding's
  // forward (TP rank 0) and its backward (every TP rank: embedding_backward's dwpe rows).
  bool first = false;
  for (int ch = 0; ch < l.virtual_stages; ++ch) first = first || ch * l.pp + pp_rank == 0;
  const u64 wpe = first && !d.llama ? d.Tn * d.C * ab : 0;
  return std::max(pass, wpe);  // never alive together
}

uint64_t cp_comm_buffer_bytes(const PlanConfig& c) {
  const Dims d = dims(c);
  if (!d.cp) return 0;
  // One rank's packed K/V of the micro-batch: B Tn rows of its KVl heads' k and v (2 KVl hs).
  // The backward holds the most: p2p, K/V, dK/dV and the next of each (4 blocks); all_gather,
  // its K/V and dK/dV and the gathered cp of each (2 + 2 cp blocks). Forward: 2, or 1 + cp.
  const u64 kv = d.BT * 2 * d.KVl * d.hs, cp = u64(c.layout.cp);
  const u64 blocks = c.layout.cp_comm_type == "all_gather" ? 2 + 2 * cp : 4;
  return blocks * kv * act_bytes(c.precision);
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
  // ZeRO shards over the gradient group: the DP group, or with context parallelism the dp cp
  // ranks of the data-and-context group (layout_runner.cc: the CP ranks' gradients are partial
  // sums over their tokens, reduced with the DP replicas').
  r.units = plan_zero_units(r.tensors, l.dp * l.cp);
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
  const Dims d = dims(c);
  const u64 ab = act_bytes(c.precision), BT = d.BT;
  r.activation_sets = activation_sets_per_chunk(l.schedule, l.pp, l.micro_batches, l.virtual_stages, pp_rank);
  for (int ch = 0; ch < l.virtual_stages; ++ch) {
    const u64 stats = stat_floats(c, ch * l.pp + pp_rank);
    const u64 set = (activation_set_floats(c, ch * l.pp + pp_rank) - stats) * ab + stats * 4 + 2 * BT * 4;  // + ids
    r.activation_set_bytes.push_back(set);
    m.at(Tier::device, kAct) += l.schedule == "zb-h1" ? zero_bubble_activation_peak(c, pp_rank, set)
                                                     : u64(r.activation_sets[size_t(ch)]) * set;
  }
  // The recomputed layer's norm statistics and a fused kernel's workspace, fp32.
  const u64 ws_stats = (c.recompute == Recompute::full ? layer_stat_floats(d) : 0) + fused_fp32_workspace_floats(d, c.recompute);
  r.transient_workspace_bytes = transient_workspace_bytes(c, pp_rank);
  r.workspace_bytes = (workspace_floats(c) - ws_stats) * ab + ws_stats * 4 + r.transient_workspace_bytes;
  m.at(Tier::device, kWork) = r.workspace_bytes;
  r.cp_comm_buffer_bytes = cp_comm_buffer_bytes(c);
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
