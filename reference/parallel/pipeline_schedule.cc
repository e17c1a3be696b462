// Pipeline schedules (GPipe, 1F1B, interleaved 1F1B, ZB-H1) and their zero-communication
// discrete-event simulation. See pipeline_schedule.h.
#include "reference/parallel/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/error.h"

namespace dtb {

void validate_pipeline(const std::string& schedule, int p, int m, int v) {
  const std::string at = " (schedule '" + schedule + "', p " + std::to_string(p) + ", m " + std::to_string(m) +
                         ", v " + std::to_string(v) + ")";
  if (schedule != "gpipe" && schedule != "1f1b" && schedule != "interleaved" && schedule != "zb-h1")
    throw InputError("pipeline schedule '" + schedule + "' is not one of gpipe, 1f1b, interleaved, zb-h1");
  if (p < 1) throw InputError("pipeline stages p must be >= 1" + at);
  if (m < 1) throw InputError("pipeline micro_batches m must be >= 1" + at);
  if (schedule == "interleaved") {
    if (v < 2) throw InputError("interleaved pipeline needs virtual_stages v >= 2" + at);
    if (m % p != 0) throw InputError("interleaved pipeline needs micro_batches a multiple of p" + at);
  } else if (v != 1) {
    throw InputError("virtual_stages must be 1 outside the interleaved schedule" + at);
  }
}

std::vector<PipeAction> pipeline_schedule(const std::string& schedule, int p, int m, int v, int stage) {
  validate_pipeline(schedule, p, m, v);
  if (stage < 0 || stage >= p)
    throw InputError("pipeline stage " + std::to_string(stage) + " outside [0, " + std::to_string(p) + ")");
  std::vector<PipeAction> out;
  out.reserve(size_t(3) * m * v);
  auto F = [&](int mb, int c) { out.push_back({PipeOp::forward, mb, c}); };
  auto B = [&](int mb, int c) { out.push_back({PipeOp::backward, mb, c}); };
  if (schedule == "zb-h1") {
    const int warmup = std::min(p - stage - 1, m), steady = m - warmup;
    int next_w = 0;  // the oldest micro-batch whose W is pending
    auto Bi = [&](int mb) { out.push_back({PipeOp::backward_input, mb, 0}); };
    auto W = [&]() { out.push_back({PipeOp::backward_weight, next_w++, 0}); };
    for (int i = 0; i < warmup; ++i) F(i, 0);
    for (int i = 0; i < steady; ++i) {
      F(warmup + i, 0), Bi(i);
      if (i >= stage) W();  // the first `stage` W's wait for the end
    }
    for (int i = steady; i < m; ++i) Bi(i), W();
    while (next_w < m) W();
    return out;
  }
  if (schedule == "gpipe") {
    for (int i = 0; i < m; ++i) F(i, 0);
    for (int i = 0; i < m; ++i) B(i, 0);
    return out;
  }
  if (schedule == "1f1b") {
    const int warmup = std::min(p - stage - 1, m), steady = m - warmup;
    for (int i = 0; i < warmup; ++i) F(i, 0);
    for (int i = 0; i < steady; ++i) F(warmup + i, 0), B(i, 0);
    for (int i = steady; i < m; ++i) B(i, 0);
    return out;
  }
  // Interleaved: Megatron's get_model_chunk_id / get_microbatch_id_in_model_chunk.
  const int total = m * v, group = p * v;
  auto mb_of = [&](int k) { return (k / group) * p + k % p; };
  auto fwd_chunk = [&](int k) { return (k % group) / p; };
  const int warmup = std::min(2 * (p - stage - 1) + (v - 1) * p, total), steady = total - warmup;
  for (int k = 0; k < warmup; ++k) F(mb_of(k), fwd_chunk(k));
  for (int k = 0; k < steady; ++k) {
    F(mb_of(warmup + k), fwd_chunk(warmup + k));
    B(mb_of(k), v - 1 - fwd_chunk(k));
  }
  for (int k = steady; k < total; ++k) B(mb_of(k), v - 1 - fwd_chunk(k));
  return out;
}

double pipeline_bubble_theory(const std::string& schedule, int p, int m, int v) {
  if (schedule == "zb-h1")  // below m = p no steady phase: the schedule's own unit-time simulation
    return m >= p ? zb_h1_bubble_theory(p, m, 1, 1, 1) : simulate_pipeline("zb-h1", p, m, 1, 1.0, 2.0, 1.0).bubble;
  const double vm = schedule == "interleaved" ? double(v) * m : double(m);
  return (p - 1.0) / (vm + p - 1.0);
}

double zb_h1_bubble_theory(int p, int m, double t_forward, double t_input, double t_weight) {
  const double idle = (p - 1.0) * (t_forward + t_input - t_weight);
  return idle / (m * (t_forward + t_input + t_weight) + idle);
}

PipelineSimulation simulate_pipeline(const std::string& schedule, int p, int m, int v, double t_forward,
                                     double t_backward, double t_weight) {
  validate_pipeline(schedule, p, m, v);
  if (!(std::isfinite(t_forward) && t_forward > 0 && std::isfinite(t_backward) && t_backward > 0))
    throw InputError("simulate_pipeline: t_forward and t_backward must be finite and > 0");
  if (!(std::isfinite(t_weight) && t_weight >= 0 && t_weight < t_backward))
    throw InputError("simulate_pipeline: t_weight must be in [0, t_backward)");
  return simulate_pipeline(schedule, p, m, v,
                           std::vector<StageCost>(size_t(p) * v, StageCost{t_forward / v, t_backward / v, t_weight / v}));
}

PipelineSimulation simulate_pipeline(const std::string& schedule, int p, int m, int v,
                                     const std::vector<StageCost>& costs) {
  validate_pipeline(schedule, p, m, v);
  const int V = p * v;  // virtual stages
  if (int64_t(costs.size()) != int64_t(V))
    throw InputError("simulate_pipeline: " + std::to_string(costs.size()) + " stage costs for " + std::to_string(V) +
                     " virtual stages");
  for (const StageCost& c : costs)
    if (!(std::isfinite(c.forward) && c.forward > 0 && std::isfinite(c.backward) && c.backward > 0 &&
          std::isfinite(c.weight) && c.weight >= 0 && c.weight < c.backward))
      throw InputError("simulate_pipeline: a stage's forward and backward must be finite and > 0, its weight in "
                       "[0, backward)");
  std::vector<std::vector<PipeAction>> lists(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) lists[size_t(s)] = pipeline_schedule(schedule, p, m, v, s);
  // Completion times per (mb, virtual stage); < 0: not done yet.
  std::vector<double> fdone(size_t(m) * V, -1), bdone(size_t(m) * V, -1);
  auto at = [&](std::vector<double>& d, int mb, int vs) -> double& { return d[size_t(mb) * V + vs]; };
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free_at(size_t(p), 0);
  PipelineSimulation r;
  r.busy.assign(size_t(p), 0);
  r.peak_in_flight_chunks.assign(size_t(p), 0);
  std::vector<int> in_flight(size_t(p), 0);
  size_t remaining = 0;
  for (const auto& l : lists) remaining += l.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      auto& list = lists[size_t(s)];
      while (next[size_t(s)] < list.size()) {
        const PipeAction a = list[next[size_t(s)]];
        const int vs = a.chunk * p + s;
        double ready = free_at[size_t(s)];
        if (a.op == PipeOp::forward) {
          if (vs > 0) {
            const double d = at(fdone, a.micro_batch, vs - 1);
            if (d < 0) break;
            ready = std::max(ready, d);
          }
        } else if (a.op == PipeOp::backward_weight) {
          const double own = at(bdone, a.micro_batch, vs);  // its B
          if (own < 0) break;
          ready = std::max(ready, own);
        } else {
          const double own = at(fdone, a.micro_batch, vs);
          if (own < 0) break;
          ready = std::max(ready, own);
          if (vs < V - 1) {
            const double d = at(bdone, a.micro_batch, vs + 1);
            if (d < 0) break;
            ready = std::max(ready, d);
          }
        }
        const StageCost& c = costs[size_t(vs)];
        const double cost = a.op == PipeOp::forward           ? c.forward
                            : a.op == PipeOp::backward_input  ? c.backward - c.weight
                            : a.op == PipeOp::backward_weight ? c.weight
                                                              : c.backward;
        free_at[size_t(s)] = ready + cost;
        r.busy[size_t(s)] += cost;
        if (a.op != PipeOp::backward_weight)
          at(a.op == PipeOp::forward ? fdone : bdone, a.micro_batch, vs) = ready + cost;
        // A micro-batch's activations are held from its forward to its whole backward or its W.
        in_flight[size_t(s)] += a.op == PipeOp::forward ? 1 : a.op == PipeOp::backward_input ? 0 : -1;
        r.peak_in_flight_chunks[size_t(s)] = std::max(r.peak_in_flight_chunks[size_t(s)], in_flight[size_t(s)]);
        ++next[size_t(s)], --remaining, progressed = true;
      }
    }
    if (!progressed) throw std::logic_error("simulate_pipeline: schedule '" + schedule + "' deadlocks");
  }
  r.makespan = *std::max_element(free_at.begin(), free_at.end());
  double idle_sum = 0;
  for (int s = 0; s < p; ++s) {
    const double idle = r.makespan - r.busy[size_t(s)];
    r.idle.push_back(idle);
    r.stage_bubble.push_back(idle / r.makespan);
    r.peak_in_flight.push_back(double(r.peak_in_flight_chunks[size_t(s)]) / v);
    idle_sum += idle;
  }
  r.bubble = idle_sum / (p * r.makespan);
  return r;
}

}  // namespace dtb
