// An FP8 linear's GEMMs under a recipe (reference/training/fp8_scaling.h): which scale each
// operand is quantized with, what is recorded for the delayed recipe, and the amax reduction that
// makes a sharded tensor's scale the whole tensor's. The sharded linears
// (reference/parallel/tensor_parallel.h) call these in place of Ops<T>::matmul_forward and
// matmul_backward, with a reduction over their TP group.
//
// Per operand (input x, weight w, output gradient dy), for the per-tensor recipes:
//   delayed  the scale is the operand's Fp8TensorScaling::scale, constant through a step; each
//            quantization records the local amax (fprop: x and w; the backward: dy), and
//            fp8_update, once per optimizer step, reduces the staged amaxes of every linear in one
//            call (over a group that must span the TP group for shards to share scales) and
//            updates every scale. Transformer Engine updates x and w when each micro-batch's
//            autocast region exits and dy in the backward of the first FP8 module; with one
//            micro-batch a step the scales each step uses agree, and dtbench's then do not
//            depend on the pipeline's order of micro-batches;
//   current  the scale is fp8_scale_from_amax(the amax of the whole tensor now, fp8_max of its
//            format, no power of two, epsilon 0), every sharded operand's amax reduced over the
//            linear's group. This differs from TE's Float8CurrentScaling under TP: TE reduces
//            over the TP group only a column-parallel input and a row-parallel output gradient
//            under sequence parallelism (te.Linear's _customize_quantizers_float8_current_scaling)
//            and quantizes a weight shard, or another sharded operand, by its local amax, so its
//            TP N is not its TP 1; dtbench reduces them all, so that TP N equals TP 1 (the
//            conformance contract). The backward quantizes x and w again, from the same values,
//            so with the same scales as the fprop (TE keeps the fprop's quantized tensors: the
//            same codes).
// blockwise and mxfp8 scale each tile or block by its own amax: nothing is reduced or recorded.
#pragma once
#include <array>
#include <functional>
#include <vector>

#include "kernels/cpu/fp8_gemm.h"
#include "kernels/ops.h"
#include "reference/layout/process_grid.h"
#include "reference/model/gpt.h"
#include "reference/training/fp8_scaling.h"

namespace dtb {

/// An FP8 run's quantized values counted per operand class (index int(Fp8Role): input, weight,
/// output gradient), each operand as the fprop (x, w) and the dgrad (dy) quantize it: how many
/// saturated and how many non-zero ones flushed to zero at their scales (cpu::fp8_count). Counting
/// quantizes each operand once more on the host: the precision suite asks for it, training does not.
/// Under activation recompute the forward runs twice a step, so x and w are counted twice.
struct Fp8Census {
  std::array<cpu::Fp8Counts, 3> by_role{};
};

/// One FP8 linear's delayed-scaling states (Transformer Engine's per-module fp8 meta), each of
/// `amax_history_len` values: what a checkpoint saves. `census` (not saved; may be null): where
/// its quantizations are counted.
struct Fp8LinearState {
  Fp8TensorScaling x, w, dy;
  Fp8Census* census = nullptr;
  explicit Fp8LinearState(int history_len = 1) : x(history_len), w(history_len), dy(history_len) {}
};

/// FP8's delayed recipe's scaling state of some transformer layers, as a checkpoint saves it
/// (reference/checkpoint/checkpoint.h; Transformer Engine saves its fp8 meta as a module's extra
/// state): per layer, in order, its four linears (QKV, attention projection, MLP up, MLP down), each's
/// three operands (input x, weight w, output gradient dy), each's `history_len` amaxes
/// (Fp8TensorScaling::amax_history) then its scale and scale_inv: floats_per_layer(history_len)
/// fp32 values a layer. Every rank that holds a layer holds the same state (its amaxes are reduced
/// over TP, DP and CP at each step's end, ParallelGpt::fp8_update), so the state is the full
/// model's and a resharded load takes each layer from any rank file that holds it. history_len 0:
/// no state (not FP8, or a recipe that keeps none: current, blockwise and MXFP8 scale each tensor
/// or tile from its own values).
struct Fp8Checkpoint {
  int history_len = 0;
  std::vector<int> layers;    // global transformer layer indices, ascending
  std::vector<float> values;  // layers.size() x floats_per_layer(history_len)
  static size_t floats_per_layer(int history_len) { return 12 * (size_t(history_len) + 2); }
  /// The operand class (x: input, w: weight, dy: grad_output) that value `i` of `values` belongs to.
  static Fp8Role role_of(size_t i, int history_len) { return Fp8Role(int(i / (size_t(history_len) + 2) % 3)); }
};

/// A linear's FP8 recipe and state for one call of a sharded linear
/// (reference/parallel/tensor_parallel.h): both null, the linear's plain GEMMs.
struct Fp8Slot {
  const Fp8Settings* settings = nullptr;
  Fp8LinearState* state = nullptr;
};

/// Reduces n amaxes in place by max over the ranks that hold pieces of the tensors they were
/// measured on (a TP group for a sharded linear; the amax reduction group at fp8_update). Empty:
/// nothing to reduce (one rank).
using AmaxReduce = std::function<void(float* amax, size_t n)>;

/// The fprop: out (N x OC, WRITTEN) = fp8(inp) (N x C) . fp8(weight)^T (OC x C) + bias (OC; may be
/// null), by Ops<T>::fp8_matmul_forward with the operands of fp8_operand(s, role, scale) and the
/// scales the file comment gives; `reduce` is called once (current: the two amaxes, x and w) or not
/// at all. Aborts (DTB_CHECK) for N, C or OC < 1.
/// Errors: as Ops<T>::fp8_matmul_forward (InputError from a backend without FP8 GEMMs).
template <typename T>
void fp8_fprop(Ops<T>& ops, const Fp8Settings& s, Fp8LinearState& st, T* out, const T* inp, const T* weight,
               const T* bias, int N, int C, int OC, const AmaxReduce& reduce = {});

/// The dgrad and wgrad (and dbias), Ops<T>::fp8_matmul_backward's accumulate rules (each of dinp,
/// dweight, dbias may be null; weight is read for dinp only, inp for dweight only), the scales as
/// the file comment gives; `reduce` is called at most once (current: three amaxes, dout, x and w,
/// 0 for an operand not read, so every rank reduces the same count). Errors: as the fprop; aborts
/// (DTB_CHECK) for dinp without weight or dweight without inp.
template <typename T>
void fp8_bprop(Ops<T>& ops, const Fp8Settings& s, Fp8LinearState& st, T* dinp, T* dweight, T* dbias, const T* dout,
               const T* inp, const T* weight, int N, int C, int OC, const AmaxReduce& reduce = {});

/// The delayed recipe's update after a step: the staged amaxes (history[0]) of every state's x, w
/// and dy in one array, reduced by `reduce` in one call, then each Fp8TensorScaling::update with
/// its reduced amax and its operand's format. Nothing for the other recipes.
void fp8_update(const std::vector<Fp8LinearState*>& states, const Fp8Settings& s, const AmaxReduce& reduce = {});

/// The state of `states` (4 a layer, `layers`' order, as ParallelGpt::fp8_states) under `s`: its
/// delayed recipe's, or history_len 0 and nothing for the other recipes. Aborts (DTB_CHECK) when
/// states is not 4 per layer.
Fp8Checkpoint fp8_checkpoint(const Fp8Settings& s, const std::vector<int>& layers,
                             const std::vector<Fp8LinearState*>& states);

/// Sets `states` (4 a layer of `layers`) from `c`, which must hold exactly those layers at
/// their history length (load_checkpoint's, given fp8_checkpoint's layers): bitwise the saved
/// state. Nothing when c.history_len is 0. Aborts (DTB_CHECK) on another layer list or size.
void fp8_restore(const Fp8Checkpoint& c, const std::vector<int>& layers, const std::vector<Fp8LinearState*>& states);

/// The median over `states` of each operand class's delayed scale (x, w, dy: Fp8TensorScaling::scale,
/// the one the next step quantizes with); zeros for no states.
std::array<double, 3> fp8_median_scales(const std::vector<Fp8LinearState*>& states);

/// The width of the recipe's tiles along a tensor dimension: 128 (blockwise: 1 x 128 tiles and
/// 128 x 128 blocks), 32 (mxfp8), 0 (the per-tensor recipes: no tiles).
int fp8_tile(const Fp8Settings& s);

/// Refuses a layout under which a tile or block of the recipe would straddle a shard, so that a
/// shard's scales would not be the whole tensor's (Transformer Engine quantizes each shard on its
/// own: such a layout is a different model, not the same one sharded). Every dimension a linear's
/// operands are split along must be a multiple of fp8_tile(s), for the tiles run along each of
/// them in one of the three GEMMs: with tp > 1, each TP rank's output features of a
/// column-parallel linear (each of q, k and v separately: C / tp, and hs times the KV heads a rank
/// holds, KV / tp or one when tp does not divide KV; the MLP's fc:
/// 4C / tp, or F / tp for each of the SwiGLU's gate and up) and its input features of a
/// row-parallel one (attention out: C / tp; fc out: 4C / tp or F / tp); and, when the layout
/// splits a step's tokens (dp, cp or micro_batches > 1), the tokens of one micro-batch on one
/// rank, `micro_batch_tokens` (the wgrad's reduction dimension); with cp > 1, also each of the 2 cp
/// chunks a sequence of `seq_len` tokens is cut into (a CP rank holds two, not adjacent:
/// reference/parallel/context_parallel.h), so that a tile of a rank's tokens is a tile of the
/// sequence's. Errors: InputError "fp8 recipe <r>: <extent> = <n> is not a multiple of its
/// <t>-wide tiles ..." for the first such extent.
void validate_fp8_shards(const Fp8Settings& s, const GptConfig& model, const ParallelLayout& l,
                         int64_t micro_batch_tokens, int64_t seq_len);

}  // namespace dtb
