"""`stats.resolution` and `stats.pairs_to_resolve`: the planning figures `validate` advises from.

They approximate the decision rule's own interval, so they are checked against it: simulated pairs
with a known spread go through `decide_paired` and `resolution` must predict the mean half-width
of the interval at the cap, and the keep rate at `keepable` must be near the power it promises.
"""

from __future__ import annotations

import math
import random

import pytest

from runner import stats


def _pairs(
    rng: random.Random, n: int, pair_sd: float, effect: float = 0.0
) -> tuple[list[float], list[float]]:
    side = pair_sd / math.sqrt(2)
    a = [100 * math.exp(rng.gauss(0, side)) for _ in range(n)]
    b = [100 * math.exp(rng.gauss(math.log1p(effect), side)) for _ in range(n)]
    return a, b


@pytest.mark.parametrize(("pairs", "pair_sd"), [(16, 0.02), (40, 0.03), (80, 0.05)])
def test_floor_predicts_the_interval_half_width_at_the_cap(pairs: int, pair_sd: float) -> None:
    rng = random.Random(7)
    policy = stats.Policy(max_pairs=pairs, min_pairs=8, batch=8)
    widths = []
    for _ in range(150):
        d = stats.decide_paired(*_pairs(rng, pairs, pair_sd), policy)
        widths.append((math.log1p(d.ci_high) - math.log1p(d.ci_low)) / 2)
    predicted = math.log1p(stats.resolution(pair_sd, policy).floor)
    assert sum(widths) / len(widths) == pytest.approx(predicted, rel=0.1)


def test_keepable_effect_is_kept_about_as_often_as_promised() -> None:
    rng = random.Random(11)
    policy = stats.Policy(max_pairs=32, min_pairs=8, batch=8, min_effect=0.01)
    res = stats.resolution(0.04, policy, power=0.8)
    kept = 0
    runs = 200
    for _ in range(runs):
        a, b = _pairs(rng, policy.max_pairs, 0.04, res.keepable)
        for look in policy.looks():  # the runner's sequential looks
            d = stats.decide_paired(a[:look], b[:look], policy)
            if d.verdict != "continue":
                break
        kept += d.verdict == "keep"
    assert 0.68 <= kept / runs <= 0.95


def test_pairs_to_resolve_is_the_first_look_whose_floor_is_enough() -> None:
    policy = stats.Policy()
    n = stats.pairs_to_resolve(0.05, 0.01, policy)
    assert n is not None and (n - policy.min_pairs) % policy.batch == 0
    assert stats.resolution(0.05, policy, pairs=n).floor <= 0.01
    assert stats.resolution(0.05, policy, pairs=n - policy.batch).floor > 0.01
    assert stats.pairs_to_resolve(0.05, 0.0001, policy, limit=1000) is None
    assert stats.pairs_to_resolve(0.0, 0.01, policy) == policy.min_pairs
