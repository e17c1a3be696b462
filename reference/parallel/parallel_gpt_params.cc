// ParallelGpt's parameters (reference/parallel/parallel_gpt.h): which slices of the full model's
// tensors this rank holds, unit by unit (the local flat layout: the wte and wpe shards, each layer's
// column- and row-parallel shards, the KV heads a rank holds or shares, the final norm, Llama's
// head), their values at initialisation, and the full model gathered back from every rank's.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/error.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/parallel_gpt_detail.h"

namespace dtb {

using namespace parallel_gpt_detail;

template <typename T>
int ParallelGpt<T>::open_unit(const std::string& name) {
  units_.push_back({name, num_params_, 0});
  return int(units_.size()) - 1;
}

template <typename T>
void ParallelGpt<T>::close_unit() {
  units_.back().n = num_params_ - units_.back().begin;
}

template <typename T>
void ParallelGpt<T>::add_layer(int chunk, int k, const std::map<std::string, size_t>& full) {
  const size_t C = cfg_.C, l = size_t(stage_first_layer(layout_, cfg_.L, virtual_stage(chunk))) + k;
  // Elements of each of a layer's tensors (gpt.h's layout stacks them over the L layers): W the
  // QKV's rows, F the MLP's hidden size (4C for GPT-2); 0 for a tensor the family lacks.
  const size_t W = size_t(qkv_width(cfg_)), F = llama_ ? size_t(ffn_hidden(cfg_)) : 4 * C, bias = llama_ ? 0 : 1;
  const size_t F1 = llama_ ? 2 * F : F;  // fc's rows: gate | up (Llama), or the 4C of GPT-2
  const size_t numel[12] = {C, bias * C, W * C, bias * W, C * C, bias * C, C, bias * C, F1 * C, bias * F1, C * F, bias * C};
  // This rank's shard as runs of the full tensor (rows, cols) at `at`: rows [r0, r0 + n) of
  // a column-parallel weight, or columns [c0, c0 + n) of every row of a row-parallel one.
  auto rows = [](std::vector<LocalTensor::Run>& runs, size_t at, size_t cols, size_t r0, size_t n) {
    const size_t local = runs.empty() ? 0 : runs.back().local + runs.back().n;
    runs.push_back({at + r0 * cols, local, n * cols});
  };
  auto columns = [](std::vector<LocalTensor::Run>& runs, size_t at, size_t nrows, size_t cols, size_t c0, size_t n) {
    for (size_t o = 0; o < nrows; ++o) runs.push_back({at + o * cols + c0, o * n, n});
  };
  // QKV: q, k and v are each column-parallel, NH/tp whole query heads and their KVl KV heads
  // (GPT-2: the same rows of each; Llama: the KV heads its query heads read, llama_tp_refusal).
  const size_t hs = C / size_t(cfg_.NH), q_rows = size_t(NHl_) * hs, kv_rows = size_t(KVl_) * hs;
  const size_t q_r0 = size_t(coord_.tp) * q_rows, NHhs = size_t(cfg_.NH) * hs, KVhs = size_t(kv_heads(cfg_)) * hs;
  const size_t kv_r0 = (kv_share_ > 1 ? size_t(coord_.tp / kv_share_) : size_t(coord_.tp)) * kv_rows;
  const size_t fl = size_t(fchg_w_);  // Llama: this rank's rows of each of gate and up
  LayerParams lp;
  lp.unit = open_unit("layer." + std::to_string(l));
  lp.layer = int(l);
  lp.moe = is_moe_layer(cfg_, int(l));
  std::fill(std::begin(lp.o), std::end(lp.o), LayerParams::kAbsent);
  for (int i = 0; i < 12; ++i) {
    if (lp.moe && i >= Pfcw) break;  // an MoE layer: its router and experts in place of fc, fcproj
    if (numel[i] == 0) continue;     // Llama's biases
    const std::string name = kLayerNames[i];
    // Layer l's tensor in the full buffer; an MoE model stacks fc and fcproj over its dense layers.
    const size_t row = i >= Pfcw ? size_t(dense_layer_index(cfg_, int(l))) : l;
    const size_t at = full.at(name) + row * numel[i];
    std::vector<LocalTensor::Run> runs;
    bool replicated = false;
    switch (i) {
      case Pqkvw:  // (W, C): q rows, k rows, v rows
      case Pqkvb: {  // (W)
        const size_t cols = i == Pqkvw ? C : 1;
        rows(runs, at, cols, q_r0, q_rows);
        if (kv_share_ > 1) {  // the q rows this rank's own; the shared KV head's rows a tensor of their own
          lp.o[i] = num_params_ - units_[lp.unit].begin;
          add_tensor(name, int(l), std::move(runs), false);
          runs.clear();
          rows(runs, at, cols, NHhs + kv_r0, kv_rows);
          rows(runs, at, cols, NHhs + KVhs + kv_r0, kv_rows);
          add_tensor(name, int(l), std::move(runs), false);
          // One copy counts: the first of the kv_share_ ranks holding it.
          tensors_.back().primary = coord_.tp % kv_share_ == 0;
          tensors_.back().owner = tensors_.back().owner && tensors_.back().primary;
          continue;
        }
        rows(runs, at, cols, NHhs + kv_r0, kv_rows);
        rows(runs, at, cols, NHhs + KVhs + kv_r0, kv_rows);
        break;
      }
      case Pattprojw:  // (C, C)
        columns(runs, at, C, C, attproj_->in_offset(), attproj_->local_in_features());
        break;
      case Pfcw:  // (4C, C); Llama (2F, C): this rank's rows of gate, then the same rows of up
        rows(runs, at, C, llama_ ? size_t(coord_.tp) * fl : fc_->out_offset(), llama_ ? fl : fc_->local_out_features());
        if (llama_) rows(runs, at, C, F + size_t(coord_.tp) * fl, fl);
        break;
      case Pfcb:  // (4C)
        rows(runs, at, 1, fc_->out_offset(), fc_->local_out_features());
        break;
      case Pfcprojw:  // (C, F)
        columns(runs, at, C, F, fcproj_->in_offset(), fcproj_->local_in_features());
        break;
      default:  // ln1w ln1b attprojb ln2w ln2b fcprojb: (C), replicated over TP
        runs.push_back({at, 0, C});
        replicated = true;
    }
    lp.o[i] = num_params_ - units_[lp.unit].begin;
    add_tensor(name, int(l), std::move(runs), replicated);
  }
  if (lp.moe) add_moe_tensors(lp, int(l), full);  // closes the layer's unit, opens and closes the experts'
  else close_unit();
  layers_[chunk].push_back(lp);
}

template <typename T>
void ParallelGpt<T>::add_tensor(const std::string& name, int layer, std::vector<LocalTensor::Run> runs,
                                bool tp_replicated, bool expert) {
  LocalTensor t;
  t.name = name;
  t.layer = layer;
  t.offset = num_params_;
  for (const auto& run : runs) t.numel += run.n;
  t.runs = std::move(runs);
  t.primary = !tp_replicated || coord_.tp == 0;
  // An expert's copies are its expert-data-parallel group's; the other tensors' the DP group's.
  // CP ranks hold the same parameters: CP rank 0's copy is the owner.
  t.owner = (expert ? expert_dp_rank(coord_.dp, layout_) : coord_.dp) == 0 && coord_.cp == 0 && t.primary;
  num_params_ += t.numel;
  tensors_.push_back(std::move(t));
}

template <typename T>
ParamStore<T>& ParallelGpt<T>::store() const {
  DTB_CHECK(store_ != nullptr, "ParallelGpt: no parameter store attached");
  return *store_;
}

template <typename T>
std::vector<T> ParallelGpt<T>::initial_params(uint64_t seed) const {
  // Half storage: the fp32 initialisation rounded to T (Megatron-LM builds the model in fp32,
  // then casts it; the master weights are made from the cast parameters).
  std::vector<acc_t<T>> full(gpt_num_params(cfg_));
  std::vector<T> mine(num_params_);
  gpt_init_params(full.data(), cfg_, seed);
  for (const auto& t : tensors_)
    for (const auto& run : t.runs)
      convert(mine.data() + t.offset + run.local, full.data() + run.global, run.n);
  return mine;
}

template <typename T>
std::vector<double> ParallelGpt<T>::gather(const std::vector<T>& mine, Communicator& world) const {
  DTB_CHECK(mine.size() == num_params_, "ParallelGpt::gather: not this rank's local parameter count");
  std::vector<double> full(gpt_num_params(cfg_), 0.0);
  for (const auto& t : tensors_) {
    if (!t.owner) continue;
    for (const auto& run : t.runs)
      for (size_t i = 0; i < run.n; ++i) full[run.global + i] = double(mine[t.offset + run.local + i]);
  }
  // One owner per element, zeros elsewhere: the sum is exact.
  world.all_reduce(full.data(), full.data(), full.size(), DType::f64, ReduceOp::sum);
  return full;
}

template <typename T>
double ParallelGpt<T>::replica_max_diff(const std::vector<T>& mine, Communicator& world) const {
  DTB_CHECK(mine.size() == num_params_, "ParallelGpt::replica_max_diff: not this rank's local parameter count");
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> hi(gpt_num_params(cfg_), -inf), lo(hi.size(), inf);
  for (const auto& t : tensors_)
    for (const auto& run : t.runs)
      for (size_t i = 0; i < run.n; ++i) {
        const double x = double(mine[t.offset + run.local + i]);
        hi[run.global + i] = x;
        lo[run.global + i] = x;
      }
  world.all_reduce(hi.data(), hi.data(), hi.size(), DType::f64, ReduceOp::max);
  world.all_reduce(lo.data(), lo.data(), lo.size(), DType::f64, ReduceOp::min);
  double worst = 0;
  for (size_t i = 0; i < hi.size(); ++i)
    if (hi[i] > -inf) worst = std::max(worst, std::isnan(hi[i] - lo[i]) ? inf : hi[i] - lo[i]);
  return worst;
}

// The members defined here, for the types parallel_gpt.cc instantiates the class in.
#define DTB_PARALLEL_GPT_PARAMS(T)                                                                          \
  template int ParallelGpt<T>::open_unit(const std::string&);                                               \
  template void ParallelGpt<T>::close_unit();                                                               \
  template void ParallelGpt<T>::add_layer(int, int, const std::map<std::string, size_t>&);                  \
  template void ParallelGpt<T>::add_tensor(const std::string&, int, std::vector<LocalTensor::Run>, bool, bool); \
  template ParamStore<T>& ParallelGpt<T>::store() const;                                                    \
  template std::vector<T> ParallelGpt<T>::initial_params(uint64_t) const;                                   \
  template std::vector<double> ParallelGpt<T>::gather(const std::vector<T>&, Communicator&) const;          \
  template double ParallelGpt<T>::replica_max_diff(const std::vector<T>&, Communicator&) const;
DTB_PARALLEL_GPT_PARAMS(float)
DTB_PARALLEL_GPT_PARAMS(double)
DTB_PARALLEL_GPT_PARAMS(bf16)
DTB_PARALLEL_GPT_PARAMS(fp16)
#undef DTB_PARALLEL_GPT_PARAMS

}  // namespace dtb
