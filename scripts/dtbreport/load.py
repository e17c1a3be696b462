"""Loading the inputs of scripts/report.py: a run report, a `dtbench validate` report, a claims file, a trace.

Each loader refuses bad input with InputError (one line; the CLI exits 2); none renders anything.
"""
import json
import math
from pathlib import Path


class InputError(Exception):
    """Bad input: the message is printed on one line and the exit status is 2."""


def check_verdict(c):
    """A report check's outcome: its "verdict" (passed, failed or not_judged: a timing check that the machine's
    other work kept from being judged, which fails nothing; docs/report.md), or, in a report written before
    verdicts (schema version < 6), passed or failed by its "passed"."""
    v = c.get("verdict")
    return v if v in ("passed", "failed", "not_judged") else ("passed" if c.get("passed") else "failed")


class StrictJSONError(ValueError):
    """Text that is JSON only to Python's lenient parser (the message says why, in one line)."""


def _no_constant(name):
    raise StrictJSONError(f"{name} is not JSON (dtbench writes null for a non-finite number)")


def _finite_float(text):
    x = float(text)
    if x in (float("inf"), float("-inf")):
        raise StrictJSONError(f"the number {text[:24]} overflows a double")
    return x


def _bounded_int(text):
    if len(text.lstrip("-")) > 300:  # beyond any double: float() of it would overflow
        raise StrictJSONError(f"the integer {text[:20]}... is out of range")
    return int(text)


def _unique_keys(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise StrictJSONError(f"key '{k[:40]}' appears twice in one object (JSON keeps only one of them)")
        d[k] = v
    return d


def parse_strict(text):
    """JSON as dtbench writes it and its C++ reader accepts it: no NaN or Infinity literal, no number beyond a
    double (1e999), no key twice in one object. Every report reader in scripts/ parses through it. Raises
    StrictJSONError for those, json.JSONDecodeError for malformed JSON (with its line and column), and
    StrictJSONError for nesting too deep."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int,
                          object_pairs_hook=_unique_keys)
    except RecursionError:
        raise StrictJSONError("nests too deep to be a dtbench file") from None


def load_json(path, what):
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} '{path}' does not exist")
    if p.is_dir():
        raise InputError(f"{what} '{path}' is a directory")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {what} '{path}': {e}")
    try:
        return parse_strict(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{what} '{path}' is not valid JSON ({e})")
    except StrictJSONError as e:
        raise InputError(f"{what} '{path}' is not valid JSON ({e})")


def load_report(path, r=None):
    """A dtbench run report (results/<run-id>.json): takes its path and, when already loaded, its JSON value r;
    returns r. Raises InputError (one line) when it is not an object with context, suites, checks and
    benchmarks."""
    if r is None:
        r = load_json(path, "report")
    if not isinstance(r, dict):
        raise InputError(f"report '{path}' is not a dtbench report (a JSON object with context, suites, "
                         f"checks and benchmarks)")
    missing = [k for k in ("context", "suites", "checks", "benchmarks") if k not in r]
    if missing:
        raise InputError(f"report '{path}' is not a dtbench report: no {', '.join(missing)}")
    for k, t in (("context", dict), ("suites", list), ("checks", list), ("benchmarks", list)):
        if not isinstance(r[k], t):
            raise InputError(f"report '{path}': '{k}' must be a JSON {'object' if t is dict else 'array'}")
    for i, s in enumerate(r["suites"]):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise InputError(f"report '{path}': suites[{i}] has no name")
    for i, b in enumerate(r["benchmarks"]):
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            raise InputError(f"report '{path}': benchmarks[{i}] has no name")
    for i, c in enumerate(r["checks"]):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise InputError(f"report '{path}': checks[{i}] has no name")
        if c.get("suite") is not None and not isinstance(c["suite"], str):
            raise InputError(f"report '{path}': checks[{i}] ({c['name'][:80]}): 'suite' must be a string")
    return r


CLAIM_FIELDS = ("claim", "conditions", "predicted", "computed", "measured", "verdict", "why")


def load_claims(path):
    """The JSON of `dtbench claims --output FILE`: {"kind": "claims", "version": 1, "catalog", "report",
    "claims": [{"id", "claim", "conditions", "method", "predicted", "computed", "measured", "verdict", "why",
    "values"}...]}."""
    c = load_json(path, "claims file")
    if not isinstance(c, dict) or c.get("kind") != "claims":
        raise InputError(f"claims file '{path}' is not the output of `dtbench claims --output FILE` "
                         f"(a JSON object with \"kind\": \"claims\")")
    if not isinstance(c.get("claims"), list):
        raise InputError(f"claims file '{path}': 'claims' must be a JSON array")
    for i, e in enumerate(c["claims"]):
        if not isinstance(e, dict):
            raise InputError(f"claims file '{path}': claims[{i}] is not a JSON object")
        if isinstance(e.get("id"), bool) or not isinstance(e.get("id"), int):
            raise InputError(f"claims file '{path}': claims[{i}] has no integer id")
        bad = [k for k in CLAIM_FIELDS if not isinstance(e.get(k), str)]
        if bad:
            raise InputError(f"claims file '{path}': claim {e['id']} has no {', '.join(bad)} (strings)")
    for k in ("catalog", "report"):
        if c.get(k) is not None and not isinstance(c[k], str):
            raise InputError(f"claims file '{path}': '{k}' must be a string or null")
    return c


def is_validate(obj):
    """True when a loaded JSON value is the report of `dtbench validate` (an object with "kind": "validate")."""
    return isinstance(obj, dict) and obj.get("kind") == "validate"


def load_validate(path, v=None):
    """The JSON report of `dtbench validate` (`--output`, default results/validate.json): {"kind": "validate",
    "version": 1, "level", "levels_run", "injected_fault", "expect", "emulated_ranks_per_node", "world_size",
    "duration_s", "inventory": [{"rank", "node", ...}...], "checks": [{"name", "status", "detail", "nodes",
    "ranks", "values"}...], "nodes": [{"node", "ranks", "accepted", "violations": [{"check", "status", "detail",
    "values"}...]}...], "verdict", "exit_status"}, optionally with "rules" and "baseline". Takes the path and,
    when already loaded, its JSON value v; returns v. Raises InputError (one line) when "checks" or "nodes" is
    missing or not an array of objects with a name, a check has no status, a node's violations, the inventory
    or the rules are not arrays of objects, or the verdict is not a string; keys it does not know are left
    alone."""
    if v is None:
        v = load_json(path, "validate report")
    if not is_validate(v):
        raise InputError(f"validate report '{path}' is not the output of `dtbench validate` "
                         f"(a JSON object with \"kind\": \"validate\")")
    missing = [k for k in ("checks", "nodes") if k not in v]
    if missing:
        raise InputError(f"validate report '{path}' is not a complete `dtbench validate` report: "
                         f"no {', '.join(missing)}")
    for k in ("checks", "nodes"):
        if not isinstance(v[k], list):
            raise InputError(f"validate report '{path}': '{k}' must be a JSON array")
    for i, c in enumerate(v["checks"]):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise InputError(f"validate report '{path}': checks[{i}] has no name")
        if not isinstance(c.get("status"), str):
            raise InputError(f"validate report '{path}': check {c['name']} has no status (a string)")
    for i, n in enumerate(v["nodes"]):
        if not isinstance(n, dict) or not isinstance(n.get("node"), str):
            raise InputError(f"validate report '{path}': nodes[{i}] has no node name")
        viol = n.get("violations", [])
        if not isinstance(viol, list) or not all(isinstance(x, dict) for x in viol):
            raise InputError(f"validate report '{path}': node {n['node']}: 'violations' must be a JSON array of "
                             f"objects")
    for k in ("inventory", "rules"):
        if v.get(k) is not None and (not isinstance(v[k], list) or not all(isinstance(x, dict) for x in v[k])):
            raise InputError(f"validate report '{path}': '{k}' must be a JSON array of objects")
    if v.get("verdict") is not None and not isinstance(v["verdict"], str):
        raise InputError(f"validate report '{path}': 'verdict' must be a string")
    return v


def load_trace(path):
    t = load_json(path, "trace")
    events = t.get("traceEvents") if isinstance(t, dict) else t
    if not isinstance(events, list):
        raise InputError(f"trace '{path}' is not a Chrome trace (an object with traceEvents, or an array)")
    spans = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            span = {"rank": int(e.get("tid", 0)), "name": str(e["name"]), "ts": float(e["ts"]),
                    "dur": float(e.get("dur", 0.0)), "step": int((e.get("args") or {}).get("step", 0))}
        except (KeyError, TypeError, ValueError, OverflowError):
            raise InputError(f"trace '{path}': a complete event ('ph': 'X') lacks a numeric ts, dur or name")
        if not (math.isfinite(span["ts"]) and math.isfinite(span["dur"]) and span["dur"] >= 0):
            raise InputError(f"trace '{path}': a complete event ('ph': 'X') has a ts or dur that is not a finite "
                             f"number (dur >= 0)")
        spans.append(span)
    return spans
