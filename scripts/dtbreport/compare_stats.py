"""compare.py's statistics: is a value a number or a timing object, the two-sample tests (Mann-Whitney U on
samples, Welch's t on summary statistics), how much worse a value is, and the verdict of one metric.

scripts/compare.py's docstring says why these tests; scipy is imported on first use.
"""
import functools
import math

from .metrics import INFO, LOWER


def is_number(v):
    """True for a finite int or float (not a bool): a value compare.py compares as a number."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_timing(v):
    """True for a timing object ({n, median, ..., samples}): a dict whose median is a number."""
    return isinstance(v, dict) and is_number(v.get("median"))


def _samples(t):
    s = t.get("samples") if isinstance(t, dict) else None
    if isinstance(s, list) and s and all(is_number(x) for x in s):
        return [float(x) for x in s]
    return None


@functools.lru_cache(maxsize=None)
def min_p_value(n1, n2):
    """The smallest two-sided p-value the U test can give at these sizes (samples apart)."""
    from scipy.stats import mannwhitneyu
    return float(mannwhitneyu(list(range(n1)), list(range(n1, n1 + n2)), alternative="two-sided").pvalue)


def significance(bt, nt, alpha):
    """(test, p, n_base, n_new) for two timing objects (or None). test: "mann-whitney",
    "insufficient samples" (p computed but cannot reach alpha), "welch", "no samples"."""
    if not (is_timing(bt) and is_timing(nt)):
        return "no samples", None, None, None
    bs, ns = _samples(bt), _samples(nt)
    if bs and ns:
        from scipy.stats import mannwhitneyu
        n1, n2 = len(bs), len(ns)
        if sorted(bs) == sorted(ns):
            p = 1.0
        elif len(set(bs) | set(ns)) == 1:
            p = 1.0
        else:
            p = float(mannwhitneyu(bs, ns, alternative="two-sided").pvalue)
            if math.isnan(p):
                p = 1.0
        if min_p_value(n1, n2) > alpha:
            return "insufficient samples", p, n1, n2
        return "mann-whitney", p, n1, n2
    keys = ("n", "mean", "stddev")
    if all(is_number(bt.get(k)) for k in keys) and all(is_number(nt.get(k)) for k in keys):
        n1, n2 = int(bt["n"]), int(nt["n"])
        if n1 < 2 or n2 < 2:
            return "no samples", None, n1, n2
        if bt["stddev"] == 0 and nt["stddev"] == 0:
            return ("welch", 1.0, n1, n2) if bt["mean"] == nt["mean"] else ("no samples", None, n1, n2)
        from scipy.stats import ttest_ind_from_stats
        p = float(ttest_ind_from_stats(bt["mean"], bt["stddev"], n1, nt["mean"], nt["stddev"], n2,
                                       equal_var=False).pvalue)
        return "welch", (1.0 if math.isnan(p) else p), n1, n2
    return "no samples", None, None, None


def worse_by(direction, base, new):
    """How much worse NEW is: new/base - 1 (lower is better) or base/new - 1 (higher)."""
    if base == new:
        return 0.0
    num, den = (new, base) if direction == LOWER else (base, new)
    if den > 0 and num >= 0:
        return num / den - 1.0
    if den == 0:
        return math.inf if num > 0 else 0.0
    # Negative values (not expected for these metrics): the signed relative difference.
    d = (new - base) / abs(base) if base else math.inf
    return d if direction == LOWER else -d


def verdict(direction, worse, test, p, threshold, alpha):
    if direction == INFO:
        return "info", False
    threshold_only = test in ("insufficient samples", "no samples")
    significant = threshold_only or (p is not None and p < alpha)
    better = -worse / (1.0 + worse) if worse > -1 else math.inf  # worse_by seen from NEW
    if worse > threshold:
        return ("REGRESSION", True) if significant else ("worse, not significant", False)
    if better > threshold:
        return ("improved", False) if significant else ("better, not significant", False)
    return "same", False
