#!/usr/bin/env bash
# dtbench validate on 4 ranks grouped as 2 emulated nodes: levels quick, medium and long, the
# test-only fault injection (one rank's compute, then its transfers, slowed 2x) and baselines.
# Timing-based: ctest runs it alone (RUN_SERIAL), as a neighbour test on the same 2 cores could
# slow one rank's measurement enough to pass for a fault.
# Usage: validate_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# dtbench validate --level quick on 4 ranks as 2 emulated nodes: accepted with matching
# expectations (exit 0); a device nobody has, or a node size nobody has, makes every node
# defective (exit 1), named in the report with the rule's detail.
"$mpirun" -np 4 --oversubscribe --bind-to none "$dtbench" validate --ranks-per-node 2 \
  --expect nodes=2,ranks_per_node=2,cores=1 --output "$tmp/validate_ok.json" >"$tmp/validate.log" 2>&1 ||
  { echo "FAIL: validate with matching expectations:"; cat "$tmp/validate.log"; exit 1; }
rc=0
"$mpirun" -np 4 --oversubscribe --bind-to none "$dtbench" validate --ranks-per-node 2 \
  --expect device=no-such-device --output "$tmp/validate_bad.json" >"$tmp/validate_bad.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: validate with a device nobody has exited $rc, not 1:"; cat "$tmp/validate_bad.log"; exit 1; }
python3 - "$tmp/validate_ok.json" "$tmp/validate_bad.json" <<'PY'
import json, sys
ok, bad = (json.load(open(p)) for p in sys.argv[1:3])
assert ok["kind"] == "validate" and ok["verdict"] == "accepted" and ok["exit_status"] == 0, ok["verdict"]
assert [n["node"].rsplit("/", 1)[1] for n in ok["nodes"]] == ["node0", "node1"], ok["nodes"]
assert [n["ranks"] for n in ok["nodes"]] == [[0, 1], [2, 3]] and all(n["accepted"] for n in ok["nodes"])
assert {c["name"]: c["status"] for c in ok["checks"]}["expect/nodes"] == "pass"
assert len(ok["inventory"]) == 4 and all(r["cores"] >= 1 and r["memory_bytes"] > 0 for r in ok["inventory"])
assert bad["verdict"] == "defective" and bad["exit_status"] == 1
dev = [c for c in bad["checks"] if c["name"] == "expect/device"][0]
assert dev["status"] == "fail" and dev["ranks"] == [0, 1, 2, 3], dev
for n in bad["nodes"]:
    assert not n["accepted"] and n["violations"][0]["check"] == "expect/device", n
    assert "expected 'no-such-device'" in n["violations"][0]["detail"], n
print("validate quick ok: 2 emulated nodes accepted, then both defective on a device expectation")
PY

# clean_then_slowed LEVEL FAULT TAG: validate at LEVEL clean (must exit 0) and with the test-only
# --inject FAULT (must exit 1), writing $tmp/TAG_clean.json and $tmp/TAG_slow.json. Tolerance
# 0.4: a 2x slower rank is 50% below the median, and a clean rank on this oversubscribed
# machine stays well within 40% of it when no other test runs (RUN_SERIAL).
clean_then_slowed() {
  local level="$1" fault="$2" tag="$3" rc=0
  "$mpirun" -np 4 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" validate --level "$level" \
    --ranks-per-node 2 --tolerance 0.4 --output "$tmp/${tag}_clean.json" >"$tmp/${tag}_clean.log" 2>&1 ||
    { echo "FAIL: validate $level, clean:"; cat "$tmp/${tag}_clean.log"; exit 1; }
  "$mpirun" -np 4 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" validate --level "$level" \
    --ranks-per-node 2 --tolerance 0.4 --inject "$fault" --output "$tmp/${tag}_slow.json" >"$tmp/${tag}_slow.log" 2>&1 ||
    rc=$?
  [ "$rc" -eq 1 ] || { echo "FAIL: validate $level --inject $fault exited $rc, not 1:"; cat "$tmp/${tag}_slow.log"; exit 1; }
}

# Level medium: each rank's GEMM and triad against the fleet median. Clean, both emulated nodes
# are accepted; with rank 3's compute slowed 2x, node 1 is defective, naming rank 3, the metric
# and the rule, and node 0 stays accepted.
clean_then_slowed medium 3:compute:2 medium
python3 - "$tmp/medium_clean.json" "$tmp/medium_slow.json" <<'PY'
import json, sys
ok, slow = (json.load(open(p)) for p in sys.argv[1:3])
assert ok["verdict"] == "accepted" and ok["levels_run"] == ["quick", "medium"], ok["verdict"]
g = [c for c in ok["checks"] if c["name"] == "compute/gemm_gflops"][0]
assert g["status"] in ("pass", "warn") and g["values"]["median"] > 0, g
assert slow["verdict"] == "defective" and slow["injected_fault"] == "3:compute:2"
n0, n1 = slow["nodes"]
assert n0["accepted"] and not n1["accepted"], slow["nodes"]
v = [x for x in n1["violations"] if x["check"] == "compute/gemm_gflops"][0]
assert v["status"] == "fail" and "rank 3 " in v["detail"] and "below the median" in v["detail"], v
print("validate medium ok: clean accepted; rank 3 slowed 2x ->", v["detail"])
PY

# Level long: every pair's send/recv bandwidth (round-robin), each rank's median over its
# partners against the fleet median. Clean, both nodes are accepted; with rank 3's transfers
# slowed 2x, node 1 alone is defective, the pair check naming rank 3.
clean_then_slowed long 3:comm:2 long
python3 - "$tmp/long_clean.json" "$tmp/long_slow.json" <<'PY'
import json, sys
ok, slow = (json.load(open(p)) for p in sys.argv[1:3])
assert ok["verdict"] == "accepted" and ok["levels_run"] == ["quick", "medium", "long"], ok["verdict"]
pairs = [c for c in ok["checks"] if c["name"] == "pairs/sendrecv_GBps"][0]
m = pairs["values"]["matrix_GBps"]
assert len(m) == 4 and all(m[i][j] > 0 for i in range(4) for j in range(4) if i != j), m
assert all(abs(m[i][j] - m[j][i]) <= 0.5 * max(m[i][j], m[j][i]) for i in range(4) for j in range(4)), m
n0, n1 = slow["nodes"]
assert n0["accepted"] and not n1["accepted"], slow["nodes"]
v = [x for x in n1["violations"] if x["check"] == "pairs/sendrecv_GBps"][0]
assert v["status"] == "fail" and "rank 3 " in v["detail"] and "rank 2 " not in v["detail"], v
print("validate long ok: clean accepted; rank 3's transfers slowed 2x ->", v["detail"])
PY

# Baselines: --make-baseline from a clean long run writes one value per metric; a quick run
# judged against it lacks those metrics, and a missing metric fails the run (exit 1), not passes.
"$mpirun" -np 4 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" validate --level long \
  --ranks-per-node 2 --tolerance 0.4 --make-baseline "$tmp/baseline.json" --output "$tmp/validate_b0.json" \
  >"$tmp/validate_b0.log" 2>&1 || { echo "FAIL: validate --make-baseline:"; cat "$tmp/validate_b0.log"; exit 1; }
rc=0
"$mpirun" -np 4 --oversubscribe --bind-to none "$dtbench" validate --ranks-per-node 2 --baseline "$tmp/baseline.json" \
  --output "$tmp/validate_b1.json" >"$tmp/validate_b1.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: validate quick against a long baseline exited $rc, not 1:"; cat "$tmp/validate_b1.log"; exit 1; }
python3 - "$tmp/baseline.json" "$tmp/validate_b1.json" <<'PY'
import json, sys
base, run = (json.load(open(p)) for p in sys.argv[1:3])
assert base["kind"] == "validate-baseline" and sorted(base["metrics"]) == \
    ["compute/gemm_gflops", "compute/triad_GBps", "pairs/sendrecv_GBps"], base
assert all(m["value"] > 0 for m in base["metrics"].values()), base
missing = [c for c in run["checks"] if c["name"].startswith("baseline/") and c["status"] == "fail"]
assert len(missing) == 3 and all("missing" in c["detail"] for c in missing), missing
assert run["verdict"] == "defective" and run["exit_status"] == 1
print("validate baseline ok: 3 metrics; a run missing them fails")
PY
