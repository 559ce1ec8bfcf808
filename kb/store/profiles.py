"""baseline_profiles: the share of time each symbol takes in a baseline commit's benchmark, as
runner/profile.py records and the ranking reads it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kb.store.paging import rows

if TYPE_CHECKING:
    import sqlite_utils


def replace(
    db: sqlite_utils.Database, baseline: str, found: Mapping[str, tuple[float, int]], source: str, at: float
) -> None:
    """The baseline's profile becomes `found` ({symbol: (share, calls)}); the caller's transaction
    makes the delete and the inserts one."""
    db.execute("DELETE FROM baseline_profiles WHERE baseline_commit = ?", [baseline])
    db.conn.executemany(
        "INSERT INTO baseline_profiles (baseline_commit, symbol, share, calls, source, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(baseline, symbol, share, n, source, at) for symbol, (share, n) in found.items()],
    )


def shares(db: sqlite_utils.Database, baseline: str) -> dict[str, float]:
    """{symbol: share} recorded for a baseline commit, largest first."""
    found = rows(
        db,
        "SELECT symbol, share FROM baseline_profiles WHERE baseline_commit = ? ORDER BY share DESC",
        [baseline],
    )
    return {r["symbol"]: float(r["share"]) for r in found}
