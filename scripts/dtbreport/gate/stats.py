"""Paired statistics of the gate: the sign test on per-pair log ratios (exact, one-sided) with the median and
its distribution-free interval, the Wilcoxon signed-rank test with the Hodges-Lehmann estimate and interval,
and Holm's step-down adjustment over the gated metrics.

The signed-rank test is the gate's default. A pair whose baseline run (or candidate run) was disturbed for its
whole timed part gives a log ratio far off, of either sign: on this 2-core machine beside a bursty load one pair
in ten or so. The signed-rank test weighs such a pair by its rank, the largest, and two of them in 20 pairs once
kept a 20 % slower train step from significance after Holm; the sign test counts each pair once, whatever its
size (its efficiency is lower for Gaussian noise, 2/pi, and higher for heavy tails: Hollander, Wolfe &
Chicken, ch. 3.4-3.8). Measured on the same runs at 30 pairs (scripts/gate-power --twins, 2026-12-03,
docs/ci.md and results/logs/gate-power.md), the signed-rank test caught a 10 % slower train step in 13 of 20
trials and the sign test in 10 with the gate config of 60 steps, 20 and 18 with 120 steps; neither raised a
false alarm in 20 A/A comparisons.

Why these: a pair is one baseline run and one candidate run made next to each other, so what the machine was
doing cancels in their ratio; the log ratio makes a slowdown of 10 % the same size whatever the metric's scale.
The signed-rank test assumes only that the log ratios are symmetric about their centre under no change (true
for an A/A comparison, whose two sides are exchangeable), and one disturbed pair moves it by one rank, not by
its size (Hollander, Wolfe & Chicken, Nonparametric Statistical Methods, 3rd ed., ch. 3: the test, 3.1; the
estimator, 3.2; the interval, 3.3). Holm (1979) keeps the chance of any false alarm over all gated metrics at
alpha, which a per-metric test at alpha does not (the gate config's 10 records at 0.05 would alarm in 40 % of
A/A runs).
"""
import functools
import itertools
import math


def _doubled_ranks(absx):
    """Ranks of |x| (1-based, ties get their average rank), doubled so that they are integers."""
    order = sorted(range(len(absx)), key=lambda i: absx[i])
    ranks = [0] * len(absx)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and absx[order[j + 1]] == absx[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = i + j + 2  # 2 x the average of ranks i+1 .. j+1
        i = j + 1
    return ranks


def _subset_sum_counts(weights):
    """counts[s] = number of subsets of `weights` (positive integers) summing to s."""
    counts = [1] + [0] * sum(weights)
    for w in weights:
        for s in range(len(counts) - 1, w - 1, -1):
            counts[s] += counts[s - w]
    return counts


def signed_rank_p_greater(x):
    """Exact one-sided p-value of the signed-rank test of H1: the centre of x is > 0. Zeros are dropped
    (Wilcoxon's convention); ties among |x| get average ranks and the exact null distribution of those ranks.
    1.0 when nothing is left."""
    nz = [v for v in x if v != 0]
    if not nz:
        return 1.0
    ranks = _doubled_ranks([abs(v) for v in nz])
    w_plus = sum(r for r, v in zip(ranks, nz) if v > 0)
    counts = _subset_sum_counts(ranks)
    return sum(counts[w_plus:]) / 2 ** len(nz)


@functools.lru_cache(maxsize=None)
def _null_cdf(n):
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under H0, ranks 1..n without ties."""
    counts = _subset_sum_counts(list(range(1, n + 1)))
    total, acc, out = 2 ** n, 0, []
    for c in counts:
        acc += c
        out.append(acc / total)
    return out


def walsh_averages(x):
    return sorted((x[i] + x[j]) / 2 for i in range(len(x)) for j in range(i, len(x)))


def hodges_lehmann(x):
    """The median of the Walsh averages (x_i + x_j) / 2, i <= j: the estimate of the centre that goes with
    the signed-rank test."""
    w = walsh_averages(x)
    m = len(w)
    return w[m // 2] if m % 2 else 0.5 * (w[m // 2 - 1] + w[m // 2])


def hl_interval(x, confidence=0.95):
    """The distribution-free interval for the centre: [W_(c+1), W_(M-c)] of the M sorted Walsh averages, c the
    largest value with P(T+ <= c) <= (1 - confidence) / 2 under H0. (-inf, inf) when n is too small for any
    such c (n <= 5 at 95 %)."""
    n = len(x)
    if n == 0:
        return -math.inf, math.inf
    c = _critical(_null_cdf(n), confidence)
    if c < 0:
        return -math.inf, math.inf
    w = walsh_averages(x)
    return w[c], w[len(w) - 1 - c]


def _critical(cdf, confidence):
    """The largest t with cdf[t] <= (1 - confidence) / 2 (an interval's rank offset), -1 when there is none."""
    c = -1
    for t, p in enumerate(cdf):
        if p > (1 - confidence) / 2 + 1e-12:
            break
        c = t
    return c


def sign_p_greater(x):
    """Exact one-sided p-value of the sign test of H1: the median of x is > 0: P(Bin(n, 1/2) >= positives),
    n the nonzero values. 1.0 when all are zero."""
    nz = [v for v in x if v != 0]
    k = sum(1 for v in nz if v > 0)
    return sum(math.comb(len(nz), i) for i in range(k, len(nz) + 1)) / 2 ** len(nz) if nz else 1.0


def median(x):
    s = sorted(x)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def median_interval(x, confidence=0.95):
    """The distribution-free interval for the median that goes with the sign test: [x_(c+1), x_(n-c)] of the
    sorted values, c the largest value with P(Bin(n, 1/2) <= c) <= (1 - confidence) / 2. (-inf, inf) when n
    is too small (n <= 5 at 95 %)."""
    n = len(x)
    c = _critical(itertools.accumulate(math.comb(n, t) / 2 ** n for t in range(n + 1)), confidence)
    if c < 0:
        return -math.inf, math.inf
    s = sorted(x)
    return s[c], s[n - 1 - c]


TESTS = {  # name: (one-sided p-value, estimate, interval)
    "sign": (sign_p_greater, median, median_interval),
    "signed-rank": (signed_rank_p_greater, hodges_lehmann, hl_interval),
}


def holm(pvalues):
    """Holm's step-down adjusted p-values, in the input order (None stays None)."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    m = len(idx)
    out = list(pvalues)
    running = 0.0
    for k, i in enumerate(idx):
        running = max(running, min(1.0, (m - k) * pvalues[i]))
        out[i] = running
    return out
