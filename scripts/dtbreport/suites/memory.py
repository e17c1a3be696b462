"""The memory suite's section (suites/memory.cc): measured peak bytes per rank and category beside the
analytic model's prediction, and the stacked bars per rank (-memory).
"""
import math
from collections import OrderedDict

from ..fmt import fmt, num, record_tail
from ..plot import MEM_CATS, MEM_COLORS, byte_unit, plt

SUITE = "memory"
PLOTS = ("memory",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    recs = [b for b in recs if not b.get("skipped")]
    cases = OrderedDict()
    for b in recs:
        tail = record_tail(b["name"], "memory")
        case, _, rk = tail.rpartition("/rank:")
        cases.setdefault(case or tail, []).append((int(rk) if rk.isdigit() else len(cases.get(case, [])), b))
    if not cases:
        return r.generic("memory", recs)
    tiers = ["device", "host"]
    used = [(t, k) for t in tiers for k in MEM_CATS
            if any((num(b.get(f"measured_{t}_{k}_bytes")) or 0) or (num(b.get(f"predicted_{t}_{k}_bytes")) or 0)
                   for b in recs)]
    mx = max((num(b.get(f"measured_{t}_{k}_bytes")) or 0) for b in recs for t, k in used) if used else 0
    unit, scale = byte_unit(mx)
    d.p(f"Peak bytes per rank and category in {unit} (the Device's accounting from the model's construction "
        "through training), beside the analytic model's prediction: a cell reads `measured` when the two agree "
        "exactly and `measured ≠ predicted` otherwise. Comm buffers are not modelled. Each category's peak is "
        "its own: they need not occur at the same moment, so a row's sum is not the rank's peak footprint.")
    rows, cls = [], []
    for case, rl in cases.items():
        groups = []  # consecutive ranks with the same cells share a row
        for rk, b in sorted(rl, key=lambda x: x[0]):
            cells, bad = [], False
            for t, k in used:
                m, pr = num(b.get(f"measured_{t}_{k}_bytes")), num(b.get(f"predicted_{t}_{k}_bytes"))
                cell = fmt(m / scale if m is not None else None, 4)
                if pr is not None and m is not None and pr != m:
                    cell = f"**{cell} ≠ {fmt(pr / scale, 4)}**"
                    bad = True
                cells.append(cell)
            if groups and groups[-1][2] == cells and groups[-1][1] == rk - 1:
                groups[-1][1] = rk
            else:
                groups.append([rk, rk, cells, bad])
        for r0, r1, cells, bad in groups:
            rows.append([f"`{case}`", str(r0) if r0 == r1 else f"{r0}–{r1}"] + cells)
            cls.append("fail" if bad else None)
    d.table(["layout", "ranks"] + [f"{t} {k}" for t, k in used], rows, row_cls=cls)
    plot_memory(r, cases, used, unit, scale)


def plot_memory(r, cases, used, unit, scale):
    p = plt()
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    n = len(cases)
    ncol = min(4, n)
    nrow = math.ceil(n / ncol)
    fig, axes = p.subplots(nrow, ncol, figsize=(3.6 * ncol + 2.2, 3.3 * nrow + 0.6), squeeze=False, sharey=True,
                           constrained_layout=True)
    # comm buffers last, so the prediction tick marks the top of the modelled categories
    order = [x for x in used if x[1] != "comm_buffer"] + [x for x in used if x[1] == "comm_buffer"]
    for ax, (case, rl) in zip(axes.flat, cases.items()):
        rl = sorted(rl, key=lambda x: x[0])
        for i, (rk, b) in enumerate(rl):
            bottom = 0.0
            for t, k in order:
                v = (num(b.get(f"measured_{t}_{k}_bytes")) or 0) / scale
                if v:
                    ax.bar(i, v, bottom=bottom, color=MEM_COLORS[k], hatch="xx" if t == "host" else None,
                           edgecolor="white", lw=0.5, width=0.7)
                bottom += v
            pred = sum((num(b.get(f"predicted_{t}_{k}_bytes")) or 0) for t, k in used) / scale
            meas = sum((num(b.get(f"measured_{t}_{k}_bytes")) or 0) for t, k in used if k != "comm_buffer") / scale
            ax.plot([i - 0.45, i + 0.45], [pred, pred], color="black", lw=2.2)
            if abs(pred - meas) > 1e-9 * max(pred, 1):
                ax.annotate("≠", (i, pred), ha="center", va="bottom", color="red", fontsize=12)
        ax.set_xticks(range(len(rl)), [str(rk) for rk, _ in rl])
        ax.set_xlabel("rank")
        ax.set_title(case, fontsize=10)
        ax.grid(axis="x", visible=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for row in range(nrow):
        axes[row][0].set_ylabel(f"peak bytes ({unit})")
    handles = [Patch(facecolor=MEM_COLORS[k], hatch="xx" if t == "host" else None, edgecolor="white",
                     label=f"{k} ({t})") for t, k in order]
    handles.append(Line2D([], [], color="black", lw=2.2, label="analytic model\n(all but comm_buffer)"))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.93), fontsize=8, title="category (tier)")
    fig.suptitle("Peak memory per rank by category, measured (stacked) vs the analytic model (black tick)")
    r.save(fig, "memory", "memory breakdown per rank",
              "Each rank's measured peak bytes per category, stacked (host-tier categories hatched; comm buffers "
              "on top, not modelled), and the analytic model's total for the modelled categories as a black "
              "tick: where the tick sits at the top of the modelled stack the model is exact. Each category's "
              "peak is its own, so the stack height is an upper bound of the rank's footprint, not its peak.")
