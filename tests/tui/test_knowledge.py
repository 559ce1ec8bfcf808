"""The knowledge pane, driven with keys: papers and the reader, fork commits, the inventory, search."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Input, ListView, Static

from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, async_test, settle, until
from tui.screens.evidence import CommitScreen, FusionScreen, PaperScreen
from tui.screens.knowledge import KnowledgeScreen
from tui.widgets.common import PagedTable


def keys(table: DataTable) -> list[str]:  # type: ignore[type-arg]
    return [str(r.key.value) for r in table.ordered_rows]


@async_test
async def test_papers_open_in_the_reader_and_page(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="knowledge")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#papers-table", PagedTable)
        assert keys(table) == [str(tui_template.paper), str(tui_template.history.sources["paper"])]
        await pilot.press("enter")
        await settle(pilot)
        reader = app.screen
        assert isinstance(reader, PaperScreen)
        assert reader.page is not None and reader.page.total == 60 and len(reader.page.rows) == 50
        await pilot.press("down", "c")
        assert app.clipboard == str(tui_template.passages[1])  # OSC 52 copy of the evidence id
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert reader.page.offset == 50 and len(reader.query_one(ListView)) == 10
        await pilot.press("escape")
        assert isinstance(app.screen, KnowledgeScreen)


@async_test
async def test_forks_filter_by_path_and_show_the_diff(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="knowledge")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        screen = app.screen
        commits = screen.query_one("#commits-table", PagedTable)
        assert commits.page_total == 4
        await pilot.press("e", *"vec.h")
        await until(pilot, lambda: commits.page_total == 1, what="the path filter")
        assert keys(commits) == [str(tui_template.commits["simd"])]
        screen.query_one("#commit-filter", Input).value = ""
        await until(pilot, lambda: commits.page_total == 4, what="the filter cleared")
        commits.focus()
        await pilot.press("n")  # the first fork only (ik_llama.cpp)
        await until(pilot, lambda: commits.page_total == 1, what="one fork")
        await pilot.press("n", "u")  # llamafile, upstreamed hidden
        await until(
            pilot, lambda: commits.page_total == 2 and "upstreamed hidden" in str(commits.border_title)
        )
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, CommitScreen) and app.screen.commit is not None
        sha = app.screen.commit.sha
        await pilot.press("c")
        assert app.clipboard == sha
        await pilot.press("p")
        assert app.clipboard == app.screen.commit.diff and app.clipboard.startswith("diff --git")


@async_test
async def test_inventory_matrix_highlights_gaps(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="knowledge")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        matrix = app.screen.query_one("#matrix", DataTable)
        assert keys(matrix) == ["ADD+RMS_NORM", "RMS_NORM+MUL", "UNARY:SILU+MUL"]
        cells = [str(c) for c in matrix.get_row("ADD+RMS_NORM")]
        assert cells == ["ADD+RMS_NORM", "GAP", "●", "GAP", "●"]
        detail = str(app.screen.query_one("#matrix-detail", Static).render())
        assert "cuda: fused ggml/src/ggml-cuda/ggml-cuda.cu:2990" in detail
        assert f"cpu: GAP (evidence {tui_template.gaps['cpu:ADD+RMS_NORM']})" in detail
        await pilot.press("right", "enter")  # the cpu cell of ADD+RMS_NORM
        await settle(pilot)
        assert isinstance(app.screen, FusionScreen)
        assert app.screen.evidence_id == tui_template.gaps["cpu:ADD+RMS_NORM"]
        await pilot.press("c")
        assert app.clipboard == str(tui_template.gaps["cpu:ADD+RMS_NORM"])


@async_test
async def test_live_search_jumps_to_the_entry(app_on: AppFactory, tui_template: TuiFixture) -> None:
    app = app_on(tui_template.root, pane="hypotheses")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("slash")  # from any pane
        await settle(pilot)
        assert isinstance(app.screen, KnowledgeScreen)
        await pilot.press(*"rescaling")
        results = app.screen.query_one("#search-results", DataTable)
        await until(pilot, lambda: results.row_count == 30, what="30 passages mention rescaling")
        await pilot.press(*" tile")  # narrowed as one types
        await until(pilot, lambda: "rescaling tile" in str(results.border_title))
        first = int(keys(results)[0])
        await pilot.press("down", "enter")
        await settle(pilot)
        reader = app.screen
        assert isinstance(reader, PaperScreen)
        view = reader.query_one(ListView)
        assert view.highlighted_child is not None and view.highlighted_child.id == f"passage-{first}"
        await pilot.press("escape")
        # A commit hit opens the diff view.
        search = app.screen.query_one("#search-input", Input)
        search.value = "AVX2"
        await until(pilot, lambda: results.row_count == 1 and "'AVX2'" in str(results.border_title))
        results.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, CommitScreen)
        assert app.screen.evidence_id == tui_template.commits["simd"]
        await pilot.press("escape")
        search.value = '"'  # nothing searchable: said in place, no crash
        await until(pilot, lambda: "nothing to search for" in str(results.border_title))


@async_test
async def test_a_huge_reader_is_paged(app_on: AppFactory, tui_template: TuiFixture, tmp_path: Path) -> None:
    """The reader and tables never load a whole table: a page of 3 here."""
    app = app_on(tui_template.root, pane="knowledge", page_size=1)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#papers-table", PagedTable)
        assert table.row_count == 1 and table.page_total == 2
        assert "Papers 1–1 of 2" in str(table.border_title)
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert keys(table) == [str(tui_template.history.sources["paper"])]
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert keys(table) == [str(tui_template.paper)]
