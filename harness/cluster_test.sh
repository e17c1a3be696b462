#!/usr/bin/env bash
# dtbench on the test cluster (scripts/cluster, docs/cluster.md): 3 hosts as network namespaces with
# Slurm, dtbench's collectives across 2 hosts x 2 ranks through mpirun and through srun --mpi=pmix,
# validate --level quick naming the real hosts, conformance layouts across hosts (TP2 in a host x
# DP2 across, PP2 across), shaping seen by TCP and by the collectives, and a teardown that leaves
# nothing: no namespace, process, mount, link or file of the cluster's.
# Exit 77 (ctest: skipped) with the reason where scripts/cluster check says this machine cannot host it.
# Usage: cluster_test.sh PATH/TO/dtbench
set -uo pipefail
. "$(dirname "$0")/cluster_lib.sh" "$1"
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "[$((SECONDS - t0)) s] $*"; }
t0=$SECONDS

had_netns_dir=$(mountpoint -q /run/netns && echo yes)   # ip netns add makes it; check and down remove it
cluster_take 3 --slurm
# The namespaces' identities, to find any process left in them after the teardown.
ns_ids=$(for h in dtbh1 dtbh2 dtbh3; do echo "net:[$(stat -L -c %i /run/netns/$h)]"
  echo "uts:[$(stat -L -c %i /run/dtbench-cluster/uts/$h)]"; done)
[ "$(echo "$ns_ids" | sort -u | wc -l)" -eq 6 ] || fail "the hosts' namespaces are not 6 distinct ones: $ns_ids"
[ "$("$cluster" exec 2 hostname)" = dtbh2 ] || fail "host 2's hostname is not dtbh2"
"$cluster" exec 3 getent hosts dtbh1 | grep -q '^127\.77\.0\.1 ' || fail "host 3 does not resolve dtbh1 to 127.77.0.1"
# Bad usage: one line, exit 2.
for bad in "up 0" "shape 2 --rate fast" "exec 9 true" "frob"; do
  out=$("$cluster" $bad 2>&1); rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] || fail "scripts/cluster $bad: exit $rc, not 2 with one line: $out"
done

# check_collectives REPORT: 2 nodes of 2 ranks found from the hosts' names (not emulated), every
# #wrong 0 and every check passed, flat and hierarchical all_reduce rows over the 2 real nodes.
# Prints the 4 MiB out-of-place sendrecv busbw.
check_collectives() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["context"]
shape = (c["world_size"], c["nodes"], c["ranks_per_node"], c["emulated_ranks_per_node"])
assert shape == (4, 2, 2, None), f"world, nodes, ranks per node, emulated: {shape}, not (4, 2, 2, None)"
assert c["host_name"] == "dtbh1", c["host_name"]
d = r["suites"][0]["data"]
assert (d["nodes"], d["ranks_per_node"], d["nodes_emulated"]) == (2, 2, False), d
assert r["checks"] and all(k["passed"] for k in r["checks"]), [k["name"] for k in r["checks"] if not k["passed"]]
rows = r["benchmarks"]
assert rows and all(b["n_wrong"] == 0 for b in rows), [b["name"] for b in rows if b["n_wrong"]]
for op in ("all_reduce", "all_reduce_hierarchical"):
    ar = [b for b in rows if b["op"] == op]
    assert ar and all((b["nodes"], b["ranks_per_node"], b["nodes_emulated"]) == (2, 2, False) for b in ar), op
sr = [b["busbw_GBps"] for b in rows if b["op"] == "sendrecv" and b["bytes"] == 4 << 20 and b["placement"] == "out_of_place"]
assert len(sr) == 1, sr
print(f"{sr[0]:.4f}")
PY
}
coll='{"name": "cluster", "suites": ["collectives"],
 "collectives": {"ops": ["all_reduce", "sendrecv"], "min_bytes": 1024, "max_bytes": 4194304, "step_factor": 64,
                 "iters": 3, "repetitions": 2, "warmup_iters": 1}}'
echo "$coll" >"$tmp/coll.json"

step "collectives, 2 hosts x 2 ranks, through mpirun"
"$cluster" mpirun --ranks-per-host 2 -np 4 "$dtbench" run --config "$tmp/coll.json" --output-dir "$tmp/out" \
  --run-id mpirun >"$tmp/mpirun.log" 2>&1 || { cat "$tmp/mpirun.log"; fail "collectives through scripts/cluster mpirun"; }
grep -q '# 2 nodes of 2 ranks' "$tmp/mpirun.log" || { cat "$tmp/mpirun.log"; fail "no '2 nodes of 2 ranks' header"; }
unshaped=$(check_collectives "$tmp/out/mpirun.json") || fail "the mpirun report (above)"
echo "ok: 2 nodes of 2 ranks, #wrong 0, hierarchical rows; 4 MiB sendrecv busbw $unshaped GB/s"

step "collectives and validate --level quick through srun --mpi=pmix -N 2"
"$cluster" srun --mpi=pmix -N 2 --ntasks-per-node 2 "$dtbench" run --config "$tmp/coll.json" --output-dir "$tmp/out" \
  --run-id srun >"$tmp/srun.log" 2>&1 || { cat "$tmp/srun.log"; fail "collectives through scripts/cluster srun"; }
check_collectives "$tmp/out/srun.json" >/dev/null || fail "the srun report (above)"
"$cluster" srun --mpi=pmix -N 2 --ntasks-per-node 2 "$dtbench" validate --level quick \
  --expect nodes=2,ranks_per_node=2 --output "$tmp/validate.json" >"$tmp/validate.log" 2>&1 ||
  { cat "$tmp/validate.log"; fail "validate through scripts/cluster srun"; }
/usr/bin/python3 - "$tmp/validate.json" <<'PY' || fail "the validate report (above)"
import json, sys
v = json.load(open(sys.argv[1]))
nodes = [(n["node"], n["ranks"], n["accepted"]) for n in v["nodes"]]
assert v["verdict"] == "accepted" and len(nodes) == 2, (v["verdict"], nodes)
assert {n for n, _, _ in nodes} <= {"dtbh1", "dtbh2", "dtbh3"} and [r for _, r, _ in nodes] == [[0, 1], [2, 3]], nodes
print("ok: srun collectives as through mpirun; validate accepted", ", ".join(f"{n} {r}" for n, r, _ in nodes))
PY

step "conformance TP2xDP2 (TP in a host, DP across) and PP2xDP2 (PP across) through mpirun"
cat >"$tmp/conf.json" <<'JSON'
{"name": "cluster-conformance", "suites": ["conformance"], "data": "/usr/share/games/fortunes/cookie",
 "conformance": {"model": {"L": 2, "C": 32, "NH": 2, "T": 16, "V": 256}, "steps": 4, "global_batch": 8,
                 "micro_batches": 2, "seq_len": 16, "layouts": ["TP2xDP2", "PP2xDP2"], "precisions": ["fp32"]}}
JSON
"$cluster" mpirun --ranks-per-host 2 -np 4 "$dtbench" run --config "$tmp/conf.json" --output-dir "$tmp/out" \
  --run-id conf >"$tmp/conf.log" 2>&1 || { cat "$tmp/conf.log"; fail "conformance through scripts/cluster mpirun"; }
/usr/bin/python3 - "$tmp/out/conf.json" <<'PY' || fail "the conformance report (above)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["context"]["nodes"] == 2 and r["context"]["ranks_per_node"] == 2, r["context"]["nodes"]
by = {}
for k in r["checks"]:
    by.setdefault(k["name"].split("/")[1], []).append(k["passed"])
assert set(by) == {"TP2xDP2", "PP2xDP2"} and all(all(v) for v in by.values()), by
print("ok: conformance across hosts:", ", ".join(f"{l} {len(v)}/{len(v)}" for l, v in sorted(by.items())))
PY

step "shaping: TCP through tbf and htb, then the collectives with host 2 at 200 Mbit/s"
mbit() { "$cluster" bw "$1" "$2" --seconds 1 | awk '{for (i = 1; i < NF; i++) if ($(i + 1) == "Mbit/s") print $i}'; }
"$cluster" shape 2 --rate 200mbit >/dev/null || fail "shape 2 --rate 200mbit"
host=$(mbit 1 2)
"$cluster" unshape 2 >/dev/null && "$cluster" shape-pair 1 2 --rate 100mbit >/dev/null || fail "shape-pair 1 2 --rate 100mbit"
pair=$(mbit 2 1); other=$(mbit 3 1)
"$cluster" unshape >/dev/null || fail "unshape"
# Loss: random drops on host 3's link (iptables' statistic match, or netem where the kernel has it).
"$cluster" shape 3 --loss 2 >/dev/null || fail "shape 3 --loss 2"
"$cluster" bw 3 1 --seconds 1 >/dev/null || fail "TCP from host 3 at 2 % loss"
if "$cluster" exec 3 tc qdisc show dev eth0 | grep -q netem; then drops=$("$cluster" exec 3 tc -s qdisc show dev eth0 |
  awk '/dropped/ {sub(/,/, "", $7); n += $7} END {print n + 0}')
else drops=$("$cluster" exec 3 iptables -w -L -v -n -x | awk '/DROP/ && /statistic/ {n += $1} END {print n + 0}'); fi
"$cluster" unshape >/dev/null || fail "unshape"
[ "$drops" -gt 0 ] || fail "host 3 at 2 % loss dropped no packet"
"$cluster" exec 3 iptables -w -S | grep -q -- '-j DROP' && fail "unshape left a loss rule on host 3"
echo "TCP: host 2 at 200mbit: $host Mbit/s; pair 1-2 at 100mbit: $pair Mbit/s, 3 -> 1 beside it: $other Mbit/s; 2 % loss: $drops drops"
awk -v h="$host" -v p="$pair" -v o="$other" 'BEGIN {exit !(h > 100 && h <= 210 && p > 50 && p <= 105 && o > 400)}' ||
  fail "TCP rates not at the shapes: $host (100-210), $pair (50-105), $other (> 400)"
"$cluster" shape 2 --rate 200mbit >/dev/null || fail "shape 2 --rate 200mbit"
cat >"$tmp/shaped.json" <<'JSON'
{"name": "cluster-shaped", "suites": ["collectives"],
 "collectives": {"ops": ["all_reduce", "sendrecv"], "min_bytes": 4194304, "max_bytes": 4194304,
                 "iters": 2, "repetitions": 1, "warmup_iters": 1, "in_place": false}}
JSON
"$cluster" mpirun --ranks-per-host 2 -np 4 "$dtbench" run --config "$tmp/shaped.json" --output-dir "$tmp/out" \
  --run-id shaped >"$tmp/shaped.log" 2>&1 || { cat "$tmp/shaped.log"; fail "shaped collectives"; }
"$cluster" unshape >/dev/null || fail "unshape"
# 200 Mbit/s is 0.025 GB/s. sendrecv's busbw is what each rank sends, across the link for the ranks
# next to the other host: at most the link's rate. An all_reduce over 2 nodes moves at least S each
# way across the link, so its busbw (1.5 S / t at 4 ranks) is at most 1.5 x 0.025. Coarse bounds:
# the bucket (125 kB) and a shared core cannot lift a 4 MiB transfer past them.
/usr/bin/python3 - "$tmp/out/shaped.json" "$unshaped" <<'PY' || fail "the shaped report (above)"
import json, sys
r = json.load(open(sys.argv[1])); unshaped = float(sys.argv[2])
bw = {b["op"]: b["busbw_GBps"] for b in r["benchmarks"]}
assert set(bw) == {"all_reduce", "all_reduce_hierarchical", "sendrecv"}, bw
assert all(b["n_wrong"] == 0 for b in r["benchmarks"])
assert bw["sendrecv"] <= 0.03 and bw["all_reduce"] <= 0.04 and bw["all_reduce_hierarchical"] <= 0.04, bw
assert unshaped > 0.05, f"unshaped 4 MiB sendrecv busbw {unshaped} GB/s: not above 2x the shaped link's rate"
print("ok: host 2 at 200 Mbit/s (0.025 GB/s): busbw " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(bw.items()))
      + f" GB/s; unshaped sendrecv {unshaped:.4f} GB/s")
PY

step "teardown"
trap - EXIT
"$cluster" down || fail "scripts/cluster down"
rm -rf "$tmp"
left=$(ip netns list | grep -E '^dtbh[0-9]+' || true)
left+=$(ip -o link show | grep -E ': (dtbv[0-9]+|dtbbr0)[@:]' || true)
left+=$(grep -E ' (/run/dtbench-cluster|/run/netns/dtbh)' /proc/mounts || true)
left+=$(ls -d /etc/netns/dtbh* /run/dtbench-cluster 2>/dev/null || true)
[ -n "$had_netns_dir" ] || ! mountpoint -q /run/netns || left+=" /run/netns (a mount point, which it was not before)"
for p in /proc/[0-9]*; do
  for ns in net uts; do
    id=$(readlink "$p/ns/$ns" 2>/dev/null) || continue
    ! grep -qxF "$id" <<<"$ns_ids" || left+=" process ${p#/proc/} in $id"
  done
  cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
  [[ "$cmd" != */run/dtbench-cluster* ]] || left+=" process ${p#/proc/}: $cmd"
done
[ -z "$left" ] || fail "left after scripts/cluster down: $left"
echo "ok: nothing left (namespaces, processes, mounts, links, files); $((SECONDS - t0)) s in all"

step "orphans: what a test killed before its teardown left is taken down by down --orphaned, nothing else"
trap '"$cluster" down >/dev/null' EXIT
bash -c '"$0" up 1 --owner $$ >/dev/null' "$cluster" || fail "up 1 --owner (a shell that then ends)"
st=$("$cluster" status); grep -q '^cluster: 1 hosts, .*owner process [0-9]* (ended' <<<"$st" || fail "status does not say the owner ended: $st"
"$cluster" down --orphaned >/dev/null || fail "down --orphaned refused a cluster whose owner ended"
[ "$("$cluster" status 2>&1)" = "cluster: no cluster is up" ] || fail "down --orphaned left: $("$cluster" status 2>&1)"
for owner in "" "--owner $$"; do   # by hand; owned by this test, which runs
  "$cluster" up 1 $owner >/dev/null || fail "up 1 $owner"
  out=$("$cluster" down --orphaned 2>&1) && fail "down --orphaned took down a cluster brought up with '$owner': $out"
  grep -q "not an orphan" <<<"$out" || fail "down --orphaned with '$owner' said: $out"
  st=$("$cluster" status); [ "${st%%,*}" = "cluster: 1 hosts" ] || fail "down --orphaned touched the cluster up with '$owner'"
  "$cluster" down >/dev/null || fail "down after up 1 $owner"
done
trap - EXIT
[ "$("$cluster" status 2>&1)" = "cluster: no cluster is up" ] || fail "left: $("$cluster" status 2>&1)"
echo "ok: an orphan taken down; a cluster by hand and one whose owner runs left as they were"
