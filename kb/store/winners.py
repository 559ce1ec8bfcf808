"""The winners table as runner.record.winners writes it: one row per kept experiment committed on
its run's branch (commit, patch file, position on the branch). A run's winners as its summary and
final stage read them are kb.store.run_records'."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from kb.store.paging import shaped_one
from kb.store.tables import WinnerRow

if TYPE_CHECKING:
    import sqlite_utils


class NewWinner(TypedDict):
    run_id: int
    experiment_id: int
    commit_sha: str
    patch_file: str
    position: int
    created_at: float


def of_experiment(db: sqlite_utils.Database, experiment_id: int) -> WinnerRow | None:
    """Every column of the experiment's winner row, if it was committed (a winner record is built
    from the whole row)."""
    return shaped_one(db, WinnerRow, "SELECT * FROM winners WHERE experiment_id = ?", [experiment_id])


def create(db: sqlite_utils.Database, winner: NewWinner) -> int:
    from kb.db import insert

    return insert(db, "winners", winner)


def set_patch_file(db: sqlite_utils.Database, winner_id: int, patch_file: str) -> None:
    from kb.db import update

    update(db, "winners", winner_id, {"patch_file": patch_file})
