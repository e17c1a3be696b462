// Span recording: scoped timers appending {name, step, start, end}, and idle spans filling
// each step's uncovered time, computed once the step's window closes.
#include "reference/training/spans.h"

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {
namespace {

// compute.backward_input and compute.backward_weight: a zero-bubble schedule's B and W.
constexpr std::array<std::string_view, 15> kSpanNames = {
    "compute.forward",  "compute.backward",    "compute.recompute", "compute.optimizer",
    "compute.backward_input", "compute.backward_weight",
    "comm.all_reduce",  "comm.all_gather",     "comm.reduce_scatter", "comm.broadcast",
    "comm.send",        "comm.recv",           "comm.sendrecv",     "comm.barrier",
    "idle"};
constexpr int kIdle = int(kSpanNames.size()) - 1;
constexpr int kStepWindow = -1;  // Scope::name_ of a step_scope

// The index of a name a caller may record (not idle); aborts otherwise.
int recordable_index(std::string_view name) {
  const int i = span_name_index(name);
  DTB_CHECK(i >= 0 && i != kIdle, "SpanRecorder: '" + std::string(name) +
                                      "' is not a recordable span name (see span_names())");
  return i;
}

}  // namespace

std::span<const std::string_view> span_names() { return kSpanNames; }

int span_name_index(std::string_view name) {
  for (size_t i = 0; i < kSpanNames.size(); ++i)
    if (kSpanNames[i] == name) return int(i);
  return -1;
}

SpanRecorder::Scope& SpanRecorder::Scope::operator=(Scope&& o) noexcept {
  if (this != &o) {
    end();
    rec_ = std::exchange(o.rec_, nullptr);
    name_ = o.name_;
    step_ = o.step_;
    start_s_ = o.start_s_;
  }
  return *this;
}

void SpanRecorder::Scope::end() {
  if (!rec_) return;
  const double now = now_seconds();
  if (name_ == kStepWindow) rec_->add_step(step_, start_s_, now);
  else rec_->spans_.push_back({kSpanNames[name_], step_, start_s_, now});
  rec_ = nullptr;
}

SpanRecorder::Scope SpanRecorder::scope(std::string_view name, int64_t step) {
  const int i = recordable_index(name);
  if (!enabled_) return {};
  return Scope(this, i, step, now_seconds());
}

SpanRecorder::Scope SpanRecorder::step_scope(int64_t step) {
  if (!enabled_) return {};
  return Scope(this, kStepWindow, step, now_seconds());
}

void SpanRecorder::add(std::string_view name, int64_t step, double start_s, double end_s) {
  const int i = recordable_index(name);
  DTB_CHECK(start_s <= end_s, "SpanRecorder::add: span ends before it starts");
  if (enabled_) spans_.push_back({kSpanNames[i], step, start_s, end_s});
}

void SpanRecorder::add_step(int64_t step, double start_s, double end_s) {
  DTB_CHECK(start_s <= end_s, "SpanRecorder::add_step: step ends before it starts");
  if (!enabled_) return;
  steps_.push_back({step, start_s, end_s});
  // The step's spans, clipped to its window, by start; then a sweep over their union.
  std::vector<std::pair<double, double>> busy;
  for (const Span& s : spans_)
    if (s.step == step && s.name != kSpanNames[kIdle]) {
      const double a = std::max(s.start_s, start_s), b = std::min(s.end_s, end_s);
      if (a < b) busy.emplace_back(a, b);
    }
  std::sort(busy.begin(), busy.end());
  double covered_to = start_s;  // the union of busy so far ends here
  for (const auto& [a, b] : busy) {
    if (a > covered_to) spans_.push_back({kSpanNames[kIdle], step, covered_to, a});
    covered_to = std::max(covered_to, b);
  }
  if (covered_to < end_s) spans_.push_back({kSpanNames[kIdle], step, covered_to, end_s});
}

double SpanRecorder::step_seconds(int64_t step) const {
  double total = 0;
  for (const Window& w : steps_)
    if (w.step == step) total += w.end_s - w.start_s;
  return total;
}

std::map<std::string, double> SpanRecorder::breakdown(int64_t step) const {
  std::map<std::string, double> out;
  for (const Span& s : spans_)
    if (s.step == step) out[std::string(s.name)] += s.duration_s();
  return out;
}

void SpanRecorder::clear() {
  spans_.clear();
  steps_.clear();
}

SpanRecorder::Scope span_scope(SpanRecorder* rec, std::string_view name, int64_t step) {
  return rec ? rec->scope(name, step) : SpanRecorder::Scope();
}

}  // namespace dtb
