"""The comm_efficiency suite's section (suites/comm_efficiency.cc): per method (sync, hierarchical
all-reduce, stale gradients, local steps) and link condition (fast, one node slow), tokens/s, the
speed-up over sync, bytes per token and the loss against sync's; the chart -comm-efficiency.
"""
from collections import OrderedDict

from ..fmt import fmt, fmt_timing, num
from ..plot import plt
from ..registry import unit

SUITE = "comm_efficiency"
PLOTS = ("comm-efficiency",)


def _methods(recs):
    by = OrderedDict()
    for b in recs:
        by.setdefault(b.get("method", "?"), {})[b.get("link", "?")] = b
    return by


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its suites[]
    data."""
    recs = [b for b in recs if not b.get("skipped")]
    data = data or {}
    by = _methods(recs)
    rows = []
    for m, v in by.items():
        fast, slow = v.get("fast", {}), v.get("slow", {})
        rows.append([f"`{m}`", fmt_timing(fast.get("step_time_ms")), fmt(fast.get("tokens_per_s")),
                     f"{fmt(num(fast.get('speedup_vs_sync')), 3)}×", fmt_timing(slow.get("step_time_ms")),
                     fmt(slow.get("tokens_per_s")), f"{fmt(num(slow.get('speedup_vs_sync')), 3)}×",
                     fmt(fast.get("dp_bytes_per_token")), fmt(fast.get("cross_node_bytes_per_token")),
                     fmt(num(fast.get("final_loss")), 4), fmt(num(fast.get("loss_vs_sync")), 3)])
    step = f"step ({unit('step_time_ms', SUITE)})"
    r.doc.table(["method", f"fast: {step}", "fast: tokens/s", "fast: vs sync", f"slow: {step}", "slow: tokens/s",
                 "slow: vs sync", "DP bytes/token", "cross-node bytes/token", "tail loss", "loss − sync's"], rows)
    r.doc.p(f"DP {data.get('nodes', '?')} × {data.get('ranks_per_node', '?')} ranks as emulated nodes; every node's "
            f"links at {fmt(data.get('link_gbps'))} GB/s (fast), node {data.get('slow_node', '?')}'s at "
            f"{fmt(data.get('slow_link_gbps'))} GB/s (slow), {fmt(data.get('latency_us'))} µs a crossing "
            "operation. tokens/s: the steps' tokens over the sum of the slowest rank's step times; tail loss: the "
            "mean over the last quarter of the steps, the same data for every method.", "note")
    if not by:
        return
    p = plt()
    fig, (ax, bx) = p.subplots(1, 2, figsize=(11, 3.8))
    names = list(by)
    w = 0.38
    for i, (link, color) in enumerate((("fast", "#4c72b0"), ("slow", "#dd8452"))):
        ax.bar([k + (i - 0.5) * w for k in range(len(names))],
               [num(by[m].get(link, {}).get("tokens_per_s")) or 0 for m in names], w, color=color,
               label=f"{link} links")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("tokens/s")
    ax.set_title("throughput by method")
    ax.legend()
    for m, curve in (data.get("losses") or {}).items():
        bx.plot(range(len(curve)), [num(x) for x in curve], label=m, linewidth=1.2)
    bx.set_xlabel("step")
    bx.set_ylabel("loss (nats)")
    bx.set_title("loss on the same data")
    bx.legend(ncol=2)
    r.save(fig, "comm-efficiency", "comm_efficiency: tokens/s per method over fast and slow links, and the losses",
           "Throughput of each method with every node's links fast and with one node's slow (left), and each "
           "method's loss per step (right).")
