"""The train suite's section (suites/train.cc): tokens/s, MFU and the step breakdown per layout, the
breakdown bars (-step-breakdown) and the loss curve against the float64 oracle (-train-loss).
"""

from ..fmt import fmt, fmt_pct, fmt_timing, num, record_tail, stat
from ..layout_keys import FIELD
from ..plot import SPAN_COLORS, SPAN_ORDER, colors, loss_tolerance, plt
from ..registry import unit

SUITE = "train"
PLOTS = ("step-breakdown", "train-loss")


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    recs = [b for b in recs if not b.get("skipped")]
    if not recs:
        return r.generic("train", recs)
    model = data.get("model") or (r.ctx.get("config") or {}).get("model") or {}
    if model:
        d.p("Model: " + ", ".join(f"{k}={v}" for k, v in model.items())
            + (f", {data['num_params']:,} parameters" if isinstance(data.get("num_params"), int) else "")
            + (f", {fmt(num(data.get('tokens_per_step')))} tokens per step" if data.get("tokens_per_step") else "")
            + ".")
    rows = []
    for b in recs:
        rows.append([f"`{record_tail(b['name'], 'train')}`",
                     f"{b.get(FIELD.tp, 1)}×{b.get(FIELD.dp, '?')}×{b.get(FIELD.pp, 1)}",
                     fmt(num(b.get("tokens_per_s")), 5),
                     fmt_timing(b.get("step_time_ms")), fmt(num(b.get("compute_time_ms"))),
                     fmt(num(b.get("comm_time_ms"))), fmt_pct(num(b.get("comm_fraction"))),
                     fmt(num(b.get("model_tflops")), 3), fmt_pct(num(b.get("mfu"))) if "mfu" in b else "–",
                     fmt(num(b.get("final_loss")), 6)])
    d.table(["layout", "TP×DP×PP", unit("tokens_per_s", SUITE),
             f"step ({unit('step_time_ms', SUITE)}): median (min–max)",
             f"compute ({unit('compute_time_ms', SUITE)})", f"comm ({unit('comm_time_ms', SUITE)})",
             "comm share", f"model {unit('model_tflops', SUITE)}", "MFU", "final loss"], rows)
    notes = ["Times are the slowest rank's per step, medians over the steps; comm includes waiting for the "
             "other ranks (exposed communication). The medians of compute and comm need not add up to the "
             "step's median."]
    if any("mfu" in b for b in recs):
        peak = ((r.ctx.get("config") or {}).get("train") or {}).get("peak_tflops")
        notes.append(f"MFU = model TFLOP/s (6N + 12 L C T FLOPs per token) / the configured "
                     f"`train.peak_tflops` = {fmt(num(peak))}, a number from the config, not a measurement.")
    else:
        notes.append("No MFU: `train.peak_tflops` is 0 in the config.")
    d.p(" ".join(notes), "note")
    render_op_time(d, recs)
    for b in recs:
        bd = b.get("step_breakdown_ms")
        if isinstance(bd, dict) and bd:
            d.h(3, f"Step breakdown from the trace: `{record_tail(b['name'], 'train')}`")
            total = sum(v for v in bd.values() if isinstance(v, (int, float)))
            d.table(["span", "median ms per step", "share of the sum"],
                    [[f"`{k}`", fmt(num(v)), fmt_pct(num(v) / total if total else None)]
                     for k, v in sorted(bd.items(), key=lambda kv: -(num(kv[1]) or 0))])
    plot_step_breakdown(r, recs)
    plot_train_loss(r, data, cs)


def render_op_time(d, recs):
    """Per layout, the compute time per step by op family (op_time_ms) and each family's share."""
    rows = []
    for b in recs:
        ops = b.get("op_time_ms")
        if not isinstance(ops, dict) or not ops:
            continue
        total = sum(num(v) or 0 for v in ops.values())
        for k, v in ops.items():
            rows.append([f"`{record_tail(b['name'], 'train')}`", k, fmt(num(v), 4),
                         fmt_pct(num(v) / total if total else None)])
    if rows:
        d.h(3, "Compute time by op family")
        d.table(["layout", "family", "ms per step", "share of the ops' time"], rows)
        d.p("Each op of the training steps timed where it runs (steady_clock around the call on the CPU, CUDA "
            "events around its work on a GPU), the mean per step over the steps and ranks; what the step spends "
            "outside the ops (communication, waiting, the framework) is the step time less their sum.", "note")


def plot_step_breakdown(r, recs):
    p = plt()
    bars = []  # (label, [(name, ms)], step timing)
    for b in recs:
        tag = record_tail(b["name"], "train")
        bd = b.get("step_breakdown_ms")
        if isinstance(bd, dict) and bd:
            names = [k for k in SPAN_ORDER if k in bd] + sorted(k for k in bd if k not in SPAN_ORDER and k != "idle")
            names += ["idle"] if "idle" in bd else []
            bars.append((f"{tag}\ntrace spans", [(k, num(bd[k]) or 0) for k in names], b.get("step_time_ms")))
        comp, comm = num(b.get("compute_time_ms")), num(b.get("comm_time_ms"))
        if comp is not None and comm is not None:
            bars.append((f"{tag}\ntimers", [("compute (timer)", comp), ("comm (timer)", comm)], b.get("step_time_ms")))
    if not bars:
        return
    fig, ax = p.subplots(figsize=(11, 1.0 + 0.8 * len(bars)), constrained_layout=True)
    palette = dict(SPAN_COLORS)
    palette.update({"compute (timer)": "#9db4d9", "comm (timer)": "#e3a3a5"})
    extra = colors(10)
    seen = set()
    for i, (label, parts, step) in enumerate(bars):
        left = 0.0
        for k, v in parts:
            col = palette.get(k)
            if col is None:
                col = palette[k] = extra[(len(palette) + 3) % len(extra)]
            ax.barh(i, v, left=left, color=col, edgecolor="white", height=0.6,
                    label=k if k not in seen else None, hatch="//" if k == "idle" else None)
            if v > 0.06 * max(sum(x for _, x in parts), 1e-12):
                ax.text(left + v / 2, i, fmt(v, 3), ha="center", va="center", fontsize=8,
                        color="black" if k == "idle" or "timer" in k else "white")
            seen.add(k)
            left += v
        med = stat(step, "median")
        if med is not None:
            ax.plot([med, med], [i - 0.38, i + 0.38], color="black", lw=2,
                    label="step time, median" if "step" not in seen else None)
            seen.add("step")
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (median over steps of the slowest rank)")
    ax.set_title("Train step time breakdown (" + ", ".join(record_tail(b["name"], "train") for b in recs) + ")")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    r.save(fig, "step-breakdown", "train step time breakdown",
              "Where a train step's time goes, per record: the trace's spans (with `--trace`) and the suite's "
              "compute / comm timers, each segment the median over steps of the slowest rank; the black bar "
              "is the median step time. Medians of the parts need not sum to the median step.")


def plot_train_loss(r, data, cs):
    losses = data.get("losses")
    if not isinstance(losses, dict) or not losses:
        return
    series = {k: v for k, v in losses.items() if isinstance(v, list) and v}
    oracle = series.get("oracle_f64")
    p = plt()
    if oracle is None:
        fig, ax = p.subplots(figsize=(7, 4.2), constrained_layout=True)
        for (k, v), col in zip(series.items(), colors(len(series))):
            ax.plot(range(len(v)), v, label=k, color=col)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (mean cross-entropy, nats)")
        ax.set_title("Train loss")
        ax.legend()
        r.save(fig, "train-loss", "train loss curve", "The training loss per step (no float64 oracle in "
                  "this report to compare with).")
        return
    tol = loss_tolerance(cs, "train/")
    fig, (ax, ax2) = p.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
    cols = colors(len(series))
    for (k, v), col in zip(series.items(), cols):
        ax.plot(range(len(v)), v, label=k, color=col, lw=1.2 if k != "oracle_f64" else 2.2,
                ls="-" if k != "oracle_f64" else ":")
        if k == "oracle_f64":
            continue
        dev = [abs(a - b) if a is not None and b is not None else None for a, b in zip(v, oracle)]
        xs = [i for i, x in enumerate(dev) if x]
        ax2.plot(xs, [dev[i] for i in xs], label=k, color=col, lw=1.0, marker="." if len(xs) < 60 else None)
    if tol:
        ax2.plot(sorted(tol), [tol[s] for s in sorted(tol)], color="black", ls="--", lw=1.2,
                 label="check tolerance")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean cross-entropy, nats)")
    ax.set_title("Train loss: the curves (they overlap)")
    ax.legend(fontsize=8)
    ax2.set_yscale("log")
    ax2.set_xlabel("step")
    ax2.set_ylabel("|loss − loss of the float64 oracle| (log scale)")
    ax2.set_title("Deviation from the float64 oracle")
    ax2.legend(fontsize=8)
    r.save(fig, "train-loss", "train loss and its deviation from the float64 oracle",
              "Left: the loss per step of the run under test, the single-rank float32 references and the "
              "float64 oracle; they overlap to the eye. Right: each run's |loss − oracle| per step on a log "
              "scale (exact zeros not drawn), and the per-step tolerance of the `train/loss/step:N` checks.")
