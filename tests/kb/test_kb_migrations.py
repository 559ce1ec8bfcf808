"""The knowledge base's migrations from the schema before them, with rows kept and references intact."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kb.db import connect, insert, transaction
from kb.forks import add_fork
from kb.migrations import MIGRATIONS, applied, migrate
from kb.search import search
from kb.workspace import Workspace
from tests.kb.helpers import ForkRepos

BEFORE_FORK_CONTENT = "m005_runner_jobs"


def _old_database(path: Path, upto: str) -> None:
    db = connect(path, migrate_schema=False)
    migrate(db, upto=upto)
    with transaction(db):
        sid = insert(db, "sources", {"kind": "fork", "name": "ik", "url": "/x", "ref": "main",
                                     "created_at": 1.0, "updated_at": 1.0})  # fmt: skip
        eid = insert(
            db,
            "evidence",
            {"source_id": sid, "kind": "commit", "ref": "a" * 40, "title": "ggml-cpu: repacked Q4_0",
             "body": "ggml_compute_forward_rms_norm repacking kernels", "created_at": 1.0},
        )  # fmt: skip
        insert(db, "commits", {"evidence_id": eid, "sha": "a" * 40, "subject": "ggml-cpu: repacked Q4_0",
                               "files": '["ggml/src/ggml-cpu/ops.c"]'})  # fmt: skip
        insert(db, "commit_files", {"evidence_id": eid, "path": "ggml/src/ggml-cpu/ops.c"})
        hid = insert(db, "hypotheses", {"title": "port it", "created_at": 1.0, "updated_at": 1.0})
        insert(db, "hypothesis_evidence", {"hypothesis_id": hid, "evidence_id": eid})
    db.conn.close()


def test_fork_content_migration_rebuilds_evidence_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_database(path, BEFORE_FORK_CONTENT)
    db = connect(path)  # upgrades to the latest schema
    assert applied(db) == {fn.__name__ for fn in MIGRATIONS}
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db.execute("SELECT count(*) FROM hypothesis_evidence").fetchone()[0] == 1
    commit = db.execute("SELECT evidence_id, backends, areas, claims FROM commits").fetchone()
    assert tuple(commit) == (1, None, None, None)  # filled at the fork's next add-fork
    assert [h.id for h in search(db, "ggml_compute_forward_rms_norm")] == [1]  # the index survived
    # The new kind is accepted; the references point at the rebuilt table (cascade, refusal).
    with transaction(db):
        insert(db, "evidence", {"source_id": 1, "kind": "fork_file", "ref": "src/a.c", "created_at": 2.0})
    with pytest.raises(sqlite3.IntegrityError):
        insert(db, "evidence", {"source_id": 99, "kind": "note", "ref": "x", "created_at": 2.0})
    with pytest.raises(sqlite3.IntegrityError):
        insert(db, "evidence", {"source_id": 1, "kind": "nonsense", "ref": "y", "created_at": 2.0})
    db.execute("DELETE FROM hypothesis_evidence")
    db.execute("DELETE FROM sources")
    assert db.execute("SELECT count(*) FROM commits").fetchone()[0] == 0  # ON DELETE CASCADE holds


def test_a_rebuild_that_breaks_a_reference_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb import migrations

    path = tmp_path / "b.db"
    db = connect(path)

    def m999_breaks_a_reference(db):  # type: ignore[no-untyped-def]
        db.execute("INSERT INTO hypothesis_evidence (hypothesis_id, evidence_id) VALUES (12345, 67890)")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS, m999_breaks_a_reference])
    monkeypatch.setattr(migrations, "REBUILDS", {*migrations.REBUILDS, "m999_breaks_a_reference"})
    with pytest.raises(RuntimeError, match="broken reference in hypothesis_evidence"):
        migrate(db)
    assert "m999_breaks_a_reference" not in applied(db)
    assert db.execute("SELECT count(*) FROM hypothesis_evidence").fetchone()[0] == 0
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_commits_mined_before_the_facts_get_them_at_the_next_refresh(
    fork_ws: Workspace, fork_repos: ForkRepos
) -> None:
    db = fork_ws.db()
    add_fork(fork_ws, db, "ik", str(fork_repos.fork.path))
    db.execute(
        "UPDATE commits SET backends = NULL, areas = NULL, claims = NULL"
    )  # as an old schema left them
    fork_repos.fork.commit("ggml-cpu: one more", {"ggml/src/ggml-cpu/more.c": "int more;\n"})
    add_fork(fork_ws, db, "ik")
    assert db.execute("SELECT count(*) FROM commits WHERE backends IS NULL").fetchone()[0] == 0
    row = db.execute(
        "SELECT backends, claims FROM commits WHERE sha = ?", [fork_repos.shas["fuse"]]
    ).fetchone()
    assert row[0] == '["cpu"]' and '"effect": 0.03' in row[1]
