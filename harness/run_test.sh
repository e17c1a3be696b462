#!/usr/bin/env bash
# End to end: `dtbench run --config smoke` on 4 ranks writes a report with the shape
# README.md gives, every suite passed, the all-reduce bus factor 1.5 and no wrong element.
# Usage: run_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$mpirun" -np 4 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 \
  "$dtbench" run --config smoke --output-dir "$tmp" --run-id smoke-test
python3 - "$tmp" <<'PY'
import json, math, os, sys
d = sys.argv[1]
r = json.load(open(os.path.join(d, "smoke-test.json")))
assert json.load(open(os.path.join(d, "latest.json"))) == r, "latest.json differs from the run's report"
for key in ("schema_version", "context", "benchmarks", "suites", "checks"):
    assert key in r, f"report lacks {key}"
ctx = r["context"]
assert ctx["world_size"] == 4, ctx["world_size"]
assert len(ctx["dataset"]["sha256"]) == 64 and ctx["dataset"]["bytes"] > 0
status = {s["name"]: s["status"] for s in r["suites"]}
assert status == {"collectives": "passed", "train": "passed"}, status
ar = [b for b in r["benchmarks"] if b.get("op") == "all_reduce"]
assert ar, "no all_reduce records"
for b in ar:
    assert b["n_wrong"] == 0, b["name"]
    assert math.isclose(b["busbw_GBps"] / b["algbw_GBps"], 1.5, rel_tol=1e-12), b["name"]
for b in r["benchmarks"]:
    for k in ("name", "run_type", "repetitions", "iterations", "real_time", "cpu_time", "time_unit"):
        assert k in b, f"{b['name']} lacks {k}"
assert r["checks"] and all(c["passed"] for c in r["checks"]), [c for c in r["checks"] if not c["passed"]]
print(f"report ok: {len(r['benchmarks'])} records, {len(r['checks'])} checks passed")
PY
