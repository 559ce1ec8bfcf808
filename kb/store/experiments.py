"""Experiments and their samples, as the history chart reads them. Decisions and the runner's view
of an experiment are runner.record.history's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kb.errors import UserError
from kb.store.paging import loads, one, rows

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
    policy = loads(run["policy"]) or {}
    policy = policy if isinstance(policy, dict) else {}
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
