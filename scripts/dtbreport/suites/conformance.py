"""The conformance suite's section (suites/conformance.cc): each layout against the float64 oracle and
the single-rank runs, and the loss-deviation plot per layout group and precision (-conformance-loss).
"""
import math
import re
import textwrap
from collections import OrderedDict, defaultdict

from ..fmt import fmt, fmt_timing, num, record_tail
from ..layout_keys import FIELD
from ..plot import colors, loss_tolerance, plt
from ..registry import unit

SUITE = "conformance"
PLOTS = ("conformance-loss",)


def layout_groups(names):
    """Layouts in plot groups of at most 8: single TP / PP, products, DP and ZeRO, recompute."""
    fam = OrderedDict((k, []) for k in ("TP / PP", "TP x DP x PP", "DP / ZeRO", "recompute"))
    for n in names:
        dims = n.split(":")[0].upper()
        opts = n.split(":")[1:]
        if "full" in opts or "selective" in opts:
            fam["recompute"].append(n)
        elif any(o.startswith("zero") or o == "offload" for o in opts) or re.fullmatch(r"DP\d+", dims):
            fam["DP / ZeRO"].append(n)
        elif "X" in dims:
            fam["TP x DP x PP"].append(n)
        else:
            fam["TP / PP"].append(n)
    out = []
    for k, v in fam.items():
        if not v:
            continue
        parts = math.ceil(len(v) / 8)
        size = math.ceil(len(v) / parts)
        for i in range(parts):
            out.append((k + (f" ({i + 1}/{parts})" if parts > 1 else ""), v[i * size:(i + 1) * size]))
    if sum(len(v) for v in fam.values()) <= 8:  # few layouts: one row
        return [("layouts", names)]
    return out


def strip_precision(layout):
    return re.sub(r":(bf16|fp16|fp8:[a-z0-9]+)$", "", layout)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    recs = [b for b in recs if not b.get("skipped")]
    model = data.get("model")
    if model:
        d.p("Model: " + ", ".join(f"{k}={v}" for k, v in model.items())
            + f"; tolerance factor k = {fmt(num(data.get('oracle_factor')))}. Every layout is compared with the "
            "float64 oracle and the single-rank runs of the same precision.")
    worst_by_layout = {}
    for c in cs:
        parts = c["name"].split("/")
        if len(parts) > 2:
            worst_by_layout.setdefault(parts[1], []).append(c)
    rows, cls = [], []
    for b in recs:
        failed = b.get("checks_failed")
        st = "passed" if not failed else f"FAILED ({failed})"
        rows.append([f"`{record_tail(b['name'], 'conformance')}`", str(b.get("precision", "")),
                     fmt(b.get("ranks")), f"{b.get(FIELD.tp, 1)}×{b.get(FIELD.dp, 1)}×{b.get(FIELD.pp, 1)}",
                     fmt(num(b.get("final_loss")), 7), fmt(num(b.get("max_loss_deviation")), 3),
                     fmt(num(b.get("worst_check_fraction")), 3), fmt(b.get("checks")), st,
                     fmt_timing(b.get("step_time_ms"), 3)])
        cls.append("fail" if failed else None)
    d.table(["layout", "precision", "ranks", "TP×DP×PP", "final loss", "max |Δloss| vs f64",
             "worst check (value/tol)", "checks", "status", f"step ({unit('step_time_ms', SUITE)})"], rows, row_cls=cls)
    d.p("max |Δloss|: the largest |loss − loss of the float64 oracle| over the steps (an FP8 row's: of its "
        "recipe's one-rank twin, whose FP8 layout contract its checks hold it to, docs/fp8.md); worst check: the largest "
        "value / tolerance over the layout's checks (<= 1 passes). Step times are the layout's k ranks' while "
        "the world's other ranks wait for them: compare them only between layouts of the same rank count.",
        "note")
    skipped = [s for s in (data.get("skipped") or []) if isinstance(s, dict)]
    by_ranks = [s for s in skipped if "needs_ranks" in s]
    if by_ranks:
        d.p("Skipped (need more ranks than the world's " + str(r.world()) + "): " +
            ", ".join(f"`{s.get('layout')}` ({s.get('needs_ranks')})" for s in by_ranks) + ".")
    no_reference = [s for s in skipped if "needs_ranks" not in s]
    if no_reference:  # a recipe without a reference in that precision (stale gradients, local steps), an FP8 recipe
        d.p("Skipped (no reference of the recipe in that precision, or an FP8 recipe the layout rule refuses): " +
            ", ".join(f"`{s.get('layout')}` ({s.get('reason')})" for s in no_reference) + ".")
    plot_conformance_loss(r, data, cs)


def plot_conformance_loss(r, data, cs):
    # FP8 rows are checked against their one-rank twin, not the oracle: not drawn here.
    layouts = [x for x in (data.get("layouts") or []) if isinstance(x, dict) and isinstance(x.get("losses"), list)
               and x.get("precision") != "fp8"]
    oracle = data.get("oracle_losses")
    if not layouts or not isinstance(oracle, list) or not oracle:
        return
    from matplotlib.ticker import MaxNLocator
    precs = list(OrderedDict.fromkeys(str(x.get("precision", "fp32")) for x in layouts))
    groups = layout_groups(list(OrderedDict.fromkeys(strip_precision(x["layout"]) for x in layouts)))
    p = plt()
    nr, nc = len(groups), len(precs)
    fig, axes = p.subplots(nr, nc, figsize=(4.9 * nc + 2.4, 3.1 * nr + 0.7), squeeze=False, sharex=True,
                           constrained_layout=True)
    for j in range(nc):  # one y scale per precision
        for i in range(1, nr):
            axes[i][j].sharey(axes[0][j])
    for i, (gname, members) in enumerate(groups):
        cols = dict(zip(members, colors(len(members))))
        for j, prec in enumerate(precs):
            ax = axes[i][j]
            tol = defaultdict(list)
            same = OrderedDict()  # bitwise-equal loss curves would hide each other: one line, joint label
            for x in layouts:
                name = strip_precision(x["layout"])
                if str(x.get("precision", "fp32")) != prec or name not in cols:
                    continue
                same.setdefault(tuple(x["losses"]), []).append(name)
                for st, t in loss_tolerance(cs, f"conformance/{x['layout']}/").items():
                    tol[st].append(t)
            for losses, names in same.items():
                dev = [abs(a - b) if a is not None and b is not None else 0 for a, b in zip(losses, oracle)]
                xs = [k for k, v in enumerate(dev) if v > 0]
                ax.plot(xs, [dev[k] for k in xs], color=cols[names[0]], lw=1.2,
                        label=textwrap.fill(" = ".join(names), 34, subsequent_indent="  "),
                        marker="." if len(dev) <= 40 else None, ms=4)
            if tol:
                xs = sorted(tol)
                ax.plot(xs, [min(tol[st]) for st in xs], color="black", ls="--", lw=1.4, label="check tolerance")
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if i == 0:
                ax.set_title(f"{prec}", fontsize=11, fontweight="bold")
            if i == nr - 1:
                ax.set_xlabel("step")
            if j == 0:
                ax.set_ylabel(("" if nr == 1 else f"{gname}\n") + "|Δloss| (nats, log scale)")
        entries = OrderedDict()  # one legend per row: the union over the precisions' panels
        for j in range(nc):
            for hh, ll in zip(*axes[i][j].get_legend_handles_labels()):
                entries.setdefault(ll, hh)
        tol = entries.pop("check tolerance", None)
        if tol is not None:
            entries["check tolerance"] = tol
        axes[i][nc - 1].legend(entries.values(), entries.keys(), loc="upper left", bbox_to_anchor=(1.02, 1.0),
                               fontsize=7.5)
    fig.suptitle("Conformance: |loss − float64 oracle| per step, each layout" +
                 (" (rows: layout groups; columns: precision)" if nr > 1 else ""))
    r.save(fig, "conformance-loss", "conformance loss deviation per layout",
              "The loss curves of every layout overlap the oracle's to about 1e-7 (fp32), so this plots the "
              "deviation instead: |loss − loss of the float64 oracle| per step, on a log scale (exact zeros "
              "not drawn); one column per precision (its own y scale), one row per group of layouts. Layouts "
              "whose losses are bitwise equal share one line, labelled A = B. The dashed black line is the "
              "`loss/step:N` checks' tolerance: a layout passes while below it.")
