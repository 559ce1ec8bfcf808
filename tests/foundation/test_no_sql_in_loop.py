"""The measuring loop (every module of runner/measure but the benchmark-script validation, which
writes no loop table) and the importer hold no SQL: they write and read runs, waves, experiments,
jobs, samples, decisions and commands through kb/store, as the test fixtures do, so a schema change
is made in kb/store alone."""

from __future__ import annotations

import ast

from tests.foundation.sql_scan import ROOT, sql_lines

FILES = sorted((ROOT / "runner" / "measure").glob("*.py")) + [ROOT / "runner" / "record" / "importer.py"]

# kb.db's row helpers take table and column names: a write through them is SQL by another name.
# What the loop keeps of kb.db is the transaction, the clock and the event log.
ALLOWED_FROM_DB = {"transaction", "now", "log_event"}


def test_loop_and_importer_hold_no_sql() -> None:
    found = sql_lines(FILES)
    lines = [line for rel in sorted(found) for line in found[rel]]
    assert not lines, "SQL in the loop or the importer; move it to kb/store:\n" + "\n".join(lines)


def test_loop_and_importer_use_no_row_helpers() -> None:
    used: list[str] = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "kb.db":
                used += [
                    f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name not in ALLOWED_FROM_DB
                ]
    assert not used, "kb.db row helpers in the loop or the importer; use kb/store:\n" + "\n".join(used)


def test_the_scan_finds_sql() -> None:
    """The scan this test relies on sees the statements kb/store holds (it would pass vacuously
    if it saw none)."""
    found = sql_lines([ROOT / "kb" / "store" / "jobs.py", ROOT / "kb" / "store" / "samples.py"])
    assert len(found) == 2 and all(found.values())
