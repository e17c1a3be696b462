#!/usr/bin/env bash
# dtbench plan --calibrate on 2 ranks: the machine's hardware file written, read back by the
# plan that follows on it (every layout of a small GPT on 2 ranks ranked), and by a second plan
# given it as --hardware; the file's facts (one node of 2 ranks, ranks per core, its sources).
# Usage: plan_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
small=(--layers 2 --hidden 64 --heads 4 --vocab 256 --seq 64 --global-batch 8 --precision fp32 --top 100)
"$mpirun" -np 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" plan --calibrate "$tmp/hw.json" \
  --gpus 2 "${small[@]}" --json >"$tmp/plan1.json" 2>"$tmp/err1" ||
  { echo "FAIL: plan --calibrate:"; cat "$tmp/err1"; exit 1; }
"$dtbench" plan --hardware "$tmp/hw.json" --gpus 2 "${small[@]}" --json >"$tmp/plan2.json" 2>"$tmp/err2" ||
  { echo "FAIL: plan on the calibrated file:"; cat "$tmp/err2"; exit 1; }
python3 - "$tmp/hw.json" "$tmp/plan1.json" "$tmp/plan2.json" <<'PY'
import json, sys
hw, p1, p2 = (json.load(open(p)) for p in sys.argv[1:4])
assert hw["ranks_per_node"] == 2 and hw["name"].startswith("calibrated-"), hw["name"]
assert [c["group"] for c in hw["collectives"]] == [2] and hw["collectives"][0]["busbw_gb_per_s"] > 0
assert hw.get("ranks_per_core", 1) >= 1 and hw["host_pass"]["g_elements_per_s"] > 0
assert all(hw["gemm"][p]["tflops"] > 0 and hw["peak_tflops"][p] >= hw["gemm"][p]["tflops"] for p in ("fp32", "bf16", "fp16"))
assert set(hw["sources"]) >= {"gemm", "memory", "collectives", "peak_tflops", "device_memory_gib"}
names = [c["layout"] for c in p1["layouts"]]
assert "DP2" in names and "TP2" in names and "PP2" in names, names
assert p1["layouts"] == p2["layouts"], "the plan on the written file differs from the one after calibrating"
assert all(c["step_s"] > 0 and 0 < c["mfu"] < 1 for c in p1["layouts"]), p1["layouts"][0]
print(f"plan --calibrate ok: {len(names)} layouts of the small GPT on 2 calibrated ranks, best {names[0]}")
PY
# A path rank 0 cannot write ends the whole 2-rank job (no rank left waiting), one line, exit 2;
# a calibrated file of one node plans no more GPUs than it has.
rc=0
timeout 60 "$mpirun" -np 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" plan \
  --calibrate "$tmp/no/such/dir/hw.json" >"$tmp/out4" 2>"$tmp/err4" || rc=$?
[ "$rc" -eq 2 ] && grep -q "hardware file $tmp/no/such/dir/hw.json: cannot write" "$tmp/err4" ||
  { echo "FAIL: plan --calibrate to an unwritable path exited $rc (124: a hang):"; cat "$tmp/err4"; exit 1; }
rc=0
"$dtbench" plan --hardware "$tmp/hw.json" --gpus 4 "${small[@]}" >"$tmp/out5" 2>"$tmp/err5" || rc=$?
[ "$rc" -eq 2 ] && grep -q "has no inter-node collective fit: it plans one node of ranks_per_node = 2 GPUs at most" "$tmp/err5" ||
  { echo "FAIL: a 2-rank calibration planned 4 GPUs, exit $rc:"; cat "$tmp/err5"; exit 1; }
echo "plan --calibrate to an unwritable path: exit 2 on both ranks; --gpus 4 on a 2-rank file refused"
# One rank has no collective to fit: refused, one line, exit 2.
rc=0
"$dtbench" plan --calibrate "$tmp/one.json" >"$tmp/out3" 2>"$tmp/err3" || rc=$?
[ "$rc" -eq 2 ] && grep -q "needs 2 or more ranks" "$tmp/err3" ||
  { echo "FAIL: plan --calibrate on one rank exited $rc:"; cat "$tmp/err3"; exit 1; }
echo "plan --calibrate on one rank refused (exit 2)"
