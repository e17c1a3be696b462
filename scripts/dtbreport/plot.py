"""Plot helpers shared by the suite modules (matplotlib, Agg backend, imported on first use): axes in byte
units, palettes for trace spans and memory categories, the step-times chart several suites draw.

Not a suite's own plot: those live in dtbreport/suites/<suite>.py.
"""
import math
import re

from .fmt import fmt, fmt_bytes, num, record_tail, stat

_plt = None


def plt():
    global _plt
    if _plt is None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as p
        p.rcParams.update({"figure.dpi": 100, "savefig.dpi": 110, "font.size": 10, "axes.titlesize": 11,
                           "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 9,
                           "axes.spines.top": False, "axes.spines.right": False})
        _plt = p
    return _plt


def bytes_axis(ax, values, axis="x"):
    """Log2 axis over byte sizes with ticks at powers of two labelled in binary units."""
    from matplotlib.ticker import FixedLocator, NullLocator
    lo, hi = min(values), max(values)
    k0, k1 = int(math.floor(math.log2(lo))), int(math.ceil(math.log2(hi)))
    step = next(s for s in (1, 2, 3, 4, 5, 10, 20) if (k1 - k0) // s + 1 <= 12)
    ticks = [2.0 ** k for k in range(k0, k1 + 1) if k % step == 0] or [2.0 ** k0]
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    a.set_major_locator(FixedLocator(ticks))
    a.set_minor_locator(NullLocator())
    (ax.set_xticklabels if axis == "x" else ax.set_yticklabels)([fmt_bytes(t) for t in ticks])


def byte_unit(max_bytes):
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if max_bytes >= 2 * scale:
            return unit, scale
    return "B", 1


def colors(n):
    cmap = plt().get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


SPAN_COLORS = {"compute.forward": "#4c72b0", "compute.backward": "#dd8452", "compute.optimizer": "#55a868",
               "compute.backward_input": "#dd8452", "compute.backward_weight": "#f0b27a",
               "compute.recompute": "#64b5cd", "comm.all_reduce": "#c44e52", "comm.send": "#8e44ad",
               "comm.recv": "#da8bc3", "comm.all_gather": "#937860", "comm.reduce_scatter": "#ccb974",
               "comm.broadcast": "#8c8c8c", "idle": "#e5e5e5"}
SPAN_ORDER = ["compute.forward", "compute.backward", "compute.backward_input", "compute.backward_weight",
              "compute.recompute", "compute.optimizer"]
MEM_CATS = ["param", "grad", "master_param", "optimizer_state", "activation", "workspace", "comm_buffer"]
MEM_COLORS = {"param": "#4c72b0", "grad": "#dd8452", "master_param": "#55a868", "optimizer_state": "#c44e52",
              "activation": "#8172b3", "workspace": "#937860", "comm_buffer": "#bbbbbb"}


def close_all():
    """Closes every open figure (after a suite's renderer failed half-way), if matplotlib was ever loaded."""
    if _plt:
        _plt.close("all")


_STEP = re.compile(r"/loss/step:(\d+)$")


def loss_tolerance(checks, prefix):
    """{step: tolerance} of the checks PREFIXloss/step:N."""
    out = {}
    for c in checks:
        n = c["name"]
        if n.startswith(prefix):
            m = _STEP.search(n)
            if m and n[:m.start()] + "/" == prefix.rstrip("/") + "/" and num(c.get("tolerance")) is not None:
                out[int(m.group(1))] = num(c["tolerance"])
    return out


def plot_step_times(r, suite, recs, what, label=None, color=None):
    """Median step time per variant with min–max whiskers, on the renderer r; one PNG per suite
    (-step-times-SUITE). label, color: functions of a record (default: its name after the suite)."""
    label = label or (lambda b: record_tail(b["name"], suite))
    sel = [b for b in recs if isinstance(b.get("step_time_ms"), dict) and stat(b["step_time_ms"], "median") is not None]
    pts = [(label(b), b["step_time_ms"]) for b in sel]
    if len(pts) < 2:
        return
    p = plt()
    fig, ax = p.subplots(figsize=(8.5, 0.9 + 0.42 * len(pts)), constrained_layout=True)
    meds = [stat(t, "median") for _, t in pts]
    lo = [m - (stat(t, "min") if stat(t, "min") is not None else m) for m, (_, t) in zip(meds, pts)]
    hi = [(stat(t, "max") if stat(t, "max") is not None else m) - m for m, (_, t) in zip(meds, pts)]
    ax.barh(range(len(pts)), meds, xerr=[lo, hi], color=[color(b) for b in sel] if color else "#4c72b0",
            capsize=3, height=0.6, error_kw={"ecolor": "#555555", "lw": 1})
    for i, m in enumerate(meds):
        ax.text(m, i + 0.32, f" {fmt(m, 3)} ms", va="center", ha="left", fontsize=8)
    ax.set_yticks(range(len(pts)), [n for n, _ in pts])
    ax.invert_yaxis()
    ax.set_xlabel("step time (ms): median over steps and repetitions, whiskers min–max")
    ax.set_title(f"{suite}: step time per {what}")
    ax.grid(axis="y", visible=False)
    r.save(fig, f"step-times-{suite}", f"{suite} step times",
              f"The {suite} suite's median step time per {what} (slowest rank per step), whiskers from the "
              "fastest to the slowest step.")
