"""Runs of the gate: one `dtbench run` of a side (baseline or candidate) under mpirun, as scripts/run starts
it, and N pairs of them interleaved A B, B A, A B, ... so that each pair's two runs sit next to each other in
time and neither side always goes first (a drift in the machine's speed would otherwise favour one side).
"""
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import GateError


@dataclass
class Side:
    """One side of the comparison: its name ("baseline", "candidate"), the dtbench binary, what it was built
    from (a ref and commit, or "working tree"), and extra environment (the test-only DTB_INJECT_SLOWDOWN)."""
    name: str
    binary: Path
    label: str
    env: dict = field(default_factory=dict)


class CandidateFailed(Exception):
    """The candidate's run failed where the baseline's did not: a regression (exit 1), one line."""


def run_env(extra):
    e = dict(os.environ)
    e.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OPENBLAS_NUM_THREADS": "1"})
    e.update(extra)
    return e


def run_once(side, config, np_, out_dir, run_id, timeout_s=600):
    """Runs side.binary's `dtbench run --config CONFIG` on np_ ranks into out_dir/run_id.json. Returns
    (exit status, the report or None, the last line of stderr)."""
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS=1"]
    for k in side.env:
        cmd += ["-x", k]
    cmd += [str(side.binary), "run", "--config", str(config), "--output-dir", str(out_dir), "--run-id", run_id,
            "--progress", "off"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=run_env(side.env), timeout=timeout_s)
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = 124, f"timed out after {timeout_s} s " + (e.stderr.decode(errors='replace') if e.stderr else "")
    except FileNotFoundError:
        raise GateError("mpirun not found (scripts/setup installs Open MPI)") from None
    path = Path(out_dir) / f"{run_id}.json"
    report = None
    if path.exists():
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            report = None
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning: DTB_INJECT_SLOWDOWN" not in ln]
    return rc, report, (lines[-1].strip() if lines else "")


def _failed_suites(report):
    return [s.get("name") for s in (report or {}).get("suites", []) if s.get("status") in ("failed", "error")]


def check_run(side, rc, report, last_err):
    """Raises GateError (the runs cannot be compared) or CandidateFailed for a run that did not succeed."""
    if rc == 2:  # refused input: the config or an option is not this revision's
        raise GateError(f"the {side.name} ({side.label}) refused the run: {last_err or 'exit 2'}")
    if rc == 0 and report is not None:
        return
    why = f"exit {rc}" + (f", suites {', '.join(_failed_suites(report))} failed" if _failed_suites(report) else "") + \
          ("" if report is not None else ", no report") + (f": {last_err}" if last_err else "")
    if side.name == "candidate":
        raise CandidateFailed(f"the candidate's run failed ({why})")
    raise GateError(f"the baseline's run failed ({why}): nothing to compare the candidate with")


def interleaved(sides, rounds, config, np_, out_dir, progress=print, timeout_s=600):
    """`rounds` rounds over `sides` (a list), each side once per round, the order rotated from round to round
    (for two sides: A B, B A, A B, ...). Returns {side name: [report per round]}. Each run is checked
    (check_run) as it ends, so a failure stops the rounds at once."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = {s.name: [] for s in sides}
    t0 = time.time()
    for i in range(rounds):
        order = sides[i % len(sides):] + sides[:i % len(sides)]
        for s in order:
            rc, rep, err = run_once(s, config, np_, out_dir, f"{s.name}-{i:03d}", timeout_s)
            check_run(s, rc, rep, err)
            reports[s.name].append(rep)
        progress(f"gate: round {i + 1}/{rounds} done ({time.time() - t0:.0f} s)")
    return reports
