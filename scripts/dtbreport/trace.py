"""The timeline section of a report page (`report.py --trace TRACE.json`): the trace's spans split into
runs of steps, one pipeline step and one train step drawn as Gantt charts per rank.

Reads the trace spans of load.load_trace and the pipeline records of the report; renders on a page.Renderer.
"""
from collections import defaultdict

from .layout_keys import FIELD
from .plot import SPAN_COLORS, SPAN_ORDER, plt


def trace_section(r):
    d = r.doc
    d.h(2, "Timeline (trace)", "timeline")
    if not r.spans:
        d.p("The trace has no spans.", "note")
        return
    segs = trace_segments(r.spans)
    d.p(f"{len(r.spans)} spans on {len({s['rank'] for s in r.spans})} rank(s) in {len(segs)} run(s) of "
        "consecutive steps. Span times are on each rank's steady clock, comparable between ranks of one node.")
    pipe = [g for g in segs if g["kind"] == "pipeline"]
    train = [g for g in segs if g["kind"] == "train"]
    if pipe:
        plot_pipeline_timeline(r, pipe[0])
    if train:
        plot_train_timeline(r, train[0])
    if not pipe and not train:
        d.p("No pipeline or train steps recognised in the trace.", "note")


def plot_pipeline_timeline(r, seg):
    steps = seg["steps"]
    runs = r.pipeline_runs
    if runs is None:
        runs = [b for b in r.by_suite.get("pipeline", [])
                if not b.get("skipped") and b["name"].startswith("pipeline/schedule:")]
    label, chosen, stage_of = None, None, None
    picked = pipeline_case_step(runs or [], seg)
    if picked:
        b, chosen, k, n = picked
        label = (f"{b['schedule']}, p = {b['p']}, m = {b['m']}" +
                 (f", v = {b[FIELD.virtual_stages]}" if b["schedule"] == "interleaved" else "") +
                 f" (repetition {k + 1} of {n}, the median makespan)")
        stage_of = int(b["p"])
    else:
        # no report to map steps to cases: the step with the most compute spans up to 40 per rank
        def ncomp(s):
            ev = seg["by_step"][s]
            per = defaultdict(int)
            for e in ev:
                per[e["rank"]] += e["name"].startswith("compute.")
            return max(per.values()) if per else 0
        ok = [s for s in steps if ncomp(s) <= 40] or steps
        chosen = max(ok, key=ncomp)
        label = f"trace step {chosen}"
    gantt(r, seg["by_step"][chosen], f"Pipeline timeline: {label}", "timeline", stage_of,
               "One pipeline step as a Gantt chart per rank, from the trace: forward and backward compute, "
               "posting a send (`comm.send`, thin), and idle (hatched grey: waiting for a message, its transfer "
               "included). Time from the step's start. " + (
                   "The case is picked from the report's pipeline records (1F1B at the most stages, m near 2p)."
                   if stage_of else "The trace could not be matched to the report's pipeline cases."))


def pipeline_case_step(runs, seg):
    """The pipeline step to draw: of the case the reader knows best (1F1B at the most stages, m near 2p), the
    repetition of median makespan. runs: the pipeline suite's synthetic-case records in the order they ran;
    seg: a pipeline segment of trace_segments. A case runs at least pipeline.repetitions and up to
    max_repetitions (more on a busy machine), each record giving its own count; warm-ups are not traced, so
    the i-th case's steps are the sum(repetitions of the cases before it) first steps on, one per
    repetition, and the GPT cases' steps follow them.
    Returns (record, trace step, repetition index, repetitions), or None where the trace holds fewer
    steps than the records (a trace of another run)."""
    reps = [int(b.get("repetitions") or 0) for b in runs]
    steps = seg["steps"]
    if not runs or not all(reps) or len(steps) < sum(reps):
        return None

    def score(b):
        p, m = int(b["p"]), int(b["m"])
        return (b["schedule"] != "1f1b", -p, abs(m - 2 * p), m)
    best = min(range(len(runs)), key=lambda i: score(runs[i]))
    first = sum(reps[:best])
    cand = [steps[first + k] for k in range(reps[best])]
    durs = [step_extent(seg["by_step"][s]) for s in cand]
    k = sorted(range(len(cand)), key=lambda i: durs[i])[len(cand) // 2]
    return runs[best], cand[k], k, reps[best]


def plot_train_timeline(r, seg):
    steps = seg["steps"]
    if not steps:
        return
    durs = {s: step_extent(seg["by_step"][s]) for s in steps}
    later = steps[1:] or steps  # step 0 allocates
    chosen = sorted(later, key=lambda s: durs[s])[len(later) // 2]
    gantt(r, seg["by_step"][chosen], f"Train timeline: step {chosen} (the median step)", "timeline-train", None,
               "One train step per rank from the trace (the step of median duration, step 0 excluded): compute "
               "(forward, backward, optimizer), communication (e.g. the DP gradient all-reduce, which includes "
               "waiting for the slowest rank) and idle.")


def gantt(r, events, title, name, p_stages, caption):
    p = plt()
    from matplotlib.patches import Patch
    t0 = min(e["ts"] for e in events)
    ranks = sorted({e["rank"] for e in events})
    span = max(e["ts"] + e["dur"] for e in events) - t0
    scale, unit = (1e-3, "ms") if span >= 2000 else (1.0, "µs")
    fig, ax = p.subplots(figsize=(13, 0.9 + 0.55 * len(ranks)), constrained_layout=True)
    present = {e["name"] for e in events}
    names = [n for n in SPAN_ORDER if n in present] + sorted(n for n in present if n not in SPAN_ORDER and n != "idle")
    names += ["idle"] if "idle" in present else []
    extra = iter(["#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"])
    pal = {n: SPAN_COLORS.get(n) or next(extra, "#333333") for n in names}
    row = {r: i for i, r in enumerate(ranks)}
    # Each compute span's label in a pipeline: F, B (a whole backward or a zero-bubble input
    # pass) or W (a zero-bubble weight pass), numbered per rank.
    letters = {"compute.forward": "F", "compute.backward": "B", "compute.backward_input": "B",
               "compute.backward_weight": "W"}
    counts = {letter: defaultdict(int) for letter in "FBW"}
    for e in sorted(events, key=lambda e: e["ts"]):
        y = row[e["rank"]]
        x, w = (e["ts"] - t0) * scale, e["dur"] * scale
        n = e["name"]
        if n == "idle":
            ax.barh(y, w, left=x, height=0.7, color=pal[n], hatch="///", edgecolor="#bdbdbd", lw=0)
        elif n.startswith("comm."):
            ax.barh(y, max(w, span * scale / 1500), left=x, height=0.3, color=pal[n], lw=0)
        else:
            ax.barh(y, w, left=x, height=0.7, color=pal[n], edgecolor="white", lw=0.6)
            if p_stages and n in letters and w > span * scale / 45:
                k = counts[letters[n]]
                ax.text(x + w / 2, y, letters[n] + str(k[e["rank"]]), ha="center", va="center", fontsize=7,
                        color="white")
                k[e["rank"]] += 1
    lab = [f"rank {r}" + (f" (stage {r % p_stages})" if p_stages else "") for r in ranks]
    ax.set_yticks(range(len(ranks)), lab)
    ax.invert_yaxis()
    ax.set_xlim(0, span * scale)
    ax.set_xlabel(f"time from the step's start ({unit})")
    ax.set_title(title)
    ax.grid(axis="y", visible=False)
    handles = [Patch(facecolor=pal[n], hatch="///" if n == "idle" else None,
                     edgecolor="#bdbdbd" if n == "idle" else pal[n], label=n) for n in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if p_stages:
        caption += (" Labels F*k* / B*k*: the rank's *k*-th forward / backward, in its own order (for GPipe "
                    "and 1F1B that is micro-batch *k*).")
    r.save(fig, name, title, caption)


def step_extent(events):
    return max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)


def trace_segments(spans):
    """Splits the spans into runs of consecutive steps: the train and pipeline suites share one recorder and
    both count steps from 0, so a step number alone is ambiguous. Per rank, a run ends where the step number
    goes back (or repeats after a gap); runs of different ranks that overlap in time are one segment.
    Each segment: {kind: pipeline | train | other, steps: [...], by_step: {step: [events]}}."""
    per_rank = defaultdict(list)
    for e in spans:
        per_rank[e["rank"]].append(e)
    runs = []  # [start, end, events]
    for evs in per_rank.values():
        evs.sort(key=lambda e: e["ts"])
        cur, prev_step, prev_end = [], None, None
        for e in evs:
            if cur and (e["step"] < prev_step or (e["step"] == prev_step and e["ts"] - prev_end > 2e5)):
                runs.append(cur)
                cur = []
            cur.append(e)
            prev_step = e["step"]
            prev_end = max(prev_end or 0, e["ts"] + e["dur"]) if cur[1:] else e["ts"] + e["dur"]
        if cur:
            runs.append(cur)
    ivs = sorted(([min(e["ts"] for e in r), max(e["ts"] + e["dur"] for e in r), r] for r in runs), key=lambda x: x[0])
    merged = []
    for lo, hi, r in ivs:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
            merged[-1][2].extend(r)
        else:
            merged.append([lo, hi, list(r)])
    segs = []
    for _, _, evs in merged:
        names = {e["name"] for e in evs}
        kind = ("train" if "compute.optimizer" in names else
                "pipeline" if "comm.send" in names or "comm.recv" in names else "other")
        by = defaultdict(list)
        for e in evs:
            by[e["step"]].append(e)
        segs.append({"kind": kind, "steps": sorted(by), "by_step": by})
    return segs
