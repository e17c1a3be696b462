// The pieces the checkpoint sources share (reference/checkpoint_file.cc,
// checkpoint_manifest.cc, checkpoint.cc): durable writes, whole-file reads, SHA-256,
// little-endian fields and the manifest's JSON. Internal to them: the API is
// reference/checkpoint.h.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/checkpoint.h"

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

/// The manifest of `run`'s checkpoint at `step` steps done (reference/checkpoint.h's
/// layout of manifest.json): run identity, loss scaler state, AdamW steps, the caller's
/// history and `ranks` (per rank: rank, file, bytes, sha256).
nlohmann::json make_manifest(const CheckpointRunInfo& run, int64_t step, int world_size, const TrainProgress& progress,
                             int64_t adamw_steps, nlohmann::json ranks);

/// Agreement: every rank passes its error ("" when fine); if any rank failed, every rank
/// throws InputError with the lowest failing rank's message, so none waits in a collective
/// the others left. Collective over `world`.
void agree(Communicator& world, const std::string& why);

/// A save's three phases (save_checkpoint is begin_save, write_rank_file of rank_sections,
/// commit_save; the asynchronous writer, checkpoint_async.h, runs the middle one in a thread).
/// begin_save: rank 0 makes DIR/step-<step> (removing an older manifest there); agreed.
/// Collective. Returns the step directory.
std::string begin_save(const std::string& dir, int64_t step, Communicator& world);

/// The sections of a rank file holding `st` at progress.next_step: "state" (next step,
/// AdamW t, seed, loss scaler), params, master (when held), m, v. Local; copies `st`.
template <typename T>
std::vector<CheckpointSection> rank_sections(const ZeroState<T>& st, const CheckpointRunInfo& run,
                                             const TrainProgress& progress);

/// Agrees on `why` (this rank's write error, "" when `mine` is durable), gathers every
/// rank's size and SHA-256, then rank 0 writes manifest.json and DIR/latest; agreed.
/// Collective. Errors: InputError, the same on every rank.
void commit_save(const std::string& dir, const std::string& sdir, const CheckpointRunInfo& run,
                 const TrainProgress& progress, int64_t adamw_steps, const FileDigest& mine, std::string why,
                 Communicator& world);

}  // namespace dtb::checkpoint_io
