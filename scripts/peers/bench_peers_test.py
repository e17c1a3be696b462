#!/usr/bin/python3
"""ctest's bench_peers_check: `scripts/bench-peers --check` runs, prints its table and writes a
well-formed JSON report. Asserts the shape only, never a speed (a benchmark, not a timed test).
Usage: /usr/bin/python3 scripts/peers/bench_peers_test.py BUILD_DIR
"""
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def main():
    build = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peers.json"
        p = subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "bench-peers"), "--check", "--build-dir", build,
                            "--out", str(out)], capture_output=True, text=True, timeout=110)
        assert p.returncode == 0, p.stderr[-3000:]
        lines = p.stdout.strip().splitlines()
        assert lines[0].split("|")[1:-1] and [c.strip() for c in lines[0].split("|")[1:-1]] == \
            ["figure", "dtbench", "peer", "ratio", "target", "met"], lines[0]
        r = json.loads(out.read_text())
        assert r["kind"] == "bench-peers" and r["context"]["mode"] == "check", r["context"]
        assert len(r["table"]) == len(lines) - 2 >= 5, (len(r["table"]), lines)
        parts = {row["figure"].split()[0] for row in r["table"]}
        assert {"train", "all_reduce", "MatmulForward", "AdamW", "scaling"} <= parts, parts
        for row in r["table"]:
            assert set(row) == {"figure", "dtbench", "peer", "ratio", "target", "met"}, row
            # scaling: dtbench against itself, no peer; its GFLOP/s rows have no ratio either
            optional = ("peer", "ratio") if row["figure"].startswith("scaling ") else ()
            for k in ("dtbench", "peer", "ratio"):
                if row[k] is None and k in optional:
                    continue
                assert isinstance(row[k], (int, float)) and math.isfinite(row[k]), row
            assert row["met"] in (True, False, None), row
        check_scaling(r)
        print(f"bench-peers --check: {len(r['table'])} rows, report well-formed")


def positive(xs):
    return isinstance(xs, list) and xs and all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in xs)


def check_scaling(r):
    """The scaling part's rows and records: DP 1 and 2 and two model sizes in --check, sane
    values (positive times, shares in [0, 1]), never a speed."""
    rows = [row for row in r["table"] if row["figure"].startswith("scaling ")]
    assert all(row["peer"] is None and row["target"] == "-" and row["met"] is None for row in rows), rows
    for n in (1, 2):
        step, tps = (next(row for row in rows if f" dp:{n} " in row["figure"] and what in row["figure"])
                     for what in ("step ms", "tokens/s"))
        assert step["dtbench"] > 0 and 0 <= step["ratio"] <= 1, step  # step ms; comm share
        assert tps["dtbench"] > 0 and tps["ratio"] > 0, tps  # tokens/s; efficiency
    recs = [x for x in r["records"] if x.get("kind") == "scaling"]
    dp = {x["ranks"]: x for x in recs if x["scaling"] == "data_parallel"}
    assert sorted(dp) == [1, 2], sorted(dp)
    for n, x in dp.items():
        assert x["name"].startswith("scaling/") and x["global_batch"] == n * x["B_per_rank"], x
        assert x["tokens_per_step"] == x["global_batch"] * x["model"]["T"], x
        for k in ("step_ms", "tokens_per_s", "efficiency", "compute_ms"):
            assert positive(x[k]), (k, x)
        assert all(0 <= f <= 1 for f in x["comm_fraction"]) and all(c >= 0 for c in x["comm_ms"]), x
        assert 0 <= x["comm_fraction_median"] <= 1 and x["step_ms_median"] > 0, x
    assert dp[1]["efficiency"] == [1.0] * len(dp[1]["efficiency"]), dp[1]
    sizes = [x for x in recs if x["scaling"] == "model_size"]
    assert len(sizes) >= 2, sizes
    assert len({(x["model"]["L"], x["model"]["C"]) for x in sizes}) == len(sizes), sizes
    base = next(x for x in sizes if x["model"] == x["base_model"])
    assert base["flops_ratio_to_base"] == 1, base
    for x in sizes:
        assert x["num_params"] > 0 and x["model_flops_per_step"] > 0 and x["model_GFLOPs"] > 0, x
        m = x["model"]
        assert math.isclose(x["model_flops_per_token"], 6 * x["num_params"] + 12 * m["L"] * m["C"] * m["T"]), x
        for k in ("step_ms", "time_per_flops_ratio_to_base"):
            assert positive(x[k]), (k, x)


if __name__ == "__main__":
    main()
