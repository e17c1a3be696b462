#!/usr/bin/python3
"""Tests scripts/report.py on the report of `dtbench validate` (hand-made, after a level-long run with
rank 3 slowed; needs no dtbench run): it renders with its defective node, violations, checks, pair
bandwidth matrix and inventory, a check not run and an incomplete verdict, and one without checks or
nodes is refused with exit status 2 and one line. The run report's tests: scripts/report_test.py.

Usage: /usr/bin/python3 scripts/report_validate_test.py (ctest `report_validate_script`).
"""
import html as htmllib
import json
import re
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_test import BadInput, render  # noqa: E402


def validate_sample():
    """A `dtbench validate --level long --ranks-per-node 2 --inject 3:compute:2` report as dtbench writes it
    (4 ranks as 2 emulated nodes; rank 3's GEMM and triad 2x slow fail node 1; rank 2's pair bandwidth warns),
    a few of its checks kept."""
    blas = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
    inventory = [{"rank": r, "host": "vm", "node": f"vm/node{r // 2}", "node_index": r // 2, "local_rank": r % 2,
                  "cpu_model": "AMD EPYC", "cores": 2, "memory_bytes": 25276510208.0, "device": "cpu: AMD EPYC",
                  "backend": "cpu", "mpi_version": "Open MPI v4.1.4", "blas_version": blas} for r in range(4)]
    gemm = {"check": "compute/gemm_gflops", "status": "fail",
            "detail": "rank 3 59.8479 GFLOP/s, 49% below the median 117.445 (rule: fail beyond 30% below the fleet "
                      "median)",
            "values": {"median": 117.445, "rank 0": 121.03, "rank 1": 114.12, "rank 2": 120.77, "rank 3": 59.848,
                       "reference": 117.445, "tolerance": 0.3, "unit": "GFLOP/s"}}
    triad = {"check": "compute/triad_GBps", "status": "fail",
             "detail": "rank 3 13.0147 GB/s, 54% below the median 28.2117 (rule: fail beyond 30% below the fleet "
                       "median)",
             "values": {"median": 28.2117, "rank 3": 13.0147, "reference": 28.2117, "tolerance": 0.3, "unit": "GB/s"}}
    pairs = {"check": "pairs/sendrecv_GBps", "status": "warn",
             "detail": "rank 2 15.4789 GB/s, 17% below the median 18.5551 (rule: warn beyond 15% below the fleet "
                       "median)",
             "values": {"bytes": 4194304, "median": 18.5551, "reference": 18.5551, "tolerance": 0.3, "unit": "GB/s",
                        "matrix_GBps": [[0.0, 18.2026, 15.4333, 18.9158], [18.9077, 0.0, 14.729, 19.4916],
                                        [15.4789, 14.6651, 0.0, 18.7343], [18.9231, 19.0969, 18.775, 0.0]]}}

    def check(v, nodes, ranks):
        return {"name": v["check"], "status": v["status"], "detail": v["detail"], "nodes": nodes, "ranks": ranks,
                "values": v["values"]}

    return {
        "kind": "validate", "version": 1, "level": "long", "levels_run": ["quick", "medium", "long"],
        "injected_fault": "3:compute:2", "expect": {}, "emulated_ranks_per_node": 2, "world_size": 4,
        "duration_s": 1.670408865, "inventory": inventory,
        "checks": [
            {"name": "consistency/ranks_per_node", "status": "pass", "detail": "2 nodes of 2 ranks", "nodes": [],
             "ranks": [], "values": {"ranks_per_node": 2}},
            {"name": "consistency/blas_version", "status": "pass", "detail": f"all 4 ranks: {blas}", "nodes": [],
             "ranks": [], "values": {"majority": blas}},
            check(gemm, ["vm/node1"], [3]), check(triad, ["vm/node1"], [3]),
            {"name": "collectives/intra_node", "status": "skip",
             "detail": "not built yet (level medium measures compute only so far)", "nodes": [], "ranks": [],
             "values": {}},
            check(pairs, ["vm/node1"], [2]),
            {"name": "train/world", "status": "skip", "detail": "not built yet (level long runs the pair sweep only "
             "so far)", "nodes": [], "ranks": [], "values": {}},
        ],
        "nodes": [{"node": "vm/node0", "ranks": [0, 1], "accepted": True, "violations": []},
                  {"node": "vm/node1", "ranks": [2, 3], "accepted": False, "violations": [gemm, triad, pairs]}],
        "verdict": "defective", "exit_status": 1,
    }


class ValidateReport(BadInput, unittest.TestCase):
    """The JSON report of `dtbench validate`, hand-made: needs no dtbench run."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="report_test.validate."))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def render_validate(self, v, name="validate"):
        """Writes v as NAME.json, renders it; returns its Markdown and HTML."""
        path = self.tmp / f"{name}.json"
        path.write_text(json.dumps(v))
        p = render(path)
        self.assertEqual(p.returncode, 0, f"report.py failed:\n{p.stdout}\n{p.stderr}")
        self.assertEqual(p.stderr, "")
        self.assertEqual(p.stdout.split(), [str(self.tmp / f"{name}.md"), str(self.tmp / f"{name}.html")])
        self.assertEqual(list(self.tmp.glob("*.png")), [], "no plots for a validate report")
        return (self.tmp / f"{name}.md").read_text(encoding="utf-8"), (self.tmp / f"{name}.html").read_text(encoding="utf-8")

    def test_defective_node_and_violations(self):
        v = validate_sample()
        md, page = self.render_validate(v)
        self.assertTrue(md.startswith("# dtbench validate, level long: DEFECTIVE\n"), md[:80])
        self.assertIn("\n> **DEFECTIVE**: 1 of 2 nodes defective: `vm/node1` (exit status 1)\n", md)
        self.assertIn("4 ranks on 2 nodes (emulated nodes of 2 ranks each, for tests); levels run: quick, medium, "
                      "long; took 1.67 s; **test-only fault injection** `3:compute:2`.", md)
        # the nodes first, then the checks, the matrix and the inventory
        order = [md.index(h) for h in ("\n## Nodes\n", "\n## Checks\n", "\n## Pair bandwidth: `pairs/sendrecv_GBps`\n",
                                       "\n## Inventory\n")]
        self.assertEqual(order, sorted(order))
        nodes = md[order[0]:order[1]]
        self.assertIn("| `vm/node0` | 0, 1 | accepted | 0 |", nodes)
        self.assertIn("| `vm/node1` | 2, 3 | **DEFECTIVE** | 3 |", nodes)
        self.assertIn("**`vm/node1`** (ranks 2, 3): 3 violations", nodes)
        gemm = v["nodes"][1]["violations"][0]["detail"]
        self.assertIn(f"- **fail** `compute/gemm_gflops`: {gemm}\n", nodes)
        self.assertIn("- warn `pairs/sendrecv_GBps`: rank 2 15.4789 GB/s", nodes)
        self.assertNotIn("`vm/node0`**", nodes, "no violation list for an accepted node")
        checks = md[order[1]:order[2]]
        self.assertIn("7 checks: 2 fail, 1 warn, 2 pass, 2 skip.", checks)
        self.assertIn(f"| **fail** | `compute/gemm_gflops` | {gemm} |", checks)
        self.assertIn("| skip | `train/world` | not built yet", checks)
        self.assertIn("| 3 | `vm/node1` | cpu: AMD EPYC | 2 | 25.3 | Open MPI v4.1.4 | OpenBLAS 0.3.21", md[order[3]:])
        # the HTML: the same, escaped, styled by status, self-contained
        self.assertIn('<div class="alert"><strong>DEFECTIVE</strong>: 1 of 2 nodes defective: <code>vm/node1</code>',
                      page)
        self.assertIn('<tr class="fail"><td><code>vm/node1</code></td><td>2, 3</td><td><strong>DEFECTIVE</strong>'
                      '</td><td class="r">3</td></tr>', page)
        self.assertIn('<tr class="pass"><td><code>vm/node0</code></td>', page)
        self.assertIn(f"<li><strong>fail</strong> <code>compute/gemm_gflops</code>: {htmllib.escape(gemm)}</li>", page)
        self.assertIn('<tr class="warn"><td>warn</td><td><code>pairs/sendrecv_GBps</code></td>', page)
        self.assertIn("<title>dtbench validate: level long</title>", page)
        self.assertIsNone(re.search(r"<script\b|<link\b|<img\b|https?://", page, re.I))
        self.assertTrue(page.rstrip().endswith("</html>"))

    def test_sdc_check(self):
        """The SDC triage's check (harness/validate/sdc.h) renders as any other: in the checks and at its node."""
        v = validate_sample()
        detail = ("rank 2's replay differs from the majority's (3 of 4 ranks agree) from step 2 of 3 on; GPT L2 C64 "
                  "H4 T64 V256 (120576 params, fp32), 3 steps of 8 x 64 tokens, AdamW lr 0.003, cpu, no communication")
        at_node = ("rank 2's replay differs from the majority's (3 of 4 ranks agree) from step 2 of 3 on (silent data "
                   "corruption suspected)")
        hashes = {f"rank {r}": "9a4f0c2d51e3b877" if r != 2 else "16c2e0b9f7a3d401" for r in range(4)}
        v["checks"].append({"name": "sdc/replay", "status": "fail", "detail": detail, "nodes": ["vm/node1"],
                            "ranks": [2], "values": {"replay": detail.split("; ")[1], "final_hash": hashes,
                                                     "groups": [[0, 1, 2, 3]]}})
        v["nodes"][1]["violations"].append({"check": "sdc/replay", "status": "fail", "detail": at_node,
                                            "values": {"final_hash": hashes}})
        md, page = self.render_validate(v)
        self.assertIn(f"| **fail** | `sdc/replay` | {detail} |", md)
        self.assertIn(f"- **fail** `sdc/replay`: {at_node}\n", md)
        self.assertIn("| `vm/node1` | 2, 3 | **DEFECTIVE** | 4 |", md)
        self.assertIn(f"<li><strong>fail</strong> <code>sdc/replay</code>: {htmllib.escape(at_node, quote=False)}</li>",
                      page)

    def test_matrix(self):
        md, page = self.render_validate(validate_sample())
        section = md[md.index("\n## Pair bandwidth: `pairs/sendrecv_GBps`\n"):md.index("\n## Inventory\n")]
        self.assertIn("4 MiB messages", section)
        table = [ln for ln in section.splitlines() if ln.startswith("|")]
        self.assertEqual(table, ["| rank | 0 | 1 | **2** | 3 |",  # rank 2, the one the check names, in bold
                                 "|---|---:|---:|---:|---:|",
                                 "| 0 | – | 18.2 | 15.4 | 18.9 |",
                                 "| 1 | 18.9 | – | 14.7 | 19.5 |",
                                 "| **2** | 15.5 | 14.7 | – | 18.7 |",
                                 "| 3 | 18.9 | 19.1 | 18.8 | – |"])
        self.assertIn('<tr><td><strong>2</strong></td><td class="r">15.5</td><td class="r">14.7</td>'
                      '<td class="r">–</td><td class="r">18.7</td></tr>', page)
        # no matrix in the report, no section
        v = validate_sample()
        del v["checks"][5]["values"]["matrix_GBps"]
        md, _ = self.render_validate(v, "nomatrix")
        self.assertNotIn("## Pair bandwidth", md)

    def test_incomplete_not_run_and_new_fields(self):
        v = validate_sample()
        v.update(verdict="incomplete", exit_status=3, baseline="results/baseline-epyc.json", future={"a": [1]},
                 expect={"nodes": "2", "device": "EPYC"},
                 rules=[{"name": "gemm_floor", "type": "min", "metric": "compute/gemm_gflops", "value": 100},
                        {"name": "any_of", "type": "k_of", "k": 2, "of": ["a", "b"]}])
        v["checks"][6].update(status="not_run", detail="timed out after 600 s", another="key")
        v["checks"].append({"name": "pairs/ragged", "status": "pass", "detail": "a <b> & c | d", "nodes": [],
                            "ranks": [], "values": {"matrix_GBps": [[0, "x"], [1.26]]}})
        v["checks"].append({"name": "pairs/bad", "status": "pass", "detail": "", "nodes": [], "ranks": [],
                            "values": {"matrix_GBps": "oops"}})
        v["nodes"][1]["violations"].append({"check": "rules/gemm_floor", "status": "fail", "detail": "below the floor",
                                            "rule": "gemm_floor", "metric": "compute/gemm_gflops", "value": 59.848,
                                            "reference": 100, "deviation": -0.40152, "values": {}, "new": None})
        v["nodes"][0]["extra"] = "ignored"
        v["inventory"][0]["gpu_uuid"] = "GPU-1"
        md, page = self.render_validate(v)
        self.assertTrue(md.startswith("# dtbench validate, level long: INCOMPLETE\n"), md[:80])
        self.assertIn("> **INCOMPLETE**: the validation did not finish; 1 of 2 nodes defective: `vm/node1`; 1 check not "
                      "run: `train/world` (exit status 3)", md)
        self.assertIn("expected: `nodes=2`, `device=EPYC`; baseline `results/baseline-epyc.json`;", md)
        self.assertIn("| not run | `train/world` | timed out after 600 s |", md)
        self.assertIn('<tr class="skip"><td>not run</td><td><code>train/world</code></td>', page)
        self.assertIn("9 checks: 2 fail, 1 warn, 4 pass, 1 skip, 1 not run.", md)
        self.assertIn("- **fail** `rules/gemm_floor`: below the floor (rule `gemm_floor`, metric "
                      "`compute/gemm_gflops`, value 59.85, reference 100, deviation -0.4015)", md)
        self.assertIn("| `gemm_floor` | min | metric: compute/gemm_gflops; value: 100 |", md)
        self.assertIn('| `any_of` | k_of | k: 2; of: ["a","b"] |', md)
        ragged = md[md.index("## Pair bandwidth: `pairs/ragged`"):]
        self.assertIn("| rank | 0 | 1 |\n|---|---:|---:|\n| 0 | – | – |\n| 1 | 1.3 | – |", ragged)
        self.assertIn("Its matrix_GBps is not an array of rows; not shown.", md[md.index("`pairs/bad`"):])
        self.assertIn("a <b> & c \\| d", md)  # a | in a cell escaped
        self.assertIn("a &lt;b&gt; &amp; c | d", page)
        self.assertNotIn("<b>", page)

    def test_accepted(self):
        v = validate_sample()
        v.update(verdict="accepted", exit_status=0, injected_fault=None, emulated_ranks_per_node=None)
        for c in v["checks"]:
            c["status"] = "pass" if c["status"] != "skip" else "skip"
            c["nodes"], c["ranks"] = [], []
        v["nodes"][1].update(accepted=True, violations=[])
        md, page = self.render_validate(v)
        self.assertTrue(md.startswith("# dtbench validate, level long: accepted\n"))
        self.assertIn("> **ACCEPTED**: all 2 nodes accepted (exit status 0)", md)
        self.assertIn('<div class="alert ok">', page)
        self.assertNotIn("DEFECTIVE", md)
        self.assertNotIn("fault injection", md)
        self.assertNotIn("emulated", md)
        self.assertIn("4 ranks on 2 nodes; levels run", md)

    def test_bad_validate_report(self):
        def write(name, v):
            path = self.tmp / name
            path.write_text(json.dumps(v))
            return path
        v = validate_sample()
        no_checks = {k: x for k, x in v.items() if k != "checks"}
        self.assert_bad([write("no-checks.json", no_checks)],
                        ["validate report", "no-checks.json", "not a complete `dtbench validate` report: no checks"])
        self.assert_bad([write("none.json", {"kind": "validate", "version": 1})], ["no checks, nodes"])
        self.assert_bad([write("no-nodes.json", {k: x for k, x in v.items() if k != "nodes"})], ["no nodes"])
        self.assert_bad([write("checks-obj.json", dict(v, checks={}))], ["'checks' must be a JSON array"])
        self.assert_bad([write("node-name.json", dict(v, nodes=[{"ranks": [0]}]))], ["nodes[0] has no node name"])
        self.assert_bad([write("status.json", dict(v, checks=[{"name": "x"}]))], ["check x has no status"])
        self.assert_bad([write("viol.json", dict(v, nodes=[{"node": "n", "violations": "many"}]))],
                        ["node n: 'violations' must be a JSON array"])
        good = write("good.json", v)
        self.assert_bad([good, "--claims", good], ["--trace and --claims go with a run report"])
        self.assertEqual(sorted(self.tmp.glob("*.md")) + sorted(self.tmp.glob("*.html")), [], "nothing written")


if __name__ == "__main__":
    unittest.main(verbosity=2)
