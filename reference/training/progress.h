// Progress of long runs for the person watching them. The trainers report each training
// step they finish here; the harness decides what to show (harness/main.cc: a live line
// on rank 0 when its output is a terminal, nothing otherwise). Without a sink installed,
// reporting costs one branch.
#pragma once
#include <cstdint>

namespace dtb {

/// Where progress goes. Not thread-safe: one per process, used from the rank's thread.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  /// A training loop finished step `done` (1-based) of `total`.
  virtual void step(int64_t done, int64_t total) = 0;
  /// Erases whatever the sink has on the current output line, before other output.
  virtual void clear() = 0;
};

/// Installs `sink` (not owned; null: none) for this process; returns the previous one.
ProgressSink* set_progress_sink(ProgressSink* sink);
/// Reports a finished training step to the installed sink (nothing without one).
void report_progress(int64_t done, int64_t total);
/// Asks the installed sink to clear its line (nothing without one).
void clear_progress();

}  // namespace dtb
