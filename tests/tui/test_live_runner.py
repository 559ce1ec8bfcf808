"""The TUI against a real runner process on a small C target: it starts the run detached, the
approval it writes makes the next wave, the cancel it sends stops the running experiment, and the
runner goes on after the TUI quits; reopened, the TUI shows how the run went."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from textual.widgets import Checkbox, DataTable, Input, Static

from kb.db import one as kb_one
from runner.hypotheses import add_hypothesis, add_patch
from tests.runner.runner_target import live_processes_under, make_diff, make_workspace, queue, title
from tests.tui.helpers import AppFactory, async_test, settle, until
from tui.screens.dialogs import StartRunScreen
from tui.screens.fleet import FleetScreen
from tui.screens.hypotheses import HypothesesScreen
from tui.widgets.common import PagedTable

pytestmark = pytest.mark.slow


def one(db: sqlite_utils.Database, sql: str, params: Any = ()) -> dict[str, Any]:
    """A row that must exist (the test fails on its absence, not on a None)."""
    return kb_one(db, sql, params) or {}


def wait_for(condition: object, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@async_test
async def test_steering_a_live_runner(app_on: AppFactory, tmp_path: Path) -> None:
    ws, target = make_workspace(
        tmp_path,
        fleet={"parallel": 1},
        timeouts={"bench": 60},
        hypotheses={"require_approval": True},
        policy={"min_pairs": 3, "batch_pairs": 1, "max_pairs": 3},
    )
    hang = queue(ws, target, ["hang"])["hang"]  # approved: the first wave runs it, and it hangs
    db = ws.db()
    later = add_hypothesis(db, title("noop"), status="proposed")
    assert later is not None
    later_patch = add_patch(db, later, make_diff(target, "noop"), author_kind="manual", author="noop.patch")

    app = app_on(ws.root, pane="fleet", clock=time.time, poll_interval=0.2, fleet_interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        dialog = app.screen
        assert isinstance(dialog, StartRunScreen)
        dialog.query_one("#run-waves", Input).value = "3"
        dialog.query_one("#run-skip-self-test", Checkbox).value = True
        await pilot.press("ctrl+s")
        run = await until(pilot, lambda: one(db, "SELECT * FROM runs"), timeout=60, what="the run")
        running = await until(
            pilot,
            lambda: one(db, "SELECT * FROM experiments WHERE patch_id = ? AND phase = 'checks'", [hang]),
            timeout=90,
            what="the hanging candidate's checks (they run before the pairs)",
        )
        # The fleet pane follows it live.
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        exps = fleet.query_one("#fleet-exps", DataTable)
        await until(
            pilot, lambda: str(running["id"]) in [r.key.value for r in exps.ordered_rows], what="its row"
        )
        assert "heartbeat" in str(fleet.query_one("#run-line", Static).render())

        # Approve the waiting hypothesis in the hypotheses pane.
        await pilot.press("2")
        await settle(pilot)
        queue_screen = app.screen
        assert isinstance(queue_screen, HypothesesScreen)
        table = queue_screen.query_one("#hyp-table", PagedTable)
        table.move_cursor(row=[r.key.value for r in table.ordered_rows].index(str(later)))
        await pilot.press("a")
        await until(
            pilot,
            lambda: one(db, "SELECT status FROM hypotheses WHERE id = ?", [later])["status"] == "patched",
        )

        # Cancel the hanging experiment from the fleet pane: the runner stops it.
        await pilot.press("3")
        await settle(pilot)
        exps.move_cursor(row=[r.key.value for r in exps.ordered_rows].index(str(running["id"])))
        await settle(pilot)
        await pilot.press("x", "y")
        await until(
            pilot,
            lambda: (
                one(db, "SELECT status FROM experiments WHERE id = ?", [running["id"]])["status"]
                == "cancelled"
            ),
            timeout=60,
            what="the runner to cancel it",
        )
        assert one(db, "SELECT status, result FROM commands WHERE kind = 'cancel'") == {
            "status": "done",
            "result": f"experiment {running['id']} cancelled",
        }
    # The TUI has quit; the runner has not.
    os.kill(run["pid"], 0)
    assert os.getsid(run["pid"]) != os.getsid(0)

    # The approval made the next wave: the approved patch is measured, then the run ends.
    measured = wait_for(
        lambda: one(db, "SELECT e.*, w.number FROM experiments e JOIN waves w ON w.id = e.wave_id "
                        "WHERE e.patch_id = ?", [later_patch]),
        timeout=120,
        what="an experiment of the approved patch",
    )  # fmt: skip
    first_wave = one(db, "SELECT w.number FROM experiments e JOIN waves w ON w.id = e.wave_id WHERE e.id = ?",
                     [running["id"]])  # fmt: skip
    assert first_wave is not None and measured["number"] > first_wave["number"]  # type: ignore[index]
    wait_for(
        lambda: one(db, "SELECT status FROM runs WHERE id = ?", [run["id"]])["status"] == "finished",
        timeout=180,
        what="the run to finish",
    )

    # Reopened, the TUI shows where the run got to.
    app = app_on(ws.root, pane="fleet", clock=time.time)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        line = str(app.screen.query_one("#run-line", Static).render())
        assert f"run {run['name']}" in line and "finished" in line
        rows = {r.key.value: [str(c) for c in app.screen.query_one("#fleet-exps", DataTable).get_row(r.key)]
                for r in app.screen.query_one("#fleet-exps", DataTable).ordered_rows}  # fmt: skip
        assert "cancelled" in rows[str(running["id"])]
        assert str(measured["id"]) in rows  # type: ignore[index]
    assert wait_for(lambda: not live_processes_under(tmp_path), timeout=30, what="every process to end")
