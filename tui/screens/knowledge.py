"""The knowledge pane: papers (with a reader), fork commits (with diffs), the fusion inventory
matrix and live search. The detail views its rows open are tui/screens/evidence.py's."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from kb.errors import UserError
from tui import data
from tui.format import clip, count
from tui.messages import (
    ForksLoaded,
    InventoryLoaded,
    PageLoaded,
    SearchCompleted,
)
from tui.screens.base import AppScreen
from tui.screens.evidence import CommitScreen, FusionScreen, PaperScreen
from tui.text import Text
from tui.widgets.common import PagedTable, cell, fit_columns, right
from tui.widgets.knowledge import fusion_cell, snippet_text

TABS = ("papers", "forks", "inventory", "search")


class KnowledgeScreen(AppScreen):
    PANE = "knowledge"
    AUTO_FOCUS = "#papers-table"
    BINDINGS = [
        Binding("p", "show_tab('papers')", "Papers"),
        Binding("f", "show_tab('forks')", "Forks"),
        Binding("i", "show_tab('inventory')", "Inventory"),
        Binding("slash", "show_tab('search')", "Search"),
        Binding("n", "next_fork", "Next fork", show=False),
        Binding("u", "toggle_upstreamed", "Hide upstreamed", show=False),
        Binding("e", "edit_filter", "Path filter", show=False),
        Binding("c", "copy_id", "Copy id"),
        Binding("down", "leave_input", "Results", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forks: list[data.Fork] = []
        self.fork_index = -1  # -1: every fork
        self.hide_upstreamed = False
        self.matrix: data.FusionMatrix | None = None
        self.hits: list[Any] = []
        self._search_timer: Timer | None = None
        self._filter_timer: Timer | None = None
        self.loaded_tabs: set[str] = set()

    def compose_body(self) -> ComposeResult:
        with TabbedContent(initial="papers", id="knowledge-tabs"):
            with TabPane("Papers", id="papers"):
                yield PagedTable(
                    "Papers",
                    [("Title", None), ("Site", 16), ("Published", 10), ("Passages", 8)],
                    id="papers-table",
                )
            with TabPane("Forks", id="forks"):
                yield Input(
                    placeholder="filter commits by path (e.g. ggml-cpu/)", id="commit-filter", compact=True
                )
                yield PagedTable(
                    "Commits",
                    [("Fork", 12), ("Sha", 10), ("Subject", None), ("Files", 5), ("+/-", 9), ("Up", 2)],
                    id="commits-table",
                )
            with TabPane("Inventory", id="inventory"):
                yield DataTable(id="matrix", cursor_type="cell")
                yield Static(id="matrix-detail")
            with TabPane("Search", id="search"):
                yield Input(
                    placeholder="search papers, commits, fusions, notes", id="search-input", compact=True
                )
                yield DataTable(id="search-results", cursor_type="row")

    # --- loading ---------------------------------------------------------------------------------

    def is_loaded(self) -> bool:
        return self.query_one("#papers-table", PagedTable).loaded

    def active_tab(self) -> str:
        return self.query_one(TabbedContent).active or "papers"

    def reload(self) -> None:
        tab = self.active_tab()
        self.loaded_tabs = {tab}
        if tab == "papers":
            self.load_papers(self.query_one("#papers-table", PagedTable).page_offset)
        elif tab == "forks":
            self.refresh_commits(self.query_one("#commits-table", PagedTable).page_offset)
        elif tab == "inventory":
            self.load_matrix()
        elif tab == "search":
            query = self.query_one("#search-input", Input).value
            if query.strip():
                self.run_search(query)

    @on(TabbedContent.TabActivated)
    def tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id or ""
        if tab not in self.loaded_tabs:
            self.reload()
        self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        if tab == "search":
            self.query_one("#search-input", Input).focus()
        elif tab == "papers":
            self.query_one("#papers-table").focus()
        elif tab == "forks":
            self.query_one("#commits-table").focus()
        elif tab == "inventory":
            self.query_one("#matrix").focus()

    def action_show_tab(self, tab: str) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == tab:
            self._focus_tab(tab)
        else:
            tabs.active = tab

    @work(thread=True, group="papers", exclusive=True, exit_on_error=False)
    def load_papers(self, offset: int) -> None:
        with self.store.session() as db:
            page = data.papers(db, offset, self.autoapp.page_size)
        self.post_message(PageLoaded("papers", page))

    def refresh_commits(self, offset: int) -> None:
        path = self.query_one("#commit-filter", Input).value
        self.load_commits(offset, path, self.fork_index, self.hide_upstreamed)

    @work(thread=True, group="commits", exclusive=True, exit_on_error=False)
    def load_commits(self, offset: int, path: str, fork_index: int, hide_upstreamed: bool) -> None:
        with self.store.session() as db:
            forks = data.forks(db)
            fork_id = forks[fork_index].id if 0 <= fork_index < len(forks) else None
            page = data.commits(
                db,
                fork_id=fork_id,
                path=path,
                hide_upstreamed=hide_upstreamed,
                offset=offset,
                limit=self.autoapp.page_size,
            )
        self.post_message(ForksLoaded(forks))
        self.post_message(PageLoaded("commits", page))

    @work(thread=True, group="inventory", exclusive=True, exit_on_error=False)
    def load_matrix(self, select_id: int | None = None) -> None:
        with self.store.session() as db:
            matrix = data.fusion_matrix(db)
        self.post_message(InventoryLoaded(matrix, select_id))

    @work(thread=True, group="search", exclusive=True, exit_on_error=False)
    def run_search(self, query: str) -> None:
        try:
            with self.store.session() as db:
                hits = data.search(db, query)
        except UserError as exc:  # an empty or punctuation-only query: say so in place
            self.post_message(SearchCompleted(query, [], str(exc)))
            return
        self.post_message(SearchCompleted(query, hits))

    # --- showing ----------------------------------------------------------------------------------

    def on_page_loaded(self, message: PageLoaded) -> None:
        if message.table == "papers":
            table = self.query_one("#papers-table", PagedTable)
            table.show_page(
                message.page,
                [
                    (
                        str(p.id),
                        [
                            cell(p.title),
                            cell(p.site or "-"),
                            cell(p.published or "-"),
                            right(count(p.passages)),
                        ],
                    )
                    for p in message.page.rows
                ],
            )
        elif message.table == "commits":
            table = self.query_one("#commits-table", PagedTable)
            fork = self.forks[self.fork_index].name if 0 <= self.fork_index < len(self.forks) else "all forks"
            table.note = f"· {fork}" + (" · upstreamed hidden" if self.hide_upstreamed else "")
            table.show_page(
                message.page,
                [
                    (
                        str(c.evidence_id),
                        [
                            cell(c.fork, "grey70"),
                            cell(c.sha[:10], "yellow"),
                            cell(c.subject, "grey50" if c.upstreamed else ""),
                            right(c.files),
                            cell(f"+{c.insertions}/-{c.deletions}"),
                            cell("✓" if c.upstreamed else "", "green"),
                        ],
                    )
                    for c in message.page.rows
                ],
            )

    def on_forks_loaded(self, message: ForksLoaded) -> None:
        self.forks = message.forks

    def on_inventory_loaded(self, message: InventoryLoaded) -> None:
        self.matrix = message.matrix
        table = self.query_one("#matrix", DataTable)
        old = table.cursor_coordinate
        table.clear(columns=True)
        spec: list[tuple[str, int | None]] = [("Fusion", None)] + [
            (b, max(4, len(b))) for b in message.matrix.backends
        ]
        width = min(34, max(12, max((len(r.ops) for r in message.matrix.rows), default=12)))
        for label, w in fit_columns(spec, self.size.width or self.app.size.width):
            table.add_column(label, width=width if label == "Fusion" else w, key=label)
        for row in message.matrix.rows:
            table.add_row(
                cell(row.ops, "bold" if row.missing else ""),
                *(fusion_cell(row.cells[b].state) for b in message.matrix.backends),
                key=row.ops,
            )
        gaps = sum(1 for r in message.matrix.rows if r.missing)
        table.border_title = (
            f"Fusion inventory: {len(message.matrix.rows)} fusions × "
            f"{len(message.matrix.backends)} backends, "
            f"{gaps} with gaps"
        )
        if message.select_id is not None:
            found = message.matrix.row_of(message.select_id)
            if found is not None:
                table.move_cursor(row=found, column=0, animate=False)
        elif table.row_count:
            table.move_cursor(row=min(old.row, table.row_count - 1), column=old.column, animate=False)
        self.show_matrix_detail()

    @on(DataTable.CellHighlighted, "#matrix")
    def show_matrix_detail(self) -> None:
        detail = self.query_one("#matrix-detail", Static)
        table = self.query_one("#matrix", DataTable)
        if self.matrix is None or not self.matrix.rows or not table.row_count:
            detail.update(Text("no fusion inventory yet: autoresearch kb inventory", style="grey50"))
            return
        row = self.matrix.rows[min(table.cursor_row, len(self.matrix.rows) - 1)]
        out = Text(no_wrap=False)
        out.append(row.ops, style="bold")
        for backend, c in row.cells.items():
            if c.state == "fused":
                out.append(f"\n  {backend}: fused", style="green")
                out.append(f" {c.where}" if c.where else "")
            elif c.state == "gap":
                out.append(f"\n  {backend}: GAP", style="bold red")
                out.append(f" (evidence {c.evidence_id})")
        detail.update(out)

    @on(DataTable.CellSelected, "#matrix")
    def matrix_selected(self) -> None:
        table = self.query_one("#matrix", DataTable)
        if self.matrix is None or not self.matrix.rows:
            return
        row = self.matrix.rows[table.cursor_row]
        column = table.cursor_column - 1
        chosen: int | None = None
        if 0 <= column < len(self.matrix.backends):
            chosen = row.cells[self.matrix.backends[column]].evidence_id
        chosen = chosen or (row.gap_ids[0] if row.gap_ids else None)
        chosen = chosen or next((c.evidence_id for c in row.cells.values() if c.evidence_id), None)
        if chosen is not None:
            self.app.push_screen(FusionScreen(chosen))

    def on_search_completed(self, message: SearchCompleted) -> None:
        if message.query != self.query_one("#search-input", Input).value:
            return  # typed on since
        table = self.query_one("#search-results", DataTable)
        table.clear(columns=True)
        width = self.size.width or self.app.size.width
        for label, w in fit_columns(
            [("Kind", 6), ("Id", 6), ("Title", max(16, width // 4)), ("Snippet", None)], width
        ):
            table.add_column(label, width=w, key=label)
        self.hits = message.hits
        for hit in message.hits:
            title = hit.title if hit.source in (hit.title, "") else f"{hit.title} · {hit.source}"
            table.add_row(
                cell(hit.kind, "cyan"),
                right(hit.id, "grey50"),
                cell(title),
                snippet_text(hit.snippet),
                key=str(hit.id),
            )
        table.border_title = message.error or f"{len(message.hits)} results for {clip(message.query, 40)!r}"

    # --- input -----------------------------------------------------------------------------------

    @on(Input.Changed, "#search-input")
    def search_changed(self, event: Input.Changed) -> None:
        if self._search_timer is not None:
            self._search_timer.stop()
        query = event.value
        if not query.strip():
            self.query_one("#search-results", DataTable).clear()
            return
        self._search_timer = self.set_timer(0.15, lambda: self.run_search(query))

    @on(Input.Submitted, "#search-input")
    def search_submitted(self) -> None:
        self.query_one("#search-results").focus()

    @on(Input.Changed, "#commit-filter")
    def filter_changed(self) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_timer = self.set_timer(0.25, lambda: self.refresh_commits(0))

    @on(Input.Submitted, "#commit-filter")
    def filter_submitted(self) -> None:
        self.query_one("#commits-table").focus()

    def action_leave_input(self) -> None:
        """Down from the search or filter box goes to its results."""
        focused = self.focused.id if self.focused is not None else None
        if focused == "search-input":
            self.query_one("#search-results").focus()
        elif focused == "commit-filter":
            self.query_one("#commits-table").focus()

    def action_edit_filter(self) -> None:
        self.action_show_tab("forks")
        self.query_one("#commit-filter", Input).focus()

    def action_next_fork(self) -> None:
        if self.active_tab() != "forks":
            return
        self.fork_index = self.fork_index + 1 if self.fork_index + 1 < len(self.forks) else -1
        self.refresh_commits(0)

    def action_toggle_upstreamed(self) -> None:
        if self.active_tab() != "forks":
            return
        self.hide_upstreamed = not self.hide_upstreamed
        self.refresh_commits(0)

    @on(PagedTable.PageRequested)
    def page_requested(self, event: PagedTable.PageRequested) -> None:
        if event.table.id == "papers-table":
            self.load_papers(event.offset)
        elif event.table.id == "commits-table":
            self.refresh_commits(event.offset)

    @on(DataTable.RowSelected, "#papers-table")
    def paper_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(PaperScreen(int(event.row_key.value)))

    @on(DataTable.RowSelected, "#commits-table")
    def commit_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(CommitScreen(int(event.row_key.value)))

    @on(DataTable.RowSelected, "#search-results")
    def hit_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.autoapp.open_evidence(int(event.row_key.value))

    def action_copy_id(self) -> None:
        tab = self.active_tab()
        if tab == "search":
            table = self.query_one("#search-results", DataTable)
            if table.row_count:
                key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
                self.autoapp.copy(str(key), f"evidence id {key}")
        elif tab == "forks":
            commits = self.query_one("#commits-table", PagedTable)
            key = commits.current_key()
            if key is not None:
                self.autoapp.copy(key, f"evidence id {key}")
        elif tab == "inventory" and self.matrix is not None and self.matrix.rows:
            table = self.query_one("#matrix", DataTable)
            row = self.matrix.rows[table.cursor_row]
            ids = row.gap_ids or tuple(c.evidence_id for c in row.cells.values() if c.evidence_id)
            if ids:
                self.autoapp.copy(str(ids[0]), f"evidence id {ids[0]}")
