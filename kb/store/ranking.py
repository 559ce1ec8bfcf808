"""What runner/rank.py reads to rank the queue (the target's gaps, the newest fork commit, each
hypothesis's facts) and what it writes back (rank, rank_why, family)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.paging import shaped, shaped_iter

if TYPE_CHECKING:
    import sqlite_utils


class GapOps(TypedDict):
    """A backend fusion gap's title (its ops) and meta (JSON: ops, missing and present backends)."""

    title: str | None
    meta: str | None


def gaps(db: sqlite_utils.Database) -> list[GapOps]:
    """title and meta of every backend fusion gap."""
    return shaped(db, GapOps, "SELECT title, meta FROM evidence WHERE kind = 'gap'")


def newest_commit_at(db: sqlite_utils.Database) -> Any:
    """The newest fork commit's authored_at as stored (None without commits)."""
    return db.execute("SELECT max(authored_at) FROM commits").fetchone()[0]


_FACTS_SQL = """
SELECT h.id, h.origin, h.expected_effect, h.created_at,
       p.diff AS patch_diff, p.files AS patch_files, p.author_kind, p.apply_status,
       c.files AS commit_files, c.backends, c.areas, c.claims, c.message, c.subject, c.authored_at,
       c.diff AS commit_diff,
       (SELECT e.title FROM hypothesis_evidence he JOIN evidence e ON e.id = he.evidence_id
        WHERE he.hypothesis_id = h.id AND e.kind = 'gap' LIMIT 1) AS gap
FROM hypotheses h
LEFT JOIN patches p ON p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
LEFT JOIN commits c ON c.evidence_id = (
    SELECT min(he.evidence_id) FROM hypothesis_evidence he JOIN commits cc ON cc.evidence_id = he.evidence_id
    WHERE he.hypothesis_id = h.id)
"""


class RankFacts(TypedDict):
    """A hypothesis's ranking facts: its latest patch's and first cited fork commit's columns (None
    without one) and the title of a gap it cites."""

    id: int
    origin: str
    expected_effect: float | None
    created_at: float
    patch_diff: str | None
    patch_files: str | None
    author_kind: str | None
    apply_status: str | None
    commit_files: str | None
    backends: str | None
    areas: str | None
    claims: str | None
    message: str | None
    subject: str | None
    authored_at: str | None
    commit_diff: str | None
    gap: str | None


def facts(db: sqlite_utils.Database, ids: Iterable[int] | None = None) -> Iterator[RankFacts]:
    """Each hypothesis's ranking facts (or those of `ids`, in that order): its latest patch and
    first cited fork commit's columns and the title of a gap it cites. One row at a time, from a
    cursor: the diffs of 10,000 hypotheses are not held together."""
    if ids is None:
        yield from shaped_iter(db, RankFacts, _FACTS_SQL + " ORDER BY h.id")
        return
    for hid in ids:
        yield from shaped(db, RankFacts, _FACTS_SQL + " WHERE h.id = ?", [hid])


def set_ranks(db: sqlite_utils.Database, ranks: Sequence[tuple[float, str, int]]) -> None:
    """(rank, rank_why JSON, hypothesis id) for each hypothesis ranked."""
    db.conn.executemany("UPDATE hypotheses SET rank = ?, rank_why = ? WHERE id = ?", ranks)


def set_families(db: sqlite_utils.Database, families: dict[int, int]) -> None:
    """Every hypothesis's family anew: those in `families` (hypothesis id -> family) and no other."""
    db.execute("UPDATE hypotheses SET family = NULL WHERE family IS NOT NULL")
    db.conn.executemany(
        "UPDATE hypotheses SET family = ? WHERE id = ?", [(fam, hid) for hid, fam in families.items()]
    )
