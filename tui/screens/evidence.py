"""The detail views an evidence link opens, from any pane: a paper in the reader (passage by
passage), a fork commit with its diff, a fusion site of the inventory, and any other evidence."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, ListItem, ListView, Static

from tui import data
from tui.format import clip
from tui.messages import (
    CommitLoaded,
    EvidenceLoaded,
    InventoryLoaded,
    PaperOpened,
)
from tui.screens.base import DetailScreen
from tui.text import Text
from tui.widgets.common import DiffView, cell, key_values, right
from tui.widgets.knowledge import fusion_cell


class PaperScreen(DetailScreen):
    """The reader: a paper's passages in order, a page at a time; opens at a cited passage."""

    PANE = "knowledge"
    BINDINGS = [
        Binding("c", "copy_id", "Copy id"),
        Binding("o", "open_url", "Open URL"),
        Binding("right_square_bracket", "page(1)", "Next page", show=False),
        Binding("left_square_bracket", "page(-1)", "Prev page", show=False),
    ]
    PAGE = 50

    def __init__(self, paper_id: int, select_id: int | None = None, pane: str = "knowledge") -> None:
        super().__init__()
        self.PANE = pane
        self.paper_id = paper_id
        self.select_id = select_id
        self.passage_offset = 0
        self.paper: data.Paper | None = None
        self.page: data.Page[data.Passage] | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="paper-head")
        yield ListView(id="passages")

    def reload(self) -> None:
        self.load(self.passage_offset, self.select_id)

    @work(thread=True, group="paper", exclusive=True, exit_on_error=False)
    def load(self, offset: int, select_id: int | None) -> None:
        with self.store.session() as db:
            paper = data.paper(db, self.paper_id)
            if select_id is not None:
                _, index = data.passage_index(db, select_id)
                offset = index // self.PAGE * self.PAGE
            page = data.passages(db, self.paper_id, offset, self.PAGE)
        self.post_message(PaperOpened(paper, page, select_id))

    async def on_paper_opened(self, message: PaperOpened) -> None:
        self.paper, self.page = message.paper, message.page
        self.passage_offset = message.page.offset
        self.set_trail(clip(message.paper.title, 50))
        head = Text()
        head.append(message.paper.title, style="bold")
        meta = " · ".join(
            x for x in (message.paper.authors, message.paper.site, message.paper.published) if x
        )
        if meta:
            head.append("\n" + meta, style="grey70")
        first = message.page.offset + 1
        head.append(
            f"\npassages {first}–{message.page.offset + len(message.page.rows)} of {message.page.total}"
            + ("  [ ] page" if message.page.total > self.PAGE else ""),
            style="grey50",
        )
        self.query_one("#paper-head", Static).update(head)
        view = self.query_one("#passages", ListView)
        keep = view.index
        await view.clear()
        items = []
        for p in message.page.rows:
            text = Text()
            text.append(f"§{p.position if p.position is not None else '-'}", style="bold cyan")
            if p.section:
                text.append(f"  {p.section}", style="bold")
            text.append(f"  evidence {p.id}\n", style="grey50")
            text.append(p.body)
            items.append(ListItem(Static(text), id=f"passage-{p.id}"))
        await view.extend(items)
        ids = [p.id for p in message.page.rows]
        if message.select_id in ids:
            view.index = ids.index(message.select_id)
            self.select_id = None
        elif items:
            view.index = min(keep or 0, len(items) - 1)
        view.focus()
        if view.highlighted_child is not None:
            view.scroll_to_widget(view.highlighted_child, animate=False, top=True)

    def current_passage(self) -> data.Passage | None:
        view = self.query_one("#passages", ListView)
        if self.page is None or view.index is None or view.index >= len(self.page.rows):
            return None
        return self.page.rows[view.index]

    def action_copy_id(self) -> None:
        passage = self.current_passage()
        if passage is not None:
            self.autoapp.copy(str(passage.id), f"evidence id {passage.id}")

    def action_open_url(self) -> None:
        if self.paper is not None and self.paper.url:
            self.app.open_url(self.paper.url)

    def action_page(self, step: int) -> None:
        if self.page is None:
            return
        offset = self.page.offset + step * self.PAGE
        if 0 <= offset < self.page.total:
            self.load(offset, None)


class CommitScreen(DetailScreen):
    """A fork commit: its message, files and syntax-highlighted diff."""

    BINDINGS = [
        Binding("c", "copy_sha", "Copy sha"),
        Binding("p", "copy_patch", "Copy patch"),
        Binding("o", "open_url", "Open URL", show=False),
    ]

    def __init__(self, evidence_id: int, pane: str = "knowledge") -> None:
        super().__init__()
        self.PANE = pane
        self.evidence_id = evidence_id
        self.commit: data.CommitDetail | None = None

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="commit-body"):
            yield Static(id="commit-head")
            yield DiffView(id="commit-diff")

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="commit", exclusive=True, exit_on_error=False)
    def load(self) -> None:
        with self.store.session() as db:
            found = data.commit(db, self.evidence_id)
        self.post_message(CommitLoaded(found))

    def on_commit_loaded(self, message: CommitLoaded) -> None:
        c = self.commit = message.commit
        self.set_trail(f"{c.fork} {c.sha[:10]}")
        head = Text()
        head.append(c.subject, style="bold")
        if c.upstreamed:
            head.append("  ✓ upstreamed", style="bold green")
        head.append("\n")
        head.append_text(
            key_values(
                [
                    ("fork", c.fork),
                    ("commit", c.sha),
                    ("author", f"{c.author or '-'}  {c.authored_at or ''}"),
                    ("evidence", c.evidence_id),
                    (
                        "files",
                        f"{len(c.files)} (+{c.insertions} -{c.deletions}): {', '.join(c.files[:6])}"
                        + (" …" if len(c.files) > 6 else ""),
                    ),
                ],
                width=10,
            )
        )
        body = c.message.strip()
        if body and body != c.subject:
            head.append("\n\n" + body, style="grey70")
        if c.diff_truncated:
            head.append("\n(diff truncated when ingested)", style="yellow")
        self.query_one("#commit-head", Static).update(head)
        self.query_one("#commit-diff", DiffView).show(c.diff)

    def action_copy_sha(self) -> None:
        if self.commit is not None:
            self.autoapp.copy(self.commit.sha, f"sha {self.commit.sha[:10]}")

    def action_copy_patch(self) -> None:
        if self.commit is not None and self.commit.diff:
            self.autoapp.copy(self.commit.diff, f"patch ({len(self.commit.diff.splitlines())} lines)")

    def action_open_url(self) -> None:
        c = self.commit
        if c is not None and c.fork_url and c.fork_url.startswith("https://github.com/"):
            self.app.open_url(f"{c.fork_url.removesuffix('.git')}/commit/{c.sha}")


class FusionScreen(DetailScreen):
    """One row of the fusion inventory: which backend fuses it where, and which lack it."""

    BINDINGS = [Binding("c", "copy_id", "Copy id"), Binding("y", "copy_where", "Copy file:line")]

    def __init__(self, evidence_id: int, pane: str = "knowledge") -> None:
        super().__init__()
        self.PANE = pane
        self.evidence_id = evidence_id
        self.row: data.FusionRow | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="fusion-head")
        yield DataTable(id="fusion-cells", cursor_type="row")
        yield Static(id="fusion-body")

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="fusion", exclusive=True, exit_on_error=False)
    def load(self) -> None:
        with self.store.session() as db:
            matrix = data.fusion_matrix(db)
            found = data.evidence(db, self.evidence_id)
        self.post_message(InventoryLoaded(matrix, self.evidence_id))
        self.post_message(EvidenceLoaded(found))

    def on_inventory_loaded(self, message: InventoryLoaded) -> None:
        index = message.matrix.row_of(self.evidence_id)
        if index is None:
            return
        self.row = row = message.matrix.rows[index]
        self.set_trail(row.ops)
        table = self.query_one("#fusion-cells", DataTable)
        table.clear(columns=True)
        table.add_columns("Backend", "State", "Where", "Evidence")
        for backend, c in row.cells.items():
            table.add_row(
                cell(backend, "bold"),
                fusion_cell(c.state),
                cell(c.where or "-"),
                right(c.evidence_id or "-"),
                key=backend,
            )
        for i, c in enumerate(row.cells.values()):
            if c.evidence_id == self.evidence_id:
                table.move_cursor(row=i, animate=False)
        table.focus()

    def on_evidence_loaded(self, message: EvidenceLoaded) -> None:
        ev = message.evidence
        head = Text()
        head.append(f"{ev.title}", style="bold")
        head.append(
            f"  ({ev.evidence_kind}, evidence {ev.id}, {ev.source.get('title') or ev.source.get('name')})",
            style="grey50",
        )
        self.query_one("#fusion-head", Static).update(head)
        self.query_one("#fusion-body", Static).update(Text(ev.body, style="grey70"))

    def _current(self) -> data.FusionCell | None:
        if self.row is None:
            return None
        table = self.query_one("#fusion-cells", DataTable)
        cells = list(self.row.cells.values())
        return cells[table.cursor_row] if 0 <= table.cursor_row < len(cells) else None

    def action_copy_id(self) -> None:
        c = self._current()
        chosen = c.evidence_id if c is not None and c.evidence_id else self.evidence_id
        self.autoapp.copy(str(chosen), f"evidence id {chosen}")

    def action_copy_where(self) -> None:
        c = self._current()
        if c is not None and c.where:
            self.autoapp.copy(c.where, c.where)


class EvidenceScreen(DetailScreen):
    """Any evidence item in full (notes, single ops, reflections)."""

    BINDINGS = [Binding("c", "copy_id", "Copy id")]

    def __init__(self, evidence_id: int, pane: str = "knowledge") -> None:
        super().__init__()
        self.PANE = pane
        self.evidence_id = evidence_id

    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="evidence-body")

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="evidence", exclusive=True, exit_on_error=False)
    def load(self) -> None:
        with self.store.session() as db:
            found = data.evidence(db, self.evidence_id)
        self.post_message(EvidenceLoaded(found))

    def on_evidence_loaded(self, message: EvidenceLoaded) -> None:
        ev = message.evidence
        self.set_trail(f"evidence {ev.id}")
        out = Text()
        out.append(ev.title or ev.ref, style="bold")
        out.append("\n")
        out.append_text(
            key_values(
                [
                    ("kind", ev.evidence_kind),
                    ("source", ev.source.get("title") or ev.source.get("name") or ev.source.get("url")),
                    ("ref", ev.ref),
                    ("section", ev.section),
                ],
                width=9,
            )
        )
        out.append("\n\n" + ev.body)
        self.query_one("#evidence-body", Static).update(out)

    def action_copy_id(self) -> None:
        self.autoapp.copy(str(self.evidence_id), f"evidence id {self.evidence_id}")
