"""Approving a hypothesis follows one rule wherever a person asks (DESIGN.md's statuses): the CLI,
the console's data layer and the runner's `approve` command all make a hypothesis whose latest
patch conflicts with the baseline `approved` (left to the patch writer), never `patched`. Before
issue 14 the runner's command had its own rule and said `patched`."""

from __future__ import annotations

from pathlib import Path

import sqlite_utils
from click.testing import CliRunner

from kb.db import one, rows
from runner import commands
from runner.hypotheses import add_hypothesis, add_patch
from runner.measure.run import RunOptions, start_run
from tests.runner.runner_target import make_diff, make_workspace, must, queue
from tui import data
from tui.cli import main

ASKERS = ("cli", "tui", "runner")


def conflicting_hypotheses(ws_db: sqlite_utils.Database, diff: str) -> dict[str, int]:
    found = {}
    for asker in ASKERS:
        hid = add_hypothesis(ws_db, f"a fork commit that conflicts ({asker})", status="proposed")
        assert hid is not None
        add_patch(ws_db, hid, diff, author_kind="fork_commit", apply_status="conflict")
        found[asker] = hid
    return found


def test_every_face_approves_a_conflicting_patch_as_approved(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path)
    queue(ws, target, ["speedup"])  # a runnable patch, so a run can start
    db = ws.db()
    ids = conflicting_hypotheses(db, make_diff(target, "noop"))
    plain = add_hypothesis(db, "an applying patch", status="proposed")
    assert plain is not None
    add_patch(db, plain, make_diff(target, "noop"), author_kind="manual", apply_status="ok")

    result = CliRunner().invoke(
        main, ["-w", str(ws.root), "hypotheses", "approve", str(ids["cli"]), str(plain)]
    )
    assert result.exit_code == 0, result.output
    assert data.approve(db, ids["tui"]) == "approved"

    runner = start_run(ws, RunOptions(parallel=1, self_test=False, final=False))
    try:
        commands.send(db, "approve", ids["runner"])
        runner.steering.commands()  # the command handler of the runner's loop, without running a wave
    finally:
        assert runner.lock is not None
        runner.lock.release()

    statuses = {r["id"]: r["status"] for r in rows(db, "SELECT id, status FROM hypotheses")}
    assert {asker: statuses[hid] for asker, hid in ids.items()} == dict.fromkeys(ASKERS, "approved")
    assert statuses[plain] == "patched"  # the same rule: a patch that applies makes it `patched`
    handled = must(one(db, "SELECT status, result FROM commands ORDER BY id DESC LIMIT 1"))
    assert handled["status"] == "done" and handled["result"].endswith("approved")
    logged = rows(db, "SELECT message FROM events WHERE kind = 'hypothesis.approve' ORDER BY id")
    assert [e["message"].rsplit("(", 1)[-1] for e in logged][-3:] == ["cli)", "tui)", f"run {runner.name})"]


def test_a_command_row_with_bad_args_gets_the_answer_send_gives(tmp_path: Path) -> None:
    """Command arguments are checked in one place (runner.commands.checked_args): `send` refuses a
    bad one at the door, and the runner answers a row written some other way (an older client, a
    script with sqlite3) with the very same words."""
    import pytest

    from kb.db import now, transaction
    from kb.errors import UserError
    from kb.store import commands as store

    ws, target = make_workspace(tmp_path)
    queue(ws, target, ["speedup"])
    db = ws.db()
    bad = [
        ("focus", {"text": "   "}),
        ("approval", {"on": "yes"}),
        ("budget", {"usd": -1}),
        ("budget", {"minutes": True}),
        ("prioritize", {"priority": "high"}),
    ]
    said = []
    for kind, args in bad:
        with pytest.raises(UserError) as refused:
            commands.send(db, kind, 1 if kind == "prioritize" else None, args)
        said.append(str(refused.value))
    runner = start_run(ws, RunOptions(parallel=1, self_test=False, final=False))
    try:
        with transaction(db):
            for kind, args in bad:
                store.create(
                    db,
                    {
                        "kind": kind,
                        "target_kind": commands.TARGETS[kind],
                        "target_id": 1 if kind == "prioritize" else None,
                        "args": args,
                        "status": "pending",
                        "created_at": now(),
                    },
                )
        runner.steering.commands()
    finally:
        assert runner.lock is not None
        runner.lock.release()
    answered = rows(db, "SELECT status, result FROM commands ORDER BY id")
    assert [(r["status"], r["result"]) for r in answered] == [("failed", words) for words in said]
