"""The decision policy: keep, discard, inconclusive or continue, from the evidence of runner.stats.paired;
guards, the wall-clock confirmation, the A/A self-test and the planning figures (`resolution`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from kb.errors import UserError
from kb.policy import MIN_VALUES, Direction, Policy
from kb.vocabulary import VERDICT_STATUS
from runner.stats.fmt import finite, interval, pct
from runner.stats.paired import (
    Evidence,
    benjamini_hochberg,
    paired_evidence,
    t_quantile,
    unpaired_evidence,
)

Verdict = Literal["keep", "discard", "inconclusive", "continue"]


K = TypeVar("K", bound=Hashable)


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
        return VERDICT_STATUS.get(self.verdict)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (infinite bounds, for too few pairs, become None)."""
        return {
            "verdict": self.verdict,
            "status": self.status,
            "effect": finite(self.effect),
            "ci_low": finite(self.ci_low),
            "ci_high": finite(self.ci_high),
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
            "effect": finite(self.effect),
            "ci_low": finite(self.ci_low),
            "ci_high": finite(self.ci_high),
            "level": self.level,
            "pairs": self.pairs,
            "noise": self.noise,
            "noise_floor": finite(self.noise_floor),
        }


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
    evidence: dict[K, Evidence] = {}
    policies: dict[K, Policy] = {}
    for key, raw in cases.items():
        case = raw if isinstance(raw, Case) else Case(raw[0], raw[1])
        case_policy = case.policy or wave_policy
        policies[key] = case_policy
        try:
            if case.paired:
                evidence[key] = paired_evidence(case.baseline, case.candidate, case_policy)
            else:
                evidence[key] = unpaired_evidence(case.baseline, case.candidate, case_policy)
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
    at level 1 - alpha. Verdicts other than keep pass through unchanged. A guard measured on fewer
    pairs than the keep (the candidate's benchmark left it out, on every pair or on some) cannot
    confirm it: the keep becomes inconclusive, for a guard nobody measured is no guard at all.
    """
    if decision.verdict != "keep":
        return decision
    for guard in guards:
        if guard.metric not in samples:
            raise UserError(f"guard metric {guard.metric!r}: no samples were recorded for it")
        if not 0 <= guard.max_loss < 1:
            raise UserError(f"guard {guard.metric!r}: max_loss {guard.max_loss} must lie in [0, 1)")
        base, cand = samples[guard.metric]
        if min(len(base), len(cand)) < decision.pairs:
            return replace(
                decision,
                verdict="inconclusive",
                reason=(
                    f"guard {guard.metric}: measured on {min(len(base), len(cand))} of the "
                    f"{decision.pairs} pairs, so it cannot confirm the keep; primary metric: "
                    f"{decision.reason}"
                ),
            )
        policy = Policy(
            alpha=alpha,
            direction=guard.direction,
            min_pairs=MIN_VALUES,
            max_pairs=max(MIN_VALUES, len(base)),
            sequential=False,
        )
        try:
            ev = paired_evidence(base, cand, policy)
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
        ev = paired_evidence(baseline, candidate, policy)
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
    ev = paired_evidence(first, second, policy)
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


def _verdict(ev: Evidence, policy: Policy, q: float | None, *, final: bool, wave: bool) -> Decision:
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
