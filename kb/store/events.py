"""The events table beyond appending to it (kb.db.log_event): what the loop asks of its own trail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kb.store.paging import one

if TYPE_CHECKING:
    import sqlite_utils


def job_line_logged(db: sqlite_utils.Database, kind: str, experiment_id: int, job_id: int, line: int) -> bool:
    """An event of this kind was logged for this job's log line (its data's `job` and `line`): a
    log parsed again after a restart warns once per line."""
    found = one(
        db,
        "SELECT id FROM events WHERE kind = ? AND experiment_id = ? "
        "AND json_extract(data, '$.job') = ? AND json_extract(data, '$.line') = ?",
        [kind, experiment_id, job_id, line],
    )
    return found is not None


def count(db: sqlite_utils.Database, run_id: int, kind: str) -> int:
    found = one(db, "SELECT count(*) AS n FROM events WHERE run_id = ? AND kind = ?", [run_id, kind])
    return int(found["n"]) if found else 0
