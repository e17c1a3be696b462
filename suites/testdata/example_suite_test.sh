#!/usr/bin/env bash
# ctest example_suite: docs/adding-a-suite.md's steps, followed. dtbench_example (dtbench with the
# test-only suite of example_suite.cc) runs it on 2 ranks; with this directory in DTB_SUITE_PATH the
# report validates against the assembled schema, report.py renders the suite's own table, and
# compare.py compares the report with itself (clean) and with a doctored copy (every time above every old
# one, at least tripled, and the rate cut to match: two regressions, since the suite's module says lower and higher is better). Without DTB_SUITE_PATH the product's
# schema refuses the record: the suite stays out of the product.
# Usage: example_suite_test.sh PATH/TO/dtbench_example PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
here=$(cd "$(dirname "$0")" && pwd)
scripts="$here/../../scripts"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dtbench" list >"$tmp/list.txt"
grep -q '^  example ' "$tmp/list.txt" || fail "dtbench_example list does not show the example suite"
printf '{"suites": ["example"], "example": {"n": 20000, "repetitions": 5}}' >"$tmp/example.json"
"$mpirun" -np 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 \
  "$dtbench" run --config "$tmp/example.json" --output-dir "$tmp/results" --run-id example >"$tmp/run.log" 2>&1 ||
  { cat "$tmp/run.log" >&2; fail "dtbench_example run exited $?"; }
report="$tmp/results/example.json"

export DTB_SUITE_PATH="$here"
"$py" "$scripts/validate_report.py" "$report" || fail "the report does not validate against the assembled schema"
if env -u DTB_SUITE_PATH "$py" "$scripts/validate_report.py" "$report" >"$tmp/product.txt"; then
  fail "the product's schema (without DTB_SUITE_PATH) accepts the example suite's report"
fi
grep -q 'example/sum/n:20000' "$tmp/product.txt" || fail "the product's schema refused something else: $(head -3 "$tmp/product.txt")"

"$py" "$scripts/report.py" "$report" --out-dir "$tmp/page" >"$tmp/render.log" 2>&1 ||
  { cat "$tmp/render.log" >&2; fail "report.py failed"; }
grep -q 'warning' "$tmp/render.log" && fail "report.py warned: $(cat "$tmp/render.log")"
md="$tmp/page/example.md"
grep -q '^## example$' "$md" || fail "no example section"
grep -q '^| case | n | time (us): median (min–max) | rate |$' "$md" || fail "not the example module's table"
grep -q '^| `sum/n:20000` | 20000 | ' "$md" || fail "no row for the record"

"$py" "$scripts/compare.py" "$report" "$report" >"$tmp/same.txt" || fail "the report does not compare clean with itself"
grep -q '^  items_per_s .* same$' "$tmp/same.txt" || fail "items_per_s is not read as a metric: $(cat "$tmp/same.txt")"
grep -q 'unknown field' "$tmp/same.txt" && fail "a field of the example suite is unknown to compare.py"
"$py" - "$report" "$tmp/slow.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
for b in r["benchmarks"]:
    # Each sample plus twice the slowest: every new time above every old one (doubling alone
    # overlaps when a loaded machine spreads 5 samples of a 40 us loop more than 2x).
    t = b["time_us"]
    s = [x + 2 * max(t["samples"]) for x in t["samples"]]
    t.update(samples=s, median=statistics.median(s), min=min(s), max=max(s), mean=statistics.fmean(s),
             stddev=statistics.stdev(s) if len(s) > 1 else 0.0)
    b["items_per_s"] *= b["real_time"] / t["median"]
    b["real_time"] = b["cpu_time"] = t["median"]
json.dump(r, open(sys.argv[2], "w"))
PY
set +e
"$py" "$scripts/compare.py" "$report" "$tmp/slow.json" >"$tmp/slow.txt"
rc=$?
set -e
[ "$rc" = 1 ] || fail "slowed times exit $rc, not 1: $(cat "$tmp/slow.txt")"
for m in 'time_us (median)' items_per_s; do
  grep -qF "REGRESSION example/sum/n:20000 $m:" "$tmp/slow.txt" || fail "no regression of $m: $(cat "$tmp/slow.txt")"
done
echo "example suite: ran, validated, rendered, compared"
