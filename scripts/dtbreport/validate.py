"""The page of a `dtbench validate` report (results/validate.json): level and verdict, the defective nodes,
the run, the nodes and their violations, the checks, the rules, the pair bandwidth matrices, the inventory.

Markdown and HTML only, no plots. Not the run report's page (page.py) nor the validation itself (harness/).
"""
import json
import math
from collections import defaultdict

from .doc import Doc
from .fmt import anchor, fmt, fmt_bytes, fmt_duration, num, plural


VALIDATE_STATUS_CLS = {"pass": "pass", "warn": "warn", "fail": "fail", "skip": "skip", "not_run": "skip",
                       "error": "error"}
VALIDATE_STATUS_ORDER = ["fail", "warn", "pass", "skip", "not_run"]


def validate_status(status):
    """A check's or violation's status as a cell: `fail` in bold, `not_run` as 'not run', others as they are."""
    s = str(status)
    return "**fail**" if s == "fail" else "not run" if s == "not_run" else s


def validate_value(x):
    """A violation's value, reference or deviation (any JSON value) as text: numbers by fmt, strings as they
    are, anything else as compact JSON."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return fmt(x)
    return json.dumps(x, separators=(",", ":"))


def validate_ranks(ranks):
    """A node's or check's ranks (a JSON array of rank numbers) as '2, 3'; '–' when there are none."""
    if not isinstance(ranks, list) or not ranks:
        return "–"
    return ", ".join(validate_value(r) for r in ranks)


def validate_violation(v):
    """One violation of a node ({"check", "status", "detail"}, maybe "rule", "metric", "value", "reference",
    "deviation") as a bullet: 'status `check`: detail (rule ..., metric ...: value ..., reference ...,
    deviation ...)'."""
    text = f"{validate_status(v.get('status', '?'))} `{v.get('check', '?')}`: {v.get('detail') or '–'}"
    extra = []
    if v.get("rule") is not None:
        extra.append(f"rule `{validate_value(v['rule'])}`")
    if v.get("metric") is not None:
        extra.append(f"metric `{validate_value(v['metric'])}`")
    for k in ("value", "reference", "deviation"):
        if v.get(k) is not None:
            extra.append(f"{k} {validate_value(v[k])}")
    return text + (f" ({', '.join(extra)})" if extra else "")


def validate_matrix(values, ranks):
    """The rows of a check's pair bandwidth matrix (values["matrix_GBps"]: n rows of n GB/s, rank i's figure
    with partner j; diagonal 0) for Doc.table: [headers, rows], rank numbers as the first column and as the
    column headers, 1 decimal, – on the diagonal and for entries that are not numbers; the ranks the check
    names (ranks) in bold. None when the matrix is not a JSON array of arrays."""
    m = values.get("matrix_GBps")
    if not isinstance(m, list) or not m or not all(isinstance(row, list) for row in m):
        return None
    n = max(len(m), max(len(row) for row in m))
    named = {r for r in ranks if isinstance(r, int)} if isinstance(ranks, list) else set()
    headers = ["rank"] + [f"**{j}**" if j in named else str(j) for j in range(n)]
    rows = []
    for i, row in enumerate(m):
        cells = [f"**{i}**" if i in named else str(i)]
        for j in range(n):
            x = num(row[j]) if j < len(row) else None
            cells.append("–" if i == j or x is None or not math.isfinite(x) else f"{x:.1f}")
        rows.append(cells)
    return headers, rows


def validate_page(v):
    """The page for a `dtbench validate` report v (as load_validate returns it): a Doc with, in order, the
    title (level and verdict), an alert when the verdict is not accepted (the defective nodes and their count),
    the run in a paragraph, the nodes (table and each node's violations), the checks, the rules when present,
    the pair bandwidth matrices when present, and the inventory. A node without "accepted": true counts as
    defective."""
    d = Doc()
    nodes, checks = v["nodes"], v["checks"]
    verdict = v.get("verdict") or "unknown"
    shown = "accepted" if verdict == "accepted" else verdict.upper()
    d.h(1, f"dtbench validate, level {v.get('level', '?')}: {shown}")
    defective = [n for n in nodes if n.get("accepted") is not True]
    exit_status = v.get("exit_status")
    tail = f" (exit status {exit_status})" if isinstance(exit_status, int) and not isinstance(exit_status, bool) else ""
    if verdict == "accepted":
        warned = sum(1 for c in checks if c.get("status") == "warn")
        d.alert(f"**ACCEPTED**: all {plural(len(nodes), 'node')} accepted"
                + (f" ({plural(warned, 'check')} warned)" if warned else "") + tail, "ok")
    else:
        if defective:
            what = (f"{len(defective)} of {plural(len(nodes), 'node')} defective: "
                    + ", ".join(f"`{n['node']}`" for n in defective))
        else:
            what = f"no node defective (of {len(nodes)})"
        world_failed = [c["name"] for c in checks if c.get("status") == "fail" and not c.get("nodes")]
        if world_failed:
            what += "; failed about the whole world: " + ", ".join(f"`{c}`" for c in world_failed)
        not_run = [c["name"] for c in checks if c.get("status") == "not_run"]
        if not_run:
            what += f"; {plural(len(not_run), 'check')} not run: " + ", ".join(f"`{c}`" for c in not_run)
        lead = {"incomplete": "the validation did not finish"}.get(verdict)
        d.alert(f"**{verdict.upper()}**: " + (f"{lead}; " if lead else "") + what + tail)

    parts = []
    world = v.get("world_size")
    parts.append(f"{validate_value(world) if world is not None else '?'} ranks on {plural(len(nodes), 'node')}")
    rpn = v.get("emulated_ranks_per_node")
    if rpn is not None:
        parts[-1] += f" (emulated nodes of {validate_value(rpn)} ranks each, for tests)"
    levels = v.get("levels_run")
    if isinstance(levels, list) and levels:
        parts.append("levels run: " + ", ".join(str(x) for x in levels))
    if num(v.get("duration_s")) is not None:
        parts.append(f"took {fmt_duration(num(v['duration_s']), 's')}")
    expect = v.get("expect")
    if isinstance(expect, dict) and expect:
        parts.append("expected: " + ", ".join(f"`{k}={validate_value(x)}`" for k, x in expect.items()))
    if isinstance(v.get("baseline"), str):
        parts.append(f"baseline `{v['baseline']}`")
    if v.get("injected_fault") is not None:
        parts.append(f"**test-only fault injection** `{validate_value(v['injected_fault'])}`")
    d.p("; ".join(parts) + ".")

    d.h(2, "Nodes", "nodes")
    d.p(f"{len(nodes) - len(defective)} of {plural(len(nodes), 'node')} accepted.")
    if nodes:
        rows, cls = [], []
        for n in nodes:
            ok = n.get("accepted") is True
            viol = n.get("violations") or []
            rows.append([f"`{n['node']}`", validate_ranks(n.get("ranks")), "accepted" if ok else "**DEFECTIVE**",
                         str(len(viol))])
            cls.append("pass" if ok else "fail")
        d.table(["node", "ranks", "verdict", "violations"], rows, align=["l", "l", "l", "r"], row_cls=cls)
    for n in nodes:
        viol = n.get("violations") or []
        if viol:
            d.p(f"**`{n['node']}`** (ranks {validate_ranks(n.get('ranks'))}): {plural(len(viol), 'violation')}")
            d.bullets(validate_violation(x) for x in viol)

    d.h(2, "Checks", "checks")
    counts = defaultdict(int)
    for c in checks:
        counts[c["status"]] += 1
    order = [s for s in VALIDATE_STATUS_ORDER if s in counts] + sorted(s for s in counts if s not in VALIDATE_STATUS_ORDER)
    d.p(f"{plural(len(checks), 'check')}" + (": " + ", ".join(f"{counts[s]} {validate_status(s).strip('*')}"
                                                              for s in order) if checks else "") + ".")
    if checks:
        d.table(["status", "check", "detail"],
                [[validate_status(c["status"]), f"`{c['name']}`", str(c.get("detail") or "–")] for c in checks],
                align=["l", "l", "l"], row_cls=[VALIDATE_STATUS_CLS.get(c["status"]) for c in checks])

    rules = v.get("rules") or []
    if rules:
        d.h(2, "Rules", "rules")
        rows = []
        for r in rules:
            rest = "; ".join(f"{k}: {validate_value(x)}" for k, x in r.items() if k not in ("name", "type"))
            rows.append([f"`{validate_value(r.get('name'))}`", validate_value(r.get("type")), rest or "–"])
        d.table(["rule", "type", "parameters"], rows, align=["l", "l", "l"])

    for c in checks:
        values = c.get("values")
        if not isinstance(values, dict) or "matrix_GBps" not in values:
            continue
        d.h(2, f"Pair bandwidth: `{c['name']}`", anchor("matrix-" + c["name"]))
        t = validate_matrix(values, c.get("ranks"))
        if t is None:
            d.p("Its matrix_GBps is not an array of rows; not shown.", "note")
            continue
        size = num(values.get("bytes"))
        d.p("GB/s, 1 decimal: row a rank, column its partner" + (f", {fmt_bytes(size)} messages" if size else "")
            + "; – on the diagonal. In bold: the ranks the check names.", "note")
        d.table(t[0], t[1], align=["l"] + ["r"] * (len(t[0]) - 1))

    d.h(2, "Inventory", "inventory")
    inv = v.get("inventory") or []
    if not inv:
        d.p("The report holds no inventory.", "note")
    else:
        rows = []
        for e in inv:
            mem = num(e.get("memory_bytes"))
            rows.append([validate_value(e.get("rank")), f"`{e['node']}`" if e.get("node") is not None else "–",
                         validate_value(e.get("device")), validate_value(e.get("cores")),
                         "–" if mem is None else f"{mem / 1e9:.1f}", validate_value(e.get("mpi_version")),
                         validate_value(e.get("blas_version"))])
        d.table(["rank", "node", "device", "cores", "memory (GB)", "MPI", "BLAS"], rows,
                align=["r", "l", "l", "r", "r", "l", "l"])
        d.p("Memory in GB of 10^9 bytes.", "note")
    return d
