// The step-time model's prices (reference/analytic/step_time_model.h): an op's seconds on the
// hardware (measured, the GEMM and attention shape model, or the rate formula), the weight
// gradient's share, and a collective's (the link a group crosses, the nodes it spans, the
// hardware's all-reduce fits and NCCL's ring model). step_time_model.cc composes them into a step.
#include <algorithm>
#include <cmath>

#include "kernels/comm/ring.h"
#include "kernels/error.h"
#include "reference/analytic/step_time_model.h"

namespace dtb {
namespace {

// The wgrad GEMM of matmul_backward (N, C, OC): dW = X^T dY, (C x N)(N x OC).
double wgrad_seconds(const GemmShapeModel& g, const StepOp& o, Precision p) {
  return gemm_seconds(g, o.dims[1], o.dims[2], o.dims[0], p);
}

// Seconds of one instance of a GEMM or attention op under the shape model (attention fused or
// materialized as its kernels run). matmul_forward (N, C, OC) is (N x C)(C x OC);
// matmul_backward is its two GEMMs, each at its own shape: dgrad (N x OC)(OC x C) and wgrad
// (C x N)(N x OC). Attention (b, sl, Cl, NHl): NHl heads of hs = Cl / NHl, causal.
double shaped_seconds(const GemmShapeModel& g, const StepOp& o, Precision p, AttentionKernel a) {
  const auto& d = o.dims;
  if (o.kind == StepOp::Kind::gemm) {
    if (o.name == "matmul_forward") return gemm_seconds(g, d[0], d[2], d[1], p);
    return gemm_seconds(g, d[0], d[1], d[2], p) + wgrad_seconds(g, o, p);  // dgrad (N x OC)(OC x C) + wgrad
  }
  if (a != AttentionKernel::fused)
    return materialized_attention_seconds(g, d[0], d[3], d[1], d[1], d[2] / d[3], o.name == "attention_forward", p);
  return fused_attention_seconds(g, d[0], d[3], d[1], d[1], d[2] / d[3], true, o.name == "attention_forward", p);
}

double op_time(const StepOp& o, const StepTimeHardware& hw, Precision p, AttentionKernel a) {
  const auto it = hw.op_seconds.find(o.key(p));
  if (it != hw.op_seconds.end()) return it->second * o.count;
  if (hw.shape && o.kind != StepOp::Kind::memory) {
    const double t = shaped_seconds(*hw.shape, o, p, a);
    if (t >= 0) return t * o.count;
  }
  const AlphaBeta& r = o.kind == StepOp::Kind::gemm        ? hw.gemm[size_t(p)]
                       : o.kind == StepOp::Kind::attention ? hw.attention[size_t(p)]
                                                           : hw.memory;
  if (o.kind != StepOp::Kind::memory && r.per_s <= 0)
    throw InputError("step-time model: the hardware has no " + std::string(o.kind == StepOp::Kind::gemm ? "GEMM" : "attention") +
                     " rate for " + std::string(to_string(p)) + " and no measured time of " + o.key(p));
  return r.time(o.kind == StepOp::Kind::memory ? o.bytes : o.flops) * o.count;
}

}  // namespace

double ops_seconds(const std::vector<StepOp>& ops, const StepTimeHardware& hw, Precision p, AttentionKernel a) {
  double t = 0;
  for (const StepOp& o : ops) t += op_time(o, hw, p, a);
  return t;
}

double weight_grad_seconds(const std::vector<StepOp>& backward_ops, const StepTimeHardware& hw, Precision p) {
  double t = 0;
  for (const StepOp& o : backward_ops)
    if (o.kind == StepOp::Kind::gemm && o.name == "matmul_backward") {
      // With a shape model and no measured time, the wgrad GEMM at its own shape (C x N)(N x OC);
      // else half the op's time (its FLOPs' share).
      const bool measured = hw.op_seconds.count(o.key(p)) > 0;
      t += hw.shape && !measured ? o.count * wgrad_seconds(*hw.shape, o, p)
                                 : 0.5 * op_time(o, hw, p, AttentionKernel::materialized);
    }
  return t;
}

LinkClass link_of(const StepTimeHardware& hw, int span_ranks) {
  return hw.ranks_per_node > 0 && span_ranks > hw.ranks_per_node ? LinkClass::inter_node : LinkClass::intra_node;
}

int group_nodes(const StepTimeHardware& hw, int group, int stride) {
  if (hw.ranks_per_node <= 0 || group <= 1) return 1;
  const int64_t span = int64_t(std::max(1, stride)) * (group - 1) + 1;
  return int(std::min<int64_t>(group, (span + hw.ranks_per_node - 1) / hw.ranks_per_node));
}

double collective_seconds(const StepTimeHardware& hw, int group, LinkClass link, double bytes, bool half, int nodes) {
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
  if (!half || hw.ring_protocols.empty()) return best->bus.time(busbytes);
  // NCCL's ring: g - 1 steps, n - 1 of them between nodes; the fastest protocol (tuning.cc).
  const int n = std::clamp(nodes, 1, group);
  double t = HUGE_VAL;
  for (const RingProtocol& r : hw.ring_protocols) {
    const bool spans = n > 1;
    const double intra = spans ? r.intra_step_multi_node_s : r.intra_step_s;
    const double fraction = spans ? r.busbw_fraction_multi_node : r.busbw_fraction;
    const double lat = r.base_s + double(group - n) * intra + double(n - 1) * r.inter_step_s;
    t = std::min(t, lat + (best->bus.per_s > 0 ? busbytes / (best->bus.per_s * fraction) : 0.0));
  }
  return t;
}

}  // namespace dtb
