#!/usr/bin/env bash
# dtbench validate on 4 ranks grouped as 2 emulated nodes: levels quick, medium and long, the
# test-only fault injection (one rank's compute, then its transfers, slowed 2x; one bit of one
# rank's SDC replay flipped), baselines, and 4 ranks as 4 nodes for slow links and --pairs adaptive.
# Timing-based: ctest runs it alone (RUN_SERIAL), as a neighbour test on the same 2 cores could
# slow one rank's measurement enough to pass for a fault.
# Usage: validate_test.sh PATH/TO/dtbench PATH/TO/mpirun
set -euo pipefail
dtbench="$1"; mpirun="$2"
here=$(cd "$(dirname "$0")" && pwd)
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

# validate ARGS...: 4 ranks as 2 emulated nodes (rpn=1 before it: 4 nodes), one thread each; prints
# nothing, returns the exit status.
validate() {
  local log="$1"; shift
  "$mpirun" -np 4 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" validate --ranks-per-node "${rpn:-2}" \
    "$@" >"$log" 2>&1
}
# accepted LOG REPORT ARGS...: a clean run that must exit 0. Up to 3 attempts where the only failed
# check is pairs/links: on this 2-core machine running 4 ranks, the "inter-node" pairs are memory
# copies between processes, and a clean pair's best 4 MiB figure stays low for a whole run
# (across its sweeps and retests; 30 clean runs of 21b4e84 here on 2026-12-07: the slowest
# inter-node pair at 0.37 to 0.90 of the class's upper quartile, median 0.72; 24 more with 20 ms of
# exchanges before the timing, 0.30 to 0.95, so a warm-up does not cure it; once in CI at 0.243,
# under the crowded threshold of 0.25). A slow link injected 8x is tested below; any other
# failure, or pairs/links failing 3 runs, fails the test.
accepted() {
  local log="$1" report="$2" k rc; shift 2
  for k in 1 2 3; do
    rc=0
    validate "$log" "$@" || rc=$?
    [ "$rc" -eq 0 ] && return 0
    if [ "$rc" -eq 1 ] && python3 - "$report" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
failed = {c["name"] for c in run["checks"] if c["status"] == "fail"}
sys.exit(0 if failed == {"pairs/links"} and all(n["accepted"] for n in run["nodes"]) else 1)
PY
    then
      echo "validate $*: attempt $k: a clean pair under the crowded threshold:"; grep "pairs/links" "$log"
      continue
    fi
    echo "FAIL: validate $* exited $rc, not 0:"; cat "$log"; exit 1
  done
  echo "FAIL: validate $*: pairs/links failed a clean run in 3 attempts:"; cat "$log"; exit 1
}
expect_exit() {  # expect_exit CODE LOG ARGS...
  local want="$1" log="$2" rc=0; shift 2
  validate "$log" "$@" || rc=$?
  [ "$rc" -eq "$want" ] || { echo "FAIL: validate $* exited $rc, not $want:"; cat "$log"; exit 1; }
}
# tries WHAT LOG FN: FN (a validate run that must find an injected fault, and its assertions) up
# to 3 times, until it passes, showing each miss's failed checks from LOG. Where the verdict rests
# on comparing pairs, a clean pair this machine holds low for a whole run (see accepted) can be
# taken for a second slow partner of the slowed rank; a fault missed 3 times fails the test.
tries() {
  local what="$1" log="$2" k; shift 2
  for k in 1 2 3; do
    "$@" && return 0
    echo "$what: attempt $k not as expected:"; grep -E "^  (fail|warn)|^node" "$log" || cat "$log"
  done
  echo "FAIL: $what: not as expected in 3 attempts"; exit 1
}

# Level long, clean, making a baseline: every check of levels medium and long runs (the device
# copies are skipped on the cpu backend, with their reason), every metric is measured, both nodes
# are accepted. Judged by an absolute floor only: this run is the baseline's source, and its
# timing checks are tested below against the baseline (a clean run on this 2-core machine under
# outside load has measured a rank's lateness at 150 % of the work).
printf '{"kind": "validate-rules", "rules": [{"name": "floor", "type": "min", "metric": "compute/gemm_gflops", "fail": 1}]}' \
  >"$tmp/floor.json"
accepted "$tmp/b0.log" "$tmp/b0.json" --level long --rules "$tmp/floor.json" --make-baseline "$tmp/baseline.json" \
  --output "$tmp/b0.json"
python3 - "$tmp/b0.json" "$tmp/baseline.json" <<'PY'
import json, sys
ok, base = (json.load(open(p)) for p in sys.argv[1:3])
assert ok["verdict"] == "accepted" and ok["levels_run"] == ["quick", "medium", "long"], ok["verdict"]
st = {c["name"]: c["status"] for c in ok["checks"]}
assert st["copy/host_device"] == "skip", st
# 4 ranks at once on 2 cores: the world's arrival order is the scheduler's, so that check is
# skipped with its reason; a node's 2 ranks (the nodes take turns) fit the cores.
assert st["world/arrival"] == "skip" and "cores" in [c for c in ok["checks"] if c["name"] == "world/arrival"][0]["detail"]
for name in ["node/sendrecv_matrix", "node/alpha_beta", "pairs/sendrecv_matrix", "pairs/alpha_beta", "train/world",
             "sdc/replay", "floor"]:
    assert st[name] == "pass", (name, st[name])
assert set(ok["metrics"]) == {"compute/gemm_gflops", "compute/triad_GBps", "node/sendrecv_GBps", "node/arrival_late_pct",
    "node/allreduce_busbw_GBps", "pairs/sendrecv_GBps", "world/allreduce_busbw_GBps", "train/tokens_per_s"}, ok["metrics"]
assert all(len(m["per_rank"]) == 4 and min(m["per_rank"]) >= 0 for m in ok["metrics"].values()), ok["metrics"]
by = {c["name"]: c for c in ok["checks"]}
m = by["pairs/sendrecv_matrix"]["values"]["matrix_GBps"]
assert len(m) == 4 and all(m[i][j] > 0 for i in range(4) for j in range(4) if i != j), m
nm = by["node/sendrecv_matrix"]["values"]["matrix_GBps"]
assert nm[0][1] > 0 and nm[2][3] > 0 and nm[0][2] == 0 and nm[1][3] == 0, nm  # pairs within a node only
ab = by["pairs/alpha_beta"]["values"]["classes"]
assert set(ab) == {"intra-node", "inter-node"} and all(c["alpha_us"] > 0 and c["beta_GBps"] > 0 for c in ab.values()), ab
t = by["train/world"]["values"]
assert t["last_loss"] < t["first_loss"], t
# The SDC replay with no fault: every rank computed the same bits, no rank or node named.
sdc = by["sdc/replay"]
assert sdc["ranks"] == [] and sdc["nodes"] == [] and "4 ranks bitwise equal" in sdc["detail"], sdc
assert len(set(sdc["values"]["final_hash"].values())) == 1, sdc["values"]
assert base["kind"] == "validate-baseline" and {"compute/gemm_gflops", "compute/triad_GBps", "node/sendrecv_GBps",
    "node/allreduce_busbw_GBps", "pairs/sendrecv_GBps", "world/allreduce_busbw_GBps",
    "train/tokens_per_s"} == set(base["metrics"]), sorted(base["metrics"])
assert all(v["value"] > 0 for v in base["metrics"].values()), base
print("validate long clean ok:", by["pairs/alpha_beta"]["detail"])
PY

# The acceptance runs: judged by harness/validate_rules.json (each metric: 40% below the baseline
# AND 40% below this run's fleet median) against the clean run's baseline. Clean: accepted.
# Rank 3's compute slowed 2x, then separately its transfers slowed 2x: node 1 alone is
# defective, the violation naming rank 3, the metric, the rule and the values (exit 1).
rules="$here/validate_rules.json"
accepted "$tmp/b1.log" "$tmp/b1.json" --level long --tolerance 0.4 --baseline "$tmp/baseline.json" --rules "$rules" \
  --output "$tmp/b1.json"
# flagged FAULT RULE: the fault run against the baseline, judged by the rules file: exit 1, node
# 1 alone defective, the violation of RULE naming rank 3, the metric's two rules and values.
# Up to 3 attempts (tries): on this 2-core machine running 4 ranks, 1 comm-fault run in 40
# measured one clean pair at half speed through its retests, which pulls the fleet median down to
# the slowed rank's figure.
flagged() {
  local rc=0
  validate "$tmp/f.log" --level long --tolerance 0.4 --baseline "$tmp/baseline.json" --rules "$rules" \
    --inject "$1" --output "$tmp/f.json" || rc=$?
  [ "$rc" -eq 1 ] && python3 - "$tmp/f.json" "$2" <<'PY'
import json, sys
run, rule = json.load(open(sys.argv[1])), sys.argv[2]
assert run["verdict"] == "defective" and run["exit_status"] == 1, run["verdict"]
n0, n1 = run["nodes"]
assert n0["accepted"] and not n1["accepted"], run["nodes"]
v = [x for x in n1["violations"] if x["check"] == rule][0]
d = v["detail"]
assert v["status"] == "fail" and "rank 3: 2 of 2 rules failed" in d, v
assert "below the baseline" in d and "below the median" in d and "rank 2" not in d, d
assert all("rank 3" in x["detail"] or x["check"] == "node/sendrecv_GBps" for x in n1["violations"]), n1
# A slow rank is a node fault, never a slow link of its healthy partners.
links = [c for c in run["checks"] if c["name"] == "pairs/links"][0]
assert links["values"]["slow_links"] == [], links["detail"]
print("validate long vs baseline ok:", run["injected_fault"], "->", d)
PY
}
tries "validate --inject 3:compute:2 against the baseline" "$tmp/f.log" flagged 3:compute:2 gemm
tries "validate --inject 3:comm:2 against the baseline" "$tmp/f.log" flagged 3:comm:2 pairs
python3 - "$tmp/b1.json" <<'PY'
import json, sys
ok = json.load(open(sys.argv[1]))
assert ok["verdict"] == "accepted" and ok["baseline"] and ok["rules_file"], ok["verdict"]
assert [r["name"] for r in ok["rules"]][:3] == ["gemm-baseline", "gemm-fleet", "gemm"], ok["rules"]
print("validate long vs baseline, clean: accepted")
PY

# A slow link between two healthy ranks (4 ranks as 4 emulated nodes; only the transfers between
# ranks 1 and 2 stretched 8x): pairs/links fails naming that pair and its two nodes, every node is
# accepted (exit 1: a check about the run failed). 8x, as the threshold on this crowded machine is
# a quarter of the class's upper quartile. Judged by the floor rule and a fleet rule over the
# groups' all-reduce (4 nodes make 2 groups): on this shared machine that rule may fail on noise,
# but it then names no node, as the pairs show none slow.
printf '{"kind": "validate-rules", "rules": [{"name": "floor", "type": "min", "metric": "compute/gemm_gflops", "fail": 1},
  {"name": "groups", "type": "fleet_drop", "metric": "groups/allreduce_busbw_GBps", "fail": 0.3}]}' >"$tmp/groups.json"
slow_link() {
  local rc=0
  rpn=1 validate "$tmp/l.log" --level long --rules "$tmp/groups.json" --inject 1-2:comm:8 --output "$tmp/l.json" || rc=$?
  [ "$rc" -eq 1 ] && python3 - "$tmp/l.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
assert run["exit_status"] == 1 and all(n["accepted"] for n in run["nodes"]), run["nodes"]
by = {c["name"]: c for c in run["checks"]}
links = by["pairs/links"]
assert links["status"] == "fail" and links["nodes"] == [] and links["ranks"] == [1, 2], links
(l,) = links["values"]["slow_links"]
assert l["ranks"] == [1, 2] and l["nodes"] == [run["nodes"][1]["node"], run["nodes"][2]["node"]], l
assert l["GBps"] < 0.25 * l["q3_GBps"] and links["values"]["slow_ranks"] == [], links["values"]
assert "rank 1 (" in links["detail"] and "- rank 2 (" in links["detail"], links["detail"]
assert by["groups"]["nodes"] == [] and by["groups"]["ranks"] == [], by["groups"]
assert "share one machine" in by["consistency/machines"]["detail"], by["consistency/machines"]
print("validate slow link ok:", links["detail"][:160])
PY
}
tries "validate --inject 1-2:comm:8" "$tmp/l.log" slow_link

# --pairs adaptive (fault isolation in rounds) on 4 ranks as 4 nodes: rank 2's transfers
# stretched 8x make pairs/isolation name rank 2 and its node alone (the ring of 4, its halves,
# the failed half's two ranks confirmed with known-good partners: 5 tests against 6 pairs); the
# link 1-2 stretched 8x is named as a pair, every node accepted (the ring's pair 1-2 lies between
# its halves, whose rings both pass). 8x as for pairs/links above: the same crowded threshold.
adaptive() {
  local rc=0 rl=0
  rpn=1 validate "$tmp/a.log" --level long --pairs adaptive --rules "$tmp/floor.json" --inject 2:comm:8 \
    --output "$tmp/a.json" || rc=$?
  rpn=1 validate "$tmp/al.log" --level long --pairs adaptive --rules "$tmp/floor.json" --inject 1-2:comm:8 \
    --output "$tmp/al.json" || rl=$?
  cat "$tmp/a.log" "$tmp/al.log" >"$tmp/adaptive.log"
  [ "$rc" -eq 1 ] && [ "$rl" -eq 1 ] && python3 - "$tmp/a.json" "$tmp/al.json" <<'PY'
import json, sys
node, link = (json.load(open(p)) for p in sys.argv[1:3])
c = {c["name"]: c for c in node["checks"]}["pairs/isolation"]
bad = [n["node"] for n in node["nodes"] if not n["accepted"]]
assert c["status"] == "fail" and c["ranks"] == [2] and c["nodes"] == bad == [node["nodes"][2]["node"]], (c, bad)
assert c["values"]["slow_links"] == [], c["values"]["slow_links"]
t = c["values"]["totals"]
assert t["all_pairs"] == 6 and t["tests"] < t["all_pairs"] and t["rounds"] == 3, t
assert "pairs/links" not in {c["name"] for c in node["checks"]}, "--pairs adaptive also ran every pair"
c = {c["name"]: c for c in link["checks"]}["pairs/isolation"]
assert link["exit_status"] == 1 and all(n["accepted"] for n in link["nodes"]), link["nodes"]
assert c["status"] == "fail" and c["nodes"] == [] and [l["ranks"] for l in c["values"]["slow_links"]] == [[1, 2]], c
print("validate --pairs adaptive ok:", c["detail"][:200])
PY
}
tries "validate --pairs adaptive --inject 2:comm:8, then 1-2:comm:8" "$tmp/adaptive.log" adaptive

# Baselines: a quick run judged against the long baseline lacks its metrics, and a missing
# metric fails the run (exit 1), not passes.
expect_exit 1 "$tmp/b4.log" --baseline "$tmp/baseline.json" --output "$tmp/b4.json"
python3 - "$tmp/b4.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
missing = [c for c in run["checks"] if c["name"].startswith("baseline/") and c["status"] == "fail"]
assert len(missing) == 7 and all("missing" in c["detail"] for c in missing), missing
assert run["verdict"] == "defective" and run["exit_status"] == 1
print("validate baseline ok: a run missing its 7 metrics fails")
PY

# SDC triage at level quick (--sdc): rank 2's replay gets one bit of one GEMM output flipped
# (--inject 2:sdc); the majority rule names rank 2 and its node alone (exit 1, node 1 defective,
# node 0 accepted), with the step its hashes first differ at. (A malformed RANK:sdc: cli_test.sh.)
expect_exit 1 "$tmp/s.log" --sdc --inject 2:sdc --output "$tmp/s.json"
python3 - "$tmp/s.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
assert run["verdict"] == "defective" and run["exit_status"] == 1 and run["injected_fault"] == "2:sdc", run["verdict"]
c = [c for c in run["checks"] if c["name"] == "sdc/replay"][0]
assert c["status"] == "fail" and c["ranks"] == [2] and [n.rsplit("/", 1)[1] for n in c["nodes"]] == ["node1"], c
assert "rank 2's replay differs from the majority's (3 of 4 ranks agree) from step 2 of 3" in c["detail"], c["detail"]
h = c["values"]["final_hash"]
assert h["rank 0"] == h["rank 1"] == h["rank 3"] != h["rank 2"], h
n0, n1 = run["nodes"]
assert n0["accepted"] and not n1["accepted"] and [v["check"] for v in n1["violations"]] == ["sdc/replay"], run["nodes"]
print("validate sdc ok:", c["detail"].split(";")[0])
PY

# A rank that hangs: the check's step times out, rank 0 names the rank and its node, marks the
# checks after it not_run, writes the report and ends the job: exit 3, verdict incomplete.
expect_exit 3 "$tmp/h.log" --level long --check-timeout 3 --inject 3:hang --output "$tmp/h.json"
python3 - "$tmp/h.json" "$tmp/h.log" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
assert run["verdict"] == "incomplete" and run["exit_status"] == 3, run["verdict"]
st = {c["name"]: c for c in run["checks"]}
c = st["compute"]
assert c["status"] == "fail" and c["ranks"] == [3] and "within 3 s" in c["detail"], c
assert [x["status"] for x in run["checks"] if x["status"] == "not_run"] and st["train"]["status"] == "not_run", st
assert st["sdc"]["status"] == "not_run", st
n0, n1 = run["nodes"]
assert n0["accepted"] and not n1["accepted"] and "rank 3 did not finish" in n1["violations"][0]["detail"], run["nodes"]
assert "rank 3 did not finish a step of check compute" in open(sys.argv[2]).read()
print("validate hang ok:", c["detail"])
PY

# A transfer that never finishes (rank 1's transfers stretched 300x, beyond the 2 s timeout): the
# pair is named, the run ends incomplete (exit 3) with the report written.
expect_exit 3 "$tmp/p.log" --level medium --check-timeout 2 --inject 1:comm:300 --output "$tmp/p.json"
python3 - "$tmp/p.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
c = [c for c in run["checks"] if c["name"] == "node/sendrecv"][0]
assert run["verdict"] == "incomplete" and c["status"] == "fail" and c["ranks"] == [0, 1], c
assert "a transfer between rank 0 and rank 1" in c["detail"], c["detail"]
assert [x["status"] for x in run["checks"] if x["name"] == "node/allreduce"] == ["not_run"], run["checks"]
assert not run["nodes"][0]["accepted"] and run["nodes"][1]["accepted"], run["nodes"]
print("validate pair timeout ok:", c["detail"])
PY

# Arrival times attribute a straggler: 2 ranks as 2 nodes, one core each. Clean, no straggler;
# rank 1's compute slowed 2x, it arrives at the world's all-reduce late and the check names it
# (the GEMM check too). A plain 2-rank run, not emulated: its own mpirun.
# Up to 3 attempts each: on a quiet 2-core machine a clean run's lateness is 0-2 % of the work
# (12 runs), but one run in four of this test on 2026-12-01 met a disturbance that held rank 0
# back for 42 % of the work; a real straggler, or a probe that stops seeing one, fails all three.
for fault in "" "1:compute:2"; do
  want=0; [ -n "$fault" ] && want=1
  for attempt in 1 2 3; do
    rc=0
    "$mpirun" -np 2 --bind-to none -x OPENBLAS_NUM_THREADS=1 "$dtbench" validate --ranks-per-node 1 --level long \
      --tolerance 0.4 ${fault:+--inject "$fault"} --output "$tmp/a${fault:+_slow}.json" >"$tmp/a.log" 2>&1 || rc=$?
    if [ "$rc" -eq "$want" ]; then
      # A clean run's disturbance may also show as a warning (20-40 % late: 3.4 ms of 10.6 ms on
      # 2026-12-02), with exit 0: another attempt too.
      [ -n "$fault" ] && break
      python3 -c 'import json, sys; sys.exit(0 if [c["status"] for c in json.load(open(sys.argv[1]))["checks"]
                  if c["name"] == "world/arrival_late_pct"] == ["pass"] else 1)' "$tmp/a.json" && break
      echo "2-rank validate clean: attempt $attempt's arrival check did not pass" >&2
      continue
    fi
    echo "2-rank validate ${fault:-clean}: attempt $attempt exited $rc, not $want" >&2
  done
  [ "$rc" -eq "$want" ] || { echo "FAIL: 2-rank validate ${fault:-clean} exited $rc, not $want:"; cat "$tmp/a.log"; exit 1; }
done
python3 - "$tmp/a.json" "$tmp/a_slow.json" <<'PY'
import json, sys
ok, slow = (json.load(open(p)) for p in sys.argv[1:3])
arr = lambda r: [c for c in r["checks"] if c["name"] == "world/arrival_late_pct"][0]
assert arr(ok)["status"] == "pass", arr(ok)
a = arr(slow)
assert a["status"] == "fail" and a["ranks"] == [1], a
v = a["values"]
assert v["rank 1"] > 40 > v["rank 0"] and v["lateness_ms"]["rank 1"] > 0.4 * v["work_ms"], v
n0, n1 = slow["nodes"]
assert n0["accepted"] and not n1["accepted"], slow["nodes"]
print("validate arrival ok:", a["detail"])
PY

# Burnin: the long level looped for --duration seconds, each rank's worst figure over the loops.
# Judged by the absolute floor only: what is tested here is the looping. A loop takes about 3 s
# on an idle 2-core machine, so 6 s gives at least 2 loops; under CI's load (the A/B gate runs
# beside ctest) one loop has taken past 6 s, and burnin then rightly stops after it. So a run of
# one loop is repeated once with --duration twice that run's whole length (start-up and the
# lower levels included: longer than its one loop, timed under the present load): the looping
# must then show at least 2 loops, and never stop before --duration.
burnin() {
  accepted "$tmp/burn.log" "$tmp/burn.json" --level burnin --duration "$1" --rules "$tmp/floor.json" --output "$tmp/burn.json"
}
first=6
burnin "$first"
again=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(2 * r["duration_s"] if r["loops"] < 2 else "")' "$tmp/burn.json")
if [ -n "$again" ]; then
  echo "validate burnin: one loop outlasted $first s under the present load; again with --duration $again"
  burnin "$again"
fi
python3 - "$tmp/burn.json" "${again:-$first}" <<'PY'
import json, sys
r, duration = json.load(open(sys.argv[1])), float(sys.argv[2])
assert r["levels_run"] == ["quick", "medium", "long", "burnin"] and r["loops"] >= 2 and r["verdict"] == "accepted", r["loops"]
assert r["duration_s"] >= duration and [c["status"] for c in r["checks"] if c["name"] == "floor"] == ["pass"], r["duration_s"]
print("validate burnin ok:", r["loops"], "loops in", round(r["duration_s"], 1), "s")
PY
