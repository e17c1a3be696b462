"""Number, unit and name formatting for report tables (scripts/report.py): pure functions, no I/O.

A cell is a string; `–` stands for a missing value. Not the page layout (doc.py) nor plots (plot.py).
"""
import math
import re


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


def drop_empty_columns(headers, rows, keep=1):
    """Drops the columns after the first `keep` whose cells are all placeholders (–)."""
    cols = [i for i in range(len(headers)) if i < keep or any(r[i] not in ("–", "") for r in rows)]
    return [headers[i] for i in cols], [[r[i] for i in cols] for r in rows]


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def anchor(name):
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


def pair_bytes(b, meas, pred):
    m, p = num(b.get(meas)), num(b.get(pred))
    if p is None or m == p:
        return fmt_bytes(m) + (" (=)" if p is not None else "")
    return f"**{fmt_bytes(m)} ≠ {fmt_bytes(p)}**"
