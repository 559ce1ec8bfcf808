"""The runner holds no SQL: the measuring loop, the importer and the record (history, provenance,
winners), the research phase, the hypothesis queue, ranking, citations, profiles, steering commands,
the LLM client and the fleet backends read and write the runner's tables (runs, waves, experiments,
jobs, samples, decisions, winners, hypotheses, hypothesis_evidence, hypothesis_sources, patches,
commands, events, llm_calls, workers) through kb/store, as the test fixtures do, so a schema change
is made in kb/store alone.

Outside kb/store, only the knowledge base's own table owners (KB_TABLE_OWNERS) hold SQL."""

from __future__ import annotations

import ast

from tests.foundation.sql_scan import ROOT, sql_lines

# Every module of the runner package.
FILES = sorted((ROOT / "runner").rglob("*.py"))

# kb.db's row helpers take table and column names: a write through them is SQL by another name.
# What the runner keeps of kb.db is the transaction, the clock and the event log.
ALLOWED_FROM_DB = {"transaction", "now", "log_event"}

# The knowledge base's modules outside kb/store that own tables of their own (or the database
# itself), and why their SQL stays with them.
KB_TABLE_OWNERS = {
    "kb/db.py": "the connection, transactions, the event log and the generic row helpers kb/store builds on",
    "kb/dbtx.py": "savepoints and the busy retry: statements about transactions, not about a table",
    "kb/migrations.py": "the schema itself: every table's DDL and its data migrations",
    "kb/schema_doc.py": "reads sqlite_master to document the schema the migrations made",
    "kb/search.py": "the full-text indexes (evidence_fts, evidence_stem_fts) it builds and queries",
    "kb/forks.py": "fork sources and commits, written as a fork is crawled, re-read to classify them",
    "kb/forkfiles.py": "a fork's files (fork_file evidence, fork_files), replaced as it is crawled",
    "kb/forklist.py": "`kb forks`' listing of the fork sources and their commits",
    "kb/papers/ingest.py": "papers and their passages (sources, evidence), written as a paper is ingested",
    "kb/inventory/store.py": "the inventory's source, evidence and fusions, replaced on each scan",
}


def test_runner_holds_no_sql() -> None:
    found = sql_lines(FILES)
    lines = [line for rel in sorted(found) for line in found[rel]]
    assert not lines, "SQL in the runner; move it to kb/store:\n" + "\n".join(lines)


def test_runner_uses_no_row_helpers() -> None:
    used: list[str] = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "kb.db":
                used += [
                    f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name not in ALLOWED_FROM_DB
                ]
    assert not used, "kb.db row helpers in the runner; use kb/store:\n" + "\n".join(used)


def test_the_runner_is_scanned() -> None:
    """The cleaned packages are all in the scan (a moved or renamed folder would drop out of it)."""
    scanned = {path.relative_to(ROOT).as_posix() for path in FILES}
    for module in (
        "runner/measure/runner.py",
        "runner/record/importer.py",
        "runner/record/history.py",
        "runner/record/provenance.py",
        "runner/record/sources.py",
        "runner/record/winners.py",
        "runner/research/phase.py",
        "runner/research/generate.py",
        "runner/research/patch_writer.py",
        "runner/research/miners/forks.py",
        "runner/research/miners/gaps.py",
        "runner/research/reflection.py",
        "runner/research/port.py",
        "runner/hypotheses.py",
        "runner/rank.py",
        "runner/cite.py",
        "runner/profile.py",
        "runner/commands.py",
        "runner/llm.py",
        "runner/fleet/base.py",
        "runner/fleet/skypilot/jobs.py",
    ):
        assert module in scanned, module


def test_sql_outside_kb_store_is_the_knowledge_bases_own() -> None:
    outside = [p for p in (ROOT / "kb").rglob("*.py") if (ROOT / "kb" / "store") not in p.parents]
    holders = set(sql_lines(outside))
    assert holders <= set(KB_TABLE_OWNERS), (
        "SQL in kb outside kb/store and its table owners; move it to kb/store: "
        + ", ".join(sorted(holders - set(KB_TABLE_OWNERS)))
    )
    # The list names no module that no longer holds SQL (or no longer exists).
    assert set(KB_TABLE_OWNERS) <= holders, sorted(set(KB_TABLE_OWNERS) - holders)


def test_the_scan_finds_sql() -> None:
    """The scan this test relies on sees the statements kb/store holds (it would pass vacuously
    if it saw none)."""
    found = sql_lines([ROOT / "kb" / "store" / "jobs.py", ROOT / "kb" / "store" / "samples.py"])
    assert len(found) == 2 and all(found.values())
