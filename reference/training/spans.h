// Per-rank timing spans of a training run (DESIGN.md, "Timing and traces"): what each
// rank did when, per step — compute.forward / backward / optimizer, comm.<op>, and idle
// (the rest of a step). Seconds on kernels/timer.h's now_seconds() clock (steady_clock,
// so comparable between ranks of one node only). Exported by harness/trace.h.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtb {

/// Every span name a recorder accepts, in a fixed order (its index is the name's wire
/// form in harness/trace.h's gather): compute.*, comm.<Communicator op>, idle.
std::span<const std::string_view> span_names();
/// Index of `name` in span_names(), or -1 when it is not there.
int span_name_index(std::string_view name);

/// One interval on one rank: `name` points into span_names() (static storage), `step` the
/// training step it belongs to, start_s <= end_s in seconds on now_seconds()'s clock.
struct Span {
  std::string_view name;
  int64_t step = 0;
  double start_s = 0;
  double end_s = 0;
  double duration_s() const { return end_s - start_s; }
};

/// Records spans on this rank. A disabled recorder (the default) records nothing, reads
/// no clock and allocates nothing, so instrumented code may always call it. Not thread-safe.
///
/// Usage, per step:
///   auto step = rec.step_scope(s);                 // the step's window
///   { auto f = rec.scope("compute.forward", s); ...; ops.synchronize(); f.end(); }
///   step.end();                                    // appends idle spans for step s
class SpanRecorder {
 public:
  /// Times from construction (or begin) to end() (or destruction). From a disabled
  /// recorder it is inert. Move-only.
  class Scope {
   public:
    Scope() = default;
    Scope(Scope&& o) noexcept { *this = std::move(o); }
    Scope& operator=(Scope&& o) noexcept;
    ~Scope() { end(); }
    /// Ends the span now (reads the clock once); later calls do nothing.
    void end();

   private:
    friend class SpanRecorder;
    Scope(SpanRecorder* rec, int name, int64_t step, double start)
        : rec_(rec), name_(name), step_(step), start_s_(start) {}
    SpanRecorder* rec_ = nullptr;  // null: inert
    int name_ = 0;                 // index in span_names(); -1: a step window
    int64_t step_ = 0;
    double start_s_ = 0;
  };

  explicit SpanRecorder(bool enabled = false) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }

  /// A span `name` (one of span_names(), not "idle") of `step`, starting now. Call
  /// Ops::synchronize() before ending a span around queued GPU work. Errors: an unknown
  /// name or "idle" aborts (a programming error), also when disabled.
  Scope scope(std::string_view name, int64_t step);
  /// The window of `step`, starting now; when it ends, idle spans fill its uncovered time
  /// (see add_step).
  Scope step_scope(int64_t step);

  /// Appends a span with given times (seconds, start_s <= end_s). Same name rules as
  /// scope(). Nothing when disabled.
  void add(std::string_view name, int64_t step, double start_s, double end_s);
  /// Records the window [start_s, end_s] of `step` and appends "idle" spans for every gap
  /// in it not covered by the union of the step's other spans (clipped to the window).
  /// Call it after the step's spans are in. Nothing when disabled.
  void add_step(int64_t step, double start_s, double end_s);

  /// Every span so far, in the order recorded (idle spans of a step after its others).
  const std::vector<Span>& spans() const { return spans_; }
  /// Duration of `step`'s window in seconds (0 when add_step was not called for it).
  double step_seconds(int64_t step) const;
  /// Seconds per span name within `step` (durations summed; names absent have no entry).
  /// With non-overlapping spans and idle filled, the values sum to step_seconds(step).
  std::map<std::string, double> breakdown(int64_t step) const;
  /// Drops every span and step window.
  void clear();

 private:
  struct Window {
    int64_t step;
    double start_s, end_s;
  };
  bool enabled_;
  std::vector<Span> spans_;
  std::vector<Window> steps_;
};

/// rec->scope(name, step), or an inert Scope when rec is null: for code that takes an
/// optional SpanRecorder*.
SpanRecorder::Scope span_scope(SpanRecorder* rec, std::string_view name, int64_t step);

}  // namespace dtb
