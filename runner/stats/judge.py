"""The one judge: an experiment's verdict at one look, from its pairs, its wave's and the rules.

The loop calls it after every batch (runner/measure/decide.py), `redecide` replays it over the
stored samples (runner/record/redecide.py): the same function on the same inputs gives the same
verdict, so a stored decision can always be checked against its samples.

A look at experiment `key`:
1. the wave's experiments judged together (false discoveries controlled across the wave), each on
   the pairs it had at that moment; a wave-mate whose values no log ratio can judge (0 or below) is
   left out of the others' family, for a candidate printing `throughput=0` must not decide its
   neighbours; `final` turns `continue` into `inconclusive` (the cap, or a spent budget);
2. a keep must then hold on every guard metric and, when the rules ask for it, on the harness's
   own wall clock (runner.stats.apply_guards, confirm_by_wall_clock), each read on the pairs the
   primary metric was judged on.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kb.policy import Policy
from runner.stats.decide import Decision, Guard, apply_guards, confirm_by_wall_clock, decide_wave
from runner.stats.paired import ratio_defined

K = TypeVar("K", bound=Hashable)
Pairs = tuple[Sequence[float], Sequence[float]]
"""(baseline values, candidate values), pair by pair in the order they were measured."""


@dataclass(frozen=True)
class Rules:
    """What an experiment is judged by: the policy, and what a keep must also pass."""

    policy: Policy
    guards: tuple[Guard, ...] = ()
    wall_clock_guard: bool = False

    def to_json(self) -> dict[str, Any]:
        """The keys a stored policy adds to the Policy's own fields (decisions.policy, runs.policy)."""
        return {
            "guards": [
                {"metric": g.metric, "max_loss": g.max_loss, "direction": g.direction} for g in self.guards
            ],
            "wall_clock_guard": self.wall_clock_guard,
        }


@dataclass(frozen=True)
class Confirmation:
    """What a keep is confirmed on: each guard metric's pairs and the harness's wall-clock seconds."""

    guards: Mapping[str, Pairs] = field(default_factory=dict)
    wall: Pairs = ((), ())


def judge(
    key: K,
    wave: Mapping[K, Pairs],
    rules: Rules,
    confirmation: Confirmation | None = None,
    *,
    final: bool = False,
) -> Decision:
    """The verdict of `key` at this look. `wave` holds every experiment of its family with the
    pairs each had at that moment (`key` among them). Raises UserError when `key`'s own values
    cannot be judged."""
    cases = {m: pairs for m, pairs in wave.items() if m == key or ratio_defined([*pairs[0], *pairs[1]])}
    decision = decide_wave(cases, rules.policy, final=False)[key]
    if final and decision.verdict == "continue":
        decision = decide_wave(cases, rules.policy, final=True)[key]
    return confirm_keep(decision, len(wave[key][0]), rules, confirmation or Confirmation())


def confirm_keep(decision: Decision, pairs: int, rules: Rules, confirmation: Confirmation) -> Decision:
    """A keep confirmed (or withdrawn) by the guard metrics and the wall clock, each read on the
    first `pairs` pairs (those the primary metric was judged on); other verdicts pass through."""
    if decision.verdict == "keep" and rules.guards:
        found = {g.metric: _first(confirmation.guards.get(g.metric, ((), ())), pairs) for g in rules.guards}
        decision = apply_guards(decision, rules.guards, found, alpha=rules.policy.alpha)
    if decision.verdict == "keep" and rules.wall_clock_guard:
        decision = confirm_by_wall_clock(
            decision, *_first(confirmation.wall, pairs), alpha=rules.policy.alpha
        )
    return decision


def _first(pairs: Pairs, n: int) -> tuple[list[float], list[float]]:
    return list(pairs[0][:n]), list(pairs[1][:n])
