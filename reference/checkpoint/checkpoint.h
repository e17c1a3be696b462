// Training checkpoints that resume bit for bit: every rank saves the state it holds (its
// ZeroEngine's parameters, master weights, AdamW moments and step count, the loss scaler,
// the data position) to its own file, rank 0 a manifest that makes the step complete
// (DeepSpeed save_checkpoint/load_checkpoint's per-rank files and `latest` tag; PyTorch
// Distributed Checkpoint's per-rank shards plus a metadata file written last). Layout-
// independent: each rank file also stores where each of its elements sits in the full model
// (ZeroStateIndex), so a checkpoint of any layout (TP, CP, PP, DP, EP, SP, virtual stages, the
// stage split, ZeRO stage, offload) loads into any other of the same model, precision and FP8 recipe —
// resharded on load, as PyTorch Distributed Checkpoint reshards and DeepSpeed's universal
// checkpoint (Lian et al. 2024) converts. Not here: retention of old checkpoints; asynchronous
// saving is reference/checkpoint/checkpoint_async.h's.
// Sources: checkpoint_file.cc (rank files, durable writes), checkpoint_manifest.cc (the
// run identity, the manifest, step directories, the history), checkpoint.cc (save, load),
// checkpoint_reshard.cc (loading another layout's files).
//
//   DIR/step-<k>/rank-<r>.bin    one per rank: header, section table, payload, SHA-256
//   DIR/step-<k>/manifest.json   rank 0, written last: run identity, per-rank size + sha256
//   DIR/latest                   text "<k>\n", updated after the manifest
//
// Every file goes to a temporary in its directory, is fsynced and renamed, then the
// directory is fsynced: a crash leaves the old file or the new one, and a step directory
// without a manifest is incomplete and never loaded. k counts the steps done: resuming
// from step-<k> runs steps k, k+1, ... (0-based) of the same trajectory.
//
// Rank file (little-endian, 72-byte header then payload):
//   0 magic "DTBCKPT\0" | 8 u32 format version | 12 u32 sections | 16 i32 rank |
//   20 i32 world size | 24 i64 step | 32 u64 payload bytes | 40 sha256[32] of bytes
//   [0, 40) and the payload; payload = sections x 48-byte entries (name[24], dtype[8],
//   u64 offset in the payload, u64 bytes), then the sections' bytes. Sections: "state" (raw:
//   next step, AdamW t, seed, loss scaler), "params" (T), "master" (fp32, when held), "m",
//   "v", and the index: "index.params" and "index.state" (raw, little-endian i64 triples
//   (global index, position in params / in m, v and master, count): runs of consecutive
//   elements; a shard's padding is in no run); under FP8's delayed recipe "fp8" (f32: the
//   scaling state of the layers the rank holds, Fp8Checkpoint's values) and "index.fp8" (raw
//   i64: the history length, then those layers' indices).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "reference/model/gpt.h"
#include "reference/training/loss_scaler.h"
#include "reference/analytic/memory_model.h"
#include "reference/layout/process_grid.h"
#include "reference/training/fp8_linear.h"
#include "reference/training/trainer.h"
#include "reference/zero/zero.h"

namespace dtb {

/// The rank file format this build writes and reads.
inline constexpr uint32_t kCheckpointFormatVersion = 1;

/// One named section of a rank file: `dtype` "f32", "f64", "bf16", "f16" (DType names) or
/// "raw"; `bytes` its content.
struct CheckpointSection {
  std::string name;   // at most 23 characters
  std::string dtype;  // at most 7 characters
  std::vector<char> bytes;
};

/// Who wrote a rank file: checked on reading.
struct RankFileId {
  int rank = 0, world_size = 1;
  int64_t step = 0;
};

/// A written file's size in bytes and SHA-256 (64 hex digits), as the manifest records it.
struct FileDigest {
  uint64_t bytes = 0;
  std::string sha256;
};

/// Writes `sections` to `path` in the rank file format, durably and atomically (temporary
/// file in the same directory, fsync, rename, directory fsync). Local. Errors: InputError
/// "checkpoint file <path>: <what failed>" (e.g. the directory is not writable).
FileDigest write_rank_file(const std::string& path, const RankFileId& id,
                           const std::vector<CheckpointSection>& sections);

/// Reads and verifies a rank file: size (and `expect`'s size and checksum when given, from
/// the manifest), magic, format version, rank, world size and step against `id`, the
/// SHA-256, the section table. Local. Errors: InputError "checkpoint file <path>: <problem>"
/// (missing, truncated, bad magic, checksum mismatch, ...), one line.
std::vector<CheckpointSection> read_rank_file(const std::string& path, const RankFileId& id,
                                              const FileDigest* expect = nullptr);

/// Writes `text` to `path` durably and atomically (temporary + fsync + rename + directory
/// fsync). Errors: InputError naming the path and the failed call.
void write_file_durably(const std::string& path, const std::string& text);

/// What identifies a run for its checkpoints: a resume must match every field (the data
/// position is a step index, so global_batch and seq_len too; micro_batches may differ).
struct CheckpointRunInfo {
  ParallelLayout layout;
  /// The ZeRO settings: their stage and offload_optimizer identify the run (the manifest's
  /// layout.zero_stage and layout.offload_optimizer); buckets, overlap and the communication
  /// type may change between a save and a resume (each step's result is the same).
  ZeroConfig zero;
  Precision precision = Precision::fp32;
  /// The FP8 recipe over `precision`'s storage (LayoutSpec::fp8), or none: every setting of it
  /// (the manifest's "fp8", fp8_settings_json's keys) identifies the run, so a resume into another
  /// recipe, format, history length, margin or amax algorithm, or into or out of FP8, is refused.
  std::optional<Fp8Settings> fp8;
  GptConfig model;
  uint64_t seed = 0;
  std::string dataset_sha256;
  int global_batch = 0, seq_len = 0;
  bool loss_scaling = false;
  /// The training recipe a resume keeps unless told otherwise, under the train section's key
  /// names (checkpoint_recipe_keys): lr, beta1, beta2, eps, weight_decay, grad_clip,
  /// micro_batches, recompute. A manifest written before it was recorded has none (unchecked).
  nlohmann::json recipe = nlohmann::json::object();
  /// Recipe keys a resume may change (`dtbench run --allow-changed KEY`); the report lists the
  /// changes (recipe_changes).
  std::vector<std::string> allowed_changes;
  int world_size() const { return int(layout.world()); }
};

/// The recipe keys a checkpoint records and a resume checks: lr, beta1, beta2, eps,
/// weight_decay, grad_clip, micro_batches, recompute.
const std::vector<std::string>& checkpoint_recipe_keys();

/// The recipe keys whose value in the manifest `m` differs from `run.recipe`'s, each as
/// {"key", "saved", "now"} (an empty array for a manifest without a recipe).
nlohmann::json recipe_changes(const nlohmann::json& m, const CheckpointRunInfo& run);

/// The identity of a run of `model` on `layout` with `zero` in `precision` (with the FP8 recipe
/// `fp8`, or none) and `cfg` (seed, global batch, seq_len, loss scaling; the recipe: AdamW's lr,
/// betas, eps and weight decay, grad_clip, micro_batches and `recompute`) on the dataset of
/// `dataset_sha256` ("": not checked).
CheckpointRunInfo checkpoint_run_info(const GptConfig& model, const ParallelLayout& layout, const ZeroConfig& zero,
                                      Precision precision, const TrainConfig& cfg, const std::string& dataset_sha256,
                                      Recompute recompute = Recompute::none,
                                      const std::optional<Fp8Settings>& fp8 = std::nullopt);

/// "TP2xPP2xDP1 zero0", "CP2xDP2 zero3", "DP4xEP2 zero2" (TP, CP and PP when > 1, "xEP<n>"
/// when expert parallel > 1, the schedule when PP > 1, " offload"): a layout as the mismatch
/// messages name it.
std::string describe_layout(const CheckpointRunInfo& run);

/// The state outside the engine that a checkpoint carries.
struct TrainProgress {
  int64_t next_step = 0;  // steps done = the step index the run continues with
  LossScalerState scaler;
  /// The caller's record of the steps done (e.g. per-step losses), kept in the manifest
  /// ("history") so a resumed run can report its whole curve; any JSON, rank 0's.
  nlohmann::json history = nlohmann::json::object();
  /// The delayed FP8 recipe's state of the layers this rank holds (empty otherwise).
  Fp8Checkpoint fp8;
};

/// A run's record of the steps done, kept in each checkpoint's manifest ("history") so that
/// a resumed run reports its whole loss curve: per step the loss, and the loss scale and
/// skip (0 / 1) with loss scaling, the global gradient norm (NaN where not finite or skipped).
struct TrainHistory {
  std::vector<double> losses, loss_scales, grad_norms;
  std::vector<int> skipped;
  /// Appends `run`'s steps (a parallel_train run's, in order).
  void append(const TrainRun& run);
};

/// `h` as the manifest's "history": {"losses", "loss_scales", "grad_norms", "skipped"}, a
/// non-finite number as null.
nlohmann::json history_to_json(const TrainHistory& h);

/// A manifest's history of `steps` steps, as a run of `cfg` records it (loss scales and
/// skips with cfg.loss_scaler.enabled, gradient norms always — NaN for a history written when
/// they were kept only with clipping, resumed without it). Errors: InputError
/// "checkpoint <step_dir>: manifest.json's history does not hold the <steps> steps the train
/// suite records" when it is missing, malformed or of another length.
TrainHistory history_from_json(const nlohmann::json& manifest, int64_t steps, const TrainConfig& cfg,
                               const std::string& step_dir);

/// The history of the progress load_checkpoint read from `step_dir`: its progress.next_step
/// steps, as history_from_json (the same errors).
TrainHistory history_of(const TrainProgress& progress, const TrainConfig& cfg, const std::string& step_dir);

/// DIR/step-<k>.
std::string checkpoint_step_dir(const std::string& dir, int64_t step);

/// The step directory `resume_from` names: "" gives "" (a fresh run); "latest" reads
/// `dir`/latest and gives `dir`/step-<k>, or "" when `dir`/latest does not exist yet (the
/// first launch of a job that resumes on restart, as Megatron-LM's --load); any other
/// string is a step directory's path. Local. Errors: InputError for "latest" without a
/// dir, an unreadable or malformed latest file, "latest" with no latest file beside complete
/// checkpoints (step directories with a manifest, which a fresh run would overwrite), or a
/// path that is not a directory (the message names the path, not the config key: the
/// caller prefixes it).
std::string resolve_resume(const std::string& dir, const std::string& resume_from);

/// Reads `step_dir`/manifest.json and checks it against `run` (format; model, precision,
/// seed, dataset when `run`'s sha256 is not empty, global batch, sequence length, loss
/// scaling; the recipe unless allowed; another layout only with the index that reshards it —
/// a manifest without "layout_independent" resumes on its own layout and world size alone).
/// Local (e.g. rank 0 while validating a config). Returns the manifest. Errors: InputError
/// "checkpoint <step_dir>: <first mismatch>", one line; a missing manifest: the checkpoint is
/// incomplete; a key of the manifest's layout or model this build does not read ("manifest.json's
/// layout has the unknown key 'x'", "the model differs from this run's: x 1 (this run none)").
nlohmann::json check_checkpoint_manifest(const std::string& step_dir, const CheckpointRunInfo& run);

/// The layout the checkpoint `manifest` (check_checkpoint_manifest's) was saved with, as
/// describe_layout names it, when it differs from `run`'s (load_checkpoint reshards it);
/// "" for the same layout. Errors: InputError for a malformed layout field.
std::string resharded_from(const nlohmann::json& manifest, const CheckpointRunInfo& run);

/// The rank files `manifest` (check_checkpoint_manifest's) lists, each present in
/// `step_dir` with its recorded size (a stat each: no reading, no checksums — every rank
/// verifies its own file's checksum in load_checkpoint). Local, e.g. rank 0 while validating
/// a config. Errors: InputError "checkpoint file <path>: missing / truncated: N of M bytes /
/// wrong size ...", one line.
void check_checkpoint_files(const std::string& step_dir, const nlohmann::json& manifest);

/// Saves this rank's state at `progress.next_step` steps done into DIR/step-<k> (k =
/// progress.next_step): rank 0 makes the directory (removing an older manifest there),
/// every rank writes rank-<r>.bin (params, master, m, v; the "state" section: next step,
/// AdamW t, seed, loss scaler), then after all files are durable rank 0 writes the
/// manifest and DIR/latest. Collective over `world` (all ranks of the layout; an MPI
/// communicator on host memory). Returns the step directory. Errors: InputError naming
/// the file, on every rank alike (a failure anywhere is agreed before anyone continues).
template <typename T>
std::string save_checkpoint(const std::string& dir, const CheckpointRunInfo& run, ZeroEngine<T>& engine,
                            const TrainProgress& progress, Communicator& world);

/// Resumes from `step_dir`: every rank checks the manifest against `run` and reads and
/// verifies its own rank file (section sizes against engine.state_shape(), the seed, the
/// step, the loss scaler state against `scaler`'s config) — or, when the checkpoint was saved
/// on another layout (resharded_from), every rank file, whose elements it places by their
/// index in the full model and takes its own from (engine.state_index(); every element it
/// needs must be there; fp32 master weights a layout keeps with offload and the saved one did
/// not are its fp32 parameters, which they equal) —, the ranks agree on the outcome
/// and that they read the same manifest, and only then does each import its state into
/// `engine` (whose model and layout must be `run`'s) and, when loss scaling is enabled,
/// `scaler` (may be null). `fp8` (may be null; its history_len 0: nothing) names the FP8
/// layers this rank holds and their history length (ParallelGpt::fp8_checkpoint's); the
/// returned progress's fp8 holds their state, read from this rank's file or, resharding, from
/// any file that holds each (the files holding one layer must agree bitwise). Returns the next
/// step, the loss scaler state, the FP8 state and the manifest's history. Collective over
/// `world` (MPI, host memory). Errors: InputError, the same on every rank (the lowest failing
/// rank's message), before any state is modified.
template <typename T>
TrainProgress load_checkpoint(const std::string& step_dir, const CheckpointRunInfo& run, ZeroEngine<T>& engine,
                              LossScaler* scaler, Communicator& world, const Fp8Checkpoint* fp8 = nullptr);

}  // namespace dtb
