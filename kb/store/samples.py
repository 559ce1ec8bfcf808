"""Samples: one metric value of one side of one pair, as the loop parses them from a job's log and
the importer reads them from another loop's record. The history chart's read is
kb.store.experiments.candidate_samples."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from kb.store.paging import one, rows

if TYPE_CHECKING:
    import sqlite_utils


class RawSample(TypedDict):
    """One sample as measured: its pair, side, metric, place in the invocation and value."""

    pair: int
    side: str
    """A (baseline) or B (candidate)."""
    metric: str
    seq: int
    """The sample's order within one invocation."""
    value: float
    created_at: float


class NewSample(RawSample):
    """A sample to store: a raw sample of one experiment."""

    experiment_id: int


def insert(db: sqlite_utils.Database, sample: NewSample) -> int:
    """Insert a sample that must be new (a second one at the same place is an IntegrityError)."""
    from kb.db import insert as insert_row

    return insert_row(db, "samples", sample)


def insert_new(db: sqlite_utils.Database, sample: NewSample) -> bool:
    """Insert a sample unless one is stored at its place (experiment, pair, side, metric, seq):
    a log parsed again after a restart adds nothing twice. True when it was added."""
    added: int = db.execute(
        "INSERT OR IGNORE INTO samples (experiment_id, pair, side, metric, seq, value, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            sample["experiment_id"],
            sample["pair"],
            sample["side"],
            sample["metric"],
            sample["seq"],
            sample["value"],
            sample["created_at"],
        ],
    ).rowcount
    return bool(added)


def stored_value(
    db: sqlite_utils.Database, experiment_id: int, pair: int, side: str, metric: str, seq: int
) -> float | None:
    """The value stored at this place, if any."""
    found = one(
        db,
        "SELECT value FROM samples WHERE experiment_id = ? AND pair = ? AND side = ? "
        "AND metric = ? AND seq = ?",
        [experiment_id, pair, side, metric, seq],
    )
    return None if found is None else float(found["value"])


def by_pair(db: sqlite_utils.Database, experiment_id: int, metric: str) -> dict[int, dict[str, list[float]]]:
    """{pair: {side: values in seq order}} of one metric."""
    values: dict[int, dict[str, list[float]]] = {}
    for r in rows(
        db,
        "SELECT pair, side, value FROM samples WHERE experiment_id = ? AND metric = ? ORDER BY pair, seq",
        [experiment_id, metric],
    ):
        values.setdefault(r["pair"], {}).setdefault(r["side"], []).append(r["value"])
    return values


def metrics(db: sqlite_utils.Database, experiment_id: int) -> list[str]:
    """The metrics the experiment has samples of, by name."""
    found = rows(
        db, "SELECT DISTINCT metric FROM samples WHERE experiment_id = ? ORDER BY metric", [experiment_id]
    )
    return [r["metric"] for r in found]


def delete_of_experiment(db: sqlite_utils.Database, experiment_id: int) -> None:
    """Drop every sample of the experiment (forged markers: none of them can be trusted)."""
    db.execute("DELETE FROM samples WHERE experiment_id = ?", [experiment_id])
