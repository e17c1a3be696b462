"""The pipeline suite's section (suites/pipeline.cc, suites/pipeline_gpt.cc): bubble per schedule, p and m
(theory, simulated, measured) on synthetic stages and the bubble against micro-batches plot (-bubble); the GPT
cases (per-stage F/B/W, bubble measured beside simulated and theory, bytes sent, blocking against overlapped
sends) and the stage balancer's before/after.
"""
from collections import OrderedDict

from ..fmt import fmt, fmt_timing, num, record_tail, stat
from ..layout_keys import FIELD
from ..load import check_verdict
from ..plot import colors, plt
from ..registry import unit

SUITE = "pipeline"
PLOTS = ("bubble",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    gpt = [b for b in recs if b["name"].startswith("pipeline/gpt/") and not b.get("skipped")]
    recs = [b for b in recs if not b["name"].startswith("pipeline/gpt/") or b.get("skipped")]
    run = [b for b in recs if not b.get("skipped") and "schedule" in b]
    skipped = [b for b in recs if b.get("skipped")]
    if not run:
        r.generic("pipeline", recs)
        return render_gpt(r, gpt, cs)
    if data.get("bubble_definition"):
        d.p(f"Bubble = {data['bubble_definition']}. Theory: (p−1)/(m+p−1), (p−1)/(v m+p−1) interleaved; "
            "simulated: the schedule replayed with zero communication.")
    failed = {c["name"] for c in cs if check_verdict(c) == "failed"}
    unjudged = {c["name"] for c in cs if check_verdict(c) == "not_judged"}
    rows, cls = [], []
    for b in run:
        tag = f"pipeline/{b['schedule']}/p:{b['p']}/m:{b['m']}/"
        bad = sorted(n[len(tag):] for n in failed if n.startswith(tag))
        nj = sorted(n[len(tag):] for n in unjudged if n.startswith(tag))
        dist = b.get("disturbance")
        shift = dist.get("samples") if isinstance(dist, dict) else None
        judged = b.get("judged_repetition")
        judged_txt = (f"{num(b.get('bubble_judged')):.4f} ±{shift[judged]:.3f}"
                      if isinstance(shift, list) and isinstance(judged, int) and 0 <= judged < len(shift)
                      and num(shift[judged]) is not None else "–")
        bs = b.get("bubble_measured_stats")
        rows.append([b["schedule"], fmt(b.get("p")), fmt(b.get("m")), fmt(b.get(FIELD.virtual_stages)),
                     f"{num(b.get('bubble_theory')):.4f}", f"{num(b.get('bubble_simulated')):.4f}",
                     f"{num(b.get('bubble_measured')):.4f}" + (
                         f" ({stat(bs, 'min'):.3f}–{stat(bs, 'max'):.3f})" if stat(bs, "min") is not None else ""),
                     judged_txt, fmt_timing(b.get("step_time_ms"), 4), fmt(num(b.get("step_time_simulated_ms")), 4),
                     fmt(b.get("peak_in_flight"), 3),
                     "; ".join(x for x in ("FAILED: " + ", ".join(bad) if bad else "",
                                          "not judged: " + ", ".join(nj) if nj else "") if x) or "passed"])
        cls.append("fail" if bad else "skip" if nj else None)
    d.table(["schedule", "p", "m", "v", "theory", "simulated", "measured (min–max)", "judged (±shift)",
             f"step ({unit('step_time_ms', SUITE)})",
             f"simulated step ({unit('step_time_simulated_ms', SUITE)})", "peak in-flight per stage", "checks"], rows,
            align=["l"] + ["r"] * 10 + ["l"], row_cls=cls)
    d.p("Judged: the repetition the bubble check judged, the least disturbed (its ranks waited least for a CPU "
        "beyond 50 µs an action), ± the bound on how far that waiting can have moved its bubble; the check "
        "passes when |judged − simulated| + shift ≤ 0.05, fails when |judged − simulated| − shift > 0.05 and is "
        "not judged otherwise (docs/pipeline.md).")
    if skipped:
        d.p("Not run: " + "; ".join(f"`{record_tail(b['name'], 'pipeline')}` ({b.get('skip_message', '')})"
                                    for b in skipped) + ".", "note")
    r.pipeline_runs = run
    plot_bubble(r, run, failed)
    render_gpt(r, gpt, cs)


def render_gpt(r, gpt, cs):
    """The GPT cases' table and the stage balancer's before/after (suites/pipeline_gpt.cc)."""
    d = r.doc
    runs = [b for b in gpt if not b["name"].startswith("pipeline/gpt/balance/")]
    bal = [b for b in gpt if b["name"].startswith("pipeline/gpt/balance/")]
    if not runs:
        return
    failed = {c["name"] for c in cs if check_verdict(c) == "failed"}
    d.p("On the GPT: bubble = idle / (p × pipeline time), idle = not computing (a send's posting or wait "
        "included); pipeline time from the first pipeline action on any stage to the last; simulated: the "
        "schedule replayed on the measured per-stage times with zero communication; theory: the closed form for "
        "equal stages. F+B+W: ms per micro-batch per stage.")
    rows, cls = [], []
    for b in runs:
        bad = sorted(n[len(b["name"]) + 1:] for n in failed if n.startswith(b["name"] + "/"))
        fbw = [num(f) + num(x) + num(w) for f, x, w in zip(b.get("stage_forward_ms", []), b.get("stage_backward_ms", []),
                                                          b.get("stage_weight_ms", []))]
        sent = b.get("p2p_bytes_sent") or [0]
        rows.append([b["schedule"], fmt(b.get("p")), fmt(b.get("m")),
                     "+".join(str(x) for x in b[FIELD.pipeline_layers]),
                     b.get("p2p", ""), f"{num(b.get('bubble_measured')):.4f}", f"{num(b.get('bubble_simulated')):.4f}",
                     f"{num(b.get('bubble_theory')):.4f}", fmt(num(b.get("pipeline_time_ms")), 4),
                     fmt(num(b.get("pipeline_time_simulated_ms")), 4), " ".join(f"{x:.2f}" for x in fbw),
                     fmt(max(sent) / 1e6, 3), "FAILED: " + ", ".join(bad) if bad else "passed"])
        cls.append("fail" if bad else None)
    d.table(["schedule", "p", "m", "layers", "p2p", "measured", "simulated", "theory", "time (ms)", "simulated (ms)",
             "F+B+W per stage (ms)", "MB sent (max stage)", "checks"], rows,
            align=["l", "r", "r", "l", "l"] + ["r"] * 7 + ["l"], row_cls=cls)
    if bal:
        rows = []
        for b in bal:
            lb = "+".join(str(x) for x in b["layers_before"])
            la = "+".join(str(x) for x in b["layers_after"])
            rows.append([b["schedule"], fmt(b.get("p")), f"{lb} → {la}",
                         f"{num(b.get('bottleneck_before_ms')):.2f} → {num(b.get('bottleneck_after_ms')):.2f}",
                         f"{num(b.get('bubble_before_simulated')):.4f} → {num(b.get('bubble_after_simulated')):.4f}",
                         f"{num(b.get('bubble_before_measured')):.4f} → {num(b.get('bubble_after_measured')):.4f}",
                         f"{num(b.get('pipeline_time_before_ms')):.1f} → {num(b.get('pipeline_time_after_ms')):.1f}"])
        d.p("The stage balancer (reference/analytic/stage_balance.h): the split with the smallest slowest stage from the "
            "start split's measured per-part times (embedding, each layer, head), simulated and then measured.")
        d.table(["schedule", "p", "layers", "slowest stage (ms per micro-batch)", "bubble simulated",
                 "bubble measured", "pipeline time (ms)"], rows, align=["l", "r", "l", "r", "r", "r", "r"])


def plot_bubble(r, run, failed):
    p = plt()
    import numpy as np
    ps = sorted({int(b["p"]) for b in run})
    fig, axes = p.subplots(1, len(ps), figsize=(5.6 * len(ps) + 0.5, 4.5), squeeze=False, constrained_layout=True,
                           sharey=True)
    scheds = list(OrderedDict.fromkeys(b["schedule"] for b in run))
    cols = dict(zip(scheds, ["#4c72b0", "#dd8452", "#55a868", "#c44e52"][:len(scheds)] if len(scheds) <= 4
                    else colors(len(scheds))))
    offs = {s: (i - (len(scheds) - 1) / 2) * 0.06 for i, s in enumerate(scheds)}
    for ax, pp in zip(axes[0], ps):
        sub = [b for b in run if int(b["p"]) == pp]
        ms = sorted({int(b["m"]) for b in sub})
        # One theory line per closed form: GPipe and 1F1B share (p−1)/(m+p−1); interleaved has
        # (p−1)/(v m+p−1); ZB-H1 idles (p−1)(T_F+T_B−T_W) beside m (T_F+T_B+T_W) of work (m >= p).
        lines = OrderedDict()
        for s in scheds:
            own = [b for b in sub if b["schedule"] == s]
            if not own:
                continue
            if s == "interleaved":
                v = int(own[0].get(FIELD.virtual_stages, 1))
                key, lab = ("v", v), f"(p−1)/({v}m+p−1)"
                f = (lambda v: lambda mm: (pp - 1) / (v * mm + pp - 1))(v)
            elif s == "zb-h1":
                tw = num(own[0].get("t_weight_us")) or 0.0
                tf, tb = num(own[0].get("t_forward_us")) or 0.0, (num(own[0].get("t_backward_us")) or 0.0) - tw
                idle = (pp - 1) * (tf + tb - tw)
                key, lab = ("zb",), "(p−1)(T_F+T_B−T_W) idle"
                f = (lambda idle, w: lambda mm: idle / (mm * w + idle))(idle, tf + tb + tw)
            else:
                key, lab = ("1",), "(p−1)/(m+p−1)"
                f = lambda mm: (pp - 1) / (mm + pp - 1)
            if key in lines:
                lines[key][0].append(s)
                lines[key][3].extend(int(b["m"]) for b in own)
            else:
                lines[key] = ([s], f, lab, [int(b["m"]) for b in own])
        for i, (names, f, lab, ms_own) in enumerate(lines.values()):
            mm = np.geomspace(min(ms_own), max(ms_own), 200) if max(ms_own) > min(ms_own) else np.array(ms_own[:1], float)
            ax.plot(mm, f(mm), color=["black", "#777777", "#8c564b"][min(i, 2)], ls=["-", "--", ":"][min(i, 2)], lw=1.1,
                    label="theory " + "/".join(names) + " " + lab)
        for s in scheds:
            pts = sorted((b for b in sub if b["schedule"] == s), key=lambda b: int(b["m"]))
            if not pts:
                continue
            xs = [int(b["m"]) * 2 ** offs[s] for b in pts]
            ys = [num(b["bubble_measured"]) for b in pts]
            lo = [y - (stat(b.get("bubble_measured_stats"), "min") or y) for b, y in zip(pts, ys)]
            hi = [(stat(b.get("bubble_measured_stats"), "max") or y) - y for b, y in zip(pts, ys)]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=5, color=cols[s], capsize=2, label=f"{s} measured")
            bad = [(x, y) for x, y, b in zip(xs, ys, pts)
                   if f"pipeline/{s}/p:{b['p']}/m:{b['m']}/bubble" in failed]
            if bad:
                ax.scatter([x for x, _ in bad], [y for _, y in bad], s=150, facecolors="none", edgecolors="red",
                           lw=1.5, zorder=5, label="check failed" if s == scheds[0] or True else None)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.minorticks_off()
        ax.set_xlabel("micro-batches m (log scale)")
        ax.set_title(f"p = {pp} stages")
        ax.set_ylim(0, 1)
        h, l = ax.get_legend_handles_labels()
        uniq = OrderedDict()
        for hh, ll in zip(h, l):
            uniq.setdefault(ll, hh)
        ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="upper right")
    axes[0][0].set_ylabel("bubble = idle / step time")
    t_f = run[0].get("t_forward_us")
    t_b = run[0].get("t_backward_us")
    fig.suptitle(f"Pipeline bubble against micro-batches (t_f {fmt(num(t_f))} µs, t_b {fmt(num(t_b))} µs per "
                 f"stage, {r.world()} ranks)")
    r.save(fig, "bubble", "pipeline bubble against micro-batches",
              "Measured bubble (median of the repetitions, bars: min–max; points of one m are spread slightly "
              "sideways) against micro-batches per step, with the closed forms as lines (GPipe and 1F1B share "
              "(p−1)/(m+p−1); ZB-H1's from its T_F, T_B, T_W). Red rings: the bubble check (|measured − simulated| <= 0.05) failed.")
