"""The faces (tui/, the CLI in tui/cli/) hold no SQL: their reads and writes go through the data
layer (kb/store) or the runner's record (runner/record)."""

from __future__ import annotations

from tests.foundation.sql_scan import ROOT
from tests.foundation.sql_scan import sql_lines as scan

# Files whose SQL has not moved to kb/store yet (issue 14): shrink this set, never grow it.
KNOWN: set[str] = set()


def sql_lines() -> dict[str, list[str]]:
    return scan((ROOT / "tui").rglob("*.py"))


def test_faces_hold_no_sql() -> None:
    found = sql_lines()
    new = [line for rel, lines in found.items() if rel not in KNOWN for line in lines]
    assert not new, "SQL in the faces; move it to kb/store:\n" + "\n".join(new)


def test_known_list_only_shrinks() -> None:
    cleaned = sorted(KNOWN - set(sql_lines()))
    assert not cleaned, f"no SQL left in {cleaned}: remove them from KNOWN"
