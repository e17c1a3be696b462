#!/usr/bin/env bash
# The conformance suite's FP8 rows (suites/conformance.cc `fp8`, docs/fp8.md) on 2 ranks, in the
# contract's regime (3 steps, the parameters held): each recipe on TP2:sp (a split sum before a
# quantization: the flip bound), PP2 and DP2 (every quantized operand the twin's), CP2 (the
# attention's merge), each against its one-rank twin within the FP8 layout contract, the delayed
# recipe's amax histories too, replicas bitwise; what a recipe cannot run skipped with its reason
# (the blockwise recipe's 128-wide tiles on this 64-wide model, MXFP8's 32-token blocks and the
# current recipe under CP: the layout rule; the current recipe under TP: the contract's amax
# cascade); every check passed. Its refusals, one line and exit 2 each: a recipe listed twice, a
# recipe that no listed layout runs, a key of another recipe. The report validates against the schema.
# Usage: conformance_fp8_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/cfg.json" <<'JSON'
{"suites": ["conformance"],
 "conformance": {"steps": 6, "precisions": ["fp32"], "layouts": ["TP2:sp", "PP2", "DP2", "CP2", "TP4"],
                 "fp8": [{"recipe": "delayed", "amax_history_len": 4}, {"recipe": "current"}, {"recipe": "blockwise"},
                         {"recipe": "mxfp8"}]}}
JSON
"$mpirun" -np 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" run --config "$tmp/cfg.json" \
  --output-dir "$tmp" --run-id fp8 >"$tmp/fp8.log" 2>&1 || { cat "$tmp/fp8.log"; exit 1; }
python3 - "$tmp/fp8.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = [s for s in r["suites"] if s["name"] == "conformance"][0]
assert s["status"] == "passed", s
rows = {b["name"]: b for b in r["benchmarks"]}
ran = {"TP2:sp": ["delayed", "mxfp8"], "PP2": ["delayed", "current", "blockwise", "mxfp8"],
       "DP2": ["delayed", "current", "mxfp8"], "CP2": ["delayed"]}
names = [c["name"] for c in r["checks"]]
for layout, recipes in ran.items():
    for k in recipes:
        b = rows[f"conformance/{layout}:fp8:{k}"]
        assert b["precision"] == "fp8" and b["fp8_recipe"] == k and b["checks_failed"] == 0, b
        p = f"conformance/{layout}:fp8:{k}/"
        want = ["fp8_vs_twin/grads/step:0", "replicas_identical/params"] + [f"fp8_vs_twin/loss/step:{i}" for i in range(3)]
        if k == "delayed":
            want += ["fp8_vs_twin/amax_history/weight"] + ([] if layout in ("TP2:sp", "CP2") else ["fp8_vs_twin/amax_history/activations"])
        for c in want:
            assert p + c in names, (layout, k, c)
        assert p + "fp8_vs_twin/loss/step:3" not in names, (layout, k)  # 3 steps: the contract's regime
skipped = {x["layout"]: x for x in s["data"]["skipped"]}
for layout, k in [("TP2:sp", "blockwise"), ("DP2", "blockwise"), ("CP2", "current"), ("CP2", "mxfp8"),
                  ("CP2", "blockwise"), ("TP2:sp", "current")]:
    assert f"conformance/{layout}:fp8:{k}" not in rows, (layout, k)
    assert f"fp8 recipe {k}" in skipped[f"{layout}:fp8:{k}"]["reason"], skipped[f"{layout}:fp8:{k}"]
assert "no bound covers that cascade" in skipped["TP2:sp:fp8:current"]["reason"], skipped["TP2:sp:fp8:current"]
assert skipped["TP4:fp8:delayed"]["needs_ranks"] == 4
assert all(c["passed"] for c in r["checks"]), [c for c in r["checks"] if not c["passed"]]
fp8_checks = [c for c in r["checks"] if ":fp8:" in c["name"]]
print(f"conformance fp8 rows ok: {sum(map(len, ran.values()))} layout runs, {len(fp8_checks)} fp8 checks passed")
PY
# The report against the report schema (the FP8 rows' fields, suites/conformance.schema.json).
/usr/bin/python3 "$(dirname "$0")/../scripts/validate_report.py" "$tmp/fp8.json"
. "$(dirname "$0")/refuse_lib.sh"
refuse "conformance.fp8[1]: recipe mxfp8 is listed twice (conformance.fp8[0])" \
  '{"suites": ["conformance"], "conformance": {"layouts": ["PP2"], "fp8": [{"recipe": "mxfp8"}, {"recipe": "mxfp8"}]}}'
refuse "conformance.fp8[0]: recipe blockwise runs on none of the layouts that fit 1 rank(s) (conformance.fp8[0] on 'DP1': fp8 recipe blockwise: the tokens of a micro-batch on one rank (the wgrad's reduction) = 64" \
  '{"suites": ["conformance"], "conformance": {"seq_len": 16, "layouts": ["DP1", "TP2"], "fp8": [{"recipe": "blockwise"}]}}'
refuse "conformance.fp8[0].margin: belongs to the delayed recipe" \
  '{"suites": ["conformance"], "conformance": {"layouts": ["PP2"], "fp8": [{"recipe": "current", "margin": 1}]}}'
exit "$fails"
