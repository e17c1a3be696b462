"""The recompute suite's section (suites/recompute.cc): time overhead and activation bytes saved per
recompute mode, measured and predicted, and the step-times chart (-step-times-recompute).
"""

from ..fmt import fmt_pct, fmt_timing, num, pair_bytes, record_tail
from ..plot import plot_step_times
from ..registry import unit

SUITE = "recompute"
PLOTS = ("step-times-recompute",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    recs = [b for b in recs if not b.get("skipped")]
    rows = []
    for b in recs:
        rows.append([f"`{b.get('recompute', record_tail(b['name'], 'recompute'))}`", fmt_timing(b.get("step_time_ms")),
                     fmt_pct(num(b.get("overhead"))), fmt_pct(num(b.get("predicted_extra_flops"))),
                     pair_bytes(b, "activation_bytes", "predicted_activation_bytes"),
                     fmt_pct(num(b.get("activation_saving"))),
                     pair_bytes(b, "workspace_bytes", "predicted_workspace_bytes")])
    r.doc.table(["recompute", f"step ({unit('step_time_ms', SUITE)})", "time overhead", "predicted extra FLOPs",
                 "activation peak (pred.)", "activation saving", "workspace peak (pred.)"], rows)
    r.doc.p("Rank 0's bytes; overhead and saving are against `none`.", "note")
    plot_step_times(r, "recompute", recs, "recompute")
