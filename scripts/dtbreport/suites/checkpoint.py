"""The checkpoint suite's section (suites/checkpoint.cc): training time per step without saves, with a
blocking and with an asynchronous save every save_interval steps; each save's stall, write and commit; the
load; the disk's own rate in the same directory; Young's and Daly's interval; per-rank bytes and rates.
"""

from ..fmt import fmt, fmt_bytes, fmt_pct, fmt_timing, num, stat
from ..registry import unit

SUITE = "checkpoint"
PLOTS = ()


def _by(recs, prefix):
    return [b for b in recs if b.get("name", "").startswith(f"checkpoint/{prefix}")]


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its suites[]
    data."""
    recs = [b for b in recs if not b.get("skipped")]
    data = data or {}
    rows = []
    for b in _by(recs, "train/"):
        rows.append([f"`{b.get('save')}`", fmt_timing(b.get("step_time_ms")), fmt_pct(num(b.get("overhead"))),
                     fmt(b.get("save_cost_ms")), fmt(stat(b.get("stall_time_ms"), "median")),
                     fmt(stat(b.get("snapshot_time_ms"), "median")), fmt(stat(b.get("write_time_ms"), "median")),
                     fmt(stat(b.get("commit_time_ms"), "median")), fmt(b.get("write_GBps")),
                     fmt_pct(num(b.get("disk_fraction")))])
    r.doc.table(["save", f"step ({unit('step_time_ms', SUITE)})", "overhead", "cost a save (ms)", "stall (ms)",
                 "snapshot (ms)", "write (ms)", "commit, rank 0 (ms)", "write GB/s", "of the disk's"], rows)
    r.doc.p(f"A save every {data.get('save_interval', '?')} of {data.get('steps', '?')} steps; times per step are "
            "the training loop's (first step to the last commit), the slowest rank; stall, snapshot and write are "
            "per save, the slowest rank; the cost a save is (time with saves - without) / saves, paired by "
            "repetition.", "note")
    rows = []
    for b in _by(recs, "disk/") + _by(recs, "load"):
        what = f"disk {b.get('op')}" if "op" in b else "load_checkpoint"
        t = b.get("disk_time_ms") if "op" in b else b.get("load_time_ms")
        rate = b.get("disk_GBps") if "op" in b else b.get("read_GBps")
        rows.append([what, fmt_bytes(b.get("bytes_per_rank")), fmt_timing(t), fmt(rate),
                     fmt_pct(num(b.get("disk_fraction"))) if "disk_fraction" in b else ""])
    r.doc.table(["operation", "bytes a rank", "time (ms)", "GB/s a rank", "of the disk's read"], rows)
    rows = []
    for b in _by(recs, "interval/"):
        rows.append([f"`{b.get('save')}`", fmt(b.get("save_cost_ms")), fmt(b.get("mtbf_hours")),
                     fmt(b.get("young_interval_s")), fmt(b.get("daly_interval_s")), fmt(b.get("daly_interval_steps")),
                     fmt_pct(num(b.get("overhead_at_daly")), 4),
                     fmt_pct(num(b.get("predicted_overhead_at_save_interval"))),
                     fmt_pct(num(b.get("overhead_at_save_interval")))])
    r.doc.table(["save", "cost δ (ms)", "MTBF (h)", "Young √(2δM) (s)", "Daly (s)", "Daly (steps)",
                 "overhead at Daly's", f"δ / (k t) at k = {data.get('save_interval', '?')}", "measured at k"], rows)
    rows = [[str(x.get("rank")), fmt_bytes(x.get("bytes")), fmt(x.get("write_GBps")), fmt(x.get("load_GBps")),
             fmt(x.get("disk_write_GBps")), fmt(x.get("disk_read_GBps"))] for x in data.get("ranks", [])]
    if rows:
        r.doc.table(["rank", "file", "write GB/s", "load GB/s", "disk write GB/s", "disk read GB/s"], rows)
        r.doc.p(f"The memory model predicts {fmt_bytes(data.get('predicted_rank_bytes'))} a rank file (header, "
                "section table and state + parameters, master weights, moments).", "note")
