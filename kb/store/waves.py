"""Waves: a run's batches of experiments measured against one baseline, as the loop and the
importer write them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Required, TypedDict

from kb.store.paging import one, rows, shaped_one
from kb.store.tables import WaveRow

if TYPE_CHECKING:
    import sqlite_utils


class NewWave(TypedDict, total=False):
    """A wave to insert; columns left out take the table's defaults (status `running`)."""

    run_id: Required[int]
    number: Required[int]
    baseline_commit: Required[str]
    status: str
    started_at: Required[float]
    ended_at: float | None


class WaveUpdate(TypedDict, total=False):
    """Columns of a wave that change after its insert; only those given are written."""

    status: str
    reflection_evidence_id: int | None
    ended_at: float | None


def create(db: sqlite_utils.Database, wave: NewWave) -> int:
    from kb.db import insert

    return insert(db, "waves", wave)


def update(db: sqlite_utils.Database, wave_id: int, values: WaveUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "waves", wave_id, values)


def get(db: sqlite_utils.Database, wave_id: int) -> WaveRow | None:
    """Every column of a wave (the loop's stages pass the row on)."""
    return shaped_one(db, WaveRow, "SELECT * FROM waves WHERE id = ?", [wave_id])


def running(db: sqlite_utils.Database, run_id: int) -> WaveRow | None:
    """The run's wave being measured, if any (a resumed run carries on with it)."""
    return shaped_one(db, WaveRow, "SELECT * FROM waves WHERE run_id = ? AND status = 'running'", [run_id])


def any_of(db: sqlite_utils.Database, run_id: int) -> bool:
    return one(db, "SELECT id FROM waves WHERE run_id = ? LIMIT 1", [run_id]) is not None


def count(db: sqlite_utils.Database, run_id: int, *, finished_only: bool = False) -> int:
    """Waves of the run that are over (finished or cancelled), or only the finished ones."""
    where = "status = 'finished'" if finished_only else "status != 'running'"
    found = one(db, f"SELECT count(*) AS n FROM waves WHERE run_id = ? AND {where}", [run_id])
    return int(found["n"]) if found else 0


def next_number(db: sqlite_utils.Database, run_id: int) -> int:
    found = one(db, "SELECT coalesce(max(number), 0) + 1 AS n FROM waves WHERE run_id = ?", [run_id])
    return int(found["n"]) if found else 1


def cancel_running(db: sqlite_utils.Database, run_id: int, at: float) -> None:
    db.execute(
        "UPDATE waves SET status = 'cancelled', ended_at = ? WHERE run_id = ? AND status = 'running'",
        [at, run_id],
    )


def last_finished_id(db: sqlite_utils.Database, run_id: int) -> int | None:
    found = one(
        db,
        "SELECT id FROM waves WHERE run_id = ? AND status = 'finished' ORDER BY number DESC LIMIT 1",
        [run_id],
    )
    return int(found["id"]) if found else None


def recent_keeps(db: sqlite_utils.Database, run_id: int, last: int) -> list[int]:
    """Kept candidates of each of the run's last `last` finished waves, newest first (the plateau)."""
    found = rows(
        db,
        "SELECT (SELECT count(*) FROM experiments e WHERE e.wave_id = w.id AND e.status = 'kept' "
        "AND e.kind = 'candidate') AS kept FROM waves w WHERE w.run_id = ? AND w.status = 'finished' "
        "ORDER BY w.number DESC LIMIT ?",
        [run_id, last],
    )
    return [int(r["kept"]) for r in found]
