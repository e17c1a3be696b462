"""The page of a run report: the header (run, machine, pass/fail counts), the suites, the failed checks,
the rules of thumb (--claims), one section per suite in the report's order, the timeline (--trace).

A suite's own section comes from its module in dtbreport/suites/ (found through registry.py); a suite
without one, or whose module fails on a report of another shape, gets the generic table of its records.
"""
import math
from collections import OrderedDict, defaultdict

from . import claims, registry, trace
from .doc import Doc
from .fmt import anchor, fmt, fmt_bytes, num, plural, record_tail
from .load import check_verdict
from .plot import close_all, plt

# Google Benchmark's identifying fields: not columns of the generic table.
GB_KEYS = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "family_index",
           "per_family_instance_index", "aggregate_name", "aggregate_unit"}


class Renderer:
    """Builds the Doc of one run report. report: the loaded report (load.load_report); spans: the trace's
    spans (load.load_trace) or None; out_dir, stem: where the PNG files go (out_dir/STEM-NAME.png);
    claims: the loaded claims file or None. A suite module's render(r, recs, cs, data) receives this object:
    r.doc (the Doc to fill), r.ctx (the report's context), r.world(), r.save(fig, name, alt, caption),
    r.generic(suite, recs) and r.by_suite (records per suite)."""

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
        self.pipeline_runs = None  # the pipeline suite's measured records, for the timeline
        self.by_suite = defaultdict(list)
        for b in report["benchmarks"]:
            self.by_suite[b["name"].split("/", 1)[0]].append(b)
        self.checks_by_suite = defaultdict(list)
        for c in report["checks"]:
            self.checks_by_suite[c.get("suite") or c["name"].split("/", 1)[0]].append(c)

    def save(self, fig, name, alt, caption):
        path = self.out_dir / f"{self.stem}-{name}.png"
        fig.savefig(path, bbox_inches="tight")
        plt().close(fig)
        self.plots.append(path)
        self.doc.img(path, alt, caption)

    def world(self):
        return self.ctx.get("world_size")

    def build(self):
        self.header()
        self.suite_table()
        self.failures()
        if self.claims is not None:
            claims.claims_section(self)
        names = [s["name"] for s in self.r["suites"]]
        for s in self.r["suites"]:
            self.suite_section(s)
        # Records of suites the report has no entry for (e.g. a report put together by hand).
        for prefix in self.by_suite:
            if prefix not in names:
                self.suite_section({"name": prefix, "status": None, "data": {}})
        if self.spans is not None:
            trace.trace_section(self)
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
        failed = [x for x in checks if check_verdict(x) == "failed"]
        unjudged = [x for x in checks if check_verdict(x) == "not_judged"]
        suites = self.r["suites"]
        bad = [s for s in suites if s.get("status") in ("failed", "error")]
        verdict = "PASSED" if not bad and not failed else "FAILED"
        if not suites and not checks:
            verdict = "EMPTY"
        summary = (f"**{verdict}**: {len(suites) - len(bad)} of {len(suites)} suites passed"
                   + (f" ({', '.join(s['name'] + ' ' + str(s.get('status')) for s in bad)})" if bad else "")
                   + f"; {len(checks) - len(failed) - len(unjudged)} of {len(checks)} checks passed"
                   + (f", **{len(failed)} failed**" if failed else "")
                   + (f", {len(unjudged)} not judged (the machine was busy: [why](#checks-not-judged))"
                      if unjudged else "")
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
            nj = s.get("checks_not_judged") or 0
            load = s.get("host_load") if isinstance(s.get("host_load"), dict) else {}
            other = num(load.get("other_cores"))
            cpus = max((num(h.get("cpus")) or 0 for h in load.get("hosts") or [] if isinstance(h, dict)), default=0)
            rows.append([f"[{s['name']}](#{anchor(s['name'])})", st.upper() if st in ("failed", "error") else st,
                         fmt(num(s.get("duration_s")), 3), f"{passed}/{total}" + (f" ({nj} not judged)" if nj else ""),
                         str(len(self.by_suite.get(s["name"], []))),
                         "–" if other is None else f"{other:.2f}" + (f" of {cpus:g}" if cpus else ""),
                         s.get("error") or ""])
            cls.append("fail" if st == "failed" else "error" if st == "error" else "skip" if st == "skipped" else None)
        d.table(["suite", "status", "duration (s)", "checks passed", "records", "other work (cores)", "error"], rows,
                align=["l", "c", "r", "r", "r", "r", "l"], row_cls=cls)
        d.p("Other work: the CPU time processes other than this run's ranks used on the busiest host while the "
            "suite ran, in cores (the host's /proc/stat less the ranks' own; docs/report.md). Timings taken beside "
            "other work are slower than the machine's.", "note")

    def failures(self):
        d = self.doc
        self.not_judged()
        failed = [c for c in self.r["checks"] if check_verdict(c) == "failed"]
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

    def not_judged(self):
        """The checks not judged: timing checks that the machine's other work kept from being judged (each
        reason gives the figures); they fail nothing."""
        d = self.doc
        rows = [[f"`{c['name']}`", fmt(num(c.get("value"))), fmt(num(c.get("tolerance"))),
                 str(c.get("not_judged_reason") or "")] for c in self.r["checks"] if check_verdict(c) == "not_judged"]
        if not rows:
            return
        d.h(2, f"Checks not judged ({len(rows)})", "checks-not-judged")
        d.p("Timing checks that other work on the machine disturbed beyond what their tolerance allows: neither "
            "passed nor failed, and no failure of the run. The value is what was measured.")
        d.table(["check", "value", "tolerance", "why not judged"], rows[:100], align=["l", "r", "r", "l"])
        if len(rows) > 100:
            d.p(f"… and {len(rows) - 100} more (the report's `checks` has them all).")

    def suite_section(self, s):
        name = s["name"]
        d = self.doc
        st = s.get("status")
        d.h(2, name, anchor(name))
        recs = self.by_suite.get(name, [])
        cs = self.checks_by_suite.get(name, [])
        if st is not None:
            nf = sum(1 for c in cs if check_verdict(c) == "failed")
            nj = sum(1 for c in cs if check_verdict(c) == "not_judged")
            line = (f"Status **{st}**, {fmt(num(s.get('duration_s')), 3)} s, {plural(len(recs), 'record')}, "
                    f"{plural(len(cs), 'check')}")
            extra = ", ".join(x for x in (f"{nf} failed" if nf else "", f"{nj} not judged" if nj else "") if x)
            line += f" ({extra})." if extra else "."
            d.p(line)
        if s.get("error"):
            d.alert(f"error: {s['error']}")
        data = s.get("data") if isinstance(s.get("data"), dict) else {}
        mod = registry.suites().get(name)
        nblocks, nplots = len(d.blocks), len(self.plots)
        try:
            if mod is not None:
                mod.render(self, recs, cs, data)
            else:
                self.generic(name, recs)
        except Exception as e:  # a report of another shape: say so and show the records as they are
            close_all()
            del d.blocks[nblocks:]
            for pth in self.plots[nplots:]:
                pth.unlink(missing_ok=True)
            del self.plots[nplots:]
            msg = f"{name}: could not render the suite's own tables ({type(e).__name__}: {e}); generic table instead"
            self.warnings.append(msg)
            d.p(f"*{msg}.*", "note")
            self.generic(name, recs)

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
