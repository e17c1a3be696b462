// The step-time model's terms (reference/analytic/step_time_model.h; equations in docs/plan.md).
#include "reference/analytic/step_time_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/comm/ring.h"
#include "kernels/error.h"
#include "reference/parallel/pipeline_schedule.h"

namespace dtb {
namespace {

double elem_bytes(Precision p) { return p == Precision::fp32 ? 4.0 : 2.0; }

// The shapes one rank works on: b sequences per micro-batch, N = b s rows, the TP shard's
// channels and heads, LayerNorm/residual rows (N / t under sequence parallelism).
struct Shapes {
  int64_t b, s, N, C, Cl, NHl, Vl, Nln, t;
  double e;
};

Shapes shapes_of(const StepTimeInput& in) {
  const ParallelLayout& l = in.layout;
  Shapes x{};
  x.t = l.tp;
  x.b = in.global_batch / (int64_t(l.dp) * in.micro_batches);
  x.s = in.seq_len;
  x.N = x.b * x.s;
  x.C = in.model.C;
  x.Cl = in.model.C / l.tp;
  x.NHl = in.model.NH / l.tp;
  x.Vl = (in.model.V + l.tp - 1) / l.tp;
  x.Nln = l.sequence_parallel ? (x.N + l.tp - 1) / l.tp : x.N;
  x.e = elem_bytes(in.precision);
  return x;
}

StepOp gemm(const std::string& name, int64_t N, int64_t C, int64_t OC, bool backward) {
  StepOp o{StepOp::Kind::gemm, name, {N, C, OC, 0}, (backward ? 4.0 : 2.0) * double(N) * C * OC, 0, 1};
  return o;
}

StepOp mem(const std::string& name, std::array<int64_t, 4> dims, double bytes, int count = 1) {
  return StepOp{StepOp::Kind::memory, name, dims, 0, bytes, count};
}

// One transformer layer's ops on one micro-batch (Megatron-LM's ParallelTransformerLayer: QKV and
// FC1 column-parallel, projection and FC2 row-parallel).
void layer_ops(const Shapes& x, bool forward, std::vector<StepOp>& out) {
  const double e = x.e;
  // attention core: QK^T and AV, 2 b s^2 C/t FLOPs each forward (the full square); backward 2x.
  const double attn = 4.0 * double(x.b) * x.s * x.s * x.Cl;
  if (forward) {
    out.push_back(mem("layernorm_forward", {x.Nln, x.C, 0, 0}, 2.0 * x.Nln * x.C * e, 2));
    out.push_back(gemm("matmul_forward", x.N, x.C, 3 * x.Cl, false));
    out.push_back({StepOp::Kind::attention, "attention_forward", {x.b, x.s, x.Cl, x.NHl}, attn, 0, 1});
    out.push_back(gemm("matmul_forward", x.N, x.Cl, x.C, false));
    out.push_back(mem("residual_forward", {x.Nln * x.C, 0, 0, 0}, 3.0 * x.Nln * x.C * e, 2));
    out.push_back(gemm("matmul_forward", x.N, x.C, 4 * x.Cl, false));
    out.push_back(mem("gelu_forward", {x.N * 4 * x.Cl, 0, 0, 0}, 2.0 * x.N * 4 * x.Cl * e));
    out.push_back(gemm("matmul_forward", x.N, 4 * x.Cl, x.C, false));
  } else {
    out.push_back(gemm("matmul_backward", x.N, 4 * x.Cl, x.C, true));
    out.push_back(mem("gelu_backward", {x.N * 4 * x.Cl, 0, 0, 0}, 3.0 * x.N * 4 * x.Cl * e));
    out.push_back(gemm("matmul_backward", x.N, x.C, 4 * x.Cl, true));
    out.push_back(mem("layernorm_backward", {x.Nln, x.C, 0, 0}, 4.0 * x.Nln * x.C * e, 2));
    out.push_back(gemm("matmul_backward", x.N, x.Cl, x.C, true));
    out.push_back({StepOp::Kind::attention, "attention_backward", {x.b, x.s, x.Cl, x.NHl}, 2 * attn, 0, 1});
    out.push_back(gemm("matmul_backward", x.N, x.C, 3 * x.Cl, true));
    // The buffers the accumulating kernels (matmul, GELU and attention backward) write into,
    // cleared first (reference/parallel/tensor_parallel.cc, parallel_gpt_backward.cc): FC2's and GELU's
    // input gradients (N x 4C/t), FC1's and QKV's (N x C), the projection's (N x C/t), QKV's
    // output gradient (N x 3C/t). The residual stream's gradient needs no sums: LayerNorm's
    // backward accumulates into it.
    out.push_back(mem("zero", {x.N * 4 * x.Cl, 0, 0, 0}, double(x.N) * 4 * x.Cl * e, 2));
    out.push_back(mem("zero", {x.N * x.C, 0, 0, 0}, double(x.N) * x.C * e, 2));
    out.push_back(mem("zero", {x.N * x.Cl, 0, 0, 0}, double(x.N) * x.Cl * e));
    out.push_back(mem("zero", {x.N * 3 * x.Cl, 0, 0, 0}, double(x.N) * 3 * x.Cl * e));
  }
}

void scale_counts(std::vector<StepOp>& ops, size_t from, int k) {
  for (size_t i = from; i < ops.size(); ++i) ops[i].count *= k;
}

// Parameters of one layer on one TP rank (weights split, row-parallel biases and LayerNorms
// replicated).
double layer_params(int64_t C, int t) {
  return (3.0 * C * C + 4.0 * C * C + 4.0 * C * C + C * C) / t + (3.0 * C + 4.0 * C) / t + 2.0 * C + 4.0 * C;
}

// The busiest rank's local parameters (its TP shard of its pipeline stage's chunks): layers,
// the vocabulary-parallel wte and wpe on stage 0, the final LayerNorm and the tied wte on the last.
double busiest_rank_params(const StepTimeInput& in) {
  const ParallelLayout& l = in.layout;
  const std::vector<int> layers = stage_layers(l, in.model.L);
  const double C = in.model.C, wte = std::ceil(double(in.model.V) / l.tp) * C;
  double most = 0;
  for (int r = 0; r < l.pp; ++r) {
    double p = 0;
    for (int c = 0; c < l.virtual_stages; ++c) p += layers[size_t(c * l.pp + r)] * layer_params(in.model.C, l.tp);
    if (r == 0) p += wte + double(in.model.T) * C;
    if (r == l.pp - 1) p += 2 * C + (l.pp > 1 ? wte : 0.0);
    most = std::max(most, p);
  }
  return most;
}

double op_time(const StepOp& o, const StepTimeHardware& hw, Precision p) {
  const auto it = hw.op_seconds.find(o.key(p));
  if (it != hw.op_seconds.end()) return it->second * o.count;
  const AlphaBeta& r = o.kind == StepOp::Kind::gemm        ? hw.gemm[size_t(p)]
                       : o.kind == StepOp::Kind::attention ? hw.attention[size_t(p)]
                                                           : hw.memory;
  if (o.kind != StepOp::Kind::memory && r.per_s <= 0)
    throw InputError("step-time model: the hardware has no " + std::string(o.kind == StepOp::Kind::gemm ? "GEMM" : "attention") +
                     " rate for " + std::string(to_string(p)) + " and no measured time of " + o.key(p));
  return r.time(o.kind == StepOp::Kind::memory ? o.bytes : o.flops) * o.count;
}

double ops_time(const std::vector<StepOp>& ops, const StepTimeHardware& hw, Precision p) {
  double t = 0;
  for (const StepOp& o : ops) t += op_time(o, hw, p);
  return t;
}

LinkClass link_of(const StepTimeHardware& hw, int span_ranks) {
  return hw.ranks_per_node > 0 && span_ranks > hw.ranks_per_node ? LinkClass::inter_node : LinkClass::intra_node;
}

// The step's optimizer ops on the busiest rank: zeroing its gradients, AdamW over its share
// (its shard at ZeRO >= 1), which reads param, grad, m, v and writes param, m, v (m, v in fp32;
// in half precision also the fp32 master, read and written).
std::vector<StepOp> optimizer_ops(const StepTimeInput& in) {
  const double local = busiest_rank_params(in), e = elem_bytes(in.precision);
  const double shard = std::ceil(local / (in.zero.stage >= 1 ? in.layout.dp : 1));
  return {mem("zero", {int64_t(local), 0, 0, 0}, local * e),
          mem("adamw_update", {int64_t(shard), 0, 0, 0}, shard * (3 * e + 16 + (e < 4 ? 8 : 0)))};
}

}  // namespace

std::string StepOp::key(Precision p) const {
  std::string k = name + ":";
  for (size_t i = 0; i < dims.size() && dims[i] != 0; ++i) {
    if (i) k += 'x';
    k += std::to_string(dims[i]);
  }
  return k + ":" + std::string(to_string(p));
}

void validate_step_time_input(const StepTimeInput& in) {
  const ParallelLayout& l = in.layout;
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("step-time model: " + what);
  };
  need(in.model.moe.num_experts == 0, "MoE models are not modelled (model.num_experts = " +
                                          std::to_string(in.model.moe.num_experts) + ")");
  if (is_llama(in.model)) throw InputError(llama_not_supported("the step-time model"));
  need(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.virtual_stages >= 1, "tp, pp, dp and virtual stages must be >= 1");
  need(in.micro_batches >= 1 && in.seq_len >= 1 && in.global_batch >= 1, "global_batch, micro_batches and seq_len must be >= 1");
  need(in.global_batch % (int64_t(l.dp) * in.micro_batches) == 0,
       "global_batch " + std::to_string(in.global_batch) + " is not divisible by dp x micro_batches = " +
           std::to_string(int64_t(l.dp) * in.micro_batches));
  need(in.model.C % l.tp == 0 && in.model.NH % l.tp == 0,
       "channels " + std::to_string(in.model.C) + " and heads " + std::to_string(in.model.NH) +
           " must be divisible by tp " + std::to_string(l.tp));
  need(l.pipeline_layers.empty() ? in.model.L % (l.pp * l.virtual_stages) == 0
                                 : int64_t(l.pipeline_layers.size()) == int64_t(l.pp) * l.virtual_stages,
       "layers " + std::to_string(in.model.L) + " do not split over pp x virtual stages = " +
           std::to_string(l.pp * l.virtual_stages));
  validate_pipeline(l.schedule, l.pp, in.micro_batches, l.virtual_stages);
}

std::vector<StepOp> stage_ops(const StepTimeInput& in, int vs, bool forward) {
  validate_step_time_input(in);
  const Shapes x = shapes_of(in);
  const ParallelLayout& l = in.layout;
  const int nv = l.pp * l.virtual_stages;
  if (vs < 0 || vs >= nv) throw InputError("step-time model: virtual stage " + std::to_string(vs) + " outside [0, " + std::to_string(nv) + ")");
  const int layers = stage_layers(l, in.model.L)[size_t(vs)];
  std::vector<StepOp> out;
  const bool first = vs == 0, last = vs == nv - 1;
  auto embedding = [&](bool fwd) {
    // The vocabulary-parallel embedding (reference/parallel/parallel_gpt.cc), its shard's rows only.
    out.push_back(mem(fwd ? "embedding_shard_forward" : "embedding_shard_backward", {x.b, x.s, x.C, x.Vl},
                      3.0 * x.N * x.C * x.e));
  };
  auto head = [&](bool fwd) {
    if (fwd) {
      out.push_back(mem("layernorm_forward", {x.Nln, x.C, 0, 0}, 2.0 * x.Nln * x.C * x.e));
      out.push_back(gemm("matmul_forward", x.N, x.C, x.Vl, false));
      // The vocabulary-parallel cross-entropy (tensor_parallel.h): the shard's row maxima, its
      // sums of exponentials, then the losses and probabilities (Megatron-LM's
      // vocab_parallel_cross_entropy), each a pass over the N x V/t logits.
      out.push_back(mem("crossentropy_shard_max", {x.N, x.Vl, 0, 0}, double(x.N) * x.Vl * x.e));
      out.push_back(mem("crossentropy_shard_sums", {x.N, x.Vl, 0, 0}, double(x.N) * x.Vl * x.e));
      out.push_back(mem("crossentropy_shard_forward", {x.N, x.Vl, 0, 0}, 2.0 * x.N * x.Vl * x.e));
    } else {
      out.push_back(mem("crossentropy_shard_backward", {x.N, x.Vl, 0, 0}, 2.0 * x.N * x.Vl * x.e));
      out.push_back(mem("zero", {x.N * x.C, 0, 0, 0}, double(x.N) * x.C * x.e, 2));  // the head's and residual's input gradients
      out.push_back(gemm("matmul_backward", x.N, x.C, x.Vl, true));
      out.push_back(mem("layernorm_backward", {x.Nln, x.C, 0, 0}, 4.0 * x.Nln * x.C * x.e));
    }
  };
  if (forward) {
    if (first) embedding(true);
    const size_t from = out.size();
    layer_ops(x, true, out);
    scale_counts(out, from, layers);
    if (last) head(true);
    return out;
  }
  if (last) head(false);
  size_t from = out.size();
  // Recompute: full re-runs each layer's forward in its backward (Chen et al. 2016; Megatron's
  // --recompute-granularity full), selective only attention's core (Korthikanti et al. 2022).
  if (in.recompute == Recompute::full) layer_ops(x, true, out);
  if (in.recompute == Recompute::selective)
    out.push_back({StepOp::Kind::attention, "attention_forward", {x.b, x.s, x.Cl, x.NHl},
                   4.0 * double(x.b) * x.s * x.s * x.Cl, 0, 1});
  layer_ops(x, false, out);
  scale_counts(out, from, layers);
  if (first) embedding(false);
  return out;
}

std::vector<StepOp> step_ops(const StepTimeInput& in) {
  std::vector<StepOp> all;
  const int nv = in.layout.pp * in.layout.virtual_stages;
  for (int vs = 0; vs < nv; ++vs)
    for (bool fwd : {true, false})
      for (StepOp& o : stage_ops(in, vs, fwd)) all.push_back(o);
  for (StepOp& o : optimizer_ops(in)) all.push_back(o);
  std::vector<StepOp> unique;
  for (StepOp& o : all) {
    o.count = 1;
    if (std::none_of(unique.begin(), unique.end(), [&](const StepOp& u) { return u.key(in.precision) == o.key(in.precision); }))
      unique.push_back(o);
  }
  return unique;
}

double collective_seconds(const StepTimeHardware& hw, int group, LinkClass link, double bytes, bool half) {
  if (group <= 1) return 0;
  const CollectiveFit* best = nullptr;
  for (const CollectiveFit& f : hw.collectives) {
    if (f.link != link) continue;
    const bool f_ok = f.group >= group, b_ok = best && best->group >= group;
    if (!best || (f_ok && (!b_ok || f.group < best->group)) || (!f_ok && !b_ok && f.group > best->group)) best = &f;
  }
  if (!best)
    throw InputError(std::string("step-time model: the hardware has no collective fit for the ") +
                     (link == LinkClass::intra_node ? "intra-node" : "inter-node") + " link");
  const double busbytes = (half ? ring_gather_factor(group) : ring_all_reduce_factor(group)) * bytes;
  return best->bus.time(busbytes);
}

StepTimeTerms predict_step(const StepTimeInput& in, const StepTimeHardware& hw) {
  validate_step_time_input(in);
  const ParallelLayout& l = in.layout;
  const Shapes x = shapes_of(in);
  const Precision p = in.precision;
  const int nv = l.pp * l.virtual_stages, m = in.micro_batches;
  const double e = x.e, ce = in.zero.fp32_communication ? 4.0 : e;
  const std::vector<int> layers = stage_layers(l, in.model.L);
  // Groups (reference/layout/process_grid.h): TP ranks consecutive, DP ranks tp apart, stages tp dp apart.
  const LinkClass tp_link = link_of(hw, l.tp), dp_link = link_of(hw, l.tp * (l.dp - 1) + 1);
  const AlphaBeta& p2p = link_of(hw, l.tp * l.dp + 1) == LinkClass::intra_node ? hw.p2p_intra : hw.p2p_inter;
  // A TP all-reduce of n bytes; under sequence parallelism an all-gather plus a reduce-scatter
  // (Korthikanti et al. 2022): the same bus bytes, twice the latency.
  auto tp_ar = [&](double bytes) {
    if (l.tp == 1) return 0.0;
    return l.sequence_parallel ? 2 * collective_seconds(hw, l.tp, tp_link, bytes, true)
                               : collective_seconds(hw, l.tp, tp_link, bytes, false);
  };
  auto dp_coll = [&](double bytes, bool half) { return collective_seconds(hw, l.dp, dp_link, bytes, half); };
  const double act = double(x.N) * x.C * e;  // one activation tensor, bytes
  const double C = in.model.C, wte = std::ceil(double(in.model.V) / l.tp) * C;
  StepTimeTerms r;
  std::vector<StageCost> costs(static_cast<size_t>(nv));
  for (int vs = 0; vs < nv; ++vs) {
    const bool first = vs == 0, last = vs == nv - 1;
    const double fc = ops_time(stage_ops(in, vs, true), hw, p), bc = ops_time(stage_ops(in, vs, false), hw, p);
    const int ly = layers[size_t(vs)];
    // Megatron's f and g: two all-reduces of the layer's output per pass; the embedding's in the
    // forward, the head's input gradient in the backward, the loss's max and sum (N floats each).
    double tpf = ly * 2 * tp_ar(act) + (first ? tp_ar(act) : 0) + (last ? 2 * tp_ar(4.0 * x.N) : 0);
    double tpb = ly * 2 * tp_ar(act) + (last ? tp_ar(act) : 0) + (in.recompute == Recompute::full ? ly * 2 * tp_ar(act) : 0);
    const double pf = last ? 0 : p2p.time(act), pb = first ? 0 : p2p.time(act);
    // ZeRO-3 gathers each unit's parameters before its forward and again before its backward;
    // stages 2-3 reduce-scatter each micro-batch's gradients (reference/zero/zero.h).
    const double chunk = ly * layer_params(in.model.C, l.tp) + (first ? wte + in.model.T * C : 0) + (last ? 2 * C : 0);
    const int units = ly + (first ? 1 : 0) + (last ? 1 : 0);
    double zf = 0, zb = 0;
    if (in.zero.stage == 3) {
      zf = units * dp_coll(chunk * e / units, true);
      zb = zf;
    }
    if (in.zero.stage >= 2 && !in.zero.overlap_comm) zb += dp_coll(chunk * ce, true);
    costs[size_t(vs)] = {fc + tpf + pf + zf, bc + tpb + pb + zb, 0};
    if (fc + bc + tpf + tpb + zf + zb > r.forward_compute_s + r.backward_compute_s + r.tp_comm_s + r.zero_mb_comm_s) {
      r.forward_compute_s = fc, r.backward_compute_s = bc, r.tp_comm_s = tpf + tpb, r.zero_mb_comm_s = zf + zb;
    }
    r.p2p_s = l.pp > 1 ? p2p.time(act) : 0;
  }
  if (nv == 1) {
    r.pipeline_s = m * (costs[0].forward + costs[0].backward);
  } else {
    const PipelineSimulation sim = simulate_pipeline(l.schedule, l.pp, m, l.virtual_stages, costs);
    r.pipeline_s = sim.makespan, r.bubble = sim.bubble;
    // Ranks sharing cores: the schedule at the rate of a rank alone on its core (the shared-rate
    // times over ranks_per_core), but no less than the ranks' work over the cores, which at the
    // shared rate is one rank's mean work: m times its stages' F + B (a work-conserving bound).
    if (hw.ranks_per_core > 1) {
      double work = 0;
      for (const StageCost& c : costs) work += c.forward + c.backward;
      r.pipeline_s = std::max(sim.makespan / hw.ranks_per_core, m * work / l.pp);
    }
  }
  // DP: stages 0-1 all-reduce the rank's gradients once (one bucket), stages 1-2 all-gather the
  // updated parameters after the optimizer; with overlap_comm the reduce-scatters of stages 2-3
  // hide under the backward but the last (Rajbhandari et al. 2020; DeepSpeed's overlap_comm).
  const double local = busiest_rank_params(in), shard = std::ceil(local / (in.zero.stage >= 1 ? l.dp : 1));
  if (in.zero.stage <= 1) r.dp_comm_s += dp_coll(local * ce, false);
  if (in.zero.stage == 1 || in.zero.stage == 2) r.dp_comm_s += dp_coll(local * e, true);
  if (in.zero.stage >= 2 && in.zero.overlap_comm) r.dp_comm_s += dp_coll(local * ce, true);
  r.dp_exposed_s = r.dp_comm_s;
  r.optimizer_s = ops_time(optimizer_ops(in), hw, p);
  // The global gradient norm (and the fp16 inf/NaN scan): the held gradient, the rank's whole at
  // ZeRO 0-1 and its shard at 2-3, copied to the host and passed over there.
  if (hw.host_pass.per_s > 0) {
    const double held = in.zero.stage >= 2 ? shard : local;
    r.optimizer_s += (p == Precision::fp16 ? 2 : 1) * (hw.host_link.time(held * e) + hw.host_pass.time(held));
  }
  if (in.zero.offload_optimizer) r.offload_s = 2 * hw.host_link.time(shard * e);
  const int world = int(l.world());
  r.scalars_s = 3 * collective_seconds(hw, world, link_of(hw, world), 8.0, false);
  r.step_s = r.pipeline_s + r.dp_exposed_s + r.optimizer_s + r.offload_s + r.scalars_s;
  return r;
}

}  // namespace dtb
