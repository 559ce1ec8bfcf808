"""The workspace database: one SQLite file (WAL), shared by the CLI, the runner and the TUI processes.

Rules every caller follows:
- one connection per thread (`connect()` again inside a worker thread; never share one);
- the connection is in autocommit mode; writes that belong together go inside `transaction(db)`,
  which takes the write lock up front (BEGIN IMMEDIATE) so two processes never deadlock upgrading;
- inside a transaction use `db.execute` or the helpers below, not sqlite-utils' table.insert(),
  which commits on its own and would end the transaction early.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlite_utils

# The bottom layer, which kb.migrations builds on too; re-exported because every caller knows them from here.
from kb.dbtx import now as now
from kb.dbtx import transaction as transaction
from kb.errors import UserError
from kb.migrations import migrate

BUSY_TIMEOUT_MS = 30_000
DB_NAME = "autoresearch.db"


def connect(
    path: Path, *, migrate_schema: bool = True, readonly: bool = False, create: bool = True
) -> sqlite_utils.Database:
    """Open the database for this thread, check it is SQLite, and bring its schema up to date.

    `create=False` is for a workspace's database, which `autoresearch init` made: a missing,
    emptied or replaced file is then an error, never a new empty database (which would silently
    orphan the workspace's mirror, logs and run branches)."""
    if readonly or not create:
        require_database(path)
    try:
        if readonly:
            conn = sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
            )
        else:
            conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as exc:
        raise UserError(explain_error(exc, path)) from None
    conn.row_factory = sqlite3.Row
    db = sqlite_utils.Database(conn)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if (
            not create
            and not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
            ).fetchone()
        ):
            raise UserError(f"{path}: not a workspace database (no autoresearch schema in it){_RESTORE}")
        if not readonly:
            # WAL lets the TUI read while the runner writes; set once, persists in the file.
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = wal")
            conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.OperationalError as exc:
        conn.close()
        raise UserError(explain_error(exc, path)) from None
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise UserError(f"{path}: not a usable SQLite database ({exc})") from None
    except UserError:
        conn.close()
        raise
    if migrate_schema and not readonly:
        migrate(db)
    return db


_RESTORE = (
    ": restore it from a backup, or start a new workspace with `autoresearch init` (nothing was created)"
)


def require_database(path: Path) -> None:
    """Raise unless `path` is a non-empty regular file (what `autoresearch init` left there)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        beside = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else []
        there = f" but its folder still holds {', '.join(beside[:5])}" if beside else ""
        raise UserError(f"{path}: the database is missing{there}{_RESTORE}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the database ({exc.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path}: a directory, not a database file{_RESTORE}")
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{path}: not a regular file, so not a database{_RESTORE}")
    if info.st_size == 0:
        raise UserError(f"{path}: the database is empty (0 bytes){_RESTORE}")


def explain_error(exc: sqlite3.Error, path: Path) -> str:
    """One line for an SQLite failure that is the environment's doing, not a bug: naming the file,
    why, and what to do."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return (
            f"{path}: locked by another process for more than {BUSY_TIMEOUT_MS / 1000:g} s "
            "(the busy timeout); try again when it has finished"
        )
    folder = path.parent
    if "readonly" in text or "read-only" in text or not os.access(folder, os.W_OK):
        return (
            f"{path}: cannot write it ({text}): the workspace folder {folder} or the file is read-only, "
            "and SQLite needs to write both (the database, its -wal and -shm files)"
        )
    if "disk is full" in text or "disk I/O" in text:
        return f"{path}: {text} (check the disk holding the workspace)"
    return f"{path}: {text}"


def _encode(value: Any) -> Any:
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, Path):
        return str(value)
    return value


def insert(db: sqlite_utils.Database, table: str, row: Mapping[str, Any]) -> int:
    """Insert one row (dicts and lists stored as JSON text) and return its rowid."""
    columns = list(row)
    sql = (
        f"INSERT INTO [{table}] ({', '.join(f'[{c}]' for c in columns)}) "
        f"VALUES ({', '.join('?' for _ in columns)})"
    )
    cursor = db.execute(sql, [_encode(row[c]) for c in columns])
    rowid: int | None = cursor.lastrowid
    assert rowid is not None
    return rowid


def update(db: sqlite_utils.Database, table: str, row_id: int, values: Mapping[str, Any]) -> None:
    """Update columns of one row by id."""
    if not values:
        return
    assignments = ", ".join(f"[{c}] = ?" for c in values)
    db.execute(
        f"UPDATE [{table}] SET {assignments} WHERE id = ?",
        [*(_encode(v) for v in values.values()), row_id],
    )


def rows(db: sqlite_utils.Database, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    """Run a query and return plain dicts."""
    cursor = db.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def one(db: sqlite_utils.Database, sql: str, params: Any = ()) -> dict[str, Any] | None:
    found = rows(db, sql, params)
    return found[0] if found else None


def is_cited(db: sqlite_utils.Database, evidence_id: int) -> bool:
    """A hypothesis or a wave's reflection cites this evidence: it must stay (marked stale, not deleted)."""
    if one(db, "SELECT 1 AS x FROM hypothesis_evidence WHERE evidence_id = ? LIMIT 1", [evidence_id]):
        return True
    wave = one(db, "SELECT 1 AS x FROM waves WHERE reflection_evidence_id = ? LIMIT 1", [evidence_id])
    return wave is not None


def data_version(db: sqlite_utils.Database) -> int:
    """Changes when another connection commits: the TUI polls this to refresh cheaply."""
    return int(db.execute("PRAGMA data_version").fetchone()[0])


def log_event(
    db: sqlite_utils.Database,
    kind: str,
    message: str,
    *,
    level: str = "info",
    run_id: int | None = None,
    experiment_id: int | None = None,
    data: Mapping[str, Any] | None = None,
    ts: float | None = None,
) -> int:
    """Append to the events table (the audit trail the CLI, TUI and report read). `ts`: a fixed
    time instead of now (an importer's or a fixture's record of the past)."""
    return insert(
        db,
        "events",
        {
            "ts": now() if ts is None else ts,
            "level": level,
            "kind": kind,
            "run_id": run_id,
            "experiment_id": experiment_id,
            "message": message,
            "data": dict(data) if data else None,
        },
    )
