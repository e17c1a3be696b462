#!/usr/bin/python3
"""Compare two dtbench reports and gate on regressions.

Usage: scripts/compare.py BASE.json NEW.json [--threshold REL] [--suite-threshold SUITE=REL ...] [--alpha P]
                          [--json] [--force]

Records (the report's `benchmarks`) are matched by `name`, which encodes the suite and its
parameters (collectives/all_reduce/bytes:4096/placement:in_place, conformance/TP2:bf16,
...); when a name is not unique in a report, the parameters that tell its records apart are
added to the key. Checks are matched by name. Each metric of a matched record is compared
(METRICS below lists every field that is a metric, with its direction); a table of them is
printed with a summary line, or, with --json, one JSON object.

Exit status: 0 no regression; 1 a regression: a metric worse beyond --threshold (and
significant, below), a check that passed in BASE and failed in NEW, or a suite that passed in
BASE and failed or errored in NEW; 2 bad input: a missing or malformed file, different
schema versions, or incompatible contexts (different backend, communication backend,
devices, world size, config name, or config contents of the compared suites) without
--force; one line on stderr says why.

Statistics, and why:
- The effect is the relative change of medians (new - base) / base. The median is what
  dtbench reports as a record's time, and one descheduled repetition on a shared machine
  moves a mean but not a median.
- When both sides carry raw `samples`, the samples are tested with the Mann-Whitney U test,
  two-sided (scipy.stats.mannwhitneyu), as Google Benchmark's tools/compare.py does: timings
  are skewed with long right tails (preemption, page faults), so a test of ranks that
  assumes no distribution is the right one, and an outlier cannot dominate it.
- A metric regresses only when it is worse beyond --threshold AND the test is significant
  at --alpha. The test alone would flag small shifts that do not matter (in the CI
  baseline, its 40 train steps against the same x1.05 give p = 0.045, and 10 conformance
  steps against x1.03 p = 0.03); the threshold alone would flag noise that the samples show
  is noise. Note that samples of one run share that run's conditions (the machine's load, where
  the ranks landed), so the test sees within-run noise only: two runs of the same code on a
  shared machine differ "significantly" more often than alpha says. The threshold is what
  absorbs run-to-run variation, so a CI threshold is chosen from measured run-to-run
  variation (see .ci/run).
- Too few samples: the smallest p-value the exact U test can give is 2 / C(n1 + n2, n1)
  (both samples entirely apart): 0.1 at 3 vs 3, 0.057 at 3 vs 4, 0.029 at 4 vs 4. When it is
  above --alpha the test can never flag anything, so rather than never gating such a metric,
  compare.py says "insufficient samples" and judges it by the threshold alone, flagged so.
- Without samples but with n, mean and stddev on both sides (older reports), Welch's t-test
  (scipy.stats.ttest_ind_from_stats, unequal variances): the best that summary statistics
  allow, less robust to outliers than the U test. Without any of these (a bare number, or
  n < 2), the threshold alone, flagged "no samples".
- Throughputs derived from a timing of the same record (busbw_GBps and algbw_GBps from
  time_us, tokens_per_s from step_time_ms, ...) take their p-value from that timing's
  samples: the throughput is a decreasing function of the time, and a monotone map keeps the
  ranks, so the U test on the time samples is the U test on the throughput samples.
- "Worse by" is new / base - 1 for lower-is-better metrics and base / new - 1 for
  higher-is-better ones, so a time x1.25 and the throughput computed from it /1.25 (-20%)
  are the same 25% regression against --threshold. The table's change column is the plain
  (new - base) / base.
"""
import argparse
import functools
import json
import math
import os
import sys
from collections import defaultdict

OUTPUT_VERSION = 1  # of the --json object

# ---------------------------------------------------------------------------------------------
# Metrics. field -> (direction, source, note). direction: "lower" or "higher" is better (gated);
# "info" is reported when it changes but never gates. source: for a scalar, the timing object
# of the same record that it is computed from, whose samples give its p-value (None: no
# samples). A field whose value is a timing object ({n, median, ..., samples}) uses its own
# samples. Any numeric field not listed here, nor in PARAMETERS, is reported as info
# ("unknown field") and never gates.
# ---------------------------------------------------------------------------------------------
LOWER, HIGHER, INFO = "lower", "higher", "info"
_MEM_TIERS = ("device", "host")
_MEM_CATEGORIES = ("param", "grad", "master_param", "optimizer_state", "activation", "comm_buffer", "workspace")

METRICS = {
    # Google Benchmark's time (in the record's time_unit). dtbench sets it to the median of the
    # record's timing object; when it is (time_us, step_time_ms, ...), that object's row stands
    # for it and real_time is not shown twice.
    "real_time": (LOWER, None, "Google Benchmark's time"),
    # Timing objects {n, median, min, max, mean, stddev, samples}.
    "time_us": (LOWER, None, "collectives: slowest rank per iteration"),
    "time_ms": (LOWER, None, "ffn_tp"),
    "step_time_ms": (LOWER, None, "train, conformance, pipeline, offload, overlap, precision, recompute"),
    "compute_time_ms": (LOWER, None, "train"),
    "comm_time_ms": (LOWER, None, "train: slowest rank, includes waiting"),
    "real_time_stats": (LOWER, None, "kernels: real_time over Google Benchmark's repetitions"),
    # Throughputs and ratios.
    "busbw_GBps": (HIGHER, "time_us", "collectives"),
    "algbw_GBps": (HIGHER, "time_us", "collectives"),
    "tokens_per_s": (HIGHER, "step_time_ms", "train, sweep"),
    "FLOP/s": (HIGHER, "real_time_stats", "kernels: Google Benchmark counter"),
    "bytes/s": (HIGHER, "real_time_stats", "kernels: Google Benchmark counter"),
    "model_tflops": (HIGHER, "step_time_ms", "train"),
    "mfu": (HIGHER, "step_time_ms", "train"),
    "tflops": (HIGHER, None, "gemm"),
    "speedup": (HIGHER, None, "ffn_tp: over tp 1"),
    "efficiency": (HIGHER, None, "ffn_tp: speedup / tp"),
    "speedup_over_fp32": (HIGHER, None, "precision"),
    "gain": (HIGHER, None, "overlap: over no overlap"),
    "slowdown": (LOWER, None, "offload: over no offload"),
    "comm_ms": (LOWER, None, "ffn_tp: slowest rank"),
    "bubble_measured": (LOWER, "bubble_measured_stats", "pipeline: idle fraction"),
    # Memory (deterministic: no samples, the threshold alone).
    "peak_activation_bytes_per_stage": (LOWER, None, "conformance: one row per stage"),
    "activation_bytes": (LOWER, None, "recompute"),
    "workspace_bytes": (LOWER, None, "recompute"),
    "device_model_state_bytes": (LOWER, None, "offload"),
    "host_model_state_bytes": (LOWER, None, "offload"),
    "dp_comm_bytes_per_step": (LOWER, None, "precision"),
    "model_state_bytes_per_param": (LOWER, None, "precision"),
    "peak_bytes_per_rank": (LOWER, None, "sweep: the busiest rank's"),
    "peak_host_bytes_per_rank": (LOWER, None, "sweep: the largest over ranks"),
    **{f"measured_{t}_{c}_bytes": (LOWER, None, "memory") for t in _MEM_TIERS for c in _MEM_CATEGORIES},
    # Reported when changed, never gated: accuracy figures (the checks gate those), analytic
    # predictions and simulations, fractions near zero whose relative change means nothing.
    "final_loss": (INFO, None, ""),
    "max_loss_deviation": (INFO, None, "conformance (its checks gate it)"),
    "worst_check_fraction": (INFO, None, "conformance (its checks gate it)"),
    "checks_failed": (INFO, None, "conformance (its checks gate it)"),
    "n_wrong": (INFO, None, "collectives (its checks gate it)"),
    "comm_fraction": (INFO, None, "train, ffn_tp, sweep"),
    "idle_fraction": (INFO, None, "sweep"),
    "busiest_rank": (INFO, None, "sweep"),
    "overhead": (INFO, None, "recompute: near 0, relative change meaningless"),
    "activation_saving": (INFO, None, "recompute"),
    "fraction_of_peak": (INFO, None, "gemm: over the same run's peak"),
    "bubble_measured_stats": (INFO, None, "pipeline: bubble_measured's samples"),
    "bubble_theory": (INFO, None, "pipeline"),
    "bubble_simulated": (INFO, None, "pipeline"),
    "stage_bubble_measured": (INFO, None, "pipeline"),
    "stage_bubble_simulated": (INFO, None, "pipeline"),
    "step_time_simulated_ms": (INFO, None, "pipeline"),
    "peak_in_flight": (INFO, None, "pipeline"),
    "peak_in_flight_simulated": (INFO, None, "pipeline"),
    "predicted_extra_flops": (INFO, None, "recompute"),
    "predicted_activation_bytes": (INFO, None, "recompute"),
    "predicted_workspace_bytes": (INFO, None, "recompute"),
    "device_bytes_saved": (INFO, None, "offload"),
    "max_loss_deviation_from_fp32": (INFO, None, "precision"),
    "tail_mean_loss_deviation_from_fp32": (INFO, None, "precision"),
    "skipped_steps": (INFO, None, ""),
    "final_loss_scale": (INFO, None, ""),
    **{f"predicted_{t}_{c}_bytes": (INFO, None, "memory") for t in _MEM_TIERS for c in _MEM_CATEGORIES},
}

# Fields that identify a record or describe how it was measured: never metrics. Used to tell
# apart records of the same name, and noted when they differ between BASE and NEW.
PARAMETERS = {
    "name", "run_name", "run_type", "aggregate_name", "repetitions", "repetition_index", "threads",
    "iterations", "time_unit", "cpu_time", "family_index", "per_family_instance_index",
    "op", "bytes", "count", "dtype", "placement", "world_size", "bus_factor", "size_definition",
    "tp", "dp", "pp", "schedule", "virtual_stages", "zero_stage", "offload_optimizer", "recompute",
    "precision", "communication_data_type", "ranks", "checks", "steps", "tokens_per_step", "backend",
    "model_flops_per_token", "M", "N", "K", "pass", "hidden", "tokens", "idle_ranks", "reduce_bucket_size",
    "p", "m", "pipelines", "t_forward_us", "t_backward_us", "skipped", "skip_message", "losses",
    "loss_scales", "step_breakdown_ms", "tp_all_reduces_per_iteration", "layout", "micro_batches",
    "peak_bytes_by_category", "error_message", "label",
}
# Parameters that may legitimately differ between two runs of the same code (the timing loop
# picks its own iteration count, cpu_time follows real_time).
_PARAMS_NOT_NOTED = {"iterations", "cpu_time", "losses", "loss_scales", "step_breakdown_ms", "skip_message"}

# Context: fields that make two reports incompatible (refused without --force), and fields
# noted when they differ. The config is compared separately (its name, the sections of the
# suites compared, and its top-level keys but these).
REFUSE_CONTEXT = ("backend", "comm_backend", "devices", "world_size")
NOTE_CONTEXT = ("host_name", "num_cpus", "ranks_per_node", "build_type", "dtbench_version", "mpi_version",
                "blas_version", "cuda_version", "nccl_version")
CONFIG_NOT_COMPARED = {"name", "description", "output_dir", "comm_timeout_s", "suites", "backend"}
# dtbench's suites (`dtbench list`): config keys that are suite sections, compared only when
# that suite is in both reports.
KNOWN_SUITES = {"collectives", "conformance", "ffn_tp", "gemm", "kernels", "memory", "offload", "overlap",
                "pipeline", "precision", "recompute", "sweep", "train"}

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class InputError(Exception):
    """Bad input: exit 2 with this one-line message."""


# ------------------------------------------------------------------------------------ loading
def _refuse_constant(name):
    """JSON has no NaN or Infinity (Python's parser accepts them; dtbench writes null)."""
    raise json.JSONDecodeError(f"{name} is not JSON (dtbench writes null for a non-finite number)", name, 0)


def load_report(path):
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise InputError(f"{path}: not a dtbench report (no benchmarks[] list)")
    for key, kind in (("checks", list), ("suites", list), ("context", dict)):
        if key in report and not isinstance(report[key], kind):
            raise InputError(f"{path}: not a dtbench report ({key} is not a {kind.__name__})")
    for i, b in enumerate(report["benchmarks"]):
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            raise InputError(f"{path}: benchmarks[{i}] has no name")
    for i, c in enumerate(report.get("checks", [])):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not isinstance(c.get("passed"), bool):
            raise InputError(f"{path}: checks[{i}] has no name or no boolean passed")
    return report


# ------------------------------------------------------------------------------ compatibility
def _flat_diff(a, b, prefix, out):
    """Appends (path, a, b) for every leaf where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _flat_diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}.{k}", out)
    elif a != b:
        out.append((prefix, a, b))


def suite_names(report):
    names = [s.get("name") for s in report.get("suites", []) if isinstance(s, dict)]
    if not names:
        names = report.get("context", {}).get("config", {}).get("suites", []) or []
    return {n for n in names if isinstance(n, str)}


def compatibility(base, new):
    """(refusals, notes): lists of (field, base value, new value)."""
    bc, nc = base.get("context", {}) or {}, new.get("context", {}) or {}
    refuse, notes = [], []
    for k in REFUSE_CONTEXT:
        if bc.get(k) != nc.get(k):
            refuse.append((k, bc.get(k), nc.get(k)))
    for k in NOTE_CONTEXT:
        if bc.get(k) != nc.get(k):
            notes.append((k, bc.get(k), nc.get(k)))
    bd, nd = bc.get("dataset") or {}, nc.get("dataset") or {}
    if bd.get("sha256") != nd.get("sha256"):
        notes.append(("dataset.sha256", bd.get("sha256"), nd.get("sha256")))
    bcfg, ncfg = bc.get("config") or {}, nc.get("config") or {}
    if bcfg.get("name") != ncfg.get("name"):
        refuse.append(("config.name", bcfg.get("name"), ncfg.get("name")))
    compared = suite_names(base) & suite_names(new)
    sections = KNOWN_SUITES | suite_names(base) | suite_names(new)
    diffs = []
    for k in sorted(set(bcfg) | set(ncfg)):
        if k in CONFIG_NOT_COMPARED or (k in sections and k not in compared):
            continue
        _flat_diff(bcfg.get(k, "<absent>"), ncfg.get(k, "<absent>"), f"config.{k}", diffs)
    # A key that one report lacks (added by a later dtbench) set to its off value in the
    # other ("", 0, false, null, "none") configures nothing: a note, not a refusal.
    for d in diffs:
        (notes if _absent_and_off(d[1], d[2]) else refuse).append(d)
    return refuse, notes


def _absent_and_off(a, b):
    """True when one of a, b is "<absent>" and the other an off value."""
    off = lambda v: v is None or v is False or v == "" or v == "none" or (_is_number(v) and v == 0)
    return (a == "<absent>" and off(b)) or (b == "<absent>" and off(a))


def _short(v, width=40):
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= width else s[: width - 3] + "..."


def describe(diffs):
    return "; ".join(f"{f} {_short(a)} vs {_short(b)}" for f, a, b in diffs)


# -------------------------------------------------------------------------------- matching
def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_timing(v):
    return isinstance(v, dict) and _is_number(v.get("median"))


def record_keys(base_records, new_records):
    """Keys for both reports' records: the name, plus the distinguishing parameters where a
    name is not unique in either report (the same fields on both sides, so keys match).
    Returns (base {key: record}, new {key: record}, notes)."""
    notes = []
    groups = [defaultdict(list), defaultdict(list)]
    for g, records in zip(groups, (base_records, new_records)):
        for r in records:
            g[r["name"]].append(r)
    dup_fields = {}
    for name in set(groups[0]) | set(groups[1]):
        recs = [groups[0].get(name, []), groups[1].get(name, [])]
        if max(len(recs[0]), len(recs[1])) < 2:
            continue
        fields = set()
        for rs in recs:
            for k in {k for r in rs for k in r}:
                if k in METRICS or k in ("name", "run_name", "cpu_time", "iterations"):
                    continue
                vals = [json.dumps(r.get(k), sort_keys=True) for r in rs]
                if len(set(vals)) > 1 and all(not isinstance(r.get(k), (float, dict, list)) for r in rs):
                    fields.add(k)
        dup_fields[name] = sorted(fields)
        notes.append(f"record name {name} is not unique; matched by name and {', '.join(sorted(fields)) or 'order'}")
    out = []
    for g in groups:
        keyed = {}
        for name, recs in g.items():
            for r in recs:
                key = name
                if name in dup_fields:
                    key += "{" + ",".join(f"{k}={r.get(k)}" for k in dup_fields[name]) + "}"
                base_key, i = key, 1
                while key in keyed:
                    i += 1
                    key = f"{base_key}#{i}"
                keyed[key] = r
        out.append(keyed)
    return out[0], out[1], notes


def check_keys(checks):
    names = defaultdict(int)
    for c in checks:
        names[c["name"]] += 1
    keyed = {}
    for c in checks:
        key = c["name"] if names[c["name"]] == 1 else f"{c.get('suite', '?')}:{c['name']}"
        base_key, i = key, 1
        while key in keyed:
            i += 1
            key = f"{base_key}#{i}"
        keyed[key] = c
    return keyed


# ------------------------------------------------------------------------------ statistics
def _samples(t):
    s = t.get("samples") if isinstance(t, dict) else None
    if isinstance(s, list) and s and all(_is_number(x) for x in s):
        return [float(x) for x in s]
    return None


@functools.lru_cache(maxsize=None)
def min_p_value(n1, n2):
    """The smallest two-sided p-value the U test can give at these sizes (samples apart)."""
    from scipy.stats import mannwhitneyu
    return float(mannwhitneyu(list(range(n1)), list(range(n1, n1 + n2)), alternative="two-sided").pvalue)


def significance(bt, nt, alpha):
    """(test, p, n_base, n_new) for two timing objects (or None). test: "mann-whitney",
    "insufficient samples" (p computed but cannot reach alpha), "welch", "no samples"."""
    if not (_is_timing(bt) and _is_timing(nt)):
        return "no samples", None, None, None
    bs, ns = _samples(bt), _samples(nt)
    if bs and ns:
        from scipy.stats import mannwhitneyu
        n1, n2 = len(bs), len(ns)
        if sorted(bs) == sorted(ns):
            p = 1.0
        elif len(set(bs) | set(ns)) == 1:
            p = 1.0
        else:
            p = float(mannwhitneyu(bs, ns, alternative="two-sided").pvalue)
            if math.isnan(p):
                p = 1.0
        if min_p_value(n1, n2) > alpha:
            return "insufficient samples", p, n1, n2
        return "mann-whitney", p, n1, n2
    keys = ("n", "mean", "stddev")
    if all(_is_number(bt.get(k)) for k in keys) and all(_is_number(nt.get(k)) for k in keys):
        n1, n2 = int(bt["n"]), int(nt["n"])
        if n1 < 2 or n2 < 2:
            return "no samples", None, n1, n2
        if bt["stddev"] == 0 and nt["stddev"] == 0:
            return ("welch", 1.0, n1, n2) if bt["mean"] == nt["mean"] else ("no samples", None, n1, n2)
        from scipy.stats import ttest_ind_from_stats
        p = float(ttest_ind_from_stats(bt["mean"], bt["stddev"], n1, nt["mean"], nt["stddev"], n2,
                                       equal_var=False).pvalue)
        return "welch", (1.0 if math.isnan(p) else p), n1, n2
    return "no samples", None, None, None


def worse_by(direction, base, new):
    """How much worse NEW is: new/base - 1 (lower is better) or base/new - 1 (higher)."""
    if base == new:
        return 0.0
    num, den = (new, base) if direction == LOWER else (base, new)
    if den > 0 and num >= 0:
        return num / den - 1.0
    if den == 0:
        return math.inf if num > 0 else 0.0
    # Negative values (not expected for these metrics): the signed relative difference.
    d = (new - base) / abs(base) if base else math.inf
    return d if direction == LOWER else -d


def verdict(direction, worse, test, p, threshold, alpha):
    if direction == INFO:
        return "info", False
    threshold_only = test in ("insufficient samples", "no samples")
    significant = threshold_only or (p is not None and p < alpha)
    better = -worse / (1.0 + worse) if worse > -1 else math.inf  # worse_by seen from NEW
    if worse > threshold:
        return ("REGRESSION", True) if significant else ("worse, not significant", False)
    if better > threshold:
        return ("improved", False) if significant else ("better, not significant", False)
    return "same", False


# -------------------------------------------------------------------------------- comparing
def metric_rows(key, b, n, threshold, alpha):
    """Rows for the metrics of one matched record pair."""
    rows = []
    timing_medians = {k: v["median"] for k, v in b.items() if k in METRICS and _is_timing(v)}

    def add(metric, direction, bval, nval, bt, nt, unknown=False, note=""):
        test, p, n1, n2 = ("-", None, None, None) if direction == INFO else significance(bt, nt, alpha)
        w = worse_by(direction if direction != INFO else LOWER, bval, nval)
        change = (nval - bval) / abs(bval) if bval else (0.0 if nval == bval else math.inf)
        v, regression = verdict(direction, w, test, p, threshold, alpha)
        rows.append({"record": key, "metric": metric, "direction": direction, "base": bval, "new": nval,
                     "change": change, "worse_by": None if direction == INFO else w, "test": test,
                     "p_value": p, "n_base": n1, "n_new": n2, "verdict": v, "regression": regression,
                     "unknown_field": unknown, "note": note})

    for field in sorted(set(b) & set(n), key=lambda f: (f != "real_time", f)):
        bv, nv = b[field], n[field]
        if field in PARAMETERS:
            continue
        spec = METRICS.get(field)
        if spec is None:  # unknown: numbers (and timing medians) as info, never gated
            if _is_number(bv) and _is_number(nv):
                add(field, INFO, float(bv), float(nv), None, None, unknown=True)
            elif _is_timing(bv) and _is_timing(nv):
                add(field + " (median)", INFO, bv["median"], nv["median"], None, None, unknown=True)
            continue
        direction, source, _ = spec
        if field == "real_time":
            if not (_is_number(bv) and _is_number(nv)):
                continue
            bu, nu = TIME_UNITS.get(b.get("time_unit"), 1.0), TIME_UNITS.get(n.get("time_unit"), 1.0)
            nv_in_base_unit = nv * nu / bu
            # Shown once: the timing object whose median it is stands for it.
            if any(math.isclose(bv, m, rel_tol=1e-9) for m in timing_medians.values()):
                continue
            add(f"real_time ({b.get('time_unit', '?')})", direction, float(bv), float(nv_in_base_unit), None, None)
        elif _is_timing(bv) and _is_timing(nv):
            add(f"{field} (median)", direction, bv["median"], nv["median"], bv, nv)
        elif _is_number(bv) and _is_number(nv):
            st = (b.get(source), n.get(source)) if source else (None, None)
            add(field, direction, float(bv), float(nv), *st)
        elif isinstance(bv, list) and isinstance(nv, list) and len(bv) == len(nv) and \
                all(_is_number(x) for x in bv + nv):
            for i, (x, y) in enumerate(zip(bv, nv)):
                add(f"{field}[{i}]", direction, float(x), float(y), None, None)
        elif isinstance(bv, list) and isinstance(nv, list) and len(bv) != len(nv):
            add(f"{field} (length)", INFO, float(len(bv)), float(len(nv)), None, None,
                note="different lengths, not compared")
    return rows


def compare(base, new, threshold, alpha, suite_thresholds=None):
    """Compares two loaded reports; a record's threshold is suite_thresholds[its suite] when
    given (the suite: the name's first part, e.g. collectives), else `threshold`."""
    suite_thresholds = suite_thresholds or {}
    res = {"rows": [], "records": {"matched": 0, "new": [], "missing": [], "skipped": [], "notes": []},
           "checks": {"compared": 0, "regressions": [], "fixed": [], "still_failing": [], "new": [],
                      "missing": []},
           "suites": {"regressions": [], "new": [], "missing": []}}
    bk, nk, notes = record_keys(base["benchmarks"], new["benchmarks"])
    res["records"]["notes"] += notes
    for key in bk:
        if key not in nk:
            res["records"]["missing"].append(key)
    for key, n in nk.items():
        if key not in bk:
            res["records"]["new"].append(key)
            continue
        b = bk[key]
        if b.get("skipped") or n.get("skipped"):
            res["records"]["skipped"].append(key)
            continue
        res["records"]["matched"] += 1
        for f in sorted((set(b) | set(n)) & PARAMETERS - _PARAMS_NOT_NOTED):
            if b.get(f) != n.get(f):
                res["records"]["notes"].append(f"{key}: {f} {_short(b.get(f))} vs {_short(n.get(f))}")
        suite = str(n.get("name", key)).split("/", 1)[0]
        res["rows"] += metric_rows(key, b, n, suite_thresholds.get(suite, threshold), alpha)

    bc, nc = check_keys(base.get("checks", [])), check_keys(new.get("checks", []))
    for key, c in bc.items():
        if key not in nc:
            res["checks"]["missing"].append({"name": key, "passed_in_base": c["passed"]})
    for key, c in nc.items():
        entry = {"name": key, "value": c.get("value"), "tolerance": c.get("tolerance"), "passed": c["passed"]}
        if key not in bc:
            res["checks"]["new"].append(entry)
            continue
        res["checks"]["compared"] += 1
        entry["base_value"] = bc[key].get("value")
        was = bc[key]["passed"]
        if was and not c["passed"]:
            res["checks"]["regressions"].append(entry)
        elif not was and c["passed"]:
            res["checks"]["fixed"].append(entry)
        elif not was and not c["passed"]:
            res["checks"]["still_failing"].append(entry)

    bs = {s.get("name"): s for s in base.get("suites", []) if isinstance(s, dict)}
    ns = {s.get("name"): s for s in new.get("suites", []) if isinstance(s, dict)}
    for name, s in bs.items():
        if name not in ns:
            res["suites"]["missing"].append(name)
        elif s.get("status") == "passed" and ns[name].get("status") in ("failed", "error"):
            res["suites"]["regressions"].append({"name": name, "base_status": "passed",
                                                 "new_status": ns[name].get("status"),
                                                 "error": ns[name].get("error")})
    res["suites"]["new"] = [name for name in ns if name not in bs]
    return res


# ---------------------------------------------------------------------------------- output
def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.4g}"


def _pct(v):
    if v is None:
        return "-"
    if math.isinf(v):
        return "+inf%" if v > 0 else "-inf%"
    return f"{v * 100:+.1f}%"


def _pcol(row):
    if row["test"] == "insufficient samples":
        return "insuff."
    if row["test"] in ("no samples", "-") or row["p_value"] is None:
        return "n/a" if row["test"] == "no samples" else "-"
    return f"{row['p_value']:.3g}" + ("w" if row["test"] == "welch" else "")


def regression_lines(res):
    lines = []
    for r in res["rows"]:
        if r["regression"]:
            if r["test"] == "insufficient samples":
                how = f"threshold only: insufficient samples, n={r['n_base']} vs {r['n_new']}"
            elif r["test"] == "no samples":
                how = "threshold only: no samples"
            else:
                how = f"p={r['p_value']:.3g}, " + ("U test" if r["test"] == "mann-whitney" else "Welch's t-test")
            lines.append(f"REGRESSION {r['record']} {r['metric']}: {_fmt(r['base'])} -> {_fmt(r['new'])} "
                         f"({_pct(r['change'])}, worse by {_pct(r['worse_by'])[1:]}; {how})")
    for c in res["checks"]["regressions"]:
        lines.append(f"REGRESSION check {c['name']}: passed -> failed (value {_fmt(c['value'])}, "
                     f"tolerance {_fmt(c['tolerance'])}; was {_fmt(c['base_value'])})")
    for s in res["suites"]["regressions"]:
        why = f": {s['error']}" if s.get("error") else ""
        lines.append(f"REGRESSION suite {s['name']}: passed -> {s['new_status']}{why}")
    return lines


def summary_line(res, exit_code):
    rows = [r for r in res["rows"] if r["direction"] != INFO]
    count = lambda v: sum(1 for r in rows if r["verdict"] == v)  # noqa: E731
    thr_only = sum(1 for r in rows if r["test"] in ("insufficient samples", "no samples"))
    ck = res["checks"]
    return (f"summary: {len(rows)} metrics in {res['records']['matched']} records: "
            f"{count('REGRESSION')} regressed, {count('improved')} improved, "
            f"{count('worse, not significant') + count('better, not significant')} changed beyond the threshold "
            f"but not significantly, {count('same')} within the threshold ({thr_only} judged by the threshold "
            f"alone); checks: {ck['compared']} compared, {len(ck['regressions'])} passed -> failed, "
            f"{len(ck['fixed'])} fixed, {len(ck['still_failing'])} still failing; records: "
            f"{len(res['records']['new'])} new, {len(res['records']['missing'])} missing; "
            f"exit {exit_code} ({'regression' if exit_code else 'no regression'})")


def print_text(res, base, new, args, refusals, notes, exit_code, out=sys.stdout):
    def ident(path, r):
        c = r.get("context", {}) or {}
        commit = str(c.get("git_commit", "?"))
        commit = commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")
        return f"{path} (run {c.get('run_id', '?')}, commit {commit}, {c.get('date', '?')})"

    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"BASE {ident(args.base, base)}")
    p(f"NEW  {ident(args.new, new)}")
    p(f"threshold {args.threshold:.0%} (a regression is a time x{1 + args.threshold:.2f} or a throughput "
      f"/{1 + args.threshold:.2f}, and significant at alpha {args.alpha:g})")
    for suite, rel in sorted(getattr(args, "suite_thresholds", {}).items()):
        p(f"threshold for {suite}: {rel:.0%} (a time x{1 + rel:.2f})")
    for f, a, b in refusals:
        p(f"warning (--force): incompatible {f}: {_short(a)} vs {_short(b)}")
    if notes:
        p(f"note: context differs (not refused): {describe(notes)}")
    for n in res["records"]["notes"]:
        p(f"note: {n}")
    p()
    w = max([len("metric")] + [len(r["metric"]) + 2 for r in res["rows"]])
    p(f"{'metric':<{w}} {'base':>11} {'new':>11} {'change':>9} {'p-value':>8}  verdict")
    last = None
    for r in res["rows"]:
        if r["direction"] == INFO and r["base"] == r["new"]:
            continue
        if r["record"] != last:
            p(r["record"])
            last = r["record"]
        v = r["verdict"]
        if r["regression"] and r["test"] in ("insufficient samples", "no samples"):
            v += " (threshold only)"
        if r["unknown_field"]:
            v += " (unknown field)"
        if r["note"]:
            v += f" ({r['note']})"
        p(f"  {r['metric']:<{w - 2}} {_fmt(r['base']):>11} {_fmt(r['new']):>11} {_pct(r['change']):>9} "
          f"{_pcol(r):>8}  {v}")
    p()
    p("p-value: two-sided Mann-Whitney U test on the samples (a throughput: on the samples of the time it is "
      "computed from);")
    p("  'w': Welch's t-test on n/mean/stddev; 'insuff.': too few samples for the U test to reach alpha, 'n/a': no "
      "samples: both judged by the threshold alone. Info rows are shown when they change and never gate.")
    ck, rec = res["checks"], res["records"]
    for label, items in (("new records", rec["new"]), ("missing records (in BASE only)", rec["missing"]),
                         ("skipped records", rec["skipped"]), ("new suites", res["suites"]["new"]),
                         ("missing suites (in BASE only)", res["suites"]["missing"])):
        if items:
            p(f"{label} ({len(items)}): {', '.join(items)}")
    for label, items in (("checks fixed (failed -> passed)", ck["fixed"]),
                         ("checks still failing", ck["still_failing"]),
                         ("new checks", ck["new"]), ("missing checks (in BASE only)", ck["missing"])):
        if items:
            p(f"{label} ({len(items)}): " + ", ".join(
                c["name"] + ("" if c.get("passed", c.get("passed_in_base", True)) else " (failed)") for c in items))
    for line in regression_lines(res):
        p(line)
    p(summary_line(res, exit_code))


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(prog="compare.py", description="Compare two dtbench reports (see the top of this "
                                 "script for the statistics). Exit 0: no regression, 1: regression, 2: bad input.")
    ap.add_argument("base", help="the baseline report (BASE.json)")
    ap.add_argument("new", help="the report to judge (NEW.json)")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="relative: a metric regresses when worse by more than this, e.g. 0.10 = a time x1.10 or "
                         "a throughput /1.10 (default 0.10), and significant")
    ap.add_argument("--suite-threshold", action="append", default=[], metavar="SUITE=REL",
                    help="the threshold for one suite's records instead of --threshold (repeatable), e.g. "
                         "collectives=20 where small messages are at the mercy of the scheduler")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level of the tests (default 0.05)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--force", action="store_true",
                    help="compare despite different schema versions or incompatible contexts (warns)")
    args = ap.parse_args(argv)
    try:
        if not (args.threshold >= 0 and math.isfinite(args.threshold)):
            raise InputError(f"--threshold must be a finite number >= 0, got {args.threshold}")
        if not 0 < args.alpha < 1:
            raise InputError(f"--alpha must be in (0, 1), got {args.alpha}")
        suite_thresholds = {}
        for item in args.suite_threshold:
            name, eq, val = item.partition("=")
            try:
                rel = float(val)
            except ValueError:
                rel = float("nan")
            if not eq or not name or not (rel >= 0 and math.isfinite(rel)):
                raise InputError(f"--suite-threshold wants SUITE=REL with REL a finite number >= 0, got '{item}'")
            suite_thresholds[name] = rel
        base, new = load_report(args.base), load_report(args.new)
        refusals = []
        sb, sn = base.get("schema_version"), new.get("schema_version")
        if sb != sn:
            refusals.append(("schema_version", sb, sn))
            if not args.force:
                raise InputError(f"different report schema versions: {args.base} has {sb}, {args.new} has {sn} "
                                 "(the fields may not mean the same; --force compares anyway)")
        ctx_refusals, notes = compatibility(base, new)
        if ctx_refusals and not args.force:
            raise InputError("incompatible contexts (--force compares anyway): " + describe(ctx_refusals))
        refusals += ctx_refusals
    except InputError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"output_version": OUTPUT_VERSION, "exit_code": 2, "error": str(e)}))
        return 2

    suites_present = {str(b.get("name", "")).split("/", 1)[0] for r in (base, new) for b in r["benchmarks"]}
    unknown = sorted(set(suite_thresholds) - suites_present)
    if unknown:
        print(f"compare.py: --suite-threshold names {', '.join(unknown)}, which neither report has records of "
              f"(they have: {', '.join(sorted(suites_present)) or 'none'})", file=sys.stderr)
        if args.json:
            print(json.dumps({"output_version": OUTPUT_VERSION, "exit_code": 2, "error": "unknown suite in "
                              "--suite-threshold"}))
        return 2
    args.suite_thresholds = suite_thresholds
    res = compare(base, new, args.threshold, args.alpha, suite_thresholds)
    regressed = (any(r["regression"] for r in res["rows"]) or res["checks"]["regressions"]
                 or res["suites"]["regressions"])
    exit_code = 1 if regressed else 0
    if args.json:
        def c(r):
            return {k: (r.get("context") or {}).get(k) for k in ("run_id", "git_commit", "date", "host_name")}
        obj = {"output_version": OUTPUT_VERSION, "exit_code": exit_code, "regression": bool(regressed),
               "base": {"path": args.base, **c(base)}, "new": {"path": args.new, **c(new)},
               "threshold": args.threshold, "suite_thresholds": suite_thresholds, "alpha": args.alpha, "forced": [
                   {"field": f, "base": a, "new": b} for f, a, b in refusals],
               "context_notes": [{"field": f, "base": a, "new": b} for f, a, b in notes],
               "regressions": regression_lines(res), "summary": summary_line(res, exit_code),
               "metrics": res["rows"], "checks": res["checks"], "records": res["records"], "suites": res["suites"]}
        print(json.dumps(_jsonable(obj), indent=1))
    else:
        print_text(res, base, new, args, refusals, notes, exit_code)
    return exit_code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader stopped (e.g. `| head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
