"""Widgets every pane uses: the pane bar, paged tables, diff views and cell helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import JustifyMethod, RenderableType
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static

from tui.data import Page
from tui.format import RICH_STATUS_COLOURS, page_caption
from tui.panes import PANES
from tui.text import Text, inert_lines


def cell(value: Any, style: str = "", *, justify: JustifyMethod = "left") -> Text:
    """A table cell as Rich Text: user text is never parsed as markup (`[CUDA] fix` stays)."""
    text = "" if value is None else str(value)
    return Text(" ".join(text.split()), style=style, no_wrap=True, overflow="ellipsis", justify=justify)


def right(value: Any, style: str = "") -> Text:
    return cell(value, style, justify="right")


def status_cell(status: str | None) -> Text:
    if not status:
        return cell("-", "grey50")
    return cell(status, RICH_STATUS_COLOURS.get(status, ""))


class PaneBar(Static):
    """One line: the panes (the active one highlighted), a breadcrumb, and the workspace name."""

    def __init__(self, active: str, trail: str = "", workspace: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.active = active
        self.trail = trail
        self.workspace = workspace

    def set_trail(self, trail: str) -> None:
        self.trail = trail
        self.update(self.render_bar())

    def on_mount(self) -> None:
        self.update(self.render_bar())

    def render_bar(self) -> Text:
        bar = Text(no_wrap=True, overflow="ellipsis")
        for pane in PANES:
            key, mode, label = pane.key, pane.name, pane.label
            if mode == self.active:
                bar.append(f" {key} {label} ", style="bold reverse")
            else:
                bar.append(f" {key} ", style="bold")
                bar.append(f"{label} ", style="")
        if self.trail:
            bar.append(" › ", style="grey50")
            bar.append(self.trail, style="italic")
        if self.workspace:
            bar.append(f"  [{self.workspace}]", style="grey50")
        bar.append("  ? help · q quit", style="grey50")
        return bar


class PagedTable(DataTable[Any]):
    """A DataTable holding one page of a larger result; `[` and `]` ask for the previous/next page.

    The owning screen loads pages (in a worker) and calls `show_page`; the caption with the row
    range sits in the border title. Refreshing keeps the cursor on the same row key.
    """

    BINDINGS = [
        Binding("right_square_bracket", "next_page", "Next page", show=False),
        Binding("left_square_bracket", "previous_page", "Prev page", show=False),
    ]

    @dataclass
    class PageRequested(Message):
        table: PagedTable
        offset: int

        @property
        def control(self) -> PagedTable:
            return self.table

    def __init__(self, label: str, columns: Sequence[tuple[str, int | None]] = (), **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.label = label
        self.column_spec: list[tuple[str, int | None]] = list(columns)
        self.page_offset = 0
        self.page_limit = 1
        self.page_total = 0
        self.note = ""
        self.loaded = False

    def show_page(
        self, page: Page[Any], rows: Sequence[tuple[str, Sequence[RenderableType]]], select: str | None = None
    ) -> None:
        """Replace the rows; the cursor goes to `select`, else stays on the row it was on."""
        keep = select or self.current_key()
        index = self.cursor_row
        self.clear(columns=bool(self.column_spec))
        if self.column_spec:
            for label, width in fit_columns(self.column_spec, self.size.width or self.app.size.width):
                self.add_column(label, width=width, key=label)
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self.page_offset, self.page_limit, self.page_total = page.offset, page.limit, page.total
        self.loaded = True
        keys = [key for key, _ in rows]
        if keep is not None and keep in keys:
            index = keys.index(keep)
        if rows:
            self.move_cursor(row=min(max(index, 0), len(rows) - 1), animate=False)
        self.update_caption()

    def update_caption(self) -> None:
        caption = page_caption(self.label, self.page_offset, self.row_count, self.page_total)
        if self.page_total > self.page_limit:
            caption += "  [ ] page"
        # A Text, not a markup string: the note may quote a fork's name or a filter's words.
        self.border_title = Text(caption + (f"  {self.note}" if self.note else ""))

    def current_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # the cursor may sit past the rows while they are replaced
            return None
        return key

    def action_next_page(self) -> None:
        if self.page_offset + self.row_count < self.page_total:
            self.post_message(self.PageRequested(self, self.page_offset + self.page_limit))

    def action_previous_page(self) -> None:
        if self.page_offset > 0:
            self.post_message(self.PageRequested(self, max(0, self.page_offset - self.page_limit)))


def fit_columns(spec: Sequence[tuple[str, int | None]], width: int) -> list[tuple[str, int]]:
    """Column widths for a table `width` cells wide: fixed ones as given, the flexible (None) ones
    share the rest (a cell is padded by one on each side)."""
    fixed = sum(w for _, w in spec if w is not None)
    flexible = [label for label, w in spec if w is None]
    # Two cells spare: the vertical scrollbar, and no horizontal one from rounding.
    room = max(8 * len(flexible), width - fixed - 2 * len(spec) - 2)
    share = room // len(flexible) if flexible else 0
    return [(label, w if w is not None else share) for label, w in spec]


class DiffView(Static):
    """A unified diff, syntax-highlighted (Pygments' diff lexer through Rich)."""

    def __init__(self, diff: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.diff = diff

    def on_mount(self) -> None:
        self.show(self.diff)

    def show(self, diff: str) -> None:
        self.diff = diff
        if not diff.strip():
            self.update(Text("(no diff stored)", style="grey50"))
            return
        from rich.syntax import Syntax  # Pygments: imported on first use, not at start-up

        self.update(
            Syntax(inert_lines(diff), "diff", theme="ansi_dark", word_wrap=False, background_color="default")
        )


def key_values(pairs: Sequence[tuple[str, Any]], *, width: int = 12) -> Text:
    """Aligned `label  value` lines; values are plain text (never markup)."""
    out = Text()
    for i, (label, value) in enumerate(pairs):
        if i:
            out.append("\n")
        out.append(f"{label:<{width}}", style="bold")
        if isinstance(value, Text):
            out.append_text(value)
        else:
            out.append("-" if value is None else str(value))
    return out
