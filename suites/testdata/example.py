"""The test-only example suite's section (suites/testdata/example_suite.cc): its one record in a table.
Found by scripts/report.py and scripts/compare.py when this directory is in $DTB_SUITE_PATH; a module
outside the package imports dtbreport by its absolute name.
"""
from dtbreport.fmt import fmt, fmt_si, fmt_timing, num, record_tail
from dtbreport.registry import unit

SUITE = "example"
PLOTS = ()


def render(r, recs, cs, data):
    """The table: n, the time (median, min–max) and the rate of each record."""
    rows = [[f"`{record_tail(b['name'], SUITE)}`", fmt(b.get("n")), fmt_timing(b.get("time_us")),
             fmt_si(num(b.get("items_per_s")), "items/s")] for b in recs]
    r.doc.table(["case", "n", f"time ({unit('time_us', SUITE)}): median (min–max)", "rate"], rows)
