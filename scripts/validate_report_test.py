#!/usr/bin/python3
"""ctest report_schema: every report validates against the report schema (the shell
harness/report.schema.json with each suite's fragment, suites/<suite>.schema.json).

Usage: validate_report_test.py PATH/TO/dtbench PATH/TO/mpiexec [unittest options]

(a) Runs dtbench on small configs that together cover every registered suite (at 1, 2 and
    4 ranks, the quick config too) and validates each fresh report, including those of
    suites whose checks fail at these tiny sizes (a failed suite still writes its report).
(b) Validates every report committed under results/baselines/.
(c) Negative cases: an unknown field at each level, a missing field, a wrong type, an
    unknown suite: each must be rejected, at the right place.
Also checks the schema itself (Draft 2020-12, its version = kReportSchemaVersion), that every
suite dtbench registers has its schema fragment and its Python module and nothing else does, and the
exit status of scripts/validate_report.py. About 25 s on 2 cores (the quick config is most of it).
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import validate_report  # noqa: E402
from dtbreport import registry, schema as assembler  # noqa: E402

DTBENCH = MPIEXEC = None  # from argv
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
RUN_TIMEOUT_S = 300

# Suites registered in dtbench that cannot run in this CPU test, with the reason. Every other
# registered suite must appear in a fresh report below (test_every_suite_has_a_fresh_report).
NOT_ON_CPU = {}

TINY_MODEL = {"L": 1, "C": 32, "NH": 2, "T": 16, "V": 256}
TIMED = {"model": TINY_MODEL, "steps": 3, "micro_batch_size": 1, "seq_len": 16, "repetitions": 1}

# name -> (ranks, config, extra dtbench arguments). Sizes are tiny: the point is the shape of
# each suite's output (skipped cases, failed checks, optional fields), not the numbers.
RUNS = {
    # Every suite but train at 4 ranks. The pipeline's 100 us stages are too short for its
    # 0.05 bubble tolerance on shared cores and precision's 8 steps too few for its tail
    # bound: failed suites, whose reports must validate too. gemm bf16 is skipped on the cpu.
    "all4": (4, {
        "suites": ["collectives", "gemm", "ffn_tp", "moe", "pipeline", "conformance", "memory", "offload", "overlap",
                   "recompute", "precision", "checkpoint", "comm_efficiency", "cp_attention"],
        "model": TINY_MODEL,
        "collectives": {"ops": ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"],
                        "max_bytes": 4096, "step_factor": 8, "iters": 2, "repetitions": 2},
        "gemm": {"precisions": ["fp32", "bf16"], "hidden": 32, "tokens": 32, "peak_size": 64, "warmup": 0,
                 "iters": 1},
        "ffn_tp": {"hidden": 32, "tokens": 16, "warmup": 0, "iters": 1, "repetitions": 2},
        "moe": {"hidden": 16, "num_experts": 4, "seq_len": 8, "tokens": [8, 32], "warmup": 0, "iters": 1,
                "repetitions": 2},
        "pipeline": {"schedules": ["gpipe", "1f1b", "interleaved"], "stages": [2, 8], "micro_batches": [1, 4],
                     "t_forward_us": 100, "t_backward_us": 200, "activation_elems": 64, "repetitions": 2},
        "conformance": {"model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256}, "steps": 2, "global_batch": 4,
                        "micro_batches": 2, "seq_len": 16,
                        "layouts": ["TP2", "TP2xPP2", "TP2xPP2:full", "DP2:zero1", "TP2xPP2xDP2"],
                        "precisions": ["fp32", "fp16"]},
        "memory": {"model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256}, "steps": 1, "micro_batches": 2,
                   "micro_batch_size": 1, "seq_len": 16},
        "offload": TIMED,
        "overlap": TIMED | {"bucket_sizes": [1000, 100000]},
        "recompute": TIMED,
        "precision": TIMED | {"steps": 8, "loss_scale_growth_interval": 3, "fp8": [{"recipe": "delayed"}]},
        "checkpoint": TIMED,
        "comm_efficiency": {"model": TINY_MODEL, "steps": 4, "global_batch": 4, "seq_len": 16,
                            "methods": ["sync", "hierarchical", "stale1:dc", "local2"]},
        "cp_attention": {"channels": 32, "heads": 4, "num_kv_heads": 2, "seq_lens": [16, 32], "warmup": 0,
                             "iters": 1, "repetitions": 2},
    }, []),
    # train on a TP x PP layout in fp16: loss scaling, gradient clipping, recompute, mfu and,
    # with --trace, the step breakdown.
    "train_layout4": (4, {
        "suites": ["train"],
        "model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256},
        "train": {"steps": 4, "global_batch": 4, "micro_batches": 2, "seq_len": 16, "tensor_parallel": 2,
                  "pipeline_parallel": 2, "precision": "fp16", "grad_clip": 1.0, "recompute": "selective",
                  "peak_tflops": 1.0},
    }, ["--trace", "{dir}/trace.json"]),
    # Plain data parallelism, the f64 collectives on one placement, interleaved pipelines.
    "dp2": (2, {
        "suites": ["train", "collectives", "pipeline"],
        "model": TINY_MODEL,
        "train": {"steps": 3, "global_batch": 4, "micro_batches": 1, "seq_len": 16},
        "collectives": {"ops": ["all_reduce", "sendrecv"], "dtype": "f64", "max_bytes": 1024, "step_factor": 16,
                        "iters": 2, "repetitions": 1, "in_place": False},
        "pipeline": {"schedules": ["interleaved"], "stages": [2], "micro_batches": [2], "t_forward_us": 200,
                     "t_backward_us": 400, "activation_elems": 16, "repetitions": 1},
    }, []),
    # The sweep over every 4-rank layout of a tiny model (incl. the not-applicable list), and
    # two kernels microbenchmarks.
    "sweep4": (4, {
        "suites": ["sweep", "kernels"],
        "model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256},
        "sweep": {"steps": 2, "global_batch": 4, "micro_batches": 2, "seq_len": 16},
        "kernels": {"filter": "AdamW/120576|LayernormForward/1024", "min_time_s": 0.005, "repetitions": 2},
    }, []),
    # One rank: bus factors 0, every pipeline case skipped (p > world), ffn_tp at TP 1 only.
    "single1": (1, {
        "suites": ["collectives", "gemm", "ffn_tp", "pipeline", "train"],
        "model": TINY_MODEL,
        "collectives": {"ops": ["all_gather"], "max_bytes": 64, "iters": 1, "repetitions": 1},
        "gemm": {"hidden": 16, "tokens": 16, "peak_size": 32, "warmup": 0, "iters": 1},
        "ffn_tp": {"hidden": 16, "tokens": 8, "warmup": 0, "iters": 1, "repetitions": 1},
        "pipeline": {"stages": [2], "micro_batches": [2], "repetitions": 1},
        "train": {"steps": 2, "global_batch": 2, "micro_batches": 1, "seq_len": 16},
    }, []),
}
QUICK_CONFIG = ROOT / "harness" / "configs" / "quick.json"  # the CI regression config, at 4 ranks


def run_dtbench(workdir, name, ranks, config_path, extra):
    """Runs dtbench; returns (exit status, output, report path or None)."""
    out_dir = Path(workdir) / name
    out_dir.mkdir()
    cmd = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", str(ranks), DTBENCH, "run",
           "--config", str(config_path), "--output-dir", str(out_dir), "--run-id", name]
    cmd += [a.replace("{dir}", str(out_dir)) for a in extra]
    p = subprocess.run(cmd, cwd=workdir, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=RUN_TIMEOUT_S)
    report = out_dir / (name + ".json")
    return p.returncode, p.stdout, report if report.exists() else None


# A suite's line in `dtbench list` (its first block): two spaces, the name, its description.
SUITES_OF_LIST = re.compile(r"^  ([a-z][a-z0-9_]*)\b", re.M)


def error_lines(validator, report):
    return [f"{where}: {msg}" for where, msg in validate_report.errors(validator, report)]


class Schema(unittest.TestCase):
    def test_schema_is_valid_draft_2020_12(self):
        schema = assembler.assemble()
        self.assertEqual(schema["$schema"], "https://json-schema.org/draft/2020-12/schema")
        validate_report.load_validator()  # check_schema raises on an invalid schema

    def test_version_is_the_writers(self):
        header = (ROOT / "harness" / "report.h").read_text()
        m = re.search(r"kReportSchemaVersion\s*=\s*(\d+)", header)
        self.assertIsNotNone(m, "kReportSchemaVersion not found in harness/report.h")
        version = int(m.group(1))
        schema = assembler.assemble()
        self.assertEqual(schema["properties"]["schema_version"]["const"], version,
                         "harness/report.schema.json describes another version than kReportSchemaVersion")
        self.assertEqual(schema["$defs"]["context"]["properties"]["schema_version"]["const"], version)
        self.assertTrue(schema["$id"].endswith(":" + str(version)), schema["$id"])
        self.assertIn("schema version " + str(version), schema["title"])

    def test_every_suite_has_its_fragment_and_module(self):
        listed = subprocess.run([DTBENCH, "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                timeout=60, env=ENV)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        registered = set(SUITES_OF_LIST.findall(listed.stdout.split("configs (")[0]))
        self.assertTrue(registered, listed.stdout)
        fragments = {name for name, _ in assembler.fragments()}
        self.assertEqual(fragments, registered, "suites/<suite>.schema.json against `dtbench list`")
        self.assertEqual(set(registry.suites()), registered, "scripts/dtbreport/suites/ against `dtbench list`")
        names = assembler.assemble()["$defs"]["suite_outcome"]["properties"]["name"]["enum"]
        self.assertEqual(set(names), registered)


class FreshReports(unittest.TestCase):
    """(a) Fresh reports of every suite validate."""

    @classmethod
    def setUpClass(cls):
        cls.validator = validate_report.load_validator()
        cls.tmp = tempfile.TemporaryDirectory(prefix="dtb-schema-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_and_validate(self, name, ranks, config_path, extra=()):
        rc, out, report_path = run_dtbench(self.tmp.name, name, ranks, config_path, list(extra))
        tail = "\n".join(out.splitlines()[-30:])
        # 0: every check passed; 1: a check failed or a suite errored (the report is still written).
        self.assertIn(rc, (0, 1), f"dtbench {name} exited {rc}:\n{tail}")
        self.assertIsNotNone(report_path, f"dtbench {name} wrote no report:\n{tail}")
        report = json.loads(report_path.read_text())
        errs = error_lines(self.validator, report)
        self.assertEqual(errs, [], f"fresh report of {name} ({report_path}) is invalid:\n" + "\n".join(errs[:40]))
        self.assertEqual([s["name"] for s in report["suites"]], report["context"]["config"]["suites"],
                         f"{name}: not every suite reported")
        return report

    def run_config(self, name):
        ranks, config, extra = RUNS[name]
        path = Path(self.tmp.name) / (name + ".json")
        path.write_text(json.dumps({"name": name} | config))
        return self.run_and_validate(name, ranks, path, extra)

    def test_all_suites_4_ranks(self):
        report = self.run_config("all4")
        # The shapes this run exists for: skipped records and failed suites validated above.
        self.assertTrue(any(b.get("skipped") for b in report["benchmarks"] if b["name"].startswith("gemm/")))
        self.assertTrue(any(b.get("skipped") for b in report["benchmarks"] if b["name"].startswith("pipeline/")))
        conformance = next(s for s in report["suites"] if s["name"] == "conformance")
        self.assertEqual([x["layout"] for x in conformance["data"]["skipped"]], ["TP2xPP2xDP2", "TP2xPP2xDP2:fp16"])

    def test_train_layout_with_loss_scaling_and_trace(self):
        report = self.run_config("train_layout4")
        rec = next(b for b in report["benchmarks"] if b["name"].startswith("train/"))
        for key in ("step_breakdown_ms", "skipped_steps", "final_loss_scale", "mfu"):
            self.assertIn(key, rec, "the optional train fields this run should exercise")
        data = report["suites"][0]["data"]
        for key in ("loss_scales", "skipped", "grad_norms"):
            self.assertIn(key, data)

    def test_data_parallel_2_ranks(self):
        self.run_config("dp2")

    def test_single_rank(self):
        self.run_config("single1")

    def test_quick_config(self):
        if not QUICK_CONFIG.exists():
            self.skipTest(f"{QUICK_CONFIG} not found")
        self.run_and_validate("quick", 4, QUICK_CONFIG)

    def test_every_suite_has_a_fresh_report(self):
        out = subprocess.run([DTBENCH, "list"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60, check=True).stdout
        section = out.split("suites:", 1)[1].split("configs", 1)[0]
        registered = {line.split()[0] for line in section.splitlines() if line.strip()}
        self.assertGreaterEqual(len(registered), 11, out)
        covered = {s for _, config, _ in RUNS.values() for s in config["suites"]}
        missing = registered - covered - set(NOT_ON_CPU)
        self.assertEqual(missing, set(), "registered suites with no fresh report in this test: add a small case to "
                                         "RUNS in scripts/validate_report_test.py (or to NOT_ON_CPU, with why)")


class Baselines(unittest.TestCase):
    """(b) The committed baselines validate."""

    def test_committed_baselines(self):
        paths = sorted((ROOT / "results" / "baselines").glob("*.json"))
        if not paths:
            self.skipTest("no reports under results/baselines/")
        validator = validate_report.load_validator()
        for path in paths:
            with self.subTest(baseline=path.name):
                errs = validate_report.errors(validator, json.loads(path.read_text()))
                by_message = {}
                for where, msg in errs:
                    by_message.setdefault(msg, []).append(where)
                summary = "\n".join(f"  {len(w)} x {m} (first at {w[0]})" for m, w in
                                     sorted(by_message.items(), key=lambda x: -len(x[1])))
                if errs:
                    self.fail(f"{path.relative_to(ROOT)} does not follow the report schema ({len(errs)} errors); "
                              f"regenerate it with the current dtbench:\n{summary}")


class Rejected(unittest.TestCase):
    """(c) Unknown, missing and mistyped fields are errors, reported where they are."""

    @classmethod
    def setUpClass(cls):
        cls.validator = validate_report.load_validator()
        cls.tmp = tempfile.TemporaryDirectory(prefix="dtb-schema-neg-")
        config = Path(cls.tmp.name) / "neg.json"
        config.write_text(json.dumps({
            "name": "neg", "suites": ["collectives", "train"], "model": TINY_MODEL,
            "collectives": {"ops": ["all_reduce"], "max_bytes": 64, "step_factor": 8, "iters": 1, "repetitions": 2},
            "train": {"steps": 2, "global_batch": 2, "micro_batches": 1, "seq_len": 16}}))
        rc, out, path = run_dtbench(cls.tmp.name, "neg", 1, config, [])
        if rc not in (0, 1) or path is None:
            raise RuntimeError(f"dtbench exited {rc} without a report:\n{out[-3000:]}")
        cls.report = json.loads(path.read_text())
        errs = error_lines(cls.validator, cls.report)
        if errs:
            raise RuntimeError("the base report of the negative cases is itself invalid:\n" + "\n".join(errs[:20]))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def index(self, list_name, prefix):
        return next(i for i, x in enumerate(self.report[list_name]) if x["name"].startswith(prefix))

    def mutated(self, path, op, value=None):
        """A copy of the report with `op` ("set", "add", "del") applied at path (a list of keys)."""
        r = copy.deepcopy(self.report)
        parent = r
        for key in path[:-1]:
            parent = parent[key]
        if op == "del":
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        return r

    def assert_rejected(self, report, where, what=""):
        """`report` is invalid, with an error at JSON pointer `where` (or inside it) whose message
        contains `what`."""
        errs = validate_report.errors(self.validator, report)
        self.assertTrue(errs, f"accepted, but should be rejected at {where}")
        at = lambda w: w == where or w.startswith(where.rstrip("/") + "/")  # noqa: E731
        hits = [(w, m) for w, m in errs if at(w.split(" (")[0]) and what in m]
        self.assertTrue(hits, f"rejected, but not at {where} with '{what}': {errs[:10]}")

    def assert_valid(self, report):
        self.assertEqual(error_lines(self.validator, report), [])

    def test_unknown_field_at_each_level(self):
        b = self.index("benchmarks", "train/")
        c = self.index("benchmarks", "collectives/")
        s = self.index("suites", "train")
        places = [
            [], ["context"], ["context", "config"], ["context", "config", "train"], ["context", "dataset"],
            ["suites", s], ["suites", s, "data"], ["suites", s, "data", "losses"], ["checks", 0],
            ["benchmarks", b], ["benchmarks", c], ["benchmarks", c, "time_us"], ["benchmarks", b, "step_time_ms"],
        ]
        for place in places:
            with self.subTest(place=place):
                self.assert_rejected(self.mutated(place + ["surprise_field"], "add", 1),
                                     validate_report.pointer(place), "surprise_field")

    def test_missing_field_at_each_level(self):
        b = self.index("benchmarks", "train/")
        c = self.index("benchmarks", "collectives/")
        s = self.index("suites", "train")
        for place in (["checks"], ["context", "git_commit"], ["context", "config", "collectives"],
                      ["context", "config", "train", "zero_stage"], ["suites", s, "status"],
                      ["suites", s, "error"], ["suites", s, "data", "num_params"], ["checks", 0, "tolerance"],
                      ["checks", 0, "fraction_of_tolerance"], ["benchmarks", b, "real_time"],
                      ["benchmarks", b, "precision"], ["benchmarks", c, "busbw_GBps"],
                      ["benchmarks", c, "time_us", "samples"], ["benchmarks", b, "step_time_ms", "stddev"]):
            with self.subTest(place=place):
                self.assert_rejected(self.mutated(place, "del"), validate_report.pointer(place[:-1]),
                                     f"'{place[-1]}' is a required property")

    def test_wrong_type_or_value(self):
        b = self.index("benchmarks", "train/")
        c = self.index("benchmarks", "collectives/")
        s = self.index("suites", "train")
        cases = [
            (["schema_version"], "1"), (["schema_version"], 1), (["context", "world_size"], "4"),
            (["context", "world_size"], 0), (["context", "git_commit"], "main"), (["context", "backend"], "tpu"),
            (["context", "config", "train", "steps"], 2.5), (["suites", s, "duration_s"], "fast"),
            (["suites", s, "status"], "ok"), (["suites", s, "name"], "nosuch"), (["checks", 0, "passed"], "yes"),
            (["checks", 0, "value"], -1.0), (["checks", 0, "suite"], "nosuch"), (["checks", 0, "name"], "gemm/x"),
            (["benchmarks", c, "bytes"], 1.5), (["benchmarks", c, "time_unit"], "min"),
            (["benchmarks", c, "placement"], "sideways"), (["benchmarks", c, "time_us", "samples"], ["x"]),
            (["benchmarks", c, "time_us", "n"], -1), (["benchmarks", b, "precision"], "fp4"),
            (["benchmarks", b, "comm_fraction"], 1.5), (["benchmarks", b, "final_loss"], "low"),
            (["benchmarks", b, "run_type"], "aggregate"), (["benchmarks", b, "name"], "train/not-a-layout"),
        ]
        for place, value in cases:
            with self.subTest(place=place, value=value):
                self.assert_rejected(self.mutated(place, "set", value), validate_report.pointer(place))
        # FP8 (docs/fp8.md): a train record in fp8 names its recipe.
        with self.subTest(place=["benchmarks", b, "precision"], value="fp8 without fp8_recipe"):
            self.assert_rejected(self.mutated(["benchmarks", b, "precision"], "set", "fp8"),
                                 validate_report.pointer(["benchmarks", b]), "'fp8_recipe' is a required property")

    def test_unknown_suite_record(self):
        r = copy.deepcopy(self.report)
        r["benchmarks"].append(dict(r["benchmarks"][0], name="nosuch/case", run_name="nosuch/case"))
        self.assert_rejected(r, f"/benchmarks/{len(r['benchmarks']) - 1}/name", "does not match")

    def test_documented_variants_are_accepted(self):
        s = self.index("suites", "train")
        # A suite that threw: no data, no checks, its message.
        r = self.mutated(["suites", s], "set", dict(self.report["suites"][s], status="error", data={},
                                                    error="boom", checks_passed=0, checks_total=0))
        self.assert_valid(r)
        # ...but an errored suite must say why, and a passed one must not carry an error.
        self.assert_rejected(self.mutated(["suites", s, "status"], "set", "error"), f"/suites/{s}/error")
        self.assert_rejected(self.mutated(["suites", s, "error"], "set", "boom"), f"/suites/{s}/error")
        # A non-finite check value (written as null) fails its check.
        r = self.mutated(["checks", 0], "set", dict(self.report["checks"][0], value=None, passed=False,
                                                    verdict="failed", fraction_of_tolerance=None))
        self.assert_valid(r)
        r["checks"][0]["passed"] = True
        self.assert_rejected(r, "/checks/0/passed")
        # A check not judged (the machine was busy): passed false, with its reason; the reason only there.
        c0 = dict(self.report["checks"][0], passed=False, verdict="not_judged", not_judged_reason="the machine was busy")
        self.assert_valid(self.mutated(["checks", 0], "set", c0))
        self.assert_rejected(self.mutated(["checks", 0], "set", dict(c0, passed=True)), "/checks/0/passed")
        no_reason = dict(c0)
        del no_reason["not_judged_reason"]
        self.assert_rejected(self.mutated(["checks", 0], "set", no_reason), "/checks/0")
        self.assert_rejected(self.mutated(["checks", 0], "set", dict(self.report["checks"][0], not_judged_reason="x")),
                             "/checks/0")
        self.assert_rejected(self.mutated(["checks", 0, "verdict"], "set", "maybe"), "/checks/0/verdict")
        # A suite's other work: null where unmeasured.
        self.assert_valid(self.mutated(["suites", s, "host_load"], "set", None))
        # A diverged loss (null) where losses may be non-finite, but not where they may not.
        b = self.index("benchmarks", "train/")
        self.assert_valid(self.mutated(["benchmarks", b, "final_loss"], "set", None))
        self.assert_rejected(self.mutated(["benchmarks", b, "tokens_per_s"], "set", None),
                             f"/benchmarks/{b}/tokens_per_s")

    def test_command_line(self):
        tool = [sys.executable, str(ROOT / "scripts" / "validate_report.py")]
        tmp = Path(self.tmp.name)
        good = tmp / "neg" / "neg.json"
        bad = tmp / "bad.json"
        bad.write_text(json.dumps(self.mutated(["context", "surprise_field"], "add", 1)))
        broken = tmp / "broken.json"
        broken.write_text("{")

        def run(*paths):
            return subprocess.run(tool + [str(p) for p in paths], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=60)

        p = run(good)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = run(good, bad)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(f"{bad}: /context: Additional properties are not allowed ('surprise_field' was unexpected)",
                      p.stdout)
        dup = tmp / "dup.json"  # a key twice: JSON keeps one, the C++ reader refuses it
        dup.write_text(good.read_text().replace('"schema_version":', '"schema_version": 9, "schema_version":', 1))
        for missing in (broken, tmp / "absent.json", dup):
            p = run(good, missing)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(str(missing), p.stderr)
        # A schema that is JSON Schema but not a report's (no properties.schema_version.const): a KeyError was
        # raised (exit 1).
        schema = tmp / "schema.json"
        schema.write_text('{"type": "object"}')
        p = run("--schema", schema, good)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("not a dtbench report schema", p.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: validate_report_test.py PATH/TO/dtbench PATH/TO/mpiexec [unittest options]")
    DTBENCH, MPIEXEC = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    unittest.main(verbosity=2)
