"""Finding SQL statements in source files, for the tests that keep SQL in the data layer (kb/store):
the faces (test_no_sql_in_faces.py) and the runner (test_no_sql_in_loop.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# SQL keywords as SQL writes them (upper case, so prose does not match), and database calls given a
# statement. Textual's `query_one(` and a runner's `execute()` (no argument) are not SQL, nor is
# SkyPilot's `sdk.execute(task, cluster)` (runner/fleet/skypilot: it runs a job on a cluster).
SQL = re.compile(
    r"""\bSELECT\b.+\bFROM\b|["']\s*SELECT\s|^\s*SELECT\s|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"""
    r"""|\bFROM\s+\w+(\s+\w+)?\s+(WHERE|JOIN|LEFT|ORDER|GROUP)\b"""
    r"""|(?<!\bsdk)\.(execute|executemany|executescript|query)\(\s*[^\s)]"""
)


def sql_lines(paths: Iterable[Path]) -> dict[str, list[str]]:
    """`path:line: text` of every line that looks like SQL, by file (relative to the repository)."""
    found: dict[str, list[str]] = {}
    for path in sorted(paths):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SQL.search(line):
                found.setdefault(rel, []).append(f"{rel}:{number}: {line.strip()}")
    return found
