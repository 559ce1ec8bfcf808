"""The knowledge-base rows a `--source` ref names, as runner/cite.py checks them: an evidence row
with its source's title, a paper by id or by address, and a paper's first passage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from kb.store.paging import one, shaped, shaped_one
from kb.store.tables import SourceRow

if TYPE_CHECKING:
    import sqlite_utils


class CitedEvidence(TypedDict):
    """An evidence row a ref names: its id, kind and title, and its source's title."""

    id: int
    kind: str
    title: str | None
    source: str | None


def evidence(db: sqlite_utils.Database, evidence_id: int) -> CitedEvidence | None:
    """id, kind, title and its source's title (source) of an evidence row."""
    return shaped_one(
        db,
        CitedEvidence,
        "SELECT e.id, e.kind, e.title, s.title AS source FROM evidence e "
        "JOIN sources s ON s.id = e.source_id WHERE e.id = ?",
        [evidence_id],
    )


def paper(db: sqlite_utils.Database, source_id: int) -> SourceRow | None:
    """Every column of the paper source with this id (None for another kind of source)."""
    return shaped_one(db, SourceRow, "SELECT * FROM sources WHERE id = ? AND kind = 'paper'", [source_id])


def paper_at(db: sqlite_utils.Database, addresses: Sequence[str]) -> SourceRow | None:
    """Every column of the first paper whose URL or canonical URL is one of `addresses`."""
    marks = ", ".join("?" for _ in addresses)
    return shaped_one(
        db,
        SourceRow,
        f"SELECT * FROM sources WHERE kind = 'paper' AND (url IN ({marks}) OR canonical_url IN ({marks})) "
        "ORDER BY id LIMIT 1",
        [*addresses, *addresses],
    )


def first_passage(db: sqlite_utils.Database, source_id: int) -> int | None:
    found = one(
        db,
        "SELECT id FROM evidence WHERE source_id = ? AND kind = 'passage' ORDER BY position, id LIMIT 1",
        [source_id],
    )
    return int(found["id"]) if found else None


def fork_known(db: sqlite_utils.Database, name: str) -> bool:
    """Whether the knowledge base holds a fork of this name."""
    return one(db, "SELECT id FROM sources WHERE kind = 'fork' AND name = ?", [name]) is not None


def fork_commits(db: sqlite_utils.Database, name: str, sha_prefix: str) -> list[CitedEvidence]:
    """The commit evidence of fork `name` whose sha starts with `sha_prefix` (lower case), at most two
    (two: the prefix is ambiguous)."""
    return shaped(
        db,
        CitedEvidence,
        "SELECT e.id, e.kind, e.title, s.title AS source FROM evidence e "
        "JOIN sources s ON s.id = e.source_id "
        "WHERE s.kind = 'fork' AND s.name = ? AND e.kind = 'commit' AND e.ref LIKE ? ORDER BY e.id LIMIT 2",
        [name, sha_prefix + "%"],
    )
