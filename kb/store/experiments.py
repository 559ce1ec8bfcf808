"""Experiments: the rows the measuring loop, the importer and the test fixtures write, and their
samples as the history chart reads them. The history's view of an experiment (with its decision,
hypothesis and winner) is runner.record.history's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Required, TypedDict

from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.tables import ExperimentRow

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class CandidateSamples:
    """A run's latest candidate experiments (oldest first) with the primary metric's samples."""

    metric: str
    direction: str
    experiments: list[tuple[int, str]]
    """(experiment id, status)."""
    values: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    """(experiment id, side A/B) -> the metric's values."""


def candidate_samples(db: sqlite_utils.Database, run_id: int, *, last: int = 400) -> CandidateSamples:
    run = one(db, "SELECT policy FROM runs WHERE id = ?", [run_id])
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    policy = decoded_dict(run["policy"])
    metric = str(policy.get("metric") or "")
    direction = str(policy.get("direction") or "higher")
    exps = rows(
        db,
        """SELECT id, status FROM experiments WHERE run_id = ? AND kind = 'candidate'
           ORDER BY id DESC LIMIT ?""",
        [run_id, last],
    )
    exps.reverse()
    if not metric:
        # An old run stored no metric in its policy: its decisions name it.
        found = one(
            db,
            "SELECT metric FROM decisions d JOIN experiments e ON e.id = d.experiment_id "
            "WHERE e.run_id = ? LIMIT 1",
            [run_id],
        )
        metric = found["metric"] if found else ""
    values: dict[tuple[int, str], list[float]] = {}
    ids = [e["id"] for e in exps]
    for start in range(0, len(ids), 500):  # under SQLite's bound-parameter limit
        chunk = ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for r in db.execute(
            f"SELECT experiment_id, side, value FROM samples WHERE metric = ? AND experiment_id IN ({marks})",
            [metric, *chunk],
        ):
            values.setdefault((int(r[0]), str(r[1])), []).append(float(r[2]))
    return CandidateSamples(metric, direction, [(int(e["id"]), str(e["status"])) for e in exps], values)


# --- the rows the loop writes ---------------------------------------------------------------------


class NewExperiment(TypedDict, total=False):
    """An experiment to insert; columns left out take the table's defaults (status `queued`)."""

    run_id: Required[int]
    wave_id: int | None
    patch_id: int | None
    hypothesis_id: int | None
    kind: str
    title: Required[str]
    status: str
    phase: str | None
    reason: str | None
    worker_id: int | None
    baseline_commit: str | None
    candidate_commit: str | None
    retry_of: int | None
    log_dir: str | None
    batches: int
    meta: dict[str, Any]
    created_at: Required[float]
    started_at: float | None
    ended_at: float | None


class ExperimentUpdate(TypedDict, total=False):
    """Columns of an experiment that change after its insert; only those given are written."""

    wave_id: int | None
    status: str
    phase: str | None
    reason: str | None
    worker_id: int | None
    baseline_commit: str | None
    candidate_commit: str | None
    log_dir: str | None
    batches: int
    meta: dict[str, Any]
    started_at: float | None
    ended_at: float | None


def create(db: sqlite_utils.Database, experiment: NewExperiment) -> int:
    """Insert one experiment (within the caller's transaction, if any); its id."""
    from kb.db import insert

    return insert(db, "experiments", experiment)


def update(db: sqlite_utils.Database, experiment_id: int, values: ExperimentUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "experiments", experiment_id, values)


def finish(db: sqlite_utils.Database, experiment_id: int, status: str, reason: str | None, at: float) -> None:
    """A final status: its phase is over."""
    update(db, experiment_id, {"status": status, "reason": reason, "phase": None, "ended_at": at})


def set_phase(db: sqlite_utils.Database, experiment_id: int, phase: str | None) -> None:
    update(db, experiment_id, {"phase": phase})


def merge_meta(db: sqlite_utils.Database, experiment_id: int, values: dict[str, Any]) -> None:
    """Merge `values` into the experiment's meta: a mapping merges into the mapping stored under
    its key (one key at a time, so batches add to what earlier ones wrote); anything else replaces."""
    found = one(db, "SELECT meta FROM experiments WHERE id = ?", [experiment_id])
    if found is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    meta = decoded_dict(found["meta"])
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(meta.get(key), dict):
            meta[key] = {**meta[key], **value}
        else:
            meta[key] = value
    update(db, experiment_id, {"meta": meta})


def row(db: sqlite_utils.Database, experiment_id: int) -> ExperimentRow | None:
    """Every column of an experiment as stored: the loop's stages pass this row from step to step."""
    return shaped_one(db, ExperimentRow, "SELECT * FROM experiments WHERE id = ?", [experiment_id])


def of_run(db: sqlite_utils.Database, run_id: int) -> list[ExperimentRow]:
    """The run's experiments in id order."""
    return shaped(db, ExperimentRow, "SELECT * FROM experiments WHERE run_id = ? ORDER BY id", [run_id])


def ids_of_run(db: sqlite_utils.Database, run_id: int, statuses: Sequence[str]) -> list[int]:
    """Ids of the run's experiments in one of these statuses, in id order."""
    marks = ", ".join("?" for _ in statuses)
    found = rows(
        db,
        f"SELECT id FROM experiments WHERE run_id = ? AND status IN ({marks}) ORDER BY id",
        [run_id, *statuses],
    )
    return [int(r["id"]) for r in found]


def ids_of_wave(db: sqlite_utils.Database, wave_id: int, kind: str, statuses: Sequence[str]) -> list[int]:
    """Ids of the wave's experiments of this kind in one of these statuses, in id order."""
    marks = ", ".join("?" for _ in statuses)
    found = rows(
        db,
        f"SELECT id FROM experiments WHERE wave_id = ? AND kind = ? AND status IN ({marks}) ORDER BY id",
        [wave_id, kind, *statuses],
    )
    return [int(r["id"]) for r in found]


def of_run_kinds(db: sqlite_utils.Database, run_id: int, kinds: Sequence[str]) -> list[ExperimentRow]:
    """Every column of the run's experiments of these kinds, in id order."""
    marks = ", ".join("?" for _ in kinds)
    return shaped(
        db,
        ExperimentRow,
        f"SELECT * FROM experiments WHERE run_id = ? AND kind IN ({marks}) ORDER BY id",
        [run_id, *kinds],
    )


def carried(db: sqlite_utils.Database, run_id: int) -> list[ExperimentRow]:
    """Candidates queued again outside any wave (a winner of the same wave took their lines): the
    next wave takes them first."""
    return shaped(
        db,
        ExperimentRow,
        "SELECT * FROM experiments WHERE run_id = ? AND wave_id IS NULL AND status = 'queued' "
        "AND kind = 'candidate' ORDER BY id",
        [run_id],
    )


def measured_count(db: sqlite_utils.Database, run_id: int) -> int:
    """Candidates measured, as `max_experiments` counts them: a retry is the same experiment again,
    and a repair attempt that never reached a benchmark (no sample, over) was not measured."""
    found = one(
        db,
        "SELECT count(*) AS n FROM experiments e LEFT JOIN patches p ON p.id = e.patch_id "
        "WHERE e.run_id = ? AND e.kind = 'candidate' AND e.retry_of IS NULL "
        "AND NOT (p.repair_of IS NOT NULL AND e.status NOT IN ('queued', 'running') "
        "AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.experiment_id = e.id))",
        [run_id],
    )
    return int(found["n"]) if found else 0


class KeptExperiment(ExperimentRow):
    """A kept candidate with its final decision's effect."""

    effect: float | None


def kept_not_committed(db: sqlite_utils.Database, wave_id: int) -> list[KeptExperiment]:
    """The wave's kept candidates without a winner row yet, largest effect first (commit order)."""
    return shaped(
        db,
        KeptExperiment,
        "SELECT e.*, d.effect FROM experiments e JOIN decisions d ON d.experiment_id = e.id "
        "AND d.is_final = 1 AND d.origin = 'runner' "
        "WHERE e.wave_id = ? AND e.status = 'kept' AND e.kind = 'candidate' "
        "AND NOT EXISTS (SELECT 1 FROM winners w WHERE w.experiment_id = e.id) "
        "ORDER BY d.effect DESC, e.id",
        [wave_id],
    )


def ids_in_wave(db: sqlite_utils.Database, wave_id: int) -> list[int]:
    return [
        int(r["id"]) for r in rows(db, "SELECT id FROM experiments WHERE wave_id = ? ORDER BY id", [wave_id])
    ]


def live_among(db: sqlite_utils.Database, ids: Sequence[int]) -> list[ExperimentRow]:
    """Those of these experiments still queued or running, in id order."""
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    return shaped(
        db,
        ExperimentRow,
        f"SELECT * FROM experiments WHERE id IN ({marks}) AND status IN ('queued', 'running') ORDER BY id",
        list(ids),
    )


def busy_workers(db: sqlite_utils.Database, run_id: int) -> set[int]:
    found = rows(
        db,
        "SELECT worker_id FROM experiments WHERE run_id = ? AND status = 'running' AND worker_id IS NOT NULL",
        [run_id],
    )
    return {int(r["worker_id"]) for r in found}


def count_in(db: sqlite_utils.Database, run_id: int, statuses: Sequence[str]) -> int:
    """How many of the run's experiments are in one of `statuses`."""
    marks = ", ".join("?" for _ in statuses)
    found = one(
        db,
        f"SELECT count(*) AS n FROM experiments WHERE run_id = ? AND status IN ({marks})",
        [run_id, *statuses],
    )
    return int(found["n"]) if found else 0


def add_cost(db: sqlite_utils.Database, experiment_id: int, usd: float) -> None:
    """Charge the experiment for worker time its job held."""
    db.execute("UPDATE experiments SET cost_usd = cost_usd + ? WHERE id = ?", [usd, experiment_id])
