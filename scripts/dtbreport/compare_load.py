"""compare.py's inputs: a report loaded and checked for the fields compare.py reads, and whether two
reports may be compared (their contexts and the config sections of the suites they share).

Refusals are InputError (one line, exit 2) or (field, base, new) triples; nothing here compares metrics.
"""
import json
import math
import os

from . import registry
from .compare_stats import is_number
from .load import StrictJSONError, parse_strict

# Context: fields that make two reports incompatible (refused without --force), and fields
# noted when they differ. The config is compared separately (its name, the sections of the
# suites compared, and its top-level keys but these).
REFUSE_CONTEXT = ("backend", "comm_backend", "devices", "world_size", "injected_slowdown")
NOTE_CONTEXT = ("host_name", "num_cpus", "ranks_per_node", "build_type", "dtbench_version", "mpi_version",
                "blas_version", "cuda_version", "nccl_version")
CONFIG_NOT_COMPARED = {"name", "description", "output_dir", "comm_timeout_s", "suites", "backend"}


class InputError(Exception):
    """Bad input: exit 2 with this one-line message."""


MAX_REPORT_BYTES = 1 << 30


def load_report(path):
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file")
    if os.path.getsize(path) > MAX_REPORT_BYTES:
        raise InputError(f"{path}: larger than {MAX_REPORT_BYTES >> 20} MiB, not a dtbench report")
    try:
        with open(path, encoding="utf-8") as f:
            report = parse_strict(f.read())
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except StrictJSONError as e:
        raise InputError(f"{path}: malformed JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise InputError(f"{path}: not a dtbench report (no benchmarks[] list)")
    for key, kind in (("checks", list), ("suites", list), ("context", dict)):
        if key in report and not isinstance(report[key], kind):
            raise InputError(f"{path}: not a dtbench report ({key} is not a {kind.__name__})")
    for key in ("config", "dataset"):
        if key in report.get("context", {}) and not isinstance(report["context"][key], (dict, type(None))):
            raise InputError(f"{path}: not a dtbench report (context.{key} is not an object)")
    for i, s in enumerate(report.get("suites", [])):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise InputError(f"{path}: suites[{i}] has no name")
    for i, b in enumerate(report["benchmarks"]):
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            raise InputError(f"{path}: benchmarks[{i}] has no name")
    for i, c in enumerate(report.get("checks", [])):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not isinstance(c.get("passed"), bool):
            raise InputError(f"{path}: checks[{i}] has no name or no boolean passed")
        if c.get("suite") is not None and not isinstance(c["suite"], str):
            raise InputError(f"{path}: checks[{i}] ({c['name']}).suite must be a string")
        if "verdict" in c and (c["verdict"] not in ("passed", "failed", "not_judged")
                               or c["passed"] != (c["verdict"] == "passed")):
            raise InputError(f"{path}: checks[{i}] ({c['name']}).verdict must be passed, failed or not_judged, "
                             f"passed exactly when it is passed (got {short_value(c['verdict'])} with passed "
                             f"{json.dumps(c['passed'])})")
        for k in ("value", "tolerance", "fraction_of_tolerance"):
            if c.get(k) is not None and not is_number(c[k]):
                raise InputError(f"{path}: checks[{i}] ({c['name']}).{k} must be a number or null")
    suites = ((report.get("context") or {}).get("config") or {}).get("suites")
    if suites is not None and (not isinstance(suites, list) or not all(isinstance(x, str) for x in suites)):
        raise InputError(f"{path}: context.config.suites must be a list of suite names")
    for i, b in enumerate(report["benchmarks"]):
        _check_record(path, i, b)
    return report


def _check_record(path, i, b):
    """The fields compare.py reads of record i: time_unit a string, each metric of its suite a number (null
    allowed), a timing object of numbers or a list of numbers. A string where a number belongs was dropped from
    the table without a word. The sign is not judged: some times are paired differences (checkpoint's
    save_cost_ms), which noise can put below 0 in a real report. Errors: InputError naming the field."""
    where = f"{path}: benchmarks[{i}] ({b['name'][:80]})"
    if b.get("time_unit") is not None and not isinstance(b["time_unit"], str):
        raise InputError(f"{where}.time_unit must be a string")
    metrics = registry.metrics(b["name"].split("/", 1)[0])
    for field in metrics:
        if field not in b or b[field] is None:
            continue
        v = b[field]
        if isinstance(v, dict):  # a timing object: {n, median, mean, ..., samples}
            values = [v[k] for k in ("median", "mean", "min", "max", "stddev", "p10", "p90") if v.get(k) is not None]
            samples = v.get("samples") or []
            values += samples if isinstance(samples, list) else [samples]
        else:
            values = v if isinstance(v, list) else [v]
        if not all(is_number(x) for x in values):
            raise InputError(f"{where}.{field} must be a number"
                             f"{', or a timing object or list of them' if isinstance(v, (dict, list)) else ''}"
                             f", got {json.dumps(v)[:40]}")


def _flat_diff(a, b, prefix, out):
    """Appends (path, a, b) for every leaf where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _flat_diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}.{k}", out)
    elif a != b:
        out.append((prefix, a, b))


def suite_names(report):
    names = [s.get("name") for s in report.get("suites", []) if isinstance(s, dict)]
    if not names:
        names = ((report.get("context") or {}).get("config") or {}).get("suites") or []
    return {n for n in names if isinstance(n, str)}


def compatibility(base, new, allow=()):
    """(refusals, notes): lists of (field, base value, new value). Context fields in `allow` differ as a note
    (the A/B gate's own injected slowdown)."""
    bc, nc = base.get("context", {}) or {}, new.get("context", {}) or {}
    refuse, notes = [], []
    for k in REFUSE_CONTEXT:
        if bc.get(k) != nc.get(k):
            (notes if k in allow else refuse).append((k, bc.get(k), nc.get(k)))
    for k in NOTE_CONTEXT:
        if bc.get(k) != nc.get(k):
            notes.append((k, bc.get(k), nc.get(k)))
    bd, nd = bc.get("dataset") or {}, nc.get("dataset") or {}
    if bd.get("sha256") != nd.get("sha256"):
        notes.append(("dataset.sha256", bd.get("sha256"), nd.get("sha256")))
    bcfg, ncfg = bc.get("config") or {}, nc.get("config") or {}
    if bcfg.get("name") != ncfg.get("name"):
        refuse.append(("config.name", bcfg.get("name"), ncfg.get("name")))
    compared = suite_names(base) & suite_names(new)
    sections = set(registry.suites()) | suite_names(base) | suite_names(new)
    diffs = []
    for k in sorted(set(bcfg) | set(ncfg)):
        if k in CONFIG_NOT_COMPARED or (k in sections and k not in compared):
            continue
        _flat_diff(bcfg.get(k, "<absent>"), ncfg.get(k, "<absent>"), f"config.{k}", diffs)
    # A key that one report lacks (added by a later dtbench) set to its off value in the
    # other ("", 0, false, null, "none") configures nothing: a note, not a refusal.
    for d in diffs:
        (notes if _absent_and_off(d[1], d[2]) else refuse).append(d)
    return refuse, notes


def parse_suite_thresholds(items):
    """{suite: relative threshold} of --suite-threshold SUITE=REL options; InputError for a malformed one."""
    out = {}
    for item in items:
        name, eq, val = item.partition("=")
        try:
            rel = float(val)
        except ValueError:
            rel = math.nan
        if not eq or not name or not (rel >= 0 and math.isfinite(rel)):
            raise InputError(f"--suite-threshold wants SUITE=REL with REL a finite number >= 0, got '{item}'")
        out[name] = rel
    return out


def _absent_and_off(a, b):
    """True when one of a, b is "<absent>" and the other an off value (an empty list too: a key such as
    conformance.fp8 that a report of an older dtbench lacks, at its default of no rows)."""
    off = lambda v: (v is None or v is False or v == "" or v == "none" or (is_number(v) and v == 0)
                     or (isinstance(v, list) and not v))
    return (a == "<absent>" and off(b)) or (b == "<absent>" and off(a))


def short_value(v, width=40):
    """v as one line of at most `width` characters (JSON for a non-string; '...' where cut), for notes."""
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= width else s[: width - 3] + "..."


def describe(diffs):
    return "; ".join(f"{f} {short_value(a)} vs {short_value(b)}" for f, a, b in diffs)
