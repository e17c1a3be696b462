"""The ffn_tp suite's section (suites/ffn_tp.cc): FFN time, speedup, efficiency and comm share per TP
size, and the speedup and efficiency bars (-tp-scaling).
"""
from collections import defaultdict

from ..fmt import fmt, fmt_pct, fmt_timing, num
from ..layout_keys import FIELD
from ..plot import plt
from ..registry import unit

SUITE = "ffn_tp"
PLOTS = ("tp-scaling",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    recs = [b for b in recs if not b.get("skipped") and FIELD.tp in b]
    if not recs:
        return r.generic("ffn_tp", recs)
    by = defaultdict(dict)
    for b in recs:
        by[int(b[FIELD.tp])][b.get("pass", "forward")] = b
    passes = [p for p in ("forward", "forward_backward") if any(p in v for v in by.values())]
    h = recs[0].get("hidden", data.get("hidden"))
    n = recs[0].get("tokens", data.get("tokens"))
    d.p(f"FFN h = {h} → 4h → h over {n} tokens, Megatron column/row split; time is the median of the slowest "
        "rank's time per iteration; speedup = time(TP 1) / time(TP); efficiency = speedup / TP; comm share: the "
        "slowest rank's all-reduce time over its pass time.")
    headers = ["TP"]
    for p in passes:
        t = "fwd" if p == "forward" else "fwd+bwd"
        headers += [f"{t} ({unit('time_ms', SUITE)})", f"{t} speedup", f"{t} efficiency", f"{t} comm share"]
    headers.append("idle ranks")
    rows = []
    for tp in sorted(by):
        row = [str(tp)]
        for p in passes:
            b = by[tp].get(p, {})
            row += [fmt_timing(b.get("time_ms"), 4), fmt(num(b.get("speedup")), 3),
                    fmt_pct(num(b.get("efficiency"))), fmt_pct(num(b.get("comm_fraction")))]
        row.append(fmt(next(iter(by[tp].values())).get("idle_ranks")))
        rows.append(row)
    d.table(headers, rows)
    d.p("At TP t the world runs W/t groups side by side, so at TP 1 every rank computes its own whole FFN at "
        "the same time: the baseline shares the machine (cores, memory bandwidth) as the TP runs do, and the "
        "speedup is over that contended TP 1, not over one rank alone.", "note")
    plot_tp(r, by, passes, h, n)


def plot_tp(r, by, passes, h, n):
    p = plt()
    import numpy as np
    tps = sorted(by)
    x = np.arange(len(tps))
    w = 0.8 / len(passes)
    fig, (ax, ax2) = p.subplots(1, 2, figsize=(12, 4.4), constrained_layout=True)
    cols = {"forward": "#4c72b0", "forward_backward": "#dd8452"}
    for i, ps in enumerate(passes):
        sp = [num(by[t].get(ps, {}).get("speedup")) or 0 for t in tps]
        ef = [num(by[t].get(ps, {}).get("efficiency")) or 0 for t in tps]
        lab = "forward" if ps == "forward" else "forward + backward"
        b1 = ax.bar(x + (i - (len(passes) - 1) / 2) * w, sp, w, color=cols.get(ps), label=lab)
        b2 = ax2.bar(x + (i - (len(passes) - 1) / 2) * w, [100 * e for e in ef], w, color=cols.get(ps), label=lab)
        ax.bar_label(b1, labels=[f"{v:.2f}×" for v in sp], fontsize=8, label_type="center", color="white")
        ax2.bar_label(b2, labels=[f"{100 * v:.0f}%" for v in ef], fontsize=8, label_type="center", color="white")
    for j, t in enumerate(tps):
        ax.plot([j - 0.45, j + 0.45], [t, t], color="black", ls="--", lw=1.2,
                label="ideal (= TP)" if j == 0 else None)
    ax2.axhline(100, color="black", ls="--", lw=1.2, label="ideal (100%)")
    for a in (ax, ax2):
        a.set_xticks(x, [f"TP {t}" for t in tps])
        a.set_xlabel("tensor-parallel size")
        a.grid(axis="x", visible=False)
    ax.set_ylabel("speedup over TP 1 (×)")
    ax.set_ylim(0, max(tps) * 1.18)
    ax2.set_ylabel("parallel efficiency (%)")
    ax2.set_ylim(0, 128)
    ax.set_title(f"FFN tensor parallel speedup (h={h}, {n} tokens)")
    ax2.set_title("Parallel efficiency = speedup / TP")
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="upper center", fontsize=8, ncol=3)
    r.save(fig, "tp-scaling", "tensor-parallel speedup and efficiency",
              "Speedup of the Megatron-split FFN over TP 1 (left; dashed: ideal = TP) and parallel efficiency "
              "(right; dashed: 100%), forward and forward + backward.")
