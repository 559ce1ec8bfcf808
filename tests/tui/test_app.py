"""App-wide behaviour: changes by other processes show up (data_version), help and the command
palette, the CLI command, and serving to a browser on localhost."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from textual.widgets import Static

from kb.errors import UserError
from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, async_test, settle, until
from tui.app import make_app
from tui.cli import main
from tui.screens.fleet import FleetScreen
from tui.screens.help import HelpScreen
from tui.screens.hypotheses import HypothesesScreen
from tui.screens.knowledge import KnowledgeScreen
from tui.widgets.common import PagedTable

ROOT = Path(__file__).resolve().parents[2]


def write_from_another_process(root: Path, title: str) -> None:
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from kb.db import connect
        from runner.hypotheses import add_hypothesis
        add_hypothesis(connect(Path({str(root)!r}) / "autoresearch.db"), {title!r}, priority=99)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@async_test
async def test_changes_by_another_process_show_up(app_on: AppFactory, tui_ws: Path) -> None:
    app = app_on(tui_ws, pane="hypotheses", poll_interval=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#hyp-table", PagedTable)
        total = table.page_total
        await pilot.pause(0.3)
        assert app.data_version is None  # nothing changed: nothing reloaded
        write_from_another_process(tui_ws, "Written by another process")
        await until(pilot, lambda: table.page_total == total + 1, what="the new hypothesis")
        assert app.data_version is not None
        assert "Written by another process" in str(table.get_row_at(0)[-1])  # priority 99 first
        # A pane not on screen is marked stale and reloads when shown.
        await pilot.press("3")
        await settle(pilot)
        write_from_another_process(tui_ws, "While the fleet pane was up")
        await until(
            pilot, lambda: app.get_screen_stack("hypotheses")[0].stale, what="the hidden pane marked stale"
        )
        await pilot.press("2")
        await until(pilot, lambda: table.page_total == total + 2, what="the reload on showing")


@async_test
async def test_help_lists_every_panes_keys(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="fleet")
    async with app.run_test(size=(100, 60)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-keys", Static).render())
        for needed in (
            "Approve",
            "Reject",
            "Raise",
            "Cancel",
            "Stop run",
            "Re-decide",
            "Compare",
            "Copy sha",
            "Copy patch",
            "Next page",
            "Path filter",
            "OSC 52",
            "ssh -L 8000:127.0.0.1:8000",
        ):
            assert needed in text, needed
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)


@async_test
async def test_command_palette_reaches_the_actions(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="fleet")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for needed in (
            "Go to History",
            "Start a run",
            "Pause the run",
            "Stop the run",
            "Mine hypotheses",
            "Generate hypotheses",
            "Search the knowledge base",
            "Resume the interrupted run",
        ):
            assert needed in titles
        await pilot.press("ctrl+p")
        await pilot.press(*"Go to Hypo")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, HypothesesScreen), what="the palette's jump")


@async_test
async def test_quitting_stops_the_poller_at_once(tui_template: TuiFixture) -> None:
    app = make_app(tui_template.root, poll_interval=1.0, fleet_interval=1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        started = time.monotonic()
    assert time.monotonic() - started < 0.9  # not a whole poll interval


def test_make_app_needs_a_workspace_database(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no workspace database"):
        make_app(tmp_path)
    (tmp_path / "autoresearch.db").write_bytes(b"")
    with pytest.raises(UserError, match="--pane nowhere"):
        make_app(tmp_path, pane="nowhere")


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--workspace", str(tmp_path), "tui"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "not a workspace" in result.output
    result = CliRunner().invoke(main, ["tui", "--pane", "nowhere"])
    assert result.exit_code == 2 and "nowhere" in result.output
    help_text = CliRunner().invoke(main, ["tui", "--help"]).output
    assert "--serve" in help_text and "127.0.0.1" in help_text and "token" in help_text


# Serving to a browser (token, Origin and Host checks): tests/tui/test_serve.py.


def test_start_up_path_stays_light() -> None:
    """The console paints before the database layer loads: sqlite_utils pulls in pandas when it is
    installed (most of a second), pydantic the config; both wait for the first worker."""
    probe = (
        "import json, sys\nimport tui.app, tui.cli.tui_cmd, tui.screens.fleet\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert not loaded & {"sqlite_utils", "pandas", "pydantic", "litellm", "sky", "pygments", "git"}


def test_light_constants_match_kb() -> None:
    from kb.db import DB_NAME
    from tui import data

    assert data.DB_NAME == DB_NAME


@async_test
async def test_a_failing_worker_becomes_one_notification(
    app_on: AppFactory, tui_template: TuiFixture
) -> None:
    app = app_on(tui_template.root, pane="knowledge")
    shown: list[tuple[str, str]] = []
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        app.notify = lambda message, **kw: shown.append((str(message), kw.get("severity", "")))  # type: ignore[method-assign]
        app.open_evidence(10**6)
        await settle(pilot)
        assert shown == [("evidence 1000000: no such evidence id", "error")]
        assert isinstance(app.screen, KnowledgeScreen)  # nothing opened, nothing crashed
