"""The data layer's row types against the schema: each whole-table TypedDict in kb/store/tables.py
has the migrated table's columns, types and NULL-ability, and `paging.shaped` refuses a query
whose columns are not its row type's keys (with rows or without)."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import TypedDict, get_type_hints

import pytest
import sqlite_utils

from kb.db import transaction
from kb.store import run_records, tables
from kb.store.paging import ShapeMismatch, shaped, shaped_one
from kb.workspace import Workspace

_SQL_TYPES = {"INTEGER": int, "REAL": float, "TEXT": str}


@pytest.fixture
def db(workspace: Workspace) -> sqlite_utils.Database:
    return workspace.db()


def _split(hint: object) -> tuple[object, bool]:
    """(the type, whether None is allowed) of a hint such as `int | None`."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        assert len(args) == 1, hint
        return args[0], True
    return hint, False


@pytest.mark.parametrize("name", sorted(tables.TABLE_OF))
def test_row_type_is_the_table(db: sqlite_utils.Database, name: str) -> None:
    table = tables.TABLE_OF[name]
    hints = get_type_hints(getattr(tables, name))
    columns = {r[1]: r for r in db.execute(f"PRAGMA table_info({table})").fetchall()}
    assert set(hints) == set(columns), f"{name} vs {table}"
    for column, (_, _, sql_type, notnull, _, pk) in columns.items():
        kind, nullable = _split(hints[column])
        assert kind is _SQL_TYPES[sql_type.upper()], f"{table}.{column}: {sql_type} typed {kind}"
        expect_nullable = not (notnull or (pk and sql_type.upper() == "INTEGER"))
        assert nullable == expect_nullable, f"{table}.{column}: NULL-able {expect_nullable}"


def test_every_row_type_is_listed() -> None:
    declared = {n for n, v in vars(tables).items() if isinstance(v, type) and n.endswith("Row")}
    assert declared == set(tables.TABLE_OF)


class _Pair(TypedDict):
    id: int
    name: str


def test_shaped_hands_out_rows_of_its_type(db: sqlite_utils.Database) -> None:
    with transaction(db):
        run_id = run_records.create(db, {"name": "r1", "status": "finished", "started_at": 1.0})
    found = shaped(db, _Pair, "SELECT id, name FROM runs")
    assert found == [{"id": run_id, "name": "r1"}]
    assert shaped_one(db, _Pair, "SELECT id, name FROM runs WHERE id = ?", [run_id + 1]) is None
    whole = shaped_one(db, tables.RunRow, "SELECT * FROM runs")
    assert whole is not None and whole["name"] == "r1" and whole["cost_usd"] == 0


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT id FROM runs", "missing ['name']"),
        ("SELECT id, name, status FROM runs", "extra ['status']"),
        ("SELECT id, name, id FROM runs", "repeated ['id']"),
    ],
)
def test_shaped_refuses_drift_even_without_rows(db: sqlite_utils.Database, sql: str, words: str) -> None:
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    with pytest.raises(ShapeMismatch, match=words.replace("[", r"\[").replace("]", r"\]")):
        shaped(db, _Pair, sql)


# The faces' frozen records that carry a whole table row (plus, for some, columns they join): the
# same names and types as the row type, so the two shapes of one row cannot drift apart.
def _records() -> list[tuple[type, str, set[str]]]:
    from kb.store import decisions, llm_calls, workers

    return [
        (decisions.Decision, "DecisionRow", set()),
        (llm_calls.LlmCall, "LLMCallRow", set()),
        (workers.Worker, "WorkerRow", {"run_name", "run_status", "run_heartbeat"}),
    ]


@pytest.mark.parametrize(("record", "row", "joined"), _records(), ids=lambda v: getattr(v, "__name__", ""))
def test_records_carry_their_row(record: type, row: str, joined: set[str]) -> None:
    fields = get_type_hints(record)
    hints = get_type_hints(getattr(tables, row))
    assert set(fields) - joined == set(hints), f"{record.__name__} vs {row}"
    for name, hint in hints.items():
        assert fields[name] == hint, f"{record.__name__}.{name}: {fields[name]} vs {row}: {hint}"


# Reads whose rows are typed: run on the migrated, empty workspace, each query's columns are checked
# against its row type (shaped needs no rows for that), whether or not a feature test reaches it.
def _typed_reads() -> dict[str, Callable[[sqlite_utils.Database], object]]:
    from kb.store import citations, llm_calls, ranking, research

    return {
        "research.results": lambda db: research.results(db, 5),
        "research.repairable": lambda db: research.repairable(db, 1),
        "research.conflicts_to_port": lambda db: research.conflicts_to_port(db, 1),
        "research.measured_twin": lambda db: research.measured_twin(db, "sha", 1, ["kept"]),
        "research.run_branch": lambda db: research.run_branch(db, 1),
        "research.fusion_sites": lambda db: research.fusion_sites(db, [1], 3),
        "research.gaps": research.gaps,
        "research.fusions_in": lambda db: research.fusions_in(db, "RMS_NORM+MUL", ["cpu"]),
        "research.fork_commits": research.fork_commits,
        "research.hypothesis_titles": research.hypothesis_titles,
        "research.top_hypotheses": lambda db: research.top_hypotheses(db, 5),
        "research.wave_with_run": lambda db: research.wave_with_run(db, 1),
        "research.wave_outcomes": lambda db: research.wave_outcomes(db, 1),
        "citations.evidence": lambda db: citations.evidence(db, 1),
        "citations.paper": lambda db: citations.paper(db, 1),
        "citations.paper_at": lambda db: citations.paper_at(db, ["https://example.org/p"]),
        "ranking.gaps": ranking.gaps,
        "ranking.facts": lambda db: list(ranking.facts(db)),
        "ranking.facts(ids)": lambda db: list(ranking.facts(db, [1])),
        "llm_calls.answer_for_step": lambda db: llm_calls.answer_for_step(db, "run1:reflect:w1"),
    }


@pytest.mark.parametrize("name", sorted(_typed_reads()))
def test_typed_reads_match_their_row_types(db: sqlite_utils.Database, name: str) -> None:
    found = _typed_reads()[name](db)
    assert found in (None, [])
