"""A fleet backend is one module and one registration (runner/fleet/registry.py): a tiny one,
registered by this test alone (the local fleet under a name of its own), is reached from the
config, from `autoresearch run --backend` and from the console's start dialog, none of which
names it; an unknown name is one line naming the registered ones, and nothing is written."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner, Result
from textual.widgets import Input, Static

from kb.db import connect, insert, now, one, rows
from kb.workspace import Workspace
from runner.fleet import BackendInfo, configured, make_fleet, names, preflight, register, registry
from runner.fleet.local import LocalFleet
from tests.runner.runner_target import make_diff, make_workspace, must
from tests.tui.helpers import AppFactory, async_test, settle, until
from tests.tui.test_hypotheses import Recorder
from tui.screens.dialogs import StartRunScreen

FAST = {"min_pairs": 6, "batch_pairs": 2, "max_pairs": 6, "self_test_pairs": 6}


class TinyFleet(LocalFleet):
    """The local fleet under another name: what a backend module holds."""

    backend = "tiny"
    preflights: ClassVar[list[Path]] = []

    @classmethod
    def preflight(cls, ws: Workspace) -> None:
        cls.preflights.append(ws.root)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> Iterator[BackendInfo]:
    """The one registration line, for this test only (the registry is restored after it)."""
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    TinyFleet.preflights.clear()
    yield register(BackendInfo("tiny", "the local fleet under another name", __name__, "TinyFleet"))


def invoke(ws: Workspace, *args: str) -> Result:
    from tui.cli import main

    return CliRunner(mix_stderr=False).invoke(main, ["--workspace", str(ws.root), *args])


def test_the_config_names_a_registered_backend(tiny: BackendInfo, tmp_path: Path) -> None:
    assert names() == ("local", "skypilot", "tiny")
    ws, _ = make_workspace(tmp_path, fleet={"backend": "tiny", "parallel": 1})
    assert configured(ws.settings) == tiny
    preflight(ws.settings.fleet.backend, ws)
    assert TinyFleet.preflights == [ws.root]
    db = ws.db()
    run_id = insert(db, "runs", {"name": "r", "status": "running", "started_at": now()})
    fleet = make_fleet(ws.settings.fleet.backend, ws, db, run_id, 1)
    assert isinstance(fleet, TinyFleet) and fleet.resources_override() is None
    [worker] = fleet.up()  # a workers row under the new name (m011 dropped the CHECK on it)
    assert worker.backend == "tiny" and fleet.workers() == [worker]
    fleet.down()


def test_run_backend_offers_and_runs_the_registered_backend(tiny: BackendInfo, tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, policy=FAST, fleet={"parallel": 1})
    assert "[local|skypilot|tiny]" in invoke(ws, "run", "--help").stdout
    patch = tmp_path / "slow.patch"
    patch.write_text(make_diff(target, "slowdown"))
    assert invoke(ws, "queue", "add", str(patch), "--title", "Slower").exit_code == 0
    result = invoke(ws, "run", "--backend", "tiny", "--skip-self-test", "--no-final", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished"
    assert [e["status"] for e in summary["experiments"] if e["kind"] == "candidate"] == ["discarded"]
    assert TinyFleet.preflights == [ws.root]
    db = ws.db()
    assert must(one(db, "SELECT backend FROM runs"))["backend"] == "tiny"
    assert {r["backend"] for r in rows(db, "SELECT backend FROM workers")} == {"tiny"}
    assert {r["backend"] for r in rows(db, "SELECT backend FROM jobs")} == {"tiny"}


def test_an_unknown_backend_is_one_line_naming_the_registered_ones(tiny: BackendInfo, tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, fleet={"backend": "nope"})
    patch = tmp_path / "fast.patch"
    patch.write_text(make_diff(target, "speedup"))
    assert invoke(ws, "queue", "add", str(patch), "--title", "Faster").exit_code == 0
    for command in (["run", "--skip-validate"], ["validate"]):
        result = invoke(ws, *command)
        assert result.exit_code == 1, result.stdout + result.stderr
        assert result.stderr.strip() == "Error: fleet.backend 'nope': must be one of local, skypilot, tiny"
    assert must(one(ws.db(), "SELECT count(*) AS n FROM runs"))["n"] == 0
    assert not (ws.root / "validation.json").exists()
    bad = invoke(ws, "run", "--backend", "nope")
    assert bad.exit_code == 2 and "'nope' is not one of 'local', 'skypilot', 'tiny'" in bad.stderr


@async_test
async def test_the_start_dialog_offers_the_registered_backend(
    tiny: BackendInfo, app_on: AppFactory, tui_ws: Path
) -> None:
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute("UPDATE runs SET status = 'interrupted' WHERE name = 'r2'")  # no runner going
    recorder = Recorder()
    app = app_on(tui_ws, pane="fleet", spawner=recorder)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        assert isinstance(app.screen, StartRunScreen)
        field = app.screen.query_one("#run-backend", Input)
        assert field.placeholder == "local, skypilot or tiny (default: config)"
        field.value = "nope"
        await pilot.press("ctrl+s")
        error = str(app.screen.query_one("#run-error", Static).render())
        assert error == "Backend 'nope': must be local, skypilot or tiny"
        field.value = "tiny"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: recorder.calls, what="the spawn")
    cli = [sys.executable, "-m", "tui.cli", "--workspace", str(tui_ws)]
    assert recorder.calls == [[*cli, "run", "--detach", "--json", "--backend", "tiny"]]
