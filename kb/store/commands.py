"""The commands table from the runner's side: the steering commands waiting for it, claimed one at a
time (two runners never both act on one), and their results. runner/commands.py writes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kb.store.paging import rows

if TYPE_CHECKING:
    import sqlite_utils


def pending(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM commands WHERE status = 'pending' ORDER BY id")


def claim(db: sqlite_utils.Database, command_id: int, at: float) -> bool:
    """Mark it handled; False when another runner got there first."""
    changed = db.execute(
        "UPDATE commands SET status = 'done', handled_at = ? WHERE id = ? AND status = 'pending'",
        [at, command_id],
    ).rowcount
    return bool(changed)


def finish(db: sqlite_utils.Database, command_id: int, status: str, result: str) -> None:
    from kb.db import update

    update(db, "commands", command_id, {"status": status, "result": result})
