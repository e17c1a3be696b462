"""The comparison of two loaded reports: records matched by name (and their distinguishing parameters
where a name repeats), each metric's row (registry.metrics(): direction, source of its samples), the
checks and suites that passed in BASE and not in NEW (a check not judged in NEW, a timing check on a busy
machine, is listed apart and is neither).

Returns plain dicts; compare_output.py prints them.
"""
import json
import math
from collections import defaultdict

from . import registry
from .compare_load import short_value
from .compare_stats import is_number, is_timing, significance, verdict, worse_by
from .load import check_verdict
from .metrics import INFO, LOWER

# Parameters that may legitimately differ between two runs of the same code (the timing loop
# picks its own iteration count, cpu_time follows real_time).
_PARAMS_NOT_NOTED = {"iterations", "cpu_time", "losses", "loss_scales", "step_breakdown_ms", "skip_message",
                     "fp8_scales", "fp8_census"}

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def record_keys(base_records, new_records):
    """Keys for both reports' records: the name, plus the distinguishing parameters where a
    name is not unique in either report (the same fields on both sides, so keys match).
    Returns (base {key: record}, new {key: record}, notes)."""
    notes = []
    groups = [defaultdict(list), defaultdict(list)]
    for g, records in zip(groups, (base_records, new_records)):
        for r in records:
            g[r["name"]].append(r)
    dup_fields = {}
    for name in set(groups[0]) | set(groups[1]):
        recs = [groups[0].get(name, []), groups[1].get(name, [])]
        if max(len(recs[0]), len(recs[1])) < 2:
            continue
        fields = set()
        for rs in recs:
            metrics = registry.metrics(name.split("/", 1)[0])
            for k in {k for r in rs for k in r}:
                if k in metrics or k in ("name", "run_name", "cpu_time", "iterations"):
                    continue
                vals = [json.dumps(r.get(k), sort_keys=True) for r in rs]
                if len(set(vals)) > 1 and all(not isinstance(r.get(k), (float, dict, list)) for r in rs):
                    fields.add(k)
        dup_fields[name] = sorted(fields)
        notes.append(f"record name {name} is not unique; matched by name and {', '.join(sorted(fields)) or 'order'}")
    out = []
    for g in groups:
        keyed = {}
        for name, recs in g.items():
            for r in recs:
                key = name
                if dup_fields.get(name):  # no parameter tells the copies apart: NAME, NAME#2, ... by order
                    key += "{" + ",".join(f"{k}={r.get(k)}" for k in dup_fields[name]) + "}"
                base_key, i = key, 1
                while key in keyed:
                    i += 1
                    key = f"{base_key}#{i}"
                keyed[key] = r
        out.append(keyed)
    return out[0], out[1], notes


def copy_stem(key, other_keys):
    """The key of the copy `key` is matched with on the other side, where its name repeats more often on this
    side than on that one: record_keys numbers a name's further copies that no parameter tells apart
    (NAME#2, NAME#3, ...), and such a copy that the other side lacks is compared with the other side's copy of
    NAME (or NAME{fields}), as the same measurement made again. Returns that key, or None where `key` is not
    such a copy or the other side has no record to compare it with. A copy left unmatched was never compared:
    a second copy of a record three times slower passed as "new"."""
    stem, sep, n = key.rpartition("#")
    if not sep or not n.isdigit() or key in other_keys:
        return None
    return stem if stem in other_keys else None


def check_keys(checks):
    names = defaultdict(int)
    for c in checks:
        names[c["name"]] += 1
    keyed = {}
    for c in checks:
        key = c["name"] if names[c["name"]] == 1 else f"{c.get('suite', '?')}:{c['name']}"
        base_key, i = key, 1
        while key in keyed:
            i += 1
            key = f"{base_key}#{i}"
        keyed[key] = c
    return keyed


def metric_rows(key, b, n, threshold, alpha):
    """Rows for the metrics of one matched record pair."""
    metrics, parameters = registry.metrics(str(n.get("name", key)).split("/", 1)[0]), registry.parameters()
    rows = []
    timing_medians = {k: v["median"] for k, v in b.items() if k in metrics and is_timing(v)}

    def add(metric, direction, bval, nval, bt, nt, unknown=False, note=""):
        test, p, n1, n2 = ("-", None, None, None) if direction == INFO else significance(bt, nt, alpha)
        w = worse_by(direction if direction != INFO else LOWER, bval, nval)
        change = (nval - bval) / abs(bval) if bval else (0.0 if nval == bval else math.inf)
        v, regression = verdict(direction, w, test, p, threshold, alpha)
        rows.append({"record": key, "metric": metric, "direction": direction, "base": bval, "new": nval,
                     "change": change, "worse_by": None if direction == INFO else w, "test": test,
                     "p_value": p, "n_base": n1, "n_new": n2, "verdict": v, "regression": regression,
                     "unknown_field": unknown, "note": note})

    for field in sorted(set(b) & set(n), key=lambda f: (f != "real_time", f)):
        bv, nv = b[field], n[field]
        if field in parameters:
            continue
        spec = metrics.get(field)
        if spec is None:  # unknown: numbers (and timing medians) as info, never gated
            if is_number(bv) and is_number(nv):
                add(field, INFO, float(bv), float(nv), None, None, unknown=True)
            elif is_timing(bv) and is_timing(nv):
                add(field + " (median)", INFO, bv["median"], nv["median"], None, None, unknown=True)
            continue
        direction, source = spec.direction, spec.source
        if field == "real_time":
            if not (is_number(bv) and is_number(nv)):
                continue
            bu, nu = TIME_UNITS.get(b.get("time_unit"), 1.0), TIME_UNITS.get(n.get("time_unit"), 1.0)
            nv_in_base_unit = nv * nu / bu
            # Shown once: the timing object whose median it is stands for it.
            if any(math.isclose(bv, m, rel_tol=1e-9) for m in timing_medians.values()):
                continue
            add(f"real_time ({b.get('time_unit', '?')})", direction, float(bv), float(nv_in_base_unit), None, None)
        elif is_timing(bv) and is_timing(nv):
            add(f"{field} (median)", direction, bv["median"], nv["median"], bv, nv)
        elif is_number(bv) and is_number(nv):
            st = (b.get(source), n.get(source)) if source else (None, None)
            add(field, direction, float(bv), float(nv), *st)
        elif isinstance(bv, list) and isinstance(nv, list) and len(bv) == len(nv) and \
                all(is_number(x) for x in bv + nv):
            for i, (x, y) in enumerate(zip(bv, nv)):
                add(f"{field}[{i}]", direction, float(x), float(y), None, None)
        elif isinstance(bv, list) and isinstance(nv, list) and len(bv) != len(nv):
            add(f"{field} (length)", INFO, float(len(bv)), float(len(nv)), None, None,
                note="different lengths, not compared")
    return rows


def compare(base, new, threshold, alpha, suite_thresholds=None):
    """Compares two loaded reports; a record's threshold is suite_thresholds[its suite] when
    given (the suite: the name's first part, e.g. collectives), else `threshold`."""
    suite_thresholds = suite_thresholds or {}
    res = {"rows": [], "records": {"matched": 0, "new": [], "missing": [], "skipped": [], "notes": []},
           "checks": {"compared": 0, "regressions": [], "fixed": [], "still_failing": [], "new": [],
                      "missing": [], "vanished": [], "not_judged": []},
           "suites": {"regressions": [], "new": [], "missing": [], "vanished": []}}
    parameters = registry.parameters()
    bk, nk, notes = record_keys(base["benchmarks"], new["benchmarks"])
    res["records"]["notes"] += notes
    for key in bk:
        if key not in nk:
            res["records"]["missing"].append(key)
    for key, n in nk.items():
        stem = copy_stem(key, bk)
        if key not in bk and stem is None:
            res["records"]["new"].append(key)
            continue
        b = bk[key if stem is None else stem]
        if stem is not None:
            res["records"]["notes"].append(f"{key}: NEW has more copies of this record than BASE; compared with "
                                           f"BASE's {stem}")
        if b.get("skipped") or n.get("skipped"):
            res["records"]["skipped"].append(key)
            continue
        res["records"]["matched"] += 1
        for f in sorted((set(b) | set(n)) & parameters - _PARAMS_NOT_NOTED):
            if b.get(f) != n.get(f):
                res["records"]["notes"].append(f"{key}: {f} {short_value(b.get(f))} vs {short_value(n.get(f))}")
        suite = str(n.get("name", key)).split("/", 1)[0]
        res["rows"] += metric_rows(key, b, n, suite_thresholds.get(suite, threshold), alpha)

    bc, nc = check_keys(base.get("checks", [])), check_keys(new.get("checks", []))
    ran_in_new = {s.get("name") for s in new.get("suites", []) if isinstance(s, dict)}
    selected_in_new = set((new.get("context", {}).get("config") or {}).get("suites") or [])
    for key, c in bc.items():
        if key not in nc:
            res["checks"]["missing"].append({"name": key, "passed_in_base": c["passed"]})
            # Its suite ran in NEW (with the same config: compatibility) and no longer checks it.
            if c["passed"] and (c.get("suite") or key.split("/", 1)[0]) in ran_in_new:
                res["checks"]["vanished"].append(key)
    for key, c in nc.items():
        now = check_verdict(c)
        entry = {"name": key, "value": c.get("value"), "tolerance": c.get("tolerance"), "passed": c["passed"],
                 "verdict": now}
        if now == "not_judged":  # a timing check on a busy machine: neither a regression nor vanished
            entry["not_judged_reason"] = c.get("not_judged_reason")
            res["checks"]["not_judged"].append(entry)
        if key not in bc:
            res["checks"]["new"].append(entry)
            continue
        res["checks"]["compared"] += 1
        entry["base_value"] = bc[key].get("value")
        was = check_verdict(bc[key])
        if was == "passed" and now == "failed":
            res["checks"]["regressions"].append(entry)
        elif was == "failed" and now == "passed":
            res["checks"]["fixed"].append(entry)
        elif was != "passed" and now == "failed":
            res["checks"]["still_failing"].append(entry)

    bs = {s.get("name"): s for s in base.get("suites", []) if isinstance(s, dict)}
    ns = {s.get("name"): s for s in new.get("suites", []) if isinstance(s, dict)}
    for name, s in bs.items():
        if name not in ns:
            res["suites"]["missing"].append(name)
            if s.get("status") == "passed" and name in selected_in_new:  # selected, and never reported
                res["suites"]["vanished"].append(name)
        elif s.get("status") == "passed" and ns[name].get("status") in ("failed", "error"):
            res["suites"]["regressions"].append({"name": name, "base_status": "passed",
                                                 "new_status": ns[name].get("status"),
                                                 "error": ns[name].get("error")})
    res["suites"]["new"] = [name for name in ns if name not in bs]
    return res
