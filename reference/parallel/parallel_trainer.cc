#include "reference/parallel/parallel_trainer.h"

#include <cmath>
#include <limits>
#include <map>

#include "kernels/error.h"
#include "reference/training/dp_sync.h"
#include "kernels/slowdown.h"
#include "kernels/timer.h"
#include "reference/training/progress.h"
#include "reference/parallel/pipeline_schedule.h"

namespace dtb {

namespace {

// Messages between pipeline ranks: tag (micro-batch, virtual stage, direction), unique
// among the messages of one step between two ranks, below MPI's guaranteed 32767.
int message_tag(int mb, int vstage, bool backward, int num_vstages) {
  return ((mb * num_vstages + vstage) * 2 + (backward ? 1 : 0)) % 32768;
}

// Interleaving sends both ways around a ring of stages: waiting for each send before the next
// receive can deadlock there (Megatron-LM batches its sends and receives for it).
void check_p2p_mode(const TrainConfig& cfg, const ParallelLayout& L) {
  if (!cfg.overlap_p2p_comm && L.schedule == "interleaved")
    throw InputError("overlap_p2p_comm false (blocking pipeline sends) is not supported with schedule interleaved");
}

// One step's point-to-point messages between pipeline stages, each n elements of T: sends
// (each buffer alive until wait_all), receives into one inbox (valid until the next receive),
// and, where the peer is this rank (a one-stage pipeline of several chunks), the hand-over
// between its chunks by tag. comm_s: the seconds spent sending and receiving; p2p_bytes: the
// bytes sent to other ranks.
template <typename T>
class StageMessages {
 public:
  StageMessages(Ops<T>& ops, Device& device, size_t n, int me, bool overlap, int64_t step, SpanRecorder* spans)
      : ops_(ops), device_(device), n_(n), me_(me), overlap_(overlap), step_(step), spans_(spans),
        inbox_(Tensor::empty(device, {int64_t(n)}, dtype_of<T>(), MemCategory::comm_buffer)) {}

  void send(const T* src, int tag, int peer, Communicator& comm) {
    Tensor buf = Tensor::empty(device_, {int64_t(n_)}, dtype_of<T>(), MemCategory::comm_buffer);
    copy_within(ops_, buf.data<T>(), src, n_);
    if (peer == me_) {
      local_box_[tag] = std::move(buf);
      return;
    }
    ops_.synchronize();
    auto span = span_scope(spans_, "comm.send", step_);
    Stopwatch c;
    auto h = comm.send_async(buf.raw(), n_, dtype_of<T>(), peer, tag);
    p2p_bytes += double(n_) * sizeof(T);
    comm_s += c.elapsed();
    sent_.push_back({std::move(buf), std::move(h)});
    pending_ = !overlap_;
  }

  // Without overlap (the blocking baseline) a send is waited for before the next compute: with
  // the next action's receive posted first when it has one, as Megatron-LM's batched
  // send_forward_recv_backward does (two stages each waiting for its own send before posting
  // the receive the other's send needs would deadlock: 1F1B's steady state is such a pair).
  void flush() {
    if (!pending_) return;
    auto span = span_scope(spans_, "comm.send", step_);
    Stopwatch c;
    sent_.back().handle->wait();
    comm_s += c.elapsed();
    pending_ = false;
  }

  const T* receive(int tag, int peer, Communicator& comm) {
    if (peer == me_) {
      auto it = local_box_.find(tag);
      DTB_CHECK(it != local_box_.end(), "pipeline: a chunk's input was not produced before its use");
      inbox_ = std::move(it->second);
      local_box_.erase(it);
      return inbox_.data<T>();
    }
    std::unique_ptr<CommHandle> h = pending_ ? comm.recv_async(inbox_.raw(), n_, dtype_of<T>(), peer, tag) : nullptr;
    flush();
    auto span = span_scope(spans_, "comm.recv", step_);
    Stopwatch c;
    if (h)
      h->wait();
    else
      comm.recv(inbox_.raw(), n_, dtype_of<T>(), peer, tag);
    comm_s += c.elapsed();
    return inbox_.data<T>();
  }

  // Every send's completion, at the step's end.
  void wait_all() {
    Stopwatch c;
    for (auto& o : sent_) o.handle->wait();
    comm_s += c.elapsed();
  }

  double comm_s = 0, p2p_bytes = 0;

 private:
  struct Outgoing {
    Tensor buf;
    std::unique_ptr<CommHandle> handle;
  };
  Ops<T>& ops_;
  Device& device_;
  const size_t n_;
  const int me_;
  const bool overlap_;
  const int64_t step_;
  SpanRecorder* spans_;
  std::vector<Outgoing> sent_;
  bool pending_ = false;  // the last send is not waited for yet (overlap false)
  std::map<int, Tensor> local_box_;  // peer == me: chunk-to-chunk hand-over on this rank, by tag
  Tensor inbox_;
};

}  // namespace

template <typename T>
double parallel_compute_gradients(ParallelGpt<T>& model, ZeroEngine<T>& engine, const Dataset& data,
                                  const TrainConfig& cfg, int64_t step, ParallelGroups& g, StepTiming* timing,
                                  SpanRecorder* spans, double loss_scale) {
  const ParallelLayout& L = model.layout();
  const int p = L.pp, v = L.virtual_stages, m = cfg.micro_batches, dp = L.dp;
  DTB_CHECK(m > 0 && cfg.global_batch % (dp * m) == 0,
            "parallel_compute_gradients: global batch does not divide over DP ranks and micro-batches");
  const bool recording = spans && spans->enabled();
  check_p2p_mode(cfg, L);
  Ops<T>& ops = model.ops();
  const int me = g.pp.rank(), prev = (me - 1 + p) % p, next = (me + 1) % p;
  const int per_rank = cfg.global_batch / dp, mbs = per_rank / m, Tn = cfg.seq_len;
  // Context parallel: each CP rank trains its Tl = Tn / cp rows of every sequence (its two
  // chunks, CpSplit); the loss is still normalised by every token of the global batch.
  const CpSplit split = L.cp > 1 ? make_cp_split(L.cp, model.coord().cp, Tn) : CpSplit{1, 0, Tn};
  const int Tl = split.local_len();
  // A stage's message: its output rows (sequence parallel: this TP rank's B Tl / tp), C wide.
  const size_t BTC = size_t(mbs) * Tl / (L.sequence_parallel ? size_t(L.tp) : 1) * model.config().C;
  const double global_tokens = double(cfg.global_batch) * Tn;
  const int nv = p * v;
  Stopwatch sw;
  engine.zero_grad();
  const double engine_comm0 = engine.comm_stats().seconds, tp_comm0 = model.comm_stats().seconds;

  std::vector<int32_t> tokens(size_t(mbs) * Tn), targets(size_t(mbs) * Tn);
  auto fill = [&](int mb) {
    const int first = model.coord().dp * per_rank + mb * mbs;
    fill_batch(data, cfg.seed, step, cfg.global_batch, first, mbs, Tn, tokens.data(), targets.data());
    if (L.cp == 1) return;
    // This CP rank's rows of each sequence, in place (row b t of the local layout comes from
    // row b Tn + global_position(t) >= b Tl + t: a forward pass never overwrites a row it reads).
    for (int b = 0; b < mbs; ++b)
      for (int t = 0; t < Tl; ++t) {
        const size_t from = size_t(b) * Tn + size_t(split.global_position(t)), to = size_t(b) * Tl + size_t(t);
        tokens[to] = tokens[from];
        targets[to] = targets[from];
      }
  };
  StageMessages<T> msgs(ops, model.device(), BTC, me, cfg.overlap_p2p_comm, step, spans);
  Communicator& pp_bwd = g.pp_backward ? *g.pp_backward : g.pp;

  double loss_sum = 0;
  for (const PipeAction& a : pipeline_schedule(L.schedule, p, m, v, me)) {
    const int vs = model.virtual_stage(a.chunk);
    const bool first = model.is_first(a.chunk), last = model.is_last(a.chunk);
    if (a.op == PipeOp::forward) {
      const T* x = nullptr;
      if (!first) x = msgs.receive(message_tag(a.micro_batch, vs, false, nv), prev, g.pp);
      msgs.flush();
      if (first || last) fill(a.micro_batch);
      auto span = span_scope(spans, "compute.forward", step);
      double mb_loss = 0;
      const T* out = model.forward(a.chunk, a.micro_batch, tokens.data(), targets.data(), x, mbs, Tl, &mb_loss);
      if (recording) ops.synchronize();
      span.end();
      loss_sum += mb_loss;  // the last chunk's token losses; any chunk's MoE losses
      if (!last) msgs.send(out, message_tag(a.micro_batch, vs + 1, false, nv), next, g.pp);
    } else if (a.op == PipeOp::backward_weight) {  // W: no communication
      msgs.flush();
      auto span = span_scope(spans, "compute.backward_weight", step);
      model.backward_weight(a.chunk, a.micro_batch);
      if (recording) ops.synchronize();
    } else {  // the whole backward, or B
      const T* dout = nullptr;
      if (!last) dout = msgs.receive(message_tag(a.micro_batch, vs, true, nv), next, pp_bwd);
      msgs.flush();
      const bool input = a.op == PipeOp::backward_input;
      auto span = span_scope(spans, input ? "compute.backward_input" : "compute.backward", step);
      const acc_t<T> scale = acc_t<T>(loss_scale / global_tokens);
      const T* dx = input ? model.backward_input(a.chunk, a.micro_batch, dout, scale)
                          : model.backward(a.chunk, a.micro_batch, dout, scale);
      if (recording) ops.synchronize();
      span.end();
      if (!first) msgs.send(dx, message_tag(a.micro_batch, vs - 1, true, nv), prev, pp_bwd);
    }
  }
  msgs.wait_all();
  double comm_s = msgs.comm_s;
  const double p2p_bytes = msgs.p2p_bytes;
  ops.synchronize();
  // Reduce-scatters issued during the backward (ZeRO 2-3), stage-3 gathers and the TP
  // all-reduces are communication inside the compute loop.
  comm_s += engine.comm_stats().seconds - engine_comm0;
  comm_s += model.comm_stats().seconds - tp_comm0;  // TP all-reduces inside forward and backward
  const double total_compute = sw.elapsed() - comm_s;
  Stopwatch red;
  {
    auto span = span_scope(spans, engine.config().stage >= 2 ? "comm.reduce_scatter" : "comm.all_reduce", step);
    engine.finish_gradients();
    // The tied embedding: the first stage's copy holds the input embedding's gradient, the
    // last stage's the LM head's; each adds the other's (a + b on one side, b + a on the
    // other: bitwise equal).
    if (p > 1 && model.tied_embedding() && model.wte_unit() >= 0 && (me == 0 || me == p - 1))
      engine.add_tied_gradient(g.pp, me == 0 ? p - 1 : 0);
    // The loss: the last stage's token losses and every stage's MoE losses, summed over the
    // world (TP rank 0 counts them once).
    loss_sum = all_reduce_host_scalar(g.world, model.device(), model.ops(), model.coord().tp == 0 ? loss_sum : 0.0);
    ops.synchronize();
  }
  comm_s += red.elapsed();
  if (timing) {
    timing->compute_s += total_compute;
    timing->comm_s += comm_s;
    timing->p2p_bytes += p2p_bytes;
  }
  return loss_sum / global_tokens;
}

template <typename T>
StepOutcome parallel_optimizer_step(ZeroEngine<T>& engine, const TrainConfig& cfg, LossScaler* scaler,
                                    ParallelGroups& g) {
  StepOutcome out;
  const bool scaling = scaler && scaler->config().enabled;
  out.loss_scale = scaling ? scaler->scale() : 1.0;
  if (scaling) {
    // Every rank, every group: the count of ranks that saw an inf or NaN (through the
    // backend's memory on NCCL, which reduces device buffers only).
    const double infs = all_reduce_host_scalar(g.world, engine.device(), engine.ops(), engine.local_nonfinite() ? 1.0 : 0.0);
    out.skipped = infs > 0;
    scaler->update(out.skipped);
    if (out.skipped) {
      out.grad_norm = std::numeric_limits<double>::quiet_NaN();  // undefined: an inf or NaN somewhere
      return out;
    }
    engine.scale_grads(acc_t<T>(1.0 / out.loss_scale));  // unscale before the norm (GradScaler.unscale_)
  }
  // The global norm, every step (Megatron-LM reports grad_norm whether or not it clips).
  const double sq = all_reduce_host_scalar(g.world, engine.device(), engine.ops(), engine.owned_grad_sq_norm());
  out.grad_norm = std::sqrt(sq);
  if (cfg.grad_clip > 0) engine.scale_grads(acc_t<T>(clip_coefficient(out.grad_norm, cfg.grad_clip)));
  engine.step();
  return out;
}

template <typename T>
TrainRun parallel_train(ParallelGpt<T>& model, ZeroEngine<T>& engine, const Dataset& data, const TrainConfig& cfg,
                        const DpSync& dp_sync, ParallelGroups& g, SpanRecorder* spans, const TrainLoop& loop) {
  ParallelLayout layout = model.layout();
  layout.micro_batches = cfg.micro_batches;
  validate_layout(layout, model.config(), cfg.global_batch, g.world.size(), cfg.seq_len);
  validate_train_config(cfg, model.config(), layout.dp);
  if (loop.first_step < 0 || loop.first_step > cfg.steps)
    throw InputError("first step " + std::to_string(loop.first_step) + " is outside [0, steps = " +
                     std::to_string(cfg.steps) + "]");
  TrainRun run;
  LossScaler own_scaler(cfg.loss_scaler);
  LossScaler& scaler = loop.scaler ? *loop.scaler : own_scaler;
  double fastest = INFINITY;  // step_slowdown's state (kernels/slowdown.h)
  // Stale gradients or local steps (reference/training/dp_sync.h): their own update; a resume is the
  // caller's bug (the gradients in flight and the outer state are not in a checkpoint: the layout's
  // validator refuses it, reference/layout/layout_validate.h dp_sync_checkpoint_refusal).
  std::unique_ptr<DpSyncStepper<T>> sync;
  if (!dp_sync.synchronous()) {
    DTB_CHECK(loop.first_step == 0,
              "parallel_train: stale gradients or local steps resumed (dp_sync_checkpoint_refusal)");
    sync = std::make_unique<DpSyncStepper<T>>(engine, layout, cfg, dp_sync, g);
  }
  for (int s = int(loop.first_step); s < cfg.steps; ++s) {
    if (loop.before_step) loop.before_step(s);
    StepTiming tm;
    const double cpu0 = loop.step_slowdown != 1.0 ? thread_cpu_seconds() : 0;
    auto window = spans ? spans->step_scope(s) : SpanRecorder::Scope();
    Stopwatch step_sw;
    const double scale = sync ? sync->loss_scale() : scaler.scale();
    run.losses.push_back(parallel_compute_gradients(model, engine, data, cfg, s, g, &tm, spans, scale));
    model.fp8_update(g.dp);  // the delayed recipe's scales for the next step (nothing otherwise)
    Stopwatch opt_sw;
    auto optim = span_scope(spans, "compute.optimizer", s);
    const StepOutcome o = sync ? sync->step(s, &tm) : parallel_optimizer_step(engine, cfg, &scaler, g);
    run.grad_norms.push_back(o.grad_norm);
    if (cfg.loss_scaler.enabled) {
      run.loss_scales.push_back(o.loss_scale);
      run.skipped.push_back(o.skipped ? 1 : 0);
    }
    model.ops().synchronize();
    optim.end();
    tm.compute_s += opt_sw.elapsed();
    if (loop.step_slowdown != 1.0)
      spin_cpu(extra_cpu_seconds(loop.step_slowdown, thread_cpu_seconds() - cpu0, step_sw.elapsed(), fastest));
    tm.step_s = step_sw.elapsed();
    window.end();
    run.timings.push_back(tm);
    if (loop.after_step) loop.after_step(s + 1, scaler, run);
    report_progress(s + 1, cfg.steps);
  }
  return run;
}

#define DTB_INSTANTIATE_PARALLEL_TRAINER(T)                                                                     \
  template double parallel_compute_gradients<T>(ParallelGpt<T>&, ZeroEngine<T>&, const Dataset&, const TrainConfig&, \
                                                int64_t, ParallelGroups&, StepTiming*, SpanRecorder*, double);      \
  template StepOutcome parallel_optimizer_step<T>(ZeroEngine<T>&, const TrainConfig&, LossScaler*, ParallelGroups&); \
  template TrainRun parallel_train<T>(ParallelGpt<T>&, ZeroEngine<T>&, const Dataset&, const TrainConfig&,          \
                                      const DpSync&, ParallelGroups&, SpanRecorder*, const TrainLoop&);
DTB_INSTANTIATE_PARALLEL_TRAINER(float)
DTB_INSTANTIATE_PARALLEL_TRAINER(double)
DTB_INSTANTIATE_PARALLEL_TRAINER(bf16)
DTB_INSTANTIATE_PARALLEL_TRAINER(fp16)
#undef DTB_INSTANTIATE_PARALLEL_TRAINER

}  // namespace dtb
