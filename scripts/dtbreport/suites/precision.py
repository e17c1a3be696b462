"""The precision suite's section (suites/precision.cc): fp32 vs bf16 vs fp16 step time and loss
deviation, the loss-scale plot (-precision-loss) and the step-times chart (-step-times-precision);
the FP8 rows (precision/fp8/<recipe>) in a table of their own against bf16 (docs/fp8.md), out of the
plots (the CPU's FP8 emulation is ~20x bf16's step time).
"""
import math

from ..fmt import fmt, fmt_bytes, fmt_timing, num, record_tail
from ..layout_keys import FIELD
from ..plot import colors, plot_step_times, plt
from ..registry import unit

SUITE = "precision"
PLOTS = ("precision-loss", "step-times-precision")


def fmt_scale(s):
    try:
        e = round(math.log2(s))
        if 2.0 ** e == s:
            return f"2^{e}"
    except (ValueError, TypeError):
        pass
    return fmt(num(s))


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    recs = [b for b in recs if not b.get("skipped")]
    fp8 = [b for b in recs if b.get("precision") == "fp8"]
    recs = [b for b in recs if b.get("precision") != "fp8"]
    rows = []
    for b in recs:
        sc = b.get("loss_scales")
        scale = f"{fmt_scale(sc[0])} → {fmt_scale(sc[-1])}" if isinstance(sc, list) and sc else "–"
        rows.append([f"`{record_tail(b['name'], 'precision')}`", str(b.get("precision", "")),
                     str(b.get(FIELD.comm_type, "")), fmt_timing(b.get("step_time_ms")),
                     f"{fmt(num(b.get('speedup_over_fp32')), 3)}×", fmt(num(b.get("final_loss")), 6),
                     fmt(num(b.get("max_loss_deviation_from_fp32")), 3),
                     fmt(num(b.get("tail_mean_loss_deviation_from_fp32")), 3),
                     fmt_bytes(num(b.get("dp_comm_bytes_per_step"))), fmt(num(b.get("model_state_bytes_per_param"))),
                     fmt(b.get("skipped_steps")), scale])
    d.table(["variant", "precision", "grad all-reduce type", f"step ({unit('step_time_ms', SUITE)})", "speedup vs fp32",
             "final loss",
             "max |Δloss|/loss vs fp32", "tail mean Δloss/loss", "DP bytes/step", "state bytes/param",
             "skipped steps", "loss scale first → last"], rows)
    d.p("Deviations are relative to the fp32 run's loss at the same step: max over steps of |Δ|/loss (spikes "
        "included), and the signed difference of the mean loss over the last quarter of the steps. On the CPU "
        "half precision is emulated (conversions, no faster arithmetic), so its speedup is not a GPU's.", "note")
    plot_precision(r, recs)
    plot_step_times(r, "precision", recs, "variant")
    if fp8:
        render_fp8(d, fp8)


def render_fp8(d, recs):
    """The FP8 rows against the bf16 run: the last quarter's loss gap with its standard error, and
    rank 0's census (saturated and flushed shares per operand class)."""
    roles = ("input", "weight", "grad_output")

    def shares(b, key):
        c = b.get("fp8_census") or {}
        vals = [num((c.get(x) or {}).get(key)) for x in roles]
        return " / ".join(fmt(None if v is None else 100 * v, 2) for v in vals)

    rows = []
    for b in recs:
        sc = (b.get("fp8_scales") or {}).get("grad_output")
        scale = f"{fmt(num(sc[0]), 3)} → {fmt(num(sc[-1]), 3)}" if isinstance(sc, list) and sc else "–"
        rows.append([f"`{record_tail(b['name'], 'precision')}`", fmt_timing(b.get("step_time_ms")),
                     f"{fmt(num(b.get('speedup_over_bf16')), 3)}×", fmt(num(b.get("final_loss")), 6),
                     f"{fmt(num(b.get('tail_mean_loss_gap_to_bf16')), 3)} ± {fmt(num(b.get('tail_mean_loss_gap_se')), 3)}",
                     fmt(num(b.get("max_loss_deviation_from_bf16")), 3), shares(b, "saturated_share"),
                     shares(b, "flushed_share"), scale])
    d.table(["FP8 recipe", f"step ({unit('step_time_ms', SUITE)})", "speedup vs bf16", "final loss",
             "tail mean Δloss/loss vs bf16 ± se", "max |Δloss|/loss vs bf16", "saturated % x / w / dy",
             "flushed % x / w / dy", "dy scale first → last"], rows)
    d.p("FP8 linears over bf16, each recipe run once against the bf16 run: the gap is checked against "
        "2^-6 + 3 se (docs/fp8.md); saturated: rank 0's values clamped at the format's largest; flushed: its "
        "non-zero values quantized to zero; the scale is the delayed recipe's (median over the linears). The CPU "
        "emulates FP8 GEMMs, so the step times are the emulation's.", "note")


def plot_precision(r, recs):
    base = next((b for b in recs if b.get("precision") == "fp32" and isinstance(b.get("losses"), list)), None)
    others = [b for b in recs if b is not base and isinstance(b.get("losses"), list)]
    if base is None or not others:
        return
    p = plt()
    from matplotlib.ticker import MaxNLocator
    # A variant forced to overflow skips steps on purpose; its deviation would flatten the others'.
    forced = [b for b in others if "forced" in b["name"] or "overflow" in b["name"]]
    normal = [b for b in others if b not in forced]
    scaled = [b for b in others if isinstance(b.get("loss_scales"), list) and b["loss_scales"]]
    panels = [x for x in (normal, forced) if x]
    n = len(panels) + bool(scaled)
    fig, axes = p.subplots(1, n, figsize=(5.6 * n + 0.6, 4.3), squeeze=False, constrained_layout=True)
    bl = base["losses"]
    cols = dict(zip([b["name"] for b in others], colors(len(others))))
    for ax, group in zip(axes[0], panels):
        for b in group:
            dev = [(a - c) / c for a, c in zip(b["losses"], bl) if a is not None and c]
            ax.plot(range(len(dev)), [100 * x for x in dev], color=cols[b["name"]],
                    label=record_tail(b["name"], "precision"))
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel("step")
        ax.set_ylabel("(loss − loss fp32) / loss fp32 (%)")
        ax.set_title("Loss deviation from the fp32 run" if group is normal else
                     "Forced overflow: deviation from fp32 (own scale)")
        ax.legend(fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if scaled:
        ax2 = axes[0][n - 1]
        for b in scaled:
            ax2.step(range(len(b["loss_scales"])), b["loss_scales"], where="post", color=cols[b["name"]],
                     label=record_tail(b["name"], "precision"))
        ax2.set_yscale("log", base=2)
        ax2.set_xlabel("step")
        ax2.set_ylabel("loss scale (log2 scale)")
        ax2.set_title("Dynamic loss scale per step")
        ax2.legend(fontsize=8)
        ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    r.save(fig, "precision-loss", "loss deviation of half precision from fp32",
              "Each variant's loss relative to the fp32 run's at the same step (signed, %); the curves themselves "
              "overlap." + (" A variant forced to overflow skips steps on purpose and gets its own panel." if
                            forced else "") + (" Right: the fp16 dynamic loss scale per step; each halving is "
                                               "a step skipped for an overflow." if scaled else ""))
