"""Migrations from a blank database and from the previous schema, with rows kept."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kb.db import connect, insert, transaction
from kb.errors import UserError
from kb.migrations import MIGRATIONS, applied, migrate


def test_blank_database_gets_every_migration(tmp_path: Path) -> None:
    db = connect(tmp_path / "a.db")
    assert applied(db) == {fn.__name__ for fn in MIGRATIONS}
    assert {
        "sources",
        "evidence",
        "hypotheses",
        "patches",
        "runs",
        "waves",
        "experiments",
        "samples",
        "decisions",
        "llm_calls",
        "events",
        "commands",
        "winners",
        "workers",
    } <= set(db.table_names())
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # Migrating again is a no-op.
    assert migrate(db) == []


def test_upgrade_from_previous_schema_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = connect(path, migrate_schema=False)
    first = MIGRATIONS[0].__name__
    migrate(db, upto=first)
    assert applied(db) == {first}
    assert "evidence_fts" not in db.table_names()
    with transaction(db):
        sid = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "title": "Pass fusion",
                "created_at": 1.0,
                "updated_at": 1.0,
                "canonical_url": "https://example.org/p",
            },
        )
        for i, text in enumerate(["ggml_can_fuse joins RMS_NORM and MUL", "память и пропускная способность"]):
            insert(
                db,
                "evidence",
                {"source_id": sid, "kind": "passage", "ref": str(i), "body": text, "created_at": 1.0},
            )
        hid = insert(db, "hypotheses", {"title": "fuse", "created_at": 1.0, "updated_at": 1.0})
        insert(db, "hypothesis_evidence", {"hypothesis_id": hid, "evidence_id": 1})
    db.conn.close()

    db = connect(path)  # upgrades to the latest schema
    assert applied(db) == {fn.__name__ for fn in MIGRATIONS}
    assert db.execute("SELECT count(*) FROM evidence").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM hypothesis_evidence").fetchone()[0] == 1
    # Rows written before the search migration are searchable after it (the FTS index was rebuilt).
    hits = db.execute("SELECT rowid FROM evidence_fts WHERE evidence_fts MATCH 'ggml_can_fuse'").fetchall()
    assert [h[0] for h in hits] == [1]
    hits = db.execute("SELECT rowid FROM evidence_fts WHERE evidence_fts MATCH 'пропускная'").fetchall()
    assert [h[0] for h in hits] == [2]


def test_failed_migration_leaves_database_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.db"
    db = connect(path)

    def m999_broken(db):  # type: ignore[no-untyped-def]
        db.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    monkeypatch.setattr("kb.migrations.MIGRATIONS", [*MIGRATIONS, m999_broken])
    with pytest.raises(RuntimeError):
        migrate(db)
    assert "half_done" not in db.table_names()
    assert "m999_broken" not in applied(db)


def test_not_sqlite_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "autoresearch.db"
    path.write_bytes(b"this is not a database, just text " * 100)
    before = path.read_bytes()
    with pytest.raises(UserError, match="not a usable SQLite database"):
        connect(path)
    assert path.read_bytes() == before


def test_transaction_rolls_back_everything(tmp_path: Path) -> None:
    db = connect(tmp_path / "c.db")
    with pytest.raises(ValueError), transaction(db):
        insert(db, "events", {"ts": 1.0, "level": "info", "kind": "x", "message": "one"})
        with transaction(db):
            insert(db, "events", {"ts": 1.0, "level": "info", "kind": "x", "message": "two"})
        raise ValueError
    assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_two_processes_share_the_file(tmp_path: Path) -> None:
    """WAL + busy timeout: a second process writes while this connection holds a read."""
    path = tmp_path / "d.db"
    db = connect(path)
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchone()
    code = (
        "import sys; from pathlib import Path; from kb.db import connect, insert, transaction\n"
        "db = connect(Path(sys.argv[1]))\n"
        "with transaction(db):\n"
        "    insert(db, 'events', {'ts': 1.0, 'level': 'info', 'kind': 'x', 'message': 'child'})\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    reader.rollback()
    assert db.execute("SELECT message FROM events").fetchone()[0] == "child"


def test_schema_doc_is_current() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kb.schema_doc", "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
