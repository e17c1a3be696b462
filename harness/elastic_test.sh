#!/usr/bin/env bash
# Elastic restart (scripts/run --elastic, scripts/elastic.py): a 4-rank training job that
# saves checkpoints loses rank 2 (SIGKILL) after its first checkpoint; the launcher names the
# rank, restarts on the ranks that run the config (2: the batch of 16 in 2 micro-batches does
# not divide over 3), resumes from the newest checkpoint resharded from DP 4 to DP 2, and
# finishes: the last report's checks (its 100 losses against the single-rank references,
# within the numerics contract) all pass. Repeated RUNS times; every run must pass.
# Usage: elastic_test.sh PATH/TO/dtbench RUNS
set -u
dtbench=$(realpath "$1"); runs="${2:-1}"
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fails=0
# A config that does not resume from its checkpoints: refused, one line, exit 2.
printf '{"train": {"steps": 3}}' >"$tmp/no_resume.json"
/usr/bin/python3 scripts/elastic.py --dtbench "$dtbench" -- --config "$tmp/no_resume.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q 'needs train.checkpoint_dir' "$tmp/err"; then
  echo "FAIL: a config without checkpoints: exit $rc"; cat "$tmp/err"; fails=$((fails + 1))
else
  echo "ok: $(cat "$tmp/err")"
fi
# Bad --hosts: one line, exit 2.
for bad in "h1:2,h1:2|listed twice" "h1:0|not HOST or HOST:SLOTS" "h1:1,h2:1|2 slots for --np 4"; do
  /usr/bin/python3 scripts/elastic.py --dtbench "$dtbench" --hosts "${bad%%|*}" --np 4 -- --config "$tmp/no_resume.json" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "${bad#*|}" "$tmp/err"; then
    echo "FAIL: --hosts ${bad%%|*}: exit $rc"; cat "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok: $(cat "$tmp/err")"
  fi
done
for i in $(seq 1 "$runs"); do
  d="$tmp/run$i"; mkdir -p "$d"
  cat >"$d/config.json" <<JSON
{"name": "elastic", "comm_timeout_s": 20, "suites": ["train"],
 "train": {"steps": 100, "checkpoint_dir": "$d/ck", "checkpoint_every": 10, "resume_from": "latest"}}
JSON
  /usr/bin/python3 scripts/elastic.py --dtbench "$dtbench" --np 4 --max-restarts 2 -- --config "$d/config.json" --output-dir "$d/out" \
    --run-id e >"$d/log" 2>&1 &
  job=$!
  # Rank 2 of the first attempt, once the first checkpoint is complete.
  waited=0; victim=
  while [ -z "$victim" ] && [ "$waited" -lt 600 ]; do
    sleep 0.1; waited=$((waited + 1))
    [ -f "$d/ck/step-10/manifest.json" ] || continue
    for p in $(pgrep -f "$d/config.json"); do
      r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
      [ "$r" = 2 ] && grep -q "dtbench" "/proc/$p/cmdline" 2>/dev/null && victim=$p
    done
  done
  if [ -z "$victim" ]; then
    echo "FAIL (run $i): no checkpoint or no rank 2 within 60 s"; tail -5 "$d/log"; fails=$((fails + 1))
    wait "$job"; continue
  fi
  kill -9 "$victim"
  wait "$job"; rc=$?
  verdict=$(/usr/bin/python3 - "$d/out/e-elastic.json" "$rc" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
a = s["attempts"]
p = []
if int(sys.argv[2]) != 0: p.append("exit %s" % sys.argv[2])
if len(a) != 2: p.append("%d attempts" % len(a))
else:
    if a[0].get("failed_rank") != 2: p.append("failed rank %r: %s" % (a[0].get("failed_rank"), a[0].get("error")))
    if a[1]["ranks"] != 2: p.append("restarted on %d ranks" % a[1]["ranks"])
    r = a[1].get("resumed") or {}
    if not r.get("from") or not r.get("resharded_from", "").startswith("DP4"): p.append("resumed %r" % r)
    rep = json.load(open(a[1]["report"]))
    checks = rep["checks"]
    bad = [c["name"] for c in checks if not c["passed"]]
    t = [x for x in rep["suites"] if x["name"] == "train"][0]
    if bad or not checks: p.append("checks failed: %s" % bad[:3])
    if len(t["data"]["losses"]["layout"]) != 100: p.append("%d losses" % len(t["data"]["losses"]["layout"]))
print("; ".join(p) if p else "ok: %s; resumed at step %d from %s (resharded from %s) on 2 ranks, %d/%d checks" % (
    a[0]["error"], r["at_step"], r["from"].split("/")[-1], r["resharded_from"], len(checks), len(checks)))
PY
)
  case "$verdict" in
    ok:*) echo "ok (run $i): $verdict" ;;
    *) echo "FAIL (run $i): $verdict"; tail -20 "$d/log"; fails=$((fails + 1)) ;;
  esac
done
echo "elastic_test: $fails failure(s) in $runs runs and the refusal"
[ "$fails" -eq 0 ]
