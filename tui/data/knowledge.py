"""The knowledge pane's reads: search and evidence (the typed rows live in kb.store.knowledge)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

    from kb.search import Evidence, SearchHit

SNIPPET_MARKS = ("\x01", "\x02")  # search hit highlights, turned into styles by the widget


def search(db: sqlite_utils.Database, query: str, limit: int = 50) -> list[SearchHit]:
    from kb.search import search as kb_search

    return kb_search(db, query, limit=limit, marks=SNIPPET_MARKS, snippet_tokens=16)


def evidence(db: sqlite_utils.Database, evidence_id: int) -> Evidence:
    from kb.search import get_evidence

    return get_evidence(db, evidence_id)
