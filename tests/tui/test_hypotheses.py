"""The hypotheses pane: every steering key writes what the CLI would, evidence links open their entry,
and mining/generating start real (or recorded) `autoresearch hypotheses` processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kb.db import connect, one, rows
from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, async_test, settle, until
from tui.screens.evidence import CommitScreen, PaperScreen
from tui.screens.hypotheses import HypothesesScreen, HypothesisScreen
from tui.widgets.common import PagedTable


def hyp(root: Path, hid: int) -> dict[str, object]:
    db = connect(root / "autoresearch.db", migrate_schema=False)
    try:
        found = one(db, "SELECT status, priority FROM hypotheses WHERE id = ?", [hid])
        assert found is not None
        return found
    finally:
        db.conn.close()


@async_test
async def test_steering_keys_write_to_the_database(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    first, second = tui_template.proposed
    app = app_on(tui_ws, pane="hypotheses")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#hyp-table", PagedTable)
        await pilot.press("s")  # status filter: proposed
        await settle(pilot)
        assert [r.key.value for r in table.ordered_rows] == [str(first), str(second)]
        await pilot.press("a")
        await settle(pilot)
        assert hyp(tui_ws, first)["status"] == "approved"
        # The approved one left the `proposed` view; the cursor is on the other one.
        assert table.current_key() == str(second)
        await pilot.press("r")
        await settle(pilot)
        assert hyp(tui_ws, second)["status"] == "rejected"
        await pilot.press("s")  # approved
        await settle(pilot)
        assert table.current_key() == str(first)
        await pilot.press("plus", "plus", "minus")
        await settle(pilot)
        assert hyp(tui_ws, first)["priority"] == 4.0
        await pilot.press("c")
        assert app.clipboard == str(first)
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    logged = [
        r["kind"] for r in rows(db, "SELECT kind FROM events WHERE kind LIKE 'hypothesis.%' ORDER BY id")
    ]
    assert logged == [
        "hypothesis.approve",
        "hypothesis.reject",
        "hypothesis.prioritize",
        "hypothesis.prioritize",
        "hypothesis.prioritize",
    ]


@async_test
async def test_detail_evidence_links_open_the_cited_entries(
    app_on: AppFactory, tui_template: TuiFixture
) -> None:
    first = tui_template.proposed[0]
    app = app_on(tui_template.root, pane="hypotheses")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HypothesesScreen)
        table = screen.query_one("#hyp-table", PagedTable)
        table.move_cursor(row=[r.key.value for r in table.ordered_rows].index(str(first)))
        await pilot.press("enter")
        await settle(pilot)
        detail = app.screen
        assert isinstance(detail, HypothesisScreen) and detail.detail is not None
        assert [e.id for e in detail.detail.evidence] == [
            tui_template.passages[31],
            tui_template.commits["tile"],
        ]
        await pilot.press("tab", "enter")  # the first evidence row: the paper passage
        await settle(pilot)
        reader = app.screen
        assert isinstance(reader, PaperScreen) and reader.PANE == "hypotheses"
        passage = reader.current_passage()
        assert passage is not None and passage.id == tui_template.passages[31]
        await pilot.press("escape")
        await pilot.press("down", "enter")  # the fork commit
        await settle(pilot)
        assert isinstance(app.screen, CommitScreen)
        assert app.screen.commit is not None and app.screen.commit.sha == "1" * 40
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, HypothesesScreen)


@async_test
async def test_approving_from_the_detail_view(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    fuse = tui_template.history.hyp["fuse"]
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    db.execute("UPDATE hypotheses SET status = 'proposed' WHERE id = ?", [fuse])
    app = app_on(tui_ws, pane="hypotheses")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        app.push_screen(HypothesisScreen(fuse))
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert hyp(tui_ws, fuse)["status"] == "patched"  # it has a patch that applies
        await pilot.press("p")
        assert app.clipboard.startswith("diff --git a/src/norm.c")


@async_test
async def test_mine_runs_the_real_miner_in_its_own_process(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    app = app_on(tui_ws, pane="hypotheses")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#hyp-table", PagedTable)
        before = table.page_total
        await pilot.press("m")
        await until(pilot, lambda: app.processes, what="the miner to start")
        # The miner's new hypotheses appear (the app reloads when the process ends).
        await until(pilot, lambda: table.page_total > before, timeout=30, what="mined hypotheses")
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    mined = rows(db, "SELECT origin FROM hypotheses WHERE id > ?", [max(tui_template.proposed)])
    assert mined and {m["origin"] for m in mined} <= {"miner:gap", "miner:fork"}
    log = next((tui_ws / "logs").glob("tui-mine-*.log"))
    assert '"gap_added"' in log.read_text()


class Recorder:
    """A spawner that records argv and runs a harmless stand-in (the LLM is not called in tests)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
        self.calls.append(list(argv))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            return subprocess.Popen([sys.executable, "-c", "print('{\"added\": []}')"], stdout=log, cwd=cwd)


@async_test
async def test_generate_starts_the_generator_command(app_on: AppFactory, tui_template: TuiFixture) -> None:
    recorder = Recorder()
    app = app_on(tui_template.root, pane="hypotheses", spawner=recorder)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await until(pilot, lambda: recorder.calls, what="the generator")
    assert recorder.calls == [
        [
            sys.executable,
            "-m",
            "tui.cli",
            "--workspace",
            str(tui_template.root),
            "hypotheses",
            "generate",
            "--json",
        ]
    ]
