#!/usr/bin/python3
"""Compare two dtbench reports and gate on regressions.

Usage: scripts/compare.py BASE.json NEW.json [--threshold REL] [--suite-threshold SUITE=REL ...] [--alpha P]
                          [--checks-only] [--json] [--force]
       scripts/compare.py ab [--base REF] [--pairs N] [--count] ...   (the paired A/B gate: build both, run
                          both side by side; scripts/dtbreport/gate/cli.py, docs/ci.md)

Records (the report's `benchmarks`) are matched by `name`, which encodes the suite and its
parameters (collectives/all_reduce/bytes:4096/placement:in_place, conformance/TP2:bf16,
...); when a name is not unique in a report, the parameters that tell its records apart are
added to the key, and where none does, the order (NAME, NAME#2, ...): a further copy that only
NEW has is compared with BASE's NAME, as the same measurement made again. Checks are matched
by name. Each metric of a matched record is compared (each suite's module,
scripts/dtbreport/suites/<suite>.py, declares which of its fields are
metrics, with their unit and direction; scripts/dtbreport/metrics.py the fields several suites
share); a table of them is printed with a summary line, or, with --json, one JSON object.

Exit status: 0 no regression; 1 a regression: a metric worse beyond --threshold (and
significant, below), a check that passed in BASE and failed in NEW or is missing from it while
its suite ran, or a suite that passed in BASE and failed, errored or was not run in NEW though
selected (a check not judged in NEW, a timing check the machine's other work kept from being
judged, is listed as such and is no regression); 2 bad input: a missing or malformed file, different
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
  variation (results/logs/ci.md has such measurements).
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
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dtbreport.compare_core import compare  # noqa: E402
from dtbreport.compare_load import InputError, compatibility, describe, load_report, parse_suite_thresholds  # noqa: E402
from dtbreport.compare_output import jsonable, print_text, regression_lines, summary_line  # noqa: E402

OUTPUT_VERSION = 1  # of the --json object


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors in one line (exit 2) and, under --json, the JSON object, as the other refusals."""
    json_out = False

    def error(self, message):
        print(f"compare.py: {message} (see --help)", file=sys.stderr)
        if self.json_out:
            print(json.dumps({"output_version": OUTPUT_VERSION, "exit_code": 2, "error": message}))
        sys.exit(2)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "ab":
        from dtbreport.gate.cli import main as ab_main
        return ab_main(argv[1:])
    _Parser.json_out = "--json" in argv
    ap = _Parser(prog="compare.py", allow_abbrev=False,  # --f is not --force
                 description="Compare two dtbench reports (see the top of this script for the statistics). Exit 0: "
                             "no regression, 1: regression, 2: bad input.")
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
    ap.add_argument("--checks-only", action="store_true",
                    help="gate on checks and suites only: metrics are shown, never a regression (a cross-check of "
                         "correctness against a stored report from another machine or day, as .ci/run makes)")
    ap.add_argument("--force", action="store_true",
                    help="compare despite different schema versions or incompatible contexts (warns)")
    args = ap.parse_args(argv)
    try:
        if not (args.threshold >= 0 and math.isfinite(args.threshold)):
            raise InputError(f"--threshold must be a finite number >= 0, got {args.threshold}")
        if not 0 < args.alpha < 1:
            raise InputError(f"--alpha must be in (0, 1), got {args.alpha}")
        suite_thresholds = parse_suite_thresholds(args.suite_threshold)
        base, new = load_report(args.base), load_report(args.new)
        refusals = []
        sb, sn = base.get("schema_version"), new.get("schema_version")
        if sb != sn:
            refusals.append(("schema_version", sb, sn))
            if not args.force:
                raise InputError(f"different report schema versions: {args.base} has {json.dumps(sb)}, {args.new} has "
                                 f"{json.dumps(sn)} "
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
    if args.checks_only:  # no metric can be worse beyond an infinite threshold
        args.threshold, suite_thresholds = math.inf, {}
    args.suite_thresholds = suite_thresholds
    res = compare(base, new, args.threshold, args.alpha, suite_thresholds)
    regressed = (any(r["regression"] for r in res["rows"]) or res["checks"]["regressions"]
                 or res["suites"]["regressions"] or res["checks"]["vanished"] or res["suites"]["vanished"])
    exit_code = 1 if regressed else 0
    if args.json:
        def c(r):
            return {k: (r.get("context") or {}).get(k) for k in ("run_id", "git_commit", "date", "host_name")}
        obj = {"output_version": OUTPUT_VERSION, "exit_code": exit_code, "regression": bool(regressed),
               "base": {"path": args.base, **c(base)}, "new": {"path": args.new, **c(new)},
               "threshold": None if args.checks_only else args.threshold, "checks_only": args.checks_only,
               "suite_thresholds": suite_thresholds, "alpha": args.alpha, "forced": [
                   {"field": f, "base": a, "new": b} for f, a, b in refusals],
               "context_notes": [{"field": f, "base": a, "new": b} for f, a, b in notes],
               "regressions": regression_lines(res), "summary": summary_line(res, exit_code),
               "metrics": res["rows"], "checks": res["checks"], "records": res["records"], "suites": res["suites"]}
        print(json.dumps(jsonable(obj), indent=1))
    else:
        print_text(res, base, new, args, refusals, notes, exit_code)
    return exit_code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader stopped (e.g. `| head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
