// The pieces the checkpoint sources share (reference/checkpoint/checkpoint_file.cc,
// checkpoint_manifest.cc, checkpoint.cc): durable writes, whole-file reads, SHA-256,
// little-endian fields and the manifest's JSON. Internal to them: the API is
// reference/checkpoint.h.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/checkpoint/checkpoint.h"

namespace dtb::checkpoint_io {

/// strerror(errno).
std::string errno_text();

/// SHA-256 of a then b, as 64 hex digits. Aborts when OpenSSL fails.
std::string sha256_hex(const char* a, size_t na, const char* b, size_t nb);

/// fsync of a directory ("" : the working directory). Errors: InputError naming it.
void fsync_dir(const std::string& dir);

/// Writes `n` bytes to `path`'s temporary, fsyncs, renames over `path`, fsyncs the directory.
/// Errors: InputError "checkpoint file <path>: <what failed>".
void write_durably(const std::string& path, const char* data, size_t n);

/// The whole file, or InputError "<what> <path>: missing / not a regular file / unreadable".
std::vector<char> read_all(const std::string& path, const std::string& what);

/// A little-endian field of `buf` at byte `at` (the format is little-endian; checked at
/// compile time in checkpoint_file.cc).
template <typename V>
void put(std::vector<char>& buf, size_t at, V v) {
  std::memcpy(buf.data() + at, &v, sizeof v);
}
template <typename V>
V get(const std::vector<char>& buf, size_t at) {
  V v;
  std::memcpy(&v, buf.data() + at, sizeof v);
  return v;
}

/// The "state" section of a rank file: next step, AdamW t, seed, loss scaler state.
struct StateFields {
  int64_t next = 0, t = 0;
  uint64_t seed = 0;
  LossScalerState scaler;
};

/// The "state" section of `fields` (48 bytes: 6 little-endian 8-byte words).
CheckpointSection state_section(const StateFields& fields);

/// The "state" section of rank file `path`'s `sections`, checked: present and 48 bytes, its
/// next step `step` (the manifest's), its seed `seed`, t in [0, step]. Errors: InputError
/// "checkpoint file <path>: ...".
StateFields read_state(const std::vector<CheckpointSection>& sections, const std::string& path, int64_t step,
                       uint64_t seed);

/// The section named `name` of `sections`, or null.
const CheckpointSection* find_section(const std::vector<CheckpointSection>& sections, const std::string& name);

/// An index section ("index.params", "index.state") of `index` (ZeroStateIndex's): runs of
/// consecutive full-model indices as i64 triples (global, position, count); -1 is in none.
CheckpointSection index_section(const std::string& name, const std::vector<int64_t>& index);

/// The sections "fp8" (f32: c.values) and "index.fp8" (raw i64: c.history_len, then c.layers) of
/// a rank file; none when c.history_len is 0.
std::vector<CheckpointSection> fp8_sections(const Fp8Checkpoint& c);

/// The FP8 layers a load needs and which of them some file has given (`found`, one flag per
/// want.layers entry): each rank file's "fp8" sections (fp8_sections') offer theirs.
struct Fp8Take {
  Fp8Checkpoint want;  // history_len and layers as the run holds them; values filled in
  std::vector<char> found;
  explicit Fp8Take(const Fp8Checkpoint& w);
  /// Takes the layers of `want` that rank file `path`'s `sections` hold (none: nothing); a layer
  /// taken before must be bitwise the same here. Errors: InputError "checkpoint file <path>: ..."
  /// for one fp8 section without the other, either malformed, a size that is not its layers',
  /// another history length, or a layer whose state differs from another file's.
  void offer(const std::vector<CheckpointSection>& sections, const std::string& path);
  /// Errors: InputError "<read> holds no FP8 scaling state of transformer layer <l> ..." for the
  /// first layer not found; `read` names what was offered ("checkpoint file <path>", or
  /// "checkpoint <dir>: none of its rank files").
  void check_complete(const std::string& read) const;
};

/// Rank `r`'s file in `step_dir` and its size and checksum, as `manifest` lists them.
/// Errors: InputError "checkpoint <step_dir>: manifest.json's entry for rank <r> is malformed".
std::pair<std::string, FileDigest> rank_file_of(const nlohmann::json& manifest, int r, const std::string& step_dir);

/// Every rank file of the checkpoint `manifest` (saved on another layout than `run`'s)
/// read and verified, their elements placed by their index in the full model, and the state
/// of the engine whose index and shape are `want` and `shape` taken from them (padding 0).
/// Sets `fields` (the same in every file). Errors: InputError naming the file or the first
/// element no file holds. Local (every rank reads every file).
/// `fp8` (may be null) is offered every file's FP8 sections.
template <typename T>
ZeroState<T> reshard_state(const std::string& step_dir, const nlohmann::json& manifest, const CheckpointRunInfo& run,
                           const ZeroStateIndex& want, const ZeroStateShape& shape, StateFields& fields,
                           Fp8Take* fp8 = nullptr);

/// The manifest of `run`'s checkpoint at `step` steps done (reference/checkpoint/checkpoint.h's
/// layout of manifest.json): run identity, loss scaler state, AdamW steps, the caller's
/// history and `ranks` (per rank: rank, file, bytes, sha256).
nlohmann::json make_manifest(const CheckpointRunInfo& run, int64_t step, int world_size, const TrainProgress& progress,
                             int64_t adamw_steps, nlohmann::json ranks);

/// A save's three phases (save_checkpoint is begin_save, write_rank_file of rank_sections,
/// commit_save; the asynchronous writer, checkpoint_async.h, runs the middle one in a thread).
/// begin_save: rank 0 makes DIR/step-<step> (removing an older manifest there); agreed.
/// Collective. Returns the step directory.
std::string begin_save(const std::string& dir, int64_t step, Communicator& world);

/// The sections of a rank file holding `st` at progress.next_step: "state" (next step,
/// AdamW t, seed, loss scaler), params, master (when held), m, v, the index of their
/// elements in the full model (`index`, the engine's state_index(): "index.params",
/// "index.state"), and progress.fp8's (fp8_sections). Local; copies `st`.
template <typename T>
std::vector<CheckpointSection> rank_sections(const ZeroState<T>& st, const ZeroStateIndex& index,
                                             const CheckpointRunInfo& run, const TrainProgress& progress);

/// Agrees on `why` (this rank's write error, "" when `mine` is durable), gathers every
/// rank's size and SHA-256, then rank 0 writes manifest.json and DIR/latest; agreed.
/// Collective. Errors: InputError, the same on every rank.
void commit_save(const std::string& dir, const std::string& sdir, const CheckpointRunInfo& run,
                 const TrainProgress& progress, int64_t adamw_steps, const FileDigest& mine, std::string why,
                 Communicator& world);

}  // namespace dtb::checkpoint_io
