"""The history pane: runs, experiments with decision, effect and interval, the chart, a side-by-side
comparison, and re-deciding a run under another policy (saved as re-analyses)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Input, Static

from kb.db import connect, rows
from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, async_test, settle
from tui.data import MetricSeries
from tui.screens.compare import CompareScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.history import HistoryScreen, RedecideScreen
from tui.widgets.common import PagedTable
from tui.widgets.history import MetricChart, chart_lines


@async_test
async def test_runs_experiments_and_chart(app_on: AppFactory, tui_template: TuiFixture) -> None:
    h = tui_template.history
    app = app_on(tui_template.root, pane="history")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        runs = screen.query_one("#runs", DataTable)
        assert [r.key.value for r in runs.ordered_rows] == [str(tui_template.live.run_id), str(h.run_id)]
        await pilot.press("down")  # the finished run r1
        await settle(pilot)
        table = screen.query_one("#experiments", PagedTable)
        assert table.page_total == 16 and "Experiments of r1" in str(table.border_title)
        fuse = [str(c) for c in table.get_row(str(h.exp["fuse"]))]
        assert fuse[2:5] == ["kept", "keep", fuse[4]] and fuse[4].startswith("+")
        assert fuse[5].startswith("[+") and fuse[-1] == "★ Fuse RMS_NORM and MUL on the CPU"
        hang = [str(c) for c in table.get_row(str(h.exp["hang"]))]
        assert hang[2] == "crashed:timeout"
        chart = screen.query_one(MetricChart)
        assert chart.series is not None and chart.series.metric == "tg" and len(chart.series.points) == 12
        assert "tg per experiment (higher is better)" in str(chart.render())


@async_test
async def test_compare_two_experiments(app_on: AppFactory, tui_template: TuiFixture) -> None:
    h = tui_template.history
    app = app_on(tui_template.root, pane="history")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("down")
        await settle(pilot)
        table = app.screen.query_one("#experiments", PagedTable)
        table.focus()
        keys = [r.key.value for r in table.ordered_rows]
        table.move_cursor(row=keys.index(str(h.exp["fuse"])))
        await pilot.press("v")  # nothing marked yet: a hint, no screen
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("space")
        await settle(pilot)
        assert str(table.get_row(str(h.exp["fuse"]))[0]).startswith("▶")
        table.move_cursor(row=keys.index(str(h.exp["prefetch"])))
        await pilot.press("v")
        await settle(pilot)
        compare = app.screen
        assert isinstance(compare, CompareScreen)
        left = str(compare.query_one("#summary-0", Static).render())
        right = str(compare.query_one("#summary-1", Static).render())
        assert "Fuse RMS_NORM and MUL" in left and "★ winner" in left and "verdict    keep" in left
        assert "Prefetch 64 floats" in right and "verdict    discard" in right
        assert "pairs of tg (A baseline, B candidate)" in left and "tg " in right
        await pilot.press("c")
        assert app.clipboard == h.winners["fuse"].commit_sha
        await pilot.press("p")
        assert app.clipboard.startswith("diff --git a/src/norm.c")


@async_test
async def test_redecide_lists_flips_and_saves_them(
    app_on: AppFactory, tui_ws: Path, tui_template: TuiFixture
) -> None:
    h = tui_template.history
    app = app_on(tui_ws, pane="history")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("down")
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RedecideScreen)
        assert screen.query_one("#min-effect", Input).value == "1"  # the run's own policy
        assert "0 of 5 decided experiments flip" in str(
            screen.query_one("#redecide-summary", Static).render()
        )
        screen.query_one("#min-effect", Input).value = "30"
        screen.query_one("#min-effect", Input).focus()
        await pilot.press("enter")
        await settle(pilot)
        summary = str(screen.query_one("#redecide-summary", Static).render())
        assert "flip under min effect 30.0%" in summary
        flips = {i.experiment_id for i in screen.result.flips}
        assert h.exp["fuse"] in flips
        first = [str(c) for c in screen.query_one("#redecide-table", DataTable).get_row_at(0)]
        assert first[2] in ("keep", "inconclusive") and first[3].startswith("→ ")
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert screen.result.saved == 5
    db = connect(tui_ws / "autoresearch.db", migrate_schema=False)
    saved = rows(db, "SELECT experiment_id, origin, is_final FROM decisions WHERE origin = 'redecide'")
    assert len(saved) == 5 and all(d["is_final"] == 0 for d in saved)
    # The run's own statuses stand.
    assert rows(db, "SELECT status FROM experiments WHERE id = ?", [h.exp["fuse"]]) == [{"status": "kept"}]


def test_chart_lines_draw_bars_baselines_and_misses() -> None:
    from tui.data import ChartPoint

    series = MetricSeries(
        "tg",
        "higher",
        [
            ChartPoint(1, "kept", 44.0, 41.0),
            ChartPoint(2, "discarded", 39.0, 41.0),
            ChartPoint(3, "crashed", None, None),
        ],
    )
    lines = [line.plain for line in chart_lines(series, 40, 6)]
    assert len(lines) == 6 and lines[0].startswith("tg per experiment")
    plot = lines[1:5]
    assert plot[0][8] == "█" or plot[0][8] in "▁▂▃▄▅▆▇"  # the kept one reaches the top row
    assert plot[-1][16:19] == "×××"  # no measurement (bars are 3 cells wide when there is room)
    assert any("┄" in row for row in plot)  # the baseline mark above the discarded bar
    assert lines[-1].split() == ["#1", "#3"]
    crowded = [line.plain for line in chart_lines(series, 12, 6)]  # one cell per experiment
    assert crowded[-2][8] == "█" and crowded[-2][10] == "×"
    assert [line.plain for line in chart_lines(None, 40, 3)][0] == "loading…"
