#!/usr/bin/env python3
"""Elastic training on mpirun: `scripts/run --elastic` (docs/checkpoints.md, "Elastic restart").

Runs `dtbench run ARGS` on N ranks. When the job ends because a rank died or hung (an exit
status other than 0, 1 — checks failed — or 2 — bad input), it names the rank from the
attempt's report (the watchdog's line: "rank 2 (pid 5474) had exited", "not arrived: rank 0
(pid ...: stopped)") or else from mpirun's own message, takes the survivors (N - 1 ranks: the
lost one is not used again), chooses the largest rank count M <= N - 1 for which dtbench
accepts the config (`--print-config` under mpirun: the layout divides M, the batch divides
the data-parallel size), and runs again on M ranks; the config's `resume_from: "latest"` then
resumes from the newest complete checkpoint, resharded to the new layout. At most
--max-restarts restarts (torchelastic's max_restarts); the hang timeout is the config's
comm_timeout_s (the communication watchdog is the heartbeat).

Across hosts: --launcher names the command that starts the ranks (default: mpirun on this
machine; e.g. 'scripts/cluster mpirun' on the test cluster, or mpirun with a hostfile) and
--hosts the hosts and their slots (HOST:SLOTS,..., Open MPI's --host syntax, passed to the
launcher as --host with the hosts still in use; ranks fill them in order). When the failed
line names a host (mpirun's "... on node dtbh2 exited on signal 9", "Remote daemon: ... on node
dtbh2"; dtbench's "on other nodes, not visible from here: ranks 2,3 on dtbh2" when it names only
one host), or the failed rank's host is known from that placement, the host is dropped: the
restart runs on the other hosts, with the ranks that ran elsewhere (N minus the lost host's),
never on the lost one again.

Each attempt writes its own report, <run-id>-attempt<k>.json; the launcher writes
<run-id>-elastic.json: per attempt the ranks, exit status, the rank that failed and its line,
the report; and where the last attempt resumed. Exit status: the last attempt's (2 when the
config cannot run elastically, before anything runs).
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS=1"]


def refuse(msg):
    print("scripts/run --elastic: " + msg, file=sys.stderr)
    sys.exit(2)


def option(args, name):
    """The value of `name` in dtbench's arguments (`--x v` or `--x=v`), or None."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def without(args, name):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def check_config(path):
    """The train section must save checkpoints and resume from the latest (else a restart
    would start over)."""
    try:
        with open(path) as f:
            train = json.load(f).get("train", {})
    except (OSError, ValueError) as e:
        refuse("cannot read --config %s: %s" % (path, e))
    if not (train.get("checkpoint_dir") and train.get("checkpoint_every", 0) > 0 and train.get("resume_from") == "latest"):
        refuse('the config needs train.checkpoint_dir, train.checkpoint_every > 0 and train.resume_from "latest" '
               "(a restart resumes from the newest checkpoint)")


def failed_rank(report_path, output):
    """(rank, line) naming the rank that died or hung: the report's suite error, else mpirun's."""
    try:
        with open(report_path) as f:
            for s in json.load(f)["suites"]:
                err = s.get("error") or ""
                m = re.search(r"rank (\d+) \(pid \d+(?:\) had exited|: stopped\)|: exited\))", err)
                if m:
                    return int(m.group(1)), err
    except (OSError, ValueError, KeyError):
        pass
    m = re.search(r"process rank (\d+) with PID \d+ on node \S+ exited on signal \d+ \(([^)]*)\)", output) or \
        re.search(r"Process name: \[\[\d+,\d+\],(\d+)\]", output)
    if m:
        return int(m.group(1)), m.group(0)
    return None, "no rank named (the job ended with no rank's error recorded)"


def parse_hosts(text):
    """HOST:SLOTS,... -> [(host, slots)] (a host without :SLOTS has 1 slot); refuses bad input."""
    hosts = []
    for part in text.split(","):
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9.-]*)(?::([1-9][0-9]*))?", part)
        if not m:
            refuse("--hosts: '%s' is not HOST or HOST:SLOTS (e.g. dtbh1:2,dtbh2:2)" % part)
        if m.group(1) in [h for h, _ in hosts]:
            refuse("--hosts: %s is listed twice" % m.group(1))
        hosts.append((m.group(1), int(m.group(2) or 1)))
    return hosts


def placement(hosts, n):
    """The host of each of n ranks when they fill the hosts' slots in order (mpirun's --map-by slot)."""
    out = []
    for h, slots in hosts:
        out += [h] * slots
    return out[:n]


def lost_host(line, rank, hosts, n):
    """The host that `line` (the launcher's output and the failed line) names as lost (the
    launcher's word first), else the failed rank's host in the placement, else None."""
    names = [h for h, _ in hosts]
    for pattern in (r"on node (\S+) exited on signal", r"Remote daemon: \S+ on node (\S+)",
                    r"on other nodes, not visible from here: ranks? [0-9,]+ on ([^\s,;]+)(?:;|$)"):
        m = re.search(pattern, line or "")
        if m and m.group(1) in names:
            return m.group(1)
    where = placement(hosts, n)
    return where[rank] if rank is not None and 0 <= rank < len(where) else None


def accepted(n, dtbench, args, why):
    """Whether dtbench accepts the config on n ranks (validation only, nothing runs, on this
    machine); appends dtbench's refusal to `why`."""
    r = subprocess.run(MPIRUN + ["-np", str(n), dtbench, "run"] + args + ["--print-config"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        said = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("---")]
        why.append("%d ranks: %s" % (n, said[0] if said else "exit %d" % r.returncode))
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--max-restarts", type=int, default=3)
    ap.add_argument("--dtbench", default="build/dtbench", help="the dtbench binary (default build/dtbench)")
    ap.add_argument("--launcher", help="the command that starts the ranks, before -np N (default: %s)" % " ".join(MPIRUN))
    ap.add_argument("--hosts", help="HOST:SLOTS,... to run on; a host whose ranks are lost is not used again")
    ap.add_argument("dtbench_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.dtbench_args if x != "--"]
    if a.np < 1 or a.max_restarts < 0:
        refuse("--np must be >= 1 and --max-restarts >= 0")
    launcher = shlex.split(a.launcher) if a.launcher else MPIRUN
    if not launcher:
        refuse("--launcher is empty")
    hosts = parse_hosts(a.hosts) if a.hosts else None
    if hosts and sum(s for _, s in hosts) < a.np:
        refuse("--hosts: %d slots for --np %d" % (sum(s for _, s in hosts), a.np))
    config = option(args, "--config")
    if not config or not os.path.isfile(config):
        refuse("needs --config FILE (a JSON file with the train section's checkpoint keys)")
    check_config(config)
    out_dir = option(args, "--output-dir") or "results"
    base = option(args, "--run-id") or time.strftime("elastic-%Y%m%d-%H%M%S")
    args = without(without(args, "--run-id"), "--progress")
    os.makedirs(out_dir, exist_ok=True)
    summary = {"run_id": base, "attempts": [], "max_restarts": a.max_restarts}
    n, rc = a.np, 1
    for k in range(a.max_restarts + 1):
        run_id = "%s-attempt%d" % (base, k)
        print("# elastic: attempt %d on %d ranks (%s)" % (k, n, run_id), flush=True)
        where = ["--host", ",".join("%s:%d" % h for h in hosts)] if hosts else []
        p = subprocess.Popen(launcher + where + ["-np", str(n), a.dtbench, "run", "--progress", "off", "--run-id", run_id]
                             + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = []
        for line in p.stdout:
            sys.stdout.write(line)
            output.append(line)
        rc = p.wait()
        report = os.path.join(out_dir, run_id + ".json")
        attempt = {"ranks": n, "exit": rc, "report": report}
        if hosts:
            attempt["hosts"] = sorted(set(placement(hosts, n)), key=[h for h, _ in hosts].index)
        resumed = None
        try:
            with open(report) as f:
                train = [s for s in json.load(f)["suites"] if s["name"] == "train"]
            if train and train[0].get("data", {}).get("checkpoint"):
                ck = train[0]["data"]["checkpoint"]
                resumed = {"from": ck["resumed_from"], "at_step": ck["resumed_at_step"],
                           "resharded_from": ck["resharded_from"]}
        except (OSError, ValueError, KeyError):
            pass
        attempt["resumed"] = resumed
        summary["attempts"].append(attempt)
        if rc in (0, 1, 2):
            break
        rank, line = failed_rank(report, "".join(output))
        attempt["failed_rank"], attempt["error"] = rank, line
        print("# elastic: attempt %d ended (exit %d): %s" % (k, rc, line), flush=True)
        if k == a.max_restarts:
            print("# elastic: no restart left (--max-restarts %d)" % a.max_restarts, flush=True)
            break
        survivors = n - 1
        host = lost_host("".join(output) + "\n" + line, rank, hosts, n) if hosts else None
        if host:
            attempt["lost_host"] = host
            survivors = n - placement(hosts, n).count(host)
            hosts = [h for h in hosts if h[0] != host]
            survivors = min(survivors, sum(s for _, s in hosts))
            print("# elastic: host %s lost; going on with %s" % (host, ",".join(h for h, _ in hosts) or "none"), flush=True)
        why = []
        m = next((c for c in range(survivors, 0, -1) if accepted(c, a.dtbench, args, why)), None)
        if m is None:
            print("# elastic: no rank count up to %d runs this config (%s); stopping" % (survivors, why[0] if why else
                  "none tried"), flush=True)
            break
        print("# elastic: %d ranks left; restarting on %d from the newest checkpoint" % (survivors, m), flush=True)
        n = m
    summary["exit"] = rc
    path = os.path.join(out_dir, base + "-elastic.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print("# elastic: %d attempt(s), exit %d; %s" % (len(summary["attempts"]), rc, path), flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
