"""runner.stats: the numbers behind keep / discard / inconclusive."""

from __future__ import annotations

import itertools
import json
import math
import random
import re

import pytest

from kb.errors import UserError
from runner.stats import (
    Case,
    Guard,
    Policy,
    apply_guards,
    benjamini_hochberg,
    decide_paired,
    decide_unpaired,
    decide_wave,
    noise,
    self_test,
    side_value,
    t_quantile,
    t_sf,
)
from runner.stats.paired import _hodges_lehmann, _signed_rank_cdf  # exactness checks


def machine_pairs(
    rng: random.Random,
    n: int,
    effect: float,
    cv: float,
    *,
    outlier_p: float = 0.0,
    lower_is_better: bool = False,
) -> tuple[list[float], list[float]]:
    """Pairs from a drifting machine with log-normal noise and optional 30% slowdowns."""
    level = 0.0
    base: list[float] = []
    cand: list[float] = []
    for _ in range(n):
        for side, true in ((base, 1.0), (cand, 1.0 + effect)):
            level += rng.gauss(0.0, 0.003)
            value = 100.0 * true * math.exp(level + rng.gauss(0.0, cv))
            if rng.random() < outlier_p:
                value /= 1.3
            side.append(100.0 * 100.0 / value if lower_is_better else value)
    return base, cand


# --- distributions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.706204736),
        (0.975, 10, 2.228138852),
        (0.995, 5, 4.032142984),
        (0.9995, 30, 3.645958635),
        (0.95, 1e9, 1.644853627),
    ],
)
def test_t_quantile_matches_tables(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-8)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, rel=1e-8)
    assert t_sf(expected, df) == pytest.approx(1 - p, rel=1e-6)


def test_t_sf_is_symmetric_and_bounded() -> None:
    assert t_sf(0.0, 7) == pytest.approx(0.5)
    assert t_sf(-1.5, 7) == pytest.approx(1 - t_sf(1.5, 7))
    assert t_sf(math.inf, 3) == 0.0 and t_sf(-math.inf, 3) == 1.0


def test_signed_rank_distribution_matches_tables() -> None:
    assert _signed_rank_cdf(5)[0] == pytest.approx(1 / 32)
    assert _signed_rank_cdf(10)[8] == pytest.approx(0.0244140625)  # the classic n=10, T<=8
    cdf = _signed_rank_cdf(20)
    assert cdf[-1] == pytest.approx(1.0)
    assert cdf[52] == pytest.approx(0.0242, abs=5e-5)  # n=20: P(T <= 52) is 0.0242


def test_signed_rank_test_is_exact_under_sign_flips() -> None:
    # Under "no effect" each pair's sign is a fair coin: over all 2^10 sign patterns of fixed
    # magnitudes, the test may reject at most gamma of them.
    magnitudes = [0.3, 1.1, 0.7, 2.0, 0.05, 1.6, 0.9, 0.2, 1.3, 0.45]
    for gamma in (0.01, 0.025, 0.05):
        rejected = 0
        for signs in itertools.product((1, -1), repeat=len(magnitudes)):
            d = [s * m for s, m in zip(signs, magnitudes, strict=True)]
            _, low, _, p = _hodges_lehmann(d, gamma)
            assert (p <= gamma) == (low > 0)  # the test and the interval agree
            rejected += p <= gamma
        assert rejected / 2 ** len(magnitudes) <= gamma


def test_benjamini_hochberg_known_values() -> None:
    q = benjamini_hochberg({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.2})
    # Ranked a, c, b, d: raw m*p/rank = 0.04, 0.06, 0.0533, 0.2; step-up minimum from the top.
    assert q == pytest.approx({"a": 0.04, "b": 0.16 / 3, "c": 0.16 / 3, "d": 0.2})
    assert benjamini_hochberg({}) == {}


# --- policy ----------------------------------------------------------------------------------


def test_policy_plans_looks_and_splits_alpha_over_them() -> None:
    policy = Policy()
    assert policy.looks() == (8, 16, 24, 32, 40, 48, 56, 64, 72, 80)
    shares = [policy.look_share(n) for n in policy.looks()]
    assert sum(shares) == pytest.approx(1.0)
    assert shares == sorted(shares)  # most alpha is kept for the late looks
    assert policy.look_share(13) == policy.look_share(16)  # between looks: the next look
    assert policy.look_share(200) == policy.look_share(80)
    assert Policy(sequential=False).look_share(16) == 1.0
    assert Policy(min_pairs=6, batch=10, max_pairs=30).looks() == (6, 16, 26, 30)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "alpha 0.0"),
        ({"min_effect": -0.1}, "min_effect -0.1"),
        ({"min_pairs": 2}, "min_pairs 2"),
        ({"max_pairs": 5}, "max_pairs 5"),
        ({"batch": 0}, "batch 0"),
        ({"direction": "up"}, "direction 'up'"),
    ],
)
def test_policy_rejects_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        Policy(**kwargs)  # type: ignore[arg-type]


# --- paired decisions ------------------------------------------------------------------------


def test_clear_improvement_is_kept_with_its_interval() -> None:
    base, cand = machine_pairs(random.Random(1), 16, 0.10, 0.01)
    decision = decide_paired(base, cand)
    assert decision.verdict == "keep" and decision.status == "kept"
    assert decision.ci_low < 0.10 < decision.ci_high
    assert decision.effect == pytest.approx(0.10, abs=0.01)
    assert decision.p_value <= 0.05 and decision.q_value == decision.p_value
    assert decision.pairs == 16
    assert decision.level == pytest.approx(1 - 0.05 * Policy().look_share(16))
    assert decision.noise is not None and 0.005 < decision.noise < 0.05


def test_direction_lower_reads_a_shorter_time_as_an_improvement() -> None:
    base, cand = machine_pairs(random.Random(2), 24, 0.08, 0.01, lower_is_better=True)
    assert sum(cand) < sum(base)  # times went down
    faster = decide_paired(base, cand, Policy(direction="lower"))
    assert faster.verdict == "keep" and faster.effect == pytest.approx(0.08, abs=0.01)
    wrong_way = decide_paired(base, cand, Policy(direction="higher"))
    assert wrong_way.verdict == "discard" and wrong_way.effect < 0


def test_swapping_sides_mirrors_the_decision() -> None:
    base, cand = machine_pairs(random.Random(3), 32, 0.03, 0.05, outlier_p=0.1)
    forward = decide_paired(base, cand)
    backward = decide_paired(cand, base)
    assert math.log1p(backward.effect) == pytest.approx(-math.log1p(forward.effect))
    assert math.log1p(backward.ci_low) == pytest.approx(-math.log1p(forward.ci_high))
    assert math.log1p(backward.ci_high) == pytest.approx(-math.log1p(forward.ci_low))


def test_regression_is_discarded() -> None:
    base, cand = machine_pairs(random.Random(4), 24, -0.05, 0.02)
    decision = decide_paired(base, cand)
    assert decision.verdict == "discard" and decision.status == "discarded"
    assert decision.ci_high < 0.01
    assert "below the 1.0% minimum effect" in decision.reason


def test_significant_but_too_small_effect_is_discarded_unless_min_effect_allows_it() -> None:
    base, cand = machine_pairs(random.Random(5), 40, 0.004, 0.001)
    small = decide_paired(base, cand)
    assert small.verdict == "discard" and small.ci_low > 0 and small.ci_high < 0.01
    assert decide_paired(base, cand, Policy(min_effect=0.0)).verdict == "keep"


def test_undecided_continues_until_the_cap_or_a_final_look() -> None:
    rng = random.Random(6)
    base, cand = machine_pairs(rng, 16, 0.0, 0.10)
    early = decide_paired(base, cand)
    assert early.verdict == "continue" and early.status is None
    assert "after 16 of 80 pairs" in early.reason
    last = decide_paired(base, cand, final=True)
    assert last.verdict == "inconclusive" and "final look (16 pairs)" in last.reason
    more_base, more_cand = machine_pairs(rng, 64, 0.0, 0.10)
    capped = decide_paired(base + more_base, cand + more_cand)
    assert capped.verdict == "inconclusive" and "cap of 80 pairs" in capped.reason


def test_before_the_first_look_it_continues_and_too_few_pairs_stay_open() -> None:
    base, cand = machine_pairs(random.Random(7), 5, 0.2, 0.01)
    assert decide_paired(base, cand).verdict == "continue"
    two = decide_paired(base[:2], cand[:2], final=True)
    assert two.verdict == "inconclusive" and two.ci_low == -1.0 and math.isinf(two.ci_high)
    payload = two.to_json()
    assert payload["ci_high"] is None
    json.dumps(payload, allow_nan=False)


def test_repeated_looks_cost_confidence() -> None:
    base, cand = machine_pairs(random.Random(8), 16, 0.03, 0.02)
    once = decide_paired(base, cand, Policy(sequential=False))
    looked = decide_paired(base, cand)
    assert once.verdict == "keep" and once.level == pytest.approx(0.95)
    assert looked.verdict == "continue"
    share = Policy().look_share(16)
    assert looked.p_value == pytest.approx(min(1.0, once.p_value / share))
    assert looked.ci_low < once.ci_low and looked.ci_high > once.ci_high


def test_noisy_neighbour_outliers_do_not_hide_an_improvement() -> None:
    base, cand = machine_pairs(random.Random(9), 32, 0.05, 0.01)
    for i in (3, 11, 20, 27):  # a neighbour makes single samples 30-60% slower
        cand[i] /= 1.6 if i % 2 else 1.3
        base[i + 1] /= 1.45
    mean_ratio = sum(c / b for b, c in zip(base, cand, strict=True)) / len(base) - 1
    decision = decide_paired(base, cand)
    assert decision.verdict == "keep" and decision.effect == pytest.approx(0.05, abs=0.01)
    assert abs(mean_ratio - 0.05) > 3 * abs(decision.effect - 0.05)  # the mean was misled


def test_pairs_slowed_on_both_sides_are_set_aside() -> None:
    base, cand = machine_pairs(random.Random(10), 24, 0.05, 0.01)
    for i in (5, 17):
        base[i] /= 1.3
        cand[i] /= 1.4
    decision = decide_paired(base, cand)
    assert "2 of 24 pairs set aside" in decision.reason
    assert decision.verdict == "keep"


def test_bad_input_names_the_value() -> None:
    with pytest.raises(UserError, match="candidate value #2 is -1.0"):
        decide_paired([1.0, 2.0, 3.0], [1.0, -1.0, 3.0])
    with pytest.raises(UserError, match="equal counts: 3 baseline, 2 candidate"):
        decide_paired([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(UserError, match="baseline value #1 is nan"):
        decide_unpaired([math.nan, 1.0, 2.0], [1.0, 2.0, 3.0])


def test_sequential_rule_keeps_false_keeps_rare_and_finds_real_effects() -> None:
    # A small version of benchmarks/bench_decisions.py (heavy tails, drift, 8 pairs per look).
    rng = random.Random(11)
    policy = Policy()

    def run(effect: float, cv: float) -> str:
        base, cand = machine_pairs(rng, 80, effect, cv, outlier_p=0.1)
        for look in policy.looks():
            decision = decide_paired(base[:look], cand[:look], policy, final=look == 80)
            if decision.verdict != "continue":
                return decision.verdict
        raise AssertionError("the last look is final")

    nulls = [run(0.0, 0.2) for _ in range(60)]
    assert nulls.count("keep") <= 2  # the bound is 2.5%; 60 runs allow sampling noise
    wins = [run(0.10, 0.05) for _ in range(30)]
    assert wins.count("keep") >= 28


# --- waves -----------------------------------------------------------------------------------


def test_wave_controls_false_discoveries() -> None:
    rng = random.Random(12)
    single = Policy(sequential=False, min_effect=0.0)
    cases: dict[str, tuple[list[float], list[float]]] = {"strong": machine_pairs(rng, 24, 0.1, 0.01)}
    # Three borderline experiments, significant alone but not among ten, and six duds.
    while len(cases) < 4:
        pair = machine_pairs(rng, 12, 0.012, 0.02)
        if 0.025 < decide_paired(*pair, single).p_value <= 0.05:
            cases[f"weak{len(cases)}"] = pair
    for i in range(6):
        cases[f"dud{i}"] = machine_pairs(rng, 12, -0.02, 0.02)
    wave = decide_wave(cases, single)
    assert wave["strong"].verdict == "keep"
    for decision in wave.values():
        q = decision.q_value
        assert q is not None and q >= decision.p_value
    for key in ("weak1", "weak2", "weak3"):
        assert wave[key].verdict == "continue" and "not across the wave" in wave[key].reason
    no_fdr = decide_wave(cases, Policy(sequential=False, min_effect=0.0, fdr=False))
    assert all(no_fdr[k].verdict == "keep" for k in ("strong", "weak1", "weak2", "weak3"))
    assert all(d.q_value is None for d in no_fdr.values())


def test_wave_cases_may_carry_their_own_policy_and_pairing() -> None:
    rng = random.Random(13)
    time_base, time_cand = machine_pairs(rng, 16, 0.1, 0.01, lower_is_better=True)
    tput_base, tput_cand = machine_pairs(rng, 16, 0.1, 0.01)
    wave = decide_wave(
        {
            "time": Case(time_base, time_cand, policy=Policy(direction="lower")),
            "unpaired": Case(tput_base, tput_cand[:12], paired=False),
        }
    )
    assert wave["time"].verdict == "keep"
    assert wave["unpaired"].verdict == "keep" and "unpaired: 16 baseline and 12" in wave["unpaired"].reason
    with pytest.raises(UserError, match="experiment bad: paired samples need equal counts"):
        decide_wave({"bad": ([1.0, 2.0, 3.0], [1.0])})


# --- unpaired --------------------------------------------------------------------------------


def test_unpaired_decides_in_one_look() -> None:
    rng = random.Random(14)
    base = [100 * rng.lognormvariate(0, 0.02) for _ in range(30)]
    better = [106 * rng.lognormvariate(0, 0.02) for _ in range(25)]
    same = [100 * rng.lognormvariate(0, 0.05) for _ in range(10)]
    kept = decide_unpaired(base, better)
    assert kept.verdict == "keep" and kept.effect == pytest.approx(0.06, abs=0.015)
    assert kept.level == pytest.approx(0.95) and kept.pairs == 25
    assert decide_unpaired(base, same).verdict in ("inconclusive", "discard")
    assert decide_unpaired(base, same).verdict != "continue"
    assert decide_unpaired(base, [90.0, 91.0]).verdict == "inconclusive"  # too few values


# --- guards, noise, self-test ----------------------------------------------------------------


def test_guard_turns_a_keep_into_a_discard_when_the_guarded_metric_falls() -> None:
    rng = random.Random(15)
    pp = machine_pairs(rng, 24, 0.08, 0.01)
    tg_falls = machine_pairs(rng, 24, -0.06, 0.01)
    tg_holds = machine_pairs(rng, 24, -0.005, 0.01)
    keep = decide_paired(*pp)
    assert keep.verdict == "keep"
    guard = Guard("tg", max_loss=0.02)
    discarded = apply_guards(keep, [guard], {"tg": tg_falls})
    assert discarded.verdict == "discard" and re.match(r"guard tg: -[56]\.\d%", discarded.reason)
    assert "-2.0% limit" in discarded.reason and discarded.effect == keep.effect
    assert apply_guards(keep, [guard], {"tg": tg_holds}) == keep
    lower_guard = Guard("latency", max_loss=0.02, direction="lower")
    assert apply_guards(keep, [lower_guard], {"latency": tg_falls}).verdict == "keep"
    with pytest.raises(UserError, match="guard metric 'tg': no samples"):
        apply_guards(keep, [guard], {})
    continuing = decide_paired(*machine_pairs(rng, 16, 0.0, 0.2))
    assert apply_guards(continuing, [guard], {}) == continuing


def test_a_guard_the_candidate_leaves_out_cannot_confirm_a_keep() -> None:
    """A candidate whose benchmark stops printing the guard metric (on every pair, or on some) gave
    the guard nothing to veto with: the keep stands no more, it is inconclusive."""
    rng = random.Random(16)
    keep = decide_paired(*machine_pairs(rng, 24, 0.08, 0.01))
    assert keep.verdict == "keep" and keep.pairs == 24
    guard = Guard("tg", max_loss=0.02)
    base, cand = machine_pairs(rng, 24, 0.0, 0.01)
    assert apply_guards(keep, [guard], {"tg": (base, cand)}) == keep
    for kept in (0, 2, 20):  # the runner passes the complete pairs only
        judged = apply_guards(keep, [guard], {"tg": (base[:kept], cand[:kept])})
        assert judged.verdict == "inconclusive" and judged.status == "inconclusive", kept
        assert judged.reason.startswith(f"guard tg: measured on {kept} of the 24 pairs"), judged.reason
        assert judged.effect == keep.effect


def test_noise_is_the_coefficient_of_variation() -> None:
    assert noise([10.0, 10.0, 10.0]) == 0.0
    assert noise([9.0, 11.0]) == pytest.approx(math.sqrt(2) / 10)
    assert noise([5.0]) is None
    assert side_value([3.0, 1.0, 2.0, 100.0]) == 2.5
    with pytest.raises(UserError):
        side_value([])


def test_self_test_passes_on_identical_trees_and_reports_the_noise_floor() -> None:
    rng = random.Random(16)
    results = [self_test(*machine_pairs(rng, 30, 0.0, 0.03, outlier_p=0.1)) for _ in range(40)]
    assert sum(r.passed for r in results) >= 35  # 95% intervals: about 2 of 40 miss 0
    for result in results:
        assert result.passed == (result.ci_low <= 0 <= result.ci_high)
        assert result.noise_floor == pytest.approx((result.ci_high - result.ci_low) / 2)
        assert 0.002 < result.noise_floor < 0.1
        assert result.noise is not None and result.noise > 0.02
    assert json.loads(json.dumps(results[0].to_json()))["pairs"] == 30
    shifted = self_test(*machine_pairs(rng, 30, 0.05, 0.01))
    assert not shifted.passed and shifted.ci_low > 0


def test_intervals_read_plainly_before_they_are_bounded() -> None:
    from runner.stats import interval, pct

    assert interval(-1.0, math.inf) == "[not bounded yet]"  # an early look with too few pairs
    assert interval(-0.003, 0.028) == "[-0.3%, +2.8%]"
    assert interval(0.01, math.inf) == "[+1.0%, +inf]"
    assert pct(-math.inf) == "-inf"
