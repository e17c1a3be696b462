// Context parallelism's attention core (Megatron-Core `--context-parallel-size`, `--cp-comm-type`;
// Transformer Engine's context_parallel attention; Liu et al. 2023, "Ring Attention with
// Blockwise Transformers for Near-Infinite Context"): the load-balanced split of the sequence
// over the CP group, moving rows between the full and a rank's local layout, and causal
// attention of the local queries against every rank's keys/values, by a ring of K/V blocks
// (p2p) or by an all-gather of them. On Ops<T> and a CP Communicator. Its place in the parallel
// model: reference/parallel/parallel_gpt*.cc; measured by suites/cp_attention.cc.
//
// Shape legend: B batch, Tn full sequence, cp = CP group size, r = this rank's index in it,
// Tc = Tn / (2 cp) a chunk, Tl = 2 Tc = Tn / cp this rank's rows, C channels, NH heads, W any
// row width. Local tensors are (B, Tl, W): local chunk 0 in rows [0, Tc), local chunk 1 in
// [Tc, 2 Tc) of every batch row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/comm/communicator.h"
#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtb {

/// The sequence split of context parallelism with Megatron's causal load balance
/// (megatron/core/utils.py `get_batch_on_this_cp_rank`; Transformer Engine's
/// `get_batch_on_this_cp_rank` likewise): the Tn tokens are cut into 2 cp chunks of Tc = Tn /
/// (2 cp), and CP rank r holds chunks r and 2 cp - 1 - r, so that every rank has one early and
/// one late chunk and the same share of causal attention work. Worked example, cp = 2, Tn = 8:
/// chunks [0,2) [2,4) [4,6) [6,8); rank 0 holds positions 0 1 6 7, rank 1 holds 2 3 4 5.
struct CpSplit {
  int cp = 1;    // CP group size
  int rank = 0;  // this rank's index in the CP group
  int Tn = 0;    // full sequence length
  int chunk_len() const { return Tn / (2 * cp); }
  int local_len() const { return Tn / cp; }
  /// The global chunk index of local chunk j (0 or 1).
  int chunk(int j) const { return j == 0 ? rank : 2 * cp - 1 - rank; }
  /// The global position of local row t (t < Tl) of rank `of` (this rank by default).
  int global_position(int t) const { return global_position_of(rank, t); }
  int global_position_of(int of, int t) const {
    const int Tc = chunk_len();
    const int j = t / Tc;
    return (j == 0 ? of : 2 * cp - 1 - of) * Tc + t % Tc;
  }
};

/// The split of a sequence of Tn over a CP group of `cp` ranks, for rank `rank`.
/// Errors: InputError (one line) when 2 cp does not divide Tn (Megatron's assertion
/// `seq_len % (2 * cp_size) == 0`), cp < 1 or rank outside [0, cp).
CpSplit make_cp_split(int cp, int rank, int Tn);

/// Scatter: local (B, Tl, W) = this rank's rows of full (B, Tn, W) (copies, no communication:
/// every rank holds the full tensor, as the data loader gives each CP rank the same batch).
template <typename T>
void cp_scatter_rows(Ops<T>& ops, const CpSplit& split, T* local, const T* full, int B, int W);
/// The inverse placement: this rank's rows of full (B, Tn, W) = local (B, Tl, W); the other
/// rows are not touched.
template <typename T>
void cp_place_rows(Ops<T>& ops, const CpSplit& split, T* full, const T* local, int B, int W);
/// Gather: full (B, Tn, W) on every rank = every CP rank's local (B, Tl, W) in its place (an
/// all-gather over `cp`, then each rank's rows placed). Collective over `cp`, whose size and
/// rank must be split's. Temporary buffer (cp B Tl W) from `dev` (comm_buffer).
template <typename T>
void cp_gather_rows(Ops<T>& ops, Device& dev, Communicator& cp, const CpSplit& split, T* full, const T* local, int B,
                    int W);

/// Megatron's `cp_comm_type`: `p2p` passes K/V blocks around the CP ring (cp - 1 steps, each
/// overlapping the next block's transfer with attention on the current one: NCCL's grouped
/// send/recv on its stream, MPI's Isend/Irecv polled between blocks; the dK/dV accumulator's
/// step of the backward is not overlapped); `all_gather` gathers every rank's K/V first and
/// attends the local queries to them. (`a2a`, Ulysses-style head sharding, is not built.)
enum class CpCommType { p2p, all_gather };
/// "p2p", "all_gather" (Megatron's spellings).
std::string to_string(CpCommType t);
/// The inverse of to_string. Errors: InputError naming `text` for any other.
CpCommType parse_cp_comm_type(const std::string& text);

/// What one rank did, summed over calls: (query chunk, key chunk) block pairs attended and
/// skipped as fully masked (of the 4 cp pairs a pass meets), unmasked scores computed per
/// (batch row, head), and bytes this rank sent.
struct CpAttentionStats {
  int64_t blocks_computed = 0;
  int64_t blocks_skipped = 0;
  int64_t scores = 0;
  size_t bytes_sent = 0;
  void reset() { *this = CpAttentionStats{}; }
};

/// Fault injection for tests, to show that the checks catch the bugs users met: the merge as a
/// plain sum without the log-sum-exp correction; positions of a rank's rows as if its chunks
/// were contiguous from 0 (no per-chunk offset); dK/dV accumulated on the ring but kept by the
/// rank holding them at the end instead of being passed back to their owner.
enum class CpFault { none, merge_without_lse, no_chunk_offset, dkv_not_returned };

/// Everything a CP attention call needs besides its tensors (which must outlive the call).
/// The communicator's size and rank must be split.cp and split.rank (a caller's bug aborts).
template <typename T>
struct CpAttention {
  Ops<T>& ops;
  Device& dev;          // temporaries: K/V blocks in flight (comm_buffer), partial results (workspace)
  Communicator& group;  // the CP group
  CpSplit split;
  CpCommType comm_type = CpCommType::p2p;
  CpAttentionStats* stats = nullptr;  // may be null
  CpFault fault = CpFault::none;
};

/// Forward: causal self-attention of this rank's queries against all Tn keys/values of the CP
/// group. qkv (B, Tl, 3C) (multi-head; grouped-query below) is this rank's rows of the packed q, k, v (attention_forward's
/// layout). WRITES out (B, Tl, C) and lse (B, Tl, NH), the log-sum-exp of each row's scaled
/// scores (what the backward needs instead of the (Tn, Tn) probabilities). Every block pair of
/// a local query chunk and a key chunk is computed with attention_block_forward at the
/// chunks' global positions, in the order the ring brings them (source rank r, r-1, ..., r+1;
/// within one, its chunks 0 and 1), pairs whose every key lies after every query skipped, and
/// merged by attention_merge into a start of (0, -inf). Both comm types visit the same pairs in
/// the same order, so their out and lse are bitwise equal; against the whole-sequence
/// attention_forward they agree within the bound of kernels/cpu/attention_block_test_util.h.
/// Grouped-query attention (KV > 0 key/value heads dividing NH; 0: NH): qkv is (B, Tl, (NH + 2 KV)
/// hs), q rows then the KV heads' k and v rows (gqa_attention_forward's layout); only the KV heads
/// travel (K/V blocks of 2 KV hs per row: the ring's bytes are KV / NH of multi-head attention's),
/// repeated to the NH query heads (head h reads KV head h / (NH / KV)) where a block is attended.
/// Collective over the CP group. Errors: C % NH != 0 or NH % KV != 0 aborts; a backend without
/// the block ops throws InputError (Ops<T>::attention_block_forward).
template <typename T>
void context_parallel_attention_forward(const CpAttention<T>& cpa, T* out, acc_t<T>* lse, const T* qkv, int B, int C,
                                        int NH, int KV = 0);

/// Backward: dqkv (B, Tl, 3C) ACCUMULATES this rank's share of the gradient of the full
/// attention given dout (B, Tl, C) and the forward's out and lse: dq from every block pair its
/// queries met, dk and dv of this rank's keys summed over every rank's queries. p2p: K/V go
/// round the ring again with a dK/dV accumulator travelling beside them, and after the last
/// step the accumulators take one more step, to the rank owning those keys (cp sends of dK/dV
/// in all); all_gather: dK/dV of every rank's keys are computed locally and reduce-scattered to
/// their owners. dq is bitwise equal between the two (same pairs, same order); dk, dv are the
/// same cp partial sums added in another order (ring order against the reduce-scatter's), so
/// they agree within cp - 1 roundings of their sum. Grouped-query attention (KV as the forward):
/// dqkv (B, Tl, (NH + 2 KV) hs); a block's dK/dV of the NH repeated heads are summed into their
/// KV head (in head order) before they join the travelling accumulator. Collective over the CP
/// group. Errors as the forward.
template <typename T>
void context_parallel_attention_backward(const CpAttention<T>& cpa, T* dqkv, const T* dout, const T* qkv,
                                         const T* out, const acc_t<T>* lse, int B, int C, int NH, int KV = 0);

}  // namespace dtb
