"""compare.py's output: the table with its notes and summary line, the regression lines, and the --json
object's values made JSON (no NaN or infinity).
"""
import math
import sys

from .compare_load import short_value, describe
from .metrics import INFO


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
    for name in res["suites"]["vanished"]:
        lines.append(f"REGRESSION suite {name}: passed in BASE, not run in NEW")
    vanished = res["checks"]["vanished"]
    if vanished:
        lines.append(f"REGRESSION {len(vanished)} check(s) passed in BASE and are missing from NEW: "
                     + ", ".join(vanished[:5]) + (" ..." if len(vanished) > 5 else ""))
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
            f"{len(ck['fixed'])} fixed, {len(ck['still_failing'])} still failing, "
            f"{len(ck.get('not_judged', []))} not judged in NEW; records: "
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
    if math.isinf(args.threshold):
        p("--checks-only: metrics are shown and never a regression; checks and suites gate")
    else:
        p(f"threshold {args.threshold:.0%} (a regression is a time x{1 + args.threshold:.2f} or a throughput "
          f"/{1 + args.threshold:.2f}, and significant at alpha {args.alpha:g})")
    for suite, rel in sorted(getattr(args, "suite_thresholds", {}).items()):
        p(f"threshold for {suite}: {rel:.0%} (a time x{1 + rel:.2f})")
    for f, a, b in refusals:
        p(f"warning (--force): incompatible {f}: {short_value(a)} vs {short_value(b)}")
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
    nj = ck.get("not_judged", [])
    if nj:
        p(f"checks not judged in NEW (the machine was busy; not a regression) ({len(nj)}): "
          + ", ".join(c["name"] for c in nj))
    for line in regression_lines(res):
        p(line)
    p(summary_line(res, exit_code))


def jsonable(v):
    """v with every non-finite float made JSON-safe (NaN: null; infinities: "inf", "-inf"), recursively
    through dicts and lists, for compare.py --json."""
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    return v
