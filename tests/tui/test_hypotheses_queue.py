"""The Hypotheses pane on a queue of 1,250 mined hypotheses: pages, the order key, the status key and
the filter bar show what `autoresearch hypotheses list` shows (one query: kb.store.queue)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from kb.db import one
from kb.store.queue import QueueFilter, queue_page
from tests.runner.queue_support import MinedQueue, copy_queue
from tests.tui.helpers import AppFactory, async_test, settle, until
from tui.screens.hypotheses import HypothesesScreen
from tui.widgets.common import PagedTable


def keys(table: PagedTable) -> list[int]:
    return [int(r.key.value) for r in table.ordered_rows if r.key.value is not None]


@async_test
async def test_paging_sorting_and_filtering_1250(
    app_on: AppFactory, queue_template: MinedQueue, tmp_path: Path
) -> None:
    ws = copy_queue(queue_template, tmp_path / "ws")
    db = ws.db()
    app = app_on(ws.root, pane="hypotheses")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HypothesesScreen)
        table = screen.query_one("#hyp-table", PagedTable)
        size = app.page_size
        expected = queue_page(db, QueueFilter(), limit=size)
        assert table.page_total == 1250 and keys(table) == [r.id for r in expected.rows]
        assert "by rank" in str(table.border_title)
        await pilot.press("right_square_bracket")  # next page
        await settle(pilot)
        assert table.page_offset == size
        assert keys(table) == [r.id for r in queue_page(db, QueueFilter(), offset=size, limit=size).rows]
        await pilot.press("o")  # order: priority
        await settle(pilot)
        assert table.page_offset == 0 and "by priority" in str(table.border_title)
        assert keys(table) == [r.id for r in queue_page(db, QueueFilter(sort="priority"), limit=size).rows]
        await pilot.press("o", "o", "o")  # recent, effect, back to rank
        await settle(pilot)
        assert keys(table) == [r.id for r in expected.rows]

        await pilot.press("f")  # the filter bar
        assert app.focused is not None and app.focused.id == "hyp-filter"
        await pilot.press(*"backend:cpu vectorise")
        await until(pilot, lambda: table.page_total == 300, what="the filtered queue")
        await settle(pilot)
        await pilot.press("enter")  # back to the table
        assert app.focused is table
        wanted = queue_page(db, QueueFilter(backend="cpu", search="vectorise"), limit=size)
        assert keys(table) == [r.id for r in wanted.rows]
        assert "backend cpu, search vectorise" in str(table.border_title)
        # Each is one of a family of two: the preview says which runs first.
        preview = screen.query_one("#hyp-preview", Static)
        await until(
            pilot, lambda: "fork commits on the same functions" in str(preview.content), what="preview"
        )

        # The status key narrows the filtered queue; a bad filter value says why and keeps the last.
        await pilot.press("s")  # proposed
        await settle(pilot)
        assert table.page_total == 300
        for _ in range(5):  # approved, rejected, patched, unpatchable, needs_port
            await pilot.press("s")
            await settle(pilot)
        assert table.page_total == 0
        await pilot.press("s")  # any status
        await pilot.press("f", *" status:maybe")
        await until(pilot, lambda: "status 'maybe'" in str(table.border_title), what="the filter error")
        await settle(pilot)
        await pilot.press("escape")
        assert app.focused is table

        # Steering from the filtered page: `+` puts the hypothesis first in the whole queue.
        first = table.current_key()
        assert first is not None
        await pilot.press("plus")
        await settle(pilot)
    row = one(db, "SELECT priority, priority_set FROM hypotheses WHERE id = ?", [int(first)])
    assert row is not None and row["priority_set"] == 1
    assert queue_page(db, QueueFilter(), limit=1).rows[0].id == int(first)
