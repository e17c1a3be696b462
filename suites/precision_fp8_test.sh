#!/usr/bin/env bash
# The precision suite's FP8 rows (suites/precision.cc, docs/fp8.md) on 2 ranks, 8 steps: one row per
# recipe with its loss gap to bf16, the census of every operand class (values counted, none of the
# per-tensor-current, blockwise or MXFP8 recipes' clamped), the delayed recipe's scales per step,
# every check passed; and its refusals, one line and exit 2 each: a recipe listed twice, a key of
# another recipe, a blockwise tile straddling a micro-batch's tokens.
# Usage: precision_fp8_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"suites": ["precision"], "precision": {"steps": 8, "repetitions": 1, "overflow_loss_scale_init": 131072}}' \
  >"$tmp/fp8_cfg.json"
"$mpirun" -np 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" run --config "$tmp/fp8_cfg.json" \
  --output-dir "$tmp" --run-id fp8 >"$tmp/fp8.log" 2>&1 || { cat "$tmp/fp8.log"; exit 1; }
python3 - "$tmp/fp8.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = [s for s in r["suites"] if s["name"] == "precision"][0]
assert s["status"] == "passed", s
rows = {b["name"]: b for b in r["benchmarks"]}
recipes = ["delayed", "current", "blockwise", "mxfp8"]
for k in recipes:
    b = rows["precision/fp8/" + k]
    assert b["precision"] == "fp8" and b["fp8_recipe"] == k and b["fp8"]["recipe"] == k, b["fp8"]
    assert len(b["losses"]) == 8 and "tail_mean_loss_gap_to_bf16" in b and b["tail_mean_loss_gap_se"] >= 0
    for role in ["input", "weight", "grad_output"]:
        c = b["fp8_census"][role]
        assert c["values"] > 0 and c["flushed_share"] == c["flushed"] / (c["values"] - c["zeros"]), (k, role, c)
        if k != "delayed":
            assert c["saturated"] == 0, (k, role, c)
    if k == "delayed":
        assert all(len(b["fp8_scales"][role]) == 8 for role in ["input", "weight", "grad_output"]), b["fp8_scales"]
        # Its step 0 quantizes at the initial scale 1 (Transformer Engine's): small output gradients flush.
        assert b["fp8_census"]["grad_output"]["flushed"] > 0, b["fp8_census"]
    else:
        assert "fp8_scales" not in b
names = [c["name"] for c in r["checks"]]
for k in recipes:
    for c in ["loss_vs_bf16/step:0", "loss_vs_bf16/tail_mean", "model_state_bytes"]:
        assert f"precision/fp8/{k}/{c}" in names, (k, c)
    assert (f"precision/fp8/{k}/saturated/weight" in names) == (k != "delayed")
assert all(c["passed"] for c in r["checks"]), [c for c in r["checks"] if not c["passed"]]
print(f"precision fp8 rows ok: {len(recipes)} recipes, {len(r['checks'])} checks passed")
PY
. "$(dirname "$0")/refuse_lib.sh"
refuse "precision.fp8[1]: recipe mxfp8 is listed twice (precision.fp8[0])" \
  '{"suites": ["precision"], "precision": {"fp8": [{"recipe": "mxfp8"}, {"recipe": "mxfp8"}]}}'
refuse "precision.fp8[0].margin: belongs to the delayed recipe" \
  '{"suites": ["precision"], "precision": {"fp8": [{"recipe": "mxfp8", "margin": 2}]}}'
refuse "precision.fp8[0]: fp8 recipe blockwise: the tokens of a micro-batch on one rank (the wgrad's reduction) = 64" \
  '{"suites": ["precision"], "precision": {"seq_len": 32, "fp8": [{"recipe": "blockwise"}]}}'
exit "$fails"
