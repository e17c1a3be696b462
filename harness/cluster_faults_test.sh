#!/usr/bin/env bash
# Faults and slow links on the test cluster (scripts/cluster, docs/cluster.md "Faults on the
# cluster"): one cluster of 3 hosts for all of these.
# - a host's ranks killed (SIGKILL to every dtbench process in dtbh2) during training across 2
#   hosts x 2 ranks: the job ends within comm_timeout_s + 30 s, one dtbench line names the ranks
#   and the host ("ranks 2,3 on dtbh2"), the report keeps the collectives suite that finished;
# - host 2's link cut mid-training: the same, found by mpirun's keepalive (comm_timeout_s 10) or
#   first by the watchdog (comm_timeout_s 4: "did not complete within 4.0 s");
# - host 2's link at 2 % loss during the collectives: they complete, #wrong 0 (TCP resends);
# - comm_efficiency across 2 hosts with host 2 at 200 Mbit/s: the real nodes and links, nothing
#   emulated; the measured link at most the shaped rate; the hierarchical all-reduce sends fewer
#   bytes across; sync's step no faster than its bytes over the shaped link allow;
# - scripts/elastic.py through scripts/cluster mpirun on 3 hosts x 2 ranks, host 2's ranks killed
#   after a checkpoint: it restarts on dtbh1 and dtbh3 (4 ranks), resumes resharded, all checks pass.
# Exit 77 (ctest: skipped) with the reason where scripts/cluster check says this machine cannot host it.
# Usage: cluster_faults_test.sh PATH/TO/dtbench
set -uo pipefail
. "$(dirname "$0")/cluster_lib.sh" "$1"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
step() { echo "[$((SECONDS - t0)) s] $*"; }
t0=$SECONDS
timeout_s=10

cluster_take 3 >/dev/null

# The pids of this test's dtbench processes in host H (every process of a host is in its netns).
dtbench_pids() {
  local p
  for p in $(ip netns pids "dtbh$1"); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$dtbench .*$tmp/" && echo "$p"
  done
}

cat >"$tmp/fault.json" <<EOF
{"name": "cluster-faults", "comm_timeout_s": $timeout_s, "suites": ["collectives", "train"],
 "model": {"L": 2, "C": 32, "NH": 2, "T": 32, "V": 256},
 "collectives": {"ops": ["all_reduce"], "max_bytes": 65536, "step_factor": 16, "iters": 3, "repetitions": 2},
 "train": {"steps": 100000, "seq_len": 32, "references": false}}
EOF

sed "s/\"comm_timeout_s\": $timeout_s/\"comm_timeout_s\": 4/" "$tmp/fault.json" >"$tmp/fault4.json"

# fault NAME CONFIG ACTION [WANT]: the job on hosts 1 and 2 (2 ranks each) reaches training, ACTION
# runs, and the job must end within comm_timeout_s + 30 s with a non-zero status, a dtbench line
# naming ranks 2,3 and dtbh2 (and matching the regular expression WANT), and the report's train
# suite marked error with that line.
fault() {
  local name=$1 config=$2 action=$3 want=${4:-} job waited=0 before=$fails
  local out="$tmp/out-$name" log="$tmp/$name.log"
  "$cluster" mpirun --ranks-per-host 2 -np 4 "$dtbench" run --config "$config" --output-dir "$out" \
    >"$log" 2>&1 8<&- &
  job=$!
  until grep -q '^# train:' "$log" 2>/dev/null && [ -f "$out/latest.json" ]; do
    sleep 0.2; waited=$((waited + 1))
    if [ "$waited" -ge 400 ] || ! kill -0 "$job" 2>/dev/null; then
      fail "$name: the job did not reach training (it ran $((waited / 5)) s)"; tail -5 "$log"; return
    fi
  done
  sleep 1
  local t1=$SECONDS limit=$((timeout_s + 30)) rc took lines
  eval "$action"
  while kill -0 "$job" 2>/dev/null && [ $((SECONDS - t1)) -le "$limit" ]; do sleep 0.2; done
  if kill -0 "$job" 2>/dev/null; then fail "$name: the job still ran $limit s after: $action"; kill -9 "$job"; fi
  wait "$job"; rc=$?; took=$((SECONDS - t1))
  [ "$rc" -ne 0 ] || fail "$name: exit status 0"
  lines=$(grep -E '^dtbench: error: .*on other nodes, not visible from here: ranks 2,3 on dtbh2;' "$log" | grep -cE "$want")
  [ "$lines" -ge 1 ] || { fail "$name: no dtbench line naming ranks 2,3 on dtbh2"; grep 'dtbench' "$log"; }
  /usr/bin/python3 "$root/scripts/validate_report.py" "$out/latest.json" >/dev/null || fail "$name: the report does not validate"
  /usr/bin/python3 - "$out/latest.json" "$want" <<'PY' || fail "$name: the report (above)"
import json, re, sys
s = {x["name"]: x for x in json.load(open(sys.argv[1]))["suites"]}
assert s["collectives"]["status"] == "passed", s["collectives"]["status"]
t = s["train"]
assert t["status"] == "error" and re.search(r"on other nodes, not visible from here: ranks 2,3 on dtbh2;", t["error"]), t
assert re.search(sys.argv[2], t["error"]), (sys.argv[2], t["error"])
PY
  [ "$fails" -gt "$before" ] || echo "ok ($name): exit $rc after $took s; $(grep -m1 '^dtbench: error: ' "$log")"
}

step "host 2's ranks killed (SIGKILL) during training"
fault killed "$tmp/fault.json" 'kill -9 $(dtbench_pids 2)'
# A cut: mpirun's keepalive finds host 2's daemon lost 3-9 s later and ends the job (SIGTERM); with
# comm_timeout_s 4 the watchdog may name the cut first, and then waits for that (when its exit comes
# before the keepalive's first unanswered probe, mpirun waits on the lost daemon for minutes).
for cut in "cut $tmp/fault.json" "cut_early $tmp/fault4.json did.not.complete.within.4.0.s"; do
  set -- $cut
  step "host 2's link cut during training ($1)"
  fault "$1" "$2" '"$cluster" cut 2 >/dev/null' "${3:-}"
  "$cluster" restore 2 >/dev/null || fail "restore 2"
  # The restored link carries traffic both ways before the next job's launch uses it (an answer:
  # a connection refused by port 9), else its daemon on host 2 may never reach mpirun.
  for _ in $(seq 1 75); do
    "$cluster" exec 1 timeout 1 bash -c "exec 3<>/dev/tcp/127.77.0.2/9" 2>&1 | grep -q 'Connection refused' &&
      "$cluster" exec 2 timeout 1 bash -c "exec 3<>/dev/tcp/127.77.0.1/9" 2>&1 | grep -q 'Connection refused' && break
    sleep 0.2
  done
  # Host 2's ranks end too: its daemon, or their own watchdog (timeout, then at most 30 s' wait).
  for _ in $(seq 1 175); do [ -z "$(dtbench_pids 2; dtbench_pids 1)" ] && break; sleep 0.2; done
  left=$(dtbench_pids 2; dtbench_pids 1)
  [ -z "$left" ] || { fail "dtbench processes left 35 s after the job: $left"; kill -9 $left; }
done

step "host 2 at 2 % loss during the collectives"
cat >"$tmp/loss.json" <<EOF
{"name": "cluster-loss", "comm_timeout_s": 30, "suites": ["collectives"],
 "collectives": {"ops": ["all_reduce", "sendrecv"], "min_bytes": 65536, "max_bytes": 1048576, "step_factor": 16,
                 "iters": 3, "repetitions": 2}}
EOF
"$cluster" shape 2 --loss 2 >/dev/null || fail "shape 2 --loss 2"
"$cluster" mpirun --ranks-per-host 2 -np 4 "$dtbench" run --config "$tmp/loss.json" --output-dir "$tmp/out-loss" \
  >"$tmp/loss.log" 2>&1 8<&-; rc=$?
drops=$("$cluster" exec 2 iptables -w -L -v -n -x | awk '/DROP/ && /statistic/ {n += $1} END {print n + 0}')
"$cluster" unshape >/dev/null || fail "unshape"
if [ "$rc" -ne 0 ]; then fail "collectives at 2 % loss: exit $rc"; tail -5 "$tmp/loss.log"
else /usr/bin/python3 - "$tmp/out-loss/latest.json" "$drops" <<'PY' || fail "the lossy run's report (above)"
import json, sys
r = json.load(open(sys.argv[1]))
assert int(sys.argv[2]) > 0, "no packet dropped"
assert r["benchmarks"] and all(b["n_wrong"] == 0 for b in r["benchmarks"]), "wrong elements"
assert all(c["passed"] for c in r["checks"]), [c["name"] for c in r["checks"] if not c["passed"]]
print(f"ok (2 % loss): {sys.argv[2]} packets dropped, {len(r['benchmarks'])} rows, #wrong 0, every check passed")
PY
fi

step "comm_efficiency across 2 hosts, host 2 at 200 Mbit/s"
cat >"$tmp/ce.json" <<'EOF'
{"name": "cluster-ce", "suites": ["comm_efficiency"],
 "comm_efficiency": {"steps": 6, "methods": ["sync", "hierarchical"]}}
EOF
"$cluster" shape 2 --rate 200mbit >/dev/null || fail "shape 2 --rate 200mbit"
"$cluster" mpirun --ranks-per-host 2 -np 4 "$dtbench" run --config "$tmp/ce.json" --output-dir "$tmp/out-ce" \
  >"$tmp/ce.log" 2>&1 8<&- || { fail "comm_efficiency across hosts"; tail -5 "$tmp/ce.log"; }
"$cluster" unshape >/dev/null || fail "unshape"
# 200 Mbit/s is 0.025 GB/s. An all-reduce over 2 nodes moves at least what it reduces (S bytes a
# step, the DP bytes) into each node, and host 2's tbf passes at most its bucket (125 000 bytes) plus
# 0.025 GB/s x t: a sync step takes at least (S - 125 000) / 0.025 GB/s, a floor load can only raise.
/usr/bin/python3 - "$tmp/out-ce/latest.json" <<'PY' || fail "the comm_efficiency report (above)"
import json, sys
r = json.load(open(sys.argv[1]))
c = r["context"]
assert (c["nodes"], c["ranks_per_node"], c["emulated_ranks_per_node"]) == (2, 2, None), c
d = [s for s in r["suites"] if s["name"] == "comm_efficiency"][0]["data"]
assert d["nodes"] == 2 and d["latency_us"] == 0 and 0 < d["slow_link_gbps"] <= 0.03 and d["slow_node"] == 1, d
rec = {b["method"]: b for b in r["benchmarks"]}
assert {b["link"] for b in r["benchmarks"]} == {"fast"} and set(rec) == {"sync", "hierarchical"}, r["benchmarks"]
assert all(b["link_wait_s"] == 0 for b in r["benchmarks"]), "emulated waits"
sync, hier = rec["sync"], rec["hierarchical"]
assert hier["cross_node_bytes_per_token"] < sync["cross_node_bytes_per_token"], (hier, sync)
floor_ms = (sync["dp_bytes_per_token"] * d["tokens_per_step"] - 125000) / 0.025e9 * 1e3
assert sync["real_time"] >= floor_ms, (sync["real_time"], floor_ms)
assert r["checks"] and all(k["passed"] for k in r["checks"]), [k["name"] for k in r["checks"] if not k["passed"]]
print(f"ok (comm_efficiency): real nodes; link measured {d['slow_link_gbps']:.4f} GB/s; cross bytes/token sync "
      f"{sync['cross_node_bytes_per_token']:.0f}, hierarchical {hier['cross_node_bytes_per_token']:.0f}; sync step "
      f"{sync['real_time']:.1f} ms (floor {floor_ms:.1f}), hierarchical {hier['real_time']:.1f} ms")
PY

step "elastic restart on the surviving hosts"
cat >"$tmp/el.json" <<EOF
{"name": "cluster-elastic", "comm_timeout_s": $timeout_s, "suites": ["train"],
 "model": {"L": 2, "C": 32, "NH": 2, "T": 32, "V": 256},
 "train": {"steps": 200, "global_batch": 12, "micro_batches": 1, "seq_len": 32, "lr": 0.003,
           "checkpoint_dir": "$tmp/ck", "checkpoint_every": 10, "resume_from": "latest"}}
EOF
/usr/bin/python3 "$root/scripts/elastic.py" --dtbench "$dtbench" --launcher "$cluster mpirun --ranks-per-host 2" \
  --hosts dtbh1:2,dtbh2:2,dtbh3:2 --np 6 --max-restarts 1 -- --config "$tmp/el.json" --output-dir "$tmp/out-el" \
  --run-id e >"$tmp/el.log" 2>&1 8<&- &
job=$!
waited=0
until [ -f "$tmp/ck/step-10/manifest.json" ] || [ "$waited" -ge 600 ]; do sleep 0.1; waited=$((waited + 1)); done
victims=$(dtbench_pids 2)
[ -n "$victims" ] && kill -9 $victims || fail "elastic: no checkpoint or no rank on dtbh2 within 60 s"
wait "$job"; rc=$?
/usr/bin/python3 - "$tmp/out-el/e-elastic.json" "$rc" <<'PY' || { fail "elastic (above)"; tail -15 "$tmp/el.log"; }
import json, sys
s = json.load(open(sys.argv[1])); a = s["attempts"]
assert sys.argv[2] == "0" and len(a) == 2, (sys.argv[2], a)
assert a[0]["hosts"] == ["dtbh1", "dtbh2", "dtbh3"] and a[0].get("lost_host") == "dtbh2", a[0]
assert a[1]["hosts"] == ["dtbh1", "dtbh3"] and a[1]["ranks"] == 4, a[1]
res = a[1]["resumed"] or {}
assert res.get("from") and (res.get("resharded_from") or "").startswith("DP6"), res
rep = json.load(open(a[1]["report"]))
assert rep["context"]["nodes"] == 2, rep["context"]["nodes"]
bad = [c["name"] for c in rep["checks"] if not c["passed"]]
assert rep["checks"] and not bad, bad
t = [x for x in rep["suites"] if x["name"] == "train"][0]
assert len(t["data"]["losses"]["layout"]) == 200, len(t["data"]["losses"]["layout"])
print(f"ok (elastic): lost {a[0]['lost_host']} ({a[0]['error'][:90]}); restarted on {','.join(a[1]['hosts'])}, "
      f"4 ranks, resumed at step {res['at_step']} resharded from {res['resharded_from']}; {len(rep['checks'])} checks passed")
PY

step "teardown"
trap - EXIT
"$cluster" down >/dev/null || fail "scripts/cluster down"
rm -rf "$tmp"
echo "cluster_faults_test: $fails failure(s) in $((SECONDS - t0)) s"
[ "$fails" -eq 0 ]
