#!/usr/bin/python3
"""Renders a dtbench report (results/<run-id>.json) as Markdown and a self-contained HTML page.

Usage: scripts/report.py REPORT.json [--trace TRACE.json] [--claims CLAIMS.json] [--out-dir DIR]
       scripts/report.py VALIDATE.json [--out-dir DIR]

Writes, next to the report (or in DIR), files named after the report's stem:
  STEM.md          tables, with the plots linked as PNG files beside it
  STEM.html        the same page, self-contained (plots embedded as data: URIs, inline CSS, no script)
  STEM-*.png       plots (matplotlib, Agg), each only when its data is in the report:
                   -busbw (collectives), -tp-scaling (ffn_tp), -bubble (pipeline),
                   -memory (memory), -conformance-loss (conformance), -train-loss and
                   -step-breakdown (train), -precision-loss (precision), -step-times-SUITE
                   (precision, recompute, offload, overlap), -sweep (sweep), -timeline and
                   -timeline-train (from --trace)

Sections: header (run, machine, pass/fail counts), the suites, the failed checks, with
--claims the rules of thumb (the JSON of `dtbench claims --output FILE`: one row per claim with
its conditions, the claimed, computed and measured figures, the verdict and why), then one
section per suite in the report's order. Suites it does not know get a table of their records'
scalar fields. Needs Debian's /usr/bin/python3 (matplotlib, numpy).

The JSON report of `dtbench validate` ("kind": "validate", e.g. results/validate.json) gives
STEM.md and STEM.html, no plots: the level and verdict, an alert naming the defective nodes,
the run (world size, nodes, levels run, duration, a test-only fault injection, emulated nodes),
then the nodes (accepted or DEFECTIVE, each node's violations), the checks, the rules when the
report has them, each pair bandwidth matrix (values.matrix_GBps) and the inventory.

Exit status: 0 when the files were written (whether or not the run passed); 2 for bad input
(a missing or malformed report, trace or claims file, a validate report without checks or
nodes, --trace or --claims with a validate report, an unwritable output directory), said in one
line.
"""
import argparse
import base64
import html
import json
import math
import os
import re
import statistics
import sys
import textwrap
from collections import OrderedDict, defaultdict
from pathlib import Path

PROG = "report.py"


class InputError(Exception):
    """Bad input: the message is printed on one line and the exit status is 2."""


# ---------------------------------------------------------------------------------------------
# Loading


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
    def refuse(name):  # JSON has no NaN or Infinity (dtbench writes null for a non-finite number)
        raise json.JSONDecodeError(f"{name} is not JSON", name, 0)
    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as e:
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
            spans.append({"rank": int(e.get("tid", 0)), "name": str(e["name"]), "ts": float(e["ts"]),
                          "dur": float(e.get("dur", 0.0)), "step": int((e.get("args") or {}).get("step", 0))})
        except (KeyError, TypeError, ValueError):
            raise InputError(f"trace '{path}': a complete event ('ph': 'X') lacks a numeric ts, dur or name")
    return spans


# ---------------------------------------------------------------------------------------------
# Formatting


def num(x):
    """A float or None (JSON null, strings, bools and timing objects without a median give None)."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, dict) and isinstance(x.get("median"), (int, float)):
        return float(x["median"])
    return None


def stat(x, key):
    return num(x.get(key)) if isinstance(x, dict) else None


def fmt(x, digits=4):
    """A number for a table: 4 significant digits, no exponent in [1e-3, 1e6)."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if x == int(x) and abs(x) < 1e15:
            return str(int(x))
        a = abs(x)
        if a >= 1e6 or a < 1e-3:
            m, e = f"{x:.{digits - 1}e}".split("e")
            return (m.rstrip("0").rstrip(".") if "." in m else m) + "e" + e
        d = max(0, digits - 1 - int(math.floor(math.log10(a)))) if a > 0 else 0
        t = f"{x:.{d}f}"
        return t.rstrip("0").rstrip(".") if "." in t else t
    if isinstance(x, (list, tuple)):
        return " ".join(fmt(v, digits) for v in x)
    return str(x)


def fmt_pct(x, digits=1):
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def fmt_bytes(b):
    """Binary units: 8 B, 1 KiB, 1.5 MiB."""
    if b is None:
        return "–"
    b = float(b)
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(b) >= scale:
            v = b / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.4g} {unit}"
    return f"{b:.0f} B"


def fmt_si(x, unit):
    """Decimal SI prefixes: 1.23 TFLOP/s."""
    if x is None:
        return "–"
    for p, s in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= s:
            return f"{x / s:.4g} {p}{unit}"
    return f"{x:.4g} {unit}"


def fmt_duration(x, unit):
    """A time in Google Benchmark's units (ns, us, ms, s) with a readable unit: 870666 ns -> 870.7 us."""
    if x is None:
        return "–"
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}.get(unit)
    if scale is None:
        return f"{fmt(x)} {unit}"
    sec = x * scale
    for u, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(sec) >= f:
            return f"{fmt(sec / f)} {u}"
    return f"{fmt(sec / 1e-9)} ns"


def counter_kind(name):
    """The SI unit of a Google Benchmark counter, by its name, or None."""
    n = name.lower().replace(" ", "")
    if n in ("flops", "flop/s", "flop_per_s", "flops_per_second", "flop_per_second"):
        return "FLOP/s"
    if n in ("bytes_per_second", "bytes/s", "byte/s", "b/s"):
        return "B/s"
    if n in ("items_per_second", "items/s"):
        return "items/s"
    return None


def fmt_timing(t, digits=4):
    """A timing object as 'median (min–max)'."""
    if not isinstance(t, dict):
        return fmt(num(t), digits)
    med, lo, hi = num(t.get("median")), num(t.get("min")), num(t.get("max"))
    if lo is None or hi is None:
        return fmt(med, digits)
    return f"{fmt(med, digits)} ({fmt(lo, 3)}–{fmt(hi, 3)})"


def record_tail(name, suite):
    return name[len(suite) + 1:] if name.startswith(suite + "/") else name


def parse_name_fields(name):
    """'collectives/all_reduce/bytes:8/placement:in_place' -> {'bytes': '8', 'placement': 'in_place'}."""
    out = {}
    for part in name.split("/"):
        if ":" in part:
            k, v = part.split(":", 1)
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------
# The document: blocks rendered both as Markdown and as HTML


class Doc:
    def __init__(self):
        self.blocks = []

    def h(self, level, text, anchor=None):
        self.blocks.append(("h", level, text, anchor))

    def p(self, text, cls=None):
        self.blocks.append(("p", text, cls))

    def bullets(self, items):
        self.blocks.append(("ul", list(items)))

    def table(self, headers, rows, align=None, row_cls=None, cls=None):
        """rows: lists of cell strings (already formatted; `code` and **bold** allowed). cls: the HTML table's
        class (`wrap`: cells wrap, for columns of sentences)."""
        align = align or ["l"] + [column_align([r[i] for r in rows if i < len(r)]) for i in range(1, len(headers))]
        self.blocks.append(("table", headers, rows, align, row_cls or [None] * len(rows), cls))

    def img(self, path, alt, caption):
        self.blocks.append(("img", path, alt, caption))

    def alert(self, text, kind="fail"):
        self.blocks.append(("alert", text, kind))


_NUMERIC = re.compile(r"^[-+]?(\d|\.\d)")


def column_align(cells):
    """'r' for a column of numbers (placeholders such as – allowed), 'l' otherwise."""
    vals = [str(c).strip("*` ") for c in cells]
    vals = [v for v in vals if v not in ("", "–", "N/A", "inf", "NaN")]
    return "r" if vals and all(_NUMERIC.match(v) for v in vals) else "l"


def md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_md(doc):
    out = []
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            out.append("#" * b[1] + " " + b[2])
        elif kind == "p":
            out.append(b[1])
        elif kind == "ul":
            out.append("\n".join("- " + i for i in b[1]))
        elif kind == "alert":
            out.append("> " + b[1].replace("\n", "\n> "))
        elif kind == "table":
            _, headers, rows, align, _, _ = b
            lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |",
                     "|" + "|".join("---:" if a == "r" else ":---:" if a == "c" else "---" for a in align) + "|"]
            for r in rows:
                lines.append("| " + " | ".join(md_cell(c) for c in r) + " |")
            out.append("\n".join(lines))
        elif kind == "img":
            _, path, alt, caption = b
            out.append(f"![{alt}]({Path(path).name})\n\n*{caption}*")
    return "\n\n".join(out) + "\n"


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(#([A-Za-z0-9_-]+)\)")


def html_inline(text):
    s = html.escape(str(text), quote=False)
    s = _CODE.sub(r"<code>\1</code>", s)
    s = _BOLD.sub(r"<strong>\1</strong>", s)
    s = _LINK.sub(r'<a href="#\2">\1</a>', s)
    return s


CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
 padding:0 1.5em;color:#1f2328;line-height:1.45}
h1{border-bottom:2px solid #d0d7de;padding-bottom:.3em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;
 margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.88em;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.25em .6em;white-space:nowrap}th{background:#f6f8fa}
td.r{text-align:right;font-variant-numeric:tabular-nums}td.c{text-align:center}
tr.fail td{background:#ffebe9}tr.skip td{color:#6e7781}tr.error td{background:#fff8c5}
tr.pass td{background:#dafbe1}tr.warn td{background:#fff8c5}
table.wrap td{white-space:normal;vertical-align:top;min-width:9em}table.wrap td:first-child{min-width:16em}
table.wrap td.c{white-space:nowrap}
code{background:#f6f8fa;padding:.1em .3em;border-radius:3px;font-size:.92em}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:.9em;color:#57606a;margin-top:.3em}
.alert{border-left:6px solid #cf222e;background:#ffebe9;padding:.6em 1em;margin:1em 0;font-weight:600}
.alert.ok{border-color:#1a7f37;background:#dafbe1}.note{color:#57606a;font-size:.92em}
"""


def render_html(doc, title):
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style></head><body>"]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            _, level, text, anchor = b
            a = f' id="{html.escape(anchor)}"' if anchor else ""
            out.append(f"<h{level}{a}>{html_inline(text)}</h{level}>")
        elif kind == "p":
            cls = f' class="{b[2]}"' if b[2] else ""
            out.append(f"<p{cls}>{html_inline(b[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{html_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "alert":
            cls = "alert ok" if b[2] == "ok" else "alert"
            out.append(f'<div class="{cls}">{html_inline(b[1])}</div>')
        elif kind == "table":
            _, headers, rows, align, row_cls, tcls = b
            tc = f' class="{tcls}"' if tcls else ""
            t = [f"<table{tc}><thead><tr>" + "".join(f"<th>{html_inline(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
            for r, cls in zip(rows, row_cls):
                c = f' class="{cls}"' if cls else ""
                t.append(f"<tr{c}>" + "".join(
                    f'<td class="{a}">{html_inline(v)}</td>' if a in ("r", "c") else f"<td>{html_inline(v)}</td>"
                    for v, a in zip(r, align)) + "</tr>")
            t.append("</tbody></table>")
            out.append("".join(t))
        elif kind == "img":
            _, path, alt, caption = b
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            out.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'
                       f"<figcaption>{html_inline(caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Plot helpers (matplotlib is imported on first use)

_plt = None


def plt():
    global _plt
    if _plt is None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as p
        p.rcParams.update({"figure.dpi": 100, "savefig.dpi": 110, "font.size": 10, "axes.titlesize": 11,
                           "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 9,
                           "axes.spines.top": False, "axes.spines.right": False})
        _plt = p
    return _plt


def bytes_axis(ax, values, axis="x"):
    """Log2 axis over byte sizes with ticks at powers of two labelled in binary units."""
    from matplotlib.ticker import FixedLocator, NullLocator
    lo, hi = min(values), max(values)
    k0, k1 = int(math.floor(math.log2(lo))), int(math.ceil(math.log2(hi)))
    step = next(s for s in (1, 2, 3, 4, 5, 10, 20) if (k1 - k0) // s + 1 <= 12)
    ticks = [2.0 ** k for k in range(k0, k1 + 1) if k % step == 0] or [2.0 ** k0]
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    a.set_major_locator(FixedLocator(ticks))
    a.set_minor_locator(NullLocator())
    (ax.set_xticklabels if axis == "x" else ax.set_yticklabels)([fmt_bytes(t) for t in ticks])


def byte_unit(max_bytes):
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if max_bytes >= 2 * scale:
            return unit, scale
    return "B", 1


def colors(n):
    cmap = plt().get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# The renderer


SPAN_COLORS = {"compute.forward": "#4c72b0", "compute.backward": "#dd8452", "compute.optimizer": "#55a868",
               "compute.recompute": "#64b5cd", "comm.all_reduce": "#c44e52", "comm.send": "#8e44ad",
               "comm.recv": "#da8bc3", "comm.all_gather": "#937860", "comm.reduce_scatter": "#ccb974",
               "comm.broadcast": "#8c8c8c", "idle": "#e5e5e5"}
SPAN_ORDER = ["compute.forward", "compute.backward", "compute.recompute", "compute.optimizer"]
MEM_CATS = ["param", "grad", "master_param", "optimizer_state", "activation", "workspace", "comm_buffer"]
MEM_COLORS = {"param": "#4c72b0", "grad": "#dd8452", "master_param": "#55a868", "optimizer_state": "#c44e52",
              "activation": "#8172b3", "workspace": "#937860", "comm_buffer": "#bbbbbb"}
KNOWN_SUITES = {"collectives", "train", "conformance", "ffn_tp", "pipeline", "memory", "precision", "recompute",
                "offload", "overlap", "gemm", "sweep", "kernels"}
GB_KEYS = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "family_index",
           "per_family_instance_index", "aggregate_name", "aggregate_unit"}


class Renderer:
    def __init__(self, report, spans, out_dir, stem, report_path, claims=None):
        self.r = report
        self.ctx = report["context"]
        self.spans = spans
        self.claims = claims
        self.out_dir = out_dir
        self.stem = stem
        self.report_path = report_path
        self.doc = Doc()
        self.plots = []  # paths written
        self.warnings = []
        self.by_suite = defaultdict(list)
        for b in report["benchmarks"]:
            self.by_suite[b["name"].split("/", 1)[0]].append(b)
        self.checks_by_suite = defaultdict(list)
        for c in report["checks"]:
            self.checks_by_suite[c.get("suite") or c["name"].split("/", 1)[0]].append(c)

    # --- plumbing

    def save(self, fig, name, alt, caption):
        path = self.out_dir / f"{self.stem}-{name}.png"
        fig.savefig(path, bbox_inches="tight")
        plt().close(fig)
        self.plots.append(path)
        self.doc.img(path, alt, caption)

    def world(self):
        return self.ctx.get("world_size")

    # --- the page

    def build(self):
        self.header()
        self.suite_table()
        self.failures()
        if self.claims is not None:
            self.claims_section()
        names = [s["name"] for s in self.r["suites"]]
        for s in self.r["suites"]:
            self.suite_section(s)
        # Records of suites the report has no entry for (e.g. a report put together by hand).
        for prefix in self.by_suite:
            if prefix not in names:
                self.suite_section({"name": prefix, "status": None, "data": {}})
        if self.spans is not None:
            self.trace_section()
        return self.doc

    def header(self):
        c, d = self.ctx, self.doc
        run = c.get("run_id") or self.stem
        d.h(1, f"dtbench report: {run}")
        cfg = c.get("config") if isinstance(c.get("config"), dict) else {}
        devices = c.get("devices")
        backend = str(c.get("backend", "?"))
        if isinstance(devices, list) and devices and devices != [backend]:
            backend += " (" + ", ".join(map(str, devices)) + ")"
        rows = [["run id", f"`{run}`"], ["date", str(c.get("date", "–"))],
                ["host", f"{c.get('host_name', '–')} ({c.get('num_cpus', '?')} CPUs)"],
                ["backend", backend],
                ["world size", f"{c.get('world_size', '?')} rank(s), {c.get('ranks_per_node', '?')} per node, "
                               f"communicator {c.get('comm_backend', '?')}"],
                ["config", f"`{cfg.get('name', '?')}`" + (f": {cfg['description']}" if cfg.get("description") else "")],
                ["git commit", f"`{c.get('git_commit', 'unknown')}`"],
                ["build", f"{c.get('build_type', c.get('library_build_type', '?'))}, dtbench "
                          f"{c.get('dtbench_version', '?')}, schema {self.r.get('schema_version', '?')}"],
                ["MPI / BLAS", f"{c.get('mpi_version', '–')} / {c.get('blas_version', '–')}"]]
        if c.get("cuda_version") or c.get("nccl_version"):
            rows.append(["CUDA / NCCL", f"{c.get('cuda_version', '–')} / {c.get('nccl_version', '–')}"])
        ds = c.get("dataset")
        if isinstance(ds, dict):
            rows.append(["dataset", f"`{ds.get('path', '?')}`, {fmt_bytes(num(ds.get('bytes')))}, sha256 "
                                    f"`{str(ds.get('sha256', '?'))[:16]}…`"])
        checks = self.r["checks"]
        failed = [x for x in checks if not x.get("passed", False)]
        suites = self.r["suites"]
        bad = [s for s in suites if s.get("status") in ("failed", "error")]
        verdict = "PASSED" if not bad and not failed else "FAILED"
        if not suites and not checks:
            verdict = "EMPTY"
        summary = (f"**{verdict}**: {len(suites) - len(bad)} of {len(suites)} suites passed"
                   + (f" ({', '.join(s['name'] + ' ' + str(s.get('status')) for s in bad)})" if bad else "")
                   + f"; {len(checks) - len(failed)} of {len(checks)} checks passed"
                   + (f", **{len(failed)} failed**" if failed else "")
                   + (" ([the failed checks](#failed-checks))" if failed or any(s.get("status") == "error"
                                                                                for s in suites) else ""))
        if verdict == "EMPTY":
            summary = "**EMPTY**: the report holds no suite and no check (a run that stopped before its first suite)"
        d.alert(summary, "ok" if verdict == "PASSED" else "fail")
        d.table(["field", "value"], rows, align=["l", "l"])
        rpn, ncpu = c.get("ranks_per_node"), c.get("num_cpus")
        if isinstance(rpn, int) and isinstance(ncpu, int) and 0 < ncpu < rpn and c.get("backend") == "cpu":
            d.p(f"**Oversubscribed:** {rpn} ranks per node on {ncpu} CPUs. Ranks take turns on the cores, so every "
                "time here includes time a rank waited for a core (compute spans and timers included), and "
                "throughput and bandwidth are not the machine's.", "note")

    def suite_table(self):
        d = self.doc
        d.h(2, "Suites", "suites")
        if not self.r["suites"]:
            d.p("No suites ran.", "note")
            return
        rows, cls = [], []
        for s in self.r["suites"]:
            st = str(s.get("status"))
            total = s.get("checks_total")
            passed = s.get("checks_passed")
            if total is None:
                cs = self.checks_by_suite.get(s["name"], [])
                total, passed = len(cs), sum(1 for x in cs if x.get("passed"))
            rows.append([f"[{s['name']}](#{anchor(s['name'])})", st.upper() if st in ("failed", "error") else st,
                         fmt(num(s.get("duration_s")), 3), f"{passed}/{total}",
                         str(len(self.by_suite.get(s["name"], []))), s.get("error") or ""])
            cls.append("fail" if st == "failed" else "error" if st == "error" else "skip" if st == "skipped" else None)
        d.table(["suite", "status", "duration (s)", "checks passed", "records", "error"], rows,
                align=["l", "c", "r", "r", "r", "l"], row_cls=cls)

    def failures(self):
        d = self.doc
        failed = [c for c in self.r["checks"] if not c.get("passed", False)]
        errored = [s for s in self.r["suites"] if s.get("status") == "error"]
        if not failed and not errored:
            return
        d.h(2, f"Failed checks ({len(failed)})" + (f" and errors ({len(errored)})" if errored else ""), "failed-checks")
        for s in errored:
            d.alert(f"suite {s['name']} stopped with an error: {s.get('error') or '(no message)'}")
        if failed:
            d.p("A check passes when value <= tolerance; value / tolerance above 1 is by how much it missed. "
                "In suite order, then by how far each missed.")
            limit = 100
            pos = {s["name"]: i for i, s in enumerate(self.r["suites"])}
            order = sorted(failed, key=lambda c: (pos.get(c.get("suite"), len(pos)), str(c.get("suite", "")),
                                                  -(num(c.get("fraction_of_tolerance")) or math.inf)))
            rows = [[f"`{c['name']}`", fmt(num(c.get("value"))), fmt(num(c.get("tolerance"))),
                     fmt(num(c.get("fraction_of_tolerance")), 3) if c.get("fraction_of_tolerance") is not None
                     else "inf", str(c.get("detail", ""))] for c in order[:limit]]
            d.table(["check", "value", "tolerance", "value / tolerance", "detail"], rows,
                    align=["l", "r", "r", "r", "l"], row_cls=["fail"] * len(rows))
            if len(failed) > limit:
                d.p(f"… and {len(failed) - limit} more failed checks (the report's `checks` has them all).")

    # Verdicts of `dtbench claims` and their row styles: holds green, differs as a failed check,
    # holds only if yellow, cannot measure here grey as a skipped suite.
    VERDICT_CLS = {"holds": "pass", "differs": "fail", "holds only if": "warn", "cannot measure here": "skip"}

    def claims_section(self):
        d, c = self.doc, self.claims
        d.h(2, "Rules of thumb (dtbench claims)", "claims")
        rows = c["claims"]
        if not rows:
            d.p("The claims file holds no claims.", "note")
            return
        tally = defaultdict(int)
        for e in rows:
            tally[e["verdict"]] += 1
        order = [v for v in self.VERDICT_CLS if v in tally] + sorted(v for v in tally if v not in self.VERDICT_CLS)
        src = f" from `{c['catalog']}`" if c.get("catalog") else ""
        d.p(f"`dtbench claims` checked {plural(len(rows), 'rule')} of thumb{src}: "
            + ", ".join(f"{tally[v]} {v}" for v in order) + ". *Computed here*: dtbench's analytic memory model and "
            "pipeline formulas under the claim's conditions (where the claim is silent, the conditions say what "
            "dtbench assumed). " + (f"*Measured here*: from the suites of `{c['report']}`; " if c.get("report") else
                                    "*Measured here*: no report was given (`dtbench claims --report FILE`); ")
            + "a claim that needs hardware this machine lacks is evaluated analytically and marked *cannot measure "
            "here*.")
        d.table(["claim", "conditions", "claimed", "computed here", "measured here", "verdict", "why"],
                [[f"**{e['id']}.** {e['claim']}", e["conditions"], e["predicted"], e["computed"], e["measured"],
                  e["verdict"], e["why"]] for e in rows],
                align=["l", "l", "l", "l", "l", "c", "l"], row_cls=[self.VERDICT_CLS.get(e["verdict"]) for e in rows],
                cls="wrap")

    def suite_section(self, s):
        name = s["name"]
        d = self.doc
        st = s.get("status")
        d.h(2, name, anchor(name))
        recs = self.by_suite.get(name, [])
        cs = self.checks_by_suite.get(name, [])
        if st is not None:
            nf = sum(1 for c in cs if not c.get("passed"))
            line = (f"Status **{st}**, {fmt(num(s.get('duration_s')), 3)} s, {plural(len(recs), 'record')}, "
                    f"{plural(len(cs), 'check')}")
            line += f" ({nf} failed)." if nf else "."
            d.p(line)
        if s.get("error"):
            d.alert(f"error: {s['error']}")
        data = s.get("data") if isinstance(s.get("data"), dict) else {}
        fn = getattr(self, "suite_" + name) if name in KNOWN_SUITES else None
        nblocks, nplots = len(d.blocks), len(self.plots)
        try:
            if fn is not None:
                fn(recs, cs, data)
            else:
                self.generic(name, recs)
        except Exception as e:  # a report of another shape: say so and show the records as they are
            if _plt:
                _plt.close("all")
            del d.blocks[nblocks:]
            for pth in self.plots[nplots:]:
                pth.unlink(missing_ok=True)
            del self.plots[nplots:]
            msg = f"{name}: could not render the suite's own tables ({type(e).__name__}: {e}); generic table instead"
            self.warnings.append(msg)
            d.p(f"*{msg}.*", "note")
            self.generic(name, recs)

    # --- generic

    def generic(self, suite, recs):
        if not recs:
            self.doc.p("No records.", "note")
            return
        cols = OrderedDict()
        for b in recs:
            for k, v in b.items():
                if k in GB_KEYS or k in ("cpu_time",):
                    continue
                if isinstance(v, (int, float, str, bool)) or v is None:
                    cols.setdefault(k, k)
                elif isinstance(v, dict) and "median" in v:
                    cols.setdefault(k, k + " (median)")
        rows = []
        for b in recs:
            rows.append([f"`{record_tail(b['name'], suite)}`"] + [fmt(b.get(k)) if not isinstance(b.get(k), dict)
                                                               else fmt(num(b.get(k))) for k in cols])
        self.doc.table(["record"] + list(cols.values()), rows, align=["l"] + ["r"] * len(cols))

    # --- collectives

    def suite_collectives(self, recs, cs, data):
        d = self.doc
        ops = OrderedDict()
        for b in recs:
            if b.get("skipped") or "op" not in b:
                continue
            ops.setdefault(b["op"], defaultdict(dict))[int(b["bytes"])][b.get("placement", "out_of_place")] = b
        if not ops:
            return self.generic("collectives", recs)
        world = next(iter(next(iter(ops.values())).values()))
        world = next(iter(world.values())).get("world_size", self.world())
        d.p(f"nccl-tests' definitions on {world} rank(s): time is the median over repetitions of the slowest "
            "rank's time per iteration; algbw = S / time; busbw = algbw × the op's bus factor, comparable "
            "with the hardware's link bandwidth. GB/s are 10^9 bytes per second.")
        sdefs = data.get("size_definitions") or {}
        all_busbw = []
        for op, sizes in ops.items():
            any_rec = next(iter(next(iter(sizes.values())).values()))
            d.h(3, f"{op}")
            d.p(f"{sdefs.get(op, any_rec.get('size_definition', ''))}; busbw = algbw × "
                f"{num(any_rec.get('bus_factor')) or 0:g}; {any_rec.get('dtype', '')}.")
            places = [p for p in ("out_of_place", "in_place") if any(p in v for v in sizes.values())]
            headers = ["size", "count"]
            for p in places:
                tag = "out-of-place" if p == "out_of_place" else "in-place"
                headers += [f"{tag} time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"]
            rows, cls = [], []
            for size in sorted(sizes):
                row = [fmt_bytes(size), fmt(next(iter(sizes[size].values())).get("count"))]
                wrong = False
                for p in places:
                    b = sizes[size].get(p)
                    if b is None:
                        row += ["N/A"] * 4
                        continue
                    row += [fmt(num(b.get("time_us")) if b.get("time_us") is not None else num(b.get("real_time"))),
                            f"{num(b.get('algbw_GBps')) or 0:.2f}", f"{num(b.get('busbw_GBps')) or 0:.2f}",
                            fmt(b.get("n_wrong"))]
                    wrong |= bool(b.get("n_wrong"))
                    if num(b.get("busbw_GBps")) is not None:
                        all_busbw.append(num(b.get("busbw_GBps")))
                rows.append(row)
                cls.append("fail" if wrong else None)
            d.table(headers, rows, row_cls=cls)
        if all_busbw:
            d.p(f"Avg bus bandwidth: {statistics.fmean(all_busbw):.3g} GB/s (mean of every line's busbw, as "
                "nccl-tests prints it).")
        self.plot_busbw(ops, world)

    def plot_busbw(self, ops, world):
        p = plt()
        fig, (ax, ax2) = p.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
        recs = [b for sizes in ops.values() for v in sizes.values() for b in v.values()]
        use_alg = all((num(b.get("bus_factor")) or 0) == 0 for b in recs)
        key = "algbw_GBps" if use_alg else "busbw_GBps"
        allx = []
        for (op, sizes), col in zip(ops.items(), colors(len(ops))):
            for p_, ls, mk in (("out_of_place", "-", "o"), ("in_place", "--", "s")):
                xs = [s for s in sorted(sizes) if p_ in sizes[s]]
                if not xs:
                    continue
                ys = [num(sizes[s][p_].get(key)) for s in xs]
                ts = [num(sizes[s][p_].get("time_us")) or num(sizes[s][p_].get("real_time")) for s in xs]
                lab = f"{op} ({'out of place' if p_ == 'out_of_place' else 'in place'})"
                ax.plot(xs, ys, ls=ls, marker=mk, ms=3.5, color=col, label=lab)
                ax2.plot(xs, ts, ls=ls, marker=mk, ms=3.5, color=col, label=lab)
                allx += xs
        for a in (ax, ax2):
            bytes_axis(a, allx)
            a.tick_params(axis="x", labelrotation=45)
            a.set_xlabel("message size S (bytes, log scale)")
        ys = [y for b in recs if (y := num(b.get(key))) and y > 0]
        logy = bool(ys) and max(ys) / min(ys) > 1e4 and use_alg
        ax.set_ylabel(("algbw" if use_alg else "busbw") + " (GB/s" + (", log scale)" if logy else ")"))
        if logy:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax2.set_yscale("log")
        ax2.set_ylabel("time per iteration (µs, log scale)")
        dev = self.ctx.get("devices")
        where = f"{world} rank(s), {self.ctx.get('comm_backend', '')}" + (
            f", {dev[0]}" if isinstance(dev, list) and dev and dev[0] != self.ctx.get("backend") else "")
        ax.set_title(("Algorithm" if use_alg else "Bus") + f" bandwidth against message size ({where})")
        ax2.set_title("Latency against message size")
        from matplotlib.lines import Line2D
        handles = [Line2D([], [], color=c, lw=2, label=op) for op, c in zip(ops, colors(len(ops)))]
        handles += [Line2D([], [], color="#555555", ls="-", marker="o", ms=3.5, label="out of place"),
                    Line2D([], [], color="#555555", ls="--", marker="s", ms=3.5, label="in place")]
        ax2.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, title="op / placement")
        cap = ("Bus bandwidth (nccl-tests' busbw: algbw × bus factor) against message size, log-x; solid: out of "
               "place, dashed: in place. Right: the median time per iteration, log-log.")
        if use_alg:
            cap = ("Algorithm bandwidth (S / time) against message size, log-x: every bus factor is 0 on a single "
                   "rank, so busbw is 0 and algbw is plotted instead; solid: out of place, dashed: in place. Right: "
                   "the median time per iteration, log-log. On one rank a collective need not move any data (in "
                   "place it can return at once), so algbw there is S over a launch latency and grows with S "
                   "without bound: it is not a link or memory bandwidth.")
        self.save(fig, "busbw", "bus bandwidth against message size", cap)

    # --- train

    def suite_train(self, recs, cs, data):
        d = self.doc
        recs = [b for b in recs if not b.get("skipped")]
        if not recs:
            return self.generic("train", recs)
        model = data.get("model") or (self.ctx.get("config") or {}).get("model") or {}
        if model:
            d.p("Model: " + ", ".join(f"{k}={v}" for k, v in model.items())
                + (f", {data['num_params']:,} parameters" if isinstance(data.get("num_params"), int) else "")
                + (f", {fmt(num(data.get('tokens_per_step')))} tokens per step" if data.get("tokens_per_step") else "")
                + ".")
        rows = []
        for b in recs:
            rows.append([f"`{record_tail(b['name'], 'train')}`",
                         f"{b.get('tp', 1)}×{b.get('dp', '?')}×{b.get('pp', 1)}", fmt(num(b.get("tokens_per_s")), 5),
                         fmt_timing(b.get("step_time_ms")), fmt(num(b.get("compute_time_ms"))),
                         fmt(num(b.get("comm_time_ms"))), fmt_pct(num(b.get("comm_fraction"))),
                         fmt(num(b.get("model_tflops")), 3), fmt_pct(num(b.get("mfu"))) if "mfu" in b else "–",
                         fmt(num(b.get("final_loss")), 6)])
        d.table(["layout", "TP×DP×PP", "tokens/s", "step (ms): median (min–max)", "compute (ms)", "comm (ms)",
                 "comm share", "model TFLOP/s", "MFU", "final loss"], rows)
        notes = ["Times are the slowest rank's per step, medians over the steps; comm includes waiting for the "
                 "other ranks (exposed communication). The medians of compute and comm need not add up to the "
                 "step's median."]
        if any("mfu" in b for b in recs):
            peak = ((self.ctx.get("config") or {}).get("train") or {}).get("peak_tflops")
            notes.append(f"MFU = model TFLOP/s (6N + 12 L C T FLOPs per token) / the configured "
                         f"`train.peak_tflops` = {fmt(num(peak))}, a number from the config, not a measurement.")
        else:
            notes.append("No MFU: `train.peak_tflops` is 0 in the config.")
        d.p(" ".join(notes), "note")
        for b in recs:
            bd = b.get("step_breakdown_ms")
            if isinstance(bd, dict) and bd:
                d.h(3, f"Step breakdown from the trace: `{record_tail(b['name'], 'train')}`")
                total = sum(v for v in bd.values() if isinstance(v, (int, float)))
                d.table(["span", "median ms per step", "share of the sum"],
                        [[f"`{k}`", fmt(num(v)), fmt_pct(num(v) / total if total else None)]
                         for k, v in sorted(bd.items(), key=lambda kv: -(num(kv[1]) or 0))])
        self.plot_step_breakdown(recs)
        self.plot_train_loss(data, cs)

    def plot_step_breakdown(self, recs):
        p = plt()
        bars = []  # (label, [(name, ms)], step timing)
        for b in recs:
            tag = record_tail(b["name"], "train")
            bd = b.get("step_breakdown_ms")
            if isinstance(bd, dict) and bd:
                names = [k for k in SPAN_ORDER if k in bd] + sorted(k for k in bd if k not in SPAN_ORDER and k != "idle")
                names += ["idle"] if "idle" in bd else []
                bars.append((f"{tag}\ntrace spans", [(k, num(bd[k]) or 0) for k in names], b.get("step_time_ms")))
            comp, comm = num(b.get("compute_time_ms")), num(b.get("comm_time_ms"))
            if comp is not None and comm is not None:
                bars.append((f"{tag}\ntimers", [("compute (timer)", comp), ("comm (timer)", comm)], b.get("step_time_ms")))
        if not bars:
            return
        fig, ax = p.subplots(figsize=(11, 1.0 + 0.8 * len(bars)), constrained_layout=True)
        palette = dict(SPAN_COLORS)
        palette.update({"compute (timer)": "#9db4d9", "comm (timer)": "#e3a3a5"})
        extra = colors(10)
        seen = set()
        for i, (label, parts, step) in enumerate(bars):
            left = 0.0
            for k, v in parts:
                col = palette.get(k)
                if col is None:
                    col = palette[k] = extra[(len(palette) + 3) % len(extra)]
                ax.barh(i, v, left=left, color=col, edgecolor="white", height=0.6,
                        label=k if k not in seen else None, hatch="//" if k == "idle" else None)
                if v > 0.06 * max(sum(x for _, x in parts), 1e-12):
                    ax.text(left + v / 2, i, fmt(v, 3), ha="center", va="center", fontsize=8,
                            color="black" if k == "idle" or "timer" in k else "white")
                seen.add(k)
                left += v
            med = stat(step, "median")
            if med is not None:
                ax.plot([med, med], [i - 0.38, i + 0.38], color="black", lw=2,
                        label="step time, median" if "step" not in seen else None)
                seen.add("step")
        ax.set_yticks(range(len(bars)), [b[0] for b in bars])
        ax.invert_yaxis()
        ax.set_xlabel("ms per step (median over steps of the slowest rank)")
        ax.set_title("Train step time breakdown (" + ", ".join(record_tail(b["name"], "train") for b in recs) + ")")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        self.save(fig, "step-breakdown", "train step time breakdown",
                  "Where a train step's time goes, per record: the trace's spans (with `--trace`) and the suite's "
                  "compute / comm timers, each segment the median over steps of the slowest rank; the black bar "
                  "is the median step time. Medians of the parts need not sum to the median step.")

    def plot_train_loss(self, data, cs):
        losses = data.get("losses")
        if not isinstance(losses, dict) or not losses:
            return
        series = {k: v for k, v in losses.items() if isinstance(v, list) and v}
        oracle = series.get("oracle_f64")
        p = plt()
        if oracle is None:
            fig, ax = p.subplots(figsize=(7, 4.2), constrained_layout=True)
            for (k, v), col in zip(series.items(), colors(len(series))):
                ax.plot(range(len(v)), v, label=k, color=col)
            ax.set_xlabel("step")
            ax.set_ylabel("loss (mean cross-entropy, nats)")
            ax.set_title("Train loss")
            ax.legend()
            self.save(fig, "train-loss", "train loss curve", "The training loss per step (no float64 oracle in "
                      "this report to compare with).")
            return
        tol = loss_tolerance(cs, "train/")
        fig, (ax, ax2) = p.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
        cols = colors(len(series))
        for (k, v), col in zip(series.items(), cols):
            ax.plot(range(len(v)), v, label=k, color=col, lw=1.2 if k != "oracle_f64" else 2.2,
                    ls="-" if k != "oracle_f64" else ":")
            if k == "oracle_f64":
                continue
            dev = [abs(a - b) if a is not None and b is not None else None for a, b in zip(v, oracle)]
            xs = [i for i, x in enumerate(dev) if x]
            ax2.plot(xs, [dev[i] for i in xs], label=k, color=col, lw=1.0, marker="." if len(xs) < 60 else None)
        if tol:
            ax2.plot(sorted(tol), [tol[s] for s in sorted(tol)], color="black", ls="--", lw=1.2,
                     label="check tolerance")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (mean cross-entropy, nats)")
        ax.set_title("Train loss: the curves (they overlap)")
        ax.legend(fontsize=8)
        ax2.set_yscale("log")
        ax2.set_xlabel("step")
        ax2.set_ylabel("|loss − loss of the float64 oracle| (log scale)")
        ax2.set_title("Deviation from the float64 oracle")
        ax2.legend(fontsize=8)
        self.save(fig, "train-loss", "train loss and its deviation from the float64 oracle",
                  "Left: the loss per step of the run under test, the single-rank float32 references and the "
                  "float64 oracle; they overlap to the eye. Right: each run's |loss − oracle| per step on a log "
                  "scale (exact zeros not drawn), and the per-step tolerance of the `train/loss/step:N` checks.")

    # --- conformance

    def suite_conformance(self, recs, cs, data):
        d = self.doc
        recs = [b for b in recs if not b.get("skipped")]
        model = data.get("model")
        if model:
            d.p("Model: " + ", ".join(f"{k}={v}" for k, v in model.items())
                + f"; tolerance factor k = {fmt(num(data.get('oracle_factor')))}. Every layout is compared with the "
                "float64 oracle and the single-rank runs of the same precision.")
        worst_by_layout = {}
        for c in cs:
            parts = c["name"].split("/")
            if len(parts) > 2:
                worst_by_layout.setdefault(parts[1], []).append(c)
        rows, cls = [], []
        for b in recs:
            failed = b.get("checks_failed")
            st = "passed" if not failed else f"FAILED ({failed})"
            rows.append([f"`{record_tail(b['name'], 'conformance')}`", str(b.get("precision", "")),
                         fmt(b.get("ranks")), f"{b.get('tp', 1)}×{b.get('dp', 1)}×{b.get('pp', 1)}",
                         fmt(num(b.get("final_loss")), 7), fmt(num(b.get("max_loss_deviation")), 3),
                         fmt(num(b.get("worst_check_fraction")), 3), fmt(b.get("checks")), st,
                         fmt_timing(b.get("step_time_ms"), 3)])
            cls.append("fail" if failed else None)
        d.table(["layout", "precision", "ranks", "TP×DP×PP", "final loss", "max |Δloss| vs f64",
                 "worst check (value/tol)", "checks", "status", "step (ms)"], rows, row_cls=cls)
        d.p("max |Δloss|: the largest |loss − loss of the float64 oracle| over the steps; worst check: the largest "
            "value / tolerance over the layout's checks (<= 1 passes). Step times are the layout's k ranks' while "
            "the world's other ranks wait for them: compare them only between layouts of the same rank count.",
            "note")
        skipped = data.get("skipped") or []
        if skipped:
            d.p("Skipped (need more ranks than the world's " + str(self.world()) + "): " +
                ", ".join(f"`{s.get('layout')}` ({s.get('needs_ranks')})" for s in skipped if isinstance(s, dict)) + ".")
        self.plot_conformance_loss(data, cs)

    def plot_conformance_loss(self, data, cs):
        layouts = [x for x in (data.get("layouts") or []) if isinstance(x, dict) and isinstance(x.get("losses"), list)]
        oracle = data.get("oracle_losses")
        if not layouts or not isinstance(oracle, list) or not oracle:
            return
        from matplotlib.ticker import MaxNLocator
        precs = list(OrderedDict.fromkeys(str(x.get("precision", "fp32")) for x in layouts))
        groups = layout_groups(list(OrderedDict.fromkeys(strip_precision(x["layout"]) for x in layouts)))
        p = plt()
        nr, nc = len(groups), len(precs)
        fig, axes = p.subplots(nr, nc, figsize=(4.9 * nc + 2.4, 3.1 * nr + 0.7), squeeze=False, sharex=True,
                               constrained_layout=True)
        for j in range(nc):  # one y scale per precision
            for i in range(1, nr):
                axes[i][j].sharey(axes[0][j])
        for i, (gname, members) in enumerate(groups):
            cols = dict(zip(members, colors(len(members))))
            for j, prec in enumerate(precs):
                ax = axes[i][j]
                tol = defaultdict(list)
                same = OrderedDict()  # bitwise-equal loss curves would hide each other: one line, joint label
                for x in layouts:
                    name = strip_precision(x["layout"])
                    if str(x.get("precision", "fp32")) != prec or name not in cols:
                        continue
                    same.setdefault(tuple(x["losses"]), []).append(name)
                    for st, t in loss_tolerance(cs, f"conformance/{x['layout']}/").items():
                        tol[st].append(t)
                for losses, names in same.items():
                    dev = [abs(a - b) if a is not None and b is not None else 0 for a, b in zip(losses, oracle)]
                    xs = [k for k, v in enumerate(dev) if v > 0]
                    ax.plot(xs, [dev[k] for k in xs], color=cols[names[0]], lw=1.2,
                            label=textwrap.fill(" = ".join(names), 34, subsequent_indent="  "),
                            marker="." if len(dev) <= 40 else None, ms=4)
                if tol:
                    xs = sorted(tol)
                    ax.plot(xs, [min(tol[st]) for st in xs], color="black", ls="--", lw=1.4, label="check tolerance")
                ax.set_yscale("log")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                if i == 0:
                    ax.set_title(f"{prec}", fontsize=11, fontweight="bold")
                if i == nr - 1:
                    ax.set_xlabel("step")
                if j == 0:
                    ax.set_ylabel(("" if nr == 1 else f"{gname}\n") + "|Δloss| (nats, log scale)")
            entries = OrderedDict()  # one legend per row: the union over the precisions' panels
            for j in range(nc):
                for hh, ll in zip(*axes[i][j].get_legend_handles_labels()):
                    entries.setdefault(ll, hh)
            tol = entries.pop("check tolerance", None)
            if tol is not None:
                entries["check tolerance"] = tol
            axes[i][nc - 1].legend(entries.values(), entries.keys(), loc="upper left", bbox_to_anchor=(1.02, 1.0),
                                   fontsize=7.5)
        fig.suptitle("Conformance: |loss − float64 oracle| per step, each layout" +
                     (" (rows: layout groups; columns: precision)" if nr > 1 else ""))
        self.save(fig, "conformance-loss", "conformance loss deviation per layout",
                  "The loss curves of every layout overlap the oracle's to about 1e-7 (fp32), so this plots the "
                  "deviation instead: |loss − loss of the float64 oracle| per step, on a log scale (exact zeros "
                  "not drawn); one column per precision (its own y scale), one row per group of layouts. Layouts "
                  "whose losses are bitwise equal share one line, labelled A = B. The dashed black line is the "
                  "`loss/step:N` checks' tolerance: a layout passes while below it.")

    # --- ffn_tp

    def suite_ffn_tp(self, recs, cs, data):
        d = self.doc
        recs = [b for b in recs if not b.get("skipped") and "tp" in b]
        if not recs:
            return self.generic("ffn_tp", recs)
        by = defaultdict(dict)
        for b in recs:
            by[int(b["tp"])][b.get("pass", "forward")] = b
        passes = [p for p in ("forward", "forward_backward") if any(p in v for v in by.values())]
        h = recs[0].get("hidden", data.get("hidden"))
        n = recs[0].get("tokens", data.get("tokens"))
        d.p(f"FFN h = {h} → 4h → h over {n} tokens, Megatron column/row split; time is the median of the slowest "
            "rank's time per iteration; speedup = time(TP 1) / time(TP); efficiency = speedup / TP; comm share: the "
            "slowest rank's all-reduce time over its pass time.")
        headers = ["TP"]
        for p in passes:
            t = "fwd" if p == "forward" else "fwd+bwd"
            headers += [f"{t} (ms)", f"{t} speedup", f"{t} efficiency", f"{t} comm share"]
        headers.append("idle ranks")
        rows = []
        for tp in sorted(by):
            row = [str(tp)]
            for p in passes:
                b = by[tp].get(p, {})
                row += [fmt_timing(b.get("time_ms"), 4), fmt(num(b.get("speedup")), 3),
                        fmt_pct(num(b.get("efficiency"))), fmt_pct(num(b.get("comm_fraction")))]
            row.append(fmt(next(iter(by[tp].values())).get("idle_ranks")))
            rows.append(row)
        d.table(headers, rows)
        d.p("At TP t the world runs W/t groups side by side, so at TP 1 every rank computes its own whole FFN at "
            "the same time: the baseline shares the machine (cores, memory bandwidth) as the TP runs do, and the "
            "speedup is over that contended TP 1, not over one rank alone.", "note")
        self.plot_tp(by, passes, h, n)

    def plot_tp(self, by, passes, h, n):
        p = plt()
        import numpy as np
        tps = sorted(by)
        x = np.arange(len(tps))
        w = 0.8 / len(passes)
        fig, (ax, ax2) = p.subplots(1, 2, figsize=(12, 4.4), constrained_layout=True)
        cols = {"forward": "#4c72b0", "forward_backward": "#dd8452"}
        for i, ps in enumerate(passes):
            sp = [num(by[t].get(ps, {}).get("speedup")) or 0 for t in tps]
            ef = [num(by[t].get(ps, {}).get("efficiency")) or 0 for t in tps]
            lab = "forward" if ps == "forward" else "forward + backward"
            b1 = ax.bar(x + (i - (len(passes) - 1) / 2) * w, sp, w, color=cols.get(ps), label=lab)
            b2 = ax2.bar(x + (i - (len(passes) - 1) / 2) * w, [100 * e for e in ef], w, color=cols.get(ps), label=lab)
            ax.bar_label(b1, labels=[f"{v:.2f}×" for v in sp], fontsize=8, label_type="center", color="white")
            ax2.bar_label(b2, labels=[f"{100 * v:.0f}%" for v in ef], fontsize=8, label_type="center", color="white")
        for j, t in enumerate(tps):
            ax.plot([j - 0.45, j + 0.45], [t, t], color="black", ls="--", lw=1.2,
                    label="ideal (= TP)" if j == 0 else None)
        ax2.axhline(100, color="black", ls="--", lw=1.2, label="ideal (100%)")
        for a in (ax, ax2):
            a.set_xticks(x, [f"TP {t}" for t in tps])
            a.set_xlabel("tensor-parallel size")
            a.grid(axis="x", visible=False)
        ax.set_ylabel("speedup over TP 1 (×)")
        ax.set_ylim(0, max(tps) * 1.18)
        ax2.set_ylabel("parallel efficiency (%)")
        ax2.set_ylim(0, 128)
        ax.set_title(f"FFN tensor parallel speedup (h={h}, {n} tokens)")
        ax2.set_title("Parallel efficiency = speedup / TP")
        ax.legend(loc="upper left", fontsize=8)
        ax2.legend(loc="upper center", fontsize=8, ncol=3)
        self.save(fig, "tp-scaling", "tensor-parallel speedup and efficiency",
                  "Speedup of the Megatron-split FFN over TP 1 (left; dashed: ideal = TP) and parallel efficiency "
                  "(right; dashed: 100%), forward and forward + backward.")

    # --- pipeline

    def suite_pipeline(self, recs, cs, data):
        d = self.doc
        run = [b for b in recs if not b.get("skipped") and "schedule" in b]
        skipped = [b for b in recs if b.get("skipped")]
        if not run:
            return self.generic("pipeline", recs)
        if data.get("bubble_definition"):
            d.p(f"Bubble = {data['bubble_definition']}. Theory: (p−1)/(m+p−1), (p−1)/(v m+p−1) interleaved; "
                "simulated: the schedule replayed with zero communication.")
        failed = {c["name"] for c in cs if not c.get("passed")}
        rows, cls = [], []
        for b in run:
            tag = f"pipeline/{b['schedule']}/p:{b['p']}/m:{b['m']}/"
            bad = sorted(n[len(tag):] for n in failed if n.startswith(tag))
            bs = b.get("bubble_measured_stats")
            rows.append([b["schedule"], fmt(b.get("p")), fmt(b.get("m")), fmt(b.get("virtual_stages")),
                         f"{num(b.get('bubble_theory')):.4f}", f"{num(b.get('bubble_simulated')):.4f}",
                         f"{num(b.get('bubble_measured')):.4f}" + (
                             f" ({stat(bs, 'min'):.3f}–{stat(bs, 'max'):.3f})" if stat(bs, "min") is not None else ""),
                         fmt_timing(b.get("step_time_ms"), 4), fmt(num(b.get("step_time_simulated_ms")), 4),
                         fmt(b.get("peak_in_flight"), 3),
                         "FAILED: " + ", ".join(bad) if bad else "passed"])
            cls.append("fail" if bad else None)
        d.table(["schedule", "p", "m", "v", "theory", "simulated", "measured (min–max)", "step (ms)",
                 "simulated step (ms)", "peak in-flight per stage", "checks"], rows,
                align=["l"] + ["r"] * 9 + ["l"], row_cls=cls)
        if skipped:
            d.p("Not run: " + "; ".join(f"`{record_tail(b['name'], 'pipeline')}` ({b.get('skip_message', '')})"
                                        for b in skipped) + ".", "note")
        self.pipeline_runs = run
        self.plot_bubble(run, failed)

    def plot_bubble(self, run, failed):
        p = plt()
        import numpy as np
        ps = sorted({int(b["p"]) for b in run})
        fig, axes = p.subplots(1, len(ps), figsize=(5.6 * len(ps) + 0.5, 4.5), squeeze=False, constrained_layout=True,
                               sharey=True)
        scheds = list(OrderedDict.fromkeys(b["schedule"] for b in run))
        cols = dict(zip(scheds, ["#4c72b0", "#dd8452", "#55a868", "#c44e52"][:len(scheds)] if len(scheds) <= 4
                        else colors(len(scheds))))
        offs = {s: (i - (len(scheds) - 1) / 2) * 0.06 for i, s in enumerate(scheds)}
        for ax, pp in zip(axes[0], ps):
            sub = [b for b in run if int(b["p"]) == pp]
            ms = sorted({int(b["m"]) for b in sub})
            drawn = set()
            for s in scheds:
                v = next((int(b.get("virtual_stages", 1)) for b in sub if b["schedule"] == s), 1)
                key = (v if s == "interleaved" else 1)
                if key in drawn:
                    continue
                drawn.add(key)
                own = [int(b["m"]) for b in sub if (b["schedule"] == "interleaved") == (key > 1)]
                mm = np.geomspace(min(own), max(own), 200) if max(own) > min(own) else np.array(own[:1], float)
                th = (pp - 1) / (key * mm + pp - 1)
                same = [t for t in scheds if (next((int(b.get("virtual_stages", 1)) for b in sub
                                                    if b["schedule"] == t), 1) if t == "interleaved" else 1) == key]
                ax.plot(mm, th, color="black" if key == 1 else "#777777", ls="-" if key == 1 else "--", lw=1.1,
                        label="theory " + "/".join(same) + (f" (p−1)/({key}m+p−1)" if key > 1 else " (p−1)/(m+p−1)"))
            for s in scheds:
                pts = sorted((b for b in sub if b["schedule"] == s), key=lambda b: int(b["m"]))
                if not pts:
                    continue
                xs = [int(b["m"]) * 2 ** offs[s] for b in pts]
                ys = [num(b["bubble_measured"]) for b in pts]
                lo = [y - (stat(b.get("bubble_measured_stats"), "min") or y) for b, y in zip(pts, ys)]
                hi = [(stat(b.get("bubble_measured_stats"), "max") or y) - y for b, y in zip(pts, ys)]
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=5, color=cols[s], capsize=2, label=f"{s} measured")
                bad = [(x, y) for x, y, b in zip(xs, ys, pts)
                       if f"pipeline/{s}/p:{b['p']}/m:{b['m']}/bubble" in failed]
                if bad:
                    ax.scatter([x for x, _ in bad], [y for _, y in bad], s=150, facecolors="none", edgecolors="red",
                               lw=1.5, zorder=5, label="check failed" if s == scheds[0] or True else None)
            ax.set_xscale("log", base=2)
            ax.set_xticks(ms, [str(m) for m in ms])
            ax.minorticks_off()
            ax.set_xlabel("micro-batches m (log scale)")
            ax.set_title(f"p = {pp} stages")
            ax.set_ylim(0, 1)
            h, l = ax.get_legend_handles_labels()
            uniq = OrderedDict()
            for hh, ll in zip(h, l):
                uniq.setdefault(ll, hh)
            ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="upper right")
        axes[0][0].set_ylabel("bubble = idle / step time")
        t_f = run[0].get("t_forward_us")
        t_b = run[0].get("t_backward_us")
        fig.suptitle(f"Pipeline bubble against micro-batches (t_f {fmt(num(t_f))} µs, t_b {fmt(num(t_b))} µs per "
                     f"stage, {self.world()} ranks)")
        self.save(fig, "bubble", "pipeline bubble against micro-batches",
                  "Measured bubble (median of the repetitions, bars: min–max; points of one m are spread slightly "
                  "sideways) against micro-batches per step, with the closed form as lines (GPipe and 1F1B share "
                  "(p−1)/(m+p−1)). Red rings: the bubble check (|measured − simulated| <= 0.05) failed.")

    # --- memory

    def suite_memory(self, recs, cs, data):
        d = self.doc
        recs = [b for b in recs if not b.get("skipped")]
        cases = OrderedDict()
        for b in recs:
            tail = record_tail(b["name"], "memory")
            case, _, rk = tail.rpartition("/rank:")
            cases.setdefault(case or tail, []).append((int(rk) if rk.isdigit() else len(cases.get(case, [])), b))
        if not cases:
            return self.generic("memory", recs)
        tiers = ["device", "host"]
        used = [(t, k) for t in tiers for k in MEM_CATS
                if any((num(b.get(f"measured_{t}_{k}_bytes")) or 0) or (num(b.get(f"predicted_{t}_{k}_bytes")) or 0)
                       for b in recs)]
        mx = max((num(b.get(f"measured_{t}_{k}_bytes")) or 0) for b in recs for t, k in used) if used else 0
        unit, scale = byte_unit(mx)
        d.p(f"Peak bytes per rank and category in {unit} (the Device's accounting from the model's construction "
            "through training), beside the analytic model's prediction: a cell reads `measured` when the two agree "
            "exactly and `measured ≠ predicted` otherwise. Comm buffers are not modelled. Each category's peak is "
            "its own: they need not occur at the same moment, so a row's sum is not the rank's peak footprint.")
        rows, cls = [], []
        for case, rl in cases.items():
            groups = []  # consecutive ranks with the same cells share a row
            for rk, b in sorted(rl, key=lambda x: x[0]):
                cells, bad = [], False
                for t, k in used:
                    m, pr = num(b.get(f"measured_{t}_{k}_bytes")), num(b.get(f"predicted_{t}_{k}_bytes"))
                    cell = fmt(m / scale if m is not None else None, 4)
                    if pr is not None and m is not None and pr != m:
                        cell = f"**{cell} ≠ {fmt(pr / scale, 4)}**"
                        bad = True
                    cells.append(cell)
                if groups and groups[-1][2] == cells and groups[-1][1] == rk - 1:
                    groups[-1][1] = rk
                else:
                    groups.append([rk, rk, cells, bad])
            for r0, r1, cells, bad in groups:
                rows.append([f"`{case}`", str(r0) if r0 == r1 else f"{r0}–{r1}"] + cells)
                cls.append("fail" if bad else None)
        d.table(["layout", "ranks"] + [f"{t} {k}" for t, k in used], rows, row_cls=cls)
        self.plot_memory(cases, used, unit, scale)

    def plot_memory(self, cases, used, unit, scale):
        p = plt()
        from matplotlib.patches import Patch
        from matplotlib.lines import Line2D
        n = len(cases)
        ncol = min(4, n)
        nrow = math.ceil(n / ncol)
        fig, axes = p.subplots(nrow, ncol, figsize=(3.6 * ncol + 2.2, 3.3 * nrow + 0.6), squeeze=False, sharey=True,
                               constrained_layout=True)
        # comm buffers last, so the prediction tick marks the top of the modelled categories
        order = [x for x in used if x[1] != "comm_buffer"] + [x for x in used if x[1] == "comm_buffer"]
        for ax, (case, rl) in zip(axes.flat, cases.items()):
            rl = sorted(rl, key=lambda x: x[0])
            for i, (rk, b) in enumerate(rl):
                bottom = 0.0
                for t, k in order:
                    v = (num(b.get(f"measured_{t}_{k}_bytes")) or 0) / scale
                    if v:
                        ax.bar(i, v, bottom=bottom, color=MEM_COLORS[k], hatch="xx" if t == "host" else None,
                               edgecolor="white", lw=0.5, width=0.7)
                    bottom += v
                pred = sum((num(b.get(f"predicted_{t}_{k}_bytes")) or 0) for t, k in used) / scale
                meas = sum((num(b.get(f"measured_{t}_{k}_bytes")) or 0) for t, k in used if k != "comm_buffer") / scale
                ax.plot([i - 0.45, i + 0.45], [pred, pred], color="black", lw=2.2)
                if abs(pred - meas) > 1e-9 * max(pred, 1):
                    ax.annotate("≠", (i, pred), ha="center", va="bottom", color="red", fontsize=12)
            ax.set_xticks(range(len(rl)), [str(rk) for rk, _ in rl])
            ax.set_xlabel("rank")
            ax.set_title(case, fontsize=10)
            ax.grid(axis="x", visible=False)
        for ax in axes.flat[n:]:
            ax.set_visible(False)
        for r in range(nrow):
            axes[r][0].set_ylabel(f"peak bytes ({unit})")
        handles = [Patch(facecolor=MEM_COLORS[k], hatch="xx" if t == "host" else None, edgecolor="white",
                         label=f"{k} ({t})") for t, k in order]
        handles.append(Line2D([], [], color="black", lw=2.2, label="analytic model\n(all but comm_buffer)"))
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.93), fontsize=8, title="category (tier)")
        fig.suptitle("Peak memory per rank by category, measured (stacked) vs the analytic model (black tick)")
        self.save(fig, "memory", "memory breakdown per rank",
                  "Each rank's measured peak bytes per category, stacked (host-tier categories hatched; comm buffers "
                  "on top, not modelled), and the analytic model's total for the modelled categories as a black "
                  "tick: where the tick sits at the top of the modelled stack the model is exact. Each category's "
                  "peak is its own, so the stack height is an upper bound of the rank's footprint, not its peak.")

    # --- precision, recompute, offload, overlap, gemm

    def suite_precision(self, recs, cs, data):
        d = self.doc
        recs = [b for b in recs if not b.get("skipped")]
        rows = []
        for b in recs:
            sc = b.get("loss_scales")
            scale = f"{fmt_scale(sc[0])} → {fmt_scale(sc[-1])}" if isinstance(sc, list) and sc else "–"
            rows.append([f"`{record_tail(b['name'], 'precision')}`", str(b.get("precision", "")),
                         str(b.get("communication_data_type", "")), fmt_timing(b.get("step_time_ms")),
                         f"{fmt(num(b.get('speedup_over_fp32')), 3)}×", fmt(num(b.get("final_loss")), 6),
                         fmt(num(b.get("max_loss_deviation_from_fp32")), 3),
                         fmt(num(b.get("tail_mean_loss_deviation_from_fp32")), 3),
                         fmt_bytes(num(b.get("dp_comm_bytes_per_step"))), fmt(num(b.get("model_state_bytes_per_param"))),
                         fmt(b.get("skipped_steps")), scale])
        d.table(["variant", "precision", "grad all-reduce type", "step (ms)", "speedup vs fp32", "final loss",
                 "max |Δloss|/loss vs fp32", "tail mean Δloss/loss", "DP bytes/step", "state bytes/param",
                 "skipped steps", "loss scale first → last"], rows)
        d.p("Deviations are relative to the fp32 run's loss at the same step: max over steps of |Δ|/loss (spikes "
            "included), and the signed difference of the mean loss over the last quarter of the steps. On the CPU "
            "half precision is emulated (conversions, no faster arithmetic), so its speedup is not a GPU's.", "note")
        self.plot_precision(recs)
        self.plot_step_times("precision", recs, "variant")

    def plot_precision(self, recs):
        base = next((b for b in recs if b.get("precision") == "fp32" and isinstance(b.get("losses"), list)), None)
        others = [b for b in recs if b is not base and isinstance(b.get("losses"), list)]
        if base is None or not others:
            return
        p = plt()
        from matplotlib.ticker import MaxNLocator
        # A variant forced to overflow skips steps on purpose; its deviation would flatten the others'.
        forced = [b for b in others if "forced" in b["name"] or "overflow" in b["name"]]
        normal = [b for b in others if b not in forced]
        scaled = [b for b in others if isinstance(b.get("loss_scales"), list) and b["loss_scales"]]
        panels = [x for x in (normal, forced) if x]
        n = len(panels) + bool(scaled)
        fig, axes = p.subplots(1, n, figsize=(5.6 * n + 0.6, 4.3), squeeze=False, constrained_layout=True)
        bl = base["losses"]
        cols = dict(zip([b["name"] for b in others], colors(len(others))))
        for ax, group in zip(axes[0], panels):
            for b in group:
                dev = [(a - c) / c for a, c in zip(b["losses"], bl) if a is not None and c]
                ax.plot(range(len(dev)), [100 * x for x in dev], color=cols[b["name"]],
                        label=record_tail(b["name"], "precision"))
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xlabel("step")
            ax.set_ylabel("(loss − loss fp32) / loss fp32 (%)")
            ax.set_title("Loss deviation from the fp32 run" if group is normal else
                         "Forced overflow: deviation from fp32 (own scale)")
            ax.legend(fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if scaled:
            ax2 = axes[0][n - 1]
            for b in scaled:
                ax2.step(range(len(b["loss_scales"])), b["loss_scales"], where="post", color=cols[b["name"]],
                         label=record_tail(b["name"], "precision"))
            ax2.set_yscale("log", base=2)
            ax2.set_xlabel("step")
            ax2.set_ylabel("loss scale (log2 scale)")
            ax2.set_title("Dynamic loss scale per step")
            ax2.legend(fontsize=8)
            ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
        self.save(fig, "precision-loss", "loss deviation of half precision from fp32",
                  "Each variant's loss relative to the fp32 run's at the same step (signed, %); the curves themselves "
                  "overlap." + (" A variant forced to overflow skips steps on purpose and gets its own panel." if
                                forced else "") + (" Right: the fp16 dynamic loss scale per step; each halving is "
                                                   "a step skipped for an overflow." if scaled else ""))

    def suite_recompute(self, recs, cs, data):
        recs = [b for b in recs if not b.get("skipped")]
        rows = []
        for b in recs:
            rows.append([f"`{b.get('recompute', record_tail(b['name'], 'recompute'))}`", fmt_timing(b.get("step_time_ms")),
                         fmt_pct(num(b.get("overhead"))), fmt_pct(num(b.get("predicted_extra_flops"))),
                         pair_bytes(b, "activation_bytes", "predicted_activation_bytes"),
                         fmt_pct(num(b.get("activation_saving"))),
                         pair_bytes(b, "workspace_bytes", "predicted_workspace_bytes")])
        self.doc.table(["recompute", "step (ms)", "time overhead", "predicted extra FLOPs", "activation peak (pred.)",
                        "activation saving", "workspace peak (pred.)"], rows)
        self.doc.p("Rank 0's bytes; overhead and saving are against `none`.", "note")
        self.plot_step_times("recompute", recs, "recompute")

    def suite_offload(self, recs, cs, data):
        recs = [b for b in recs if not b.get("skipped")]
        rows = []
        for b in recs:
            rows.append([f"`{record_tail(b['name'], 'offload')}`", fmt_timing(b.get("step_time_ms")),
                         fmt_bytes(num(b.get("device_model_state_bytes"))), fmt_bytes(num(b.get("host_model_state_bytes"))),
                         f"{fmt(num(b.get('slowdown')), 3)}×" if "slowdown" in b else "–",
                         fmt_bytes(num(b.get("device_bytes_saved"))) if "device_bytes_saved" in b else "–"])
        self.doc.table(["variant", "step (ms)", "device model states", "host model states", "slowdown",
                        "device bytes saved"], rows)
        self.plot_step_times("offload", recs, "variant")

    def suite_overlap(self, recs, cs, data):
        recs = [b for b in recs if not b.get("skipped")]
        by = OrderedDict()
        for b in recs:
            f = parse_name_fields(b["name"])
            by.setdefault((f.get("zero", "?"), b.get("reduce_bucket_size", f.get("reduce_bucket_size"))), {})[
                f.get("overlap_comm", "?")] = b
        rows = []
        for (z, bucket), v in by.items():
            off, on = v.get("false", {}), v.get("true", {})
            rows.append([str(z), fmt_bytes(num(bucket) * 4) + f" ({fmt(bucket)} elements)" if num(bucket) else "–",
                         fmt_timing(off.get("step_time_ms")), fmt_timing(on.get("step_time_ms")),
                         f"{fmt(num(on.get('gain')), 3)}×" if "gain" in on else "–"])
        self.doc.table(["ZeRO stage", "reduce bucket (fp32)", "overlap off: step (ms)", "overlap on: step (ms)",
                        "gain (off / on)"], rows)
        self.plot_step_times(
            "overlap", recs, "reduce bucket and overlap_comm",
            label=lambda b: (f"bucket {fmt(num(b.get('reduce_bucket_size')))}, overlap "
                             f"{'on' if parse_name_fields(b['name']).get('overlap_comm') == 'true' else 'off'}"),
            color=lambda b: "#dd8452" if parse_name_fields(b["name"]).get("overlap_comm") == "true" else "#4c72b0")

    def suite_gemm(self, recs, cs, data):
        rows, cls = [], []
        for b in recs:
            if b.get("skipped"):
                rows.append([f"`{record_tail(b['name'], 'gemm')}`", "", "", "", "", "skipped", b.get("skip_message", ""), ""])
                cls.append("skip")
                continue
            rows.append([f"`{record_tail(b['name'], 'gemm')}`", str(b.get("precision", "")), fmt(b.get("M")),
                         fmt(b.get("N")), fmt(b.get("K")), fmt(num(b.get("real_time")), 4) + " " + str(b.get("time_unit", "")),
                         fmt(num(b.get("tflops")), 4), fmt_pct(num(b.get("fraction_of_peak")))])
            cls.append(None)
        self.doc.table(["GEMM", "precision", "M", "N", "K", "time", "TFLOP/s", "of the square GEMM"], rows, row_cls=cls)
        dev = data.get("device")
        self.doc.p(f"TFLOP/s = 2 M N K / time, slowest rank{f', on {dev}' if dev else ''}. The last column is "
                   "relative to the measured square (`peak`) GEMM of the same precision, not to the hardware's "
                   "datasheet peak, so it can exceed 100%.", "note")

    def plot_step_times(self, suite, recs, what, label=None, color=None):
        """Median step time per variant with min–max whiskers; one PNG per suite (-step-times-SUITE)."""
        label = label or (lambda b: record_tail(b["name"], suite))
        sel = [b for b in recs if isinstance(b.get("step_time_ms"), dict) and stat(b["step_time_ms"], "median") is not None]
        pts = [(label(b), b["step_time_ms"]) for b in sel]
        if len(pts) < 2:
            return
        p = plt()
        fig, ax = p.subplots(figsize=(8.5, 0.9 + 0.42 * len(pts)), constrained_layout=True)
        meds = [stat(t, "median") for _, t in pts]
        lo = [m - (stat(t, "min") if stat(t, "min") is not None else m) for m, (_, t) in zip(meds, pts)]
        hi = [(stat(t, "max") if stat(t, "max") is not None else m) - m for m, (_, t) in zip(meds, pts)]
        ax.barh(range(len(pts)), meds, xerr=[lo, hi], color=[color(b) for b in sel] if color else "#4c72b0",
                capsize=3, height=0.6, error_kw={"ecolor": "#555555", "lw": 1})
        for i, m in enumerate(meds):
            ax.text(m, i + 0.32, f" {fmt(m, 3)} ms", va="center", ha="left", fontsize=8)
        ax.set_yticks(range(len(pts)), [n for n, _ in pts])
        ax.invert_yaxis()
        ax.set_xlabel("step time (ms): median over steps and repetitions, whiskers min–max")
        ax.set_title(f"{suite}: step time per {what}")
        ax.grid(axis="y", visible=False)
        self.save(fig, f"step-times-{suite}", f"{suite} step times",
                  f"The {suite} suite's median step time per {what} (slowest rank per step), whiskers from the "
                  "fastest to the slowest step.")

    # --- future suites: sweep, kernels

    def suite_sweep(self, recs, cs, data):
        recs = [b for b in recs if not b.get("skipped")]
        if not recs:
            return self.generic("sweep", recs)
        failed = {c["name"].split("/")[1] for c in cs if not c.get("passed") and c["name"].count("/") >= 2}
        theory = any("bubble" not in b and "bubble_theory" in b for b in recs)
        host = any(num(b.get("peak_host_bytes_per_rank")) for b in recs)
        headers = ["layout", "ranks", "TP×DP×PP", "tokens/s", "step (ms)", "peak bytes per rank"]
        headers += ["peak host bytes"] if host else []
        headers += ["bubble (theory)" if theory else "bubble", "idle share", "comm share", "final loss"]
        rows, cls = [], []
        for b in recs:
            lay = b.get("layout", record_tail(b["name"], "sweep"))
            bubble = num(b.get("bubble", b.get("bubble_theory")))
            dims = f"{b['tp']}×{b.get('dp', '?')}×{b['pp']}" if "tp" in b and "pp" in b else "–"
            row = [f"`{lay}`", fmt(b.get("ranks")), dims, fmt(num(b.get("tokens_per_s")), 5),
                   fmt_timing(b.get("step_time_ms")), fmt_bytes(num(b.get("peak_bytes_per_rank")))]
            row += [fmt_bytes(num(b.get("peak_host_bytes_per_rank")))] if host else []
            row += [fmt_pct(bubble) if bubble is not None else "–", fmt_pct(num(b.get("idle_fraction"))),
                    fmt_pct(num(b.get("comm_fraction"))), fmt(num(b.get("final_loss")), 6)]
            rows.append(row)
            cls.append("fail" if lay in failed else None)
        headers, rows = drop_empty_columns(headers, rows, keep=1)
        self.doc.table(headers, rows, row_cls=cls)
        notes = []
        for key, word, pick in (("tokens_per_s", "highest throughput", max), ("peak_bytes_per_rank",
                                                                              "least memory per rank", min)):
            vals = [(num(b.get(key)), b) for b in recs if num(b.get(key))]
            if len({v for v, _ in vals}) > 1:
                b = pick(vals, key=lambda x: x[0])[1]
                notes.append(f"{word}: `{b.get('layout', b['name'])}`")
        if notes:
            self.doc.p("; ".join(notes).capitalize()[:1] + "; ".join(notes)[1:] + ".")
        self.doc.p("Step: the median of the slowest rank's step time; peak: the busiest rank's device bytes, all "
                   "categories at once; idle and comm: shares of the ranks' step time, mean over ranks." +
                   (" The bubble is the schedule's closed form, not a measurement; a pipeline rank waiting for a "
                    "message counts that wait as comm, so compare it with the comm share rather than idle."
                    if theory else ""), "note")
        na = data.get("not_applicable") or []
        if na:
            self.doc.p("Not applicable to this model and world: " + "; ".join(
                f"`{x.get('layout')}` ({x.get('reason', '')})" for x in na if isinstance(x, dict)) + ".", "note")
        self.plot_sweep(recs)

    def plot_sweep(self, recs):
        pts = [b for b in recs if num(b.get("tokens_per_s")) is not None]
        if len(pts) < 2:
            return
        p = plt()
        from matplotlib.patches import Patch
        labels = [str(b.get("layout", record_tail(b["name"], "sweep"))) for b in pts]
        fig, (ax, ax2) = p.subplots(1, 2, figsize=(12.5, 1.2 + 0.42 * len(pts)), sharey=True, constrained_layout=True)
        y = range(len(pts))
        tps = [num(b["tokens_per_s"]) for b in pts]
        ax.barh(y, tps, color="#4c72b0", height=0.6)
        for i, v in enumerate(tps):
            ax.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel("tokens/s (higher is better)")
        ax.set_title("Throughput per layout")
        ax.set_xlim(0, max(tps) * 1.18)
        peaks = [num(b.get("peak_bytes_per_rank")) or 0 for b in pts]
        unit, scale = byte_unit(max(peaks) if peaks else 0)
        cats = [k for k in MEM_CATS if any(isinstance(b.get("peak_bytes_by_category"), dict) and
                                           num(b["peak_bytes_by_category"].get(k)) for b in pts)]
        if cats:
            for i, b in enumerate(pts):
                left = 0.0
                for k in cats:
                    v = (num(b["peak_bytes_by_category"].get(k)) or 0) / scale
                    ax2.barh(i, v, left=left, color=MEM_COLORS[k], height=0.6, edgecolor="white", lw=0.5)
                    left += v
                ax2.plot([peaks[i] / scale] * 2, [i - 0.38, i + 0.38], color="black", lw=2)
            handles = [Patch(color=MEM_COLORS[k], label=k) for k in cats]
            handles.append(p.Line2D([], [], color="black", lw=2, label="peak, all at once"))
            ax2.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        else:
            ax2.barh(y, [v / scale for v in peaks], color="#8172b3", height=0.6)
        ax2.set_xlabel(f"peak device bytes per rank ({unit}, lower is better)")
        ax2.set_title("Memory per rank (busiest rank)")
        self.save(fig, "sweep", "throughput and memory per layout",
                  "Each layout of the same model on the same ranks: tokens/s (left) and the busiest rank's peak "
                  "device bytes (right" + (": each category's own peak stacked; the black tick is the peak of all "
                                           "categories at once, at most the stack's length since categories can "
                                           "peak at different moments" if cats else "") + ").")

    def suite_kernels(self, recs, cs, data):
        if not recs:
            return self.generic("kernels", recs)
        core = {"iterations", "real_time", "cpu_time", "time_unit", "error_occurred", "error_message", "label",
                "skipped", "skip_message", "big_o", "rms"}
        counters = OrderedDict()
        for b in recs:
            for k, v in b.items():
                if k not in core and k not in GB_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool):
                    counters.setdefault(k, None)
        failed = {c["name"][len("kernels/"):].rsplit("/", 1)[0]: c for c in cs if not c.get("passed")}
        agg = any(b.get("run_type") == "aggregate" for b in recs)
        rows, cls = [], []
        for b in recs:
            u = b.get("time_unit", "ns")
            name = record_tail(b.get("run_name", b["name"]), "kernels")
            row = [f"`{name}`"]
            if agg:
                row.append(str(b.get("aggregate_name", "")))
            stats = b.get("real_time_stats")
            spread = ""
            if isinstance(stats, dict) and (stats.get("n") or 0) > 1 and stat(stats, "min") is not None:
                spread = f" ({fmt_duration(stat(stats, 'min'), u)}–{fmt_duration(stat(stats, 'max'), u)})"
            row += [fmt(b.get("iterations")), fmt_duration(num(b.get("real_time")), u) + spread,
                    fmt_duration(num(b.get("cpu_time")), u)]
            for k in counters:
                v = num(b.get(k))
                kind = counter_kind(k)
                row.append("–" if v is None else fmt_si(v, kind) if kind else fmt(v))
            err = b.get("error_message") or b.get("skip_message") or (
                failed[name].get("detail") if name in failed else "")
            row.append(str(err or ""))
            rows.append(row)
            cls.append("fail" if b.get("error_occurred") or name in failed else "skip" if b.get("skipped") else None)
        headers = ["kernel"] + (["aggregate"] if agg else []) + ["iterations", "real time", "CPU time"] + [
            {"FLOP/s": "FLOP/s", "B/s": "bytes/s", "items/s": "items/s"}.get(counter_kind(k), k) for k in counters]
        headers.append("error")
        if not any(r[-1] for r in rows):
            headers.pop()
            rows = [r[:-1] for r in rows]
        self.doc.table(headers, rows, row_cls=cls)
        self.doc.p("Google Benchmark runs (rank 0); times and counters as the records give them (medians over "
                   "repetitions where there are several), rates with decimal SI prefixes.", "note")

    # --- trace

    def trace_section(self):
        d = self.doc
        d.h(2, "Timeline (trace)", "timeline")
        if not self.spans:
            d.p("The trace has no spans.", "note")
            return
        segs = trace_segments(self.spans)
        d.p(f"{len(self.spans)} spans on {len({s['rank'] for s in self.spans})} rank(s) in {len(segs)} run(s) of "
            "consecutive steps. Span times are on each rank's steady clock, comparable between ranks of one node.")
        pipe = [g for g in segs if g["kind"] == "pipeline"]
        train = [g for g in segs if g["kind"] == "train"]
        if pipe:
            self.plot_pipeline_timeline(pipe[0])
        if train:
            self.plot_train_timeline(train[0])
        if not pipe and not train:
            d.p("No pipeline or train steps recognised in the trace.", "note")

    def plot_pipeline_timeline(self, seg):
        steps = seg["steps"]
        runs = getattr(self, "pipeline_runs", None)
        if runs is None:
            runs = [b for b in self.by_suite.get("pipeline", []) if not b.get("skipped") and "schedule" in b]
        reps = runs[0].get("repetitions") if runs else None
        label, chosen, stage_of = None, None, None
        if runs and reps and len(steps) == len(runs) * int(reps):
            # trace step k: the (k // reps)-th case that ran, repetition k % reps (warm-ups are not traced)
            def score(b):
                p, m = int(b["p"]), int(b["m"])
                return (b["schedule"] != "1f1b", -p, abs(m - 2 * p), m)
            best = min(range(len(runs)), key=lambda i: score(runs[i]))
            cand = [steps[best * int(reps) + r] for r in range(int(reps))]
            durs = [step_extent(seg["by_step"][s]) for s in cand]
            chosen = cand[sorted(range(len(cand)), key=lambda i: durs[i])[len(cand) // 2]]
            b = runs[best]
            label = (f"{b['schedule']}, p = {b['p']}, m = {b['m']}" +
                     (f", v = {b['virtual_stages']}" if b["schedule"] == "interleaved" else "") +
                     f" (repetition {cand.index(chosen) + 1} of {reps}, the median makespan)")
            stage_of = int(b["p"])
        else:
            # no report to map steps to cases: the step with the most compute spans up to 40 per rank
            def ncomp(s):
                ev = seg["by_step"][s]
                per = defaultdict(int)
                for e in ev:
                    per[e["rank"]] += e["name"].startswith("compute.")
                return max(per.values()) if per else 0
            ok = [s for s in steps if ncomp(s) <= 40] or steps
            chosen = max(ok, key=ncomp)
            label = f"trace step {chosen}"
        self.gantt(seg["by_step"][chosen], f"Pipeline timeline: {label}", "timeline", stage_of,
                   "One pipeline step as a Gantt chart per rank, from the trace: forward and backward compute, "
                   "posting a send (`comm.send`, thin), and idle (hatched grey: waiting for a message, its transfer "
                   "included). Time from the step's start. " + (
                       "The case is picked from the report's pipeline records (1F1B at the most stages, m near 2p)."
                       if stage_of else "The trace could not be matched to the report's pipeline cases."))

    def plot_train_timeline(self, seg):
        steps = seg["steps"]
        if not steps:
            return
        durs = {s: step_extent(seg["by_step"][s]) for s in steps}
        later = steps[1:] or steps  # step 0 allocates
        chosen = sorted(later, key=lambda s: durs[s])[len(later) // 2]
        self.gantt(seg["by_step"][chosen], f"Train timeline: step {chosen} (the median step)", "timeline-train", None,
                   "One train step per rank from the trace (the step of median duration, step 0 excluded): compute "
                   "(forward, backward, optimizer), communication (e.g. the DP gradient all-reduce, which includes "
                   "waiting for the slowest rank) and idle.")

    def gantt(self, events, title, name, p_stages, caption):
        p = plt()
        from matplotlib.patches import Patch
        t0 = min(e["ts"] for e in events)
        ranks = sorted({e["rank"] for e in events})
        span = max(e["ts"] + e["dur"] for e in events) - t0
        scale, unit = (1e-3, "ms") if span >= 2000 else (1.0, "µs")
        fig, ax = p.subplots(figsize=(13, 0.9 + 0.55 * len(ranks)), constrained_layout=True)
        present = {e["name"] for e in events}
        names = [n for n in SPAN_ORDER if n in present] + sorted(n for n in present if n not in SPAN_ORDER and n != "idle")
        names += ["idle"] if "idle" in present else []
        extra = iter(["#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"])
        pal = {n: SPAN_COLORS.get(n) or next(extra, "#333333") for n in names}
        row = {r: i for i, r in enumerate(ranks)}
        nforward = defaultdict(int)
        nbackward = defaultdict(int)
        for e in sorted(events, key=lambda e: e["ts"]):
            y = row[e["rank"]]
            x, w = (e["ts"] - t0) * scale, e["dur"] * scale
            n = e["name"]
            if n == "idle":
                ax.barh(y, w, left=x, height=0.7, color=pal[n], hatch="///", edgecolor="#bdbdbd", lw=0)
            elif n.startswith("comm."):
                ax.barh(y, max(w, span * scale / 1500), left=x, height=0.3, color=pal[n], lw=0)
            else:
                ax.barh(y, w, left=x, height=0.7, color=pal[n], edgecolor="white", lw=0.6)
                if p_stages and n in ("compute.forward", "compute.backward") and w > span * scale / 45:
                    k = nforward if n == "compute.forward" else nbackward
                    ax.text(x + w / 2, y, ("F" if n == "compute.forward" else "B") + str(k[e["rank"]]),
                            ha="center", va="center", fontsize=7, color="white")
                    k[e["rank"]] += 1
        lab = [f"rank {r}" + (f" (stage {r % p_stages})" if p_stages else "") for r in ranks]
        ax.set_yticks(range(len(ranks)), lab)
        ax.invert_yaxis()
        ax.set_xlim(0, span * scale)
        ax.set_xlabel(f"time from the step's start ({unit})")
        ax.set_title(title)
        ax.grid(axis="y", visible=False)
        handles = [Patch(facecolor=pal[n], hatch="///" if n == "idle" else None,
                         edgecolor="#bdbdbd" if n == "idle" else pal[n], label=n) for n in names]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        if p_stages:
            caption += (" Labels F*k* / B*k*: the rank's *k*-th forward / backward, in its own order (for GPipe "
                        "and 1F1B that is micro-batch *k*).")
        self.save(fig, name, title, caption)


# ---------------------------------------------------------------------------------------------
# The report of `dtbench validate`


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


# ---------------------------------------------------------------------------------------------
# Helpers over the data


def drop_empty_columns(headers, rows, keep=1):
    """Drops the columns after the first `keep` whose cells are all placeholders (–)."""
    cols = [i for i in range(len(headers)) if i < keep or any(r[i] not in ("–", "") for r in rows)]
    return [headers[i] for i in cols], [[r[i] for i in cols] for r in rows]


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def anchor(name):
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


def layout_groups(names):
    """Layouts in plot groups of at most 8: single TP / PP, products, DP and ZeRO, recompute."""
    fam = OrderedDict((k, []) for k in ("TP / PP", "TP x DP x PP", "DP / ZeRO", "recompute"))
    for n in names:
        dims = n.split(":")[0].upper()
        opts = n.split(":")[1:]
        if "full" in opts or "selective" in opts:
            fam["recompute"].append(n)
        elif any(o.startswith("zero") or o == "offload" for o in opts) or re.fullmatch(r"DP\d+", dims):
            fam["DP / ZeRO"].append(n)
        elif "X" in dims:
            fam["TP x DP x PP"].append(n)
        else:
            fam["TP / PP"].append(n)
    out = []
    for k, v in fam.items():
        if not v:
            continue
        parts = math.ceil(len(v) / 8)
        size = math.ceil(len(v) / parts)
        for i in range(parts):
            out.append((k + (f" ({i + 1}/{parts})" if parts > 1 else ""), v[i * size:(i + 1) * size]))
    if sum(len(v) for v in fam.values()) <= 8:  # few layouts: one row
        return [("layouts", names)]
    return out


def strip_precision(layout):
    return re.sub(r":(bf16|fp16)$", "", layout)


def fmt_scale(s):
    try:
        e = round(math.log2(s))
        if 2.0 ** e == s:
            return f"2^{e}"
    except (ValueError, TypeError):
        pass
    return fmt(num(s))


def pair_bytes(b, meas, pred):
    m, p = num(b.get(meas)), num(b.get(pred))
    if p is None or m == p:
        return fmt_bytes(m) + (" (=)" if p is not None else "")
    return f"**{fmt_bytes(m)} ≠ {fmt_bytes(p)}**"


_STEP = re.compile(r"/loss/step:(\d+)$")


def loss_tolerance(checks, prefix):
    """{step: tolerance} of the checks PREFIXloss/step:N."""
    out = {}
    for c in checks:
        n = c["name"]
        if n.startswith(prefix):
            m = _STEP.search(n)
            if m and n[:m.start()] + "/" == prefix.rstrip("/") + "/" and num(c.get("tolerance")) is not None:
                out[int(m.group(1))] = num(c["tolerance"])
    return out


def step_extent(events):
    return max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)


def trace_segments(spans):
    """Splits the spans into runs of consecutive steps: the train and pipeline suites share one recorder and
    both count steps from 0, so a step number alone is ambiguous. Per rank, a run ends where the step number
    goes back (or repeats after a gap); runs of different ranks that overlap in time are one segment.
    Each segment: {kind: pipeline | train | other, steps: [...], by_step: {step: [events]}}."""
    per_rank = defaultdict(list)
    for e in spans:
        per_rank[e["rank"]].append(e)
    runs = []  # [start, end, events]
    for evs in per_rank.values():
        evs.sort(key=lambda e: e["ts"])
        cur, prev_step, prev_end = [], None, None
        for e in evs:
            if cur and (e["step"] < prev_step or (e["step"] == prev_step and e["ts"] - prev_end > 2e5)):
                runs.append(cur)
                cur = []
            cur.append(e)
            prev_step = e["step"]
            prev_end = max(prev_end or 0, e["ts"] + e["dur"]) if cur[1:] else e["ts"] + e["dur"]
        if cur:
            runs.append(cur)
    ivs = sorted(([min(e["ts"] for e in r), max(e["ts"] + e["dur"] for e in r), r] for r in runs), key=lambda x: x[0])
    merged = []
    for lo, hi, r in ivs:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
            merged[-1][2].extend(r)
        else:
            merged.append([lo, hi, list(r)])
    segs = []
    for _, _, evs in merged:
        names = {e["name"] for e in evs}
        kind = ("train" if "compute.optimizer" in names else
                "pipeline" if "comm.send" in names or "comm.recv" in names else "other")
        by = defaultdict(list)
        for e in evs:
            by[e["step"]].append(e)
        segs.append({"kind": kind, "steps": sorted(by), "by_step": by})
    return segs


# ---------------------------------------------------------------------------------------------
# Main


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{PROG}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    ap = Parser(prog=PROG, description="Renders a dtbench report as Markdown and self-contained HTML with plots.")
    ap.add_argument("report", help="the report JSON (results/<run-id>.json), or the JSON of `dtbench validate` "
                    "(results/validate.json)")
    ap.add_argument("--trace", help="a Chrome trace from `dtbench run --trace FILE`: adds the pipeline timeline")
    ap.add_argument("--claims", metavar="FILE", help="the JSON of `dtbench claims --output FILE`: adds the rules of "
                    "thumb section")
    ap.add_argument("--out-dir", help="where to write (default: the report's directory)")
    args = ap.parse_args(argv)
    try:
        raw = load_json(args.report, "report")
        validate = load_validate(args.report, raw) if is_validate(raw) else None
        if validate is not None and (args.trace or args.claims):
            raise InputError(f"--trace and --claims go with a run report, not with the validate report "
                             f"'{args.report}'")
        report = load_report(args.report, raw) if validate is None else None
        spans = load_trace(args.trace) if args.trace else None
        claims = load_claims(args.claims) if args.claims else None
        out_dir = Path(args.out_dir) if args.out_dir else Path(args.report).resolve().parent
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create the output directory '{out_dir}': {e.strerror}")
        if not os.access(out_dir, os.W_OK):
            raise InputError(f"the output directory '{out_dir}' is not writable")
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    stem = Path(args.report).stem
    inputs = {Path(x).resolve() for x in (args.report, args.trace, args.claims) if x}
    clash = [p for p in (out_dir / f"{stem}.md", out_dir / f"{stem}.html") if p.resolve() in inputs]
    if clash:
        print(f"{PROG}: error: the output {clash[0]} would overwrite an input; rename the report to end in .json "
              "or pass --out-dir", file=sys.stderr)
        return 2
    for old in out_dir.glob(f"{glob_escape(stem)}-*.png"):  # plots of an earlier rendering that may not recur
        if re.fullmatch(re.escape(stem) + r"-(busbw|tp-scaling|bubble|memory|conformance-loss|train-loss|"
                        r"step-breakdown|precision-loss|step-times-[a-z_]+|sweep|timeline|timeline-train)\.png", old.name):
            old.unlink()
    md_path, html_path = out_dir / f"{stem}.md", out_dir / f"{stem}.html"
    if validate is not None:
        doc = validate_page(validate)
        md_path.write_text(render_md(doc), encoding="utf-8")
        html_path.write_text(render_html(doc, f"dtbench validate: level {validate.get('level', '?')}"),
                             encoding="utf-8")
        print(f"{md_path}\n{html_path}")
        return 0
    r = Renderer(report, spans, out_dir, stem, args.report, claims)
    doc = r.build()
    title = f"dtbench report: {report['context'].get('run_id') or stem}"
    md_path.write_text(render_md(doc), encoding="utf-8")
    html_path.write_text(render_html(doc, title), encoding="utf-8")
    for w in r.warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    print(f"{md_path}\n{html_path}")
    for pth in r.plots:
        print(pth)
    return 0


def glob_escape(s):
    return re.sub(r"([*?\[])", r"[\1]", s)


if __name__ == "__main__":
    sys.exit(main())
