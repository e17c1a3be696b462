"""The offload suite's section (suites/offload.cc): step time, model-state bytes on device and host,
slowdown and bytes saved per variant, and the step-times chart (-step-times-offload).
"""

from ..fmt import fmt, fmt_bytes, fmt_timing, num, record_tail
from ..plot import plot_step_times
from ..registry import unit

SUITE = "offload"
PLOTS = ("step-times-offload",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    recs = [b for b in recs if not b.get("skipped")]
    rows = []
    for b in recs:
        rows.append([f"`{record_tail(b['name'], 'offload')}`", fmt_timing(b.get("step_time_ms")),
                     fmt_bytes(num(b.get("device_model_state_bytes"))), fmt_bytes(num(b.get("host_model_state_bytes"))),
                     f"{fmt(num(b.get('slowdown')), 3)}×" if "slowdown" in b else "–",
                     fmt_bytes(num(b.get("device_bytes_saved"))) if "device_bytes_saved" in b else "–"])
    r.doc.table(["variant", f"step ({unit('step_time_ms', SUITE)})", "device model states", "host model states",
                 "slowdown", "device bytes saved"], rows)
    plot_step_times(r, "offload", recs, "variant")
