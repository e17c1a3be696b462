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
        assert {"train", "all_reduce", "MatmulForward", "AdamW"} <= parts, parts
        for row in r["table"]:
            assert set(row) == {"figure", "dtbench", "peer", "ratio", "target", "met"}, row
            for k in ("dtbench", "peer", "ratio"):
                assert isinstance(row[k], (int, float)) and math.isfinite(row[k]), row
            assert row["met"] in (True, False, None), row
        print(f"bench-peers --check: {len(r['table'])} rows, report well-formed")


if __name__ == "__main__":
    main()
