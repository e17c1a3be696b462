#!/usr/bin/python3
"""Tests scripts/report.py end to end: dtbench runs two small configs (4 ranks with a trace:
collectives, train, ffn_tp, pipeline, memory, gemm; 2 ranks: conformance, precision,
recompute, offload, overlap), then report.py renders them. Checks that the Markdown, the HTML
and every plot expected for the suites present are written, that the HTML is self-contained
(images embedded as data URIs, nothing fetched from elsewhere), that failed checks are listed
in their own section before the suites (a report is doctored to have exactly one), that suites
it does not know get a table, that the sweep and kernels suites (run when this dtbench has them,
and as hand-made records) get theirs, that --claims adds the rules of thumb section (the JSON
of `dtbench claims --output FILE` when this dtbench has the command, and a hand-made one) with
one row per claim after the suite table and the failed checks, and that a missing or malformed
report, trace or claims file gives exit status 2 and one line on stderr.
The report of `dtbench validate`: scripts/report_validate_test.py.

Usage: /usr/bin/python3 scripts/report_test.py PATH/TO/dtbench PATH/TO/mpiexec
(ctest `report_script`). Takes about 20 s on 2 cores.
"""
import base64
import html as htmllib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORT_PY = HERE / "report.py"
PYTHON = "/usr/bin/python3"
DATA = "/usr/share/games/fortunes/cookie"
DTBENCH = MPIEXEC = None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Small enough for seconds on 2 cores; every suite's records and data are there all the same.
CONFIG_A = {
    "name": "report-test-a",
    "suites": ["collectives", "train", "ffn_tp", "pipeline", "memory", "gemm"],
    "seed": 7, "data": DATA,
    "model": {"L": 1, "C": 32, "NH": 2, "T": 32, "V": 256},
    "collectives": {"ops": ["all_reduce", "all_gather"], "max_bytes": 65536, "step_factor": 4, "iters": 2,
                    "repetitions": 2},
    "train": {"steps": 8, "global_batch": 8, "micro_batches": 2, "seq_len": 32},
    "ffn_tp": {"hidden": 64, "tokens": 64, "warmup": 1, "iters": 2, "repetitions": 2},
    "pipeline": {"schedules": ["gpipe", "1f1b", "interleaved"], "stages": [2, 4], "micro_batches": [4, 8],
                 "repetitions": 1, "t_forward_us": 300, "t_backward_us": 600, "activation_elems": 256},
    "memory": {"model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256}, "seq_len": 16, "steps": 1},
    "gemm": {"hidden": 64, "tokens": 64, "peak_size": 128, "iters": 2, "warmup": 1},
}
TINY = {"L": 1, "C": 32, "NH": 2, "T": 16, "V": 256}
CONFIG_B = {
    "name": "report-test-b",
    "suites": ["conformance", "precision", "recompute", "offload", "overlap"],
    "seed": 7, "data": DATA,
    "model": {"L": 1, "C": 32, "NH": 2, "T": 32, "V": 256},
    "conformance": {"model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256}, "steps": 4, "global_batch": 8,
                    "micro_batches": 2, "seq_len": 16, "layouts": ["TP2", "PP2:1f1b", "DP2:zero2"],
                    "precisions": ["fp32", "bf16"]},
    "precision": {"model": TINY, "seq_len": 16, "steps": 6, "repetitions": 1, "micro_batch_size": 1,
                  "fp8": [{"recipe": "delayed"}]},
    "recompute": {"model": TINY, "seq_len": 16, "steps": 3, "repetitions": 1, "micro_batch_size": 1},
    "offload": {"model": TINY, "seq_len": 16, "steps": 3, "repetitions": 1},
    "overlap": {"model": TINY, "seq_len": 16, "steps": 3, "repetitions": 1, "bucket_sizes": [1000, 100000]},
}
# The sweep and kernels suites, run when this dtbench has them (`dtbench list`).
CONFIG_C = {
    "name": "report-test-c", "suites": ["sweep", "kernels"], "seed": 7, "data": DATA,
    "model": {"L": 2, "C": 32, "NH": 2, "T": 32, "V": 256},
    "sweep": {"steps": 3, "global_batch": 8, "micro_batches": 2, "seq_len": 32},
    "kernels": {"min_time_s": 0.01, "repetitions": 1},
}
# Plots report.py must write for each suite present (file STEM-NAME.png).
EXPECTED_A = {"busbw", "train-loss", "step-breakdown", "tp-scaling", "bubble", "memory", "timeline", "timeline-train"}
EXPECTED_B = {"conformance-loss", "precision-loss", "step-times-precision", "step-times-recompute",
              "step-times-offload", "step-times-overlap"}

# A claims file as `dtbench claims --output FILE` writes it, one claim per verdict and one with a
# verdict report.py does not know; text with characters Markdown and HTML must escape.
HAND_CLAIMS = {
    "kind": "claims", "version": 1, "catalog": "harness/claims/claims.json", "report": "results/hand.json",
    "claims": [
        {"id": 1, "claim": "Optimizer state is three times the weights.", "conditions": "Adam | fp32",
         "method": "analytic", "predicted": "ratio 3", "computed": "fp32 2x; mixed 6x", "measured": "analytic only",
         "verdict": "differs", "why": "no recipe keeps a 4 B copy beside 4 B weights", "values": {"fp32": 2}},
        {"id": 2, "claim": "fp16 gradients halve the bytes.", "conditions": "same all-reduce", "method": "both",
         "predicted": "x0.5", "computed": "4 -> 2 B", "measured": "all_reduce <here> & there",
         "verdict": "holds", "why": "exactly", "values": {}},
        {"id": 7, "claim": "The bubble stays under 10%.", "conditions": "p = 4", "method": "both",
         "predicted": "< 10%", "computed": "m >= 28", "measured": "pipeline suite: 0.31",
         "verdict": "holds only if", "why": "m >= 9 (p - 1) + 1", "values": {}},
        {"id": 9, "claim": "TP4 runs 3.2x faster.", "conditions": "4 GPUs", "method": "suite",
         "predicted": "3.2x", "computed": "81% efficiency", "measured": "needs 4 GPUs",
         "verdict": "cannot measure here", "why": "no GPU on this machine", "values": {}},
        {"id": 10, "claim": "A claim judged by a later dtbench.", "conditions": "none", "method": "analytic",
         "predicted": "1", "computed": "1", "measured": "analytic only", "verdict": "untested", "why": "new",
         "values": {}},
    ],
}
VERDICT_CLS = {"holds": "pass", "differs": "fail", "holds only if": "warn", "cannot measure here": "skip"}
CLAIMS_H2 = "## Rules of thumb (dtbench claims)"


def md_cell(text):
    return str(text).replace("|", "\\|")


def claims_section_md(md):
    """The rules of thumb section of a rendered page, up to the next section."""
    start = md.index("\n" + CLAIMS_H2 + "\n")
    end = md.find("\n## ", start + 1)
    return md[start:end if end >= 0 else len(md)]


def claims_rows_html(page):
    """(class, cells) of each body row of the table under <h2 id="claims">."""
    start = page.index('<h2 id="claims">')
    table = page[page.index("<table", start):page.index("</table>", start)]
    body = table[table.index("<tbody>"):]
    rows = []
    for m in re.finditer(r"<tr(?: class=\"([^\"]*)\")?>(.*?)</tr>", body):
        rows.append((m.group(1), re.findall(r"<td[^>]*>(.*?)</td>", m.group(2))))
    return rows


def dtbench_run(tmp, name, config, np, trace=False):
    cfg = tmp / f"{name}-config.json"
    cfg.write_text(json.dumps(config))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
    cmd = [MPIEXEC, "-np", str(np), "--oversubscribe", "--bind-to", "none", DTBENCH, "run", "--config", str(cfg),
           "--output-dir", str(tmp / "results"), "--run-id", name]
    if trace:
        cmd += ["--trace", str(tmp / "results" / f"{name}-trace.json")]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    # 1: a check failed (timing checks such as the pipeline bubble may, on a loaded machine); the
    # report is written all the same, and a failed check is what report.py must show.
    if p.returncode not in (0, 1):
        raise RuntimeError(f"dtbench {name} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return tmp / "results" / f"{name}.json"


def render(*args):
    return subprocess.run([PYTHON, str(REPORT_PY), *map(str, args)], capture_output=True, text=True, timeout=300)


def plots_of(directory, stem):
    return {p.name[len(stem) + 1:-4] for p in Path(directory).glob(f"{stem}-*.png")}


class BadInput:
    """assert_bad for the test classes: report.py refuses the input with exit status 2 and one line."""

    def assert_bad(self, args, words):
        p = render(*args)
        self.assertEqual(p.returncode, 2, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("report.py: error: "), lines[0])
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(p.stdout, "")


class ReportScript(BadInput, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="report_test."))
        cls.report_a = dtbench_run(cls.tmp, "a", CONFIG_A, 4, trace=True)
        cls.trace_a = cls.tmp / "results" / "a-trace.json"
        cls.report_b = dtbench_run(cls.tmp, "b", CONFIG_B, 2)
        cls.out_a = render(cls.report_a, "--trace", cls.trace_a)
        cls.out_b = render(cls.report_b, "--out-dir", cls.tmp / "out-b")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_ok(self, p):
        self.assertEqual(p.returncode, 0, f"report.py failed:\n{p.stdout}\n{p.stderr}")
        self.assertNotIn("warning", p.stderr, p.stderr)

    def assert_self_contained(self, html_path, pngs):
        html = html_path.read_text(encoding="utf-8")
        # Nothing loaded from elsewhere: no http(s) or protocol-relative src/href/url(), no script
        # or stylesheet link; every <img> is a data: URI.
        self.assertIsNone(re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I), "external reference")
        self.assertIsNone(re.search(r"url\(\s*['\"]?\s*(https?:)?//", html, re.I), "external CSS url()")
        self.assertIsNone(re.search(r"<script\b|<link\b|<iframe\b|@import", html, re.I), "script, link or import")
        self.assertNotRegex(html, r"https?://")
        srcs = re.findall(r"<img\b[^>]*\bsrc=\"([^\"]*)\"", html)
        self.assertEqual(len(srcs), len(pngs), "one embedded image per PNG written")
        for s in srcs:
            self.assertTrue(s.startswith("data:image/png;base64,"), s[:60])
            self.assertTrue(base64.b64decode(s.split(",", 1)[1]).startswith(PNG_MAGIC))
        for p in pngs:  # each PNG written is the one embedded
            self.assertIn(base64.b64encode(p.read_bytes()).decode("ascii"), html, p.name)
        self.assertTrue(html.rstrip().endswith("</html>"))
        return html

    # --- the two real runs

    def test_run_a_files_and_plots(self):
        self.assert_ok(self.out_a)
        d = self.report_a.parent
        for ext in ("md", "html"):
            self.assertTrue((d / f"a.{ext}").is_file(), ext)
        self.assertEqual(plots_of(d, "a"), EXPECTED_A)
        pngs = sorted(d.glob("a-*.png"))
        for p in pngs:
            self.assertTrue(p.read_bytes().startswith(PNG_MAGIC), p.name)
            self.assertIn(str(p), self.out_a.stdout)  # report.py lists what it wrote
        self.assert_self_contained(d / "a.html", pngs)
        md = (d / "a.md").read_text(encoding="utf-8")
        for p in pngs:
            self.assertIn(f"]({p.name})", md)  # Markdown links the PNGs beside it

    def test_run_a_content(self):
        md = (self.report_a.parent / "a.md").read_text(encoding="utf-8")
        r = json.loads(self.report_a.read_text())
        ctx = r["context"]
        head = md.split("## Suites")[0]
        for v in (ctx["run_id"], ctx["date"], ctx["host_name"], ctx["backend"], ctx["git_commit"], "report-test-a"):
            self.assertIn(str(v), head)
        self.assertRegex(head, r"\d+ of \d+ checks passed")
        order = [md.index(f"\n## {s}\n") for s in ("Suites", "collectives", "train", "ffn_tp", "pipeline", "memory",
                                                    "gemm", "Timeline (trace)")]
        self.assertEqual(order, sorted(order), "sections in report order")
        for s in r["suites"]:
            self.assertIn(f"[{s['name']}](#{s['name']})", md)
        # nccl-tests columns, train and pipeline tables
        for text in ("busbw (GB/s)", "algbw (GB/s)", "#wrong", "tokens/s", "comm share", "theory", "measured",
                     "speedup", "efficiency", "device param", "TFLOP/s"):
            self.assertIn(text, md)
        for b in r["benchmarks"]:
            if b["name"].startswith("pipeline/") and not b.get("skipped"):
                self.assertRegex(md, rf"\| {b['schedule']} \| {b['p']} \| {b['m']} \|")
        # the timeline is of a recognised pipeline case
        self.assertRegex(md, r"Pipeline timeline: 1f1b, p = 4, m = 8")
        self.assertNotIn("Rules of thumb", md, "no claims section without --claims")

    def test_run_b_files_and_plots(self):
        self.assert_ok(self.out_b)
        d = self.tmp / "out-b"
        self.assertEqual(plots_of(d, "b"), EXPECTED_B)
        self.assertFalse((self.report_b.parent / "b.md").exists(), "--out-dir is where it writes")
        self.assert_self_contained(d / "b.html", sorted(d.glob("b-*.png")))
        md = (d / "b.md").read_text(encoding="utf-8")
        for text in ("TP2", "PP2:1f1b", "DP2:zero2", "Δloss\\| vs f64", "worst check", "loss scale",
                     "time overhead", "device bytes saved", "gain (off / on)"):
            self.assertIn(text, md)

    def test_failed_checks_listed_first(self):
        r = json.loads(self.report_b.read_text())
        for c in r["checks"]:  # every check passes, then one fails
            c["passed"], c["verdict"], c["value"] = True, "passed", min(c["value"], c["tolerance"])
        for s in r["suites"]:
            s["status"] = "passed"
            s["checks_passed"] = s["checks_total"]
        bad = next(c for c in r["checks"] if c["name"].startswith("conformance/TP2/loss/step:1"))
        bad.update(passed=False, verdict="failed", value=bad["tolerance"] * 3, fraction_of_tolerance=3.0)
        conf = next(s for s in r["suites"] if s["name"] == "conformance")
        conf["status"], conf["checks_passed"] = "failed", conf["checks_total"] - 1
        path = self.tmp / "doctored.json"
        path.write_text(json.dumps(r))
        self.assert_ok(render(path))
        md = (self.tmp / "doctored.md").read_text(encoding="utf-8")
        html = (self.tmp / "doctored.html").read_text(encoding="utf-8")
        self.assertIn("**FAILED**", md.split("## Suites")[0])
        self.assertIn("**1 failed**", md)
        self.assertIn("## Failed checks (1)", md)
        failed = md.index("## Failed checks")
        self.assertLess(md.index("## Suites"), failed)
        self.assertLess(failed, md.index("\n## conformance\n"), "failed checks come before the suites")
        section = md[failed:md.index("\n## conformance\n")]
        self.assertIn(f"`{bad['name']}`", section)
        self.assertIn("| 3 |", section)  # value / tolerance
        self.assertIn(bad["name"], html[html.index("Failed checks"):html.index('id="conformance"')])
        self.assertIn('class="alert"', html)
        # and a report where everything passed has no such section
        bad.update(passed=True, verdict="passed", value=0.0, fraction_of_tolerance=0.0)
        conf["status"] = "passed"
        path.write_text(json.dumps(r))
        self.assert_ok(render(path))
        md = (self.tmp / "doctored.md").read_text(encoding="utf-8")
        self.assertNotIn("## Failed checks", md)
        self.assertIn("**PASSED**", md)
        # A timing check not judged (the machine was busy): listed with its reason, before the suites,
        # neither failed nor passed, and the run still PASSED.
        bad.update(passed=False, verdict="not_judged", not_judged_reason="the machine was busy: figures",
                   value=bad["tolerance"] * 3, fraction_of_tolerance=3.0)
        conf["checks_passed"], conf["checks_not_judged"] = conf["checks_total"] - 1, 1
        conf["host_load"] = {"interval_s": 8.9, "other_cores": 1.85, "hosts": [
            {"host": "vm", "cpus": 2, "ranks": 4, "busy_cores": 1.97, "own_cores": 0.12, "other_cores": 1.85,
             "resolution_cores": 0.002}]}
        path.write_text(json.dumps(r))
        self.assert_ok(render(path))
        md = (self.tmp / "doctored.md").read_text(encoding="utf-8")
        self.assertIn("**PASSED**", md.split("## Suites")[0])
        self.assertIn("1 not judged (the machine was busy", md.split("## Suites")[0])
        self.assertNotIn("## Failed checks", md)
        nj = md.index("## Checks not judged (1)")
        self.assertLess(nj, md.index("\n## conformance\n"))
        self.assertIn(f"`{bad['name']}`", md[nj:md.index("\n## conformance\n")])
        self.assertIn("the machine was busy: figures", md[nj:md.index("\n## conformance\n")])
        self.assertIn("(1 not judged)", md.split("## Checks not judged")[0])  # the suites table
        self.assertIn("| 1.85 of 2 |", md.split("## Checks not judged")[0])

    def test_unknown_and_future_suites(self):
        r = json.loads(self.report_a.read_text())
        rec = {"run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1, "iterations": 5}
        r["suites"] += [{"name": n, "status": "passed", "duration_s": 1.0, "checks_passed": 0, "checks_total": 0,
                         "data": {}, "error": None} for n in ("sweep", "kernels")]
        r["suites"].append({"name": "mystery", "status": "error", "duration_s": 0.5, "checks_passed": 0,
                            "checks_total": 0, "data": {"anything": [1, 2]}, "error": "it threw"})
        for lay, tps in (("DP4", 3000.0), ("TP2xDP2", 2500.0), ("PP2xDP2:1f1b", 2100.0)):
            r["benchmarks"].append(dict(rec, name=f"sweep/{lay}", run_name=f"sweep/{lay}", real_time=10.0,
                                        cpu_time=10.0, time_unit="ms", layout=lay, ranks=4, tokens_per_s=tps,
                                        step_time_ms={"n": 5, "median": 10.0, "min": 9.0, "max": 12.0, "mean": 10.0,
                                                      "stddev": 1.0},
                                        peak_bytes_per_rank=3 * 2 ** 20, bubble=0.2 if "PP" in lay else None,
                                        comm_fraction=0.3))
        r["benchmarks"] += [
            dict(rec, name="kernels/matmul/n:1024", run_name="kernels/matmul/n:1024", real_time=1234.5,
                 cpu_time=1230.0, time_unit="us", FLOPS=1.74e12),
            dict(rec, name="kernels/layernorm/n:4096", run_name="kernels/layernorm/n:4096", real_time=45.2,
                 cpu_time=45.0, time_unit="us", bytes_per_second=3.2e10),
            dict(rec, name="mystery/thing/x:1", run_name="mystery/thing/x:1", real_time=1.0, cpu_time=1.0,
                 time_unit="s", widgets_per_s=42.5, colour="blue", nested={"a": 1},
                 latency_ms={"n": 3, "median": 2.5, "min": 2.0, "max": 3.0}),
        ]
        path = self.tmp / "future.json"
        path.write_text(json.dumps(r))
        self.assert_ok(render(path))
        md = (self.tmp / "future.md").read_text(encoding="utf-8")
        sweep = md[md.index("\n## sweep\n"):md.index("\n## kernels\n")]
        for text in ("| layout | ranks | tokens/s | step (ms) | peak bytes per rank | bubble | comm share |",
                     "`DP4`", "`TP2xDP2`", "`PP2xDP2:1f1b`", "3 MiB", "| 20.0% |"):
            self.assertIn(text, sweep)
        kernels = md[md.index("\n## kernels\n"):md.index("\n## mystery\n")]
        for text in ("`matmul/n:1024`", "1.74 TFLOP/s", "32 GB/s", "real time", "us"):
            self.assertIn(text, kernels)
        mystery = md[md.index("\n## mystery\n"):]
        for text in ("it threw", "`thing/x:1`", "widgets_per_s", "42.5", "blue", "latency_ms (median)", "2.5"):
            self.assertIn(text, mystery)
        self.assertIn("mystery error", md.split("## Suites")[0])

    def test_suite_of_another_shape_falls_back(self):
        r = json.loads(self.report_a.read_text())
        for b in r["benchmarks"]:
            if b["name"].startswith("ffn_tp/"):
                b["tp"] = "not a number"
        path = self.tmp / "odd.json"
        path.write_text(json.dumps(r))
        p = render(path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ffn_tp: could not render", p.stderr)
        md = (self.tmp / "odd.md").read_text(encoding="utf-8")
        self.assertIn("generic table instead", md)
        self.assertNotIn("odd-tp-scaling.png", md)

    def test_sweep_and_kernels_suites(self):
        listed = subprocess.run([DTBENCH, "list"], capture_output=True, text=True, timeout=60).stdout
        have = [s for s in ("sweep", "kernels") if re.search(rf"^\s+{s}\s", listed, re.M)]
        if not have:
            self.skipTest("this dtbench has no sweep or kernels suite")
        config = dict(CONFIG_C, suites=have)
        report = dtbench_run(self.tmp, "c", config, 4)
        out = self.tmp / "out-c"
        self.assert_ok(render(report, "--out-dir", out))
        md = (out / "c.md").read_text(encoding="utf-8")
        r = json.loads(report.read_text())
        if "sweep" in have:
            self.assertIn("sweep", plots_of(out, "c"))
            sweep = md[md.index("\n## sweep\n"):]
            self.assertIn("| layout | ranks | TP×DP×PP | tokens/s | step period (ms) | peak bytes per rank |", sweep)
            for b in r["benchmarks"]:
                if b["name"] == "sweep/step_time_model":  # the model's summary, below the table
                    self.assertIn("Step-time model (docs/plan.md)", sweep)
                elif b["name"].startswith("sweep/"):
                    self.assertIn(f"`{b['layout']}`", sweep)
                    if b.get("cp", 1) > 1:  # context parallelism: measured, not predicted (no CP in the model)
                        self.assertIn("context-parallel layouts", b["prediction_skipped"])
                    else:
                        self.assertIn("predicted_step_time_ms", b)
        if "kernels" in have:
            kernels = md[md.index("\n## kernels\n"):]
            self.assertIn("| kernel | iterations | real time | CPU time |", kernels)
            for b in r["benchmarks"]:
                if b["name"].startswith("kernels/"):
                    self.assertIn(f"`{b['name'][len('kernels/'):]}`", kernels)
        self.assert_self_contained(out / "c.html", sorted(out.glob("c-*.png")))

    # --- claims (--claims)

    def assert_claims_rendered(self, md, page, claims):
        """One row per claim, in order, every column as the claims file has it, each verdict styled."""
        section = claims_section_md(md)
        table = [ln for ln in section.splitlines() if ln.startswith("| ")]
        self.assertEqual(table[0], "| claim | conditions | claimed | computed here | measured here | verdict | why |")
        rows = table[1:]
        self.assertEqual(len(rows), len(claims), "one Markdown row per claim")
        for row, c in zip(rows, claims):
            cells = [md_cell(c[k]) for k in ("conditions", "predicted", "computed", "measured", "verdict", "why")]
            self.assertEqual(row, f"| **{c['id']}.** {md_cell(c['claim'])} | " + " | ".join(cells) + " |")
        hrows = claims_rows_html(page)
        self.assertEqual(len(hrows), len(claims), "one HTML row per claim")
        for (cls, cells), c in zip(hrows, claims):
            self.assertEqual(cls, VERDICT_CLS.get(c["verdict"]), c["verdict"])
            self.assertEqual(cells[0], f"<strong>{c['id']}.</strong> " + htmllib.escape(c["claim"], quote=False))
            self.assertEqual(cells[1:], [htmllib.escape(c[k], quote=False) for k in
                                         ("conditions", "predicted", "computed", "measured", "verdict", "why")])
        return section

    def test_claims_from_dtbench(self):
        if subprocess.run([DTBENCH, "claims", "--help"], capture_output=True, timeout=60).returncode != 0:
            self.skipTest("this dtbench has no claims command")
        path = self.tmp / "claims.json"
        p = subprocess.run([DTBENCH, "claims", "--report", str(self.report_a), "--output", str(path)],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        claims = json.loads(path.read_text())
        self.assertEqual(claims["kind"], "claims")
        self.assertGreater(len(claims["claims"]), 0)
        out = self.tmp / "out-claims"
        self.assert_ok(render(self.report_a, "--claims", path, "--out-dir", out))
        md = (out / "a.md").read_text(encoding="utf-8")
        page = self.assert_self_contained(out / "a.html", sorted(out.glob("a-*.png")))
        section = self.assert_claims_rendered(md, page, claims["claims"])
        # after the header and the suite table, before the first suite's section
        self.assertLess(md.index("\n## Suites\n"), md.index(CLAIMS_H2))
        self.assertLess(md.index(CLAIMS_H2), md.index("\n## collectives\n"))
        self.assertIn(f"`{self.report_a}`", section, "names the report the measured column is from")
        self.assertIn(f"checked {len(claims['claims'])} rules of thumb", section)
        self.assertIn(f"{sum(c['verdict'] == 'holds only if' for c in claims['claims'])} holds only if", section)

    def test_claims_hand_written(self):
        d = self.tmp / "claims-hand"
        d.mkdir(exist_ok=True)
        (d / "claims.json").write_text(json.dumps(HAND_CLAIMS))
        report = {"context": {"run_id": "claims-hand"}, "schema_version": 1,
                  "suites": [{"name": "mystery", "status": "failed", "duration_s": 1.0, "checks_passed": 0,
                              "checks_total": 1, "data": {}, "error": None}],
                  "checks": [{"name": "mystery/x", "suite": "mystery", "passed": False, "value": 2.0,
                              "tolerance": 1.0, "fraction_of_tolerance": 2.0}],
                  "benchmarks": [{"name": "mystery/thing", "run_type": "iteration", "real_time": 1.0,
                                  "cpu_time": 1.0, "time_unit": "s"}]}
        (d / "hand.json").write_text(json.dumps(report))
        self.assert_ok(render(d / "hand.json", "--claims", d / "claims.json"))
        md = (d / "hand.md").read_text(encoding="utf-8")
        page = (d / "hand.html").read_text(encoding="utf-8")
        section = self.assert_claims_rendered(md, page, HAND_CLAIMS["claims"])
        self.assertIn("Adam \\| fp32", section)  # a | in a cell is escaped, not a column
        self.assertIn("all_reduce &lt;here&gt; &amp; there", page)
        self.assertNotIn("<here>", page)
        self.assertIn("5 rules of thumb from `harness/claims/claims.json`: 1 holds, 1 differs, 1 holds only if, "
                      "1 cannot measure here, 1 untested.", section)
        self.assertIn("`results/hand.json`", section)
        # suite table, failed checks, rules of thumb, then the suites
        order = [md.index(h) for h in ("\n## Suites\n", "\n## Failed checks (1)\n", CLAIMS_H2, "\n## mystery\n")]
        self.assertEqual(order, sorted(order))
        # no claims: the section says so
        (d / "none.json").write_text(json.dumps(dict(HAND_CLAIMS, claims=[], report=None)))
        self.assert_ok(render(d / "hand.json", "--claims", d / "none.json"))
        md = (d / "hand.md").read_text(encoding="utf-8")
        self.assertIn("The claims file holds no claims.", claims_section_md(md))

    # --- bad input: exit 2, one line

    def test_bad_input(self):
        bad = self.tmp / "bad"
        bad.mkdir(exist_ok=True)
        missing = bad / "nope.json"
        self.assert_bad([missing], ["does not exist", "nope.json"])
        (bad / "trunc.json").write_text(self.report_a.read_text()[:500])
        self.assert_bad([bad / "trunc.json"], ["not valid JSON", "trunc.json"])
        (bad / "list.json").write_text("[1, 2]")
        self.assert_bad([bad / "list.json"], ["not a dtbench report"])
        (bad / "partial.json").write_text(json.dumps({"context": {}, "benchmarks": []}))
        self.assert_bad([bad / "partial.json"], ["no suites, checks"])
        (bad / "types.json").write_text(json.dumps({"context": {}, "benchmarks": {}, "suites": [], "checks": []}))
        self.assert_bad([bad / "types.json"], ["'benchmarks' must be a JSON array"])
        self.assert_bad([bad], ["is a directory"])
        self.assert_bad([self.report_a, "--trace", missing], ["trace", "does not exist"])
        (bad / "trace.json").write_text('{"traceEvents": 3}')
        self.assert_bad([self.report_a, "--trace", bad / "trace.json"], ["not a Chrome trace"])
        self.assert_bad([], ["report"])  # no argument at all
        self.assert_bad([self.report_a, "--bogus"], ["--bogus"])
        # claims files: missing, not JSON, not claims (a report), claims not a list, a claim lacking fields
        out = ["--out-dir", bad]
        self.assert_bad([self.report_a, "--claims", missing, *out], ["claims file", "does not exist", "nope.json"])
        (bad / "claims-trunc.json").write_text(json.dumps(HAND_CLAIMS)[:300])
        self.assert_bad([self.report_a, "--claims", bad / "claims-trunc.json", *out], ["claims file", "not valid JSON"])
        self.assert_bad([self.report_a, "--claims", self.report_a, *out], ["is not the output of `dtbench claims"])
        (bad / "claims-kind.json").write_text(json.dumps(dict(HAND_CLAIMS, kind="report")))
        self.assert_bad([self.report_a, "--claims", bad / "claims-kind.json", *out], ['"kind": "claims"'])
        (bad / "claims-obj.json").write_text(json.dumps(dict(HAND_CLAIMS, claims={"1": {}})))
        self.assert_bad([self.report_a, "--claims", bad / "claims-obj.json", *out], ["'claims' must be a JSON array"])
        entry = {k: v for k, v in HAND_CLAIMS["claims"][0].items() if k != "verdict"}
        (bad / "claims-entry.json").write_text(json.dumps(dict(HAND_CLAIMS, claims=[entry])))
        self.assert_bad([self.report_a, "--claims", bad / "claims-entry.json", *out], ["claim 1 has no verdict"])
        (bad / "claims-id.json").write_text(json.dumps(dict(HAND_CLAIMS, claims=[dict(entry, verdict="holds", id="1")])))
        self.assert_bad([self.report_a, "--claims", bad / "claims-id.json", *out], ["claims[0] has no integer id"])
        # Each was a traceback (exit 1), one after 6 plots were written: a check's suite not a string, a
        # number past a double, a trace event whose times are not finite numbers.
        doctored = json.loads(self.report_a.read_text())
        doctored["checks"][0]["suite"] = ["collectives"]
        (bad / "suite.json").write_text(json.dumps(doctored))
        self.assert_bad([bad / "suite.json", *out], ["'suite' must be a string"])
        (bad / "inf.json").write_text(self.report_a.read_text().replace('"context":', '"big": 1e999, "context":', 1))
        self.assert_bad([bad / "inf.json", *out], ["1e999 overflows a double"])
        (bad / "trace-nan.json").write_text(json.dumps(
            {"traceEvents": [{"ph": "X", "name": "fwd", "tid": 0, "ts": "nan", "dur": "inf"}]}))
        self.assert_bad([self.report_a, "--trace", bad / "trace-nan.json", *out], ["not a finite number"])
        self.assertEqual(list(bad.glob("*.md")) + list(bad.glob("*.png")), [], "nothing written on bad input")


class PipelineTimelineCase(unittest.TestCase):
    """The timeline's pipeline step is found by each case's own repetition count: on a busy machine a case
    runs past pipeline.repetitions (up to max_repetitions), so the cases' counts differ (a CI run found the
    timeline fall back to "trace step N" when the first case's count was taken for all)."""

    def test_each_case_its_own_repetitions(self):
        sys.path.insert(0, str(HERE))
        from dtbreport.trace import pipeline_case_step
        rec = lambda s, p, m, n: {"schedule": s, "p": p, "m": m, "virtual_stages": 2, "repetitions": n}
        runs = [rec("gpipe", 2, 4, 5), rec("1f1b", 4, 8, 3), rec("interleaved", 4, 8, 2)]
        # steps 0-4 gpipe, 5-7 the 1F1B case (makespans 30, 10, 20 us), 8-9 interleaved, 10-13 the GPT cases
        dur = {5: 30, 6: 10, 7: 20}
        by = {s: [{"rank": 0, "ts": 1000 * s, "dur": dur.get(s, 50)}] for s in range(14)}
        b, step, k, n = pipeline_case_step(runs, {"steps": sorted(by), "by_step": by})
        self.assertEqual((b["schedule"], b["p"], b["m"], step, k, n), ("1f1b", 4, 8, 7, 2, 3))
        self.assertIsNone(pipeline_case_step(runs, {"steps": list(range(9)), "by_step": by}),
                          "fewer trace steps than the records' repetitions: another run's trace")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print("usage: report_test.py PATH/TO/dtbench PATH/TO/mpiexec", file=sys.stderr)
        sys.exit(2)
    DTBENCH, MPIEXEC = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
