#!/usr/bin/python3
"""ctest compare_script: scripts/compare.py on real, doctored and synthetic reports.

Usage: compare_test.py PATH/TO/dtbench PATH/TO/mpiexec [unittest options]

Runs the quick config twice at 4 ranks (harness/configs/quick.json; on a 2-core machine
the ranks are oversubscribed, so the two runs differ by real noise) and checks that:
- the two reports of the same code compare clean (exit 0) with the options of .ci/run's
  cross-check against the stored baseline (read from .ci/run, so the test and CI cannot drift
  apart: --checks-only, where only checks and suites gate), and at the former CI threshold 2
  (a time x3) when the runs had the cores to themselves (skipped, saying why, when other
  processes used more than a quarter of a core meanwhile: ctest -j runs other 4-rank tests
  beside this one);
- a copy with one all_reduce's busbw cut by 20% (its time samples x1.25) and one
  conformance check flipped to failed exits 1 and names both; with --checks-only, the check alone;
- a different schema_version, world size, device or suite config exits 2 with one line
  naming the field, and compares with --force; --json parses; a missing or malformed file
  exits 2 with one line.
Synthetic reports cover the statistics: too few samples for the U test (n=3 vs 3: threshold
alone, flagged), a change beyond the threshold that the samples call noise, Welch's test
from n/mean/stddev, bare numbers, unknown fields, duplicate record names.
About 20 s on 2 cores alone (two dtbench runs of ~7 s, ~30 compare.py calls), up to a
minute when other tests share the cores.
"""
import copy
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPARE = ROOT / "scripts" / "compare.py"
PYTHON = "/usr/bin/python3"
QUICK = ROOT / "harness" / "configs" / "quick.json"
DTBENCH = MPIEXEC = None  # from argv
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
RUN_TIMEOUT_S = 300


# Above this many cores used by other processes while the two same-code reports ran, their
# comparison at the lone-run threshold is not asserted (see test_same_code_compares_clean). The
# lone-run figures come from runs where others used under 0.25 of a core.
SHARED_CORES = 0.25


def busy_cpu_s():
    """CPU-seconds the whole machine has been busy (steal included), or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# A threshold of the two-report mode for two lone runs of the quick config on a 2-core machine: a time
# x3, what .ci/run used before the paired A/B gate (the measurements: results/logs/ci.md).
LONE_RUN_THRESHOLD = 2.0


def ci_crosscheck_options():
    """The options .ci/run gives compare.py for its cross-check against results/baselines/ (the line that
    compares results/baselines/ci-quick-np4.json)."""
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if "scripts/compare.py results/baselines/" in line:
            return [w for w in line.split() if w.startswith("--")]
    raise AssertionError(".ci/run has no compare.py line against results/baselines/")


def compare(*args):
    """Runs compare.py; returns (exit status, stdout, stderr)."""
    p = subprocess.run([PYTHON, str(COMPARE)] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def write(path, obj):
    Path(path).write_text(json.dumps(obj))
    return path


def timing(samples):
    s = sorted(samples)
    n = len(s)
    mean = sum(s) / n
    sd = (sum((x - mean) ** 2 for x in s) / (n - 1)) ** 0.5 if n > 1 else 0.0
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"n": n, "median": med, "min": s[0], "max": s[-1], "mean": mean, "stddev": sd, "samples": list(samples)}


def synthetic(records, checks=(), suites=("train",)):
    """A minimal report of the given records and checks."""
    ctx = {"schema_version": 1, "backend": "cpu", "comm_backend": "mpi", "devices": ["cpu"], "world_size": 4,
           "host_name": "h", "run_id": "x", "config": {"name": "t", "train": {"steps": 3}}}
    return {"schema_version": 1, "context": ctx, "benchmarks": list(records), "checks": list(checks),
            "suites": [{"name": s, "status": "passed"} for s in suites]}


def rec(name, **fields):
    return {"name": name, "run_name": name, "run_type": "iteration", "iterations": 1, "time_unit": "ms", **fields}


class RealReports(unittest.TestCase):
    """Two quick runs of the same code, and doctored copies of the first."""

    @classmethod
    def quick_run(cls, name):
        """Runs the quick config at 4 ranks; returns the report's path. Notes in cls.shared[name]
        how many cores other processes used meanwhile (None where /proc/stat is missing)."""
        cmd = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", "4", DTBENCH, "run", "--config", str(QUICK),
               "--output-dir", str(cls.dir), "--run-id", name]
        busy0, own0, t0 = busy_cpu_s(), own_children_cpu_s(), time.monotonic()
        p = subprocess.run(cmd, cwd=cls.dir, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=RUN_TIMEOUT_S)
        busy1, own1, t1 = busy_cpu_s(), own_children_cpu_s(), time.monotonic()
        cls.shared[name] = None if busy0 is None else max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)
        report = cls.dir / f"{name}.json"
        if p.returncode != 0 or not report.exists():
            raise AssertionError(f"dtbench quick run {name} failed ({p.returncode}):\n{p.stdout[-3000:]}")
        return report

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="compare_test.")
        cls.dir = Path(cls.tmp.name)
        cls.shared = {}
        cls.reports = [cls.quick_run("a"), cls.quick_run("b")]
        cls.a = json.loads(cls.reports[0].read_text())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def doctored(self, name, change):
        r = copy.deepcopy(self.a)
        change(r)
        return write(self.dir / f"{name}.json", r)

    def assert_one_line_error(self, rc, out, err, *words):
        self.assertEqual(rc, 2, out + err)
        self.assertEqual(out, "")
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        for w in words:
            self.assertIn(w, err)

    def test_names_are_unique_keys(self):
        # compare.py matches records and checks by name: in a real report they are unique.
        names = [b["name"] for b in self.a["benchmarks"]]
        self.assertEqual(len(names), len(set(names)))
        checks = [c["name"] for c in self.a["checks"]]
        self.assertEqual(len(checks), len(set(checks)))
        self.assertTrue(any("samples" in b.get("time_us", {}) for b in self.a["benchmarks"]))

    def test_same_code_passes_ci_crosscheck(self):
        options = ci_crosscheck_options()
        self.assertIn("--checks-only", options)
        rc, out, err = compare(*self.reports, *options)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("exit 0 (no regression)", out)

    def test_committed_baseline_passes_ci_crosscheck(self):
        # .ci/run ends by cross-checking a 4-rank quick run against the committed baseline; a config key
        # added since the baseline was made ("<absent> vs true") or a check it lacks fails CI only there,
        # after twenty minutes. Caught here instead, with the command that regenerates it.
        baseline = ROOT / "results" / "baselines" / "ci-quick-np4.json"
        rc, out, err = compare(baseline, self.reports[0], *ci_crosscheck_options())
        self.assertEqual(rc, 0, f"{out[-2000:]}{err}\nthe committed CI baseline no longer cross-checks with this "
                         "build's quick run: regenerate it as docs/ci.md says (The CI job, step 2)")

    def test_same_code_compares_clean(self):
        threshold = LONE_RUN_THRESHOLD
        gate = ["--threshold", str(threshold), "--suite-threshold", "collectives=20"]
        rc, out, err = compare(*self.reports, *gate)
        shared = [self.shared[r.stem] for r in self.reports]
        if rc == 1 and None not in shared and max(shared) > SHARED_CORES:
            # The lone-run threshold is for runs alone on the machine.
            # Beside another 4-rank test (ctest -j) a 15 ms step was measured at 377 ms: beyond
            # any useful threshold. Register this test RUN_SERIAL for it to always assert.
            self.skipTest(f"other processes used {max(shared):.2f} cores while the reports ran; the "
                          f"threshold {threshold:g} holds for a lone run. Exceeded: "
                          + "; ".join(ln for ln in out.splitlines() if ln.startswith("REGRESSION"))[:600])
        self.assertEqual(rc, 0, f"two runs of the same code regressed at --threshold {threshold} (other processes "
                                f"used {shared} cores meanwhile):\n{out}{err}")
        self.assertRegex(out, r"summary: \d+ metrics in \d+ records: 0 regressed")
        self.assertIn("exit 0 (no regression)", out)
        self.assertRegex(out, r"(?m)^metric +base +new +change +p-value  verdict$")

    def test_same_code_json(self):
        rc, out, err = compare(*self.reports, "--threshold", str(LONE_RUN_THRESHOLD), "--json")
        self.assertIn(rc, (0, 1), err)  # whether noise exceeded the threshold: test_same_code_compares_clean
        j = json.loads(out)
        self.assertEqual(j["exit_code"], rc)
        self.assertEqual(j["regression"], rc == 1)
        self.assertEqual(j["threshold"], LONE_RUN_THRESHOLD)
        self.assertEqual(j["checks"]["regressions"], [])
        self.assertTrue(j["summary"].startswith("summary: "))
        self.assertEqual(j["checks"]["compared"], len(self.a["checks"]))
        self.assertEqual(j["records"]["matched"], len(self.a["benchmarks"]))
        busbw = [m for m in j["metrics"] if m["metric"] == "busbw_GBps"]
        self.assertTrue(busbw)
        self.assertTrue(all(m["direction"] == "higher" and m["test"] == "mann-whitney" for m in busbw))
        steps = [m for m in j["metrics"] if m["record"] == "train/gpt/dp:4" and m["metric"] == "step_time_ms (median)"]
        self.assertEqual(len(steps), 1)
        self.assertEqual(steps[0]["direction"], "lower")

    def test_doctored_busbw_and_check_regress(self):
        # The largest all_reduce whose repetitions spread least, its times multiplied by f = 1.25, or
        # by more where its own samples spread wider (f = 1.3 x max/min): then every slowed sample
        # lies above every original, and the U test over the 5 repetitions calls the cut
        # significant (p = 2/252). A fixed 1.25 was not enough when the machine was loaded and
        # every all_reduce record spread past 20 % (a CI run beside a build, 2026-12-03).
        spread = lambda b: b["time_us"]["max"] / b["time_us"]["min"]  # noqa: E731
        all_reduce = [b for b in self.a["benchmarks"] if b.get("op") == "all_reduce"]
        tight = [b for b in all_reduce if spread(b) < 1.2]
        chosen = max(tight, key=lambda b: b["bytes"]) if tight else min(all_reduce, key=spread)
        key, f = chosen["name"], max(1.25, 1.3 * spread(chosen))
        check = next(c["name"] for c in self.a["checks"] if c["suite"] == "conformance" and c["passed"])

        def slow_and_failing(r):
            b = next(b for b in r["benchmarks"] if b["name"] == key)
            b["busbw_GBps"] /= f
            b["algbw_GBps"] /= f
            for k in ("real_time", "cpu_time"):
                b[k] *= f
            t = b["time_us"]
            t["samples"] = [x * f for x in t["samples"]]
            for k in ("median", "min", "max", "mean", "stddev"):
                t[k] *= f
            c = next(c for c in r["checks"] if c["name"] == check)
            c["passed"], c["verdict"] = False, "failed"
            c["value"] = 2 * c["tolerance"] if c["tolerance"] else 1.0
        doctored = self.doctored("doctored", slow_and_failing)

        rc, out, err = compare(self.reports[0], doctored)
        self.assertEqual(rc, 1, out + err)
        lines = [ln for ln in out.splitlines() if ln.startswith("REGRESSION")]
        self.assertTrue(any(ln.startswith(f"REGRESSION {key} busbw_GBps: ") for ln in lines), out)
        self.assertIn(f"REGRESSION check {check}: passed -> failed", out)
        # Nothing else: the other records and checks are identical.
        self.assertTrue(all(key in ln or check in ln for ln in lines), lines)
        self.assertIn("1 passed -> failed", out)

        rc, out, err = compare(self.reports[0], doctored, "--json")
        self.assertEqual(rc, 1)
        j = json.loads(out)
        self.assertEqual(j["exit_code"], 1)
        row = next(m for m in j["metrics"] if m["record"] == key and m["metric"] == "busbw_GBps")
        self.assertTrue(row["regression"])
        self.assertAlmostEqual(row["change"], 1 / f - 1, places=6)  # -20 % at f = 1.25
        self.assertAlmostEqual(row["worse_by"], f - 1, places=6)
        self.assertEqual(row["test"], "mann-whitney")  # 5 repetitions vs 5: the U test can reach 0.05
        self.assertLess(row["p_value"], 0.05)
        self.assertEqual([c["name"] for c in j["checks"]["regressions"]], [check])

        # CI's cross-check against the stored baseline: the failed check alone.
        rc, out, err = compare(self.reports[0], doctored, *ci_crosscheck_options())
        self.assertEqual(rc, 1, out + err)
        self.assertEqual([ln for ln in out.splitlines() if ln.startswith("REGRESSION")],
                         [next(ln for ln in lines if check in ln)])

        # The same cut is no regression at a threshold above f - 1 (worse by 25 % at f = 1.25).
        rc, out, _ = compare(self.reports[0], self.doctored("only_slow", lambda r: [
            slow_and_failing(r), next(c for c in r["checks"] if c["name"] == check).update(passed=True, verdict="passed")]),
            "--threshold", str(f - 1 + 0.05))
        self.assertEqual(rc, 0, out)

    def test_schema_version_mismatch(self):
        v, w = self.a["schema_version"], self.a["schema_version"] + 1

        def next_version(r):
            r["schema_version"] = w
            r["context"]["schema_version"] = w
        other = self.doctored("schema_next", next_version)
        rc, out, err = compare(self.reports[0], other)
        self.assert_one_line_error(rc, out, err, "schema versions", f"has {v},", f"has {w}")
        rc, out, err = compare(self.reports[0], other, "--force")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("warning (--force): incompatible schema_version", out)

    def test_incompatible_contexts(self):
        cases = {
            "world_size": lambda r: r["context"].update(world_size=2),
            "devices": lambda r: r["context"].update(devices=["NVIDIA H200"]),
            "backend": lambda r: r["context"].update(backend="cuda"),
            "config.name": lambda r: r["context"]["config"].update(name="default"),
            "config.collectives.max_bytes": lambda r: r["context"]["config"]["collectives"].update(max_bytes=1024),
            "config.conformance.layouts": lambda r: r["context"]["config"]["conformance"].update(layouts=["TP2"]),
            "config.seed": lambda r: r["context"]["config"].update(seed=1),
            # A key the other report lacks, set to something that configures: refused.
            "config.train.new_every": lambda r: r["context"]["config"]["train"].update(new_every=5),
        }
        for field, change in cases.items():
            with self.subTest(field=field):
                other = self.doctored("ctx", change)
                rc, out, err = compare(self.reports[0], other)
                self.assert_one_line_error(rc, out, err, "incompatible", field, "--force")
                rc, out, err = compare(self.reports[0], other, "--force")
                self.assertEqual(rc, 0, out + err)
                self.assertIn(f"warning (--force): incompatible {field}", out)
        # Not refused: a suite that neither report ran, the host, the output directory.
        other = self.doctored("ctx_ok", lambda r: [r["context"]["config"]["gemm"].update(hidden=8),
                                                    r["context"].update(host_name="elsewhere"),
                                                    r["context"]["config"].update(output_dir="/x")])
        rc, out, err = compare(self.reports[0], other)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("note: context differs (not refused): host_name", out)
        # Nor a key one report lacks (a later version added it) at its off value.
        other = self.doctored("ctx_new_keys", lambda r: r["context"]["config"]["train"].update(
            new_dir="", new_every=0, new_flag=False, new_mode="none"))
        rc, out, err = compare(self.reports[0], other)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("config.train.new_every <absent> vs 0", out)

    def test_bad_input(self):
        missing = self.dir / "no-such-report.json"
        rc, out, err = compare(self.reports[0], missing)
        self.assert_one_line_error(rc, out, err, str(missing), "no such file")
        rc, out, err = compare(missing, self.reports[0])
        self.assert_one_line_error(rc, out, err, "no such file")
        bad = self.dir / "bad.json"
        bad.write_text('{"benchmarks": [')
        rc, out, err = compare(self.reports[0], bad)
        self.assert_one_line_error(rc, out, err, str(bad), "malformed JSON")
        rc, out, err = compare(self.reports[0], write(self.dir / "list.json", [1, 2]))
        self.assert_one_line_error(rc, out, err, "not a dtbench report")
        rc, out, err = compare(self.reports[0], self.reports[1], "--alpha", "1.5")
        self.assert_one_line_error(rc, out, err, "--alpha")
        # --json: still exit 2 and one line on stderr, and a JSON object saying why on stdout.
        rc, out, err = compare(self.reports[0], missing, "--json")
        self.assertEqual(rc, 2)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertIn("no such file", json.loads(out)["error"])

    def test_fields_compare_reads_are_checked(self):
        """Each made a traceback (exit 1, read as a regression) or was dropped from the table without a word."""
        train = next(i for i, b in enumerate(self.a["benchmarks"]) if b["name"].startswith("train/"))
        cases = [
            ("strnum", lambda r: r["benchmarks"][train].update(real_time="30.1"), "real_time must be a number"),
            ("timing", lambda r: r["benchmarks"][train]["step_time_ms"].update(median="30.1"),
             "step_time_ms must be a number, or a timing object"),
            ("unit", lambda r: r["benchmarks"][0].update(time_unit=["us"]), "time_unit must be a string"),
            ("checkvalue", lambda r: r["checks"][0].update(value="abc"), "value must be a number or null"),
            ("checksuite", lambda r: r["checks"][0].update(suite=["collectives"]), "suite must be a string"),
            ("suites", lambda r: r["context"]["config"].update(suites=5), "context.config.suites must be a list"),
        ]
        for name, f, words in cases:
            rc, out, err = compare(self.reports[0], self.doctored(name, f))
            self.assert_one_line_error(rc, out, err, words)
        # JSON that only Python's lenient parser reads: a key twice (the last won), a number past a double.
        text = self.reports[0].read_text()
        dup = self.dir / "dupkey.json"
        dup.write_text(text.replace('"schema_version":', '"schema_version": 9, "schema_version":', 1))
        self.assert_one_line_error(*compare(self.reports[0], dup), "appears twice in one object")
        inf = self.dir / "inf.json"
        inf.write_text(text.replace('"schema_version":', '"overflow": 1e999, "schema_version":', 1))
        self.assert_one_line_error(*compare(self.reports[0], inf), "1e999 overflows a double")
        # Usage errors in one line; no abbreviation of --force.
        self.assert_one_line_error(*compare(self.reports[0], self.reports[1], "--threshold", "abc"), "invalid float")
        self.assert_one_line_error(*compare(self.reports[0], self.reports[1], "--f"), "unrecognized arguments: --f")
        rc, out, err = compare(self.reports[0], self.reports[1], "--json", "--threshold", "abc")  # JSON as on exit 2
        self.assertEqual((rc, len(err.strip().splitlines())), (2, 1), err)
        self.assertIn("invalid float", json.loads(out)["error"])

    def test_missing_records_checks_and_failed_suite(self):
        def drop(r):
            r["benchmarks"] = [b for b in r["benchmarks"] if not b["name"].startswith("conformance/")]
            r["checks"] = [c for c in r["checks"] if c["suite"] != "conformance"]
            r["suites"] = [s for s in r["suites"] if s["name"] != "conformance"]
        rc, out, err = compare(self.reports[0], self.doctored("dropped", drop))
        # The suite is in NEW's config and never reported: a regression; its records and checks are listed.
        self.assertEqual(rc, 1, out + err)
        self.assertIn("REGRESSION suite conformance: passed in BASE, not run in NEW", out)
        # The quick config: 7 conformance layouts in fp32 and bf16, DP4:local2:bf16 skipped (no reference).
        self.assertIn("missing records (in BASE only) (13): conformance/TP2", out)
        self.assertRegex(out, r"missing checks \(in BASE only\) \(\d+\): conformance/")
        self.assertIn("missing suites (in BASE only) (1): conformance", out)

        # Not selected in NEW (--suites collectives,train): listed, not gated.
        def unselected(r):
            drop(r)
            r["context"]["config"]["suites"] = [s for s in r["context"]["config"]["suites"] if s != "conformance"]
        rc, out, err = compare(self.reports[0], self.doctored("unselected", unselected))
        self.assertEqual(rc, 0, out + err)
        self.assertIn("missing suites (in BASE only) (1): conformance", out)

        def errored(r):
            drop(r)
            r["suites"].append({"name": "conformance", "status": "error", "error": "layout TP2: boom"})
        rc, out, err = compare(self.reports[0], self.doctored("errored", errored))
        self.assertEqual(rc, 1, out + err)
        self.assertIn("REGRESSION suite conformance: passed -> error: layout TP2: boom", out)


class SyntheticReports(unittest.TestCase):
    """The statistics on small hand-made reports."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="compare_test.")
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_pair(self, base, new, *args):
        rc, out, err = compare(write(self.dir / "base.json", base), write(self.dir / "new.json", new), "--json", *args)
        self.assertIn(rc, (0, 1), err)
        return rc, json.loads(out)

    def row(self, j, metric, record=None):
        return next(m for m in j["metrics"] if m["metric"] == metric and (record is None or m["record"] == record))

    def test_insufficient_samples_fall_back_to_threshold(self):
        # At 3 vs 3 the U test's smallest p-value is 0.1 > 0.05: threshold alone, flagged.
        base = synthetic([rec("train/x", step_time_ms=timing([10.0, 10.1, 10.2]))])
        new = synthetic([rec("train/x", step_time_ms=timing([15.0, 15.1, 15.2]))])
        rc, j = self.run_pair(base, new)
        self.assertEqual(rc, 1)
        r = self.row(j, "step_time_ms (median)")
        self.assertEqual(r["test"], "insufficient samples")
        self.assertTrue(r["regression"])
        rc, out, _ = compare(self.dir / "base.json", self.dir / "new.json")
        self.assertRegex(out, r"step_time_ms \(median\) .* insuff\.  REGRESSION \(threshold only\)")
        self.assertIn("threshold only: insufficient samples, n=3 vs 3", out)
        # Within the threshold: no regression either way.
        rc, j = self.run_pair(base, new, "--threshold", "0.6")
        self.assertEqual(rc, 0)
        # 4 vs 4 can reach 0.029 < 0.05: the U test decides.
        base4 = synthetic([rec("train/x", step_time_ms=timing([10.0, 10.1, 10.2, 10.3]))])
        new4 = synthetic([rec("train/x", step_time_ms=timing([15.0, 15.1, 15.2, 15.3]))])
        rc, j = self.run_pair(base4, new4)
        self.assertEqual((rc, self.row(j, "step_time_ms (median)")["test"]), (1, "mann-whitney"))

    def test_beyond_threshold_but_noise_is_not_a_regression(self):
        base = synthetic([rec("train/x", step_time_ms=timing([10, 20, 30, 40, 50, 60, 70]))])
        new = synthetic([rec("train/x", step_time_ms=timing([15, 25, 35, 45, 55, 65, 75]))])
        rc, j = self.run_pair(base, new)
        r = self.row(j, "step_time_ms (median)")
        self.assertEqual(rc, 0)
        self.assertGreater(r["worse_by"], 0.1)
        self.assertGreater(r["p_value"], 0.05)
        self.assertEqual(r["verdict"], "worse, not significant")
        # Faster and significant: an improvement, exit 0.
        rc, j = self.run_pair(new, base)
        self.assertEqual((rc, self.row(j, "step_time_ms (median)")["verdict"]), (0, "better, not significant"))
        fast = synthetic([rec("train/x", step_time_ms=timing([5, 5.1, 5.2, 5.3, 5.4]))])
        rc, j = self.run_pair(base, fast)
        self.assertEqual((rc, self.row(j, "step_time_ms (median)")["verdict"]), (0, "improved"))

    def test_welch_without_samples(self):
        def summary(mean, sd, n=20):
            return {"n": n, "median": mean, "min": max(0.0, mean - sd), "max": mean + sd, "mean": mean, "stddev": sd}
        base = synthetic([rec("train/x", step_time_ms=summary(10.0, 0.1))])
        rc, j = self.run_pair(base, synthetic([rec("train/x", step_time_ms=summary(12.0, 0.1))]))
        r = self.row(j, "step_time_ms (median)")
        self.assertEqual((rc, r["test"], r["regression"]), (1, "welch", True))
        self.assertLess(r["p_value"], 1e-6)
        rc, j = self.run_pair(base, synthetic([rec("train/x", step_time_ms=summary(12.0, 30.0))]))
        r = self.row(j, "step_time_ms (median)")
        self.assertEqual((rc, r["test"], r["verdict"]), (0, "welch", "worse, not significant"))

    def test_derived_throughput_takes_the_time_samples(self):
        def coll(scale):
            t = timing([x * scale for x in (100, 101, 102, 103, 104)])
            return rec("collectives/all_reduce/bytes:1024/placement:in_place", time_unit="us", real_time=t["median"],
                       time_us=t, busbw_GBps=1.5 * 1024 / (t["median"] * 1e3), algbw_GBps=1024 / (t["median"] * 1e3),
                       bytes=1024, op="all_reduce")
        rc, j = self.run_pair(synthetic([coll(1.0)]), synthetic([coll(1.25)]))
        self.assertEqual(rc, 1)
        for metric, change in (("busbw_GBps", -0.2), ("algbw_GBps", -0.2), ("time_us (median)", 0.25)):
            r = self.row(j, metric)
            self.assertTrue(r["regression"], metric)
            self.assertAlmostEqual(r["change"], change, places=9)
            self.assertAlmostEqual(r["worse_by"], 0.25, places=9)
            self.assertEqual(r["test"], "mann-whitney")
        self.assertFalse([m for m in j["metrics"] if m["metric"].startswith("real_time")])  # = time_us's median
        # busbw cut without its samples: the samples say nothing changed, so no regression.
        inconsistent = coll(1.0)
        inconsistent["busbw_GBps"] *= 0.8
        rc, j = self.run_pair(synthetic([coll(1.0)]), synthetic([inconsistent]))
        self.assertEqual((rc, self.row(j, "busbw_GBps")["verdict"]), (0, "worse, not significant"))

    def test_bare_numbers_unknown_fields_and_info(self):
        base = synthetic([rec("gemm/x", real_time=2.0, tflops=1.0, new_metric_xyz=1.0, final_loss=3.0, M=8)])
        new = synthetic([rec("gemm/x", real_time=2.0, tflops=0.5, new_metric_xyz=100.0, final_loss=9.0, M=8)])
        rc, j = self.run_pair(base, new)
        self.assertEqual(rc, 1)
        t = self.row(j, "tflops")
        self.assertEqual((t["test"], t["direction"], t["regression"]), ("no samples", "higher", True))
        u = self.row(j, "new_metric_xyz")
        self.assertEqual((u["direction"], u["unknown_field"], u["regression"]), ("info", True, False))
        self.assertFalse(self.row(j, "final_loss")["regression"])
        self.assertFalse([m for m in j["metrics"] if m["metric"] == "M"])  # a parameter, not a metric
        # The unknown field alone never gates.
        new["benchmarks"][0]["tflops"] = 1.0
        rc, j = self.run_pair(base, new)
        self.assertEqual(rc, 0)

    def test_duplicate_names_are_told_apart(self):
        def pair(f32, f64):
            return [rec("train/x", dtype="f64", step_time_ms=timing(f64)),
                    rec("train/x", dtype="f32", step_time_ms=timing(f32))]
        base = synthetic(pair([1, 1.1, 1.2, 1.3, 1.4], [2, 2.1, 2.2, 2.3, 2.4]))
        new = synthetic(list(reversed(pair([1, 1.1, 1.2, 1.3, 1.4], [2, 2.1, 2.2, 2.3, 2.4]))))
        rc, j = self.run_pair(base, new)
        self.assertEqual(rc, 0)
        self.assertEqual({m["record"] for m in j["metrics"]}, {"train/x{dtype=f32}", "train/x{dtype=f64}"})
        self.assertEqual({m["change"] for m in j["metrics"]}, {0.0})

    def test_a_further_copy_of_a_record_is_compared(self):
        # NEW measures train/x twice, BASE once, nothing telling the copies apart: the second copy, 3x slower,
        # is the same measurement made again and is compared with BASE's (it was listed as new, exit 0).
        same = [1, 1.1, 1.2, 1.3, 1.4]
        base = synthetic([rec("train/x", step_time_ms=timing(same))])
        new = synthetic([rec("train/x", step_time_ms=timing(same)),
                         rec("train/x", step_time_ms=timing([3 * x for x in same]))])
        rc, j = self.run_pair(base, new)
        self.assertEqual(rc, 1, j)
        r = self.row(j, "step_time_ms (median)", "train/x#2")
        self.assertTrue(r["regression"], r)
        self.assertAlmostEqual(r["change"], 2.0)
        self.assertEqual(j["records"]["new"], [])
        rc, out, _ = compare(self.dir / "base.json", self.dir / "new.json")
        self.assertIn("train/x#2: NEW has more copies of this record than BASE; compared with BASE's train/x", out)
        # Both copies as fast: no regression; BASE's further copy alone in BASE is missing, not gated.
        rc, j = self.run_pair(base, synthetic([rec("train/x", step_time_ms=timing(same))] * 2))
        self.assertEqual((rc, j["records"]["new"]), (0, []))
        rc, j = self.run_pair(synthetic([rec("train/x", step_time_ms=timing(same))] * 2), base)
        self.assertEqual((rc, j["records"]["missing"]), (0, ["train/x#2"]))

    def test_checks(self):
        def check(name, passed):
            return {"name": name, "suite": "train", "passed": passed, "value": 0.0 if passed else 2.0,
                    "tolerance": 1.0}
        base = synthetic([], [check("a", True), check("b", False), check("c", False), check("gone", True)])
        new = synthetic([], [check("a", True), check("b", True), check("c", False), check("added", False)])
        rc, j = self.run_pair(base, new)
        self.assertEqual(rc, 1)  # "gone" passed in BASE and its suite ran in NEW: it vanished
        ck = j["checks"]
        self.assertEqual([c["name"] for c in ck["fixed"]], ["b"])
        self.assertEqual([c["name"] for c in ck["still_failing"]], ["c"])
        self.assertEqual([c["name"] for c in ck["new"]], ["added"])
        self.assertEqual([c["name"] for c in ck["missing"]], ["gone"])
        self.assertEqual(ck["vanished"], ["gone"])
        self.assertEqual(j["regressions"], ["REGRESSION 1 check(s) passed in BASE and are missing from NEW: gone"])
        rc, j = self.run_pair(base, synthetic([], new["checks"] + [check("gone", True)]))
        self.assertEqual(rc, 0)
        rc, j = self.run_pair(base, synthetic([], [check("a", False)]))
        self.assertEqual((rc, [c["name"] for c in j["checks"]["regressions"]]), (1, ["a"]))

    def test_a_check_not_judged_in_new_is_listed_not_a_regression(self):
        # A timing check that the machine's other work kept from being judged (verdict not_judged, passed
        # false) in NEW is neither a regression nor missing, with .ci/run's options or without.
        def check(name, verdict):
            c = {"name": name, "suite": "pipeline", "passed": verdict == "passed", "value": 0.07, "tolerance": 0.05,
                 "verdict": verdict}
            if verdict == "not_judged":
                c["not_judged_reason"] = "the machine was busy: figures"
            return c
        base = synthetic([], [check("pipeline/1f1b/p:2/m:4/bubble", "passed"), check("pipeline/x", "passed")],
                         suites=("pipeline",))
        new = synthetic([], [check("pipeline/1f1b/p:2/m:4/bubble", "not_judged"), check("pipeline/x", "passed")],
                        suites=("pipeline",))
        for opts in ([], ["--checks-only"]):
            rc, j = self.run_pair(base, new, *opts)
            self.assertEqual(rc, 0, j["regressions"])
            ck = j["checks"]
            self.assertEqual(ck["regressions"] + ck["vanished"] + ck["still_failing"], [])
            self.assertEqual([(c["name"], c["not_judged_reason"]) for c in ck["not_judged"]],
                             [("pipeline/1f1b/p:2/m:4/bubble", "the machine was busy: figures")])
            self.assertIn("1 not judged in NEW", j["summary"])
        rc, out, err = compare(write(self.dir / "b.json", base), write(self.dir / "n.json", new), "--checks-only")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("checks not judged in NEW (the machine was busy; not a regression) (1): "
                      "pipeline/1f1b/p:2/m:4/bubble", out)
        # Judged and failed is still a regression; a verdict at odds with passed is refused.
        rc, j = self.run_pair(base, synthetic([], [check("pipeline/1f1b/p:2/m:4/bubble", "failed"),
                                                   check("pipeline/x", "passed")], suites=("pipeline",)))
        self.assertEqual((rc, [c["name"] for c in j["checks"]["regressions"]]), (1, ["pipeline/1f1b/p:2/m:4/bubble"]))
        bad = synthetic([], [dict(check("pipeline/x", "not_judged"), passed=True)], suites=("pipeline",))
        rc, out, err = compare(write(self.dir / "b.json", base), write(self.dir / "bad.json", bad))
        self.assertEqual(rc, 2, out + err)
        self.assertIn("verdict must be passed, failed or not_judged", err)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: compare_test.py PATH/TO/dtbench PATH/TO/mpiexec [unittest options]")
    DTBENCH, MPIEXEC = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
