// Blocking and asynchronous checkpoint saves with their costs timed (reference/checkpoint/checkpoint.h's
// files and commit protocol). An asynchronous save snapshots the engine's state to host
// memory, writes this rank's file in a background thread while training goes on, and
// commits — manifest and DIR/latest, after every rank's file is durable — at the next save
// or at finish() (as PyTorch's dcp.async_save future, waited on before the next save).
// Not here: the file format (checkpoint_file.cc), loading (checkpoint.cc).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/checkpoint/checkpoint.h"

namespace dtb {

/// One save on this rank, seconds and bytes.
struct SaveTiming {
  int64_t step = 0;      // steps done at the save (DIR/step-<step>)
  uint64_t bytes = 0;    // this rank's file, bytes
  double snapshot_s = 0; // export_state + the sections' copy, on the training thread
  double write_s = 0;    // this rank's file: temporary, write, fsync, rename, directory fsync
  /// The commit: agreeing on every rank's write, gathering sizes and checksums, and on rank 0
  /// writing manifest.json and DIR/latest durably; on the training thread.
  double commit_s = 0;
  /// What the training thread spent in this save: blocking, snapshot + write + commit (and the
  /// step directory's creation); asynchronous, the snapshot and directory now, then the wait
  /// for the write (0 when it was done) and the commit at the next save or finish().
  double stall_s = 0;
};

/// Saves `engine`'s checkpoints into `dir` for the run `run`, blocking or asynchronous.
/// Collective over `world` (the layout's ranks, MPI on host memory), every call on every
/// rank in the same order. One asynchronous write at most is in flight.
template <typename T>
class CheckpointWriter {
 public:
  CheckpointWriter(std::string dir, CheckpointRunInfo run, Communicator& world, bool async);
  /// Waits for a write in flight without committing it (its step stays incomplete: no
  /// manifest). Call finish() to commit.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Saves `engine`'s state at progress.next_step. Blocking: the whole save, returns its
  /// step directory. Asynchronous: commits the save in flight first (finish()), then makes
  /// the step directory, snapshots the state and starts the write; returns the step
  /// directory committed now ("" when none was in flight). Errors: InputError, the same on
  /// every rank, naming the file (a failed write of the save in flight is reported here).
  std::string save(ZeroEngine<T>& engine, const TrainProgress& progress);
  /// Waits for the write in flight and commits it; returns its step directory ("" when none).
  /// Errors: InputError, the same on every rank, when any rank's write or the commit failed.
  std::string finish();
  /// Every save begun, in order (an asynchronous one's write_s, commit_s and stall_s complete
  /// once it is committed).
  const std::vector<SaveTiming>& timings() const { return timings_; }
  bool async() const { return async_; }

 private:
  struct InFlight;
  std::string dir_;
  CheckpointRunInfo run_;
  Communicator& world_;
  bool async_;
  std::vector<SaveTiming> timings_;
  std::unique_ptr<InFlight> flight_;
};

extern template class CheckpointWriter<float>;
extern template class CheckpointWriter<double>;
extern template class CheckpointWriter<bf16>;
extern template class CheckpointWriter<fp16>;

}  // namespace dtb
