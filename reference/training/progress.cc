#include "reference/training/progress.h"

namespace dtb {
namespace {
ProgressSink* g_sink = nullptr;
}  // namespace

ProgressSink* set_progress_sink(ProgressSink* sink) {
  ProgressSink* old = g_sink;
  g_sink = sink;
  return old;
}

void report_progress(int64_t done, int64_t total) {
  if (g_sink) g_sink->step(done, total);
}

void clear_progress() {
  if (g_sink) g_sink->clear();
}

}  // namespace dtb
