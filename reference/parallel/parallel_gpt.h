// The reference GPT sharded over a tensor-parallel group and split into pipeline stages:
// this rank's share of the model of reference/model/gpt.h under a ParallelLayout. The math is
// gpt.cc's, op for op; what changes is which rows and columns each rank holds and where
// the TP collectives go (Megatron-LM, Shoeybi et al. 2019, Sec. 3 and Fig. 3):
//
//   attention: QKV column-parallel (each TP rank NH/tp whole heads: its slice of the q, k
//              and v row blocks of qkvw), output projection row-parallel (bias added once,
//              after the all-reduce);
//   MLP:       fc column-parallel, fcproj row-parallel;
//              (the four are reference/parallel/tensor_parallel.h's ColumnParallelLinear and
//              RowParallelLinear on the ParamStore's parameters)
//   embedding: vocabulary-parallel (rank r holds wte rows [r V/tp, (r+1) V/tp)), summed
//              over TP; wpe, every LayerNorm and the row-parallel biases replicated;
//   LM head:   the tied wte shard, logits (N, V/tp) never gathered: vocabulary-parallel
//              cross-entropy (max and sum-exp all-reduced, Megatron's cross_entropy.py;
//              VocabParallelCrossEntropy of reference/parallel/tensor_parallel.h).
//
// Sequence parallelism (layout.sequence_parallel; Korthikanti et al. 2022 Sec. 4.2.2 and
// Fig. 5): the embedding's output is reduce-scattered, not all-reduced; each TP rank holds
// its block of BT / tp tokens of the residual stream, the LayerNorms and the residual adds;
// the column-parallel QKV and fc all-gather their input (and gather it again in backward,
// where their input gradient is reduce-scattered); the row-parallel projections
// reduce-scatter their output; the final LayerNorm's output is gathered for the head. A
// LayerNorm's weight and bias gradients are then partial on each TP rank and are summed over
// TP (sum_over_tensor_parallel) in each backward before they are accumulated; the
// row-parallel biases' gradients come whole from the gathered output gradient. Stages
// exchange their BT / tp rows.
//
// Pipeline: the pp * v virtual stages hold L / (pp v) consecutive layers each (or
// layout.pipeline_layers' counts: stage_layers, reference/layout/process_grid.h); virtual
// stage s = chunk * pp + pp_rank (Megatron's interleaved assignment, reference/
// pipeline_schedule.h); the first holds the embedding, the last the final LayerNorm and
// the LM head, so with pp > 1 the tied wte lives on two ranks (pp rank 0 and pp - 1) whose
// gradients the trainer sums after the step's last backward (reference/parallel/parallel_trainer.h).
//
// Context parallelism (layout.cp > 1; docs/context-parallel.md): a micro-batch's B sequences
// arrive as this CP rank's Tl = Tn / cp rows of each (its two chunks, reference/parallel/
// context_parallel.h CpSplit), and every op works on those rows: the position embedding at each
// row's global position, attention through context_parallel_attention_forward/backward over the
// CP group (whose kept "attention matrix" is then the (B, Tl, NH) log-sum-exp), the rest row-wise
// as before. Stages exchange the local rows.
//
// The Llama family (is_llama(cfg); reference/model/llama_block.cc, docs/models.md) runs the same
// structure with its ops: RMSNorm in place of LayerNorm (its rstd kept, no mean, no bias), the
// rotary embeddings on the QKV output (each row at its position), grouped-query attention of this
// rank's NHl query heads on its KVl key/value heads, SwiGLU in place of GELU, no biases, no wpe,
// and an untied LM head lmheadw (V, C) on the last stage, vocabulary-parallel as the tied wte is
// (unit "lmhead"; the first stage's wte is then the embedding only). TP: qkvw's q rows by whole
// heads as GPT-2's; its k and v rows by KV heads when tp divides KV (KVl = KV / tp), else each
// rank holds the one KV head its query heads read (KVl = 1, rank r head r KV / tp; tp / KV ranks
// share it: kv_share) and the gradients of a shared head's rows are summed over the ranks that
// share it, each micro-batch (sum_shared_kv_grad); a tp that neither divides nor is divided by KV
// is refused. Under context parallelism the rotary embeddings rotate each local chunk at its true
// positions, and the ring carries the KV heads only (context_parallel.h). fcw's gate rows and up rows are each column-parallel: rank r holds rows
// [r Fl, (r+1) Fl) of both (Megatron's fused linear_fc1 sharded per projection), so its swiglu
// pairs each gate with its up; fcprojw (down) is row-parallel over F.
//
// With tp = 1 every op is gpt.cc's with the same arguments, so a chunk computes bitwise
// what Gpt computes for its layers. T is the storage type: float, double (the oracle), or
// bf16 / fp16 for mixed precision, where parameters, activations and gradients are T and
// the LayerNorm statistics, token losses and the cross-entropy's max and sum-exp are
// acc_t<T> = float (kernels/ops.h), as are the TP all-reduces of that max and sum. Shape legend as gpt.h; Cl = C / tp, NHl = NH / tp,
// Vl = V / tp, BT = B * Tn tokens of one micro-batch.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.h"
#include "kernels/error.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"
#include "reference/model/gpt.h"
#include "reference/analytic/memory_model.h"
#include "reference/layout/process_grid.h"
#include "reference/parallel/context_parallel.h"
#include "reference/parallel/tensor_parallel.h"
#include "reference/training/fp8_linear.h"

namespace dtb {

/// One parameter tensor this rank holds: a slice of the full tensor `name` (gpt.h's
/// layout) stored at [offset, offset + numel) of the rank's flat buffer, as contiguous
/// runs of the full flat buffer. `owner` marks the one copy gathers read: a tensor
/// replicated over TP (LayerNorm, wpe, row-parallel biases) is owned by TP rank 0, any
/// tensor by DP rank 0, the tied wte by the first pipeline stage.
struct LocalTensor {
  std::string name;  // full tensor name, e.g. "qkvw"
  int layer = -1;    // global layer, -1 outside the blocks
  size_t offset = 0, numel = 0;
  struct Run {
    size_t global, local, n;  // full-buffer offset, offset in this tensor, length
  };
  std::vector<Run> runs;
  bool owner = false;
  /// The copy that counts once per DP replica: owner without the DP-rank-0 condition (for
  /// ZeRO's sharded gradients, whose DP ranks hold disjoint shards).
  bool primary = false;
};

/// A contiguous range [begin, begin + n) of a rank's local flat parameter layout that is
/// used as a whole: the wte shard, wpe, one transformer layer (its 12 tensors), the final
/// LayerNorm. ZeRO shards, gathers and reduces unit by unit (reference/zero/zero.h).
struct ParamUnit {
  std::string name;  // "wte", "wpe", "layer.<l>", "experts.<l>", "lnf"
  size_t begin = 0, n = 0;
  /// An MoE layer's experts held here (E / ep of them): reduced and sharded over the
  /// expert-data-parallel group, not the DP group.
  bool expert = false;
};

/// Where a ParallelGpt's parameters and gradients live, unit by unit: the model asks for a
/// unit's parameters before it uses them and its gradients before it accumulates into them,
/// and says when it is done. reference/zero/zero.h implements it for ZeRO stages 0-3.
template <typename T>
class ParamStore {
 public:
  virtual ~ParamStore() = default;
  /// The unit's n parameters in the backend's memory, valid until release_param(unit).
  virtual T* param(int unit) = 0;
  virtual void release_param(int unit) { (void)unit; }
  /// The unit's n gradients (backward accumulates into them), valid until grad_done(unit).
  virtual T* grad(int unit) = 0;
  /// This micro-batch's backward is done with the unit's gradients.
  virtual void grad_done(int unit) { (void)unit; }
};

/// Compute seconds per model part of a ParallelGpt while attached (set_part_times): the
/// input of the stage balancer (reference/analytic/stage_balance.h), which needs what a layer, the
/// embedding and the LM head cost, not only a stage (the article's [docs/claims.md#the-article] §5.3: per-stage compute
/// monitored, layers moved between stages). seconds[pass][part], summed over the calls:
/// pass 0 forward, 1 the whole backward or a zero-bubble B, 2 a zero-bubble W; part 0 the
/// embedding (wte and wpe lookup and its backward), 1 + l global layer l, L + 1 the head (final
/// LayerNorm, logits, cross-entropy). A rank times only the parts it holds (others stay 0).
/// The device is synchronised at each part's ends (wall clock, kernels/timer.h).
struct PartTimes {
  explicit PartTimes(int L) : L(L) {
    for (auto& s : seconds) s.assign(size_t(L) + 2, 0.0);
  }
  int L;
  std::vector<double> seconds[3];
  static constexpr int kForward = 0, kBackward = 1, kWeight = 2;
};

template <typename T>
class ParallelGpt {
 public:
  /// This rank's share of `cfg` under `layout` (validate_layout first), `rank` its world
  /// rank (its grid coordinates follow, reference/layout/process_grid.h), `tp` its TP group
  /// (size layout.tp; must outlive the model). The model holds the layout of its parameters
  /// (tensors(), units()); their storage is a ParamStore attached before the first forward
  /// (reference/zero/zero.h). Activations per (chunk, micro-batch) in flight (category
  /// activation), backward scratch (workspace) on `device`. `ops` as Gpt. An MoE model's
  /// layers hold their router whole and E / layout.ep experts (unit "experts.<l>"), and
  /// dispatch over `ep`, the expert-parallel group (reference/model/moe.h; size layout.ep, needed
  /// when it is above 1). Errors: InputError when the layout does not divide the model
  /// (validate_layout). An MoE model's layers run in every type (in bf16 and fp16 the router in
  /// double, the experts on the half ops: moe.h). With tp > 1 an MoE layer is replicated over the TP group: its input (ln2's
  /// output) is, so every TP rank routes the same tokens, dispatches them within its own
  /// expert-parallel group (ranks of its TP coordinate) and computes the same output and
  /// gradients; router and experts count as TP-replicated (owned by TP rank 0).
  ///
  /// Context parallelism (layout.cp > 1) needs `cp`, the CP group (size layout.cp, rank this
  /// rank's CP coordinate); forward's Tn is then the local rows per sequence, Tl = seq_len / cp.
  ParallelGpt(const GptConfig& cfg, const ParallelLayout& layout, int rank, Device& device, Communicator& tp,
              Ops<T>* ops = nullptr, Communicator* ep = nullptr, Communicator* cp = nullptr);
  ~ParallelGpt();
  ParallelGpt(const ParallelGpt&) = delete;
  ParallelGpt& operator=(const ParallelGpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  const ParallelLayout& layout() const { return layout_; }
  const GridCoord& coord() const { return coord_; }
  Ops<T>& ops() const { return *ops_; }
  Device& device() const { return device_; }
  /// Model chunks on this rank (layout.virtual_stages) and their virtual stages.
  int chunks() const { return layout_.virtual_stages; }
  /// Layers of `chunk` (stage_layers of its virtual stage: layout.pipeline_layers or L / (pp v)).
  int chunk_layers(int chunk) const { return int(layers_[size_t(chunk)].size()); }
  int virtual_stage(int chunk) const { return chunk * layout_.pp + coord_.pp; }
  bool is_first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int chunk) const { return virtual_stage(chunk) == layout_.pp * layout_.virtual_stages - 1; }

  /// Elements of this rank's local flat layout (the sum of its units).
  size_t num_params() const { return num_params_; }
  const std::vector<LocalTensor>& tensors() const { return tensors_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  /// The unit holding the wte shard (Vl, C), or -1 when this rank holds neither the first
  /// nor the last stage (Llama: not the first stage; its head is lmhead).
  int wte_unit() const { return wte_unit_; }
  /// Whether the LM head is the input embedding (GPT-2's tied wte, whose two pipeline copies'
  /// gradients the trainer sums), not a tensor of its own (Llama's lmheadw).
  bool tied_embedding() const { return !is_llama(cfg_); }
  /// Attaches the storage (not owned; must outlive the model's use).
  void attach(ParamStore<T>* store) { store_ = store; }
  /// Activation checkpointing (Korthikanti et al. 2022): none keeps every activation;
  /// selective drops each layer's attention matrix and recomputes it from the kept qkv in
  /// backward; full keeps only each layer's input and recomputes the layer in backward.
  /// The recomputation runs the same ops on the same values, so losses and gradients are
  /// bitwise those of none. An MoE layer under full recompute keeps none of its activations
  /// either: backward routes, dispatches and combines its tokens again (the expert-parallel
  /// group's ranks all recompute the same micro-batch in the same slot of their schedule, as
  /// Megatron-LM's full recompute of an MoE layer does), without counting the routing or the
  /// losses twice. Set before the first forward.
  /// Full recompute on a zero-bubble layout is a caller's bug (DTB_CHECK): the layout's
  /// validator refuses it first (reference/layout/layout_validate.h validate_schedule_recompute).
  void set_recompute(Recompute r) {
    DTB_CHECK(!(r == Recompute::full && zero_bubble()),
              "ParallelGpt: full recompute with zb-h1 (validate_schedule_recompute)");
    recompute_ = r;
  }
  Recompute recompute() const { return recompute_; }

  /// FP8 linears (Transformer Engine's recipes: reference/training/fp8_linear.h): the four linears
  /// of every transformer layer this rank holds (qkv, attention out, fc, fc out) run their forward
  /// and both backward GEMMs on FP8 operands under `s`, each with its own Fp8LinearState (history
  /// `s.delayed.amax_history_len`); the embedding, the LM head, the norms, the attention core and
  /// the residual stream stay in T, as TE keeps them (its head and non-Linear ops in bf16). Full
  /// and selective recompute run the same FP8 GEMMs again on the same values and scales (the
  /// delayed recipe records the same amaxes twice: a max, so nothing changes). `s` must outlive
  /// the model; set before the first forward. Errors: InputError "fp8: ... MoE ..." for an MoE
  /// model (its experts are not FP8 linears yet).
  void set_fp8(const Fp8Settings& s);
  /// The FP8 settings, or null (the linears' plain GEMMs in T).
  const Fp8Settings* fp8() const { return fp8_; }
  /// The FP8 states of the linears this rank holds: 4 per held layer (qkv, attproj, fc, fcproj),
  /// the layers in global order; empty without FP8. What a checkpoint of the delayed recipe keeps.
  std::vector<Fp8LinearState*> fp8_states();
  /// The global layer index of each held layer, in fp8_states()' order (one per 4 states); empty
  /// without FP8.
  std::vector<int> fp8_layers() const;
  /// The delayed recipe's state of the held layers, as a checkpoint saves it (fp8_checkpoint);
  /// history_len 0 without FP8 or under another recipe.
  Fp8Checkpoint fp8_checkpoint();
  /// Counts every held FP8 linear's quantizations into `census` (null: stop counting): Fp8Census.
  /// `census` must outlive the counting (set null before it goes).
  void set_fp8_census(Fp8Census* census);
  /// Sets the held layers' states from `c` (load_checkpoint's, asked for fp8_checkpoint()'s
  /// layers): fp8_restore. Nothing when c.history_len is 0; aborts (DTB_CHECK) when c's layers
  /// are not the held ones.
  void restore_fp8(const Fp8Checkpoint& c);
  /// The step's end for the delayed recipe (fp8_update over fp8_states()): the staged amaxes
  /// reduced by max over the TP group and then `dp` (the gradient group: DP, with context
  /// parallelism the data-and-context group), so that every rank holding a shard or a replica of
  /// a linear takes the same scales: Transformer Engine's amax reduction group (by default the
  /// data- and tensor-parallel ranks, DelayedScaling's reduce_amax). Call once per optimizer
  /// step, after its last backward. Nothing for the other recipes or without FP8. Collective
  /// over the TP group and `dp`.
  void fp8_update(Communicator& dp);

  /// This rank's local parameters (num_params() values, local flat order) as gpt_init_params
  /// sets them: each held element its value at the global index (the full model is built on
  /// the host once: host memory of gpt_num_params(cfg) values).
  std::vector<T> initial_params(uint64_t seed) const;

  /// Forward of micro-batch `mb` (B sequences of Tn tokens; under context parallelism this CP
  /// rank's Tn = Tl rows of each, its CpSplit's chunks of sequences of Tl * cp) through `chunk`.
  /// The first chunk embeds `tokens` (host, B*Tn ids in [0, V)); another takes its input
  /// activation `x` (BT, C) in the backend's memory (copied; the caller may reuse it).
  /// The last chunk needs `targets` (host) and returns null, setting *loss_sum to the sum
  /// of its BT token losses; another returns its output (BT, C), valid until the next
  /// forward or backward on this rank (under full recompute it is in scratch). Sequence
  /// parallel: x and the output are this TP rank's block of the rows, (BT / tp, C). An MoE
  /// model's chunk adds BT (aux + z) of each of its MoE layers to *loss_sum (every chunk sets
  /// it; 0 for a dense chunk before the last), as Gpt::forward. Errors: ids out of range or a
  /// micro-batch already in flight in this chunk abort.
  const T* forward(int chunk, int mb, const int32_t* tokens, const int32_t* targets, const T* x, int B, int Tn,
                   double* loss_sum);
  /// Backward of micro-batch `mb` through `chunk`: the last chunk starts from its loss
  /// scaled by `loss_scale` (dout ignored); another takes the gradient of its output
  /// `dout` (BT, C). Accumulates into grads(). Returns the gradient of the chunk's input
  /// (BT, C), valid until the next backward, or null for the first chunk. Sequence parallel:
  /// dout and the result are this TP rank's block, (BT / tp, C). Frees the
  /// micro-batch's activations. Errors: no forward of (chunk, mb) aborts.
  const T* backward(int chunk, int mb, const T* dout, acc_t<T> loss_scale);
  /// A zero-bubble schedule's (layout.schedule "zb-h1") split of backward (Qi et al. 2024,
  /// Sec. 2): backward_input is the pass B, every input gradient of the chunk (arguments, result
  /// and errors as backward) and no weight gradient; it keeps the micro-batch's activations and
  /// the output gradients of each op with weights. backward_weight is the pass W: the chunk's
  /// weight gradients from what B kept, accumulated into grads() in the order backward
  /// accumulates them, then the micro-batch's activations freed. B then W give bitwise
  /// backward's gradients. Errors: backward on a zero-bubble layout, backward_input on another,
  /// W without its B abort.
  const T* backward_input(int chunk, int mb, const T* dout, acc_t<T> loss_scale);
  void backward_weight(int chunk, int mb);
  /// Whether the layout's schedule splits the backward into B and W.
  bool zero_bubble() const { return layout_.schedule == "zb-h1"; }

  /// The full model's flat buffer (gpt.h layout) from every rank's owned elements of
  /// `local` (each rank's num_params() values on the host, e.g. its full parameters or
  /// gradients from the store), on every rank of `world`, in double.
  /// Collective over `world` (all ranks of the layout).
  std::vector<double> gather(const std::vector<T>& local, Communicator& world) const;
  /// Over every element held by more than one rank (TP-replicated tensors, DP replicas,
  /// the tied wte's two copies), the largest |difference| between copies of `local`: 0 when
  /// every copy is bitwise equal. Collective over `world`.
  double replica_max_diff(const std::vector<T>& local, Communicator& world) const;
  /// TP communication of this model since the last reset.
  CommStats& comm_stats() { return stats_; }
  /// Attaches per-part timing (null detaches); `t` (of this model's L) must outlive its use.
  void set_part_times(PartTimes* t) {
    DTB_CHECK(!t || t->L == cfg_.L, "ParallelGpt::set_part_times: PartTimes of another model's L");
    part_times_ = t;
  }
  /// An MoE model's routing since the last reset_moe_stats(): for MoE layer i (of
  /// num_moe_layers; zeros for the layers of other stages) at [i (E + 1), (i + 1) (E + 1)) the
  /// assignments to each expert before dropping, then the dropped ones, summed over this rank's
  /// forwards (on TP rank 0 only: the other TP ranks repeat its tokens). Empty when dense.
  const std::vector<double>& moe_counts() const { return moe_counts_; }
  /// An MoE model's dispatch and combine exchanges (forward and backward, and under full
  /// recompute backward's second forward too) since the last reset.
  const MoeCommStats& moe_comm() const { return moe_comm_; }
  void reset_moe_stats();

 private:
  struct ActSet;
  // Where one layer's activations are, for its forward and backward (the kept stacks, or
  // the recompute scratch).
  struct LayerActs {
    const T* x = nullptr;
    T *ln1, *qkv, *atty, *att, *attproj, *res2, *ln2, *fch, *fchg, *fcproj, *res3;
    acc_t<T> *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
  };
  struct LayerParams {
    int unit = 0;
    int layer = 0;  // the global layer index
    // Offsets within the unit of ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw
    // fcprojb; kAbsent for a tensor the family lacks (Llama's biases).
    static constexpr size_t kAbsent = size_t(-1);
    size_t o[12];
    // An MoE layer: routerw's offset in `unit` (in place of the fc tensors), and the unit of
    // its held experts with the offsets of expfcw expfcb expprojw expprojb in it (kAbsent:
    // SwiGLU experts have no biases).
    bool moe = false;
    int moe_index = -1;  // among the MoE layers
    size_t router = 0;
    int expert_unit = -1;
    size_t ex[4] = {};
  };
  ParamStore<T>& store() const;
  int open_unit(const std::string& name);  // a unit starting at num_params_
  void close_unit();                        // ends the last unit at num_params_
  void add_layer(int chunk, int k, const std::map<std::string, size_t>& full);
  LayerActs layer_acts(ActSet& s, int k, bool last_chunk);
  // ma: an MoE layer's activations (null for a dense layer); recomputing: backward's second
  // forward under full recompute (the MoE routing and losses are not counted again).
  void layer_forward(const LayerActs& a, const T* up, const LayerParams& lp, int B, int Tn, MoeActivations<T>* ma,
                     bool recomputing = false);
  // reference/parallel/parallel_moe.cc: an MoE layer's tensors, and its FFN forward (a.ln2 -> a.fcproj,
  // adding its losses to moe_loss_) or backward (dres -> dln += its input gradient).
  void add_moe_tensors(LayerParams& lp, int l, const std::map<std::string, size_t>& full);
  // The MoeWeights of an MoE layer: its router at lp.router in `layer` (the layer's unit, params
  // or grads), its held experts at lp.ex in `ex` (the experts' unit); absent biases null.
  static MoeWeights<T> moe_weights(T* layer, T* ex, const LayerParams& lp);
  void moe_ffn_forward(MoeActivations<T>& ma, const LayerParams& lp, const LayerActs& a, const T* up, int BT, int Tn,
                       bool recomputing);
  void moe_ffn_backward(const MoeActivations<T>& ma, const LayerParams& lp, const LayerActs& a, const T* up, T* ug,
                        int BT, const T* dres, T* dln, double loss_scale);
  ActSet& acquire(int chunk, int mb, int B, int Tn);
  void add_tensor(const std::string& name, int layer, std::vector<LocalTensor::Run> runs, bool tp_replicated,
                  bool expert = false);
  void ensure_scratch(int B, int Tn);

  GptConfig cfg_;
  ParallelLayout layout_;
  GridCoord coord_;
  Device& device_;
  Communicator& tp_;
  Communicator* ep_ = nullptr;
  Communicator* cp_ = nullptr;  // the CP group (layout.cp > 1), else null
  // Context parallelism: the split of a sequence of Tl * cp tokens with Tl local rows.
  CpSplit cp_split(int Tl) const { return {layout_.cp, coord_.cp, Tl * layout_.cp}; }
  // Elements (of T) of one layer's attention activation kept for backward: the (B, NH, Tn, Tn)
  // probabilities, or under context parallelism the (B, Tl, NH) log-sum-exp, kept in acc_t<T>
  // (fp32 under mixed precision, as the statistics) in kLseT elements of T each.
  static constexpr size_t kLseT = sizeof(acc_t<T>) / sizeof(T);
  size_t att_elems(int B, int Tn) const {
    return cp_ ? size_t(B) * Tn * NHl_ * kLseT : size_t(B) * NHl_ * Tn * Tn;
  }
  // Causal self-attention of qkv (B, Tn, 3 Cl) into out (B, Tn, Cl): ops.attention_forward with
  // its probabilities in att, or under context parallelism the CP core with its log-sum-exp in att.
  void attention_forward(T* out, T* att, const T* qkv, int B, int Tn);
  void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* out, const T* att, int B, int Tn);
  // The first chunk's position embedding: wpe's rows at the global positions of this CP rank's
  // Tn rows (under context parallelism copied into `local`, (Tn, C); else wpe itself).
  const T* local_wpe(const T* wpe, T* local, int Tn);
  // The embedding's backward into dwte (this TP rank's shard, from vocabulary id v0) and dwpe
  // (every row of wpe; under context parallelism the rows at this rank's global positions).
  void embedding_backward(T* dwte, T* dwpe, const T* demb, const int32_t* tok, int B, int Tn, int v0);
  double moe_loss_ = 0;  // the MoE layers' BT (aux + z) of the forward running
  std::vector<double> moe_counts_;  // moe_counts()
  MoeCommStats moe_comm_;
  Ops<T>* ops_ = nullptr;
  std::unique_ptr<Ops<T>> owned_ops_;
  // Every block's TP linears (C -> 3C, C -> C, C -> 4C, 4C -> C), charged to stats_; the
  // parameters are each layer's, from the store, passed per call.
  std::unique_ptr<ColumnParallelLinear<T>> qkv_, fc_;
  std::unique_ptr<RowParallelLinear<T>> attproj_, fcproj_;
  std::unique_ptr<VocabParallelCrossEntropy<T>> head_ce_;  // the LM head's loss
  int Cl_ = 0, NHl_ = 0, Vl_ = 0;  // per-TP-rank sizes
  // Per-TP-rank widths: QKV's output 3 Cl (GPT-2) or (NHl + 2 KVl) hs (Llama); fc's output
  // 4 Cl or 2 Fl (gate | up); the activation's output 4 Cl (GELU) or Fl (SwiGLU).
  int qkv_w_ = 0, fch_w_ = 0, fchg_w_ = 0;
  // Llama: KV heads held (KVl) and the TP ranks sharing each (kv_share_ = tp / KV when tp > KV,
  // else 1); the head's unit (lmhead; GPT-2's is wte_unit_).
  bool llama_ = false;
  int KVl_ = 0, kv_share_ = 1;
  int head_unit_ = -1;
  bool holds_first_ = false;  // this rank holds virtual stage 0 (the embedding)
  // A LayerNorm (GPT-2: mean, rstd, weight, bias) or an RMSNorm (Llama: rstd, weight; mean and
  // b unused) of R rows.
  void norm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* w, const T* b, int R);
  // Rotary embeddings (Llama) on qkv (B, Tn, qkv_w_) at this rank's positions: 0..Tn-1, or under
  // context parallelism each of its two chunks' true positions. backward: on dqkv, the inverse.
  void rope(T* qkv, int B, int Tn, bool backward);
  // Llama with kv_share_ > 1: the k and v rows' gradient of this micro-batch's layer (in
  // `dqkvw`, (qkv_w_, C), this rank's rows) summed over the TP ranks sharing its KV head, then
  // accumulated with the q rows' into dw.
  void add_qkv_grad(T* dw, T* dqkvw);
  Tensor kv_grad_;  // kv_share_ > 1: a layer's QKV weight gradient (qkv_w_, C), then (KV, 2 hs, C) to sum
  bool sp_ = false;                          // layout.sequence_parallel
  // The rows of the residual stream this rank holds: BT / tp under sequence parallelism.
  int64_t rows(int64_t BT) const { return sp_ ? BT / layout_.tp : BT; }
  // A LayerNorm's backward over this rank's R rows; under sequence parallelism its weight and
  // bias gradients are summed over TP before they are accumulated into dw, db.
  void ln_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const acc_t<T>* mean,
                   const acc_t<T>* rstd, int R);
  // reference/parallel/parallel_gpt_backward.cc: the whole backward, or (split) its pass B.
  const T* backward_pass(int chunk, int mb, const T* dout, acc_t<T> loss_scale, bool split);
  // One layer's share of backward_pass (layer k of the chunk, set s, its parameters lp): dres,
  // the residual stream's gradient (R, C) at the layer's output, becomes the gradient at its
  // input. split: B's share, no weight gradient, the output gradients W needs kept in s.kept.
  void layer_backward(ActSet& s, const LayerParams& lp, int k, bool last, bool split, T* dres, acc_t<T> loss_scale);
  std::vector<LocalTensor> tensors_;
  std::vector<ParamUnit> units_;
  size_t num_params_ = 0;
  ParamStore<T>* store_ = nullptr;
  Recompute recompute_ = Recompute::none;
  const Fp8Settings* fp8_ = nullptr;  // set_fp8
  // The linears' FP8 states: [global layer][qkv, attproj, fc, fcproj] (held layers' used).
  std::vector<std::array<Fp8LinearState, 4>> fp8_state_;
  enum Fp8Linear { kFp8Qkv = 0, kFp8Attproj = 1, kFp8Fc = 2, kFp8Fcproj = 3 };
  // A linear's FP8 slot (settings and state), or an empty one without FP8.
  Fp8Slot fp8_slot(int layer, int linear) {
    return fp8_ ? Fp8Slot{fp8_, &fp8_state_[size_t(layer)][size_t(linear)]} : Fp8Slot{};
  }
  int wte_unit_ = -1, wpe_unit_ = -1, lnf_unit_ = -1;  // lnf unit: lnfw at 0, lnfb at C
  std::vector<std::vector<LayerParams>> layers_;   // [chunk][layer in chunk]
  std::vector<std::map<int, std::unique_ptr<ActSet>>> live_;  // [chunk] mb -> activations
  std::vector<std::vector<std::unique_ptr<ActSet>>> pool_;    // [chunk] freed, reusable
  std::vector<Tensor> scratch_;
  int sB_ = 0, sT_ = 0;
  CommStats stats_;
  PartTimes* part_times_ = nullptr;
  // Adds the seconds from its construction to its destruction to part_times_ (when attached),
  // the device synchronised at both ends.
  struct PartClock {
    PartClock(PartTimes* t, Ops<T>& ops, int pass, int part);
    ~PartClock();
    PartClock(const PartClock&) = delete;
    PartClock& operator=(const PartClock&) = delete;
    PartTimes* t;
    Ops<T>& ops;
    int pass, part;
    double t0 = 0;
  };
};

extern template class ParallelGpt<float>;
extern template class ParallelGpt<double>;
extern template class ParallelGpt<bf16>;
extern template class ParallelGpt<fp16>;

}  // namespace dtb
