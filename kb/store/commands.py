"""The commands table from the runner's side: the steering commands waiting for it, claimed one at a
time (two runners never both act on one), and their results; and the commands runner/commands.py
queues."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.paging import one, shaped
from kb.store.tables import CommandRow

if TYPE_CHECKING:
    import sqlite_utils


def pending(db: sqlite_utils.Database) -> list[CommandRow]:
    return shaped(db, CommandRow, "SELECT * FROM commands WHERE status = 'pending' ORDER BY id")


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


class NewCommand(TypedDict):
    kind: str
    target_kind: str
    target_id: int | None
    args: dict[str, Any] | None
    status: str
    created_at: float


# The table each kind of command target lives in.
_TARGET_TABLES = {"hypothesis": "hypotheses", "run": "runs", "experiment": "experiments"}


def target_exists(db: sqlite_utils.Database, target_kind: str, target_id: int) -> bool:
    """A hypothesis, run or experiment of this id exists."""
    table = _TARGET_TABLES[target_kind]
    return one(db, f"SELECT id FROM {table} WHERE id = ?", [target_id]) is not None


def create(db: sqlite_utils.Database, command: NewCommand) -> int:
    from kb.db import insert

    return insert(db, "commands", command)
