"""The console's view of the autopilot: the run's phase and stop reason, the research log with
the steering notes in force, the keys that steer the research (rows in the commands table), the
start dialog's autopilot switch, and where each hypothesis came from."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from textual.widgets import Checkbox, DataTable, Input, Static

from kb.db import connect, rows
from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, async_test, settle, until
from tests.tui.test_hypotheses import Recorder
from tui.screens.dialogs import NoteScreen, StartRunScreen
from tui.screens.fleet import FleetScreen
from tui.screens.hypotheses import HypothesesScreen, HypothesisScreen
from tui.widgets.common import PagedTable
from tui.widgets.fleet import ResearchLog


def commands(root: Path) -> list[dict[str, object]]:
    db = connect(root / "autoresearch.db", migrate_schema=False)
    try:
        found = rows(db, "SELECT kind, target_kind, target_id, args, status FROM commands ORDER BY id")
    finally:
        db.conn.close()
    return [{**c, "args": json.loads(c["args"]) if c["args"] else None} for c in found]


def text_of(screen: FleetScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


@async_test
async def test_run_line_and_research_log(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="fleet")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert "running · measuring · autopilot (openai/gpt-test) · wave 2" in text_of(screen, "#run-line")
        log = screen.query_one("#research-log", ResearchLog)
        assert log.display
        steering = text_of(screen, "#steering-line")
        assert "focus: the AVX2 matmul kernels" in steering and "avoid: -" in steering
        assert "approval: off (config)" in steering
        table = screen.query_one("#research", DataTable)
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        # Newest first: phase, mined, generated, patched, repaired, ported, repeats, failures, cost, calls.
        assert cells[0][:10] == ["2", "-", "1", "1", "1", "-", "-", "-", "$0.0040", "1"]
        assert cells[1][:10] == ["1", "1", "2", "2", "-", "-", "1", "1", "$0.0123", "2"]
        assert cells[1][10] == "generate: one answer was not JSON"
        assert str(table.border_title) == (
            "Research: 2 phases, $0.0163 in model calls · f focus, v avoid, a approval"
        )


@async_test
async def test_a_finished_run_says_why_it_stopped(app_on: AppFactory, tui_ws: Path) -> None:
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute(
        "UPDATE runs SET status = 'finished', stop_reason = 'plateau', ended_at = heartbeat_at "
        "WHERE name = 'r2'"
    )
    db.conn.close()
    app = app_on(tui_ws, pane="fleet")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        line = text_of(screen, "#run-line")
        assert "stopped: plateau (autopilot.patience waves in a row kept nothing)" in line
        assert "measuring" not in line  # the phase only while the run is live
        assert "autopilot" in line


@async_test
async def test_focus_avoid_and_approval_keys_write_commands(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    run_id = tui_template.live.run_id
    app = app_on(tui_ws, pane="fleet")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        assert isinstance(app.screen, NoteScreen)
        await pilot.press("escape")  # cancelled: nothing written
        await settle(pilot)
        assert commands(tui_ws) == []
        await pilot.press("f")
        assert isinstance(app.screen, NoteScreen)
        await pilot.press("enter")  # an empty note is refused in the dialog
        assert "write a note first" in str(app.screen.query_one("#note-error", Static).render())
        app.screen.query_one("#note-text", Input).value = "  quantised   matmul  "
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("v")
        app.screen.query_one("#note-text", Input).value = "the build system"
        await pilot.press("ctrl+s")
        await settle(pilot)
        await pilot.press("a")  # approval is off (the config's default): turn it on
        await settle(pilot)
        assert commands(tui_ws) == [
            {
                "kind": "focus",
                "target_kind": "run",
                "target_id": run_id,
                "args": {"text": "quantised matmul"},
                "status": "pending",
            },
            {
                "kind": "avoid",
                "target_kind": "run",
                "target_id": run_id,
                "args": {"text": "the build system"},
                "status": "pending",
            },
            {
                "kind": "approval",
                "target_kind": "run",
                "target_id": run_id,
                "args": {"on": True},
                "status": "pending",
            },
        ]
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert "3 command(s) waiting for the runner" in text_of(screen, "#run-line")


@async_test
async def test_approval_toggles_from_what_the_run_holds(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute("UPDATE runs SET steering = ? WHERE name = 'r2'", [json.dumps({"approval": True})])
    db.conn.close()
    app = app_on(tui_ws, pane="fleet")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert "approval: on" in text_of(screen, "#steering-line")
        assert "(config)" not in text_of(screen, "#steering-line")
        await pilot.press("a")
        await settle(pilot)
    assert [(c["kind"], c["args"]) for c in commands(tui_ws)] == [("approval", {"on": False})]


@async_test
async def test_notes_for_a_run_no_runner_drives_wait_for_the_next_run(
    app_on: AppFactory, tui_ws: Path
) -> None:
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute("UPDATE runs SET status = 'interrupted' WHERE name = 'r2'")
    db.conn.close()
    app = app_on(tui_ws, pane="fleet")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        app.screen.query_one("#note-text", Input).value = "fewer threads"
        await pilot.press("enter")
        await settle(pilot)
    assert [(c["kind"], c["target_id"], c["args"]) for c in commands(tui_ws)] == [
        ("focus", None, {"text": "fewer threads"})
    ]


@async_test
async def test_the_start_dialog_asks_for_the_autopilot(app_on: AppFactory, tui_ws: Path) -> None:
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute("UPDATE runs SET status = 'interrupted' WHERE name = 'r2'")
    db.conn.close()
    recorder = Recorder()
    app = app_on(tui_ws, pane="fleet", spawner=recorder)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        assert isinstance(app.screen, StartRunScreen)
        app.screen.query_one("#run-autopilot", Checkbox).value = True
        app.screen.query_one("#run-waves", Input).value = "3"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: recorder.calls, what="the spawn")
    cli = [sys.executable, "-m", "tui.cli", "--workspace", str(tui_ws)]
    assert recorder.calls == [[*cli, "run", "--detach", "--json", "--waves", "3", "--autopilot"]]


@async_test
async def test_hypotheses_show_their_wave_and_repeats(app_on: AppFactory, tui_template: TuiFixture) -> None:
    first, second = tui_template.proposed
    measured = next(iter(tui_template.history.hyp.values()))
    app = app_on(tui_template.root, pane="hypotheses")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HypothesesScreen)
        table = screen.query_one("#hyp-table", PagedTable)
        keys = [r.key.value for r in table.ordered_rows]
        labels = [str(c.label) for c in table.ordered_columns]
        wave, title = labels.index("Wave"), labels.index("Title")
        row = [str(c) for c in table.get_row_at(keys.index(str(first)))]
        assert row[wave] == "1" and row[title] == "Tile attention for the L2 cache"
        row = [str(c) for c in table.get_row_at(keys.index(str(second)))]
        assert row[wave] == "-" and row[title] == f"↻#{measured} Fuse ADD and RMS_NORM on the CPU"
        table.move_cursor(row=keys.index(str(second)))
        await until(
            pilot,
            lambda: (
                f"a repeat of #{measured}: already measured here"
                in str(screen.query_one("#hyp-preview", Static).render())
            ),
            what="the preview",
        )
        table.move_cursor(row=keys.index(str(first)))
        await until(
            pilot,
            lambda: (
                "proposed after the post-mortem of wave 1"
                in str(screen.query_one("#hyp-preview", Static).render())
            ),
            what="the preview",
        )
        app.push_screen(HypothesisScreen(second))  # the detail view says it too
        await settle(pilot)
        await until(
            pilot,
            lambda: f"a repeat of #{measured}" in str(app.screen.query_one("#hyp-head", Static).render()),
            what="the detail",
        )


def test_the_research_log_in_the_data_layer(tui_ws: Path, tui_template: TuiFixture) -> None:
    from kb.db import log_event
    from tui import data
    from tui.widgets.fleet import research_cells

    run_id = tui_template.live.run_id
    store = data.Store(tui_ws)
    with store.session() as db:
        log_event(db, "research_started", "research phase 3", run_id=run_id, data={"phase": 3})
        log_event(db, "research_done", "elsewhere", run_id=tui_template.history.run_id, data={"phase": 9})
        snap = data.fleet(db, approval_default=True)
    assert snap.run is not None and snap.run.autopilot and snap.run.phase == "measuring"
    assert snap.run.model == "openai/gpt-test" and snap.run.stop_reason is None
    assert [(p.number, p.done) for p in snap.research] == [(3, False), (2, True), (1, True)]
    assert snap.research[1].repaired == 1 and snap.research[2].failures == (
        "generate: one answer was not JSON",
    )
    assert snap.steering == data.RunSteering(("the AVX2 matmul kernels",), (), None)
    assert snap.approval is True  # the run set none: the config's default decides
    running = [str(c) for c in research_cells(snap.research[0])]
    assert running[0] == "3" and running[-1] == "researching…"


@async_test
async def test_the_budget_key_sends_the_new_budget(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    from tui.screens.dialogs import BudgetScreen

    run_id = tui_template.live.run_id
    app = app_on(tui_ws, pane="fleet")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("b")
        assert isinstance(app.screen, BudgetScreen)
        await pilot.press("ctrl+s")  # nothing given: refused in the dialog
        error = app.screen.query_one("#budget-error", Static)
        assert "give minutes, dollars or both" in str(error.render())
        app.screen.query_one("#budget-usd", Input).value = "-3"
        await pilot.press("ctrl+s")
        assert "USD '-3': must be positive" in str(error.render())
        app.screen.query_one("#budget-usd", Input).value = "2.5"
        app.screen.query_one("#budget-minutes", Input).value = "90"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, FleetScreen)
    assert commands(tui_ws) == [
        {
            "kind": "budget",
            "target_kind": "run",
            "target_id": run_id,
            "args": {"minutes": 90.0, "usd": 2.5},
            "status": "pending",
        }
    ]


@async_test
async def test_the_palette_steers_the_research_from_any_pane(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    """The focus, avoid, approval and budget steering are commands of the palette too: from the
    knowledge pane one goes to the fleet pane and opens its dialog there."""
    app = app_on(tui_ws, pane="knowledge")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in (
            "Focus the research",
            "Avoid in the research",
            "Approval on/off",
            "Change the run's budget",
        ):
            assert title in titles
        focus = next(c for c in app.get_system_commands(app.screen) if c.title == "Focus the research")
        await focus.callback()
        await settle(pilot)
        assert isinstance(app.screen, NoteScreen)
        app.screen.query_one("#note-text", Input).value = "fewer threads"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, FleetScreen)
    assert [(c["kind"], c["target_id"], c["args"]) for c in commands(tui_ws)] == [
        ("focus", tui_template.live.run_id, {"text": "fewer threads"})
    ]
