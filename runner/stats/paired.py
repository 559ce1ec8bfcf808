"""The statistics: what one experiment's samples say on the log scale, before any verdict.

Paired: the noisy-neighbour screen, then the Hodges-Lehmann estimate with the Wilcoxon signed-rank
test and interval. Unpaired: Yuen's test of trimmed means. Plus the t distribution (no scipy), noise
and Benjamini-Hochberg; runner.stats.decide turns the evidence into verdicts.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from kb.errors import UserError
from kb.policy import MIN_VALUES, Policy

K = TypeVar("K", bound=Hashable)

#: Noisy-neighbour screen: pairs needed before it runs, threshold in robust standard deviations,
#: half-width (in pairs) of the running median, largest fraction of pairs it may set aside.
SCREEN_MIN = 8
SCREEN_K = 2.5
SCREEN_HALF_WINDOW = 4
SCREEN_MAX_FRACTION = 0.25
#: Fraction trimmed from each tail in the unpaired (Yuen) test.
TRIM = 0.2
#: Up to this many pairs the signed-rank distribution is exact; beyond, a normal approximation.
EXACT_MAX = 150


@dataclass(frozen=True)
class Evidence:
    """What one experiment's samples say, on the log scale, before any verdict."""

    center: float
    low: float
    high: float
    level: float
    p_value: float
    pairs: int
    noise: float | None
    paired: bool
    detail: str = ""


def ratio_defined(values: Sequence[float]) -> bool:
    """Whether the log-ratio scale can judge these values: every one a positive finite number."""
    return all(_positive(float(v)) for v in values)


def _positive(v: float) -> bool:
    return math.isfinite(v) and v > 0


def _logs(values: Sequence[float], side: str) -> list[float]:
    out: list[float] = []
    for i, value in enumerate(values, 1):
        v = float(value)
        if not _positive(v):
            raise UserError(f"{side} value #{i} is {value!r}: values must be positive numbers")
        out.append(math.log(v))
    return out


def _trimmed(values: Sequence[float]) -> tuple[float, float, int]:
    """20% trimmed mean, Yuen's squared standard error and h (values left after trimming)."""
    n = len(values)
    x = sorted(values)
    g = int(TRIM * n)
    h = n - 2 * g
    kept = x[g : n - g]
    mean = sum(kept) / h
    winsorized = [x[g]] * g + kept + [x[n - g - 1]] * g
    wmean = sum(winsorized) / n
    wvar = sum((v - wmean) ** 2 for v in winsorized) / (n - 1)
    return mean, (n - 1) * wvar / (h * (h - 1)), h


def _yuen_interval(center: float, se2: float, df: float, alpha: float) -> tuple[float, float, float]:
    """(low, high, p): the two-sided interval at level 1 - alpha, and the doubled one-sided p."""
    se = math.sqrt(se2)
    if se == 0.0:  # identical values on each side (a deterministic metric): no doubt left
        return center, center, (0.0 if center > 0 else 1.0)
    half = t_quantile(1 - alpha / 2, df) * se
    return center - half, center + half, min(1.0, 2 * t_sf(center / se, df))


def paired_evidence(baseline: Sequence[float], candidate: Sequence[float], policy: Policy) -> Evidence:
    if len(baseline) != len(candidate):
        raise UserError(
            f"paired samples need equal counts: {len(baseline)} baseline, {len(candidate)} candidate"
        )
    a, b = _logs(baseline, "baseline"), _logs(candidate, "candidate")
    sign = 1.0 if policy.direction == "higher" else -1.0
    d = [sign * (y - x) for x, y in zip(a, b, strict=True)]
    n = len(d)
    share = policy.look_share(n)
    level = 1 - share * policy.alpha
    detail = ""
    slowed = _slowed_pairs(a, b, sign)
    if slowed:
        d = [x for i, x in enumerate(d) if i not in slowed]
        detail = f"{len(slowed)} of {n} pairs set aside as slowed by a noisy neighbour"
    if len(d) < MIN_VALUES:
        center = sum(d) / len(d) if d else 0.0
        return Evidence(center, -math.inf, math.inf, level, 1.0, n, noise(baseline), True)
    center, low, high, p = _hodges_lehmann(d, share * policy.alpha / 2)
    return Evidence(center, low, high, level, min(1.0, 2 * p / share), n, noise(baseline), True, detail)


def _hodges_lehmann(d: Sequence[float], gamma: float) -> tuple[float, float, float, float]:
    """Hodges-Lehmann estimate, the Wilcoxon interval at level 1 - 2*gamma, one-sided p (> 0).

    The signed-rank statistic T+ equals the number of positive Walsh averages, so the interval's
    bounds are order statistics of the Walsh averages and the test agrees with the interval.
    """
    n = len(d)
    # Twice the Walsh averages (halved only where used): this runs after every batch.
    walsh = [x + y for i, x in enumerate(d) for y in d[i:]]
    walsh.sort()
    m = len(walsh)
    center = (walsh[m // 2] if m % 2 else (walsh[m // 2 - 1] + walsh[m // 2]) / 2) / 2
    positive = m - bisect.bisect_right(walsh, 0.0)
    k = _signed_rank_rank(n, gamma)
    low, high = (walsh[k - 1] / 2, walsh[m - k] / 2) if k >= 1 else (-math.inf, math.inf)
    return center, low, high, _signed_rank_sf(n, positive)


def _signed_rank_rank(n: int, gamma: float) -> int:
    """Largest k with P(T+ <= k - 1) <= gamma under the null (0: no finite bound exists)."""
    if n <= EXACT_MAX:
        return bisect.bisect_right(_signed_rank_cdf(n), gamma * (1 + 1e-12))
    m = n * (n + 1) / 2
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    z = statistics.NormalDist().inv_cdf(1 - gamma)
    return max(0, math.floor(m / 2 - z * sd + 0.5))


def _signed_rank_sf(n: int, t: int) -> float:
    """P(T+ >= t) under the null."""
    m = n * (n + 1) // 2
    if t <= 0:
        return 1.0
    if t > m:
        return 0.0
    if n <= EXACT_MAX:
        return _signed_rank_cdf(n)[m - t]  # symmetry: P(T+ >= t) = P(T+ <= m - t)
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return statistics.NormalDist().cdf((m / 2 - t + 0.5) / sd)


_SIGNED_RANK_COUNTS: list[list[int]] = [[1]]


@lru_cache(maxsize=EXACT_MAX + 1)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """Exact null CDF of the Wilcoxon signed-rank statistic: P(T+ <= t), t = 0 .. n(n+1)/2."""
    counts = _SIGNED_RANK_COUNTS
    while len(counts) <= n:  # counts for k values from those for k - 1: T+ gains k or not
        k = len(counts)
        prev = counts[-1]
        new = prev + [0] * k
        for t in range(k, len(new)):
            new[t] += prev[t - k]
        counts.append(new)
    total = 2**n
    out: list[float] = []
    acc = 0
    for c in counts[n]:
        acc += c
        out.append(acc / total)
    return tuple(out)


def _slowed_pairs(a: Sequence[float], b: Sequence[float], sign: float) -> set[int]:
    """Pairs whose two sides together ran far slower than their neighbours (a noisy neighbour)."""
    n = len(a)
    if n < SCREEN_MIN or SCREEN_K <= 0:
        return set()
    s = [sign * (x + y) for x, y in zip(a, b, strict=True)]
    w = SCREEN_HALF_WINDOW
    resid = [s[i] - statistics.median(s[max(0, i - w) : i + w + 1]) for i in range(n)]
    centre = statistics.median(resid)
    spread = 1.4826 * statistics.median(abs(r - centre) for r in resid)
    if spread == 0:
        return set()
    low = sorted((r, i) for i, r in enumerate(resid) if r - centre < -SCREEN_K * spread)
    return {i for _, i in low[: int(SCREEN_MAX_FRACTION * n)]}


def unpaired_evidence(baseline: Sequence[float], candidate: Sequence[float], policy: Policy) -> Evidence:
    a, b = _logs(baseline, "baseline"), _logs(candidate, "candidate")
    sign = 1.0 if policy.direction == "higher" else -1.0
    detail = f"unpaired: {len(a)} baseline and {len(b)} candidate samples"
    n = min(len(a), len(b))
    level = 1 - policy.alpha
    if n < MIN_VALUES:
        center = sign * (_mean(b) - _mean(a)) if n else 0.0
        return Evidence(center, -math.inf, math.inf, level, 1.0, n, noise(baseline), False, detail)
    mean_a, se2_a, h_a = _trimmed(a)
    mean_b, se2_b, h_b = _trimmed(b)
    se2 = se2_a + se2_b
    # Welch-Satterthwaite degrees of freedom for Yuen's test.
    df = se2**2 / (se2_a**2 / (h_a - 1) + se2_b**2 / (h_b - 1)) if se2 > 0 else float(n)
    center = sign * (mean_b - mean_a)
    low, high, p = _yuen_interval(center, se2, df, policy.alpha)
    return Evidence(center, low, high, level, p, n, noise(baseline), False, detail)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def noise(values: Sequence[float]) -> float | None:
    """Per-sample coefficient of variation (stdev / |mean|); None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    if mean == 0:
        return None
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) / abs(mean)


def side_value(samples: Sequence[float]) -> float:
    """One side's value for a pair when an invocation printed several samples: their median."""
    if not samples:
        raise UserError("an invocation printed no sample of the metric")
    return float(statistics.median(samples))


def pair_values(
    sides_by_pair: Mapping[int, Mapping[str, Sequence[float]]],
) -> tuple[list[float], list[float]]:
    """(baseline, candidate) values per complete pair, in pair order, from each pair's samples by
    side ("A", "B"): several samples of one invocation reduce to their median (DESIGN: Measurement
    words); a pair missing a side (interrupted mid-pair) is left out. The one rule for it: the loop,
    the history and `redecide` all read pairs through it."""
    base: list[float] = []
    cand: list[float] = []
    for pair in sorted(sides_by_pair):
        sides = sides_by_pair[pair]
        if sides.get("A") and sides.get("B"):
            base.append(side_value(sides["A"]))
            cand.append(side_value(sides["B"]))
    return base, cand


def benjamini_hochberg(p_values: Mapping[K, float]) -> dict[K, float]:
    """Benjamini-Hochberg adjusted p-values (q-values): reject those with q <= alpha."""
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    m = len(ordered)
    q: dict[K, float] = {}
    running = 1.0
    for rank in range(m, 0, -1):  # step-up: the running minimum from the largest p down
        key, p = ordered[rank - 1]
        running = min(running, p * m / rank)
        q[key] = running
    return q


# --- t distribution (no scipy) ----------------------------------------------------------------


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df > 1e7:  # the continued fraction slows down; the normal is exact enough there
        return statistics.NormalDist().cdf(-t)
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The q with P(T <= q) = p, for Student's t with `df` degrees of freedom."""
    if not 0 < p < 1:
        raise ValueError(f"p {p}: must lie strictly between 0 and 1")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    if p == 0.5:
        return 0.0
    target = 1 - p
    low, high = 0.0, max(1.0, statistics.NormalDist().inv_cdf(p))
    while t_sf(high, df) > target:
        low, high = high, high * 2
    for _ in range(200):  # bisection: t_sf is monotone; 200 halvings reach double precision
        mid = (low + high) / 2
        if t_sf(mid, df) > target:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return h
