#!/usr/bin/python3
"""ctest compare_synthetic: scripts/compare.py on small hand-made reports (no dtbench run).

The statistics: too few samples for the U test (n=3 vs 3: threshold alone, flagged), a change beyond
the threshold that the samples call noise, Welch's test from n/mean/stddev, a throughput judged on its
time's samples, bare numbers and unknown fields; record matching: duplicate names told apart by their
parameters, and a further copy of a record that only NEW has compared with BASE's; the checks: fixed,
still failing, new, vanished, and not judged. The real reports' cases: scripts/compare_test.py, whose
helpers these share.
"""
import json
import tempfile
import unittest
from pathlib import Path

from compare_test import compare, rec, synthetic, timing, write


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
    unittest.main(verbosity=2)
