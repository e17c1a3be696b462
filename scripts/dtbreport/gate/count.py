"""The counting comparison: `dtbench count` of each side under callgrind (instructions and simulated cache misses
of fixed CPU work, region by region; harness/count.h), compared with tight thresholds of their own.

Counting instead of timing, as iai-callgrind and CodSpeed do: callgrind executes the program on a simulated
CPU, so the count of a region does not depend on what else the machine runs. Measured here (docs/ci.md): runs
of the same binary, beside busy cores, gave the same instruction count for every kernel and counts 1e-5 apart
for the train steps (MPI and the allocator); the simulated data-cache misses of the kernels agree to 0.03 %
since their buffers are page-aligned (with 64-byte alignment attention's forward pass counted 74 185 or
103 231 D1 read misses, depending on where the allocator put them). Hence the defaults: instructions gate at
1 %, data-cache misses at 5 % and only where a region has at least MIN_MISSES of them per repetition and its
buffers are dtbench count's own (the train steps' misses are shown, not gated).
"""
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import GateError
from .runner import CandidateFailed, describe_status, message, run_child, run_env

CALLGRIND = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--instr-atstart=no", "--cache-sim=yes"]
# Regions whose buffers the code under test allocates (the trainers, the MoE layer's routing and rows, a
# checkpoint's sections): where they land decides cache-set conflicts, so their misses are shown, not gated.
OWN_BUFFERS = ("train_step/", "moe/", "checkpoint/")
MIN_MISSES = 1000  # per repetition: fewer are a handful of cache lines, where a buffer's address decides
# (metric, callgrind events summed, default threshold key)
METRICS = (("instructions", ("Ir",), "instructions"),
           ("d1_misses", ("D1mr", "D1mw"), "misses"),
           ("ll_misses", ("DLmr", "DLmw"), "misses"))


def parse_dump(path):
    """(region name, {event: count}) of one callgrind dump made by CALLGRIND_DUMP_STATS_AT(name)."""
    name, events, totals = None, None, None
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("desc: Trigger: Client Request: "):
            name = line[len("desc: Trigger: Client Request: "):].strip()
        elif line.startswith("events: "):
            events = line.split()[1:]
        elif line.startswith("totals: "):
            totals = [int(x) for x in line.split()[1:]]
    if name is None or events is None or totals is None:
        return None, None
    return name, dict(zip(events, totals + [0] * (len(events) - len(totals))))


def count_side(side, out_dir, config="smoke", reps=20, only="", timeout_s=1800):
    """Runs `dtbench count` of `side` under callgrind into out_dir/<side>/. Returns {region: {metric: count per
    repetition}}. GateError when valgrind is missing or the baseline's count fails (nothing to compare with);
    CandidateFailed when the candidate's fails (a regression)."""
    if shutil.which("valgrind") is None:
        raise GateError("valgrind not found (scripts/setup installs it): the counting mode needs callgrind")
    # Absolute: valgrind runs in d (cwd below) and reads --callgrind-out-file relative to it; a relative
    # --work-dir put the dumps in d/d (work/count/baseline/work/count/baseline/callgrind.out), never read.
    d = Path(out_dir).resolve() / side.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    cmd = CALLGRIND + [f"--callgrind-out-file={d}/callgrind.out", str(side.binary), "count", "--config", config,
                       "--reps", str(reps)] + (["--only", only] if only else [])
    # Its own TMPDIR: the two sides start at once, and Open MPI 4.1's session directory ($TMPDIR/ompi.<host>.<uid>,
    # made at MPI_Init) can be raced for by two singletons ("unable to create the desired directory: File exists").
    rc, _, err = run_child(cmd, {**run_env(side.environment()), "TMPDIR": str(d)}, timeout_s, cwd=d)
    if rc != 0:
        why = f"the {side.name} ({side.label})'s dtbench count failed ({describe_status(rc)}: " \
              f"{message(err) or 'no message'})"
        raise (CandidateFailed(why) if side.name == "candidate" else GateError(why))
    out = {}
    for f in sorted(d.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0):
        name, ev = parse_dump(f)
        if name is None:
            continue
        out[name] = {m: sum(ev.get(e, 0) for e in events) / reps for m, events, _ in METRICS}
    if not out:
        why = f"the {side.name}'s count left no callgrind dump (a dtbench built without valgrind's headers?)"
        raise (CandidateFailed(why) if side.name == "candidate" else GateError(why))
    return out


def count_sides(base, cand, out_dir, config="smoke", reps=20, only=""):
    """count_side of the baseline and of the candidate at once, on two cores: callgrind's counts do not depend on
    what else the machine runs, and each side takes about a minute. Returns (baseline's, candidate's). The
    baseline's failure is raised first (GateError: nothing to compare with), as if the two ran one after the
    other; then the candidate's (CandidateFailed)."""
    with ThreadPoolExecutor(max_workers=2) as ex:
        fb = ex.submit(count_side, base, out_dir, config, reps, only)
        fc = ex.submit(count_side, cand, out_dir, config, reps, only)
        return fb.result(), fc.result()


def compare(base, cand, thresholds, min_misses=MIN_MISSES):
    """Rows per (region, metric) both sides have and regression lines. thresholds: {"instructions": r,
    "misses": r}. A metric regresses when candidate / baseline - 1 > its threshold; cache misses only of the
    regions whose buffers dtbench count places (kernel/, gemm/: page-aligned) and where the baseline has at
    least min_misses per repetition; the train steps' misses, whose buffers the model's allocator places
    anywhere, are information."""
    rows, regressions = [], []
    if not set(base) & set(cand):
        raise GateError("the baseline's and the candidate's counts have no region in common: nothing to compare")
    for region in sorted(set(base) & set(cand)):
        for metric, _, tkey in METRICS:
            b, c = base[region][metric], cand[region][metric]
            change = (c / b - 1) if b > 0 else (0.0 if c == 0 else float("inf"))
            gated = metric == "instructions" or (b >= min_misses and not region.startswith(OWN_BUFFERS))
            thr = thresholds[tkey]
            regression = gated and change > thr
            improved = gated and (c == 0 < b or (c > 0 and b / c - 1 > thr))
            verdict = "REGRESSION" if regression else "improved" if improved else "same" if gated else "info"
            rows.append({"region": region, "metric": metric, "base": b, "new": c, "change": change,
                         "threshold": thr if gated else None, "verdict": verdict, "regression": regression})
            if regression:
                regressions.append(f"{region} {metric}: {b:.6g} -> {c:.6g} per repetition ({change:+.2%}, "
                                   f"threshold {thr:.1%})")
    missing = sorted(set(base) ^ set(cand))
    return {"rows": rows, "regressions": regressions, "unmatched_regions": missing}
