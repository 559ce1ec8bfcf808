"""Batch jobs: one row per job a fleet runs for an experiment (a batch of A/B pairs), as the
measuring loop writes and reattaches them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Required, TypedDict

from kb.store.paging import one, rows

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class Job:
    """One row of jobs."""

    id: int
    run_id: int
    experiment_id: int
    worker_id: int | None
    batch: int
    pair_start: int
    pairs: int
    run_checks: int
    nonce: str
    backend: str
    backend_job_id: str | None
    status: str
    exit_code: int | None
    detail: str | None
    log_path: str
    job_dir: str
    parsed_lines: int
    deadline: float | None
    submitted_at: float
    ended_at: float | None


_COLUMNS = ", ".join(Job.__dataclass_fields__)


class NewJob(TypedDict, total=False):
    """A job to insert; columns left out take the table's defaults."""

    run_id: Required[int]
    experiment_id: Required[int]
    worker_id: int | None
    batch: Required[int]
    pair_start: Required[int]
    pairs: Required[int]
    run_checks: int
    nonce: Required[str]
    backend: Required[str]
    status: str
    log_path: Required[str]
    job_dir: Required[str]
    deadline: float | None
    submitted_at: Required[float]


class JobUpdate(TypedDict, total=False):
    """Columns of a job that change after its insert; only those given are written."""

    backend_job_id: str | None
    status: str
    exit_code: int | None
    detail: str | None
    parsed_lines: int
    ended_at: float | None


def create(db: sqlite_utils.Database, job: NewJob) -> int:
    from kb.db import insert

    return insert(db, "jobs", job)


def update(db: sqlite_utils.Database, job_id: int, values: JobUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "jobs", job_id, values)


def forget(db: sqlite_utils.Database, job_id: int) -> None:
    """Delete a job row (one written for a job that never started)."""
    db.execute("DELETE FROM jobs WHERE id = ?", [job_id])


def of_experiment(db: sqlite_utils.Database, experiment_id: int) -> list[Job]:
    """The experiment's jobs in batch order."""
    found = rows(db, f"SELECT {_COLUMNS} FROM jobs WHERE experiment_id = ? ORDER BY batch", [experiment_id])
    return [Job(**r) for r in found]


def of_run(db: sqlite_utils.Database, run_id: int, statuses: Sequence[str]) -> list[Job]:
    """The run's jobs in one of these statuses, in id order."""
    marks = ", ".join("?" for _ in statuses)
    found = rows(
        db,
        f"SELECT {_COLUMNS} FROM jobs WHERE run_id = ? AND status IN ({marks}) ORDER BY id",
        [run_id, *statuses],
    )
    return [Job(**r) for r in found]


def count(db: sqlite_utils.Database, experiment_id: int, status: str) -> int:
    """How many of the experiment's jobs are in this status."""
    found = one(
        db, "SELECT count(*) AS n FROM jobs WHERE experiment_id = ? AND status = ?", [experiment_id, status]
    )
    return int(found["n"]) if found else 0
