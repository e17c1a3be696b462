"""The paired timing comparison: per gated metric, the log ratio candidate / baseline of each pair of runs,
tested and estimated with stats.py, Holm-adjusted over the metrics, and judged against a minimum effect.

What is gated: every measured record's time, one metric per record (its throughputs are functions of the same
time, and testing them too would only multiply the chances of a false alarm). Per run, the record's fastest
repetition (statistic "min"; the repetitions are the samples of the timing object whose median is the record's
real_time: its GEMM batches, training steps or collective batches), the mean of its fastest third
("fast-third"), or its real_time, the median ("median"); with calibrated=True over the record's in-run
calibration (real_time_cal, suites/calibration.h). Why the minimum: noise on a shared machine only adds time,
in bursts as long as a run's timed part, so the median of a run is often the median of a disturbed stretch,
while its fastest repetition is the code's own time (Chen and Revels 2016, "Robust benchmarking in noisy
environments", arXiv:1608.04295). On this machine a training step's time also sits at one of two levels, about
7.5 and 11 ms in the gate config, some runs at one throughout, some at the other, some switching (with or
without other work beside them, 2026-12-03): the fastest step finds the faster level in a run that visits it at
all; the mean of the fastest third needs a third of the steps there. docs/ci.md's power table judges the same
runs both ways.

Checks and suites are compared as in the two-report mode: a check that passes in every baseline run and fails
in a candidate run, or a suite that passes and then fails, is a regression whatever the timings; a check not
judged in a candidate run (the machine was busy) is listed under "not_judged", not as a regression.
"""
import math
import statistics

from ..compare_core import copy_stem, record_keys
from ..compare_load import compatibility, describe
from ..load import check_verdict
from . import GateError
from .stats import TESTS, holm

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# A run's value of a record (run_values) and how the gate's table names it.
STATISTICS = {"min": ", fastest repetition", "fast-third": ", mean of the fastest third of repetitions",
              "median": ""}
MIN_PAIRS = 6  # below this the one-sided signed-rank test cannot reach p < 0.016 (1/64)


def _repetitions(r):
    """The samples of the timing object whose median is r's real_time, and that median; None where there is none."""
    t = r.get("real_time")
    for v in r.values():
        if isinstance(v, dict) and isinstance(v.get("samples"), list) and v["samples"] and \
                isinstance(v.get("median"), (int, float)) and isinstance(t, (int, float)) and v["median"] > 0 and \
                math.isclose(v["median"], t, rel_tol=1e-9):
            s = [x for x in v["samples"] if isinstance(x, (int, float)) and not isinstance(x, bool)]
            return (s, v["median"]) if s else None
    return None


def _over_median(r, statistic):
    """The run's value of r by `statistic` over its median (1 where r has no repetitions): "min" its fastest
    repetition, "fast-third" the mean of its fastest third (at least one), "median" 1."""
    reps = _repetitions(r)
    if reps is None or statistic == "median":
        return 1.0
    s, med = sorted(reps[0]), reps[1]
    k = 1 if statistic == "min" else max(1, len(s) // 3)
    return statistics.fmean(s[:k]) / med


def run_values(report, calibrated, statistic="min"):
    """{record key: value} of one run: real_time in seconds, or real_time_cal (both the median of the record's
    repetitions), scaled by `statistic` (STATISTICS; see the top of this file) to its fastest repetition
    ("min"), the mean of its fastest third ("fast-third") or left the median ("median")."""
    if statistic not in STATISTICS:
        raise GateError(f"unknown statistic {statistic!r} (one of {', '.join(STATISTICS)})")
    keyed, _, _ = record_keys(report.get("benchmarks", []), [])
    out = {}
    for key, r in keyed.items():
        if r.get("skipped"):
            continue
        if calibrated:
            v = r.get("real_time_cal")
        else:
            t, u = r.get("real_time"), TIME_UNITS.get(r.get("time_unit"))
            v = t * u if isinstance(t, (int, float)) and u else None
        if isinstance(v, (int, float)):
            v = v * _over_median(r, statistic)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out[key] = float(v)
    return out


def check_compatible(base, cand):
    """GateError when the first pair's reports cannot be compared: another world size, backend or config (the
    gate's own injected slowdown, a test's, is allowed). A config key that one side lacks is not refused here:
    the preflight (runner.config_differences) listed it as a setting the candidate adds or removes, measured as
    part of the change."""
    refusals, _ = compatibility(base, cand, allow=("injected_slowdown",))
    refusals = [r for r in refusals if not (r[0].startswith("config.") and "<absent>" in r[1:])]
    if refusals:
        raise GateError("the baseline's and the candidate's runs cannot be compared: " + describe(refusals))


def check_pairs_suffice(pairs, base, cand, alpha, calibrated=False):  # noqa: D401
    """GateError when `pairs` pairs could not show a regression of any of the records the first pair has in
    common: with Holm over m records the smallest adjusted p-value is m / 2^pairs (every pair the same way),
    which must be below alpha."""
    m = len(set(run_values(base, calibrated)) & set(run_values(cand, calibrated)))
    if m and m / 2 ** pairs >= alpha:
        need = math.ceil(math.log2(m / alpha) + 1e-9)
        raise GateError(f"{pairs} pairs cannot show a regression of any of {m} records at alpha {alpha:g} "
                        f"(Holm's smallest p is {m}/2^{pairs}); use --pairs {need} or more")


def _checks_and_suites(base_reports, cand_reports, not_judged=None):
    """Regression lines: a check passing in every baseline run and failing in some candidate run; a suite
    passing in every baseline run and failing or erroring in some candidate run. A check not judged in a
    candidate run (a timing check the machine's other work kept from being judged: verdict not_judged) is
    neither failed nor missing there: its line ("check NAME: not judged in candidate run i: REASON") goes to
    the list `not_judged` when one is given."""
    lines = []
    passed_base = None
    for r in base_reports:
        ok = {c["name"] for c in r.get("checks", []) if check_verdict(c) == "passed"}
        passed_base = ok if passed_base is None else passed_base & ok
    failed, vanished, unjudged = {}, {}, {}
    for i, r in enumerate(cand_reports):
        have = {c["name"] for c in r.get("checks", [])}
        for c in r.get("checks", []):
            verdict = check_verdict(c)
            if verdict == "not_judged":
                unjudged.setdefault(c["name"], (i, c.get("not_judged_reason") or "no reason given"))
            elif c["name"] in (passed_base or set()) and verdict == "failed":
                failed.setdefault(c["name"], i)
        for name in (passed_base or set()) - have:
            vanished.setdefault(name, i)
    if not_judged is not None:
        not_judged += [f"check {name}: not judged in candidate run {i + 1}: {why}"
                       for name, (i, why) in sorted(unjudged.items())]
    lines += [f"check {name}: passed in every baseline run, failed in candidate run {i + 1}"
              for name, i in sorted(failed.items())]
    if vanished:
        names = sorted(vanished)
        lines.append(f"{len(names)} check(s) passed in every baseline run and are missing from a candidate run: "
                     + ", ".join(names[:5]) + (" ..." if len(names) > 5 else ""))
    suites_ok = None
    for r in base_reports:
        ok = {s.get("name") for s in r.get("suites", []) if s.get("status") == "passed"}
        suites_ok = ok if suites_ok is None else suites_ok & ok
    for i, r in enumerate(cand_reports):
        for s in r.get("suites", []):
            if s.get("name") in (suites_ok or set()) and s.get("status") in ("failed", "error"):
                lines.append(f"suite {s.get('name')}: passed in every baseline run, {s.get('status')} in candidate "
                             f"run {i + 1}")
        for name in sorted((suites_ok or set()) - {s.get("name") for s in r.get("suites", [])}):
            lines.append(f"suite {name}: passed in every baseline run, not run in candidate run {i + 1}")
    return sorted(set(lines), key=lines.index)


def analyse(base_reports, cand_reports, threshold, alpha, calibrated=False, suite_thresholds=None,
            confidence=0.95, statistic="min", test="signed-rank"):
    """The paired comparison of equal-length lists of reports (pair i = base_reports[i], cand_reports[i]).
    Returns {"rows": [...], "regressions": [lines], "metric": name}. A row: record, metric, pairs, base and
    candidate medians over their runs, change (exp(estimate) - 1, the estimated relative change of the
    candidate: the median log ratio for the sign test, Hodges-Lehmann's for the signed-rank test), ci (its
    interval at `confidence`), p (one-sided, H1: the candidate is slower), p_holm, the threshold, verdict and
    regression. A metric regresses when p_holm < alpha and change > its threshold
    (suite_thresholds[suite] or threshold)."""
    if len(base_reports) != len(cand_reports) or not base_reports:
        raise GateError("no pairs of runs to compare")
    check_compatible(base_reports[0], cand_reports[0])
    name = ("real_time_cal" if calibrated else "real_time") + STATISTICS[statistic]
    res = analyse_values([run_values(r, calibrated, statistic) for r in base_reports],
                         [run_values(r, calibrated, statistic) for r in cand_reports], threshold, alpha, name,
                         suite_thresholds, confidence, test)
    res["not_judged"] = []
    res["regressions"] += _checks_and_suites(base_reports, cand_reports, res["not_judged"])
    return res


def analyse_values(bv, cv, threshold, alpha, metric="real_time", suite_thresholds=None, confidence=0.95,
                   test="signed-rank"):
    """analyse()'s timing part on the runs' values ({record: value} per run, pair i = bv[i], cv[i]); test:
    "sign" (the sign test, the median and its interval) or "signed-rank" (Wilcoxon's, Hodges-Lehmann)."""
    suite_thresholds = suite_thresholds or {}
    p_greater, estimate, interval = TESTS[test]
    # A further copy of a record that the candidate's runs have and the baseline's lack (NAME#2) is the same
    # measurement made again: each baseline run's NAME stands for it (compare_core.copy_stem).
    base_keys = set().union(*bv)
    copies = {k: stem for k in set().union(*cv) if (stem := copy_stem(k, base_keys)) is not None}
    bv = [{**b, **{k: b[stem] for k, stem in copies.items() if stem in b}} for b in bv]
    keys = sorted(set().union(*bv) & set().union(*cv))
    if not keys:
        raise GateError(f"the runs have no {metric} in common to compare")
    only = {"baseline": sorted(set().union(*bv) - set().union(*cv)),
            "candidate": sorted(set().union(*cv) - set().union(*bv))}
    rows = []
    for key in keys:
        pairs = [(b[key], c[key]) for b, c in zip(bv, cv) if key in b and key in c]
        if not pairs:  # measured on both sides, never in the same pair
            continue
        logs = [math.log(c / b) for b, c in pairs]
        suite = key.split("/", 1)[0]
        row = {"record": key, "metric": metric, "pairs": len(pairs),
               "base": statistics.median(b for b, _ in pairs), "new": statistics.median(c for _, c in pairs),
               "threshold": suite_thresholds.get(suite, threshold), "p": None, "p_holm": None}
        if len(pairs) >= MIN_PAIRS:
            lo, hi = interval(logs, confidence)
            row.update(change=math.expm1(estimate(logs)), ci=(math.expm1(lo), math.expm1(hi)),
                       p=p_greater(logs), p_better=p_greater([-x for x in logs]))
        else:
            row.update(change=None, ci=None, p_better=None)
        rows.append(row)
    for kind in ("p", "p_better"):
        adjusted = holm([r[kind] for r in rows])
        for r, a in zip(rows, adjusted):
            r[kind + "_holm"] = a
    regressions = []
    for r in rows:
        r["verdict"], r["regression"] = _verdict(r, alpha)
        if r["regression"]:
            lo, hi = r["ci"]
            regressions.append(f"{r['record']} {metric}: {r['change']:+.1%} [{lo:+.1%}, {hi:+.1%}] over "
                               f"{r['pairs']} pairs (p = {r['p_holm']:.2g} after Holm; threshold "
                               f"{r['threshold']:.0%})")
    return {"metric": metric, "test": test, "rows": rows, "regressions": regressions, "pairs": len(bv),
            "records_only_in": only, "copies_compared_with": dict(sorted(copies.items()))}


def _verdict(r, alpha):
    if r["change"] is None:
        return "too few pairs", False
    worse = r["change"] > r["threshold"]
    better = -r["change"] / (1 + r["change"]) > r["threshold"]
    if worse and r["p_holm"] < alpha:
        return "REGRESSION", True
    if worse:
        return "worse, not significant", False
    if better and r["p_better_holm"] < alpha:
        return "improved", False
    if r["p_holm"] < alpha:
        return "slower, within threshold", False
    return "same", False
