"""The history's read model: runs with their counts, waves, experiments joined to their wave,
worker, hypothesis and winner, decisions, samples and events, as runner.record.history reads them.

Rows come back as stored, typed (a table's row from kb.store.tables, extended with the columns a
read joins or counts): runner.record.history turns each into its record (RunInfo, ExperimentInfo,
...), which carry the runner's vocabulary kb does not import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.decisions import latest_decision_id
from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.samples import RawSample
from kb.store.tables import DecisionRow, EventRow, ExperimentRow, RunRow, WaveRow

if TYPE_CHECKING:
    import sqlite_utils

# --- runs and waves ----------------------------------------------------------------------------


class RunWithCounts(RunRow):
    """A run with how many waves, experiments, kept experiments and winners it has."""

    n_waves: int
    n_experiments: int
    n_kept: int
    n_winners: int


_RUN_SQL = """
SELECT r.*,
    (SELECT count(*) FROM waves w WHERE w.run_id = r.id) AS n_waves,
    (SELECT count(*) FROM experiments e WHERE e.run_id = r.id) AS n_experiments,
    (SELECT count(*) FROM experiments e WHERE e.run_id = r.id AND e.status = 'kept') AS n_kept,
    (SELECT count(*) FROM winners x WHERE x.run_id = r.id) AS n_winners
FROM runs r
"""


def run_rows(db: sqlite_utils.Database) -> list[RunWithCounts]:
    """Every run with its counts (n_waves, n_experiments, n_kept, n_winners), oldest first."""
    return shaped(db, RunWithCounts, _RUN_SQL + " ORDER BY r.id")


def run_by_id(db: sqlite_utils.Database, run_id: int) -> RunWithCounts | None:
    return shaped_one(db, RunWithCounts, _RUN_SQL + " WHERE r.id = ?", [run_id])


def run_by_name(db: sqlite_utils.Database, name: str) -> RunWithCounts | None:
    return shaped_one(db, RunWithCounts, _RUN_SQL + " WHERE r.name = ?", [name])


def recent_run_names(db: sqlite_utils.Database, limit: int) -> list[str]:
    """The names of the newest runs, newest first (a hint when a run is not found)."""
    return [r["name"] for r in rows(db, "SELECT name FROM runs ORDER BY id DESC LIMIT ?", [limit])]


class WaveWithCounts(WaveRow):
    """A wave with its experiment count (n) and kept count (k)."""

    n: int
    k: int


def wave_rows(db: sqlite_utils.Database, run_id: int) -> list[WaveWithCounts]:
    """A run's waves in order, each with its experiment count (n) and kept count (k)."""
    return shaped(
        db,
        WaveWithCounts,
        """SELECT w.*, (SELECT count(*) FROM experiments e WHERE e.wave_id = w.id) AS n,
                  (SELECT count(*) FROM experiments e WHERE e.wave_id = w.id AND e.status = 'kept') AS k
           FROM waves w WHERE w.run_id = ? ORDER BY w.number""",
        [run_id],
    )


# --- experiments and decisions -----------------------------------------------------------------


class LinkedExperiment(ExperimentRow):
    """An experiment with its wave's number, worker's name, hypothesis (its own or its patch's) and
    winner commit; each NULL where it has none."""

    wave_number: int | None
    worker_name: str | None
    hyp_id: int | None
    hyp_title: str | None
    winner_commit: str | None
    winner_patch_file: str | None


_EXPERIMENT_SQL = """
SELECT e.*, w.number AS wave_number, k.name AS worker_name,
       COALESCE(e.hypothesis_id, p.hypothesis_id) AS hyp_id, h.title AS hyp_title,
       x.commit_sha AS winner_commit, x.patch_file AS winner_patch_file
FROM experiments e
LEFT JOIN waves w ON w.id = e.wave_id
LEFT JOIN workers k ON k.id = e.worker_id
LEFT JOIN patches p ON p.id = e.patch_id
LEFT JOIN hypotheses h ON h.id = COALESCE(e.hypothesis_id, p.hypothesis_id)
LEFT JOIN winners x ON x.experiment_id = e.id
"""


def _experiment_rows(db: sqlite_utils.Database, where: str, params: Sequence[Any]) -> list[LinkedExperiment]:
    return shaped(db, LinkedExperiment, _EXPERIMENT_SQL + f" WHERE {where} ORDER BY e.id", list(params))


def experiment_rows(
    db: sqlite_utils.Database,
    *,
    run_id: int | None = None,
    wave_id: int | None = None,
    experiment_id: int | None = None,
    kinds: Sequence[str] | None = None,
    statuses: Sequence[str] | None = None,
) -> list[LinkedExperiment]:
    """Experiments in id order (all, or those matching every filter given), each with wave_number,
    worker_name, hyp_id and hyp_title (its own hypothesis or its patch's), winner_commit and
    winner_patch_file."""
    clauses: list[str] = ["1"]
    params: list[Any] = []
    for column, value in (("e.run_id", run_id), ("e.wave_id", wave_id), ("e.id", experiment_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    for column, values in (("e.kind", kinds), ("e.status", statuses)):
        if values:
            clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
    return _experiment_rows(db, " AND ".join(clauses), params)


def experiment_page_rows(
    db: sqlite_utils.Database, run_id: int, offset: int, limit: int
) -> list[LinkedExperiment]:
    """A run's experiments `offset` to `offset + limit` in id order, as `experiment_rows` gives them."""
    return _experiment_rows(
        db,
        "e.id IN (SELECT id FROM experiments WHERE run_id = ? ORDER BY id LIMIT ? OFFSET ?)",
        [run_id, limit, offset],
    )


def experiment_count(db: sqlite_utils.Database, run_id: int) -> int:
    found = one(db, "SELECT count(*) AS n FROM experiments WHERE run_id = ?", [run_id])
    return int(found["n"]) if found else 0


# The runner's last word: final first, then the newest; re-analyses never count.
# The one rule for an experiment's decision (kb/store/decisions.py), embedded.
_LATEST_DECISIONS_SQL = "SELECT d.* FROM decisions d WHERE d.id = " + latest_decision_id("d.experiment_id")


def latest_decision_rows(db: sqlite_utils.Database, experiment_ids: Sequence[int]) -> dict[int, DecisionRow]:
    """The runner's last word on each experiment (its final decision, else its newest; re-analyses
    never count), as whole `decisions` rows keyed by experiment id; experiments without one are
    left out."""
    out: dict[int, DecisionRow] = {}
    for start in range(0, len(experiment_ids), 500):  # SQLite caps bound parameters
        chunk = list(experiment_ids[start : start + 500])
        marks = ", ".join("?" for _ in chunk)
        for row in shaped(
            db, DecisionRow, _LATEST_DECISIONS_SQL + f" AND d.experiment_id IN ({marks})", chunk
        ):
            out[row["experiment_id"]] = row
    return out


def decision_rows(
    db: sqlite_utils.Database, experiment_id: int, *, include_redecide: bool = True
) -> list[DecisionRow]:
    """Every decision recorded for an experiment, oldest first."""
    sql = "SELECT * FROM decisions WHERE experiment_id = ?"
    if not include_redecide:
        sql += " AND origin != 'redecide'"
    return shaped(db, DecisionRow, sql + " ORDER BY id", [experiment_id])


# --- samples and events ------------------------------------------------------------------------


def sample_rows(db: sqlite_utils.Database, experiment_id: int, metric: str | None = None) -> list[RawSample]:
    """Raw samples (pair, side, metric, seq, value, created_at) in measurement order."""
    sql = "SELECT pair, side, metric, seq, value, created_at FROM samples WHERE experiment_id = ?"
    params: list[Any] = [experiment_id]
    if metric is not None:
        sql += " AND metric = ?"
        params.append(metric)
    return shaped(db, RawSample, sql + " ORDER BY pair, side, metric, seq", params)


def event_rows(
    db: sqlite_utils.Database,
    *,
    run_id: int | None = None,
    experiment_id: int | None = None,
    after_id: int = 0,
    limit: int = 500,
) -> list[EventRow]:
    """Events after `after_id` in order, of a run or an experiment if given."""
    sql = "SELECT * FROM events WHERE id > ?"
    params: list[Any] = [after_id]
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    if experiment_id is not None:
        sql += " AND experiment_id = ?"
        params.append(experiment_id)
    return shaped(db, EventRow, sql + " ORDER BY id LIMIT ?", [*params, limit])


class TitledWinner(TypedDict):
    """A winner (its row but the run) with its experiment's title, as history --json prints it."""

    id: int
    experiment_id: int
    commit_sha: str
    patch_file: str | None
    position: int
    created_at: float
    title: str


def winner_rows(db: sqlite_utils.Database, run_id: int) -> list[TitledWinner]:
    """A run's winners in stacking order with their experiment's title, as history --json prints them."""
    return shaped(
        db,
        TitledWinner,
        """SELECT x.id, x.experiment_id, x.commit_sha, x.patch_file, x.position, x.created_at,
                  e.title
           FROM winners x JOIN experiments e ON e.id = x.experiment_id
           WHERE x.run_id = ? ORDER BY x.position, x.id""",
        [run_id],
    )
