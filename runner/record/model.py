"""The record's typed rows: a run, a wave, a decision, a sample, an experiment, an event.

What runner.record.history returns and the CLI, the report and the TUI display; built from rows
the queries there read, and never querying themselves. JSON columns are read with kb.jsoncol, the way all
of runner/record does. runner.record.history re-exports every name, which is how callers know them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kb.jsoncol import decoded_dict
from kb.store.decisions import Decision
from kb.store.tables import DecisionRow
from kb.vocabulary import EXPERIMENT_FINAL
from runner.stats import cell_pct

FINISHED_STATUSES = EXPERIMENT_FINAL


def finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


@dataclass(frozen=True)
class RunInfo:
    id: int
    name: str
    status: str
    branch: str | None
    baseline_commit: str | None
    head_commit: str | None
    backend: str
    policy: dict[str, Any]
    budget: dict[str, Any]
    options: dict[str, Any]
    noise_floor: float | None
    self_test: dict[str, Any] | None
    summary: dict[str, Any] | None
    """Final stack and ablation results, as the loop wrote them."""
    cost_usd: float
    error: str | None
    imported_from: str | None
    started_at: float
    ended_at: float | None
    heartbeat_at: float | None
    waves: int
    experiments: int
    kept: int
    winners: int
    stop_reason: str | None = None
    """Why a finished run stopped: one token of kb.vocabulary.STOP_REASONS."""

    @property
    def policy_shown(self) -> str:
        """The policy's plain settings as `key=value, ...` (history, report): nested ones and
        unset ones (an imported run without a unit) left out."""
        return ", ".join(
            f"{k}={v}"
            for k, v in sorted(self.policy.items())
            if v is not None and not isinstance(v, dict | list)
        )

    @property
    def metric(self) -> str | None:
        value = self.policy.get("metric")
        return str(value) if value else None

    @property
    def direction(self) -> str:
        return str(self.policy.get("direction") or "higher")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WaveInfo:
    id: int
    run_id: int
    number: int
    baseline_commit: str
    status: str
    started_at: float
    ended_at: float | None
    experiments: int
    kept: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DecisionInfo(Decision):
    """A decision as the record shows it: the stored row's columns (kb.store.decisions.Decision,
    declared there once) with the numbers finite or None, is_final a bool and origin `runner` when
    empty, plus its two JSON columns decoded (policy and metrics keep their stored text)."""

    decoded_policy: dict[str, Any]
    """The policy column decoded: {} when NULL or unreadable."""
    decoded_metrics: dict[str, Any]
    """The metrics column decoded (each metric's result by name): {} when NULL or unreadable."""

    @classmethod
    def from_row(cls, row: DecisionRow) -> DecisionInfo:
        """The one way a stored decisions row becomes a DecisionInfo."""
        stored = replace(
            Decision(**row),
            effect=finite(row["effect"]),
            ci_low=finite(row["ci_low"]),
            ci_high=finite(row["ci_high"]),
            p_value=finite(row["p_value"]),
            q_value=finite(row["q_value"]),
            noise=finite(row["noise"]),
            is_final=bool(row["is_final"]),
            origin=row["origin"] or "runner",
        )
        return cls(
            **vars(stored),
            decoded_policy=decoded_dict(row["policy"]),
            decoded_metrics=decoded_dict(row["metrics"]),
        )

    def to_json(self) -> dict[str, Any]:
        """The row's columns in their order, the JSON ones decoded, then `ci`. The family a look
        was judged in (`redecide --check` reads it) is left out: it is the loop's working record."""
        out = asdict(self)
        out.pop("family")
        out["policy"] = out.pop("decoded_policy")
        out["metrics"] = out.pop("decoded_metrics")
        out["ci"] = [self.ci_low, self.ci_high]
        return out


@dataclass(frozen=True)
class Sample:
    pair: int
    side: str
    """A = baseline, B = candidate."""
    metric: str
    seq: int
    value: float
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "side": self.side,
            "metric": self.metric,
            "seq": self.seq,
            "value": self.value,
        }


@dataclass(frozen=True)
class ExperimentInfo:
    id: int
    run_id: int
    wave_id: int | None
    wave: int | None
    """The wave's number within its run."""
    kind: str
    title: str
    status: str
    phase: str | None
    reason: str | None
    patch_id: int | None
    hypothesis_id: int | None
    hypothesis_title: str | None
    worker: str | None
    baseline_commit: str | None
    candidate_commit: str | None
    retry_of: int | None
    log_dir: str | None
    batches: int
    cost_usd: float
    meta: dict[str, Any]
    created_at: float
    started_at: float | None
    ended_at: float | None
    decision: DecisionInfo | None
    winner_commit: str | None = None
    winner_patch_file: str | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)

    @property
    def effect(self) -> float | None:
        return self.decision.effect if self.decision else None

    @property
    def difference(self) -> float | None:
        """The effect as a difference (candidate − baseline, positive = better) where the decision
        judged on that scale: an imported line whose values of 0 or below leave no ratio."""
        d = self.decision
        entry = d.decoded_metrics.get(d.metric) if d is not None and d.effect is None else None
        if isinstance(entry, dict) and entry.get("scale") == "difference":
            return finite(entry.get("difference"))
        return None

    @property
    def ci(self) -> tuple[float | None, float | None]:
        return (self.decision.ci_low, self.decision.ci_high) if self.decision else (None, None)

    @property
    def pairs(self) -> int:
        return self.decision.pairs if self.decision else 0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def isolation(self) -> str | None:
        """What its build, benchmark and checks ran under (runner/harness/sandbox.py); None if never run."""
        value = self.meta.get("isolation")
        return value if isinstance(value, str) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "wave": self.wave,
            "wave_id": self.wave_id,
            "kind": self.kind,
            "title": self.title,
            "status": self.status,
            "phase": self.phase,
            "reason": self.reason,
            "effect": self.effect,
            "difference": self.difference,
            "ci": list(self.ci),
            "pairs": self.pairs,
            "verdict": self.decision.verdict if self.decision else None,
            "isolation": self.isolation,
            "hypothesis": None
            if self.hypothesis_id is None
            else {"id": self.hypothesis_id, "title": self.hypothesis_title},
            "sources": list(self.sources),
            "patch_id": self.patch_id,
            "worker": self.worker,
            "baseline_commit": self.baseline_commit,
            "candidate_commit": self.candidate_commit,
            "retry_of": self.retry_of,
            "log_dir": self.log_dir,
            "batches": self.batches,
            "cost_usd": self.cost_usd,
            "meta": self.meta,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "decision": self.decision.to_json() if self.decision else None,
            "winner": None
            if self.winner_commit is None
            else {"commit": self.winner_commit, "patch_file": self.winner_patch_file},
        }


def effect_cell(e: ExperimentInfo) -> str:
    """The effect as a table cell: `+1.23%`, or `Δ+2 (diff)` where it was judged as a difference."""
    if e.effect is None and e.difference is not None:
        return f"Δ{e.difference:+.4g} (diff)"
    return cell_pct(e.effect)


@dataclass(frozen=True)
class Event:
    id: int
    ts: float
    level: str
    kind: str
    run_id: int | None
    experiment_id: int | None
    message: str
    data: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def isolation_summary(exps: Sequence[ExperimentInfo]) -> str | None:
    """How a run's experiments were isolated, e.g. `uid+pid+mount (5), none (1: sandbox.mode = off)`;
    None when none of them ran."""
    counts: dict[str, int] = {}
    why: dict[str, str] = {}
    for e in exps:
        if e.isolation is None:
            continue
        counts[e.isolation] = counts.get(e.isolation, 0) + 1
        detail = e.meta.get("isolation_detail")
        if isinstance(detail, str) and detail:
            why.setdefault(e.isolation, detail)
    if not counts:
        return None
    return ", ".join(
        f"{mode} ({n}{': ' + why[mode] if mode in why else ''})" for mode, n in sorted(counts.items())
    )
