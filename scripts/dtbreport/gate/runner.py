"""Runs of the gate: one `dtbench run` of a side (baseline or candidate) under mpirun, as scripts/run starts
it; a preflight of both sides on the config; and N pairs of runs interleaved A B, B A, A B, ... so that each
pair's two runs sit next to each other in time and neither side always goes first (a drift in the machine's
speed would otherwise favour one side).

Children run in a session of their own, so that an interrupt of the gate (SIGINT, SIGTERM: a CI job
cancelled) ends them too: Interrupted is raised, the child's process group is killed, and the caller's
`finally` clauses run.
"""
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import GateError
from ..compare_load import InputError, load_report


@dataclass
class Side:
    """One side of the comparison: its name ("baseline", "candidate"), the dtbench binary, what it was built
    from (a ref and commit, or "working tree"), and extra environment (the test-only DTB_INJECT_SLOWDOWN)."""
    name: str
    binary: Path
    label: str
    env: dict = field(default_factory=dict)
    quiet_env: dict = field(default_factory=dict)  # set for its runs, not shown (GIT_CEILING_DIRECTORIES)

    def environment(self):
        return {**self.quiet_env, **self.env}


class CandidateFailed(Exception):
    """The candidate's run failed where the baseline's did not: a regression (exit 1), one line."""


class Interrupted(Exception):
    """The gate was interrupted (SIGINT or SIGTERM): neither a regression nor a comparison."""

    def __init__(self, signum):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


# The children under way, of every thread: an interrupt ends them all (a thread's own wait then returns).
_LIVE = set()


def _raise_interrupted(signum, _frame):
    for p in list(_LIVE):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    raise Interrupted(signum)


def install_interrupt_handlers():
    """SIGINT and SIGTERM raise Interrupted in the main thread (so `finally` clauses run)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _raise_interrupted)


def run_env(extra):
    e = dict(os.environ)
    e.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OPENBLAS_NUM_THREADS": "1"})
    e.update(extra)
    return e


def run_child(cmd, env, timeout_s, cwd=None):
    """(exit status, stdout, stderr) of cmd in a session of its own; killed with its group on timeout (124)
    or when Interrupted. A status < 0 is a signal's number, negated (subprocess's convention)."""
    try:
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             errors="replace", env=env, cwd=cwd, start_new_session=True)
    except FileNotFoundError:
        raise GateError(f"{cmd[0]} not found" + (" (scripts/setup installs Open MPI; is PATH set by --base-env or "
                                                  "--candidate-env?)" if cmd[0] == "mpirun" else "")) from None
    _LIVE.add(p)
    try:
        out, err = p.communicate(timeout=timeout_s)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        _kill_group(p)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a grandchild outside the group holds the pipes
            out, err = "", ""
        return 124, out, (err or "") + f"\ntimed out after {timeout_s} s"
    except BaseException:
        _kill_group(p)
        raise
    finally:
        _LIVE.discard(p)


def _kill_group(p):
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 3)):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def message(stderr):
    """The line of a child's stderr that says why it stopped: dtbench's own 'error:' line when there is one
    (mpirun prints its banners after it), else the last line that is not a rule of dashes, an mpirun banner
    or a valgrind line."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "dtbench: error:" in ln or ln.startswith("compare.py") or "error:" in ln.lower():
            return ln[:300]
    noise = ("---", "===", "mpirun", "Primary job", "prterun", "==", "--", "a non-zero exit code", "Process name",
             "Exit code", "process returned", "exited on signal", "This may have caused")
    for ln in reversed(lines):
        if not ln.startswith(noise) and "DTB_INJECT_SLOWDOWN" not in ln and "Per user-direction" not in ln:
            return ln[:300]
    return ""


def describe_status(rc):
    if rc < 0:
        return f"killed by {signal.Signals(-rc).name}" if -rc in signal.valid_signals() else f"signal {-rc}"
    if rc > 128 and rc - 128 in signal.valid_signals():
        return f"exit {rc} ({signal.Signals(rc - 128).name})"
    return f"exit {rc}"


def mpirun_cmd(side, np_, args):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS=1"]
    for k in side.environment():
        cmd += ["-x", k]
    return cmd + [str(side.binary), *args]


# Top-level keys of a filled-in config that do not change what a run measures: its names, where its report goes,
# and the watchdog's timeout (compare_load.CONFIG_NOT_COMPARED says the same of two reports).
CONFIG_NOT_MEASURED = ("name", "description", "output_dir", "comm_timeout_s")
ABSENT = "<absent>"  # a key the side's filled-in config lacks


def _print_config(side, config, np_, timeout_s, printed):
    """The config as `side` fills it in (dtbench run --print-config) and the suites its binary has (dtbench list)."""
    rc, out, err = run_child(mpirun_cmd(side, np_, ["run", "--config", config, "--print-config"]),
                             run_env(side.environment()), timeout_s)
    if rc != 0:
        why = f"{describe_status(rc)}: {message(err) or 'no message'}"
        if "DTB_INJECT_SLOWDOWN" in why:  # the test knob given to the gate is malformed: bad input
            raise GateError(f"the {side.name}'s runs refuse their environment ({why})")
        if side.name == "candidate" and printed:
            raise CandidateFailed(f"the candidate fails on the config its baseline accepts ({why})")
        raise GateError(f"the {side.name} ({side.label}) refuses the config {config} ({why})")
    try:
        filled = json.loads(out[out.index("{"):])
    except ValueError:
        raise GateError(f"the {side.name} ({side.label}) printed no config for --print-config: is it a "
                        "dtbench?") from None
    rc, out, err = run_child(mpirun_cmd(side, 1, ["list"]), run_env(side.environment()), timeout_s)
    if rc != 0:
        raise GateError(f"the {side.name} ({side.label}) cannot list its suites ({describe_status(rc)}: "
                        f"{message(err) or 'no message'})")
    text = out.split("suites:", 1)[-1].split("\nconfigs", 1)[0]
    suites = {ln.split()[0] for ln in text.splitlines() if ln.startswith("  ") and ln.split()}
    return filled, suites


def preflight(base, cand, config, np_, timeout_s=120):
    """Both sides validate the config at np_ ranks without measuring (dtbench run --print-config): the
    baseline refusing it, or both, is GateError (the runs cannot be compared); the candidate alone refusing
    what its baseline accepts is CandidateFailed. The two configs as filled in (defaults included) must agree
    where the runs measure (config_differences): a key both sides have with different values there is
    GateError naming each such key and its two values. Returns config_differences' other two lists, to be
    listed: {"ignored": [...], "added": [...]}, each [(dotted key, baseline's value, candidate's value)]."""
    printed, suites = {}, set()
    for side in (base, cand):
        printed[side.name], have = _print_config(side, config, np_, timeout_s, printed)
        suites |= have
    diff = config_differences(printed[base.name], printed[cand.name], suites)
    if diff["measured"]:
        raise GateError("the baseline and the candidate fill in the config differently where the gate measures ("
                        + ", ".join(f"{k}: {short_value(x)} vs {short_value(y)}" for k, x, y in diff["measured"][:6])
                        + (", ..." if len(diff["measured"]) > 6 else "") + "): their runs would not measure the same "
                        "thing; to compare them, set the key in the gate's config (both sides then run its value)")
    return {"ignored": diff["ignored"], "added": diff["added"]}


def config_differences(base, cand, suite_names):
    """The keys two filled-in configs (dtbench run --print-config) fill in differently, as {"measured",
    "ignored", "added"}: lists of (dotted key, baseline's value, candidate's value, ABSENT where a side lacks
    the key). suite_names: the suites either binary has.
    - ignored: differences in the sections of suites the config does not run (its "suites") and in
      CONFIG_NOT_MEASURED: they cannot change what the runs measure;
    - added: keys one side lacks, where the runs measure, at a value that is not "off" (None, False, "", "none",
      0; at an off value they are dropped): a setting the candidate adds or removes is its code, measured as
      part of the change (the baseline could not be given it);
    - measured: every other difference (a key both sides have, in a run suite's section or the model, seed,
      data, backend): the runs would not measure the same thing."""
    run = set(base.get("suites") or []) | set(cand.get("suites") or [])
    out = {"measured": [], "ignored": [], "added": []}
    for key in sorted(set(base) | set(cand)):
        if key in CONFIG_NOT_MEASURED:
            continue
        for d in _leaf_differences(key, base.get(key, ABSENT), cand.get(key, ABSENT)):
            out["ignored" if key in suite_names and key not in run else
                "added" if ABSENT in d[1:] else "measured"].append(d)
    return out


def _leaf_differences(path, a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in _leaf_differences(f"{path}.{k}", a.get(k, ABSENT), b.get(k, ABSENT))]
    if a == b or (a == ABSENT and _off(b)) or (b == ABSENT and _off(a)):
        return []
    return [(path, a, b)]


def _off(v):
    if isinstance(v, dict):
        return all(_off(x) for x in v.values())
    return v is None or v is False or v == "" or v == "none" or v == 0


def short_value(v):
    """A config value for a message: "absent" for ABSENT, else its JSON, cut at 40 characters."""
    text = "absent" if v == ABSENT else json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def run_once(side, config, np_, out_dir, run_id, timeout_s=600):
    """Runs side.binary's `dtbench run --config CONFIG` on np_ ranks into out_dir/run_id.json (removed first,
    so that a report left by an earlier run is never read). Returns (exit status, the report or None, why
    it is None or the run failed: one line)."""
    path = Path(out_dir) / f"{run_id}.json"
    path.unlink(missing_ok=True)
    rc, _, err = run_child(mpirun_cmd(side, np_, ["run", "--config", config, "--output-dir", out_dir, "--run-id",
                                                  run_id, "--progress", "off"]), run_env(side.environment()), timeout_s)
    report, why = None, message(err)
    if path.exists():
        try:
            report = load_report(str(path))
        except InputError as e:
            why = f"an unreadable report: {e}"
    elif rc == 0:
        why = "it wrote no report"
    return rc, report, why


def _failed_suites(report):
    return [s.get("name") for s in (report or {}).get("suites", []) if isinstance(s, dict) and
            s.get("status") in ("failed", "error")]


def check_run(side, rc, report, why):
    """Raises GateError (the runs cannot be compared) or CandidateFailed for a run that did not succeed."""
    if rc == 0 and report is not None:
        return
    failed = _failed_suites(report)
    what = describe_status(rc) + (f", suites {', '.join(failed)} failed" if failed else "") + \
        ("" if report is not None else ", no readable report") + (f": {why}" if why else "")
    if side.name == "candidate":
        raise CandidateFailed(f"the candidate's run failed ({what})")
    raise GateError(f"the {side.name}'s run failed ({what}): nothing to compare the candidate with")


def interleaved(sides, rounds, config, np_, out_dir, progress=print, timeout_s=600, after_first=None, order=None):
    """`rounds` rounds over `sides` (a list), each side once per round, in the order order(i) gives (a
    permutation of sides; default: rotated from round to round, for two sides A B, B A, A B, ...). Returns
    {side name: [report per round]}. Each run is checked (check_run) as it ends, so a failure stops the rounds
    at once; after_first(reports) is called after the first round (e.g. to refuse incompatible reports
    before measuring more)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = {s.name: [] for s in sides}
    t0 = time.time()
    for i in range(rounds):
        for s in (order(i) if order else sides[i % len(sides):] + sides[:i % len(sides)]):
            rc, rep, why = run_once(s, config, np_, out_dir, f"{s.name}-{i:03d}", timeout_s)
            check_run(s, rc, rep, why)
            reports[s.name].append(rep)
        if i == 0 and after_first:
            after_first(reports)
        progress(f"gate: round {i + 1}/{rounds} done ({time.time() - t0:.0f} s)")
    return reports
