"""The history pane's reads: runs, waves, experiments with their decisions, the metric chart, an
experiment in full, and re-deciding a run under another policy (runner.record)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.store import hypotheses as _hyp_store
from kb.store.experiments import candidate_samples
from kb.store.hypotheses import PatchInfo
from kb.store.paging import PAGE_SIZE, Page, clamp_offset

if TYPE_CHECKING:
    import sqlite_utils

    from runner.record.history import DecisionInfo, ExperimentInfo, RunInfo, Sample, WaveInfo
    from runner.record.redecide import RedecideResult


@dataclass(frozen=True)
class ExperimentLine:
    id: int
    wave: int | None
    kind: str
    title: str
    status: str
    reason: str | None
    verdict: str | None
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    winner: bool
    difference: float | None = None
    """The effect as a difference where it was judged on that scale (values of 0 or below)."""


@dataclass(frozen=True)
class ChartPoint:
    experiment_id: int
    status: str
    candidate: float | None
    """Median of the primary metric on the candidate side."""
    baseline: float | None


@dataclass(frozen=True)
class MetricSeries:
    metric: str
    direction: str
    points: list[ChartPoint]


def runs(db: sqlite_utils.Database) -> list[RunInfo]:
    from runner.record import history

    return list(reversed(history.runs(db)))


def waves(db: sqlite_utils.Database, run_id: int) -> list[WaveInfo]:
    from runner.record import history

    return history.waves(db, run_id)


def run_experiments(
    db: sqlite_utils.Database, run_id: int, offset: int = 0, limit: int = PAGE_SIZE
) -> Page[ExperimentLine]:
    """A page of a run's experiments with the runner's decision (runner.record.history, paged)."""
    from runner.record import history

    total = history.experiment_count(db, run_id)
    offset = clamp_offset(offset, total, limit)
    return Page(
        [
            ExperimentLine(
                id=e.id,
                wave=e.wave,
                kind=e.kind,
                title=e.title,
                status=e.status,
                reason=e.reason,
                verdict=e.decision.verdict if e.decision else None,
                effect=e.effect,
                ci_low=e.ci[0],
                ci_high=e.ci[1],
                pairs=e.pairs,
                winner=e.winner_commit is not None,
                difference=e.difference,
            )
            for e in history.experiments_page(db, run_id, offset, limit)
        ],
        offset,
        limit,
        total,
    )


def metric_series(db: sqlite_utils.Database, run_id: int, *, last: int = 400) -> MetricSeries:
    """The primary metric's candidate and baseline medians for the run's latest candidate
    experiments, oldest first (the history chart)."""
    from runner.stats import side_value

    found = candidate_samples(db, run_id, last=last)
    points = []
    for exp_id, status in found.experiments:
        a = found.values.get((exp_id, "A"))
        b = found.values.get((exp_id, "B"))
        points.append(ChartPoint(exp_id, status, side_value(b) if b else None, side_value(a) if a else None))
    return MetricSeries(found.metric, found.direction, points)


@dataclass(frozen=True)
class ExperimentDetail:
    info: ExperimentInfo
    decisions: list[DecisionInfo]
    samples: list[Sample]
    metrics: list[str]
    patch: PatchInfo | None

    def paired(self, metric: str) -> tuple[list[float], list[float]]:
        from runner.record.history import paired_values

        return paired_values(self.samples, metric)


def experiment_detail(db: sqlite_utils.Database, experiment_id: int) -> ExperimentDetail:
    from runner.record import history

    info = history.experiment(db, experiment_id)
    patch = None
    if info.patch_id is not None:
        patch = _hyp_store.patch(db, info.patch_id)
    return ExperimentDetail(
        info=info,
        decisions=history.decisions(db, experiment_id, include_redecide=False),
        samples=history.samples(db, experiment_id),
        metrics=history.metrics(db, experiment_id),
        patch=patch,
    )


def redecide(
    db: sqlite_utils.Database,
    run_id: int,
    *,
    min_effect: float | None = None,
    alpha: float | None = None,
    max_pairs: int | None = None,
    save: bool = False,
    fallback_policy: dict[str, Any] | None = None,
) -> RedecideResult:
    """Re-judge a run's decided experiments under another policy (runner.record.redecide)."""
    from runner.record.redecide import redecide as run_redecide

    if min_effect is not None and not 0 <= min_effect < 1:
        raise UserError(f"min effect {min_effect}: must be a fraction in [0, 1), e.g. 0.01 for 1%")
    if alpha is not None and not 0 < alpha < 1:
        raise UserError(f"alpha {alpha}: must be between 0 and 1")
    if max_pairs is not None and max_pairs < 2:
        raise UserError(f"max pairs {max_pairs}: must be at least 2")
    return run_redecide(
        db,
        run_id,
        min_effect=min_effect,
        alpha=alpha,
        max_pairs=max_pairs,
        save=save,
        fallback_policy=fallback_policy,
    )
