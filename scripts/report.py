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
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dtbreport import registry  # noqa: E402
from dtbreport.doc import render_html, render_md  # noqa: E402
from dtbreport.load import (InputError, is_validate, load_claims, load_json, load_report, load_trace,  # noqa: E402
                            load_validate)
from dtbreport.page import Renderer  # noqa: E402
from dtbreport.validate import validate_page  # noqa: E402

PROG = "report.py"
# The plots of the page itself (the suites' own: registry.plots()); step-times-SUITE is plot.plot_step_times'.
PAGE_PLOTS = ("timeline", "timeline-train")


def stale_plot(stem, name):
    """True when NAME is a plot file (STEM-*.png) an earlier rendering of STEM may have left."""
    names = "|".join(re.escape(p) for p in sorted(set(registry.plots()) | set(PAGE_PLOTS)))
    return re.fullmatch(re.escape(stem) + r"-(" + names + r"|step-times-[a-z_]+)\.png", name) is not None


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
        probe = out_dir / f".{Path(args.report).stem}.write-test-{os.getpid()}"
        try:  # written, not asked (os.access says yes to root in a directory nobody can write)
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise InputError(f"the output directory '{out_dir}' is not writable ({e.strerror})")
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
        if stale_plot(stem, old.name):
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
