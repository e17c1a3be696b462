#!/usr/bin/env bash
# Every training path of the train suite reports the global gradient norm of each step
# (docs/config.md: "computed and reported every step, clipping or not") and checks it against the
# float64 oracle's (train/grad_norm/step:s, the conformance suite's tolerance): the plain
# data-parallel path (reference/training/trainer.h's train(): the default run's, DP 2 with grad_clip on, one
# rank at ZeRO 0) reported none; the sharded path (ZeRO 1) did. Also without the references
# (references: false: the norms reported, nothing to check them against).
# Usage: grad_norm_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model='"model": {"L": 1, "C": 32, "NH": 2, "T": 32, "V": 256}'
base='"steps": 20, "global_batch": 8, "micro_batches": 2, "seq_len": 32, "lr": 0.003'

# run NAME NP TRAIN_KEYS: the train suite on NP ranks (1: a singleton, no launcher).
run() {
  printf '{"suites": ["train"], %s, "train": {%s%s}}' "$model" "$base" "$3" >"$tmp/$1-config.json"
  local launch=()
  [ "$2" -gt 1 ] && launch=("$mpirun" -np "$2" --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1)
  "${launch[@]}" "$dtbench" run --config "$tmp/$1-config.json" --output-dir "$tmp" --run-id "$1" >"$tmp/$1.log" 2>&1 ||
    { echo "FAIL: $1 exited $?:"; tail -20 "$tmp/$1.log"; exit 1; }
  # The schema takes the norms on every path (it refused them without the references).
  /usr/bin/python3 "$here/../scripts/validate_report.py" "$tmp/$1.json" >"$tmp/$1.schema" 2>&1 ||
    { echo "FAIL: $1's report does not validate:"; tail -5 "$tmp/$1.schema"; exit 1; }
}
run clip_dp2 2 ', "grad_clip": 0.5'
run one_rank 1 ''
run zero1_dp2 2 ', "zero_stage": 1, "grad_clip": 0.5'
run norefs_dp2 2 ', "references": false'

python3 - "$tmp" <<'PY'
import json, math, os, sys
d = sys.argv[1]
def train(run_id):
    r = json.load(open(os.path.join(d, run_id + ".json")))
    t = [s for s in r["suites"] if s["name"] == "train"][0]
    return r, t
# (run id, record name: the path it took, whether the references ran, clipping)
cases = [("clip_dp2", "train/gpt/dp:2", True, 0.5), ("one_rank", "train/gpt/dp:1", True, 0),
         ("zero1_dp2", "train/gpt/tp:1/dp:2/pp:1/schedule:1f1b/zero:1", True, 0.5),
         ("norefs_dp2", "train/gpt/dp:2", False, 0)]
for run_id, record, refs, clip in cases:
    r, t = train(run_id)
    assert t["status"] == "passed", (run_id, t["status"], t.get("error"))
    assert [b["name"] for b in r["benchmarks"]] == [record], (run_id, [b["name"] for b in r["benchmarks"]])
    norms = t["data"].get("grad_norms")
    assert norms is not None and len(norms) == 20, (run_id, "grad_norms", norms)
    assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in norms), (run_id, norms)
    if clip:  # clipping was active: the norm it clipped by is above grad_clip at some step
        assert max(norms) > clip, (run_id, max(norms))
    checks = {c["name"]: c for c in r["checks"] if "/grad_norm/" in c["name"]}
    want = {f"train/grad_norm/step:{s}" for s in range(20)} if refs else set()
    assert set(checks) == want, (run_id, sorted(checks)[:3], len(checks))
    assert all(c["passed"] for c in checks.values()), (run_id, [c for c in checks.values() if not c["passed"]][:2])
    worst = max((c["value"] / c["tolerance"] for c in checks.values()), default=0)
    print(f"{run_id}: {record}, {len(norms)} norms ({norms[0]:.4f} .. {norms[-1]:.4f}), "
          f"{len(checks)} grad_norm checks passed, worst {worst:.3f} of its tolerance")
PY
