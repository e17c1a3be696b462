#!/usr/bin/python3
"""ctest gate_stats: the gate's statistics and decisions on made-up data (scripts/dtbreport/gate/).

- the exact signed-rank p-value equals scipy's exact one (no ties) and its normal approximation's
  neighbourhood with ties; the Hodges-Lehmann estimate and interval are those of the textbook example;
  Holm's adjustment;
- the paired analysis flags a record slowed 12 % in every pair and not one that only one pair moves, nor
  one slowed 3 % (below the 5 % threshold); a check that fails in a candidate run is a regression;
  incompatible reports (another world size) are refused;
- callgrind dumps parse, and the counts' comparison flags instructions beyond 1 % and ignores cache misses
  below the floor;
- compare.py ab refuses bad input with exit 2 and one line: an unknown ref, a baseline binary that is not
  executable, --pairs below the minimum, a malformed --candidate-env, an unknown config, empty options, an
  unwritable --json, a --suite-threshold of a suite the config does not run; compare.py BASE NEW refuses a
  malformed report (a context.config that is not an object, an integer beyond any float, deep nesting, a
  device file) in one line, and fails on a check or suite that passed in BASE and vanished from NEW.
"""
import copy
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from dtbreport.gate import GateError, count, paired, runner, stats  # noqa: E402

PYTHON = "/usr/bin/python3"


class Stats(unittest.TestCase):
    def test_signed_rank_matches_scipy_exact(self):
        from scipy.stats import wilcoxon
        rng = random.Random(3)
        for n in (6, 9, 12, 20):
            for shift in (0.0, 0.3, 1.0):
                x = [rng.gauss(shift, 1.0) for _ in range(n)]
                want = wilcoxon(x, alternative="greater", method="exact").pvalue
                self.assertAlmostEqual(stats.signed_rank_p_greater(x), want, places=12, msg=(n, shift))

    def test_signed_rank_extremes_and_ties(self):
        self.assertEqual(stats.signed_rank_p_greater([0.1] * 12), 1 / 4096)  # all positive, tied
        self.assertEqual(stats.signed_rank_p_greater([-0.1] * 12), 1.0)
        self.assertEqual(stats.signed_rank_p_greater([0.0] * 5), 1.0)
        # Ties among |x| (average ranks): close to scipy's normal approximation with the tie correction.
        from scipy.stats import wilcoxon
        x = [0.1, 0.1, 0.2, -0.1, 0.3, 0.2, 0.4, 0.1, -0.2, 0.5, 0.3, 0.2]
        approx = wilcoxon(x, alternative="greater", method="approx", correction=True).pvalue
        self.assertLess(abs(stats.signed_rank_p_greater(x) - approx), 0.01)

    def test_hodges_lehmann_and_interval(self):
        # Hollander & Wolfe's Hamilton depression differences (n = 9): the estimate is the median of the 45
        # Walsh averages; the interval's c is checked by enumerating the 512 sign patterns of ranks 1..9.
        d = [0.952, 0.412, -0.643, 0.235, 0.548, 0.489, 0.430, 0.260, 0.113]
        w = sorted((d[i] + d[j]) / 2 for i in range(9) for j in range(i, 9))
        self.assertAlmostEqual(stats.hodges_lehmann(d), w[22])
        lo, hi = stats.hl_interval(d, 0.95)
        # c: the largest with P(T+ <= c) <= 0.025 at n = 9, by enumeration of the 512 sign patterns.
        sums = sorted(sum(r for r, bit in zip(range(1, 10), f"{m:09b}") if bit == "1") for m in range(512))
        c = max(t for t in range(46) if sum(s <= t for s in sums) / 512 <= 0.025)
        self.assertEqual((lo, hi), (w[c], w[len(w) - 1 - c]))
        self.assertEqual(stats.hl_interval([1.0, 2.0, 3.0], 0.95), (-math.inf, math.inf))

    def test_sign_test_and_median_interval(self):
        from scipy.stats import binomtest
        rng = random.Random(5)
        for n in (6, 11, 20, 30):
            x = [rng.gauss(0.3, 1.0) for _ in range(n)] + [0.0]  # the zero is dropped
            k = sum(v > 0 for v in x)
            self.assertAlmostEqual(stats.sign_p_greater(x), binomtest(k, n, 0.5, alternative="greater").pvalue,
                                   places=12)
        # One pair far off counts as one pair: 17 of 20 up, three of them huge the wrong way.
        x = [0.1] * 17 + [-0.9, -0.95, -1.0]
        self.assertLess(stats.sign_p_greater(x), 0.05 / 14)
        self.assertGreater(stats.signed_rank_p_greater(x), 0.05 / 14)
        self.assertEqual(stats.median(x), 0.1)
        # n = 20: P(Bin <= 5) = 0.0207 <= 0.025 < P(Bin <= 6): the interval is [x_(6), x_(15)].
        y = list(range(20))
        self.assertEqual(stats.median_interval(y, 0.95), (5, 14))
        self.assertEqual(stats.median_interval([1, 2, 3, 4, 5], 0.95), (-math.inf, math.inf))

    def test_holm(self):
        self.assertEqual(stats.holm([0.01, 0.04, None, 0.03]), [0.03, 0.06, None, 0.06])


def report(values, world=2, checks=()):
    """A minimal report with one record per (name, seconds)."""
    return {"schema_version": 3,
            "context": {"backend": "cpu", "comm_backend": "mpi", "devices": ["cpu"], "world_size": world,
                        "config": {"name": "gate"}},
            "benchmarks": [{"name": n, "real_time": t * 1e3, "time_unit": "ms", "real_time_cal": t * 10}
                           for n, t in values.items()],
            "checks": [{"name": c, "passed": ok} for c, ok in checks],
            "suites": [{"name": "train", "status": "passed"}]}


class Paired(unittest.TestCase):
    def make(self, n, slow=1.0, one_pair=None, small=1.0):
        rng = random.Random(7)
        base, cand = [], []
        for i in range(n):
            drift = math.exp(rng.gauss(0, 0.05))  # the machine's speed during pair i: both sides see it
            noise = lambda: math.exp(rng.gauss(0, 0.02))  # noqa: E731
            vals = {"train/gpt/dp:2": 5e-3, "gemm/peak": 2e-3, "collectives/x": 1e-4}
            base.append(report({k: v * drift * noise() for k, v in vals.items()}))
            c = {k: v * drift * noise() for k, v in vals.items()}
            c["train/gpt/dp:2"] *= slow
            c["collectives/x"] *= small
            if one_pair is not None and i == one_pair:
                c["gemm/peak"] *= 3.0
            cand.append(report(c))
        return base, cand

    def rows(self, res):
        return {r["record"]: r for r in res["rows"]}

    def test_a_consistent_slowdown_is_flagged_and_noise_is_not(self):
        base, cand = self.make(15, slow=1.12, one_pair=4, small=1.03)
        res = paired.analyse(base, cand, 0.05, 0.05)
        r = self.rows(res)
        self.assertTrue(r["train/gpt/dp:2"]["regression"], r["train/gpt/dp:2"])
        self.assertAlmostEqual(r["train/gpt/dp:2"]["change"], 0.12, delta=0.03)
        lo, hi = r["train/gpt/dp:2"]["ci"]
        self.assertLess(lo, 0.12)
        self.assertGreater(hi, 0.12)
        self.assertFalse(r["gemm/peak"]["regression"], r["gemm/peak"])  # one disturbed pair of 15
        self.assertFalse(r["collectives/x"]["regression"], r["collectives/x"])  # 3 %: below the threshold
        self.assertEqual(len(res["regressions"]), 1)

    def test_a_further_copy_in_the_candidate_is_compared(self):
        # The candidate's runs measure a record twice (NAME, NAME#2), the baseline's once: the copy, 3x slower,
        # is compared with the baseline's NAME (it was "only in the candidate", never compared, exit 0).
        base, cand = self.make(8)
        for c in cand:
            first = next(r for r in c["benchmarks"] if r["name"] == "gemm/peak")
            c["benchmarks"].append({**first, "real_time": 3 * first["real_time"]})
        res = paired.analyse(base, cand, 0.05, 0.05)
        r = self.rows(res)
        self.assertTrue(r["gemm/peak#2"]["regression"], r["gemm/peak#2"])
        self.assertAlmostEqual(r["gemm/peak#2"]["change"], 2.0, delta=0.1)
        self.assertFalse(r["gemm/peak"]["regression"])
        self.assertEqual(res["records_only_in"]["candidate"], [])
        self.assertEqual(res["copies_compared_with"], {"gemm/peak#2": "gemm/peak"})

    def test_calibrated_reads_real_time_cal(self):
        base, cand = self.make(12, slow=1.2)
        res = paired.analyse(base, cand, 0.05, 0.05, calibrated=True)
        self.assertEqual(res["metric"], "real_time_cal, fastest repetition")
        self.assertTrue(self.rows(res)["train/gpt/dp:2"]["regression"])

    def test_a_runs_value_is_its_fastest_repetition_or_fastest_third(self):
        r = report({"train/gpt/dp:2": 2e-3})
        r["benchmarks"][0]["step_time_ms"] = {"n": 7, "median": 2.0,
                                              "samples": [2.0, 1.5, 9.0, 1.7, 2.2, 8.0, 2.1]}
        self.assertAlmostEqual(paired.run_values(r, False)["train/gpt/dp:2"], 1.5e-3)
        self.assertAlmostEqual(paired.run_values(r, False, "fast-third")["train/gpt/dp:2"], 1.6e-3)  # 7 // 3 = 2
        r["benchmarks"][0]["step_time_ms"]["samples"] = [2.0, 1.5, 9.0]
        self.assertAlmostEqual(paired.run_values(r, False, "fast-third")["train/gpt/dp:2"], 1.5e-3)  # at least one
        with self.assertRaises(GateError):
            paired.run_values(r, False, "mean")
        self.assertAlmostEqual(paired.run_values(r, False, "median")["train/gpt/dp:2"], 2e-3)
        self.assertAlmostEqual(paired.run_values(r, True, "min")["train/gpt/dp:2"], 20e-3 * 0.75)
        r["benchmarks"][0]["step_time_ms"]["median"] = 2.5  # not real_time's: no repetitions to take
        self.assertAlmostEqual(paired.run_values(r, False, "min")["train/gpt/dp:2"], 2e-3)

    def test_a_failed_check_is_a_regression(self):
        base, cand = self.make(8)
        for r in base + cand:
            r["checks"] = [{"name": "train/loss/step:3", "passed": True}]
        cand[5]["checks"][0]["passed"] = False
        res = paired.analyse(base, cand, 0.05, 0.05)
        self.assertEqual(res["regressions"], ["check train/loss/step:3: passed in every baseline run, failed in "
                                              "candidate run 6"])

    def test_a_check_not_judged_in_a_candidate_run_is_listed_not_a_regression(self):
        base, cand = self.make(8)
        for r in base + cand:
            r["checks"] = [{"name": "pipeline/1f1b/p:2/m:4/bubble", "passed": True, "verdict": "passed"}]
        cand[5]["checks"][0].update(passed=False, verdict="not_judged", not_judged_reason="the machine was busy")
        res = paired.analyse(base, cand, 0.05, 0.05)
        self.assertEqual(res["regressions"], [])
        self.assertEqual(res["not_judged"], ["check pipeline/1f1b/p:2/m:4/bubble: not judged in candidate run 6: "
                                             "the machine was busy"])
        cand[5]["checks"][0].update(verdict="failed")  # judged and failed: a regression
        self.assertEqual(paired.analyse(base, cand, 0.05, 0.05)["regressions"], [
            "check pipeline/1f1b/p:2/m:4/bubble: passed in every baseline run, failed in candidate run 6"])

    def test_a_suite_or_check_missing_from_a_candidate_run_is_a_regression(self):
        base, cand = self.make(8)
        for r in base + cand:
            r["checks"] = [{"name": "train/loss/step:3", "passed": True}]
        cand[2]["checks"] = []
        cand[3]["suites"] = []
        res = paired.analyse(base, cand, 0.05, 0.05)
        self.assertEqual(res["regressions"], [
            "1 check(s) passed in every baseline run and are missing from a candidate run: train/loss/step:3",
            "suite train: passed in every baseline run, not run in candidate run 4"])

    def test_the_gates_own_slowdown_is_no_incompatibility(self):
        base, cand = self.make(8)
        for r in cand:
            r["context"]["injected_slowdown"] = "train_step=1.1"
        paired.analyse(base, cand, 0.05, 0.05)  # no GateError

    def test_too_few_pairs_for_holm_are_refused(self):
        base, cand = self.make(1)  # 3 records: Holm's smallest p is 3 / 2^pairs
        with self.assertRaisesRegex(GateError, "6 pairs cannot show a regression of any of 3 records"):
            paired.check_pairs_suffice(6, base[0], cand[0], 0.05 / 2)  # 3/64 >= 0.025
        paired.check_pairs_suffice(7, base[0], cand[0], 0.05 / 2)  # 3/128 < 0.025

    def test_incompatible_reports_are_refused(self):
        base, cand = self.make(8)
        cand[0]["context"]["world_size"] = 4
        with self.assertRaisesRegex(GateError, "world_size"):
            paired.analyse(base, cand, 0.05, 0.05)


class ConfigDifferences(unittest.TestCase):
    """What the preflight makes of two filled-in configs (runner.config_differences)."""
    SUITES = {"gemm", "train", "collectives", "comm_efficiency", "checkpoint", "pipeline"}

    def config(self):
        return {"name": "gate", "description": "d", "suites": ["train", "collectives"], "seed": 1234,
                "comm_timeout_s": 300.0, "output_dir": "results", "model": {"L": 2, "C": 64},
                "train": {"steps": 120, "grad_clip": 0.0}, "collectives": {"ops": ["all_reduce"], "iters": 20},
                "checkpoint": {"mtbf_hours": 200.0, "repetitions": 3}, "pipeline": {"stages": [2, 4]}}

    def diff(self, edit):
        base, cand = self.config(), self.config()
        edit(cand)
        return runner.config_differences(base, cand, self.SUITES)

    def test_a_suite_the_config_does_not_run_is_ignored(self):
        # The unrelated default that switched the gate off ("fill in the config differently (checkpoint)").
        d = self.diff(lambda c: c["checkpoint"].update(mtbf_hours=100.0))
        self.assertEqual(d, {"measured": [], "ignored": [("checkpoint.mtbf_hours", 200.0, 100.0)], "added": []})
        d = self.diff(lambda c: (c.update(comm_timeout_s=60.0, description="x"), c.pop("pipeline")))
        self.assertEqual(d["measured"], [])

    def test_a_key_where_the_gate_measures_is_named(self):
        d = self.diff(lambda c: (c["collectives"].update(iters=10), c.update(seed=1), c["model"].update(L=4)))
        self.assertEqual(d["measured"], [("collectives.iters", 20, 10), ("model.L", 2, 4), ("seed", 1234, 1)])
        self.assertEqual(d["ignored"], [])

    def test_a_setting_one_side_lacks(self):
        # Off: nothing measured changes, dropped. On: the candidate's own code, listed and compared.
        d = self.diff(lambda c: c["train"].update(fp8=False, recipe="none", arch="gpt2"))
        self.assertEqual(d, {"measured": [], "ignored": [], "added": [("train.arch", runner.ABSENT, "gpt2")]})
        d = self.diff(lambda c: c["train"].pop("steps"))
        self.assertEqual(d["added"], [("train.steps", 120, runner.ABSENT)])

    def test_the_reports_of_an_added_setting_are_compatible(self):
        base, cand = Paired().make(1)
        base[0]["context"]["config"]["train"] = {"steps": 3}
        cand[0]["context"]["config"]["train"] = {"steps": 3, "arch": "gpt2"}
        paired.check_compatible(base[0], cand[0])  # the preflight listed it: no GateError
        cand[0]["context"]["config"]["train"]["steps"] = 4
        with self.assertRaisesRegex(GateError, "config.train.steps 3 vs 4"):
            paired.check_compatible(base[0], cand[0])


class Count(unittest.TestCase):
    def test_a_relative_work_dir_counts(self):
        # callgrind runs in the side's directory and opens --callgrind-out-file relative to it, as this stand-in
        # for valgrind does: a relative --work-dir gave work/count/baseline/work/count/baseline/callgrind.out
        # (no such directory: the count failed, exit 2 "not compared").
        def valgrind(cmd, env, timeout_s, cwd=None):
            out = next(c for c in cmd if c.startswith("--callgrind-out-file="))
            dump = Path(cwd) / (out.split("=", 1)[1] + ".1")
            if not dump.parent.is_dir():
                return 1, "", f"==1== Error: can not open cache simulation output file `{dump}'"
            dump.write_text("desc: Trigger: Client Request: kernel/x\nevents: Ir D1mr\ntotals: 2000 0\n")
            return 0, "", ""
        from unittest import mock
        from dtbreport.gate.runner import Side
        with tempfile.TemporaryDirectory() as d, mock.patch.object(count, "run_child", valgrind), \
                mock.patch.object(count.shutil, "which", return_value="/usr/bin/valgrind"):
            cwd = Path.cwd()
            os.chdir(d)
            try:
                got = count.count_side(Side("baseline", Path("/bin/true"), "x"), Path("work") / "count", reps=2)
            finally:
                os.chdir(cwd)
        self.assertEqual(got, {"kernel/x": {"instructions": 1000.0, "d1_misses": 0.0, "ll_misses": 0.0}})

    def test_dump_parses_and_compare_gates(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "callgrind.out.1"
            p.write_text("version: 1\ndesc: Trigger: Client Request: kernel/x/N:4\nevents: Ir Dr Dw I1mr D1mr D1mw "
                         "ILmr DLmr DLmw\nfn=(1) f\n0 1 2 3\ntotals: 1000 10 10 1 400 200 1 30 20\n")
            name, ev = count.parse_dump(p)
        self.assertEqual(name, "kernel/x/N:4")
        self.assertEqual((ev["Ir"], ev["D1mr"], ev["DLmw"]), (1000, 400, 20))
        base = {"a": {"instructions": 1e6, "d1_misses": 5000, "ll_misses": 10},
                "b": {"instructions": 1e6, "d1_misses": 5000, "ll_misses": 10}}
        cand = copy.deepcopy(base)
        cand["a"]["instructions"] *= 1.011  # beyond 1 %
        cand["b"]["instructions"] *= 1.009  # within
        cand["b"]["ll_misses"] *= 3  # below the floor: information only
        res = count.compare(base, cand, {"instructions": 0.01, "misses": 0.05})
        flagged = {(r["region"], r["metric"]) for r in res["rows"] if r["regression"]}
        self.assertEqual(flagged, {("a", "instructions")})
        cand["b"]["d1_misses"] *= 1.06
        res = count.compare(base, cand, {"instructions": 0.01, "misses": 0.05})
        self.assertIn(("b", "d1_misses"), {(r["region"], r["metric"]) for r in res["rows"] if r["regression"]})
        # A train step's misses are shown, not gated (its buffers land where the model's allocator puts them).
        base["train_step/gpt/smoke"] = {"instructions": 1e8, "d1_misses": 1e6, "ll_misses": 1e4}
        cand["train_step/gpt/smoke"] = {"instructions": 1e8, "d1_misses": 2e6, "ll_misses": 1e4}
        res = count.compare(base, cand, {"instructions": 0.01, "misses": 0.05})
        row = next(r for r in res["rows"] if r["region"] == "train_step/gpt/smoke" and r["metric"] == "d1_misses")
        self.assertEqual((row["verdict"], row["regression"]), ("info", False))
        with self.assertRaisesRegex(GateError, "no region in common"):
            count.compare({"x": base["a"]}, {"y": base["a"]}, {"instructions": 0.01, "misses": 0.05})


class TwoReports(unittest.TestCase):
    """compare.py BASE NEW: malformed input refused in one line; a check or suite that vanished regresses."""

    def compare(self, base, new, *args):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, r in enumerate((base, new)):
                p = Path(d) / f"r{i}.json"
                p.write_text(r if isinstance(r, str) else json.dumps(r))
                paths.append(str(p))
            r = subprocess.run([PYTHON, str(ROOT / "scripts" / "compare.py"), *paths, *args], capture_output=True,
                               text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def test_malformed_reports_exit_2_with_one_line(self):
        good = report({"train/gpt/dp:2": 1.0})
        bad_config = copy.deepcopy(good)
        bad_config["context"]["config"] = "x"
        for bad, want in ((bad_config, "context.config is not an object"),
                          ('{"benchmarks": [{"name": "a", "real_time": 1' + "0" * 400 + '}]}', "out of range"),
                          ("[" * 100000 + "]" * 100000, "")):
            rc, out, err = self.compare(good, bad)
            self.assertEqual(rc, 2, (want, out, err[-500:]))
            self.assertEqual(len(err.strip().splitlines()), 1, err[-500:])
            self.assertIn(want, err)
        r = subprocess.run([PYTHON, str(ROOT / "scripts" / "compare.py"), "/dev/zero", "/dev/zero"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stderr.strip()), (2, "compare.py: /dev/zero: not a regular file"))

    def test_a_vanished_check_or_suite_regresses(self):
        base = report({"train/gpt/dp:2": 1.0}, checks=[("train/a", True), ("train/b", True)])
        base["context"]["config"]["suites"] = ["train"]
        new = copy.deepcopy(base)
        new["checks"] = [{"name": "train/a", "passed": True}]
        rc, out, err = self.compare(base, new, "--checks-only")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("REGRESSION 1 check(s) passed in BASE and are missing from NEW: train/b", out)
        new["suites"], new["checks"] = [], []
        rc, out, err = self.compare(base, new, "--checks-only")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("REGRESSION suite train: passed in BASE, not run in NEW", out)


class BadInput(unittest.TestCase):
    def ab(self, *args):
        r = subprocess.run([PYTHON, str(ROOT / "scripts" / "compare.py"), "ab", *args], capture_output=True,
                           text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr

    def test_refusals_exit_2_with_one_line(self):
        exe = sys.executable
        cases = [(["--base", "no-such-ref-xyz", "--candidate-binary", exe], "unknown git ref 'no-such-ref-xyz'"),
                 (["--base-binary", "/nonexistent/dtbench", "--candidate-binary", exe], "is not an executable"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--pairs", "3"], "--pairs must be 0 or >= 6"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--candidate-env", "NOEQUALS"], "VAR=VALUE"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--config", "no-such-config"],
                  "unknown config 'no-such-config'"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--pairs", "0"], "nothing to do"),
                 (["--base", "", "--candidate-binary", exe], "--base is empty"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--json", "/"], "--json: cannot write /"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--np", "0"], "--np must be in [1, 256]"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--pairs", "abc"], "invalid int value"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--suite-threshold", "gemmm=0.5"],
                  "--suite-threshold names gemmm, which the config does not run"),
                 (["--base-binary", exe, "--candidate-binary", exe, "--count", "--count-config", "/tmp"],
                  "--count-config: /tmp is a directory")]
        for args, want in cases:
            rc, out, err = self.ab(*args)
            self.assertEqual(rc, 2, (args, out, err))
            lines = [ln for ln in err.splitlines() if ln.strip()]
            self.assertEqual(len(lines), 1, (args, err))
            self.assertIn(want, lines[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
