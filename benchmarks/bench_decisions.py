"""Decision quality of `runner.stats` on a simulator with known truth.

Each simulated experiment measures a baseline and a candidate on one noisy machine, A B A B ...
(the runner alternates the order, ABBA; this drift is a trendless random walk, so order does not
bias it and the simulator keeps A B):

- slow drift: the machine's speed is a random walk (log-scale step DRIFT_STEP per sample);
- per-sample noise: log-normal with sigma = the noise CV (1% to 30%);
- heavy tails: with probability OUTLIER_P a sample is OUTLIER_SLOWDOWN (30%) slower (a noisy
  neighbour), independently for each sample;
- the candidate's true effect is one of EFFECTS (relative, on a higher-is-better metric).

The sequential rule is the runner's: decide_paired after 8 pairs, then every 8 more, up to 80.
The naive rule measures 5 baseline runs, then 5 candidate runs, and keeps when the candidate's
mean is higher. Prints keep rates, false-keep rates and pairs used. Fixed seed; one core.

    .venv/bin/python benchmarks/bench_decisions.py [--runs N] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from runner.stats import Policy, decide_paired, side_value

EFFECTS = (-0.03, 0.0, 0.01, 0.03, 0.05, 0.10)
CVS = (0.01, 0.02, 0.05, 0.10, 0.20, 0.30)
OUTLIER_P = 0.1
OUTLIER_SLOWDOWN = 1.3
DRIFT_STEP = 0.003


class Machine:
    """One worker: a drifting speed, per-sample noise and an occasional noisy neighbour."""

    def __init__(self, rng: random.Random, cv: float) -> None:
        self.rng = rng
        self.cv = cv
        self.level = 0.0

    def sample(self, true_value: float) -> float:
        self.level += self.rng.gauss(0.0, DRIFT_STEP)
        value = true_value * math.exp(self.level + self.rng.gauss(0.0, self.cv))
        if self.rng.random() < OUTLIER_P:
            value /= OUTLIER_SLOWDOWN
        return value

    def invocation(self, true_value: float, samples: int) -> float:
        return side_value([self.sample(true_value) for _ in range(samples)])


@dataclass
class Tally:
    verdicts: Counter[str] = field(default_factory=Counter)
    pairs: list[int] = field(default_factory=list)

    def add(self, verdict: str, pairs: int) -> None:
        self.verdicts[verdict] += 1
        self.pairs.append(pairs)

    def rate(self, verdict: str) -> float:
        return self.verdicts[verdict] / max(1, len(self.pairs))

    def mean_pairs(self) -> float:
        return statistics.fmean(self.pairs)


def run_sequential(
    rng: random.Random, effect: float, cv: float, policy: Policy, samples: int = 1
) -> tuple[str, int]:
    machine = Machine(rng, cv)
    base: list[float] = []
    cand: list[float] = []
    looks = policy.looks()
    for look in looks:
        while len(base) < look:
            base.append(machine.invocation(1.0, samples))
            cand.append(machine.invocation(1.0 + effect, samples))
        decision = decide_paired(base, cand, policy, final=look == looks[-1])
        if decision.verdict != "continue":
            return decision.verdict, decision.pairs
    raise AssertionError("the last look is final")


def run_naive(rng: random.Random, effect: float, cv: float, runs: int = 5) -> tuple[str, int]:
    machine = Machine(rng, cv)
    base = [machine.sample(1.0) for _ in range(runs)]
    cand = [machine.sample(1.0 + effect) for _ in range(runs)]
    return ("keep" if statistics.fmean(cand) > statistics.fmean(base) else "discard"), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="simulated experiments per cell")
    parser.add_argument("--seed", type=int, default=20240607)
    parser.add_argument("--alpha", type=float, default=Policy.alpha, help="the policy's alpha")
    args = parser.parse_args()
    policy = Policy(alpha=args.alpha)
    started = time.perf_counter()
    seq: dict[tuple[float, float], Tally] = {}
    naive: dict[tuple[float, float], Tally] = {}
    for cv in CVS:
        for effect in EFFECTS:
            # Separate streams, so the naive figures do not depend on the policy under test.
            rng = random.Random(f"{args.seed}/{cv}/{effect}")
            naive_rng = random.Random(f"{args.seed}/{cv}/{effect}/naive")
            seq[cv, effect] = Tally()
            naive[cv, effect] = Tally()
            for _ in range(args.runs):
                seq[cv, effect].add(*run_sequential(rng, effect, cv, policy))
                naive[cv, effect].add(*run_naive(naive_rng, effect, cv))

    # The headline cell gets more runs, for a tighter figure.
    focus_runs = max(args.runs, 1500)
    focus = Tally()
    focus_median3 = Tally()
    rng = random.Random(f"{args.seed}/focus")
    for _ in range(focus_runs):
        focus.add(*run_sequential(rng, 0.03, 0.05, policy))
        focus_median3.add(*run_sequential(rng, 0.03, 0.05, policy, samples=3))
    elapsed = time.perf_counter() - started

    print(
        f"runner.stats sequential rule: {policy.looks()[0]} pairs then +{policy.batch} per look "
        f"up to {policy.max_pairs}; min_effect {policy.min_effect:.0%}, alpha {policy.alpha}"
    )
    print(
        f"noise: log-normal CV, drift step {DRIFT_STEP:.1%}/sample, {OUTLIER_P:.0%} of samples "
        f"{OUTLIER_SLOWDOWN - 1:.0%} slower; {args.runs} runs per cell, seed {args.seed}"
    )
    print()
    header = "CV     " + "".join(f"{e:>+14.0%}" for e in EFFECTS)
    print("keep rate % (mean pairs used), sequential rule, by true effect")
    print(header)
    for cv in CVS:
        cells = "".join(
            f"{100 * seq[cv, e].rate('keep'):>7.1f} ({seq[cv, e].mean_pairs():>4.1f})" for e in EFFECTS
        )
        print(f"{cv:>4.0%}   {cells}")
    print()
    print("keep rate %, naive rule (mean of 5 candidate runs > mean of 5 baseline runs)")
    print(header)
    for cv in CVS:
        cells = "".join(f"{100 * naive[cv, e].rate('keep'):>14.1f}" for e in EFFECTS)
        print(f"{cv:>4.0%}   {cells}")
    print()
    print("false keeps (keep rate % at a true effect of 0 and of -3%), and what the rule costs")
    print("CV     seq@0  seq@-3%  naive@0  naive@-3%  discards@-3%  inconclusive@0  pairs@0")
    for cv in CVS:
        print(
            f"{cv:>4.0%}  {100 * seq[cv, 0.0].rate('keep'):>5.2f}  {100 * seq[cv, -0.03].rate('keep'):>7.2f}"
            f"  {100 * naive[cv, 0.0].rate('keep'):>7.1f}  {100 * naive[cv, -0.03].rate('keep'):>9.1f}"
            f"  {100 * seq[cv, -0.03].rate('discard'):>12.1f}"
            f"  {100 * seq[cv, 0.0].rate('inconclusive'):>14.1f}"
            f"  {seq[cv, 0.0].mean_pairs():>7.1f}"
        )
    for effect in (0.0, -0.03):
        keeps = sum(seq[cv, effect].verdicts["keep"] for cv in CVS)
        total = sum(len(seq[cv, effect].pairs) for cv in CVS)
        naive_keeps = sum(naive[cv, effect].verdicts["keep"] for cv in CVS)
        print(
            f"all CVs, true effect {effect:+.0%}: sequential false keeps {keeps}/{total} "
            f"= {100 * keeps / total:.2f}%; naive {100 * naive_keeps / total:.1f}%"
        )
    print()
    print(
        f"+3% at 5% CV, {focus_runs} runs: keep {100 * focus.rate('keep'):.1f}%, "
        f"discard {100 * focus.rate('discard'):.1f}%, "
        f"mean pairs {focus.mean_pairs():.1f}"
    )
    print(
        f"  same, each side the median of 3 samples per invocation: keep "
        f"{100 * focus_median3.rate('keep'):.1f}%, mean pairs {focus_median3.mean_pairs():.1f}"
    )
    print(f"elapsed {elapsed:.1f} s (CPU {time.process_time():.1f} s)")


if __name__ == "__main__":
    main()
