"""The cp_attention suite's section (suites/cp_attention.cc): the CP attention's time against one
rank's whole-sequence attention, the bytes each rank sent around the ring, and the share of the
communication the overlap hid, per sequence length and comm type.
"""
from ..fmt import fmt, fmt_bytes, fmt_pct, fmt_timing, num
from ..layout_keys import FIELD

SUITE = "cp_attention"
PLOTS = ()


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    recs = [b for b in recs if not b.get("skipped") and "seq_len" in b]
    if not recs:
        return r.generic(SUITE, recs)
    d = r.doc
    d.p(f"Causal attention forward + backward at CP {fmt(data.get(FIELD.cp))} (every rank), B = {fmt(data.get('batch'))}, "
        f"C = {fmt(data.get('channels'))}, {fmt(data.get('heads'))} query heads, {fmt(data.get('num_kv_heads'))} KV "
        "heads, fp32; times are medians of the slowest rank. Hidden: (compute alone + comm alone − CP) / comm "
        "alone (n/r: the communication is below the timings' standard error); in comm: the time inside "
        "communication calls, waiting for a slower peer included.")
    rows = []
    for b in sorted(recs, key=lambda b: (b["seq_len"], b.get(FIELD.cp_comm_type, ""))):
        rows.append([fmt(b["seq_len"]), b.get(FIELD.cp_comm_type, "?"), fmt_timing(b.get("attention_ms")),
                     fmt_timing(b.get("single_rank_ms")), f"{fmt(num(b.get('speedup')), 3)}×",
                     fmt_bytes(num(b.get("ring_bytes_per_rank"))), fmt_timing(b.get("compute_alone_ms")),
                     fmt_timing(b.get("comm_alone_ms")), fmt(num(b.get("exposed_comm_ms")), 3),
                     fmt_pct(num(b.get("hidden_fraction"))) if b.get("hidden_fraction_resolved") else "n/r"])
    d.table(["sequence", "comm", "CP (ms)", "one rank (ms)", "speedup", "bytes sent / rank", "compute alone (ms)",
             "comm alone (ms)", "in comm (ms)", "hidden"], rows)
