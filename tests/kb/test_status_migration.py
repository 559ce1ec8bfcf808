"""m009_experiment_statuses from the schema before it: the experiments table rebuilt for `passed`,
`failed` and `conflict`, an old A/A's candidate words renamed, rows and references kept."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from kb.db import connect, insert, transaction
from kb.migrations import MIGRATIONS, applied, migrate

BEFORE = "m008_hypothesis_queue"


def test_old_self_tests_get_their_own_words_and_every_reference_survives(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = connect(path, migrate_schema=False)
    migrate(db, upto=BEFORE)
    assert "m009_experiment_statuses" not in applied(db)
    with transaction(db):
        run = insert(db, "runs", {"name": "r", "status": "finished", "started_at": 1.0})

        def exp(kind: str, status: str, passed: bool | None = None) -> int:
            meta = {"self_test": {"passed": passed}} if passed is not None else {}
            return insert(db, "experiments", {"run_id": run, "kind": kind, "title": kind, "status": status,
                                              "meta": json.dumps(meta), "created_at": 1.0})  # fmt: skip

        ok = exp("self_test", "inconclusive", True)
        bad = exp("self_test", "discarded", False)
        crashed = exp("self_test", "crashed")
        cand = exp("candidate", "inconclusive")
        lost = exp("candidate", "discarded")
        insert(db, "samples", {"experiment_id": cand, "pair": 0, "side": "A", "metric": "m", "seq": 0,
                               "value": 1.0, "created_at": 1.0})  # fmt: skip
    db.conn.close()

    db = connect(path)  # upgrades
    assert applied(db) == {fn.__name__ for fn in MIGRATIONS}
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    statuses = dict(db.execute("SELECT id, status FROM experiments").fetchall())
    assert statuses == {
        ok: "passed", bad: "failed", crashed: "crashed", cand: "inconclusive", lost: "discarded"
    }  # fmt: skip
    assert db.execute("SELECT count(*) FROM samples WHERE experiment_id = ?", [cand]).fetchone()[0] == 1
    query = "SELECT name FROM sqlite_master WHERE tbl_name = 'experiments' AND type = 'index'"
    indexes = {r[0] for r in db.execute(query)}
    assert {"experiments_run", "experiments_patch", "experiments_hypothesis"} <= indexes
    with transaction(db):
        db.execute("UPDATE experiments SET status = 'conflict' WHERE id = ?", [cand])
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE experiments SET status = 'won' WHERE id = ?", [cand])
    with pytest.raises(sqlite3.IntegrityError):  # samples still reference the rebuilt table
        insert(db, "samples", {"experiment_id": 9999, "pair": 0, "side": "A", "metric": "m", "seq": 0,
                               "value": 1.0, "created_at": 1.0})  # fmt: skip
