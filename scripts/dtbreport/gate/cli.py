"""`scripts/compare.py ab`: the regression gate in one job. Builds the baseline revision (a git ref; default the
merge-base with main) into build-gate/<commit>/ and the candidate (default the working tree) into build/, runs
the chosen config alternately on both (--pairs rounds) and compares them run against run (paired.py), and
counts instructions of the CPU paths of both under callgrind (--count, count.py).

Exit status: 0 no regression; 1 a regression (a gated metric significantly worse beyond its threshold, a count
beyond its threshold, a check or suite that passed in the baseline failing in the candidate, a candidate run
that fails); 2 the runs cannot be compared (an unknown ref, a baseline that does not build or refuses the
config, reports of different configs or world sizes, a missing tool, bad options); one line on stderr says why.
A regression found by one mode wins over another mode that could not compare.
"""
import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from ..compare_load import InputError, parse_suite_thresholds
from . import GateError
from . import build as builds
from . import count as counting
from . import paired
from .runner import (CandidateFailed, Interrupted, Side, install_interrupt_handlers, interleaved, preflight,
                     short_value)

OUTPUT_VERSION = 1


def _env_pair(text):
    k, eq, v = text.partition("=")
    if not eq or not k or not k.replace("_", "").isalnum():
        raise GateError(f"--base-env / --candidate-env want VAR=VALUE, got '{text}'")
    return k, v


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the usage first)
        print(f"compare.py ab: {message} (see compare.py ab --help)", file=sys.stderr)
        sys.exit(2)


def parser():
    ap = _Parser(prog="compare.py ab", description=__doc__.split("\n\n")[0],
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", metavar="REF", help="the baseline revision (default: the merge-base of HEAD with "
                    "main; HEAD~1 on main itself)")
    ap.add_argument("--candidate", metavar="REF", help="the candidate revision (default: the working tree, built "
                    "into build/)")
    ap.add_argument("--base-binary", metavar="PATH", help="a built dtbench to use as the baseline instead of "
                    "building --base")
    ap.add_argument("--candidate-binary", metavar="PATH", help="a built dtbench to use as the candidate")
    ap.add_argument("--config", default="gate", help="named config or JSON file both sides run (default: gate); "
                    "a name is read from this working tree's harness/configs/ and passed to both as a file")
    ap.add_argument("--np", type=int, default=2, help="ranks per run (default 2)")
    ap.add_argument("--pairs", type=int, default=16, help="rounds of one baseline and one candidate run (default "
                    "16, even so that each side goes first as often; 0: no timing comparison)")
    ap.add_argument("--calibrated", action="store_true", help="gate each record's real_time_cal (its time over "
                    "the in-run calibration) instead of its real_time")
    ap.add_argument("--statistic", choices=tuple(paired.STATISTICS), default="min", help="a run's value of a "
                    "record: its fastest repetition (default), the mean of its fastest third (fast-third) or its "
                    "median, real_time (paired.py says why)")
    ap.add_argument("--test", choices=("sign", "signed-rank"), default="signed-rank", help="the paired test: "
                    "Wilcoxon's signed-rank test with Hodges-Lehmann (default) or the sign test with the median "
                    "(stats.py says why)")
    ap.add_argument("--threshold", type=float, default=0.05, help="a timing regresses when the estimated "
                    "slowdown is beyond this (default 0.05) and significant")
    ap.add_argument("--suite-threshold", action="append", default=[], metavar="SUITE=REL",
                    help="one suite's threshold instead of --threshold (repeatable)")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level over all gated timings, "
                    "Holm-adjusted (default 0.05)")
    ap.add_argument("--count", action="store_true", help="also count instructions and cache misses of the CPU "
                    "paths of both sides under callgrind (dtbench count; about a minute a side)")
    ap.add_argument("--count-config", default="smoke", help="the config whose model the count's train steps use "
                    "(default smoke)")
    ap.add_argument("--count-reps", type=int, default=20, help="repetitions per counted region (default 20)")
    ap.add_argument("--count-only", default="", metavar="TEXT", help="count only the regions whose name holds TEXT "
                    "(dtbench count --list names them)")
    ap.add_argument("--count-threshold", type=float, default=0.01, help="instructions regress beyond this "
                    "relative increase (default 0.01)")
    ap.add_argument("--miss-threshold", type=float, default=0.05, help="simulated data-cache misses regress "
                    "beyond this (default 0.05), where at least %d a repetition" % counting.MIN_MISSES)
    ap.add_argument("--base-env", action="append", default=[], metavar="VAR=VALUE",
                    help="environment of the baseline's runs (repeatable)")
    ap.add_argument("--candidate-env", action="append", default=[], metavar="VAR=VALUE",
                    help="environment of the candidate's runs, e.g. the test-only DTB_INJECT_SLOWDOWN=train_step=1.2")
    ap.add_argument("--work-dir", metavar="DIR", help="where the runs' reports and counts go (default: a "
                    "temporary directory, removed)")
    ap.add_argument("--json", metavar="FILE", help="also write the result as one JSON object to FILE")
    return ap


def _check_options(a):
    for opt in ("base", "candidate", "base_binary", "candidate_binary", "config", "count_config", "work_dir", "json"):
        if getattr(a, opt) is not None and not str(getattr(a, opt)).strip():
            raise GateError(f"--{opt.replace('_', '-')} is empty")
    if not 1 <= a.np <= 256:
        raise GateError(f"--np must be in [1, 256] (ranks on this machine), got {a.np}")
    if a.pairs < 0 or (0 < a.pairs < paired.MIN_PAIRS):
        raise GateError(f"--pairs must be 0 or >= {paired.MIN_PAIRS} (fewer cannot be significant), got {a.pairs}")
    if a.pairs == 0 and not a.count:
        raise GateError("nothing to do: --pairs 0 without --count")
    for name in ("threshold", "count_threshold", "miss_threshold"):
        v = getattr(a, name)
        if not (v >= 0 and math.isfinite(v)):
            raise GateError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if not 0 < a.alpha < 1:
        raise GateError(f"--alpha must be in (0, 1), got {a.alpha}")
    if not 1 <= a.count_reps <= 1000:
        raise GateError(f"--count-reps must be in [1, 1000], got {a.count_reps}")
    try:
        a.suite_thresholds = parse_suite_thresholds(a.suite_threshold)
    except InputError as e:
        raise GateError(str(e)) from None
    if a.json:
        j = Path(a.json)
        if j.is_dir() or not j.parent.is_dir() or not os.access(j.parent, os.W_OK) or \
                (j.exists() and not os.access(j, os.W_OK)):
            raise GateError(f"--json: cannot write {a.json}")
    if a.work_dir:
        w = Path(a.work_dir)
        try:
            w.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GateError(f"--work-dir: cannot create {a.work_dir} ({e.strerror})") from None
        if not os.access(w, os.W_OK):
            raise GateError(f"--work-dir: {a.work_dir} is not writable")
    a.base_env_vars = dict(_env_pair(e) for e in a.base_env)
    a.candidate_env_vars = dict(_env_pair(e) for e in a.candidate_env)
    if a.base and a.base_binary:
        raise GateError("--base and --base-binary do not go together")
    if a.candidate and a.candidate_binary:
        raise GateError("--candidate and --candidate-binary do not go together")


def _config_path(name, option="--config"):
    p = Path(name)
    if p.suffix == ".json" or "/" in name or p.exists():
        if p.is_dir():
            raise GateError(f"{option}: {name} is a directory, not a config file")
        if not p.is_file():
            raise GateError(f"{option}: no such file {name}")
        return p.resolve()
    p = builds.ROOT / "harness" / "configs" / f"{name}.json"
    if not p.is_file():
        raise GateError(f"{option}: unknown config '{name}' (harness/configs/ has none of that name)")
    return p


def _check_suite_thresholds(a, config):
    """--suite-threshold names a suite the config runs (as the two-report mode requires)."""
    try:
        suites = json.loads(Path(config).read_text(encoding="utf-8")).get("suites", [])
    except (OSError, ValueError, AttributeError):
        return  # dtbench's own refusal of the config says more (the preflight)
    unknown = sorted(set(a.suite_thresholds) - set(suites if isinstance(suites, list) else []))
    if unknown:
        raise GateError(f"--suite-threshold names {', '.join(unknown)}, which the config does not run (it runs: "
                        f"{', '.join(map(str, suites))})")


def _binary(path, what):
    p = Path(path)
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise GateError(f"{what}: {path} is not an executable file")
    return p.resolve()


def make_sides(a, progress):
    """(baseline Side, candidate Side), built as the options say."""
    if a.base_binary:
        base = Side("baseline", _binary(a.base_binary, "--base-binary"), str(a.base_binary))
    else:
        label, sha = ("--base " + a.base, builds.resolve(a.base)) if a.base else builds.default_base()
        base = Side("baseline", builds.build_revision(sha, f"the baseline {label}", progress=progress),
                    f"{label} = {sha[:12]}", quiet_env=builds.export_env())
    if a.candidate_binary:
        cand = Side("candidate", _binary(a.candidate_binary, "--candidate-binary"), str(a.candidate_binary))
    elif a.candidate:
        sha = builds.resolve(a.candidate)
        cand = Side("candidate", builds.build_revision(sha, f"the candidate {a.candidate}", progress=progress),
                    f"{a.candidate} = {sha[:12]}", quiet_env=builds.export_env())
    else:
        cand = Side("candidate", builds.build_worktree(progress), "the working tree")
    base.env, cand.env = a.base_env_vars, a.candidate_env_vars
    return base, cand


def _pct(v):
    return "-" if v is None else ("+inf%" if math.isinf(v) else f"{v * 100:+.1f}%")


def print_paired(res, out):
    for side, recs in res.get("records_only_in", {}).items():
        if recs:
            print(f"not compared: records only the {side} measured: {', '.join(recs[:8])}"
                  + (" ..." if len(recs) > 8 else ""), file=out)
    for copy, stem in res.get("copies_compared_with", {}).items():
        print(f"note: the candidate's runs have more copies of {stem} than the baseline's; {copy} is compared with "
              f"the baseline's {stem}", file=out)
    w = max([len(r["record"]) for r in res["rows"]] + [6])
    print(f"\nPaired timing: {res['metric']}, {res['pairs']} pairs of runs (baseline and candidate side by side); "
          f"change = candidate / baseline - 1 ({res.get('test', 'sign')} test's estimate), [95 % interval], "
          "p one-sided (candidate slower), Holm-adjusted over the rows", file=out)
    print(f"{'record':<{w}}  {'baseline':>10}  {'candidate':>10}  {'change':>7}  {'interval':>17}  "
          f"{'p(Holm)':>8}  verdict", file=out)
    for r in res["rows"]:
        ci = "-" if r["ci"] is None else f"[{_pct(r['ci'][0])}, {_pct(r['ci'][1])}]"
        p = "-" if r["p_holm"] is None else f"{r['p_holm']:.2g}"
        print(f"{r['record']:<{w}}  {r['base']:>10.4g}  {r['new']:>10.4g}  {_pct(r['change']):>7}  {ci:>17}  "
              f"{p:>8}  {r['verdict']}", file=out)


def print_config_differences(diff, out):
    """The filled-in configs' differences that preflight let through, one line each kind."""
    for kind, what in (("ignored", "outside the suites the gate runs, ignored"),
                       ("added", "settings one side lacks, measured as part of the change")):
        if diff[kind]:
            print(f"gate: config differences {what}: " + ", ".join(
                f"{k} ({short_value(x)} vs {short_value(y)})" for k, x, y in diff[kind]), file=out)


def print_count(res, out):
    if res["unmatched_regions"]:
        print(f"not compared: regions only one side counted: {', '.join(res['unmatched_regions'])}", file=out)
    w = max([len(r["region"]) for r in res["rows"]] + [6])
    print("\nCounted (callgrind, per repetition): instructions gate at their threshold; data-cache misses where "
          f"at least {counting.MIN_MISSES} a repetition", file=out)
    print(f"{'region':<{w}}  {'metric':<12}  {'baseline':>12}  {'candidate':>12}  {'change':>8}  verdict", file=out)
    for r in res["rows"]:
        ch = "-" if r["change"] is None else ("+inf%" if math.isinf(r["change"]) else f"{r['change'] * 100:+.2f}%")
        print(f"{r['region']:<{w}}  {r['metric']:<12}  {r['base']:>12.6g}  {r['new']:>12.6g}  {ch:>8}  {r['verdict']}",
              file=out)


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def run(a, out=sys.stdout, progress=None):
    """The gate as the options `a` say; returns the result dict (exit_code, modes, regressions, errors)."""
    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    result = {"output_version": OUTPUT_VERSION, "exit_code": 0, "regressions": [], "errors": [], "modes": {}}
    _check_options(a)
    config = _config_path(a.config) if a.pairs else None
    if config:
        _check_suite_thresholds(a, config)
    count_config = str(_config_path(a.count_config, "--count-config")) if a.count else None
    base, cand = make_sides(a, progress)
    result["baseline"], result["candidate"] = base.label, cand.label
    env = lambda s: f" (env {' '.join(f'{k}={v}' for k, v in s.env.items())})" if s.env else ""  # noqa: E731
    print(f"gate: baseline {base.label}{env(base)}; candidate {cand.label}{env(cand)}", file=out)
    tmp = None
    work = Path(a.work_dir) if a.work_dir else Path(tmp := tempfile.mkdtemp(prefix="dtb-gate-"))
    try:
        if a.pairs:
            try:
                diff = preflight(base, cand, config, a.np)
                print_config_differences(diff, out)
                result["config_differences"] = {kind: [{"key": k, "baseline": x, "candidate": y} for k, x, y in d]
                                                for kind, d in diff.items()}
                def first(r):
                    paired.check_compatible(r["baseline"][0], r["candidate"][0])
                    paired.check_pairs_suffice(a.pairs, r["baseline"][0], r["candidate"][0], a.alpha, a.calibrated)

                reps = interleaved([base, cand], a.pairs, config, a.np, work / "runs", progress, after_first=first)
                res = paired.analyse(reps["baseline"], reps["candidate"], a.threshold, a.alpha, a.calibrated,
                                     a.suite_thresholds, statistic=a.statistic, test=a.test)
                print_paired(res, out)
                result["modes"]["paired"] = res
                result["regressions"] += ["timing: " + ln for ln in res["regressions"]]
            except CandidateFailed as e:
                result["regressions"].append(str(e))
            except GateError as e:
                result["errors"].append(f"paired timing: {e}")
        if a.count:
            try:
                b, c = counting.count_sides(base, cand, work / "count", count_config, a.count_reps, a.count_only)
                res = counting.compare(b, c, {"instructions": a.count_threshold, "misses": a.miss_threshold})
                print_count(res, out)
                result["modes"]["count"] = res
                result["regressions"] += ["count: " + ln for ln in res["regressions"]]
            except CandidateFailed as e:
                result["regressions"].append(f"count: {e}")
            except GateError as e:
                result["errors"].append(f"count: {e}")
    finally:
        if tmp:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    result["exit_code"] = 1 if result["regressions"] else (2 if result["errors"] else 0)
    return result


def _write_json(path, obj):
    try:
        Path(path).write_text(json.dumps(_jsonable(obj), indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        print(f"compare.py ab: --json: cannot write {path} ({e.strerror}); the verdict stands", file=sys.stderr)


def main(argv):
    a = parser().parse_args(argv)
    install_interrupt_handlers()
    try:
        result = run(a)
    except GateError as e:
        print(f"compare.py ab: {e}", file=sys.stderr)
        if a.json and not str(e).startswith("--json"):
            _write_json(a.json, {"output_version": OUTPUT_VERSION, "exit_code": 2, "error": str(e)})
        return 2
    except Interrupted as e:
        print(f"compare.py ab: {e}: nothing decided", file=sys.stderr)
        return 128 + e.signum
    except Exception as e:  # a failure of this machine or a bug, not a verdict: never exit 1 ("regression")
        print(f"compare.py ab: cannot compare: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print("", flush=True)
    for line in result["regressions"]:
        print(f"REGRESSION {line}")
    for line in result["errors"]:
        print(f"compare.py ab: cannot compare: {line}", file=sys.stderr)
    n_t = len(result["modes"].get("paired", {}).get("rows", []))
    n_c = sum(1 for r in result["modes"].get("count", {}).get("rows", []) if r["verdict"] != "info")
    print(f"gate: {n_t} timings over {a.pairs} pairs, {n_c} counts; {len(result['regressions'])} regressions, "
          f"{len(result['errors'])} modes not compared; exit {result['exit_code']}")
    if a.json:
        _write_json(a.json, result)
    return result["exit_code"]
