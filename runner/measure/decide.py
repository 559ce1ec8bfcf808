"""Decisions: pairs from samples, the wave's statistical decision, guards, the A/A verdict."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from kb.db import now, transaction
from kb.errors import UserError
from kb.store import decisions, experiments, run_records, samples
from kb.textsafe import quoted
from runner import stats
from runner.harness.protocol import WALL_METRIC
from runner.measure.common import (
    finite,
    unzip,
)
from runner.measure.core import RunnerCore

# A wave's candidates that share its FDR control: those still measured and those decided (a
# candidate that crashed, was refused or cancelled tested nothing).
FAMILY_STATUSES = ("queued", "running", "kept", "discarded", "inconclusive")


class Deciding(RunnerCore):
    """Decisions."""

    def _pairs(self, exp_id: int, metric: str) -> list[tuple[float, float]]:
        """(A, B) per complete pair: each side's value is the median of its samples."""
        values = samples.by_pair(self.db, exp_id, metric)
        return [
            (stats.side_value(sides["A"]), stats.side_value(sides["B"]))
            for _, sides in sorted(values.items())
            if sides.get("A") and sides.get("B")
        ]

    def _wall_pairs(self, exp_id: int) -> list[tuple[float, float]]:
        """(A, B) seconds of the harness's clock per complete pair (experiments' meta `wall`)."""
        wall = json.loads(self._exp(exp_id)["meta"] or "{}").get("wall") or {}
        found = sorted((int(pair), sides) for pair, sides in wall.items() if "A" in sides and "B" in sides)
        return [(float(sides["A"]), float(sides["B"])) for _, sides in found]

    def _metrics_summary(self, exp_id: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in [*samples.metrics(self.db, exp_id), WALL_METRIC]:
            pairs = self._wall_pairs(exp_id) if name == WALL_METRIC else self._pairs(exp_id, name)
            if not pairs:
                continue
            a = sorted(p[0] for p in pairs)
            b = sorted(p[1] for p in pairs)
            ma, mb = a[len(a) // 2], b[len(b) // 2]
            out[name] = {
                "pairs": len(pairs),
                "baseline": ma,
                "candidate": mb,
                "ratio": (mb / ma) if ma else None,
                "noise": stats.noise([p[0] for p in pairs]),
            }
        return out

    def _family(self, exp_id: int, family: int | None) -> list[int]:
        if family is None:
            return [exp_id]
        return experiments.ids_of_wave(self.db, family, "candidate", FAMILY_STATUSES)

    def _decide(self, exp_id: int, family: int | None, *, force_final: bool = False) -> bool:
        """Decide after a batch, within the caller's transaction; True when the experiment is over
        (the caller then removes its trees)."""
        members = self._family(exp_id, family)
        if exp_id not in members:
            members.append(exp_id)
        cases = {m: tuple(zip(*self._pairs(m, self.metric), strict=True)) or ((), ()) for m in members}
        # A wave-mate whose values the log-ratio scale cannot judge (0 or below) crashes at its own
        # decision; it must not crash this one's (a candidate printing `throughput=0` would end
        # every experiment decided beside it).
        cases = {m: c for m, c in cases.items() if m == exp_id or stats.ratio_defined([*c[0], *c[1]])}
        try:
            wave_decisions = stats.decide_wave(
                {m: (list(c[0]), list(c[1])) for m, c in cases.items()},
                self.policy,
                final=False,
            )
            decision = wave_decisions[exp_id]
            if force_final and decision.verdict == "continue":
                decision = stats.decide_wave(
                    {m: (list(c[0]), list(c[1])) for m, c in cases.items()}, self.policy, final=True
                )[exp_id]
            if decision.verdict == "keep" and self.guards:
                decision = stats.apply_guards(
                    decision,
                    self.guards,
                    {g.metric: unzip(self._pairs(exp_id, g.metric)) for g in self.guards},
                    alpha=self.policy.alpha,
                )
            if decision.verdict == "keep" and self.settings.metric.wall_clock_guard:
                wall = unzip(self._wall_pairs(exp_id))
                decision = stats.confirm_by_wall_clock(decision, *wall, alpha=self.policy.alpha)
        except UserError as exc:
            self._finish_experiment(
                exp_id, "crashed", "benchmark", detail=f"samples cannot be judged: {exc}", cleanup=False
            )
            return True
        final = decision.verdict != "continue"
        exp = self._exp(exp_id)
        with transaction(self.db):
            self._record_decision(exp_id, decision, final)
            if final:
                status = decision.status or "inconclusive"
                self._finish_experiment(exp_id, status, None, detail=decision.reason, cleanup=False)
        verdict = decision.status if final else "continue"
        self._say(
            f"  exp {exp_id} {quoted(exp['title'])}: {verdict} {stats.pct(decision.effect)} "
            f"{stats.interval(decision.ci_low, decision.ci_high)} after {decision.pairs} pairs"
        )
        return final

    def _record_decision(self, exp_id: int, decision: stats.Decision, final: bool) -> None:
        if decisions.has_runner_look(self.db, exp_id, decision.pairs, final):
            return
        decisions.record(
            self.db,
            {
                "experiment_id": exp_id,
                "verdict": decision.verdict,
                "metric": self.metric,
                "effect": finite(decision.effect),
                "ci_low": finite(decision.ci_low),
                "ci_high": finite(decision.ci_high),
                "pairs": decision.pairs,
                "p_value": finite(decision.p_value),
                "q_value": finite(decision.q_value) if decision.q_value is not None else None,
                "noise": decision.noise,
                "reason": decision.reason,
                "policy": {**asdict(self.policy), "metric": self.metric},
                "metrics": self._metrics_summary(exp_id),
                "is_final": int(final),
                "origin": "runner",
                "created_at": now(),
            },
        )

    def _decide_self_test(self, exp_id: int) -> bool:
        """Judge the A/A test within the caller's transaction (it is always over after one batch)."""
        a, b = unzip(self._pairs(exp_id, self.metric))
        try:
            result = stats.self_test(a, b, alpha=self.policy.alpha)
        except UserError as exc:
            self._merge_meta(exp_id, {"self_test": {"passed": False, "reason": str(exc)}})
            self._finish_experiment(
                exp_id, "crashed", "benchmark", detail=f"samples cannot be judged: {exc}", cleanup=False
            )
            return True
        data = result.to_json()
        interval = f"{stats.pct(result.effect)} {stats.interval(result.ci_low, result.ci_high)}"
        data["reason"] = (
            f"no difference: {interval}" if result.passed else f"the baseline differs from itself: {interval}"
        )
        with transaction(self.db):
            self._merge_meta(exp_id, {"self_test": data})
            self._finish_experiment(
                exp_id,
                "passed" if result.passed else "failed",
                None,
                detail=f"A/A {data['reason']}",
                cleanup=False,
            )
            if result.passed:
                run_records.update(
                    self.db, self.run_id, {"self_test": data, "noise_floor": finite(result.noise_floor)}
                )
            else:
                run_records.update(self.db, self.run_id, {"self_test": data})
            self._event(
                "self_test",
                f"self-test {'passed' if result.passed else 'failed'}: {data['reason']}",
                level="info" if result.passed else "warning",
                exp_id=exp_id,
                data=data,
            )
        noise = f"{result.noise:.1%}" if result.noise is not None else "?"
        self._say(f"self-test: {data['reason']}; noise {noise}, floor {result.noise_floor:.1%}")
        return True
