"""The overlap suite's section (suites/overlap.cc): step time with and without overlapping gradient
communication per ZeRO stage and bucket, and the step-times chart (-step-times-overlap).
"""
from collections import OrderedDict

from ..fmt import fmt, fmt_bytes, fmt_timing, num, parse_name_fields
from ..plot import plot_step_times
from ..registry import unit

SUITE = "overlap"
PLOTS = ("step-times-overlap",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    recs = [b for b in recs if not b.get("skipped")]
    by = OrderedDict()
    for b in recs:
        f = parse_name_fields(b["name"])
        by.setdefault((f.get("zero", "?"), b.get("reduce_bucket_size", f.get("reduce_bucket_size"))), {})[
            f.get("overlap_comm", "?")] = b
    rows = []
    for (z, bucket), v in by.items():
        off, on = v.get("false", {}), v.get("true", {})
        rows.append([str(z), fmt_bytes(num(bucket) * 4) + f" ({fmt(bucket)} elements)" if num(bucket) else "–",
                     fmt_timing(off.get("step_time_ms")), fmt_timing(on.get("step_time_ms")),
                     f"{fmt(num(on.get('gain')), 3)}×" if "gain" in on else "–"])
    step = f"step ({unit('step_time_ms', SUITE)})"
    r.doc.table(["ZeRO stage", "reduce bucket (fp32)", f"overlap off: {step}", f"overlap on: {step}",
                 "gain (off / on)"], rows)
    plot_step_times(
        r, "overlap", recs, "reduce bucket and overlap_comm",
        label=lambda b: (f"bucket {fmt(num(b.get('reduce_bucket_size')))}, overlap "
                         f"{'on' if parse_name_fields(b['name']).get('overlap_comm') == 'true' else 'off'}"),
        color=lambda b: "#dd8452" if parse_name_fields(b["name"]).get("overlap_comm") == "true" else "#4c72b0")
