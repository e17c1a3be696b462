"""The gemm suite's section (suites/gemm.cc): time and TFLOP/s per GEMM shape and precision, relative to
the measured square GEMM. No plot.
"""

from ..fmt import fmt, fmt_pct, num, record_tail
from ..registry import unit

SUITE = "gemm"
PLOTS = ()


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    rows, cls = [], []
    for b in recs:
        if b.get("skipped"):
            rows.append([f"`{record_tail(b['name'], 'gemm')}`", "", "", "", "", "skipped", b.get("skip_message", ""), ""])
            cls.append("skip")
            continue
        rows.append([f"`{record_tail(b['name'], 'gemm')}`", str(b.get("precision", "")), fmt(b.get("M")),
                     fmt(b.get("N")), fmt(b.get("K")), fmt(num(b.get("real_time")), 4) + " " + str(b.get("time_unit", "")),
                     fmt(num(b.get("tflops")), 4), fmt_pct(num(b.get("fraction_of_peak")))])
        cls.append(None)
    r.doc.table(["GEMM", "precision", "M", "N", "K", "time", unit("tflops", SUITE), "of the square GEMM"], rows,
                row_cls=cls)
    dev = data.get("device")
    r.doc.p(f"TFLOP/s = 2 M N K / time, slowest rank{f', on {dev}' if dev else ''}. The last column is "
               "relative to the measured square (`peak`) GEMM of the same precision, not to the hardware's "
               "datasheet peak, so it can exceed 100%.", "note")
