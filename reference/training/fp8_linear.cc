#include "reference/training/fp8_linear.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "kernels/error.h"

namespace dtb {

namespace {

bool per_tensor(const Fp8Settings& s) { return s.recipe == Fp8Recipe::delayed || s.recipe == Fp8Recipe::current; }

// TE's Float8CurrentScaling quantizer: no power-of-two scale, amax epsilon 0.
float current_scale(float amax, Fp8Format f) {
  return fp8_scale_from_amax(amax, fp8_max(f), false, 0.0f, std::numeric_limits<float>::max());
}

// An operand of a linear's GEMM: its values, shape, role and delayed state; `record`: the
// delayed recipe records its amax here (the fprop's x and w, the backward's dy).
struct Operand {
  const void* data;
  int rows, cols;  // data is rows x cols, row-major, as the fprop (x, w) or the dgrad (dy) quantizes it
  Fp8Role role;
  Fp8TensorScaling* state;
  bool record;
  size_t n() const { return size_t(rows) * size_t(cols); }
};

// Counts into `census` what quantizing t under `o` does to its values (Fp8Census).
template <typename T>
void count(Fp8Census& census, const Operand& t, const Fp8Operand& o) {
  const T* v = static_cast<const T*>(t.data);
  std::vector<float> x(t.n());
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(v[i]);
  census.by_role[size_t(t.role)] += cpu::fp8_count(x.data(), cpu::fp8_quantize(x.data(), t.rows, t.cols, o.format,
                                                                                  o.scaling, o.scale));
}

// The operands' quantization under s; `records` gets, for the delayed recipe, the local amaxes
// to record once the GEMM has run (a refused GEMM records nothing); `census` (may be null) counts
// each operand that is recorded (the fprop's x and w, the dgrad's dy: each once a pass).
template <typename T>
std::vector<Fp8Operand> operands(Ops<T>& ops, const Fp8Settings& s, const std::vector<Operand>& ts,
                                 const AmaxReduce& reduce, std::vector<std::pair<Fp8TensorScaling*, float>>& records,
                                 Fp8Census* census) {
  std::vector<Fp8Operand> out;
  if (!per_tensor(s)) {
    for (const Operand& t : ts) out.push_back(fp8_operand(s, t.role));
  } else {
    std::vector<float> amax;
    for (const Operand& t : ts)
      amax.push_back(t.data && (s.recipe == Fp8Recipe::current || t.record)
                         ? ops.amax(static_cast<const T*>(t.data), t.n())
                         : 0.0f);
    if (s.recipe == Fp8Recipe::current && reduce) reduce(amax.data(), amax.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const Fp8Format f = fp8_operand(s, ts[i].role).format;
      if (s.recipe == Fp8Recipe::delayed) {
        if (ts[i].record && ts[i].data) records.emplace_back(ts[i].state, amax[i]);
        out.push_back(fp8_operand(s, ts[i].role, ts[i].state->scale));
      } else {
        out.push_back(fp8_operand(s, ts[i].role, current_scale(amax[i], f)));
      }
    }
  }
  if (census)
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].data && ts[i].record) count<T>(*census, ts[i], out[i]);
  return out;
}

void check_sizes(const char* what, int N, int C, int OC) {
  DTB_CHECK(N >= 1 && C >= 1 && OC >= 1, std::string(what) + ": N " + std::to_string(N) + ", C " + std::to_string(C) +
                                             ", OC " + std::to_string(OC) + " (each must be >= 1)");
}

}  // namespace

template <typename T>
void fp8_fprop(Ops<T>& ops, const Fp8Settings& s, Fp8LinearState& st, T* out, const T* inp, const T* weight,
               const T* bias, int N, int C, int OC, const AmaxReduce& reduce) {
  check_sizes("fp8_fprop", N, C, OC);
  std::vector<std::pair<Fp8TensorScaling*, float>> records;
  const std::vector<Fp8Operand> o = operands(ops, s, {{inp, N, C, Fp8Role::input, &st.x, true},
                                                      {weight, OC, C, Fp8Role::weight, &st.w, true}},
                                             reduce, records, st.census);
  ops.fp8_matmul_forward(out, inp, weight, bias, N, C, OC, o[0], o[1]);
  for (const auto& [state, amax] : records) state->record(amax);
}

template <typename T>
void fp8_bprop(Ops<T>& ops, const Fp8Settings& s, Fp8LinearState& st, T* dinp, T* dweight, T* dbias, const T* dout,
               const T* inp, const T* weight, int N, int C, int OC, const AmaxReduce& reduce) {
  check_sizes("fp8_bprop", N, C, OC);
  DTB_CHECK(!dinp || weight, "fp8_bprop: dinp without the weight");
  DTB_CHECK(!dweight || inp, "fp8_bprop: dweight without the input");
  // x is read for dweight, w for dinp; their scales as in the fprop (not recorded again). The
  // reduction always carries the three amaxes (0 for an operand not read), so every rank of the
  // group reduces the same count whichever gradients it asks for.
  std::vector<std::pair<Fp8TensorScaling*, float>> records;
  const std::vector<Fp8Operand> o =
      operands(ops, s, {{dout, N, OC, Fp8Role::grad_output, &st.dy, true},
                        {dweight ? inp : nullptr, N, C, Fp8Role::input, &st.x, false},
                        {dinp ? weight : nullptr, OC, C, Fp8Role::weight, &st.w, false}},
               reduce, records, st.census);
  ops.fp8_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, o[0], o[1], o[2]);
  for (const auto& [state, amax] : records) state->record(amax);
}

void fp8_update(const std::vector<Fp8LinearState*>& states, const Fp8Settings& s, const AmaxReduce& reduce) {
  if (s.recipe != Fp8Recipe::delayed) return;
  std::vector<float> amax;
  for (const Fp8LinearState* st : states)
    for (const Fp8TensorScaling* t : {&st->x, &st->w, &st->dy}) amax.push_back(t->amax_history[0]);
  if (reduce && !amax.empty()) reduce(amax.data(), amax.size());
  size_t i = 0;
  for (Fp8LinearState* st : states) {
    st->x.update(s.delayed, fp8_operand(s, Fp8Role::input).format, amax[i++]);
    st->w.update(s.delayed, fp8_operand(s, Fp8Role::weight).format, amax[i++]);
    st->dy.update(s.delayed, fp8_operand(s, Fp8Role::grad_output).format, amax[i++]);
  }
}

namespace {
// The 4 states x 3 operands of each layer, in Fp8Checkpoint's order.
template <typename F>
void each_scaling(const std::vector<int>& layers, const std::vector<Fp8LinearState*>& states, F&& f) {
  DTB_CHECK(states.size() == 4 * layers.size(), "fp8 checkpoint: not 4 linear states a layer");
  for (Fp8LinearState* st : states)
    for (Fp8TensorScaling* x : {&st->x, &st->w, &st->dy}) f(*x);
}
}  // namespace

std::array<double, 3> fp8_median_scales(const std::vector<Fp8LinearState*>& states) {
  std::array<double, 3> out{};
  if (states.empty()) return out;
  for (int role = 0; role < 3; ++role) {
    std::vector<double> s;
    for (const Fp8LinearState* st : states) s.push_back(role == 0 ? st->x.scale : role == 1 ? st->w.scale : st->dy.scale);
    std::sort(s.begin(), s.end());  // the median: the mean of the two middle values of an even count
    const size_t m = s.size() / 2;
    out[size_t(role)] = s.size() % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
  }
  return out;
}

Fp8Checkpoint fp8_checkpoint(const Fp8Settings& s, const std::vector<int>& layers,
                             const std::vector<Fp8LinearState*>& states) {
  Fp8Checkpoint c;
  if (s.recipe != Fp8Recipe::delayed) return c;
  c.history_len = s.delayed.amax_history_len;
  c.layers = layers;
  c.values.reserve(layers.size() * Fp8Checkpoint::floats_per_layer(c.history_len));
  each_scaling(layers, states, [&](const Fp8TensorScaling& x) {
    DTB_CHECK(x.amax_history.size() == size_t(c.history_len), "fp8_checkpoint: a history of another length");
    c.values.insert(c.values.end(), x.amax_history.begin(), x.amax_history.end());
    c.values.push_back(x.scale);
    c.values.push_back(x.scale_inv);
  });
  return c;
}

void fp8_restore(const Fp8Checkpoint& c, const std::vector<int>& layers, const std::vector<Fp8LinearState*>& states) {
  if (c.history_len == 0) return;
  DTB_CHECK(c.layers == layers && c.values.size() == layers.size() * Fp8Checkpoint::floats_per_layer(c.history_len),
            "fp8_restore: the checkpoint's layers are not this rank's");
  const float* v = c.values.data();
  each_scaling(layers, states, [&](Fp8TensorScaling& x) {
    x.amax_history.assign(v, v + c.history_len);
    x.scale = v[c.history_len];
    x.scale_inv = v[c.history_len + 1];
    v += c.history_len + 2;
  });
}

int fp8_tile(const Fp8Settings& s) {
  return s.recipe == Fp8Recipe::blockwise ? 128 : s.recipe == Fp8Recipe::mxfp8 ? 32 : 0;
}

void validate_fp8_shards(const Fp8Settings& s, const GptConfig& m, const ParallelLayout& l,
                         int64_t micro_batch_tokens, int64_t seq_len) {
  const int t = fp8_tile(s);
  if (t == 0) return;
  struct Extent {
    std::string what;
    int64_t n;
  };
  std::vector<Extent> split;
  if (l.tp > 1) {
    const int64_t tp = l.tp, C = m.C, hs = m.C / m.NH;
    const std::string per = " per TP rank";
    split.push_back({"the attention's q features" + per + " (C / tp)", C / tp});
    if (is_llama(m)) {
      const int64_t F = ffn_hidden(m);
      // A rank holds KV / tp whole KV heads, or one (replicated) when tp does not divide KV
      // (reference/parallel/parallel_gpt.cc).
      const int64_t kv = kv_heads(m), kv_local = kv % tp == 0 ? kv / tp : 1;
      split.push_back({"the attention's k and v features" + per + " (KV heads a rank x head_size)", kv_local * hs});
      split.push_back({"the MLP's gate and up features" + per + " (ffn_hidden / tp)", F / tp});
    } else {
      split.push_back({"the MLP's hidden features" + per + " (4 C / tp)", 4 * C / tp});
    }
  }
  if (l.dp > 1 || l.cp > 1 || l.micro_batches > 1)
    split.push_back({"the tokens of a micro-batch on one rank (the wgrad's reduction)", micro_batch_tokens});
  if (l.cp > 1)
    split.push_back({"a sequence's context-parallel chunk (seq_len / (2 context_parallel))", seq_len / (2 * l.cp)});
  for (const Extent& e : split)
    if (e.n % t != 0)
      throw InputError("fp8 recipe " + std::string(to_string(s.recipe)) + ": " + e.what + " = " + std::to_string(e.n) +
                       " is not a multiple of its " + std::to_string(t) +
                       "-wide tiles, so a tile would straddle a shard and scale differently from the whole tensor's; "
                       "choose sizes that divide into whole tiles, or the delayed" +
                       std::string(l.cp > 1 ? "" : " or current") + " recipe");
}

#define DTB_INSTANTIATE_FP8_LINEAR(T)                                                                            \
  template void fp8_fprop<T>(Ops<T>&, const Fp8Settings&, Fp8LinearState&, T*, const T*, const T*, const T*, int, \
                             int, int, const AmaxReduce&);                                                        \
  template void fp8_bprop<T>(Ops<T>&, const Fp8Settings&, Fp8LinearState&, T*, T*, T*, const T*, const T*,         \
                             const T*, int, int, int, const AmaxReduce&);
DTB_INSTANTIATE_FP8_LINEAR(float)
DTB_INSTANTIATE_FP8_LINEAR(double)
DTB_INSTANTIATE_FP8_LINEAR(bf16)
DTB_INSTANTIATE_FP8_LINEAR(fp16)
#undef DTB_INSTANTIATE_FP8_LINEAR

}  // namespace dtb
