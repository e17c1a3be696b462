"""The kernels suite's section (suites/kernels.cc): Google Benchmark's runs of the single-process kernels,
their times and counters. No plot.
"""
from collections import OrderedDict

from ..fmt import counter_kind, fmt, fmt_duration, fmt_si, num, record_tail, stat
from ..load import check_verdict
from ..page import GB_KEYS

SUITE = "kernels"
PLOTS = ()


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    if not recs:
        return r.generic("kernels", recs)
    core = {"iterations", "real_time", "cpu_time", "time_unit", "error_occurred", "error_message", "label",
            "skipped", "skip_message", "big_o", "rms"}
    counters = OrderedDict()
    for b in recs:
        for k, v in b.items():
            if k not in core and k not in GB_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool):
                counters.setdefault(k, None)
    failed = {c["name"][len("kernels/"):].rsplit("/", 1)[0]: c for c in cs if check_verdict(c) == "failed"}
    agg = any(b.get("run_type") == "aggregate" for b in recs)
    rows, cls = [], []
    for b in recs:
        u = b.get("time_unit", "ns")
        name = record_tail(b.get("run_name", b["name"]), "kernels")
        row = [f"`{name}`"]
        if agg:
            row.append(str(b.get("aggregate_name", "")))
        stats = b.get("real_time_stats")
        spread = ""
        if isinstance(stats, dict) and (stats.get("n") or 0) > 1 and stat(stats, "min") is not None:
            spread = f" ({fmt_duration(stat(stats, 'min'), u)}–{fmt_duration(stat(stats, 'max'), u)})"
        row += [fmt(b.get("iterations")), fmt_duration(num(b.get("real_time")), u) + spread,
                fmt_duration(num(b.get("cpu_time")), u)]
        for k in counters:
            v = num(b.get(k))
            kind = counter_kind(k)
            row.append("–" if v is None else fmt_si(v, kind) if kind else fmt(v))
        err = b.get("error_message") or b.get("skip_message") or (
            failed[name].get("detail") if name in failed else "")
        row.append(str(err or ""))
        rows.append(row)
        cls.append("fail" if b.get("error_occurred") or name in failed else "skip" if b.get("skipped") else None)
    headers = ["kernel"] + (["aggregate"] if agg else []) + ["iterations", "real time", "CPU time"] + [
        {"FLOP/s": "FLOP/s", "B/s": "bytes/s", "items/s": "items/s"}.get(counter_kind(k), k) for k in counters]
    headers.append("error")
    if not any(r[-1] for r in rows):
        headers.pop()
        rows = [r[:-1] for r in rows]
    r.doc.table(headers, rows, row_cls=cls)
    r.doc.p("Google Benchmark runs (rank 0); times and counters as the records give them (medians over "
               "repetitions where there are several), rates with decimal SI prefixes.", "note")
