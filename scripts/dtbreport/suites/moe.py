"""The moe suite's section (suites/moe.cc): an MoE layer's forward, dispatch and combine per expert-parallel
size and tokens per rank, the router's imbalance and drop rate, and dispatch / combine GB/s against the bytes a
rank sends (-moe-bandwidth); the training run's imbalance and drop rate over its steps (-moe-imbalance) and its
model states per rank against the analytic model.
"""
from collections import defaultdict

from ..fmt import fmt, fmt_pct, fmt_timing, num
from ..layout_keys import FIELD
from ..plot import plt

SUITE = "moe"
PLOTS = ("moe-bandwidth", "moe-imbalance")


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    recs = [b for b in recs if not b.get("skipped") and FIELD.ep in b]
    train = [b for b in recs if b["name"].startswith("moe/train/")]
    recs = [b for b in recs if "tokens_per_rank" in b]
    if not recs and not train:
        return r.generic("moe", recs)
    if recs:
        render_layer(r, recs)
    for b in train:
        d.p(f"Training a 2-layer MoE GPT at DP {b.get('world_size')} × EP {b.get(FIELD.ep)}, {b.get('steps')} steps: "
            "step "
            f"{fmt_timing(b.get('step_time_ms'), 4)} ms, of which dispatch and combine "
            f"{fmt_timing(b.get('all_to_all_ms'), 4)} ms ({fmt_pct(num(b.get('all_to_all_fraction')))}); imbalance "
            f"{fmt(num(b.get('imbalance')), 3)} (the worst layer, median over steps), dropped "
            f"{fmt_pct(num(b.get('drop_rate')))}; final loss {fmt(num(b.get('final_loss')), 4)}.")
        render_memory(r, b)
    if train:
        plot_imbalance(r, train)


def render_memory(r, b):
    """The training run's model states per rank: measured (the most any rank held) beside the analytic model."""
    m = b.get("memory_per_rank")
    if not isinstance(m, dict):
        return
    d = r.doc
    d.p(f"Memory per rank at EP {b.get(FIELD.ep)}: {fmt(num(m.get('params_per_rank')), 6)} of "
        f"{fmt(num(m.get('params_total')), 6)} parameters held ({fmt(num(m.get('params_active')), 6)} active per "
        "token), the model states measured by the Device accounting against the analytic model "
        "(reference/analytic/memory_model.h moe_model_states).")
    rows = []
    for key in ("param", "grad", "master_param", "optimizer_state"):
        c = m.get(key) or {}
        meas, model = num(c.get("measured_bytes")), num(c.get("model_bytes"))
        rows.append([key, fmt(meas, 6), fmt(model, 6),
                     "n/a" if meas is None or model is None else "yes" if meas == model else "no"])
    d.table(["model state", "measured (bytes)", "analytic model (bytes)", "equal"], rows)


def render_layer(r, recs):
    d = r.doc
    b0 = recs[0]
    d.p(f"One MoE layer: C = {b0.get('hidden')}, {b0.get('num_experts')} experts, top-{b0.get('topk')}, on "
        f"{b0.get('world_size')} ranks. Time: the median of the slowest rank's forward; dispatch and combine: the "
        "slowest rank's all-to-all time per forward and the bytes a rank sends to other ranks over it; imbalance: "
        "the most-loaded expert's assignments over the mean (1 is perfect balance).")
    rows = []
    for b in sorted(recs, key=lambda b: (int(b[FIELD.ep]), int(b["tokens_per_rank"]))):
        rows.append([str(b[FIELD.ep]), str(b["tokens_per_rank"]), fmt_timing(b.get("time_ms"), 4),
                     fmt(num(b.get("dispatch_ms")), 3), fmt(num(b.get("dispatch_GBps")), 3),
                     fmt(num(b.get("combine_ms")), 3), fmt(num(b.get("combine_GBps")), 3),
                     fmt_pct(num(b.get("all_to_all_fraction"))), fmt(num(b.get("imbalance")), 3),
                     fmt_pct(num(b.get("drop_rate")))])
    d.table(["EP", "tokens / rank", "forward (ms)", "dispatch (ms)", "dispatch GB/s", "combine (ms)", "combine GB/s",
             "all-to-all share", "imbalance", "dropped"], rows)
    plot_bandwidth(r, recs)


def plot_imbalance(r, train):
    p = plt()
    fig, ax = p.subplots(figsize=(7.5, 4.0), constrained_layout=True)
    for b in train:
        imb = [num(v) for v in b.get("imbalance_per_step", [])]
        drop = [100 * num(v) for v in b.get("drop_rate_per_step", [])]
        ax.plot(range(len(imb)), imb, marker=".", label=f"imbalance, EP {b.get(FIELD.ep)}")
        if any(drop):
            ax2 = ax.twinx()
            ax2.plot(range(len(drop)), drop, color="#c44e52", ls="--", label=f"dropped (%), EP {b.get(FIELD.ep)}")
            ax2.set_ylabel("dropped (%)")
            ax2.legend(fontsize=8, loc="lower right")
    ax.axhline(1.0, color="black", ls=":", lw=1, label="perfect balance")
    ax.set_xlabel("training step")
    ax.set_ylabel("max / mean assignments per expert")
    ax.set_title("MoE load imbalance over training (worst layer)")
    ax.legend(fontsize=8, loc="upper right")
    r.save(fig, "moe-imbalance", "MoE load imbalance over steps",
           "Per training step, the most-loaded expert's assignments over the mean (the worst MoE layer, every rank's "
           "tokens), and the share of assignments the capacity dropped.")


def plot_bandwidth(r, recs):
    by = defaultdict(list)
    for b in recs:
        if int(b[FIELD.ep]) > 1 and num(b.get("dispatch_bytes")):
            by[int(b[FIELD.ep])].append(b)
    if not by:
        return
    p = plt()
    fig, ax = p.subplots(figsize=(7.5, 4.4), constrained_layout=True)
    for ep in sorted(by):
        pts = sorted(by[ep], key=lambda b: num(b["dispatch_bytes"]))
        ax.plot([num(b["dispatch_bytes"]) for b in pts], [num(b["dispatch_GBps"]) for b in pts], marker="o",
                label=f"dispatch, EP {ep}")
        ax.plot([num(b["combine_bytes"]) for b in pts], [num(b["combine_GBps"]) for b in pts], marker="s", ls="--",
                label=f"combine, EP {ep}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes a rank sends to other ranks per forward")
    ax.set_ylabel("GB/s")
    ax.set_title("MoE dispatch and combine bandwidth")
    ax.legend(fontsize=8)
    r.save(fig, "moe-bandwidth", "MoE dispatch and combine GB/s",
           "GB/s of the expert-parallel dispatch (rows to the experts) and combine (outputs back) against the bytes "
           "a rank sends to other ranks, per expert-parallel size.")
