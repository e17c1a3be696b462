// Training checkpoints: the collective save and load (reference/checkpoint/checkpoint.h), every failure
// agreed so that every rank fails alike (kernels/agreed_error.h). Not here: the rank file format
// (checkpoint_file.cc) and the manifest (checkpoint_manifest.cc).
#include "reference/checkpoint/checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "kernels/agreed_error.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "reference/checkpoint/checkpoint_io.h"

namespace dtb {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_io;

namespace checkpoint_io {

std::string begin_save(const std::string& dir, int64_t step, Communicator& world) {
  const std::string sdir = checkpoint_step_dir(dir, step);
  std::string why;
  if (world.rank() == 0) {  // the step directory, without an older manifest naming other files
    try {
      std::error_code ec;
      fs::create_directories(sdir, ec);
      if (ec) throw InputError("checkpoint directory " + sdir + ": cannot create: " + ec.message());
      const std::string manifest = (fs::path(sdir) / "manifest.json").string();
      if (fs::exists(manifest, ec) && ::unlink(manifest.c_str()) != 0)
        throw InputError("checkpoint " + manifest + ": cannot remove the older manifest: " + errno_text());
      fsync_dir(sdir);
      fsync_dir(dir);
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  agree_on_error(world, why);
  return sdir;
}

template <typename T>
std::vector<CheckpointSection> rank_sections(const ZeroState<T>& st, const ZeroStateIndex& index,
                                             const CheckpointRunInfo& run, const TrainProgress& progress) {
  using A = acc_t<T>;
  std::vector<CheckpointSection> sections;
  sections.push_back(state_section({progress.next_step, st.t, run.seed, progress.scaler}));
  auto add = [&](const char* name, const auto& v) {
    using E = typename std::decay_t<decltype(v)>::value_type;
    CheckpointSection s{name, std::string(to_string(dtype_of<E>())), std::vector<char>(v.size() * sizeof(E))};
    if (!v.empty()) std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
    sections.push_back(std::move(s));
  };
  add("params", st.params);
  if (!st.master.empty()) add("master", st.master);
  add("m", st.m);
  add("v", st.v);
  sections.push_back(index_section("index.params", index.params));
  sections.push_back(index_section("index.state", index.moments));
  for (CheckpointSection& s : fp8_sections(progress.fp8)) sections.push_back(std::move(s));
  static_assert(sizeof(A) == sizeof(typename ZeroState<T>::A));
  return sections;
}

void commit_save(const std::string& dir, const std::string& sdir, const CheckpointRunInfo& run,
                 const TrainProgress& progress, int64_t adamw_steps, const FileDigest& mine, std::string why,
                 Communicator& world) {
  agree_on_error(world, why);  // every rank file is durable past this point
  // Sizes and checksums to rank 0: 2 words of size, 16 of hex digits per rank.
  std::vector<int32_t> word(18, 0), all(18 * size_t(world.size()));
  word[0] = int32_t(uint32_t(mine.bytes));
  word[1] = int32_t(uint32_t(mine.bytes >> 32));
  std::memcpy(word.data() + 2, mine.sha256.data(), 64);
  world.all_gather(word.data(), all.data(), word.size(), DType::i32);
  if (world.rank() == 0) {
    try {
      json ranks = json::array();
      for (int r = 0; r < world.size(); ++r) {
        const int32_t* w = all.data() + 18 * size_t(r);
        const uint64_t bytes = uint64_t(uint32_t(w[0])) | (uint64_t(uint32_t(w[1])) << 32);
        ranks.push_back({{"rank", r},
                         {"file", "rank-" + std::to_string(r) + ".bin"},
                         {"bytes", bytes},
                         {"sha256", std::string(reinterpret_cast<const char*>(w + 2), 64)}});
      }
      const json manifest = make_manifest(run, progress.next_step, world.size(), progress, adamw_steps, std::move(ranks));
      write_file_durably((fs::path(sdir) / "manifest.json").string(), manifest.dump(1) + "\n");
      write_file_durably((fs::path(dir) / "latest").string(), std::to_string(progress.next_step) + "\n");
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  agree_on_error(world, why);
}

}  // namespace checkpoint_io

template <typename T>
std::string save_checkpoint(const std::string& dir, const CheckpointRunInfo& run, ZeroEngine<T>& engine,
                            const TrainProgress& progress, Communicator& world) {
  DTB_CHECK(run.world_size() == world.size(), "save_checkpoint: the run's layout is not the world's size");
  const std::string sdir = begin_save(dir, progress.next_step, world);
  FileDigest mine;  // this rank's file
  std::string why;
  try {
    mine = write_rank_file((fs::path(sdir) / ("rank-" + std::to_string(world.rank()) + ".bin")).string(),
                           {world.rank(), world.size(), progress.next_step},
                           rank_sections(engine.export_state(), engine.state_index(), run, progress));
  } catch (const InputError& e) {
    why = e.what();
  }
  commit_save(dir, sdir, run, progress, engine.steps_taken(), mine, why, world);
  return sdir;
}

template <typename T>
TrainProgress load_checkpoint(const std::string& step_dir, const CheckpointRunInfo& run, ZeroEngine<T>& engine,
                              LossScaler* scaler, Communicator& world, const Fp8Checkpoint* fp8) {
  using A = acc_t<T>;
  DTB_CHECK(run.world_size() == world.size(), "load_checkpoint: the run's layout is not the world's size");
  const int r = world.rank();
  std::string why, manifest_sha;
  TrainProgress p;
  ZeroState<T> st;
  Fp8Take take_fp8(fp8 ? *fp8 : Fp8Checkpoint{});
  try {
    const json m = check_checkpoint_manifest(step_dir, run);
    {
      const std::vector<char> b = read_all((fs::path(step_dir) / "manifest.json").string(), "checkpoint manifest");
      manifest_sha = sha256_hex(b.data(), b.size(), nullptr, 0);
    }
    const int64_t step = m.at("step").get<int64_t>();  // checked by check_checkpoint_manifest
    const ZeroStateShape shape = engine.state_shape();
    StateFields f;
    if (!resharded_from(m, run).empty()) {
      st = reshard_state<T>(step_dir, m, run, engine.state_index(), shape, f, &take_fp8);
    } else {
      const std::pair<std::string, FileDigest> file = rank_file_of(m, r, step_dir);
      const std::string& path = file.first;  // not a structured binding: the lambda below captures it
      const FileDigest& expect = file.second;
      const std::vector<CheckpointSection> sections = read_rank_file(path, {r, world.size(), step}, &expect);
      auto take = [&](const char* s, auto& out, size_t count) {
        using E = typename std::decay_t<decltype(out)>::value_type;
        const std::string dt(to_string(dtype_of<E>()));
        const CheckpointSection* x = find_section(sections, s);
        if (!x) throw InputError("checkpoint file " + path + ": no section '" + s + "'");
        if (x->dtype != dt || x->bytes.size() != count * sizeof(E))
          throw InputError("checkpoint file " + path + ": section '" + s + "' holds " + std::to_string(x->bytes.size()) +
                           " bytes of " + printable(x->dtype, 8) + ", this rank needs " + std::to_string(count) + " " +
                           dt + " values");
        out.resize(count);
        if (count) std::memcpy(out.data(), x->bytes.data(), x->bytes.size());
      };
      take("params", st.params, shape.params);
      if (shape.master > 0) take("master", st.master, shape.master);
      if (shape.master == 0 && find_section(sections, "master"))
        throw InputError("checkpoint file " + path + ": holds master weights this run does not keep");
      take("m", st.m, shape.moments);
      take("v", st.v, shape.moments);
      f = read_state(sections, path, step, run.seed);
      st.t = f.t;
      take_fp8.offer(sections, path);
      take_fp8.check_complete("checkpoint file " + path);
    }
    take_fp8.check_complete("checkpoint " + printable(step_dir) + ": none of its rank files");
    p.fp8 = take_fp8.want;
    p.next_step = f.next;
    p.scaler = f.scaler;
    if (scaler && scaler->config().enabled) {
      try {
        validate_loss_scaler_state(scaler->config(), p.scaler);
      } catch (const InputError& x) {
        throw InputError("checkpoint " + printable(step_dir) + ": " + x.what());
      }
    }
    p.history = m.contains("history") ? m["history"] : json::object();
  } catch (const InputError& e) {
    why = e.what();
  }
  agree_on_error(world, why);
  // Every rank must have read the same manifest (a shared filesystem, one checkpoint).
  int32_t h[2] = {int32_t(std::stoul(manifest_sha.substr(0, 7), nullptr, 16)), 0};
  h[1] = -h[0];
  world.all_reduce(h, h, 2, DType::i32, ReduceOp::max);  // max(x) == -max(-x) = min(x): all equal
  agree_on_error(world, h[0] == -h[1] ? ""
                             : "checkpoint " + printable(step_dir) +
                                   ": the ranks read different manifest.json files (not one shared filesystem?)");
  static_assert(sizeof(A) == sizeof(typename ZeroState<T>::A));
  engine.import_state(st);
  if (scaler && scaler->config().enabled) scaler->set_state(p.scaler);
  return p;
}

#define DTB_INSTANTIATE_CHECKPOINT(T)                                                                                  \
  template std::vector<CheckpointSection> checkpoint_io::rank_sections<T>(                                             \
      const ZeroState<T>&, const ZeroStateIndex&, const CheckpointRunInfo&, const TrainProgress&);                    \
  template std::string save_checkpoint<T>(const std::string&, const CheckpointRunInfo&, ZeroEngine<T>&,                \
                                          const TrainProgress&, Communicator&);                                        \
  template TrainProgress load_checkpoint<T>(const std::string&, const CheckpointRunInfo&, ZeroEngine<T>&, LossScaler*, \
                                            Communicator&, const Fp8Checkpoint*);
DTB_INSTANTIATE_CHECKPOINT(float)
DTB_INSTANTIATE_CHECKPOINT(double)
DTB_INSTANTIATE_CHECKPOINT(bf16)
DTB_INSTANTIATE_CHECKPOINT(fp16)
#undef DTB_INSTANTIATE_CHECKPOINT

}  // namespace dtb
