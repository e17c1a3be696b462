// Loading a checkpoint saved on another layout (reference/checkpoint/checkpoint.h): every rank reads
// every rank file, places each stored element at its index in the full model (the files'
// "index.params" and "index.state" sections) and takes the elements its own state needs
// (ZeroEngine::state_index). The values move unchanged — a parameter, its fp32 master copy,
// its AdamW moments and the step count are per element —, so the resumed state is bitwise
// the saved one, element by element; what changes is the order in which later steps reduce
// (the numerics contract, docs/checkpoints.md). Sources: PyTorch Distributed Checkpoint's
// load planner (each shard's offsets in its global tensor), DeepSpeed's universal checkpoint
// (Lian et al. 2024: per-parameter fp32 weights and optimizer state, any parallelism).
// Not here: the rank file format (checkpoint_file.cc), the same-layout load (checkpoint.cc).
#include <cstring>
#include <filesystem>

#include "kernels/error.h"
#include "kernels/half.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/checkpoint/checkpoint_io.h"

namespace dtb::checkpoint_io {

namespace {

// The run triples of an index section, each checked to lie inside `positions` stored
// elements and the model's `N`.
struct IndexRun {
  int64_t global, pos, n;
};
std::vector<IndexRun> read_index(const std::vector<CheckpointSection>& sections, const std::string& name,
                                 size_t positions, size_t N, const std::string& path) {
  const CheckpointSection* s = find_section(sections, name);
  if (!s || s->dtype != "raw" || s->bytes.size() % 24 != 0)
    throw InputError("checkpoint file " + path + ": no valid '" + name + "' section (saved before checkpoints " +
                     "were layout-independent?)");
  std::vector<IndexRun> runs(s->bytes.size() / 24);
  for (size_t i = 0; i < runs.size(); ++i) {
    IndexRun& r = runs[i];
    r = {get<int64_t>(s->bytes, 24 * i), get<int64_t>(s->bytes, 24 * i + 8), get<int64_t>(s->bytes, 24 * i + 16)};
    if (r.global < 0 || r.pos < 0 || r.n < 1 || uint64_t(r.global) + uint64_t(r.n) > N ||
        uint64_t(r.pos) + uint64_t(r.n) > positions)
      throw InputError("checkpoint file " + path + ": section '" + name + "' run " + std::to_string(i) +
                       " lies outside the model or the stored elements");
  }
  return runs;
}

// A section of `E` values, its count (any), or InputError.
template <typename E>
const E* values(const std::vector<CheckpointSection>& sections, const char* name, const std::string& path,
                size_t& count) {
  const CheckpointSection* s = find_section(sections, name);
  const std::string dt(to_string(dtype_of<E>()));
  if (!s) throw InputError("checkpoint file " + path + ": no section '" + name + "'");
  if (s->dtype != dt || s->bytes.size() % sizeof(E) != 0)
    throw InputError("checkpoint file " + path + ": section '" + name + "' is not " + dt + " values");
  count = s->bytes.size() / sizeof(E);
  return reinterpret_cast<const E*>(s->bytes.data());
}

// "element 1234 of the full model (qkvw)".
std::string element_name(const GptConfig& model, int64_t g) {
  for (const ParamTensor& t : gpt_param_layout(model))
    if (size_t(g) >= t.offset && size_t(g) < t.offset + t.numel)
      return "element " + std::to_string(g) + " of the full model (" + t.name + ")";
  return "element " + std::to_string(g) + " of the full model";
}

}  // namespace

template <typename T>
ZeroState<T> reshard_state(const std::string& step_dir, const nlohmann::json& m, const CheckpointRunInfo& run,
                           const ZeroStateIndex& want, const ZeroStateShape& shape, StateFields& fields,
                           Fp8Take* fp8) {
  using A = acc_t<T>;
  const size_t N = gpt_num_params(run.model);
  const int64_t step = m.at("step").get<int64_t>();
  const int world = int(m.at("world_size").get<int64_t>());
  // The full model's state, and which elements some file held: params; master; m and v.
  std::vector<T> params(N);
  std::vector<A> master(N), mom1(N), mom2(N);
  std::vector<char> has_param(N, 0), has_master(N, 0), has_moments(N, 0);
  for (int r = 0; r < world; ++r) {
    const std::pair<std::string, FileDigest> file = rank_file_of(m, r, step_dir);
    const std::string& path = file.first;
    const FileDigest& expect = file.second;
    const std::vector<CheckpointSection> sections = read_rank_file(path, {r, world, step}, &expect);
    const StateFields f = read_state(sections, path, step, run.seed);
    if (fp8) fp8->offer(sections, path);
    if (r == 0) fields = f;
    if (f.t != fields.t || f.scaler.scale != fields.scaler.scale ||
        f.scaler.growth_tracker != fields.scaler.growth_tracker || f.scaler.skipped != fields.scaler.skipped)
      throw InputError("checkpoint file " + path + ": its AdamW step or loss scaler differs from rank 0's file");
    size_t np = 0, nm = 0, nv = 0, nmaster = 0;
    const T* p = values<T>(sections, "params", path, np);
    const A* a = values<A>(sections, "m", path, nm);
    const A* b = values<A>(sections, "v", path, nv);
    const A* w = find_section(sections, "master") ? values<A>(sections, "master", path, nmaster) : nullptr;
    if (nv != nm || (w && nmaster != nm))
      throw InputError("checkpoint file " + path + ": sections 'm', 'v' and 'master' differ in length");
    for (const IndexRun& x : read_index(sections, "index.params", np, N, path)) {
      std::memcpy(params.data() + x.global, p + x.pos, size_t(x.n) * sizeof(T));
      std::memset(has_param.data() + x.global, 1, size_t(x.n));
    }
    for (const IndexRun& x : read_index(sections, "index.state", nm, N, path)) {
      std::memcpy(mom1.data() + x.global, a + x.pos, size_t(x.n) * sizeof(A));
      std::memcpy(mom2.data() + x.global, b + x.pos, size_t(x.n) * sizeof(A));
      std::memset(has_moments.data() + x.global, 1, size_t(x.n));
      if (w) {
        std::memcpy(master.data() + x.global, w + x.pos, size_t(x.n) * sizeof(A));
        std::memset(has_master.data() + x.global, 1, size_t(x.n));
      }
    }
  }
  // This rank's share; an element no file held is refused (a checkpoint of another model
  // would have failed the manifest check: this is a damaged index).
  const std::string me = "checkpoint " + printable(step_dir) + ": ";
  auto need = [&](const std::vector<char>& has, int64_t g, const char* what) {
    if (!has[size_t(g)]) throw InputError(me + "no rank file holds the " + what + " of " + element_name(run.model, g));
  };
  ZeroState<T> st;
  st.t = fields.t;
  st.params.assign(shape.params, T(0.0f));
  for (size_t i = 0; i < shape.params; ++i)
    if (const int64_t g = want.params[i]; g >= 0) need(has_param, g, "parameter"), st.params[i] = params[size_t(g)];
  st.m.assign(shape.moments, A(0));
  st.v.assign(shape.moments, A(0));
  st.master.assign(shape.master, A(0));
  for (size_t i = 0; i < shape.moments; ++i) {
    const int64_t g = want.moments[i];
    if (g < 0) continue;
    need(has_moments, g, "AdamW moments");
    st.m[i] = mom1[size_t(g)];
    st.v[i] = mom2[size_t(g)];
    if (shape.master == 0) continue;
    if constexpr (std::is_same_v<T, A>) {
      // fp32 (fp64) keeps a master copy only with offload, equal to the parameter itself.
      if (!has_master[size_t(g)]) {
        need(has_param, g, "parameter");
        st.master[i] = params[size_t(g)];
        continue;
      }
    }
    need(has_master, g, "fp32 master weight");
    st.master[i] = master[size_t(g)];
  }
  return st;
}

#define DTB_INSTANTIATE_RESHARD(T)                                                                                 \
  template ZeroState<T> reshard_state<T>(const std::string&, const nlohmann::json&, const CheckpointRunInfo&,     \
                                         const ZeroStateIndex&, const ZeroStateShape&, StateFields&, Fp8Take*);
DTB_INSTANTIATE_RESHARD(float)
DTB_INSTANTIATE_RESHARD(double)
DTB_INSTANTIATE_RESHARD(bf16)
DTB_INSTANTIATE_RESHARD(fp16)
#undef DTB_INSTANTIATE_RESHARD

}  // namespace dtb::checkpoint_io
