"""m008_hypothesis_queue from the schema before it: the hypotheses table rebuilt for `needs_port` and
the rank, with its rows and every reference to them kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kb.db import connect, insert, transaction
from kb.migrations import MIGRATIONS, applied, migrate

BEFORE = "m007_search_stems"


def test_the_queue_migration_keeps_hypotheses_and_their_references(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = connect(path, migrate_schema=False)
    migrate(db, upto=BEFORE)
    assert "m008_hypothesis_queue" not in applied(db)
    with transaction(db):
        values = {"title": "port it", "status": "patched", "priority": 2.5, "dedupe_key": "fork:x"}
        hid = insert(db, "hypotheses", {**values, "created_at": 1.0, "updated_at": 1.0})
        pid = insert(db, "patches", {"hypothesis_id": hid, "diff": "d", "diff_sha": "s", "files": "[]",
                                     "author_kind": "manual", "created_at": 1.0})  # fmt: skip
        run = insert(db, "runs", {"name": "r", "status": "finished", "started_at": 1.0})
        insert(db, "experiments", {"run_id": run, "patch_id": pid, "hypothesis_id": hid, "title": "x",
                                   "status": "kept", "created_at": 1.0})  # fmt: skip
        insert(db, "hypothesis_sources", {"hypothesis_id": hid, "ref": "fork:ik@abc"})
    db.conn.close()

    db = connect(path)  # upgrades
    assert applied(db) == {fn.__name__ for fn in MIGRATIONS}
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    row = db.execute(
        "SELECT id, title, status, priority, rank, rank_why, family, priority_set FROM hypotheses"
    ).fetchone()
    assert tuple(row) == (hid, "port it", "patched", 2.5, None, None, None, 0)
    assert db.execute("SELECT count(*) FROM experiments WHERE hypothesis_id = ?", [hid]).fetchone()[0] == 1
    indexes = {
        r[0]
        for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'hypotheses'")
    }
    assert {"hypotheses_dedupe", "hypotheses_status", "hypotheses_rank", "hypotheses_family"} <= indexes
    with transaction(db):
        db.execute("UPDATE hypotheses SET status = 'needs_port' WHERE id = ?", [hid])
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE hypotheses SET status = 'waiting' WHERE id = ?", [hid])
    with pytest.raises(sqlite3.IntegrityError):  # the dedupe key is still unique
        insert(
            db, "hypotheses", {"title": "again", "dedupe_key": "fork:x", "created_at": 2.0, "updated_at": 2.0}
        )
    with pytest.raises(sqlite3.IntegrityError):  # patches still reference the rebuilt table
        insert(db, "patches", {"hypothesis_id": 999, "diff": "d", "diff_sha": "s", "files": "[]",
                               "author_kind": "manual", "created_at": 1.0})  # fmt: skip
    db.execute("INSERT INTO baseline_profiles VALUES ('abc', 'f', 0.5, 2, 'validate', 1.0)")
    assert db.execute("SELECT share FROM baseline_profiles").fetchone()[0] == 0.5
