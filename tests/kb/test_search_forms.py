"""Search that forgives word forms: English stems, identifier parts and Russian endings are found,
always after the exact hits; the word-form index follows writes and is built for older databases."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlite_utils

from kb.db import connect, insert, transaction
from kb.migrations import migrate
from kb.search import search, stem_query

PASSAGES = [
    # (title, body)
    ("Weights", "We repack the weights once at load time."),
    ("Repacked layouts", "Interleaved rows suit wide registers."),  # the word form in a title: strong
    ("Kernels", "Repacking Q4_0 for AVX2 uses repack_q4_0_to_q4_0_8x8 from the CPU backend."),
    ("Norms", "ggml_compute_forward_rms_norm normalises each row before the MUL."),
    ("Plain norm", "A plain rms_norm call, then a scale."),
    ("Other", "Nothing about packing here: prefetch and unroll."),
    ("Умножение", "Умножение матриц на процессоре упирается в память."),
    ("Матрицы", "Быстрое умножения матриц и ёмкость кэша процессора."),
    ("Ядра", "Оптимизация умножением по блокам; емкость регистров."),
]


@pytest.fixture
def db(tmp_path: Path) -> sqlite_utils.Database:
    db = connect(tmp_path / "kb.db")
    with transaction(db):
        sid = insert(db, "sources", {"kind": "paper", "title": "Notes", "created_at": 1.0, "updated_at": 1.0})
        for i, (title, body) in enumerate(PASSAGES, start=1):
            insert(db, "evidence", {"source_id": sid, "kind": "passage", "ref": str(i), "title": title,
                                    "body": body, "position": i, "created_at": 1.0})  # fmt: skip
    return db


def _refs(db: sqlite_utils.Database, query: str) -> list[tuple[str, str]]:
    return [(h.ref, h.match) for h in search(db, query)]


def test_english_word_forms_after_the_exact_hit(db: sqlite_utils.Database) -> None:
    found = _refs(db, "repack")
    # The exact word first, though "Repacked" in a title would score higher by bm25.
    assert found[0] == ("1", "exact")
    assert {ref for ref, match in found[1:]} == {"2", "3"} and {m for _, m in found[1:]} == {"stem"}
    assert _refs(db, "repacking")[0] == ("3", "exact")
    assert {ref for ref, _ in _refs(db, "repacking")} == {"1", "2", "3"}
    assert [ref for ref, _ in _refs(db, "packing")] == ["6"]  # word forms, not substrings: no "repacking"


def test_identifiers_by_their_parts_and_whole(db: sqlite_utils.Database) -> None:
    assert _refs(db, "ggml_compute_forward_rms_norm") == [("4", "exact")]
    assert _refs(db, "rms_norm") == [("5", "exact"), ("4", "stem")]  # the standalone identifier first
    assert _refs(db, "forward_rms_norm") == [("4", "stem")]
    assert _refs(db, "repack_q4_0_to_q4_0_8x8") == [("3", "exact")]
    assert ("3", "stem") in _refs(db, "q4_0_8x8")
    assert _refs(db, '"norm before"') == []  # phrases keep their order and adjacency
    assert _refs(db, '"normalises each row"') == [("4", "exact")]


def test_russian_endings_and_yo(db: sqlite_utils.Database) -> None:
    found = _refs(db, "умножение")
    assert found[0] == ("7", "exact") and {ref for ref, _ in found} == {"7", "8", "9"}
    assert {ref for ref, _ in _refs(db, "процессор")} == {"7", "8"}
    assert {ref for ref, _ in _refs(db, "емкость")} == {"8", "9"}  # ё or е, any ending
    assert {ref for ref, _ in _refs(db, "ёмкостью")} == {"8", "9"}
    assert {ref for ref, _ in _refs(db, '"умножение матриц"')} == {"7", "8"}
    assert "умножен" in stem_query("умножение")


def test_limit_and_kind_cover_both_indexes(db: sqlite_utils.Database) -> None:
    assert [h.match for h in search(db, "repack", limit=2)] == ["exact", "stem"]
    assert search(db, "repack", kind="commit") == []
    with transaction(db):
        db.execute("UPDATE evidence SET body = 'now about prefetching' WHERE ref = '3'")
    assert "3" not in {ref for ref, _ in _refs(db, "repack")}  # the word-form index follows updates
    with transaction(db):
        db.execute("DELETE FROM evidence WHERE ref = '1'")
    assert {ref for ref, _ in _refs(db, "repack")} == {"2"}


def test_older_databases_get_the_word_form_index(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = connect(path, migrate_schema=False)
    migrate(db, upto="m006_fork_content")
    with transaction(db):
        sid = insert(db, "sources", {"kind": "paper", "title": "Old", "created_at": 1.0, "updated_at": 1.0})
        insert(db, "evidence", {"source_id": sid, "kind": "passage", "ref": "1", "body": "repacked rows",
                                "created_at": 1.0})  # fmt: skip
    assert "evidence_stem_fts" not in db.table_names()
    db.conn.close()
    db = connect(path)
    assert _refs(db, "repack") == [("1", "stem")]
