"""The collectives suite's section (suites/collectives.cc): nccl-tests' table per op (time, algbw,
busbw, #wrong per size, in and out of place), the flat and hierarchical all-reduce side by side
(algbw and the ring model's cross-node bytes) when the world spans two nodes or more, and the
bandwidth and latency plot (-busbw).
"""
import statistics
from collections import OrderedDict, defaultdict

from ..fmt import fmt, fmt_bytes, num
from ..plot import bytes_axis, colors, plt
from ..registry import unit

SUITE = "collectives"
PLOTS = ("busbw",)


def render(r, recs, cs, data):
    """The suite's section on the page r (page.Renderer): recs its records, cs its checks, data its
    suites[] data."""
    d = r.doc
    ops = OrderedDict()
    for b in recs:
        if b.get("skipped") or "op" not in b:
            continue
        ops.setdefault(b["op"], defaultdict(dict))[int(b["bytes"])][b.get("placement", "out_of_place")] = b
    if not ops:
        return r.generic("collectives", recs)
    world = next(iter(next(iter(ops.values())).values()))
    world = next(iter(world.values())).get("world_size", r.world())
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
            headers += [f"{tag} time ({unit('time_us', SUITE)})", f"algbw ({unit('algbw_GBps', SUITE)})",
                        f"busbw ({unit('busbw_GBps', SUITE)})", "#wrong"]
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
    flat_vs_hierarchical(r, ops)
    if all_busbw:
        d.p(f"Avg bus bandwidth: {statistics.fmean(all_busbw):.3g} GB/s (mean of every line's busbw, as "
            "nccl-tests prints it).")
    plot_busbw(r, ops, world)


def flat_vs_hierarchical(r, ops):
    """The flat and the hierarchical all-reduce side by side, out of place (in place where only that
    ran): algbw, its ratio, the cross-node bytes of each and #wrong of both placements."""
    flat, hier = ops.get("all_reduce"), ops.get("all_reduce_hierarchical")
    if not flat or not hier:
        return
    d = r.doc
    one = next(iter(next(iter(hier.values())).values()))
    d.h(3, "all_reduce: flat and hierarchical")
    d.p(f"{one.get('nodes')} {'emulated ' if one.get('nodes_emulated') else ''}nodes of "
        f"{one.get('ranks_per_node')} consecutive ranks. Hierarchical: reduce_scatter inside the node, all_reduce "
        "across nodes among ranks of the same local index, all_gather inside the node. Cross-node bytes: what one "
        "operation sends over links leaving the busiest node under the ring model (docs/metrics.md): flat "
        "2(g-1)/g S, hierarchical 2(N-1)/N S.")
    headers = ["size", "flat algbw (GB/s)", "hierarchical algbw (GB/s)", "hierarchical / flat",
               "flat cross-node bytes", "hierarchical cross-node bytes", "#wrong flat", "#wrong hierarchical"]
    rows, cls = [], []
    for size in sorted(set(flat) & set(hier)):
        pick = "out_of_place" if "out_of_place" in flat[size] and "out_of_place" in hier[size] else "in_place"
        f, h = flat[size].get(pick), hier[size].get(pick)
        if f is None or h is None:
            continue
        fa, ha = num(f.get("algbw_GBps")), num(h.get("algbw_GBps"))
        wf = sum(int(b.get("n_wrong") or 0) for b in flat[size].values())
        wh = sum(int(b.get("n_wrong") or 0) for b in hier[size].values())
        rows.append([fmt_bytes(size), f"{fa or 0:.2f}", f"{ha or 0:.2f}", f"{ha / fa:.2f}" if fa and ha else "",
                     fmt_bytes(int(num(f.get("cross_node_bytes")) or 0)),
                     fmt_bytes(int(num(h.get("cross_node_bytes")) or 0)), fmt(wf), fmt(wh)])
        cls.append("fail" if wf or wh else None)
    d.table(headers, rows, row_cls=cls)


def plot_busbw(r, ops, world):
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
    dev = r.ctx.get("devices")
    where = f"{world} rank(s), {r.ctx.get('comm_backend', '')}" + (
        f", {dev[0]}" if isinstance(dev, list) and dev and dev[0] != r.ctx.get("backend") else "")
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
    r.save(fig, "busbw", "bus bandwidth against message size", cap)
