"""The faces (tui/, the CLI in tui/cli/) hold no SQL: their reads and writes go through the data
layer (kb/store) or the runner's record (runner/record, runner/queue_query)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# SQL keywords as SQL writes them (upper case, so prose does not match), and database calls given a
# statement. Textual's `query_one(` and a runner's `execute()` (no argument) are not SQL.
SQL = re.compile(
    r"""\bSELECT\b.+\bFROM\b|["']\s*SELECT\s|^\s*SELECT\s|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"""
    r"""|\bFROM\s+\w+(\s+\w+)?\s+(WHERE|JOIN|LEFT|ORDER|GROUP)\b"""
    r"""|\.(execute|executemany|executescript|query)\(\s*[^\s)]"""
)

# Files whose SQL has not moved to kb/store yet (issue 14): shrink this set, never grow it.
KNOWN: set[str] = set()


def sql_lines() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tui").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SQL.search(line):
                found.setdefault(rel, []).append(f"{rel}:{number}: {line.strip()}")
    return found


def test_faces_hold_no_sql() -> None:
    found = sql_lines()
    new = [line for rel, lines in found.items() if rel not in KNOWN for line in lines]
    assert not new, "SQL in the faces; move it to kb/store:\n" + "\n".join(new)


def test_known_list_only_shrinks() -> None:
    cleaned = sorted(KNOWN - set(sql_lines()))
    assert not cleaned, f"no SQL left in {cleaned}: remove them from KNOWN"
