"""The sweep suite's section (suites/sweep.cc): one row per layout of the same model (throughput, memory,
bubble, idle and comm shares) and the throughput and memory bars (-sweep).
"""

from ..fmt import drop_empty_columns, fmt, fmt_bytes, fmt_pct, fmt_timing, num, record_tail
from ..layout_keys import FIELD
from ..load import check_verdict
from ..plot import MEM_CATS, MEM_COLORS, byte_unit, plt
from ..registry import unit

SUITE = "sweep"
PLOTS = ("sweep",)
MODEL = "sweep/step_time_model"


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    model = next((b for b in recs if b["name"] == MODEL), None)
    recs = [b for b in recs if not b.get("skipped") and b["name"] != MODEL]
    if not recs:
        return r.generic("sweep", recs)
    failed = {c["name"].split("/")[1] for c in cs if check_verdict(c) == "failed" and c["name"].count("/") >= 2}
    theory = any("bubble" not in b and "bubble_theory" in b for b in recs)
    host = any(num(b.get("peak_host_bytes_per_rank")) for b in recs)
    moe = any("all_to_all_fraction" in b for b in recs)
    period = all("step_period_ms" in b for b in recs)  # reports before it carry the median step only
    step_col = f"step period ({unit('step_period_ms', SUITE)})" if period else f"step ({unit('step_time_ms', SUITE)})"
    headers = ["layout", "ranks", "TP×DP×PP", unit("tokens_per_s", SUITE), step_col, "peak bytes per rank"]
    headers += ["peak host bytes"] if host else []
    headers += ["bubble (theory)" if theory else "bubble", "idle share", "comm share"]
    headers += ["all-to-all share"] if moe else []
    headers += ["final loss"]
    pred = any("predicted_step_time_ms" in b for b in recs)
    headers += ["predicted step (ms)", "error"] if pred else []
    rows, cls = [], []
    for b in recs:
        lay = b.get("layout", record_tail(b["name"], "sweep"))
        bubble = num(b.get("bubble", b.get("bubble_theory")))
        dims = f"{b[FIELD.tp]}×{b.get(FIELD.dp, '?')}×{b[FIELD.pp]}" if FIELD.tp in b and FIELD.pp in b else "–"
        if num(b.get(FIELD.cp)) and b[FIELD.cp] > 1:  # context parallelism: a dimension beside the three
            dims += f" (CP {b[FIELD.cp]})"
        row = [f"`{lay}`", fmt(b.get("ranks")), dims, fmt(num(b.get("tokens_per_s")), 5),
               fmt(num(b.get("step_period_ms")), 4) if period else fmt_timing(b.get("step_time_ms")),
               fmt_bytes(num(b.get("peak_bytes_per_rank")))]
        row += [fmt_bytes(num(b.get("peak_host_bytes_per_rank")))] if host else []
        row += [fmt_pct(bubble) if bubble is not None else "–", fmt_pct(num(b.get("idle_fraction"))),
                fmt_pct(num(b.get("comm_fraction")))]
        row += [fmt_pct(num(b.get("all_to_all_fraction")))] if moe else []
        row += [fmt(num(b.get("final_loss")), 6)]
        if pred:
            err = num(b.get("prediction_error"))
            row += [fmt(num(b.get("predicted_step_time_ms")), 4), f"{100 * err:+.1f}%" if err is not None else "–"]
        rows.append(row)
        cls.append("fail" if lay in failed else None)
    headers, rows = drop_empty_columns(headers, rows, keep=1)
    r.doc.table(headers, rows, row_cls=cls)
    notes = []
    for key, word, pick in (("tokens_per_s", "highest throughput", max), ("peak_bytes_per_rank",
                                                                          "least memory per rank", min)):
        vals = [(num(b.get(key)), b) for b in recs if num(b.get(key))]
        if len({v for v, _ in vals}) > 1:
            b = pick(vals, key=lambda x: x[0])[1]
            notes.append(f"{word}: `{b.get('layout', b['name'])}`")
    if notes:
        r.doc.p("; ".join(notes).capitalize()[:1] + "; ".join(notes)[1:] + ".")
    r.doc.p(("Step period: the slowest rank's mean step time after the first (step_time_ms has each step's "
             "slowest rank); " if period else "Step: the median of the slowest rank's step time; ") +
            "peak: the busiest rank's device bytes, all "
               "categories at once; idle and comm: shares of the ranks' step time, mean over ranks." +
               (" All-to-all: an MoE layer's dispatch and combine, apart from comm." if moe else "") +
               (" The bubble is the schedule's closed form, not a measurement; a pipeline rank waiting for a "
                "message counts that wait as comm, so compare it with the comm share rather than idle."
                if theory else ""), "note")
    if model is not None:
        r.doc.p(f"Step-time model (docs/plan.md), calibrated in the same run: over {model.get('layouts_compared')} "
                f"layouts, mean absolute percentage error {fmt_pct(num(model.get('mape')))}, Kendall τ "
                f"{fmt(num(model.get('kendall_tau')), 3)} between predicted and measured step times.", "note")
    na = data.get("not_applicable") or []
    if na:
        r.doc.p("Not applicable to this model and world: " + "; ".join(
            f"`{x.get('layout')}` ({x.get('reason', '')})" for x in na if isinstance(x, dict)) + ".", "note")
    plot_sweep(r, recs)


def plot_sweep(r, recs):
    pts = [b for b in recs if num(b.get("tokens_per_s")) is not None]
    if len(pts) < 2:
        return
    p = plt()
    from matplotlib.patches import Patch
    labels = [str(b.get("layout", record_tail(b["name"], "sweep"))) for b in pts]
    fig, (ax, ax2) = p.subplots(1, 2, figsize=(12.5, 1.2 + 0.42 * len(pts)), sharey=True, constrained_layout=True)
    y = range(len(pts))
    tps = [num(b["tokens_per_s"]) for b in pts]
    ax.barh(y, tps, color="#4c72b0", height=0.6)
    for i, v in enumerate(tps):
        ax.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s (higher is better)")
    ax.set_title("Throughput per layout")
    ax.set_xlim(0, max(tps) * 1.18)
    peaks = [num(b.get("peak_bytes_per_rank")) or 0 for b in pts]
    unit, scale = byte_unit(max(peaks) if peaks else 0)
    cats = [k for k in MEM_CATS if any(isinstance(b.get("peak_bytes_by_category"), dict) and
                                       num(b["peak_bytes_by_category"].get(k)) for b in pts)]
    if cats:
        for i, b in enumerate(pts):
            left = 0.0
            for k in cats:
                v = (num(b["peak_bytes_by_category"].get(k)) or 0) / scale
                ax2.barh(i, v, left=left, color=MEM_COLORS[k], height=0.6, edgecolor="white", lw=0.5)
                left += v
            ax2.plot([peaks[i] / scale] * 2, [i - 0.38, i + 0.38], color="black", lw=2)
        handles = [Patch(color=MEM_COLORS[k], label=k) for k in cats]
        handles.append(p.Line2D([], [], color="black", lw=2, label="peak, all at once"))
        ax2.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        ax2.barh(y, [v / scale for v in peaks], color="#8172b3", height=0.6)
    ax2.set_xlabel(f"peak device bytes per rank ({unit}, lower is better)")
    ax2.set_title("Memory per rank (busiest rank)")
    r.save(fig, "sweep", "throughput and memory per layout",
              "Each layout of the same model on the same ranks: tokens/s (left) and the busiest rank's peak "
              "device bytes (right" + (": each category's own peak stacked; the black tick is the peak of all "
                                       "categories at once, at most the stack's length since categories can "
                                       "peak at different moments" if cats else "") + ").")
