"""The hypotheses pane: the queue with its steering keys, and a hypothesis's detail view.

The queue is the one `autoresearch hypotheses list` shows (kb.store.queue), a page at a time:
`s` cycles the status, `o` the order (rank, priority, recent, effect), `f` edits the filter bar
(`status:S outcome:O origin:O path:P backend:B` and words to search), `[`/`]` page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from kb.errors import UserError
from tui import data
from tui.format import clip, pct
from tui.messages import HypothesisLoaded, HypothesisSteered, PageLoaded
from tui.screens.base import AppScreen
from tui.text import Text
from tui.widgets.common import DiffView, PagedTable, cell, fit_columns, key_values, right, status_cell

if TYPE_CHECKING:
    from kb.store.queue import QueueFilter

STATUS_FILTERS: tuple[str | None, ...] = (None, *data.HYPOTHESIS_STATUSES)
FILTER_HINT = "filter (f): status: outcome: origin: path: backend: and words to search"


class SteeringScreen(AppScreen):
    """A screen that steers one hypothesis: approve, reject, raise or lower its priority."""

    BINDINGS = [
        Binding("a", "approve", "Approve"),
        Binding("r", "reject", "Reject"),
        Binding("plus,equals_sign", "priority(1)", "Raise"),
        Binding("minus", "priority(-1)", "Lower"),
    ]

    def selected_hypothesis(self) -> int | None:
        raise NotImplementedError

    def action_approve(self) -> None:
        self._steer("approve")

    def action_reject(self) -> None:
        self._steer("reject")

    def action_priority(self, delta: float) -> None:
        self._steer("priority", delta)

    def _steer(self, action: str, delta: float = 0.0) -> None:
        hid = self.selected_hypothesis()
        if hid is not None:
            self.steer(action, hid, delta)

    @work(thread=True, group="hyp-steer", exit_on_error=False)
    def steer(self, action: str, hypothesis_id: int, delta: float = 0.0) -> None:
        with self.store.session() as db:
            if action == "approve":
                summary = f"hypothesis {hypothesis_id}: {data.approve(db, hypothesis_id)}"
            elif action == "reject":
                summary = f"hypothesis {hypothesis_id}: {data.reject(db, hypothesis_id)}"
            else:
                summary = (
                    f"hypothesis {hypothesis_id}: priority {data.change_priority(db, hypothesis_id, delta):g}"
                )
        self.post_message(HypothesisSteered(hypothesis_id, summary))

    def on_hypothesis_steered(self, message: HypothesisSteered) -> None:
        self.notify(message.summary, timeout=3)
        self.autoapp.notify_changed()


class HypothesesScreen(SteeringScreen):
    PANE = "hypotheses"
    AUTO_FOCUS = "#hyp-table"
    BINDINGS = [
        Binding("s", "cycle_status", "Status"),
        Binding("o", "cycle_sort", "Order"),
        Binding("f", "edit_filter", "Filter"),
        Binding("m", "mine", "Mine"),
        Binding("g", "generate", "Generate"),
        Binding("c", "copy_id", "Copy id", show=False),
        Binding("escape", "leave_filter", "Back to the table", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.status_filter: str | None = None
        self.sort = "rank"
        self.filter_text = ""
        self.filter_error = ""
        self._preview_timer: Timer | None = None
        self._filter_timer: Timer | None = None
        self.page: data.Page[data.HypothesisRow] | None = None

    def compose_body(self) -> ComposeResult:
        yield Input(placeholder=FILTER_HINT, id="hyp-filter", compact=True)
        yield PagedTable(
            "Hypotheses",
            [
                ("#", 5),
                ("Status", 11),
                ("Prio", 5),
                ("Effect", 6),
                ("Source", 10),
                ("Outcome", 12),
                ("Title", None),
            ],
            id="hyp-table",
        )
        yield Static(id="hyp-preview")

    def is_loaded(self) -> bool:
        return self.query_one("#hyp-table", PagedTable).loaded

    def reload(self) -> None:
        table = self.query_one("#hyp-table", PagedTable)
        self.load(table.page_offset, self.status_filter)

    def filters(self, status: str | None) -> QueueFilter:
        """The status key, the order and the filter bar as one filter (a bad bar keeps the last good
        one and says why on the table's border)."""
        try:
            flt = data.parse_filter(self.filter_text, self.sort, status)
            self.filter_error = ""
        except UserError as exc:
            self.filter_error = str(exc)
            flt = data.parse_filter("", self.sort, status)
        return flt

    @work(thread=True, group="hypotheses", exclusive=True, exit_on_error=False)
    def load(self, offset: int, status: str | None) -> None:
        flt = self.filters(status)
        with self.store.session() as db:
            page = data.hypotheses(db, None, offset, self.autoapp.page_size, flt)
        self.post_message(PageLoaded("hypotheses", page))

    def _note(self) -> str:
        parts = [f"by {self.sort}"]
        flt = self.filters(self.status_filter)
        if flt.describe():
            parts.append(flt.describe())
        note = "· " + " · ".join(parts)
        return note + (f"  ({self.filter_error})" if self.filter_error else "")

    def on_page_loaded(self, message: PageLoaded) -> None:
        self.page = message.page
        table = self.query_one("#hyp-table", PagedTable)
        table.note = self._note()
        wide = (self.size.width or self.app.size.width) >= 100
        table.column_spec = [("#", 4), ("Status", 10), ("Outcome", 12), ("Rank", 5), ("Effect", 6)]
        table.column_spec += [("Prio", 4), ("Source", 10), ("Wave", 4), ("Family", 12)] if wide else []
        table.column_spec += [("Title", None)]
        rows = []
        for h in message.page.rows:
            cells = [
                right(h.id),
                status_cell(h.status),
                status_cell(h.outcome),
                right("-" if h.rank is None else f"{h.rank:.0f}"),
                right(pct(h.expected_effect, digits=0) if h.expected_effect is not None else "-"),
            ]
            if wide:
                cells += [
                    right(f"{h.priority:g}", "bold yellow" if h.priority_set else "grey50"),
                    cell(h.source, "cyan"),
                    right(h.wave if h.wave is not None else "-", "" if h.wave is not None else "grey50"),
                    cell(_family(h), "grey50" if h.waits_behind else ""),
                ]
            cells += [_title(h)]
            rows.append((str(h.id), cells))
        table.show_page(message.page, rows)
        if not message.page.rows:
            empty = (
                "no hypothesis matches the filter (f edits it, s and o cycle status and order)"
                if self.filter_text.strip() or self.status_filter
                else "no hypotheses yet: m mines fusion gaps and fork commits, g asks the LLM"
            )
            self.query_one("#hyp-preview", Static).update(Text(empty, style="grey50"))
        else:
            self.preview()

    @on(PagedTable.PageRequested, "#hyp-table")
    def page_requested(self, event: PagedTable.PageRequested) -> None:
        self.load(event.offset, self.status_filter)

    @on(Input.Changed, "#hyp-filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_timer = self.set_timer(0.25, lambda: self.load(0, self.status_filter))

    @on(Input.Submitted, "#hyp-filter")
    def filter_submitted(self) -> None:
        self.query_one("#hyp-table").focus()

    def action_edit_filter(self) -> None:
        self.query_one("#hyp-filter", Input).focus()

    def action_leave_filter(self) -> None:
        self.query_one("#hyp-table").focus()

    def action_cycle_sort(self) -> None:
        sorts = data.HYPOTHESIS_SORTS
        self.sort = sorts[(sorts.index(self.sort) + 1) % len(sorts)]
        self.load(0, self.status_filter)

    @on(DataTable.RowHighlighted, "#hyp-table")
    def highlighted(self) -> None:
        if self._preview_timer is not None:
            self._preview_timer.stop()
        self._preview_timer = self.set_timer(0.1, self.preview)

    def preview(self) -> None:
        hid = self.selected_hypothesis()
        if hid is not None:
            self.load_preview(hid)

    @work(thread=True, group="hyp-preview", exclusive=True, exit_on_error=False)
    def load_preview(self, hypothesis_id: int) -> None:
        with self.store.session() as db:
            detail = data.hypothesis(db, hypothesis_id)
        self.post_message(HypothesisLoaded(detail))

    def on_hypothesis_loaded(self, message: HypothesisLoaded) -> None:
        d = message.detail
        if d.row.id != self.selected_hypothesis():
            return
        out = Text(no_wrap=False)
        out.append(f"#{d.row.id} {d.row.title}", style="bold")
        out.append(f"  {d.row.source} · {d.row.origin}", style="grey50")
        cites = (
            ", ".join(f"{e.label} {e.id}" for e in d.evidence) or ", ".join(d.source_refs) or "no evidence"
        )
        out.append(f"\ncites: {clip(cites, 200)}", style="cyan")
        if d.row.rank is not None:
            out.append(f"\nrank {d.row.rank:.1f}: {d.row.why}", style="grey70")
        if d.row.family is not None:
            out.append("\n" + _family_line(d.row), style="grey70")
        if _origin_line(d.row):
            out.append("\n" + _origin_line(d.row), style="yellow" if d.row.repeat_of else "grey70")
        out.append("\n" + clip(d.rationale, 400), style="grey70")
        self.query_one("#hyp-preview", Static).update(out)

    @on(DataTable.RowSelected, "#hyp-table")
    def selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(HypothesisScreen(int(event.row_key.value)))

    def selected_hypothesis(self) -> int | None:
        key = self.query_one("#hyp-table", PagedTable).current_key()
        return int(key) if key is not None else None

    def action_cycle_status(self) -> None:
        index = STATUS_FILTERS.index(self.status_filter)
        self.status_filter = STATUS_FILTERS[(index + 1) % len(STATUS_FILTERS)]
        self.load(0, self.status_filter)

    def action_mine(self) -> None:
        self.autoapp.mine_hypotheses()

    def action_generate(self) -> None:
        self.autoapp.generate_hypotheses()

    def action_copy_id(self) -> None:
        hid = self.selected_hypothesis()
        if hid is not None:
            self.autoapp.copy(str(hid), f"hypothesis id {hid}")


class HypothesisScreen(SteeringScreen):
    """A hypothesis in full: rationale, evidence (enter opens one), source refs, patch, outcomes.
    Pushed on the pane like a DetailScreen (Escape goes back), and it steers like the queue."""

    PANE = "hypotheses"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("c", "copy_id", "Copy id"),
        Binding("p", "copy_patch", "Copy patch"),
        Binding("o", "open_url", "Open URL", show=False),
    ]

    def __init__(self, hypothesis_id: int) -> None:
        super().__init__()
        self.hypothesis_id = hypothesis_id
        self.detail: data.HypothesisDetail | None = None

    def action_back(self) -> None:
        self.dismiss()

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="hyp-detail"):
            yield Static(id="hyp-head")
            yield DataTable(id="hyp-evidence", cursor_type="row")
            yield Static(id="hyp-refs")
            yield DiffView(id="hyp-patch")

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="hypothesis", exclusive=True, exit_on_error=False)
    def load(self) -> None:
        with self.store.session() as db:
            detail = data.hypothesis(db, self.hypothesis_id)
        self.post_message(HypothesisLoaded(detail))

    def on_hypothesis_loaded(self, message: HypothesisLoaded) -> None:
        d = self.detail = message.detail
        h = d.row
        self.set_trail(f"#{h.id} {clip(h.title, 40)}")
        head = Text()
        head.append(h.title, style="bold")
        head.append("\n")
        head.append_text(
            key_values(
                [
                    ("status", status_cell(h.status)),
                    ("priority", f"{h.priority:g}"),
                    ("source", f"{h.source} (origin {h.origin})"),
                    ("expected", pct(h.expected_effect)),
                    ("risk", d.risk),
                    ("outcome", status_cell(h.outcome)),
                    ("rank", "not ranked yet" if h.rank is None else f"{h.rank:.1f} of 100"),
                ],
                width=10,
            )
        )
        for line in h.rank_lines:
            head.append("\n  " + line, style="grey70")
        if h.family is not None:
            head.append("\n" + _family_line(h), style="grey70")
        if _origin_line(h):
            head.append("\n" + _origin_line(h), style="yellow" if h.repeat_of else "grey70")
        if d.rationale:
            head.append("\n\n" + d.rationale.strip())
        if d.notes:
            head.append("\n\nnotes: " + d.notes.strip(), style="yellow")
        self.query_one("#hyp-head", Static).update(head)
        table = self.query_one("#hyp-evidence", DataTable)
        table.clear(columns=True)
        width = self.size.width or self.app.size.width
        for label, w in fit_columns(
            [("Evidence", 8), ("Kind", 11), ("Source", width // 4), ("Title", None)], width
        ):
            table.add_column(label, width=w, key=label)
        for e in d.evidence:
            table.add_row(right(e.id), cell(e.label, "cyan"), cell(e.source), cell(e.title), key=str(e.id))
        table.styles.height = min(len(d.evidence), 8) + 2
        table.border_title = f"Evidence ({len(d.evidence)}): enter opens it"
        table.display = bool(d.evidence)
        refs = Text()
        if d.source_refs:
            refs.append("sources: ", style="bold")
            refs.append(", ".join(d.source_refs))
        if d.experiments:
            refs.append("\nexperiments: ", style="bold")
            for i, x in enumerate(d.experiments):
                refs.append(", " if i else "")
                refs.append(f"#{x.id} ({x.run}) ")
                refs.append(x.status, style=status_cell(x.status).style)
                if x.effect is not None:
                    refs.append(f" {pct(x.effect)}")
        if d.patch is not None:
            p = d.patch
            refs.append(f"\npatch {p.id}: ", style="bold")
            refs.append(
                f"{p.author_kind} {p.author or ''} · applies: {p.apply_status or '-'} · {', '.join(p.files)}"
            )
            if p.apply_error:
                refs.append(f"\n{p.apply_error}", style="red")
        else:
            refs.append("\nno patch yet", style="grey50")
        self.query_one("#hyp-refs", Static).update(refs)
        patch_view = self.query_one("#hyp-patch", DiffView)
        patch_view.show(d.patch.diff if d.patch else "")
        patch_view.display = d.patch is not None

    @on(DataTable.RowSelected, "#hyp-evidence")
    def evidence_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.autoapp.open_evidence(int(event.row_key.value))

    def selected_hypothesis(self) -> int | None:
        return self.hypothesis_id

    def action_copy_id(self) -> None:
        self.autoapp.copy(str(self.hypothesis_id), f"hypothesis id {self.hypothesis_id}")

    def action_copy_patch(self) -> None:
        if self.detail is not None and self.detail.patch is not None:
            self.autoapp.copy(self.detail.patch.diff, f"patch {self.detail.patch.id}")
        else:
            self.notify("no patch to copy", severity="warning")

    def action_open_url(self) -> None:
        if self.detail is None:
            return
        urls = [r for r in self.detail.source_refs if r.startswith(("http://", "https://"))]
        if urls:
            self.app.open_url(urls[0])


def _title(h: data.HypothesisRow) -> Text:
    """The title, marked when the idea repeats one already measured here."""
    title = Text(no_wrap=True, overflow="ellipsis")
    if h.repeat_of is not None:
        title.append(f"↻#{h.repeat_of} ", style="bold yellow")
    title.append(" ".join(h.title.split()))
    return title


def _origin_line(h: data.HypothesisRow) -> str:
    """Where the autopilot's idea came from: the wave it read, the idea it repeats."""
    parts = []
    if h.wave is not None:
        parts.append(f"proposed after the post-mortem of wave {h.wave}")
    if h.repeat_of is not None:
        parts.append(f"a repeat of #{h.repeat_of}: already measured here, not run again")
    return " · ".join(parts)


def _family(h: data.HypothesisRow) -> str:
    if h.family is None:
        return ""
    return f"waits #{h.waits_behind}" if h.waits_behind is not None else f"{h.family}/{h.family_size} lead"


def _family_line(h: data.HypothesisRow) -> str:
    if h.family is None:
        return ""
    what = f"family {h.family}: {h.family_size} fork commits on the same functions; "
    if h.waits_behind is not None:
        return what + f"waits behind #{h.waits_behind} (its best open member) until that one is measured"
    return what + "this one runs first"
