"""The bottom of the database layer: timestamps and transactions.

kb.db (connections, row helpers) and kb.migrations (the schema) both build on these; kb.db opens a
connection and runs the migrations, so the two cannot live in it without an import circle.
kb.db re-exports both, and callers import them from there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlite_utils


def now() -> float:
    """Timestamps are Unix seconds (REAL) everywhere in the schema."""
    return time.time()


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """All-or-nothing writes. Nested use becomes a savepoint."""
    conn = db.conn
    if conn.in_transaction:
        name = f"sp_{id(object())}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield db
        except BaseException:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def abandon(db: sqlite_utils.Database) -> None:
    """Roll back a transaction a failed write left open (the disk filled up mid-write), so that
    the connection can write again once space is back; nothing when none is open."""
    if db.conn.in_transaction:
        db.conn.execute("ROLLBACK")
