// Chrome trace export: spans serialised to doubles, gathered to rank 0 point to point, and
// turned into Trace Event Format events.
#include "harness/trace.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "harness/report.h"

namespace dtb {

namespace {
constexpr int kGatherTag = 7411;  // the gather's point-to-point messages
constexpr size_t kWireWidth = 4;  // doubles per span
}  // namespace

std::vector<double> spans_to_doubles(const std::vector<Span>& spans) {
  std::vector<double> wire;
  wire.reserve(spans.size() * kWireWidth);
  for (const Span& s : spans)
    wire.insert(wire.end(), {double(span_name_index(s.name)), double(s.step), s.start_s, s.end_s});
  return wire;
}

std::vector<Span> spans_from_doubles(const std::vector<double>& wire) {
  if (wire.size() % kWireWidth != 0)
    throw std::runtime_error("spans_from_doubles: " + std::to_string(wire.size()) +
                             " doubles is not a whole number of spans");
  const auto names = span_names();
  std::vector<Span> spans;
  spans.reserve(wire.size() / kWireWidth);
  for (size_t i = 0; i < wire.size(); i += kWireWidth) {
    const double idx = wire[i];
    if (!(idx >= 0 && idx < double(names.size())) || idx != double(int(idx)))
      throw std::runtime_error("spans_from_doubles: bad span name index " + std::to_string(idx));
    spans.push_back({names[size_t(idx)], int64_t(wire[i + 1]), wire[i + 2], wire[i + 3]});
  }
  return spans;
}

std::vector<std::vector<Span>> gather_spans(Communicator& world, const std::vector<Span>& mine) {
  const std::vector<double> wire = spans_to_doubles(mine);
  const int n = world.size();
  std::vector<double> counts(n);  // doubles per rank (exact below 2^53)
  double my_count = double(wire.size());
  world.all_gather(&my_count, counts.data(), 1, DType::f64);
  std::vector<std::vector<Span>> out;
  if (world.rank() != 0) {
    if (my_count > 0) world.send(wire.data(), wire.size(), DType::f64, 0, kGatherTag);
    return out;
  }
  out.resize(n);
  out[0] = mine;
  for (int r = 1; r < n; ++r) {
    std::vector<double> theirs(static_cast<size_t>(counts[r]));  // not size_t(...): clang reads a declaration
    if (counts[r] > 0) world.recv(theirs.data(), theirs.size(), DType::f64, r, kGatherTag);
    out[r] = spans_from_doubles(theirs);
  }
  return out;
}

nlohmann::json make_chrome_trace(const std::vector<std::vector<Span>>& per_rank) {
  using nlohmann::json;
  double t0 = std::numeric_limits<double>::infinity();
  for (const auto& spans : per_rank)
    for (const Span& s : spans) t0 = std::min(t0, s.start_s);
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "dtbench"}}}});
  for (size_t r = 0; r < per_rank.size(); ++r) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 0}, {"tid", r},
                      {"args", {{"sort_index", r}}}});
  }
  for (size_t r = 0; r < per_rank.size(); ++r)
    for (const Span& s : per_rank[r]) {
      const std::string name(s.name);
      events.push_back({{"ph", "X"},
                        {"pid", 0},
                        {"tid", r},
                        {"name", name},
                        {"cat", name.substr(0, name.find('.'))},
                        {"ts", (s.start_s - t0) * 1e6},
                        {"dur", std::max(0.0, s.duration_s()) * 1e6},
                        {"args", {{"step", s.step}}}});
    }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const std::string& path, const std::vector<std::vector<Span>>& per_rank) {
  write_json_atomic(path, make_chrome_trace(per_rank));
}

bool write_run_trace(const std::string& path, Communicator& world, const SpanRecorder& spans) {
  const auto per_rank = gather_spans(world, spans.spans());  // collective
  if (world.rank() != 0) return true;
  try {
    write_chrome_trace(path, per_rank);
    std::printf("# trace: %s (open in https://ui.perfetto.dev)\n", path.c_str());
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtbench: error: %s\n", e.what());
    return false;
  }
}

}  // namespace dtb
