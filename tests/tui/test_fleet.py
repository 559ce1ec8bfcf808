"""The fleet pane: live experiments and log tails; cancel, pause, stop write commands for the
runner; start spawns `autoresearch run --detach` (recorded, and for real)."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.widgets import DataTable, Input, Log, Static

from kb.db import connect, rows
from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, async_test, settle, until
from tests.tui.test_hypotheses import Recorder
from tui.screens.dialogs import ConfirmScreen, StartRunScreen
from tui.screens.fleet import FleetScreen
from tui.screens.log import LogScreen


def commands(root: Path) -> list[dict[str, object]]:
    db = connect(root / "autoresearch.db", migrate_schema=False)
    try:
        return rows(db, "SELECT kind, target_kind, target_id, status FROM commands ORDER BY id")
    finally:
        db.conn.close()


@async_test
async def test_live_experiments_and_the_log_tail(app_on: AppFactory, tui_template: TuiFixture) -> None:
    running = tui_template.live.exp["quant"]
    app = app_on(tui_template.root, pane="fleet")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        line = str(screen.query_one("#run-line", Static).render())
        assert "run r2 (#2) running · measuring · autopilot (openai/gpt-test) · wave 2" in line
        assert "heartbeat 2s ago" in line
        table = screen.query_one("#fleet-exps", DataTable)
        first = [str(c) for c in table.get_row_at(0)]
        assert (
            first[:2] == [str(running), "2"] and "running" in first and "bench" in first and "2m05s" in first
        )
        tail = screen.query_one("#log-tail", Static)
        assert str(tail.render()).splitlines() == ["METRIC tg=41.4", f"experiment {running}: running"]
        workers = screen.query_one("#workers", DataTable)
        assert workers.row_count == 2
        await pilot.press("down")  # the queued retry: its tail follows the cursor
        await until(pilot, lambda: f"#{tui_template.live.exp['retry']}" in str(tail.border_title))
        await pilot.press("up", "l")
        await settle(pilot)
        log = app.screen
        assert isinstance(log, LogScreen)
        await until(pilot, lambda: log.query_one(Log).line_count >= 2, what="the log")
        assert [Path(f).name for f in log.files] == ["bench.log", "build.log"]
        await pilot.press("f")
        await until(pilot, lambda: "build ok" in "\n".join(log.query_one(Log).lines))


@async_test
async def test_cancel_pause_and_stop_write_commands(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    running = tui_template.live.exp["quant"]
    run_id = tui_template.live.run_id
    app = app_on(tui_ws, pane="fleet")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # no: nothing written
        await settle(pilot)
        assert commands(tui_ws) == []
        await pilot.press("x", "y")
        await settle(pilot)
        assert commands(tui_ws) == [
            {"kind": "cancel", "target_kind": "experiment", "target_id": running, "status": "pending"}
        ]
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("S", "y")
        await settle(pilot)
        assert [(c["kind"], c["target_id"]) for c in commands(tui_ws)[1:]] == [
            ("pause", run_id),
            ("stop", run_id),
        ]
        line = str(app.screen.query_one("#run-line", Static).render())
        assert "3 command(s) waiting for the runner" in line
        # A finished experiment cannot be cancelled: nothing is written.
        table = app.screen.query_one("#fleet-exps", DataTable)
        table.move_cursor(row=3)
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen) and len(commands(tui_ws)) == 3


@async_test
async def test_start_run_dialog_spawns_a_detached_runner(app_on: AppFactory, tui_ws: Path) -> None:
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute("UPDATE runs SET status = 'interrupted' WHERE name = 'r2'")  # no runner going
    recorder = Recorder()
    app = app_on(tui_ws, pane="fleet", spawner=recorder)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        assert isinstance(app.screen, StartRunScreen)
        app.screen.query_one("#run-waves", Input).value = "x2"
        await pilot.press("ctrl+s")
        assert "Waves 'x2': must be a whole number" in str(
            app.screen.query_one("#run-error", Static).render()
        )
        app.screen.query_one("#run-waves", Input).value = "2"
        app.screen.query_one("#run-name", Input).value = "night"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: recorder.calls, what="the spawn")
        await pilot.press("R")  # resume the interrupted run
        await until(pilot, lambda: len(recorder.calls) == 2, what="the resume")
    cli = [sys.executable, "-m", "tui.cli", "--workspace", str(tui_ws)]
    assert recorder.calls == [
        [*cli, "run", "--detach", "--json", "--name", "night", "--waves", "2"],
        [*cli, "run", "--detach", "--json", "--resume"],
    ]
