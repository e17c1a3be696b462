// The step-time model's terms (reference/analytic/step_time_model.h; equations in docs/plan.md).
#include "reference/analytic/step_time_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"
#include "reference/parallel/pipeline_schedule.h"

namespace dtb {
namespace {

double elem_bytes(Precision p) { return p == Precision::fp32 ? 4.0 : 2.0; }

// The shapes one rank works on: b sequences per micro-batch, s tokens per sequence, sl = s / cp
// of them on this CP rank, N = b sl rows, the TP shard's channels and heads, LayerNorm/residual
// rows (N / t under sequence parallelism); for Llama the shard's KV heads (KV / t, or one
// replicated head when KV < t: reference/parallel/parallel_gpt.cc), packed qkv rows
// Wl = (NH / t + 2 KVl) hs and SwiGLU width Fl = F / t.
struct Shapes {
  int64_t b, s, sl, N, C, Cl, NHl, Vl, Nln, t, cp, hs, KVl, Wl, Fl;
  bool llama;
  bool dropout, attention_dropout;  // hidden dropout; dropout on materialized probabilities
  double e;
};

Shapes shapes_of(const StepTimeInput& in) {
  const ParallelLayout& l = in.layout;
  Shapes x{};
  x.t = l.tp;
  x.cp = l.cp;
  x.b = in.global_batch / (int64_t(l.dp) * in.micro_batches);
  x.s = in.seq_len;
  x.sl = in.seq_len / l.cp;
  x.N = x.b * x.sl;
  x.C = in.model.C;
  x.Cl = in.model.C / l.tp;
  x.NHl = in.model.NH / l.tp;
  x.hs = in.model.C / in.model.NH;
  x.llama = is_llama(in.model);
  x.dropout = in.dropout > 0;
  x.attention_dropout = x.dropout && in.attention == AttentionKernel::materialized;
  x.KVl = x.llama ? std::max<int64_t>(1, kv_heads(in.model) / l.tp) : x.NHl;
  x.Wl = (x.NHl + 2 * x.KVl) * x.hs;
  x.Fl = x.llama ? ffn_hidden(in.model) / l.tp : 4 * x.Cl;
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

// Attention's core of one layer on one micro-batch, forward (backward: twice the FLOPs): QK^T
// and AV, 2 b s^2 C/t FLOPs each over the full square (the convention of model_flops_per_token's
// 12 L C s, PaLM appendix B). Under context parallelism each CP rank does 1/cp of it (the
// 2 cp-chunk split gives every rank the same share of the causal work: docs/context-parallel.md):
// 4 b s^2 C/t / cp = cp x 4 b sl^2 C/t with sl = s / cp, priced as cp instances (count) of the
// square over the rank's own sl rows (one per ring step, a block of sl queries against a block of
// sl keys), so that the instance is a shape a calibration can time.
StepOp attention_op(const Shapes& x, bool forward) {
  const double flops = (forward ? 4.0 : 8.0) * double(x.b) * x.sl * x.sl * x.Cl;
  return {StepOp::Kind::attention, forward ? "attention_forward" : "attention_backward", {x.b, x.sl, x.Cl, x.NHl},
          flops, 0, int(x.cp)};
}

// Attention's core and, where the stack trains with dropout on materialized probabilities
// (Megatron-LM's CoreAttention: attention_dropout after the softmax), that dropout: it reads the
// b NHl sl x sl probabilities (per CP ring step: count cp) and writes them with a one-byte mask
// (forward), or reads their gradient and the mask and writes it (backward). FlashAttention drops
// inside the kernel from its RNG state and stores no mask: nothing more under fused attention.
void attention_ops(const Shapes& x, bool forward, std::vector<StepOp>& out) {
  out.push_back(attention_op(x, forward));
  if (!x.attention_dropout) return;
  const double scores = double(x.b) * x.NHl * x.sl * x.sl;
  out.push_back(mem(forward ? "attention_dropout_forward" : "attention_dropout_backward", {x.b, x.sl, x.NHl, x.sl},
                    scores * (2 * x.e + 1), int(x.cp)));
}

// Hidden dropout (Megatron-LM's bias_dropout_add after the projection and after the MLP, fused
// with the residual add): beyond the residual_forward pass, the one-byte mask written (forward);
// the gradient read and written with the mask (backward). Nothing without dropout.
void hidden_dropout_ops(const Shapes& x, bool forward, std::vector<StepOp>& out) {
  if (!x.dropout) return;
  const double n = double(x.Nln) * x.C;
  out.push_back(forward ? mem("dropout_forward", {x.Nln * x.C, 0, 0, 0}, n, 2)
                        : mem("dropout_backward", {x.Nln * x.C, 0, 0, 0}, n * (2 * x.e + 1), 2));
}

// One transformer layer's ops on one micro-batch (Megatron-LM's ParallelTransformerLayer: QKV and
// FC1 column-parallel, projection and FC2 row-parallel).
void layer_ops(const Shapes& x, bool forward, std::vector<StepOp>& out) {
  const double e = x.e;
  if (forward) {
    out.push_back(mem("layernorm_forward", {x.Nln, x.C, 0, 0}, 2.0 * x.Nln * x.C * e, 2));
    out.push_back(gemm("matmul_forward", x.N, x.C, 3 * x.Cl, false));
    attention_ops(x, true, out);
    out.push_back(gemm("matmul_forward", x.N, x.Cl, x.C, false));
    out.push_back(mem("residual_forward", {x.Nln * x.C, 0, 0, 0}, 3.0 * x.Nln * x.C * e, 2));
    hidden_dropout_ops(x, true, out);
    out.push_back(gemm("matmul_forward", x.N, x.C, 4 * x.Cl, false));
    out.push_back(mem("gelu_forward", {x.N * 4 * x.Cl, 0, 0, 0}, 2.0 * x.N * 4 * x.Cl * e));
    out.push_back(gemm("matmul_forward", x.N, 4 * x.Cl, x.C, false));
  } else {
    out.push_back(gemm("matmul_backward", x.N, 4 * x.Cl, x.C, true));
    out.push_back(mem("gelu_backward", {x.N * 4 * x.Cl, 0, 0, 0}, 3.0 * x.N * 4 * x.Cl * e));
    out.push_back(gemm("matmul_backward", x.N, x.C, 4 * x.Cl, true));
    out.push_back(mem("layernorm_backward", {x.Nln, x.C, 0, 0}, 4.0 * x.Nln * x.C * e, 2));
    hidden_dropout_ops(x, false, out);
    out.push_back(gemm("matmul_backward", x.N, x.Cl, x.C, true));
    attention_ops(x, false, out);
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

// One Llama layer's ops on one micro-batch (reference/model/llama_block.cc, sharded as
// Megatron-Core's TransformerLayer with no biases): RMSNorm; the packed q, k, v GEMM
// column-parallel at the GQA width Wl = (NH/t + 2 KVl) hs; RoPE (rotate-half) on q and k, a
// read and a write of their N (NHl + KVl) hs elements; attention's core; the projection
// row-parallel; RMSNorm; SwiGLU's gate and up rows in one column-parallel GEMM (N x C -> 2 Fl),
// silu(gate) * up (reads 2 Fl, writes Fl), and the down GEMM row-parallel (Fl -> C).
void llama_layer_ops(const Shapes& x, bool forward, std::vector<StepOp>& out) {
  const double e = x.e, rope = 2.0 * x.N * (x.NHl + x.KVl) * x.hs * e;
  if (forward) {
    out.push_back(mem("rmsnorm_forward", {x.Nln, x.C, 0, 0}, 2.0 * x.Nln * x.C * e, 2));
    out.push_back(gemm("matmul_forward", x.N, x.C, x.Wl, false));
    out.push_back(mem("rope_forward", {x.b, x.sl, x.NHl, x.KVl}, rope));
    attention_ops(x, true, out);
    out.push_back(gemm("matmul_forward", x.N, x.Cl, x.C, false));
    out.push_back(mem("residual_forward", {x.Nln * x.C, 0, 0, 0}, 3.0 * x.Nln * x.C * e, 2));
    hidden_dropout_ops(x, true, out);
    out.push_back(gemm("matmul_forward", x.N, x.C, 2 * x.Fl, false));
    out.push_back(mem("swiglu_forward", {x.N, x.Fl, 0, 0}, 3.0 * x.N * x.Fl * e));
    out.push_back(gemm("matmul_forward", x.N, x.Fl, x.C, false));
  } else {
    out.push_back(gemm("matmul_backward", x.N, x.Fl, x.C, true));
    // swiglu_backward reads the 2 Fl inputs and the Fl output gradient, writes 2 Fl.
    out.push_back(mem("swiglu_backward", {x.N, x.Fl, 0, 0}, 5.0 * x.N * x.Fl * e));
    out.push_back(gemm("matmul_backward", x.N, x.C, 2 * x.Fl, true));
    out.push_back(mem("rmsnorm_backward", {x.Nln, x.C, 0, 0}, 4.0 * x.Nln * x.C * e, 2));
    hidden_dropout_ops(x, false, out);
    out.push_back(gemm("matmul_backward", x.N, x.Cl, x.C, true));
    attention_ops(x, false, out);
    out.push_back(mem("rope_backward", {x.b, x.sl, x.NHl, x.KVl}, rope));
    out.push_back(gemm("matmul_backward", x.N, x.C, x.Wl, true));
    // The cleared gradient buffers, as layer_ops': down's input gradient (N x Fl), SwiGLU's
    // (N x 2 Fl), the gate/up and qkv GEMMs' input gradients (N x C each), the projection's
    // (N x C/t), qkv's output gradient (N x Wl).
    out.push_back(mem("zero", {x.N * x.Fl, 0, 0, 0}, double(x.N) * x.Fl * e));
    out.push_back(mem("zero", {x.N * 2 * x.Fl, 0, 0, 0}, double(x.N) * 2 * x.Fl * e));
    out.push_back(mem("zero", {x.N * x.C, 0, 0, 0}, double(x.N) * x.C * e, 2));
    out.push_back(mem("zero", {x.N * x.Cl, 0, 0, 0}, double(x.N) * x.Cl * e));
    out.push_back(mem("zero", {x.N * x.Wl, 0, 0, 0}, double(x.N) * x.Wl * e));
  }
}

void block_ops(const Shapes& x, bool forward, std::vector<StepOp>& out) {
  if (x.llama) llama_layer_ops(x, forward, out);
  else layer_ops(x, forward, out);
}

void scale_counts(std::vector<StepOp>& ops, size_t from, int k) {
  for (size_t i = from; i < ops.size(); ++i) ops[i].count *= k;
}

// The parameter tensors of one layer on one TP rank, elements each. GPT-2: weights split,
// row-parallel biases and LayerNorms replicated (ln1 w, b; qkv w, b; proj w, b; ln2 w, b; fc1 w,
// b; fc2 w, b). Llama: the qkv rows Wl, projection, gate/up (one tensor) and down split, the two
// RMSNorm weights replicated, no biases.
std::vector<double> layer_tensors(const Shapes& x) {
  const double C = double(x.C);
  if (x.llama) return {C, double(x.Wl) * C, double(x.Cl) * C, C, 2.0 * double(x.Fl) * C, double(x.Fl) * C};
  const double t = double(x.t);
  return {C, C, 3 * C * C / t, 3 * C / t, C * C / t, C, C, C, 4 * C * C / t, 4 * C / t, 4 * C * C / t, C};
}

// Parameters of one layer on one TP rank: its tensors' sum.
double layer_params(const Shapes& x) {
  double p = 0;
  for (double t : layer_tensors(x)) p += t;
  return p;
}

// The parameters of virtual stage `vs`'s chunk on one TP rank besides its layers: the first
// stage's vocabulary-parallel wte (and GPT-2's wpe), the last's final norm (LayerNorm's weight
// and bias, RMSNorm's weight) and head (GPT-2's tied wte when pp > 1; Llama's untied lmheadw).
// Tensor by tensor (wte, wpe; norm weight, bias, head), elements each.
std::vector<double> end_tensors(const StepTimeInput& in, const Shapes& x, bool first, bool last, int pp) {
  const double C = double(x.C), wte = std::ceil(double(in.model.V) / x.t) * C;
  std::vector<double> t;
  if (first) t.push_back(wte);
  if (first && !x.llama) t.push_back(double(in.model.T) * C);
  if (last) t.push_back(C);
  if (last && !x.llama) t.push_back(C);
  if (last && (x.llama || pp > 1)) t.push_back(wte);
  return t;
}

double end_params(const StepTimeInput& in, const Shapes& x, bool first, bool last, int pp) {
  double p = 0;
  for (double t : end_tensors(in, x, first, last, pp)) p += t;
  return p;
}

// Seconds of a virtual stage's ZeRO-3 parameter all-gathers before one pass, `gather(n)` one
// all-gather of n elements: `units` of `chunk / units` elements each (each layer, and the
// embedding and head as units of their own, at the chunk's mean unit size), or one per parameter
// tensor (StepOverlap::gather_per_tensor), but those under param_persistence_threshold elements.
template <class Gather>
double zero3_gather_seconds(const StepTimeInput& in, const Shapes& x, int layers, bool first, bool last, double chunk,
                            int units, Gather gather) {
  const StepOverlap& o = in.overlap;
  if (!o.gather_per_tensor) return units * gather(chunk / units);
  double t = 0;
  auto add = [&](double n, int times) {
    if (n >= double(o.param_persistence_threshold)) t += times * gather(n);
  };
  for (double n : layer_tensors(x)) add(n, layers);
  for (double n : end_tensors(in, x, first, last, in.layout.pp)) add(n, 1);
  return t;
}

// The busiest rank's local parameters (its TP shard of its pipeline stage's chunks).
double busiest_rank_params(const StepTimeInput& in) {
  const ParallelLayout& l = in.layout;
  const Shapes x = shapes_of(in);
  const std::vector<int> layers = stage_layers(l, in.model.L);
  const int nv = l.pp * l.virtual_stages;
  double most = 0;
  for (int r = 0; r < l.pp; ++r) {
    double p = 0;
    for (int c = 0; c < l.virtual_stages; ++c) {
      const int vs = c * l.pp + r;
      p += layers[size_t(vs)] * layer_params(x) + end_params(in, x, vs == 0, vs == nv - 1, l.pp);
    }
    most = std::max(most, p);
  }
  return most;
}

// The step's optimizer ops on the busiest rank: zeroing its gradients, AdamW over its share
// (its shard at ZeRO >= 1, over the data-and-context group of dp cp ranks), which reads param,
// grad, m, v and writes param, m, v (m, v in fp32; in half precision also the fp32 master, read
// and written).
std::vector<StepOp> optimizer_ops(const StepTimeInput& in) {
  const double local = busiest_rank_params(in), e = elem_bytes(in.precision);
  const double shard = std::ceil(local / (in.zero.stage >= 1 ? double(in.layout.dp) * in.layout.cp : 1.0));
  return {mem("zero", {int64_t(local), 0, 0, 0}, local * e),
          mem("adamw_update", {int64_t(shard), 0, 0, 0}, shard * (3 * e + 16 + (e < 4 ? 8 : 0)))};
}

// The busiest pipeline rank's per-micro-batch compute over its chunks (virtual stages c p + rank)
// and its layers: what the DP buckets hide behind, its last micro-batch's backward (the reduction)
// and its next step's first forward (the distributed optimizer's gather).
struct RankCompute {
  double forward = 0, backward = 0;
  int layers = 0;
};

RankCompute busiest_rank_compute(const ParallelLayout& l, const std::vector<double>& fcs, const std::vector<double>& bcs,
                                 const std::vector<int>& layers) {
  RankCompute best;
  for (int s = 0; s < l.pp; ++s) {
    RankCompute r;
    for (int c = 0; c < l.virtual_stages; ++c) {
      const size_t vs = size_t(c * l.pp + s);
      r.forward += fcs[vs], r.backward += bcs[vs], r.layers += layers[vs];
    }
    if (r.forward + r.backward > best.forward + best.backward) best = r;
  }
  return best;
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
  need(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.cp >= 1 && l.virtual_stages >= 1,
       "tp, cp, pp, dp and virtual stages must be >= 1");
  need(in.micro_batches >= 1 && in.seq_len >= 1 && in.global_batch >= 1, "global_batch, micro_batches and seq_len must be >= 1");
  need(in.global_batch % (int64_t(l.dp) * in.micro_batches) == 0,
       "global_batch " + std::to_string(in.global_batch) + " is not divisible by dp x micro_batches = " +
           std::to_string(int64_t(l.dp) * in.micro_batches));
  need(in.model.C % l.tp == 0 && in.model.NH % l.tp == 0,
       "channels " + std::to_string(in.model.C) + " and heads " + std::to_string(in.model.NH) +
           " must be divisible by tp " + std::to_string(l.tp));
  const std::string gqa = llama_tp_refusal(in.model, l.tp);
  need(gqa.empty(), gqa);
  need(l.cp == 1 || in.seq_len % (2 * l.cp) == 0,
       "seq_len " + std::to_string(in.seq_len) + " is not divisible by 2 cp = " + std::to_string(2 * l.cp) +
           " (context parallelism cuts each sequence into 2 cp chunks)");
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
    out.push_back(mem(fwd ? "embedding_shard_forward" : "embedding_shard_backward", {x.b, x.sl, x.C, x.Vl},
                      3.0 * x.N * x.C * x.e));
  };
  auto head = [&](bool fwd) {
    if (fwd) {
      // The final norm (LayerNorm, or Llama's RMSNorm: the same bytes), the head's GEMM
      // (GPT-2's tied wte, Llama's untied lmheadw: the same shape).
      out.push_back(mem(x.llama ? "rmsnorm_forward" : "layernorm_forward", {x.Nln, x.C, 0, 0}, 2.0 * x.Nln * x.C * x.e));
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
      out.push_back(mem(x.llama ? "rmsnorm_backward" : "layernorm_backward", {x.Nln, x.C, 0, 0}, 4.0 * x.Nln * x.C * x.e));
    }
  };
  if (forward) {
    if (first) embedding(true);
    const size_t from = out.size();
    block_ops(x, true, out);
    scale_counts(out, from, layers);
    if (last) head(true);
    return out;
  }
  if (last) head(false);
  size_t from = out.size();
  // Recompute: full re-runs each layer's forward in its backward (Chen et al. 2016; Megatron's
  // --recompute-granularity full), selective only attention's core (Korthikanti et al. 2022).
  if (in.recompute == Recompute::full) block_ops(x, true, out);
  if (in.recompute == Recompute::selective) attention_ops(x, true, out);
  block_ops(x, false, out);
  scale_counts(out, from, layers);
  if (first) embedding(false);
  if (in.main_grad_accumulation && x.e < 4) {
    // Each micro-batch's half-precision gradients added into the fp32 main_grad buffer by a hook
    // after the backward (Megatron-LM 2021's DistributedDataParallel: param.main_grad.add_(
    // param.grad.data)): the chunk's parameters, their gradient read (e) and main_grad read and
    // written (8 bytes).
    const double params = layers * layer_params(x) + end_params(in, x, first, last, l.pp);
    out.push_back(mem("main_grad_accumulate", {int64_t(params), 0, 0, 0}, params * (x.e + 8)));
  }
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

StepTimeTerms predict_step(const StepTimeInput& in, const StepTimeHardware& hw) {
  validate_step_time_input(in);
  const ParallelLayout& l = in.layout;
  const Shapes x = shapes_of(in);
  const Precision p = in.precision;
  const int nv = l.pp * l.virtual_stages, m = in.micro_batches;
  const double e = x.e, ce = in.zero.fp32_communication ? 4.0 : e;
  const std::vector<int> layers = stage_layers(l, in.model.L);
  // Groups (reference/layout/process_grid.h, Megatron-Core's tp-cp-dp-pp order): TP ranks
  // consecutive, CP ranks tp apart, DP ranks tp cp apart, stages tp cp dp apart. Gradients are
  // reduced, and ZeRO shards, over the data-and-context group: its dp cp ranks, tp apart.
  const int dcp = l.dp * l.cp;
  const LinkClass tp_link = link_of(hw, l.tp), dp_link = link_of(hw, l.tp * (dcp - 1) + 1);
  const AlphaBeta& p2p = link_of(hw, l.tp * dcp + 1) == LinkClass::intra_node ? hw.p2p_intra : hw.p2p_inter;
  const AlphaBeta& cp_p2p = link_of(hw, l.tp * (l.cp - 1) + 1) == LinkClass::intra_node ? hw.p2p_intra : hw.p2p_inter;
  // A TP all-reduce of n bytes; under sequence parallelism an all-gather plus a reduce-scatter
  // (Korthikanti et al. 2022): the same bus bytes, each half with its own latency (the fit's
  // alpha, or NCCL's ring latency where the hardware gives ring_protocols).
  const int tp_nodes = group_nodes(hw, l.tp, 1), dp_nodes = group_nodes(hw, dcp, l.tp);
  auto tp_ar = [&](double bytes) {
    if (l.tp == 1) return 0.0;
    return l.sequence_parallel ? 2 * collective_seconds(hw, l.tp, tp_link, bytes, true, tp_nodes)
                               : collective_seconds(hw, l.tp, tp_link, bytes, false, tp_nodes);
  };
  auto dp_coll = [&](double bytes, bool half) { return collective_seconds(hw, dcp, dp_link, bytes, half, dp_nodes); };
  const double act = double(x.N) * x.C * e;  // one activation tensor, bytes
  // Context parallelism's ring (cp_comm_type p2p; Megatron-Core / Transformer Engine's
  // AttnFuncWithCPAndKVP2P): per layer, cp - 1 steps, each sending the rank's K and V blocks
  // (2 KVl hs sl b elements) to the next CP rank while attention runs on the block in hand;
  // the backward sends K/V again and the dK/dV accumulators with them (twice the bytes). A step
  // costs what its send exceeds its block's attention (1/cp of the layer's): the transfer is
  // hidden as far as that compute is longer, and never shortens it (overlap assumption,
  // docs/plan.md). 0 at cp 1.
  const double kv = 2.0 * x.KVl * x.hs * x.sl * x.b * e;
  const AttentionKernel ak = in.attention;
  const double attn_f = ops_seconds({attention_op(x, true)}, hw, p, ak), attn_b = ops_seconds({attention_op(x, false)}, hw, p, ak);
  const double ring_f = (l.cp - 1) * std::max(0.0, cp_p2p.time(kv) - attn_f / l.cp);
  const double ring_b = (l.cp - 1) * std::max(0.0, cp_p2p.time(2 * kv) - attn_b / l.cp);
  StepTimeTerms r;
  std::vector<StageCost> costs(static_cast<size_t>(nv));
  // Overlap (StepOverlap, all off by default): each hidden transfer costs what its compute does
  // not cover (overlapped_exposed), never less than 0, never shortening the compute.
  const StepOverlap& ov = in.overlap;
  std::vector<double> fcs(size_t(nv), 0.0), bcs(size_t(nv), 0.0);  // each virtual stage's compute
  // One inter-stage activation send, or with the scatter-gather 1/t of it and a TP all-gather.
  auto send = [&]() {
    if (ov.pp_scatter_gather && l.tp > 1) return p2p.time(act / l.tp) + collective_seconds(hw, l.tp, tp_link, act, true, tp_nodes);
    return p2p.time(act);
  };
  for (int vs = 0; vs < nv; ++vs) {
    const bool first = vs == 0, last = vs == nv - 1;
    const std::vector<StepOp> fops = stage_ops(in, vs, true), bops = stage_ops(in, vs, false);
    const double fc = ops_seconds(fops, hw, p, ak), bc = ops_seconds(bops, hw, p, ak);
    fcs[size_t(vs)] = fc, bcs[size_t(vs)] = bc;
    const int ly = layers[size_t(vs)];
    // Megatron's f and g: two all-reduces of the layer's output per pass; the embedding's in the
    // forward, the head's input gradient in the backward, the loss's max and sum (N floats each).
    double tpf = ly * 2 * tp_ar(act) + (first ? tp_ar(act) : 0) + (last ? 2 * tp_ar(4.0 * x.N) : 0);
    double tpb = ly * 2 * tp_ar(act) + (last ? tp_ar(act) : 0) + (in.recompute == Recompute::full ? ly * 2 * tp_ar(act) : 0);
    if (ov.tp_comm && l.tp > 1) {  // in tp chunks under the pass's TP GEMMs (userbuffers' ring exchange)
      auto gemms = [&](const std::vector<StepOp>& ops) {
        std::vector<StepOp> g;
        for (const StepOp& o : ops)
          if (o.kind == StepOp::Kind::gemm) g.push_back(o);
        return ops_seconds(g, hw, p, ak);
      };
      tpf = overlapped_exposed(tpf, gemms(fops), l.tp), tpb = overlapped_exposed(tpb, gemms(bops), l.tp);
    }
    // The ring in each layer's forward, and again in its backward (with the forward's again
    // when recompute re-runs attention: full or selective).
    const double cpf = ly * ring_f, cpb = ly * (ring_b + (in.recompute != Recompute::none ? ring_f : 0.0));
    double pf = last ? 0 : send(), pb = first ? 0 : send();
    if (ov.pp_send && l.schedule == "interleaved")  // overlap_p2p_comm: behind the next chunk's pass
      pf = std::max(0.0, pf - fc), pb = std::max(0.0, pb - bc);
    // ZeRO-3 gathers each unit's parameters before its forward and again before its backward;
    // stages 2-3 reduce-scatter each micro-batch's gradients (reference/zero/zero.h).
    const double chunk = ly * layer_params(x) + end_params(in, x, first, last, l.pp);
    const int units = ly + (first ? 1 : 0) + (last ? 1 : 0);
    // Prefetched, unit i+1's gather hides behind unit i's pass; bucketed, the reduce-scatter
    // behind the rest of the backward (both against the backward's compute when both are on).
    // A prefetch limited to prefetch_params elements ahead of use (DeepSpeed's
    // stage3_prefetch_bucket_size) fetches that share of a larger unit early; the rest waits.
    double zf = 0, zb = 0, pre = 0;
    if (in.zero.stage == 3) {
      const double gather =
          zero3_gather_seconds(in, x, ly, first, last, chunk, units, [&](double n) { return dp_coll(n * e, true); });
      const double unit = chunk / units;
      const double ahead = ov.prefetch_params > 0 ? std::min(1.0, double(ov.prefetch_params) / unit) : 1.0;
      pre = ov.param_gather_prefetch ? gather * ahead : 0.0;
      zf = gather - pre + overlapped_exposed(pre, fc, units);
      zb = gather - pre;
    }
    const double rs = in.zero.stage >= 2 && !in.zero.overlap_comm ? dp_coll(chunk * ce, true) : 0.0;
    const double hidden = pre + (ov.dp_grad_reduce ? rs : 0.0);
    zb += rs - (ov.dp_grad_reduce ? rs : 0.0) + overlapped_exposed(hidden, bc, units);
    const double w = l.schedule == "zb-h1" ? weight_grad_seconds(bops, hw, p) : 0.0;  // ZB-H1's W
    costs[size_t(vs)] = {fc + tpf + cpf + pf + zf, bc + tpb + cpb + pb + zb, w};
    if (fc + bc + tpf + tpb + cpf + cpb + zf + zb >
        r.forward_compute_s + r.backward_compute_s + r.tp_comm_s + r.cp_comm_s + r.zero_mb_comm_s) {
      r.forward_compute_s = fc, r.backward_compute_s = bc, r.tp_comm_s = tpf + tpb, r.cp_comm_s = cpf + cpb,
      r.zero_mb_comm_s = zf + zb;
    }
    r.p2p_s = l.pp > 1 ? send() : 0;
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
  const double local = busiest_rank_params(in), shard = std::ceil(local / (in.zero.stage >= 1 ? double(dcp) : 1.0));
  double reduce = 0, gather = 0;
  if (in.zero.stage <= 1) reduce += dp_coll(local * ce, false);
  if (in.zero.stage == 1 || in.zero.stage == 2) gather += dp_coll(local * e, true);
  if (in.zero.stage >= 2 && in.zero.overlap_comm) reduce += dp_coll(local * ce, true);
  r.dp_comm_s = reduce + gather;
  r.dp_exposed_s = r.dp_comm_s;
  if (ov.dp_grad_reduce || ov.param_gather_prefetch) {
    const RankCompute c = busiest_rank_compute(l, fcs, bcs, layers);
    const int64_t k = dp_bucket_count(ov, local, dcp, c.layers);
    r.dp_exposed_s = (ov.dp_grad_reduce ? overlapped_exposed(reduce, c.backward, k) : reduce) +
                     (ov.param_gather_prefetch ? overlapped_exposed(gather, c.forward, k) : gather);
  }
  r.optimizer_s = ops_seconds(optimizer_ops(in), hw, p, ak);
  // The global gradient norm (and the fp16 inf/NaN scan): the held gradient, the rank's whole at
  // ZeRO 0-1 and its shard at 2-3, copied to the host and passed over there.
  if (hw.host_pass.per_s > 0) {
    const double held = in.zero.stage >= 2 ? shard : local;
    r.optimizer_s += (p == Precision::fp16 ? 2 : 1) * (hw.host_link.time(held * e) + hw.host_pass.time(held));
  }
  if (in.zero.offload_optimizer) r.offload_s = 2 * hw.host_link.time(shard * e);
  const int world = int(l.world());
  r.scalars_s = 3 * collective_seconds(hw, world, link_of(hw, world), 8.0, false, group_nodes(hw, world, 1));
  r.step_s = r.pipeline_s + r.dp_exposed_s + r.optimizer_s + r.offload_s + r.scalars_s;
  return r;
}

}  // namespace dtb
