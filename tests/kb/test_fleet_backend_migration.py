"""m012_fleet_backend_names: `workers.backend` takes any registered fleet backend's name (the CHECK
that listed `local` and `skypilot` dropped), from a blank database and from the schema before it,
with every row, id and reference kept."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from kb.db import connect, insert, transaction
from kb.migrations import MIGRATIONS, applied, migrate

BEFORE = "m011_decision_family"
MIGRATION = "m012_fleet_backend_names"


def worker(db: sqlite_utils.Database, run: int | None, name: str, backend: str) -> int:
    meta = json.dumps({"cluster": name})
    row = {
        "run_id": run,
        "name": name,
        "backend": backend,
        "status": "ready",
        "meta": meta,
        "started_at": 1.0,
    }
    return insert(db, "workers", row)


def job(db: sqlite_utils.Database, run: int, exp: int, worker_id: int, batch: int) -> int:
    row = {
        "run_id": run,
        "experiment_id": exp,
        "worker_id": worker_id,
        "batch": batch,
        "pair_start": 0,
        "pairs": 2,
        "nonce": "n",
        "backend": "local",
        "log_path": "l",
        "job_dir": "d",
        "submitted_at": 1.0,
    }
    return insert(db, "jobs", row)


def test_a_blank_database_takes_any_backend_name(tmp_path: Path) -> None:
    db = connect(tmp_path / "a.db")
    assert MIGRATION in applied(db)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'workers'").fetchone()[0]
    assert "backend TEXT NOT NULL," in sql and "'skypilot'" not in sql
    with transaction(db):
        wid = worker(db, None, "tiny-1", "tiny")
    assert db.execute("SELECT backend FROM workers WHERE id = ?", [wid]).fetchone()[0] == "tiny"
    with pytest.raises(sqlite3.IntegrityError):  # the table's other CHECKs are kept
        db.execute("UPDATE workers SET status = 'asleep' WHERE id = ?", [wid])


def test_the_old_schema_is_rebuilt_with_its_rows_and_references(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = connect(path, migrate_schema=False)
    migrate(db, upto=BEFORE)
    assert MIGRATION not in applied(db)
    with transaction(db):
        run = insert(db, "runs", {"name": "r", "status": "finished", "started_at": 1.0})
        local = worker(db, run, "local-1", "local")
        cluster = worker(db, run, "ar-r1-abc", "skypilot")
        row = {"run_id": run, "title": "e", "status": "kept", "worker_id": cluster, "created_at": 1.0}
        exp = insert(db, "experiments", row)
        job(db, run, exp, local, 0)
    with pytest.raises(sqlite3.IntegrityError):  # before: only the two names
        worker(db, run, "tiny-1", "tiny")
    db.conn.close()

    db = connect(path)  # upgrades
    assert applied(db) == {fn.__name__ for fn in MIGRATIONS}
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    kept = [tuple(r) for r in db.execute("SELECT id, name, backend, meta FROM workers ORDER BY id")]
    assert kept == [
        (local, "local-1", "local", '{"cluster": "local-1"}'),
        (cluster, "ar-r1-abc", "skypilot", '{"cluster": "ar-r1-abc"}'),
    ]
    assert db.execute("SELECT worker_id FROM experiments WHERE id = ?", [exp]).fetchone()[0] == cluster
    assert db.execute("SELECT worker_id FROM jobs").fetchone()[0] == local
    with transaction(db):
        tiny = worker(db, run, "tiny-1", "tiny")
    assert tiny > cluster
    with pytest.raises(sqlite3.IntegrityError):  # jobs still reference the rebuilt table
        job(db, run, exp, 9999, 1)
