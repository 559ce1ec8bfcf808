"""Keep, discard or inconclusive: statistics that survive noisy shared machines.

Pure Python and the standard library (no numpy, no scipy): the runner calls it after every batch.

Method, and why
---------------
*Effect scale.* A pair is one baseline (A) value and one candidate (B) value measured back to back
on one worker. Each pair gives a log ratio ``d = log(B/A)`` (direction ``higher``) or
``log(A/B)`` (direction ``lower``), so a positive ``d`` is always an improvement. Slow drift of the
machine multiplies both sides of a pair alike and cancels in the ratio. Effects are reported on the
relative scale, ``exp(d) - 1``: +0.03 means 3% better.

*Estimator and test.* The Hodges-Lehmann estimate (median of the Walsh averages of ``d``) with the
Wilcoxon signed-rank test and its interval, exact up to ``EXACT_MAX`` pairs. Its only assumption is
that, when the candidate changes nothing, ``d`` is symmetric about zero, which measuring A and B
back to back on one machine provides; so its error rates hold for heavy-tailed noise too, down to
the small per-look levels the sequential rule needs. (A 20% trimmed mean with a Student t interval
was about 5% more efficient on the benchmark's noise, but its t approximation rejected 1.2 to 1.6
times too often at one-sided levels of 0.001 and below, even for normal noise.)

*Noisy neighbours.* A neighbour that slows one sample by 30% puts its pair far into a tail of
``d``. Before the test, pairs whose two sides *together* ran much slower than the pairs measured
around them (sum of the log values below a running median by more than ``SCREEN_K`` robust
standard deviations; at most a quarter of the pairs) are set aside. The screen looks only at the
sum of each pair, which swapping A and B leaves unchanged, so it cannot bias the sign test: the
error rates still hold. It gains power when interference is large against the noise (at 5% noise,
keeps of a true +3% rise from about 55% to about 65% in the benchmark) and sets aside almost nothing
otherwise.

*Repeated looks.* The runner measures in batches and asks after each whether to stop; testing every
look at the whole alpha would inflate false keeps. The policy plans its looks (``min_pairs``, then
every ``batch`` pairs, up to ``max_pairs``) and splits alpha across them Bonferroni-style: look
``j`` gets the share ``t_j**3 - t_(j-1)**3`` of alpha, with ``t_j = pairs_j / max_pairs``. The
shares sum to one, so by the union bound the chance of a false keep over all looks stays below
alpha / 2 whatever the correlation between looks. The cubic weights spend little early (only a
large effect stops a run after 16 pairs; none can after 8) and keep most of alpha for the last
looks, where a small effect needs it. Each look reports its interval at its own level
``1 - share * alpha`` (a repeated confidence interval: all of them cover the true effect at once
with probability >= 1 - alpha), and keep and discard are both read from it. The guarantee needs
the caller to look at most once per planned look; a look at a pair count between two planned looks
counts as the next planned look. ``Policy(sequential=False)`` is one look with the whole alpha,
for a fixed-size experiment analysed once.

*p-values.* ``p_value`` is the one-sided p-value of "effect > 0", doubled (so that it compares
with alpha as the two-sided interval does) and divided by the look's share of alpha:
``p_value <= alpha`` exactly when the look's interval lies above zero. Across a wave,
``q_value`` is the Benjamini-Hochberg adjustment of those p-values over every experiment of the
wave, and a keep needs ``q_value <= alpha``: false discoveries are controlled across the wave.

*Verdicts.* ``keep`` when significant (as above) and the estimate is at least ``min_effect``;
``discard`` when the whole interval lies below ``min_effect``; otherwise ``continue`` (add pairs),
which becomes ``inconclusive`` at the cap or when the caller says the look is final.

*Unpaired samples* (``decide_unpaired``, for ``autoresearch analyze`` without ``--paired``):
Yuen's two-sample test of 20% trimmed means of the log values, Welch-Satterthwaite degrees of
freedom, one look at the whole alpha (where its t approximation is accurate).

*Guards* (``apply_guards``): a keep whose guard metric is significantly worse than its limit (the
whole interval of the guard metric's effect lies below ``-max_loss``) becomes a discard.

*Noise* (``noise``): the per-sample coefficient of variation of one side. *A/A self-test*
(``self_test``): baseline against baseline; "no difference" means the interval contains 0, and the
interval's half-width is the noise floor, the smallest effect this setup can resolve.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal, TypeVar

from kb.errors import UserError

Direction = Literal["higher", "lower"]
Verdict = Literal["keep", "discard", "inconclusive", "continue"]

K = TypeVar("K", bound=Hashable)

#: Exponent of the alpha-spending weights over the planned looks (see the module docstring).
SPENDING_POWER = 3.0
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
#: Fewest values (pairs, or samples per side) an interval can be computed from.
MIN_VALUES = 3

_STATUS: dict[str, str] = {"keep": "kept", "discard": "discarded", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class Policy:
    """How an experiment is judged. Defaults follow the design: 1% minimum effect, 95%, 80 pairs."""

    min_effect: float = 0.01
    """Smallest relative improvement worth keeping (0.01 = 1%)."""
    alpha: float = 0.05
    """Error rate: intervals are at 1 - alpha overall; false keeps stay below alpha / 2."""
    max_pairs: int = 80
    """The cap: at this many pairs an undecided experiment is inconclusive."""
    min_pairs: int = 8
    """Pairs of the first look; no verdict before it."""
    batch: int = 8
    """Pairs added between two looks."""
    direction: Direction = "higher"
    """Whether a higher value of the metric is better (throughput) or a lower one (time)."""
    fdr: bool = True
    """Control the false discovery rate across the experiments of a wave (Benjamini-Hochberg)."""
    sequential: bool = True
    """Split alpha over the planned looks; False: one look at the whole alpha."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise UserError(f"alpha {self.alpha}: must lie between 0 and 1")
        if not 0 <= self.min_effect < 1:
            raise UserError(f"min_effect {self.min_effect}: must lie in [0, 1)")
        if self.min_pairs < MIN_VALUES:
            raise UserError(f"min_pairs {self.min_pairs}: must be at least {MIN_VALUES}")
        if self.max_pairs < self.min_pairs:
            raise UserError(f"max_pairs {self.max_pairs}: must be at least min_pairs ({self.min_pairs})")
        if self.batch < 1:
            raise UserError(f"batch {self.batch}: must be at least 1")
        if self.direction not in ("higher", "lower"):
            raise UserError(f"direction {self.direction!r}: must be 'higher' or 'lower'")

    def looks(self) -> tuple[int, ...]:
        """Pair counts at which the runner should ask for a decision: min_pairs, +batch, ..., cap."""
        return _looks(self.min_pairs, self.batch, self.max_pairs)

    def look_share(self, pairs: int) -> float:
        """Share of alpha spent at the look that `pairs` pairs count as (1.0 for a single look)."""
        if not self.sequential:
            return 1.0
        looks = self.looks()
        index = next((i for i, n in enumerate(looks) if n >= pairs), len(looks) - 1)
        before = looks[index - 1] / self.max_pairs if index else 0.0
        now = looks[index] / self.max_pairs
        return float(now**SPENDING_POWER - before**SPENDING_POWER)


@lru_cache(maxsize=64)
def _looks(min_pairs: int, batch: int, max_pairs: int) -> tuple[int, ...]:
    return (*range(min_pairs, max_pairs, batch), max_pairs)


@dataclass(frozen=True)
class Decision:
    """A verdict with its effect size and interval (never a bare mean)."""

    verdict: Verdict
    effect: float
    """Estimated relative improvement: +0.03 = 3% better (whatever the metric's direction)."""
    ci_low: float
    """Interval bounds on the same relative scale; -1.0 and +inf when too few pairs to bound."""
    ci_high: float
    level: float
    """Confidence of [ci_low, ci_high]: 0.95 for one look; higher at a look of a sequential run."""
    pairs: int
    p_value: float
    """One-sided p of "effect > 0", doubled and adjusted for repeated looks; compare with alpha."""
    q_value: float | None
    """p_value adjusted for the false discovery rate across the wave (None when FDR is off)."""
    noise: float | None
    """Per-sample coefficient of variation of the baseline side."""
    reason: str

    @property
    def status(self) -> str | None:
        """The experiment status this verdict ends in (`kept`, ...); None while it continues."""
        return _STATUS.get(self.verdict)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (infinite bounds, for too few pairs, become None)."""
        return {
            "verdict": self.verdict,
            "status": self.status,
            "effect": _finite(self.effect),
            "ci_low": _finite(self.ci_low),
            "ci_high": _finite(self.ci_high),
            "level": self.level,
            "pairs": self.pairs,
            "p_value": self.p_value,
            "q_value": self.q_value,
            "noise": self.noise,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Case:
    """One experiment of a wave when it needs more than (baseline, candidate) pairs."""

    baseline: Sequence[float]
    candidate: Sequence[float]
    paired: bool = True
    policy: Policy | None = None
    """Overrides the wave's policy (direction, min_effect, cap) for this experiment."""


@dataclass(frozen=True)
class Guard:
    """A secondary metric that must not get worse than a limit while the primary one improves."""

    metric: str
    max_loss: float = 0.02
    """Largest tolerated relative loss: 0.02 = the metric may not fall (or rise, if lower is
    better) by more than 2%."""
    direction: Direction = "higher"


@dataclass(frozen=True)
class SelfTest:
    """An A/A test: the same tree measured against itself."""

    passed: bool
    """True when the interval contains 0, i.e. the two sides show no difference."""
    effect: float
    ci_low: float
    ci_high: float
    level: float
    pairs: int
    noise: float | None
    """Per-sample coefficient of variation of the first side."""
    noise_floor: float
    """Half-width of the interval: effects smaller than this cannot be told from noise."""

    def to_json(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "effect": _finite(self.effect),
            "ci_low": _finite(self.ci_low),
            "ci_high": _finite(self.ci_high),
            "level": self.level,
            "pairs": self.pairs,
            "noise": self.noise,
            "noise_floor": _finite(self.noise_floor),
        }


# --- public functions ------------------------------------------------------------------------


def decide_paired(
    baseline: Sequence[float],
    candidate: Sequence[float],
    policy: Policy | None = None,
    *,
    final: bool = False,
) -> Decision:
    """Judge one experiment from its pairs (baseline[i], candidate[i]); a wave of one.

    Give the pairs in the order they were measured: the noisy-neighbour screen compares each
    pair with the pairs measured around it. `final` turns `continue` into `inconclusive`.
    """
    return decide_wave({0: (baseline, candidate)}, policy, final=final)[0]


def decide_unpaired(
    baseline: Sequence[float],
    candidate: Sequence[float],
    policy: Policy | None = None,
) -> Decision:
    """Judge two independent sample lists in one look (never `continue`)."""
    return decide_wave({0: Case(baseline, candidate, paired=False)}, policy)[0]


def decide_wave(
    cases: Mapping[K, Case | tuple[Sequence[float], Sequence[float]]],
    policy: Policy | None = None,
    *,
    final: bool = False,
) -> dict[K, Decision]:
    """Judge every experiment of a wave, controlling false discoveries across it.

    Pass all experiments of the wave, the ones already decided too (with the pairs they ended
    with), so the false discovery rate counts the whole wave. A tuple is (baseline, candidate)
    pairs under `policy`. `final` turns every `continue` into `inconclusive`.
    """
    wave_policy = policy or Policy()
    evidence: dict[K, _Evidence] = {}
    policies: dict[K, Policy] = {}
    for key, raw in cases.items():
        case = raw if isinstance(raw, Case) else Case(raw[0], raw[1])
        case_policy = case.policy or wave_policy
        policies[key] = case_policy
        try:
            if case.paired:
                evidence[key] = _paired_evidence(case.baseline, case.candidate, case_policy)
            else:
                evidence[key] = _unpaired_evidence(case.baseline, case.candidate, case_policy)
        except UserError as exc:
            raise UserError(f"experiment {key}: {exc}") from None
    q_values: dict[K, float] | None = None
    if wave_policy.fdr:
        q_values = benjamini_hochberg({key: ev.p_value for key, ev in evidence.items()})
    return {
        key: _verdict(
            ev,
            policies[key],
            None if q_values is None else q_values[key],
            final=final or not ev.paired,
            wave=len(evidence) > 1,
        )
        for key, ev in evidence.items()
    }


def apply_guards(
    decision: Decision,
    guards: Sequence[Guard],
    samples: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    alpha: float = 0.05,
) -> Decision:
    """Turn a keep into a discard when a guard metric is significantly worse than its limit.

    `samples` maps each guard's metric to its (baseline, candidate) pairs. Each guard is one look
    at level 1 - alpha. Verdicts other than keep pass through unchanged.
    """
    if decision.verdict != "keep":
        return decision
    for guard in guards:
        if guard.metric not in samples:
            raise UserError(f"guard metric {guard.metric!r}: no samples were recorded for it")
        if not 0 <= guard.max_loss < 1:
            raise UserError(f"guard {guard.metric!r}: max_loss {guard.max_loss} must lie in [0, 1)")
        base, cand = samples[guard.metric]
        policy = Policy(
            alpha=alpha,
            direction=guard.direction,
            min_pairs=MIN_VALUES,
            max_pairs=max(MIN_VALUES, len(base)),
            sequential=False,
        )
        try:
            ev = _paired_evidence(base, cand, policy)
        except UserError as exc:
            raise UserError(f"guard metric {guard.metric!r}: {exc}") from None
        high = math.expm1(ev.high)
        if high < -guard.max_loss:
            return replace(
                decision,
                verdict="discard",
                reason=(
                    f"guard {guard.metric}: {pct(math.expm1(ev.center))} "
                    f"[{pct(math.expm1(ev.low))}, {pct(high)}] is worse than the "
                    f"-{guard.max_loss:.1%} limit; primary metric: {decision.reason}"
                ),
            )
    return decision


def confirm_by_wall_clock(
    decision: Decision, baseline: Sequence[float], candidate: Sequence[float], *, alpha: float = 0.05
) -> Decision:
    """For a benchmark that runs a fixed amount of work: a keep stands only when the harness's own
    wall-clock time per invocation (`baseline`, `candidate`: seconds, pair by pair) is significantly
    shorter too; otherwise it is inconclusive, with both figures. The candidate's binary times
    itself and could report a faster clock than it runs; the harness's clock is not its to change.
    Verdicts other than keep pass through unchanged."""
    if decision.verdict != "keep":
        return decision
    policy = Policy(
        alpha=alpha,
        direction="lower",
        min_pairs=MIN_VALUES,
        max_pairs=max(MIN_VALUES, len(baseline)),
        sequential=False,
    )
    try:
        ev = _paired_evidence(baseline, candidate, policy)
    except UserError as exc:
        raise UserError(f"the harness's wall clock: {exc}") from None
    low, high = math.expm1(ev.low), math.expm1(ev.high)
    if low > 0:
        return decision
    return replace(
        decision,
        verdict="inconclusive",
        reason=(
            f"the harness's wall clock does not confirm it: wall time {pct(math.expm1(ev.center))} "
            f"[{pct(low)}, {pct(high)}] faster; primary metric: {decision.reason}"
        ),
    )


def self_test(first: Sequence[float], second: Sequence[float], *, alpha: float = 0.05) -> SelfTest:
    """A/A test: pairs of the same tree measured twice. Passes when the interval contains 0."""
    policy = Policy(alpha=alpha, min_pairs=MIN_VALUES, sequential=False)
    ev = _paired_evidence(first, second, policy)
    low, high = math.expm1(ev.low), math.expm1(ev.high)
    return SelfTest(
        passed=low <= 0.0 <= high,
        effect=math.expm1(ev.center),
        ci_low=low,
        ci_high=high,
        level=ev.level,
        pairs=ev.pairs,
        noise=ev.noise,
        noise_floor=(high - low) / 2,
    )


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


@dataclass(frozen=True)
class Resolution:
    """What a setup can resolve by the cap, from the spread of its per-pair log ratios."""

    pair_sd: float
    """Standard deviation of one pair's log ratio log(B/A)."""
    pairs: int
    """The cap the figures are for (policy.max_pairs)."""
    floor: float
    """Half-width of the interval at the cap's look: a patch that changes nothing is discarded only
    when this is below min_effect, and effects below it end inconclusive."""
    keepable: float
    """The true effect kept with probability `power` by the cap (never below min_effect)."""
    power: float


#: Variance of the Hodges-Lehmann estimate relative to the mean's, for normal noise (1 / ARE).
_HL_VARIANCE = math.pi / 3


def resolution(pair_sd: float, policy: Policy, *, power: float = 0.8, pairs: int | None = None) -> Resolution:
    """Planning figures for `pairs` pairs (default: the cap) under `policy`'s last look.

    Approximates the Wilcoxon interval by a t interval with standard error
    ``pair_sd * sqrt(pi/3 / n)`` (the Hodges-Lehmann estimate's efficiency against the mean), at
    the level the sequential rule gives the cap's look; on normal noise it is within about 5% of
    the exact interval's mean half-width from 16 to 80 pairs (tests/runner/test_stats.py). Early
    looks can only stop sooner, so the figures are for the worst case.
    """
    if pair_sd < 0 or not math.isfinite(pair_sd):
        raise UserError(f"pair spread {pair_sd!r}: must be a finite number >= 0")
    n = pairs or policy.max_pairs
    # Fewer pairs than the first look: one look at the whole alpha.
    share = 1.0 if n < policy.min_pairs else replace(policy, max_pairs=n).look_share(n)
    z = t_quantile(1 - share * policy.alpha / 2, max(1, n - 1))
    z_power = statistics.NormalDist().inv_cdf(power)
    se = pair_sd * math.sqrt(_HL_VARIANCE / n)
    return Resolution(
        pair_sd=pair_sd,
        pairs=n,
        floor=math.expm1(z * se),
        keepable=max(policy.min_effect, math.expm1((z + z_power) * se)),
        power=power,
    )


def pairs_to_resolve(pair_sd: float, effect: float, policy: Policy, *, limit: int = 100_000) -> int | None:
    """The smallest cap on the policy's grid of looks (min_pairs + k * batch) whose floor is at
    most `effect`; None when even `limit` pairs are not enough."""
    if effect <= 0:
        return None

    def enough(k: int) -> bool:
        return resolution(pair_sd, policy, pairs=policy.min_pairs + k * policy.batch).floor <= effect

    high = 0
    while not enough(high):  # doubling, then bisection (the floor shrinks as pairs grow)
        if policy.min_pairs + high * policy.batch > limit:
            return None
        high = max(1, high * 2)
    low = -1
    while high - low > 1:
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid
    return policy.min_pairs + high * policy.batch


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


# --- t distribution (no scipy) ---------------------------------------------------------------


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


# --- internals -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Evidence:
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


def _paired_evidence(baseline: Sequence[float], candidate: Sequence[float], policy: Policy) -> _Evidence:
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
        return _Evidence(center, -math.inf, math.inf, level, 1.0, n, noise(baseline), True)
    center, low, high, p = _hodges_lehmann(d, share * policy.alpha / 2)
    return _Evidence(center, low, high, level, min(1.0, 2 * p / share), n, noise(baseline), True, detail)


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


def _unpaired_evidence(baseline: Sequence[float], candidate: Sequence[float], policy: Policy) -> _Evidence:
    a, b = _logs(baseline, "baseline"), _logs(candidate, "candidate")
    sign = 1.0 if policy.direction == "higher" else -1.0
    detail = f"unpaired: {len(a)} baseline and {len(b)} candidate samples"
    n = min(len(a), len(b))
    level = 1 - policy.alpha
    if n < MIN_VALUES:
        center = sign * (_mean(b) - _mean(a)) if n else 0.0
        return _Evidence(center, -math.inf, math.inf, level, 1.0, n, noise(baseline), False, detail)
    mean_a, se2_a, h_a = _trimmed(a)
    mean_b, se2_b, h_b = _trimmed(b)
    se2 = se2_a + se2_b
    # Welch-Satterthwaite degrees of freedom for Yuen's test.
    df = se2**2 / (se2_a**2 / (h_a - 1) + se2_b**2 / (h_b - 1)) if se2 > 0 else float(n)
    center = sign * (mean_b - mean_a)
    low, high, p = _yuen_interval(center, se2, df, policy.alpha)
    return _Evidence(center, low, high, level, p, n, noise(baseline), False, detail)


def _verdict(ev: _Evidence, policy: Policy, q: float | None, *, final: bool, wave: bool) -> Decision:
    effect, low, high = math.expm1(ev.center), math.expm1(ev.low), math.expm1(ev.high)
    significance = ev.p_value if q is None else q
    bounds = f"{interval(low, high)} at {ev.level:.2%}"
    last = final or ev.pairs >= policy.max_pairs
    verdict: Verdict
    if ev.pairs < policy.min_pairs and ev.paired and not final:
        verdict, reason = "continue", f"{ev.pairs} pairs, fewer than the first look's {policy.min_pairs}"
    elif ev.pairs < MIN_VALUES:
        verdict, reason = "inconclusive", f"{ev.pairs} values: too few to judge"
    elif significance <= policy.alpha and effect >= policy.min_effect:
        fdr = f", q {q:.2g} across the wave" if q is not None and wave else ""
        verdict = "keep"
        reason = (
            f"{pct(effect)} {bounds} is above 0 (p {ev.p_value:.2g}{fdr}) "
            f"and at least the {policy.min_effect:.1%} minimum effect"
        )
    elif high < policy.min_effect:
        verdict, reason = "discard", f"{bounds} lies below the {policy.min_effect:.1%} minimum effect"
    else:
        if ev.p_value <= policy.alpha and effect >= policy.min_effect and q is not None and wave:
            doubt = f"significant alone (p {ev.p_value:.2g}) but not across the wave (q {q:.2g})"
        else:
            doubt = f"{bounds} straddles the {policy.min_effect:.1%} minimum effect"
        if last:
            where = f"at the cap of {policy.max_pairs} pairs" if ev.paired else "in one look"
            if ev.paired and ev.pairs < policy.max_pairs:
                where = f"at the final look ({ev.pairs} pairs)"
            verdict, reason = "inconclusive", f"{doubt} {where}"
        else:
            verdict, reason = "continue", f"{doubt} after {ev.pairs} of {policy.max_pairs} pairs"
    if ev.detail:
        reason = f"{reason} ({ev.detail})"
    return Decision(
        verdict=verdict,
        effect=effect,
        ci_low=low,
        ci_high=high,
        level=ev.level,
        pairs=ev.pairs,
        p_value=ev.p_value,
        q_value=q,
        noise=ev.noise,
        reason=reason,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def pct(x: float | None) -> str:
    """A relative change as `+1.2%` (`+inf` / `-inf` when unbounded, `?` when unknown)."""
    if x is None:
        return "?"
    return f"{x:+.1%}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")


def interval(low: float, high: float) -> str:
    """`[-0.3%, +2.8%]`, or `[not bounded yet]` while too few pairs bound the effect at this look."""
    if low <= -1.0 and math.isinf(high):
        return "[not bounded yet]"
    return f"[{pct(low)}, {pct(high)}]"


def cell_pct(x: float | None) -> str:
    """A table cell: `+1.23%`, blank when unknown or unbounded (tables line up on two digits)."""
    return "" if x is None or not math.isfinite(x) else f"{x:+.2%}"


def cell_interval(low: float | None, high: float | None) -> str:
    """A table cell: `[-0.31%, +2.80%]`, blank when no interval was recorded."""
    if low is None and high is None:
        return ""
    return f"[{cell_pct(low) or '-inf'}, {cell_pct(high) or '+inf'}]"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
