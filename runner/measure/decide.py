"""Decisions: the pairs of an experiment read from its samples, a look of the one judge
(runner/stats/judge.py) recorded with the family it was judged in, and the A/A verdict."""

from __future__ import annotations

from typing import Any

from kb.db import now, transaction
from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store import decisions, experiments, run_records, samples
from kb.textsafe import quoted
from runner import stats
from runner.harness.protocol import WALL_METRIC
from runner.measure.common import finite, stored_policy
from runner.measure.context import RunContext
from runner.measure.lifecycle import Lifecycle
from runner.record import history

# A wave's candidates that share its FDR control: those still measured and those decided (a
# candidate that crashed, was refused or cancelled tested nothing).
FAMILY_STATUSES = ("queued", "running", "kept", "discarded", "inconclusive")


class Decider:
    """Judges an experiment after each of its batches and records the look."""

    def __init__(self, ctx: RunContext, lifecycle: Lifecycle) -> None:
        self.ctx = ctx
        self.lifecycle = lifecycle
        self.rules = ctx.state.rules

    def pairs(self, exp_id: int, metric: str) -> tuple[list[float], list[float]]:
        """(baseline, candidate) values per complete pair of `metric` (runner.stats.pair_values)."""
        return history.pairs(self.ctx.db, exp_id, metric)

    def complete_pairs(self, exp_id: int) -> int:
        return len(self.pairs(exp_id, self.ctx.state.metric)[0])

    def wall_pairs(self, exp_id: int) -> tuple[list[float], list[float]]:
        """Seconds of the harness's clock per complete pair (experiments' meta `wall`)."""
        return history.wall_values(decoded_dict(self.ctx.exp(exp_id)["meta"]))

    def metrics_summary(self, exp_id: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in [*samples.metrics(self.ctx.db, exp_id), WALL_METRIC]:
            base, cand = self.wall_pairs(exp_id) if name == WALL_METRIC else self.pairs(exp_id, name)
            if not base:
                continue
            a, b = sorted(base), sorted(cand)
            ma, mb = a[len(a) // 2], b[len(b) // 2]
            out[name] = {
                "pairs": len(base),
                "baseline": ma,
                "candidate": mb,
                "ratio": (mb / ma) if ma else None,
                "noise": stats.noise(base),
            }
        return out

    def _family(self, exp_id: int, family: int | None) -> list[int]:
        if family is None:
            return [exp_id]
        members = experiments.ids_of_wave(self.ctx.db, family, "candidate", FAMILY_STATUSES)
        return members if exp_id in members else [*members, exp_id]

    def decide(self, exp_id: int, family: int | None, *, force_final: bool = False) -> bool:
        """Decide after a batch, within the caller's transaction; True when the experiment is over
        (the caller then removes its trees)."""
        ctx, metric = self.ctx, self.ctx.state.metric
        wave = {m: self.pairs(m, metric) for m in self._family(exp_id, family)}
        confirmation = stats.Confirmation(
            guards={g.metric: self.pairs(exp_id, g.metric) for g in self.rules.guards},
            wall=self.wall_pairs(exp_id) if self.rules.wall_clock_guard else ((), ()),
        )
        try:
            decision = stats.judge(exp_id, wave, self.rules, confirmation, final=force_final)
        except UserError as exc:
            self.lifecycle.finish(
                exp_id, "crashed", "benchmark", detail=f"samples cannot be judged: {exc}", cleanup=False
            )
            return True
        final = decision.verdict != "continue"
        exp = ctx.exp(exp_id)
        with transaction(ctx.db):
            self._record(exp_id, decision, final, {str(m): len(pairs[0]) for m, pairs in wave.items()})
            if final:
                status = decision.status or "inconclusive"
                self.lifecycle.finish(exp_id, status, None, detail=decision.reason, cleanup=False)
        verdict = decision.status if final else "continue"
        ctx.say(
            f"  exp {exp_id} {quoted(exp['title'])}: {verdict} {stats.pct(decision.effect)} "
            f"{stats.interval(decision.ci_low, decision.ci_high)} after {decision.pairs} pairs"
        )
        return final

    def _record(self, exp_id: int, decision: stats.Decision, final: bool, family: dict[str, int]) -> None:
        db, state = self.ctx.db, self.ctx.state
        if decisions.has_runner_look(db, exp_id, decision.pairs, final):
            return
        decisions.record(
            db,
            {
                "experiment_id": exp_id,
                "verdict": decision.verdict,
                "metric": state.metric,
                "effect": finite(decision.effect),
                "ci_low": finite(decision.ci_low),
                "ci_high": finite(decision.ci_high),
                "pairs": decision.pairs,
                "p_value": finite(decision.p_value),
                "q_value": finite(decision.q_value) if decision.q_value is not None else None,
                "noise": decision.noise,
                "reason": decision.reason,
                "policy": stored_policy(self.rules, state.metric),
                "metrics": self.metrics_summary(exp_id),
                "is_final": int(final),
                "origin": "runner",
                "created_at": now(),
                "family": family,
            },
        )

    def decide_self_test(self, exp_id: int) -> bool:
        """Judge the A/A test within the caller's transaction (it is always over after one batch)."""
        ctx = self.ctx
        a, b = self.pairs(exp_id, ctx.state.metric)
        try:
            result = stats.self_test(a, b, alpha=ctx.state.policy.alpha)
        except UserError as exc:
            ctx.merge_meta(exp_id, {"self_test": {"passed": False, "reason": str(exc)}})
            self.lifecycle.finish(
                exp_id, "crashed", "benchmark", detail=f"samples cannot be judged: {exc}", cleanup=False
            )
            return True
        data = result.to_json()
        interval = f"{stats.pct(result.effect)} {stats.interval(result.ci_low, result.ci_high)}"
        data["reason"] = (
            f"no difference: {interval}" if result.passed else f"the baseline differs from itself: {interval}"
        )
        with transaction(ctx.db):
            ctx.merge_meta(exp_id, {"self_test": data})
            self.lifecycle.finish(
                exp_id,
                "passed" if result.passed else "failed",
                None,
                detail=f"A/A {data['reason']}",
                cleanup=False,
            )
            if result.passed:
                run_records.update(
                    ctx.db, ctx.run_id, {"self_test": data, "noise_floor": finite(result.noise_floor)}
                )
            else:
                run_records.update(ctx.db, ctx.run_id, {"self_test": data})
            ctx.event(
                "self_test",
                f"self-test {'passed' if result.passed else 'failed'}: {data['reason']}",
                level="info" if result.passed else "warning",
                exp_id=exp_id,
                data=data,
            )
        noise = f"{result.noise:.1%}" if result.noise is not None else "?"
        ctx.say(f"self-test: {data['reason']}; noise {noise}, floor {result.noise_floor:.1%}")
        return True
