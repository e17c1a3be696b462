// Megatron-LM tensor parallelism (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion
// Parameter Language Models Using Model Parallelism", Sec. 3, Fig. 3): the conjugate
// communication pair f / g (megatron/core/tensor_parallel/mappings.py) and the two sharded
// linear layers (megatron/core/tensor_parallel/layers.py), on Ops<T> and a TP Communicator,
// so they run unchanged on the CPU (host buffers, MPI) and on CUDA (device buffers, NCCL).
// The layers are the one place where a sharded linear's ops and collectives are written:
// the ffn_tp suite uses them with parameters they own, ParallelGpt (reference/parallel/parallel_gpt.h)
// with the parameters of its ParamStore, passed per call.
//
// Shape legend: N rows (tokens), C input features, OC output features, tp = TP group size,
// r = this rank's index in the TP group. A weight is (OC, C) as torch.nn.Linear:
// out = inp @ W^T + b.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/comm/communicator.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"
#include "reference/training/fp8_linear.h"

namespace dtb {

/// Direction of a pass through a layer or a mapping.
enum class Pass { forward, backward };

/// Time and volume of the TP collectives a layer (or a caller) has issued, summed since
/// the last reset: seconds by steady_clock around each blocking communicator call (after
/// the backend has finished the queued compute, so compute is not counted; the time
/// includes waiting for the slowest peer), the number of calls, and bytes all-reduced.
struct CommStats {
  double seconds = 0;
  int64_t calls = 0;
  size_t bytes = 0;
  void reset() { *this = CommStats{}; }
};

/// f in Megatron's Fig. 3 (mappings.py `copy_to_tensor_model_parallel_region`,
/// `_CopyToModelParallelRegion`): enters the TP region with a replicated activation.
/// Forward: identity — `buf` (count elements) is left as is, nothing is communicated.
/// Backward: `buf` holds this rank's partial gradient of the replicated input; it is
/// all-reduced (SUM) in place over `tp`, so every TP rank ends with the full gradient.
/// `ops` finishes queued work before the collective; `stats` (may be null) is charged.
/// A TP group of one communicates nothing in either direction (Megatron's bypass).
/// Errors: a failed collective aborts through the error sink (Communicator).
template <typename T>
void copy_to_tensor_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* buf, size_t count,
                                    CommStats* stats = nullptr);

/// g in Megatron's Fig. 3 (mappings.py `reduce_from_tensor_model_parallel_region`,
/// `_ReduceFromModelParallelRegion`), the conjugate of f: leaves the TP region.
/// Forward: `buf` holds this rank's partial sum; it is all-reduced (SUM) in place over `tp`.
/// Backward: identity — the output gradient is replicated and passes through untouched.
/// Arguments and errors as copy_to_tensor_parallel_region.
template <typename T>
void reduce_from_tensor_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* buf, size_t count,
                                        CommStats* stats = nullptr);

/// The sequence-parallel pair of Korthikanti et al. 2022 (Sec. 4.2.2, Fig. 5; Megatron's
/// mappings.py `gather_from_sequence_parallel_region` and
/// `reduce_scatter_to_sequence_parallel_region`): with sequence parallelism the regions
/// between the TP linears (LayerNorm, residual) hold N / tp rows per rank, block r of the
/// N rows on TP rank r, and f / g above become an all-gather and a reduce-scatter.
/// g-bar: enters the TP region from a sequence-sharded activation.
/// Forward: `full` (N, C) = the TP ranks' `local` blocks (N / tp, C) in rank order (all-gather).
/// Backward: `full` holds this rank's partial gradient of the gathered input; `local` is
/// WRITTEN with block r of its sum over TP (reduce-scatter). `local_count` = (N / tp) C
/// elements; `full` holds tp * local_count. The backend's queued compute is finished first;
/// `stats` (may be null) is charged with the full buffer's bytes. A TP group of one copies.
/// Errors: a failed collective aborts through the error sink (Communicator).
template <typename T>
void gather_from_sequence_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* full, T* local,
                                          size_t local_count, CommStats* stats = nullptr);

/// g-bar's conjugate: leaves the TP region into a sequence-sharded activation.
/// Forward: `full` (N, C) holds this rank's partial sum; `local` (N / tp, C) is WRITTEN with
/// block r of the sum over TP (reduce-scatter). Backward: `full` = the TP ranks' `local`
/// gradients in rank order (all-gather). Arguments and errors as
/// gather_from_sequence_parallel_region.
template <typename T>
void reduce_scatter_to_sequence_parallel_region(Pass pass, Ops<T>& ops, Communicator& tp, T* full, T* local,
                                                size_t local_count, CommStats* stats = nullptr);

/// Sums `buf` (count) in place over `tp`: the gradient of a parameter replicated over TP
/// but applied to sequence-sharded rows (a LayerNorm's weight and bias under sequence
/// parallelism), partial on each TP rank. Megatron-LM sums these once per step
/// (finalize_model_grads' `_allreduce_layernorm_grads`, the params marked
/// `sequence_parallel`); leaving it out is the bug of Megatron-LM issue #1446 (replicas
/// drift apart). A TP group of one communicates nothing. Errors as
/// copy_to_tensor_parallel_region.
template <typename T>
void sum_over_tensor_parallel(Ops<T>& ops, Communicator& tp, T* buf, size_t count, CommStats* stats = nullptr);

/// Sharding-invariant initialisation of a rectangular slice of a (rows, cols) row-major
/// parameter named `name`: host[i * (c1 - c0) + j] = T(float(std * N(0,1))) drawn by
/// random_normal(seed, stream_id(name), (r0 + i) * cols + (c0 + j)) — exactly the element
/// gpt_init_params draws at that global index, so any shard equals the slice of the full
/// tensor, bitwise. std == 0 gives zeros (GPT-2's biases). A vector is (1, n).
/// `host` holds (r1 - r0) * (c1 - c0) elements. Aborts on a slice outside (rows, cols).
template <typename T>
void init_parameter_slice(T* host, const std::string& name, int64_t rows, int64_t cols, int64_t r0,
                          int64_t r1, int64_t c0, int64_t c1, double std, uint64_t seed);

/// How a layer's parameters start: N(0, weight_std) and N(0, bias_std) per element, drawn
/// from `seed` with streams "<name>.weight" and "<name>.bias" over the FULL tensors' global
/// indices (init_parameter_slice). bias_std = 0 gives a zero bias (GPT-2).
struct LinearInit {
  double weight_std = 0.02;
  double bias_std = 0.0;
  uint64_t seed = 0;
};

/// Y = X A + b with A split along its output features (Megatron layers.py
/// `ColumnParallelLinear`, gather_output = False; paper eq. 3, A = [A_1, A_2]).
/// Full weight W (OC, C), bias b (OC); rank r of the TP group holds OC/tp rows of W and the
/// same slice of b: W_r (OC/tp, C), b_r (OC/tp) — rows [r OC/tp, (r+1) OC/tp) when the layer
/// owns its parameters (ParallelGpt's QKV holds the same rows of each of q, k and v instead:
/// NH/tp whole heads). The input X (N, C) is replicated on the TP group; the output stays
/// partitioned.
template <typename T>
class ColumnParallelLinear {
 public:
  /// A layer that owns its shard's parameters (category param) and gradients (category grad)
  /// on `device`. `name` names the FULL layer (parameter streams "<name>.weight",
  /// "<name>.bias"), C and OC its full sizes, `tp` its TP group (this rank's index is
  /// tp.rank()). `ops` and `tp` must outlive the layer. Gradients start at zero.
  /// Errors: InputError when C or OC < 1, or OC is not divisible by tp.size() (the message
  /// names the layer and the numbers).
  ColumnParallelLinear(Ops<T>& ops, Device& device, Communicator& tp, std::string name, int C, int OC,
                       const LinearInit& init);
  /// A layer whose parameters and gradients are the caller's, passed to each forward and
  /// backward (weight() and the other tensors are empty); its TP communication is charged to
  /// `stats` (not null; must outlive the layer). With `sequence_parallel` (Megatron's
  /// ColumnParallelLinear(sequence_parallel=True)) the input is sequence-sharded: forward
  /// all-gathers it, backward gathers it again (kept sharded: the activation saving of
  /// Korthikanti et al. 2022) and reduce-scatters the input gradient. Errors as the owning
  /// constructor.
  ColumnParallelLinear(Ops<T>& ops, Communicator& tp, std::string name, int C, int OC, CommStats* stats,
                       bool sequence_parallel = false);
  ColumnParallelLinear(const ColumnParallelLinear&) = delete;
  ColumnParallelLinear& operator=(const ColumnParallelLinear&) = delete;

  /// out (N, OC/tp) = inp (N, C) @ W_r^T + b_r. Communicates nothing (f forward is identity).
  void forward(T* out, const T* inp, int N) { forward(out, inp, N, w_.data<T>(), b_.data<T>()); }
  /// The same with the caller's w (OC/tp, C) and b (OC/tp; may be null: no bias). Sequence
  /// parallel: inp is this rank's block (N/tp, C) of the N rows, gathered into `work`
  /// (workspace_elements(N), not null) first. With `fp8` set (settings and state both), the GEMM
  /// is the FP8 fprop of reference/training/fp8_linear.h, the current recipe's amaxes reduced
  /// (max) over the TP group, so a shard's scales are the whole tensor's (the input is whole
  /// here, the weight and dout sharded); the delayed recipe reduces nothing here: its shards
  /// share scales when the step's fp8_update reduces over a group spanning the TP group.
  void forward(T* out, const T* inp, int N, const T* w, const T* b, T* work = nullptr, Fp8Slot fp8 = {});
  /// Given dout (N, OC/tp), WRITES dinp (N, C) = sum over TP ranks of dout_r @ W_r (f
  /// backward: one all-reduce SUM of N*C elements over tp; dinp is overwritten, since
  /// accumulating would sum its old contents tp times), and ACCUMULATES dW_r += dout^T inp,
  /// db_r += column sums of dout. dinp may be null (no dx computed, nothing communicated).
  void backward(T* dinp, const T* dout, const T* inp, int N) {
    backward(dinp, dout, inp, N, w_.data<T>(), dw_.data<T>(), db_.data<T>());
  }
  /// The same with the caller's w, and its gradients dw (OC/tp, C) and db (OC/tp; may be
  /// null: no bias gradient). Sequence parallel: inp and dinp are this rank's blocks
  /// (N/tp, C); dinp is WRITTEN with its block of the sum over TP (a reduce-scatter in place
  /// of the all-reduce); `work` and `fp8` as forward.
  void backward(T* dinp, const T* dout, const T* inp, int N, const T* w, T* dw, T* db, T* work = nullptr,
                Fp8Slot fp8 = {});
  /// Elements of the `work` buffer a sequence-parallel forward or backward of N rows needs
  /// (2 N C: the gathered input and the full input gradient); 0 without sequence parallelism.
  size_t workspace_elements(int N) const { return sp_ ? 2 * size_t(N) * size_t(C_) : 0; }

  int in_features() const { return C_; }
  int out_features() const { return OC_; }
  /// OC / tp: this rank's output columns.
  int local_out_features() const { return OC_ / tp_.size(); }
  /// First row of the full weight this rank holds: r OC/tp.
  int out_offset() const { return tp_.rank() * local_out_features(); }
  const Tensor& weight() const { return w_; }       // (OC/tp, C)
  const Tensor& bias() const { return b_; }         // (OC/tp)
  const Tensor& weight_grad() const { return dw_; } // (OC/tp, C)
  const Tensor& bias_grad() const { return db_; }   // (OC/tp)
  void zero_grad();
  /// TP communication of this layer since construction or the last comm_stats().reset()
  /// (for a layer on the caller's parameters: the caller's stats).
  CommStats& comm_stats() { return *stats_; }

 private:
  Ops<T>& ops_;
  Communicator& tp_;
  std::string name_;
  int C_, OC_;
  bool sp_ = false;
  Tensor w_, b_, dw_, db_;
  CommStats own_stats_;
  CommStats* stats_ = &own_stats_;
};

/// Where a RowParallelLinear whose TP group is one rank (no reduction) adds its bias: after
/// the GEMM, as with any group (Megatron's layers.py: output = output_ + bias), or inside it,
/// seeding the output as reference/model/gpt.cc's linear does (ParallelGpt: tp = 1 is Gpt, bitwise).
enum class BiasAtTp1 { after_gemm, in_gemm };

/// Y = X A + b with A split along its input features (Megatron layers.py
/// `RowParallelLinear`, input_is_parallel = True; paper eq. 3, A = [A_1; A_2] and
/// X = [X_1, X_2]). Full weight W (OC, C), bias b (OC); rank r holds columns
/// [r C/tp, (r+1) C/tp) of W: W_r (OC, C/tp). The input is the partitioned activation
/// X_r (N, C/tp) (e.g. a ColumnParallelLinear's output); the output is replicated.
/// The bias is not partitioned (every TP rank holds all of it) and is added once, after
/// the reduction, as Megatron does (with tp = 1: see BiasAtTp1). Owns its parameters and
/// gradients, or takes the caller's, as ColumnParallelLinear.
template <typename T>
class RowParallelLinear {
 public:
  /// As ColumnParallelLinear's owning constructor (the bias after the GEMM at tp = 1 too).
  /// Errors: InputError when C or OC < 1, or C is not divisible by tp.size() (the message
  /// names the layer and the numbers).
  RowParallelLinear(Ops<T>& ops, Device& device, Communicator& tp, std::string name, int C, int OC,
                    const LinearInit& init);
  /// As ColumnParallelLinear's constructor on the caller's parameters; `bias_at_tp1` says
  /// where the bias goes when tp.size() == 1. With `sequence_parallel` (Megatron's
  /// RowParallelLinear(sequence_parallel=True)) the output is sequence-sharded: forward
  /// reduce-scatters the partial products (in place of the all-reduce) and adds the bias to
  /// this rank's rows; backward all-gathers the output gradient. The bias gradient is taken
  /// from the gathered gradient, so it is whole (and the same) on every TP rank: no sum over
  /// TP is owed for it (Megatron takes it from the sharded one and sums it at the step's end).
  RowParallelLinear(Ops<T>& ops, Communicator& tp, std::string name, int C, int OC, CommStats* stats,
                    BiasAtTp1 bias_at_tp1, bool sequence_parallel = false);
  RowParallelLinear(const RowParallelLinear&) = delete;
  RowParallelLinear& operator=(const RowParallelLinear&) = delete;

  /// out (N, OC) = sum over TP ranks of inp_r (N, C/tp) @ W_r^T, then + b: g forward, one
  /// all-reduce SUM of N*OC elements over tp. `out` is identical on every TP rank.
  void forward(T* out, const T* inp, int N) { forward(out, inp, N, w_.data<T>(), b_.data<T>()); }
  /// The same with the caller's w (OC, C/tp) and b (OC; may be null: no bias). Sequence parallel: out is this
  /// rank's block (N/tp, OC) of the sum; the partial products go to `work`
  /// (workspace_elements(N), not null). `fp8` as ColumnParallelLinear's (here the input and
  /// the weight are sharded along the reduction dimension, and dout is whole).
  void forward(T* out, const T* inp, int N, const T* w, const T* b, T* work = nullptr, Fp8Slot fp8 = {});
  /// Given the replicated dout (N, OC): WRITES dinp (N, C/tp) = dout @ W_r, ACCUMULATES
  /// dW_r += dout^T inp_r and db += column sums of dout (the same on every TP rank).
  /// Communicates nothing (g backward is identity). dinp may be null.
  void backward(T* dinp, const T* dout, const T* inp, int N) {
    backward(dinp, dout, inp, N, w_.data<T>(), dw_.data<T>(), db_.data<T>());
  }
  /// The same with the caller's w, dw (OC, C/tp) and db (OC). Sequence parallel: dout is
  /// this rank's block (N/tp, OC), gathered into `work` first. `fp8` as forward.
  void backward(T* dinp, const T* dout, const T* inp, int N, const T* w, T* dw, T* db, T* work = nullptr,
                Fp8Slot fp8 = {});
  /// Elements of `work` a sequence-parallel forward or backward of N rows needs (N OC); 0
  /// without sequence parallelism.
  size_t workspace_elements(int N) const { return sp_ ? size_t(N) * size_t(OC_) : 0; }

  int in_features() const { return C_; }
  int out_features() const { return OC_; }
  /// C / tp: this rank's input columns.
  int local_in_features() const { return C_ / tp_.size(); }
  /// First column of the full weight this rank holds: r C/tp.
  int in_offset() const { return tp_.rank() * local_in_features(); }
  const Tensor& weight() const { return w_; }       // (OC, C/tp)
  const Tensor& bias() const { return b_; }         // (OC), replicated
  const Tensor& weight_grad() const { return dw_; } // (OC, C/tp)
  const Tensor& bias_grad() const { return db_; }   // (OC), replicated
  void zero_grad();
  CommStats& comm_stats() { return *stats_; }

 private:
  Ops<T>& ops_;
  Communicator& tp_;
  std::string name_;
  int C_, OC_;
  BiasAtTp1 bias_at_tp1_ = BiasAtTp1::after_gemm;
  bool sp_ = false;
  Tensor w_, b_, dw_, db_;
  CommStats own_stats_;
  CommStats* stats_ = &own_stats_;
};

/// Softmax cross-entropy over a vocabulary split across the TP group (Megatron
/// cross_entropy.py `_VocabParallelCrossEntropy`): rank r holds the logits (N, V/tp) of ids
/// [v_begin, v_begin + V/tp) and the full logits are never gathered. The three shard ops of
/// kernels/ops.h with the two all-reduces between them (the row max, MAX; the sum of exps and
/// the target's logit, SUM), which travel in the accumulation type A = acc_t<T> (fp32 under
/// mixed precision). With tp = 1 it is the unsharded cross-entropy, bitwise.
template <typename T>
class VocabParallelCrossEntropy {
 public:
  using A = acc_t<T>;
  /// V the full vocabulary, `tp` the TP group (v_begin = tp.rank() V/tp); the all-reduces are
  /// charged to `stats` (not null). `ops`, `tp` and `stats` must outlive it.
  /// Errors: InputError when V < 1 or tp.size() does not divide V.
  VocabParallelCrossEntropy(Ops<T>& ops, Communicator& tp, int V, CommStats* stats);

  /// From logits (N, V/tp) and the targets (N, ids in [0, V), in the backend's memory):
  /// WRITES probs (N, V/tp), this shard's softmax, and losses (N) = -log p[target], the same
  /// on every TP rank; maxes (N) and sums (2N) are the kept statistics backward does not need
  /// (scratch of the caller's, left holding the reduced values).
  void forward(A* losses, T* probs, const T* logits, A* maxes, A* sums, const int32_t* targets, int N);
  /// WRITES dlogits (N, V/tp) = (probs - onehot(target)) * dloss, the one-hot only where the
  /// target lies in this shard. Communicates nothing.
  void backward(T* dlogits, const T* probs, const int32_t* targets, A dloss, int N);

  int local_vocab() const { return Vl_; }
  /// First vocabulary id of this rank's shard: r V/tp.
  int vocab_offset() const { return tp_.rank() * Vl_; }

 private:
  Ops<T>& ops_;
  Communicator& tp_;
  int Vl_;
  CommStats* stats_;
};

}  // namespace dtb
