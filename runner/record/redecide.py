"""Re-decide a past run from its stored samples under another policy, and list what flips.

The replay follows the runner's own procedure (runner/stats/): per wave, look at the planned pair
counts (min_pairs, +batch, ..., max_pairs); at each look judge every experiment of the wave together
(false discoveries controlled across the wave) and stop those that reach keep or discard. An
experiment cannot be given pairs that were never measured: when the stored pairs run out before the
new policy would have stopped, its verdict is taken at that point as final and marked `short`.

A wave's false-discovery family here is its statistically decided candidates. The live runner also
counted experiments that were still running then, or later crashed; how many pairs those had at
each look is not recorded, so in such waves q-values may differ slightly from the run's own. Under
the run's own policy a wave without them replays to the very same decisions.

Only experiments the runner decided statistically (kept, discarded, inconclusive) are re-judged;
checks_failed, crashed, refused, ... are reported as skipped with the reason. `save=True` stores the
new verdicts as decisions with origin `redecide` and `is_final = 0`, leaving the run's own decisions
and statuses untouched. A keep is confirmed as the loop confirms it: by the guard metrics and,
when the run's policy asks for it, by the harness's wall clock (runner.stats.confirm_keep).

`check` is the exact replay: every look the loop recorded with its family (decisions.family: the
wave-mates judged together and the pairs each had then) is judged again by the same function the
loop called (runner.stats.judge) on the same stored samples, and must give the same verdict,
effect and interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import sqlite_utils

from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.jsoncol import decoded
from kb.store import decisions
from kb.vocabulary import DECIDED_STATUSES, STATUS_VERDICT

if TYPE_CHECKING:
    from kb.config import Settings
from runner import stats
from runner.record import history
from runner.stats import Confirmation, Decision, Guard, Policy, Rules, confirm_keep, decide_wave, judge

K = TypeVar("K", int, str)

_POLICY_FIELDS = {f.name for f in fields(Policy)}


def policy_from_json(data: Mapping[str, Any]) -> Policy:
    """A stats Policy from a run's policy JSON (as written by the loop, or the config's [policy])."""
    values: dict[str, Any] = {k: v for k, v in data.items() if k in _POLICY_FIELDS}
    if "batch" not in values and "batch_pairs" in data:
        values["batch"] = data["batch_pairs"]
    if "min_pairs" in values and "max_pairs" in values:
        values["min_pairs"] = min(values["min_pairs"], values["max_pairs"])
    return Policy(**values)


def guards_from_json(data: Mapping[str, Any], direction: str) -> list[Guard]:
    found = data.get("guards") or []
    out: list[Guard] = []
    for g in found if isinstance(found, list) else []:
        if isinstance(g, dict) and g.get("metric"):
            loss: Any = g.get("max_loss", g.get("max_regression", 0.02))
            side: Any = g.get("direction", direction)
            out.append(Guard(metric=str(g["metric"]), max_loss=float(loss), direction=side))
    return out


def rules_from_json(data: Mapping[str, Any]) -> Rules:
    """The rules a stored policy names: its Policy, its guards and its wall-clock switch."""
    policy = policy_from_json(data)
    return Rules(policy, tuple(guards_from_json(data, policy.direction)), bool(data.get("wall_clock_guard")))


def _confirmation(db: sqlite_utils.Database, exp: history.ExperimentInfo, rules: Rules) -> Confirmation:
    """What the loop confirmed a keep of this experiment on: its guard metrics' pairs and the
    harness's wall clock."""
    return Confirmation(
        guards={g.metric: history.pairs(db, exp.id, g.metric) for g in rules.guards},
        wall=history.wall_values(exp.meta) if rules.wall_clock_guard else ((), ()),
    )


def replay_wave(
    cases: Mapping[K, tuple[Sequence[float], Sequence[float]]], policy: Policy
) -> dict[K, list[Decision]]:
    """The looks a sequential runner would have taken on these stored pairs, per experiment.

    Each list ends with the experiment's verdict (keep, discard or inconclusive); earlier entries
    are `continue`. Experiments already stopped stay in the wave's false-discovery family with the
    pairs they stopped at.
    """
    looks: dict[K, list[Decision]] = {key: [] for key in cases}
    stopped: dict[K, int] = {}
    plan = policy.looks() if policy.sequential else (policy.max_pairs,)
    for n in plan:
        if len(stopped) == len(cases):
            break
        batch: dict[K, tuple[Sequence[float], Sequence[float]]] = {}
        ran_out: set[K] = set()
        for key, (base, cand) in cases.items():
            m = stopped.get(key, min(n, len(base)))
            if key not in stopped and m < n:
                ran_out.add(key)  # the run measured no more pairs than this
            batch[key] = (base[:m], cand[:m])
        open_ = decide_wave(batch, policy)
        closed = decide_wave(batch, policy, final=True) if ran_out or n == plan[-1] else open_
        for key in cases:
            if key in stopped:
                continue
            decision = closed[key] if key in ran_out or n == plan[-1] else open_[key]
            looks[key].append(decision)
            if decision.verdict != "continue":
                stopped[key] = decision.pairs
    return looks


@dataclass(frozen=True)
class Redecision:
    experiment_id: int
    title: str
    wave: int | None
    status: str
    old_verdict: str | None
    old_effect: float | None
    old_pairs: int
    new: Decision
    stored_pairs: int
    short: bool
    """The stored pairs ran out before the new policy would have stopped."""

    @property
    def flipped(self) -> bool:
        return self.old_verdict != self.new.verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.experiment_id,
            "title": self.title,
            "wave": self.wave,
            "status": self.status,
            "old": {"verdict": self.old_verdict, "effect": self.old_effect, "pairs": self.old_pairs},
            "new": self.new.to_json(),
            "stored_pairs": self.stored_pairs,
            "short": self.short,
            "flipped": self.flipped,
        }


@dataclass(frozen=True)
class RedecideResult:
    run: history.RunInfo
    metric: str
    old_policy: Policy
    policy: Policy
    items: list[Redecision]
    skipped: list[dict[str, Any]]
    saved: int

    @property
    def flips(self) -> list[Redecision]:
        return [item for item in self.items if item.flipped]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": {"id": self.run.id, "name": self.run.name},
            "metric": self.metric,
            "old_policy": _policy_json(self.old_policy),
            "policy": _policy_json(self.policy),
            "experiments": [item.to_json() for item in self.items],
            "flips": [item.experiment_id for item in self.flips],
            "skipped": self.skipped,
            "saved": self.saved,
        }


def _policy_json(policy: Policy) -> dict[str, Any]:
    return {f.name: getattr(policy, f.name) for f in fields(Policy)}


def fallback_policy(settings: Settings) -> dict[str, Any]:
    """The workspace config's policy and metric, for runs whose stored policy lacks a key (imported
    runs, older runs): the one fallback for `history redecide` and the console's what-if."""
    return {
        **settings.policy.model_dump(),
        "metric": settings.metric.primary,
        "direction": settings.metric.direction,
        "guards": [g.model_dump() for g in settings.metric.guards],
        "wall_clock_guard": settings.metric.wall_clock_guard,
    }


def run_policy(run: history.RunInfo, fallback: Mapping[str, Any] | None = None) -> tuple[Policy, str]:
    """The policy a run was decided under, and its primary metric."""
    data = {**(fallback or {}), **run.policy}
    metric = data.get("metric")
    if not metric:
        raise UserError(f"run {run.name}: its policy names no primary metric; cannot re-decide")
    return policy_from_json(data), str(metric)


def redecide(
    db: sqlite_utils.Database,
    run_ref: str | int,
    *,
    min_effect: float | None = None,
    alpha: float | None = None,
    max_pairs: int | None = None,
    save: bool = False,
    fallback_policy: Mapping[str, Any] | None = None,
) -> RedecideResult:
    """Re-judge every statistically decided experiment of a run under a changed policy.

    Options left as None keep the run's own value. `fallback_policy` supplies keys the run's policy
    JSON lacks (the workspace config's [policy] and [metric]).
    """
    run = history.find_run(db, run_ref)
    old, metric = run_policy(run, fallback_policy)
    changes: dict[str, Any] = {}
    if min_effect is not None:
        changes["min_effect"] = min_effect
    if alpha is not None:
        changes["alpha"] = alpha
    if max_pairs is not None:
        changes["max_pairs"] = max_pairs
    new_data = {**_policy_json(old), **changes}
    new_data["min_pairs"] = min(new_data["min_pairs"], new_data["max_pairs"])
    policy = policy_from_json(new_data)
    given = rules_from_json({**(fallback_policy or {}), **run.policy})
    rules = Rules(policy, given.guards, given.wall_clock_guard)

    exps = history.experiments(db, run.id, kinds=["candidate"])
    skipped: list[dict[str, Any]] = []
    by_wave: dict[int | None, dict[int, tuple[list[float], list[float]]]] = {}
    info: dict[int, history.ExperimentInfo] = {}
    for exp in exps:
        if exp.status not in DECIDED_STATUSES:
            skipped.append(
                {
                    "id": exp.id,
                    "title": exp.title,
                    "status": exp.status,
                    "why": f"{exp.status}: not decided by statistics",
                }
            )
            continue
        base, cand = history.pairs(db, exp.id, metric)
        if not base:
            skipped.append(
                {
                    "id": exp.id,
                    "title": exp.title,
                    "status": exp.status,
                    "why": f"no complete pair of {metric}",
                }
            )
            continue
        if not stats.ratio_defined(base + cand):
            skipped.append(
                {
                    "id": exp.id,
                    "title": exp.title,
                    "status": exp.status,
                    "why": f"values of {metric} of 0 or below: no log ratio to judge",
                }
            )
            continue
        by_wave.setdefault(exp.wave_id, {})[exp.id] = (base, cand)
        info[exp.id] = exp

    items: list[Redecision] = []
    for cases in by_wave.values():
        for eid, looks in replay_wave(cases, policy).items():
            exp = info[eid]
            # Guards and the wall clock are read on the pairs the verdict used, as the loop reads them.
            decision = confirm_keep(looks[-1], looks[-1].pairs, rules, _confirmation(db, exp, rules))
            old_decision = exp.decision
            old_verdict = (
                old_decision.verdict
                if old_decision is not None and old_decision.is_final
                else STATUS_VERDICT.get(exp.status)
            )
            stored = len(cases[eid][0])
            items.append(
                Redecision(
                    experiment_id=eid,
                    title=exp.title,
                    wave=exp.wave,
                    status=exp.status,
                    old_verdict=old_verdict,
                    old_effect=exp.effect,
                    old_pairs=exp.pairs,
                    new=decision,
                    stored_pairs=stored,
                    # Inconclusive before the cap only happens when the stored pairs ran out.
                    short=decision.verdict == "inconclusive" and stored < policy.max_pairs,
                )
            )
    items.sort(key=lambda item: item.experiment_id)

    saved = 0
    if save and items:
        stamp = now()
        record = {**_policy_json(policy), "metric": metric, "redecide_of": _policy_json(old)}
        with transaction(db):
            for item in items:
                d = item.new
                decisions.record(
                    db,
                    {
                        "experiment_id": item.experiment_id,
                        "verdict": d.verdict,
                        "metric": metric,
                        "effect": d.effect,
                        "ci_low": _db_float(d.ci_low),
                        "ci_high": _db_float(d.ci_high),
                        "pairs": d.pairs,
                        "p_value": d.p_value,
                        "q_value": d.q_value,
                        "noise": d.noise,
                        "reason": d.reason,
                        "policy": record,
                        "is_final": 0,
                        "origin": "redecide",
                        "created_at": stamp,
                    },
                )
                saved += 1
            log_event(
                db,
                "redecide",
                f"re-decided {saved} experiments of run {run.name}: "
                f"{len([i for i in items if i.flipped])} flip(s)",
                run_id=run.id,
                data={"policy": record},
            )
    return RedecideResult(run, metric, old, policy, items, skipped, saved)


@dataclass(frozen=True)
class Replay:
    """One stored look of the loop judged again."""

    experiment_id: int
    decision_id: int
    pairs: int
    stored: str
    replayed: Decision | None
    """None when the replay could not judge it (its error is in `why`)."""
    why: str = ""

    @property
    def matches(self) -> bool:
        return self.replayed is not None and not self.why

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment_id,
            "decision": self.decision_id,
            "pairs": self.pairs,
            "stored": self.stored,
            "replayed": self.replayed.to_json() if self.replayed else None,
            "matches": self.matches,
            "why": self.why,
        }


@dataclass(frozen=True)
class CheckResult:
    run: history.RunInfo
    replays: list[Replay]
    unchecked: int
    """Looks of the loop recorded before decisions kept their family (they cannot be replayed exactly)."""
    unverifiable: list[tuple[int, str]]
    """(decision id, why): looks whose inputs are no longer all stored (samples withdrawn)."""

    @property
    def mismatches(self) -> list[Replay]:
        return [r for r in self.replays if not r.matches]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": {"id": self.run.id, "name": self.run.name},
            "checked": len(self.replays),
            "mismatches": [r.to_json() for r in self.mismatches],
            "unchecked": self.unchecked,
            "unverifiable": [{"decision": d, "why": why} for d, why in self.unverifiable],
        }


def check(db: sqlite_utils.Database, run_ref: str | int) -> CheckResult:
    """Judge every look the loop recorded for this run again, from the stored samples, with the
    rules the look recorded and the family it was judged in; each must match (verdict, pairs,
    effect and interval to 1e-9)."""
    run = history.find_run(db, run_ref)
    replays: list[Replay] = []
    unchecked = 0
    unverifiable: list[tuple[int, str]] = []
    pairs_of: dict[tuple[int, str], tuple[list[float], list[float]]] = {}

    def pairs(exp_id: int, metric: str) -> tuple[list[float], list[float]]:
        if (exp_id, metric) not in pairs_of:
            pairs_of[exp_id, metric] = history.pairs(db, exp_id, metric)
        return pairs_of[exp_id, metric]

    for exp in history.experiments(db, run.id):
        for d in history.decisions(db, exp.id, include_redecide=False):
            if d.origin != "runner":
                continue
            family = decoded(d.family)
            if not isinstance(family, dict) or not family:
                unchecked += 1
                continue
            if str(exp.id) not in family:
                why = f"its recorded wave ({', '.join(sorted(family))}) does not hold experiment {exp.id}"
                replays.append(Replay(exp.id, d.id, d.pairs, d.verdict, None, why))
                continue
            rules = rules_from_json(d.decoded_policy)
            wave = {}
            for member, n in family.items():
                base, cand = pairs(int(member), d.metric)
                if len(base) < int(n):
                    # A wave-mate refused for forged markers has its samples withdrawn.
                    unverifiable.append(
                        (d.id, f"experiment {member} has {len(base)} of the {n} pairs it was judged on")
                    )
                    break
                wave[int(member)] = (base[: int(n)], cand[: int(n)])
            if len(wave) != len(family):
                continue
            try:
                replayed = judge(exp.id, wave, rules, _confirmation(db, exp, rules), final=bool(d.is_final))
            except UserError as exc:
                replays.append(Replay(exp.id, d.id, d.pairs, d.verdict, None, str(exc)))
                continue
            why = _difference(d, replayed)
            replays.append(Replay(exp.id, d.id, d.pairs, d.verdict, replayed, why))
    return CheckResult(run, replays, unchecked, unverifiable)


def _difference(stored: history.DecisionInfo, replayed: Decision) -> str:
    """What differs between a stored look and its replay ('' when nothing does)."""
    said = []
    if stored.verdict != replayed.verdict:
        said.append(f"verdict {stored.verdict} -> {replayed.verdict}")
    if stored.pairs != replayed.pairs:
        said.append(f"pairs {stored.pairs} -> {replayed.pairs}")
    for name in ("effect", "ci_low", "ci_high"):
        old, new = getattr(stored, name), _db_float(getattr(replayed, name))
        if (old is None) != (new is None) or (old is not None and new is not None and abs(old - new) > 1e-9):
            said.append(f"{name} {old} -> {new}")
    return "; ".join(said)


def _db_float(x: float) -> float | None:
    import math

    return x if math.isfinite(x) else None


def format_flip(item: Redecision) -> str:
    """One line: `#12 title: keep -> inconclusive (+1.2% [-0.3%, +2.8%], 16 pairs)`."""
    d = item.new
    ci = stats.interval(d.ci_low, d.ci_high)
    short = ", stored pairs ran out" if item.short else ""
    return (
        f"#{item.experiment_id} {item.title}: {item.old_verdict or '-'} -> {d.verdict} "
        f"({stats.pct(d.effect)} {ci}, {d.pairs} pairs{short})"
    )
