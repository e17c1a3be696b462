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
# Llama 3 405B on 16384 H100s at its 8K phase and at 131072 tokens (no mpirun: the plan is a
# model): Meta's published layouts (Dubey et al. 2024 Table 4: TP8 CP1 PP16 DP128; TP8 CP16 PP16
# DP8) are among the candidates, each ranked, on Meta's split of 126 layers (7 + 14 x 8 + 7) at
# Meta's batch (16M tokens: 2048 sequences of 8192, 128 of 131072, i.e. 16 per DP rank as
# published), in seconds (docs/plan.md: the time measured).
for seq in 8192 131072; do
  start=$(date +%s%N)
  "$dtbench" plan --model llama3-405b --gpus 16384 --hardware h100-sxm --seq "$seq" --top 3 --json \
    >"$tmp/l405_$seq.json" 2>"$tmp/l405_$seq.err" ||
    { echo "FAIL: plan llama3-405b --seq $seq:"; cat "$tmp/l405_$seq.err"; exit 1; }
  secs=$(( ($(date +%s%N) - start) / 1000000 ))e-3
  python3 - "$tmp/l405_$seq.json" "$seq" "$secs" <<'PY'
import json, sys
p, seq, secs = json.load(open(sys.argv[1])), int(sys.argv[2]), float(sys.argv[3])
cp, dp = (1, 128) if seq == 8192 else (16, 8)
assert p["request"]["seq_len"] == seq and p["request"]["global_batch"] == (16 << 20) // seq, p["request"]
pub = p["published"]
assert len(pub) == 1 and (pub[0]["tp"], pub[0]["cp"], pub[0]["pp"], pub[0]["dp"]) == (8, cp, 16, dp), pub
q = pub[0]
assert q["batch_matches"] and q["published_mfu"] == (0.41 if seq == 8192 else 0.38), q
assert 1 <= q["rank"] <= q["feasible_layouts"] == p["feasible"], q
assert q["candidate"].startswith(f"TP8x{'CP16x' if cp > 1 else ''}PP16xDP{dp}:layers7+" + "8+" * 14 + "7"), q["candidate"]
assert 0 < q["mfu"] < 1 and q["step_s"] > 0, q
best = p["layouts"][0]["step_s"]
assert q["step_s"] >= best, (q["step_s"], best)
assert secs < 60, f"the plan took {secs:.1f} s"
print(f"plan llama3-405b --gpus 16384 --seq {seq}: Meta's {q['layout']} ranks #{q['rank']} of {q['feasible_layouts']} "
      f"({q['candidate']}: {q['step_s']:.3g} s, MFU {100 * q['mfu']:.1f} % vs published {100 * q['published_mfu']:.0f} %), "
      f"{p['candidates']} candidates in {secs:.1f} s")
PY
done
# --stack: an unknown stack is refused with the known ones (one line, exit 2); a known one is named
# in the header with its settings.
rc=0
"$dtbench" plan --model gpt3-175b --gpus 96 --hardware a100-80gb --tp 8 --pp 12 --stack deepspeed >"$tmp/out6" 2>"$tmp/err6" || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err6")" -eq 1 ] &&
  grep -q -- "--stack deepspeed: not a known stack (dtbench, megatron-2021, megatron-core, fsdp2, deepspeed-zero3-2021)" "$tmp/err6" ||
  { echo "FAIL: --stack deepspeed exited $rc:"; cat "$tmp/err6"; exit 1; }
"$dtbench" plan --model gpt3-175b --gpus 96 --hardware a100-80gb --tp 8 --pp 12 --stack megatron-core --top 1 >"$tmp/out7" ||
  { echo "FAIL: --stack megatron-core"; exit 1; }
grep -q "^stack     megatron-core: overlap grad reduce behind the backward" "$tmp/out7" ||
  { echo "FAIL: the header does not name the stack:"; cat "$tmp/out7"; exit 1; }
echo "plan --stack: deepspeed refused (exit 2), megatron-core named in the header"
