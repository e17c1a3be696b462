#!/usr/bin/env bash
# dtbench plan --validate on the shipped published set (harness/plan_validation.json): the step
# times derived again from each row's published figure (Narayanan et al. 2021 Eq. 3), the errors,
# MAPE, max and worst rows recomputed from the rows and held against the command's, every run's
# layout accepted by the memory model, the bounds; every plan's model-error line equal to it; bad
# input refused with one line and exit 2.
# Usage: plan_validate_test.sh PATH/TO/dtbench
set -euo pipefail
dtbench="$1"
src="$(cd "$(dirname "$0")/.." && pwd)"
set_file="$src/harness/plan_validation.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dtbench" plan --validate "$set_file" --json >"$tmp/v.json" 2>"$tmp/err" ||
  { echo "FAIL: plan --validate:"; cat "$tmp/err"; exit 1; }
"$dtbench" plan --validate "$set_file" >"$tmp/v.txt" 2>"$tmp/err" ||
  { echo "FAIL: plan --validate (text):"; cat "$tmp/err"; exit 1; }
start=$(date +%s%N)
"$dtbench" plan --model 10b --gpus 8 --hardware a100-40gb --top 3 --json >"$tmp/plan.json" 2>"$tmp/err" ||
  { echo "FAIL: plan:"; cat "$tmp/err"; exit 1; }
secs=$(( ($(date +%s%N) - start) / 1000000 ))e-3
"$dtbench" plan --model 10b --gpus 8 --hardware a100-40gb --top 3 >"$tmp/plan.txt"
python3 - "$set_file" "$tmp/v.json" "$tmp/v.txt" "$tmp/plan.json" "$tmp/plan.txt" "$secs" <<'PY'
import json, sys
# Issue 45's target is MAPE <= 10 % and no row off by more than 25 %, and every published
# comparison agreeing. Today's model (2026-12-07; docs/plan.md#the-published-set): MAPE 7.3 %, max
# 19.1 % (narayanan2021-table2-zero3-174.6b-1536), 8 of the 9 comparisons (Fig. 16's micro-batch
# 2 over 1 not). The MAPE bound is the target; the maximum's is today's rounded up by less than
# one point (inside the target), and the comparisons may not agree less than today (ratchets).
TARGET_MAPE, TARGET_MAX = 0.10, 0.25
BOUND_MAPE, BOUND_MAX, MIN_AGREE = TARGET_MAPE, 0.20, 8
data, v = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
text, plan, plan_text, secs = open(sys.argv[3]).read(), json.load(open(sys.argv[4])), open(sys.argv[5]).read(), float(sys.argv[6])
rows = {r["id"]: r for r in data["rows"]}
assert [r["id"] for r in v["rows"]] == list(rows), "the command's rows are not the file's"
errors = []
for out in v["rows"]:
    r = rows[out["id"]]
    m = r["model"]
    if r["flop_convention"] == "narayanan2021_eq3":  # Eq. 3, B s l h^2 with V = 51200
        B, s, l, h, V = r["global_batch"], r["seq_len"], m["L"], m["C"], m["V"]
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        step = flops / (r["gpus"] * r["published"] * 1e12)
        assert abs(out["predicted_tflops_per_gpu"] - flops / (r["gpus"] * out["predicted_step_s"] * 1e12)) < 1e-6 * out["predicted_tflops_per_gpu"], out
    else:
        step = r["published"]
    assert abs(step / r["step_s"] - 1) < 1e-3 and abs(out["step_s"] - r["step_s"]) < 1e-12, (out["id"], step, r["step_s"])
    e = out["predicted_step_s"] / r["step_s"] - 1  # the derived step the file stores (checked above)
    assert abs(e - out["error"]) < 1e-9, (out["id"], e, out["error"])
    assert out["memory_ok"] and out["device_bytes"] > 0, f"{out['id']}: the memory model does not accept {out['layout']}: {out['device_bytes'] / 2**30:.1f} GiB {out['memory_refused']}"
    errors.append((abs(e), out["id"], e))
mape = sum(a for a, _, _ in errors) / len(errors)
worst = sorted(errors, key=lambda x: -x[0])
assert abs(mape - v["mape"]) < 1e-9 and abs(worst[0][0] - v["max_abs_error"]) < 1e-9, (mape, v["mape"])
assert [w["id"] for w in v["worst"]] == [w[1] for w in worst[:3]], v["worst"]
assert f"MAPE {100 * mape:.1f} %" in text, "the text report's MAPE differs"
for c in v["comparisons"]:
    if c["kind"] == "best":
        fastest = min(c["candidates"], key=lambda k: k["predicted_step_s"])["label"]
        assert c["predicted_winner"] == fastest and c["agree"] == (fastest == c["published_winner"]), c
    else:
        assert c["agree"] == (abs(c["predicted_factor"] / c["published_factor"] - 1) <= c["tolerance"]), c
e = plan["model_error"]
assert e["rows"] == len(rows) and abs(e["mape"] - mape) < 1e-9 and e["worst"]["id"] == worst[0][1], e
assert f"MAPE {100 * mape:.1f} %" in plan_text and "published set" in plan_text, "the plan's text lacks the model's error"
agree = sum(c["agree"] for c in v["comparisons"])
print(f"plan --validate: {len(rows)} rows, MAPE {100 * mape:.1f} % (bound {100 * BOUND_MAPE:.0f} %, target "
      f"{100 * TARGET_MAPE:.0f} %), max {100 * worst[0][0]:.1f} % ({worst[0][1]}; bound {100 * BOUND_MAX:.0f} %, target "
      f"{100 * TARGET_MAX:.0f} %); comparisons agreeing {agree} of {len(v['comparisons'])}; plan with the line in {secs:.2f} s, "
      f"the line itself {e['seconds']:.3f} s")
assert mape <= BOUND_MAPE, f"MAPE {mape:.3f} > {BOUND_MAPE}"
assert worst[0][0] <= BOUND_MAX, f"max |error| {worst[0][0]:.3f} > {BOUND_MAX} ({worst[0][1]})"
assert agree >= MIN_AGREE, f"{agree} comparisons agree, fewer than {MIN_AGREE}"
PY
# Bad input: one line naming it, exit 2.
python3 - "$set_file" "$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["rows"][3]["publishd"] = d["rows"][3].pop("published")
json.dump(d, open(sys.argv[2] + "/bad.json", "w"))
open(sys.argv[2] + "/dup.json", "w").write('{"rows": [], "rows": []}')
PY
check() {  # FILE EXPECTED-TEXT
  local rc=0
  "$dtbench" plan --validate "$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "$2" "$tmp/err" ||
    { echo "FAIL: plan --validate $1 exited $rc, expected 2 and '$2':"; cat "$tmp/err"; exit 1; }
}
check "$tmp/bad.json" "rows[3].publishd: unknown key (did you mean published?)"
check "$tmp/dup.json" "appears twice"
check "$tmp/none.json" "not found or unreadable"
rc=0
"$dtbench" plan --validate "$set_file" --gpus 8 >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 2 ] && grep -qF -- "--validate FILE takes no plan option" "$tmp/err" ||
  { echo "FAIL: --validate with --gpus exited $rc"; cat "$tmp/err"; exit 1; }
echo "plan --validate: a misspelt key, a duplicated key, a missing file, a plan option beside it: exit 2"
