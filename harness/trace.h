// Chrome trace export of per-rank spans (reference/training/spans.h): gathered to rank 0 over the
// world, written as Trace Event Format JSON that Perfetto and chrome://tracing open, one
// track (thread) per rank.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"
#include "reference/training/spans.h"

namespace dtb {

/// Spans as doubles for the wire, 4 per span: {name index in span_names(), step, start_s,
/// end_s} (steps are exact in a double below 2^53).
std::vector<double> spans_to_doubles(const std::vector<Span>& spans);
/// The inverse of spans_to_doubles. Errors: throws std::runtime_error when the size is
/// not a multiple of 4 or a name index is outside span_names().
std::vector<Span> spans_from_doubles(const std::vector<double>& wire);

/// Every rank's spans on rank 0, indexed by rank (size world.size()); other ranks get an
/// empty vector. Collective over `world` (host buffers: an MPI communicator).
std::vector<std::vector<Span>> gather_spans(Communicator& world, const std::vector<Span>& mine);

/// The Trace Event Format object {"traceEvents": [...], "displayTimeUnit": "ms"}: per rank
/// r a metadata event {"ph": "M", "name": "thread_name", "pid": 0, "tid": r, "args":
/// {"name": "rank r"}}, and per span a complete event {"ph": "X", "pid": 0, "tid": r,
/// "name", "cat" (the name before its first dot), "ts", "dur", "args": {"step"}}, ts and
/// dur in microseconds, ts from the earliest span start over all ranks (so ts >= 0).
nlohmann::json make_chrome_trace(const std::vector<std::vector<Span>>& per_rank);

/// Writes make_chrome_trace(per_rank) to `path` atomically (write_json_atomic).
/// Errors: throws std::runtime_error naming the path when it cannot be written.
void write_chrome_trace(const std::string& path, const std::vector<std::vector<Span>>& per_rank);

/// `dtbench run --trace PATH`: every rank's spans gathered (gather_spans) and written by rank 0
/// (write_chrome_trace), the path printed. Collective over `world`. Returns false on rank 0 when
/// the file could not be written, said on stderr as `dtbench: error: ...`; true elsewhere.
bool write_run_trace(const std::string& path, Communicator& world, const SpanRecorder& spans);

}  // namespace dtb
