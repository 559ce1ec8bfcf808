"""The hypotheses pane: the queue with its steering keys, and a hypothesis's detail view."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.timer import Timer
from textual.widgets import DataTable, Static

from tui import data
from tui.format import clip, pct
from tui.messages import HypothesisLoaded, HypothesisSteered, PageLoaded
from tui.screens.base import AppScreen, DetailScreen
from tui.widgets.common import DiffView, PagedTable, cell, fit_columns, key_values, right, status_cell

STATUS_FILTERS: tuple[str | None, ...] = (None, *data.HYPOTHESIS_STATUSES)


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
    BINDINGS = [
        Binding("s", "cycle_status", "Filter"),
        Binding("m", "mine", "Mine"),
        Binding("g", "generate", "Generate"),
        Binding("c", "copy_id", "Copy id", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.status_filter: str | None = None
        self._preview_timer: Timer | None = None
        self.page: data.Page[data.HypothesisRow] | None = None

    def compose_body(self) -> ComposeResult:
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

    @work(thread=True, group="hypotheses", exclusive=True, exit_on_error=False)
    def load(self, offset: int, status: str | None) -> None:
        with self.store.session() as db:
            page = data.hypotheses(db, status, offset, self.autoapp.page_size)
        self.post_message(PageLoaded("hypotheses", page))

    def on_page_loaded(self, message: PageLoaded) -> None:
        self.page = message.page
        table = self.query_one("#hyp-table", PagedTable)
        table.note = f"· {self.status_filter}" if self.status_filter else ""
        wide = (self.size.width or self.app.size.width) >= 100
        table.column_spec = [("#", 4), ("Status", 11), ("Prio", 4), ("Effect", 6)]
        table.column_spec += [("Source", 10)] if wide else []
        table.column_spec += [("Outcome", 12), ("Title", None)]
        rows = []
        for h in message.page.rows:
            cells = [
                right(h.id),
                status_cell(h.status),
                right(f"{h.priority:g}"),
                right(pct(h.expected_effect, digits=0) if h.expected_effect is not None else "-"),
            ]
            cells += [cell(h.source, "cyan")] if wide else []
            cells += [status_cell(h.outcome), cell(h.title)]
            rows.append((str(h.id), cells))
        table.show_page(message.page, rows)
        if not message.page.rows:
            self.query_one("#hyp-preview", Static).update(
                Text(
                    "no hypotheses yet: m mines fusion gaps and fork commits, g asks the LLM", style="grey50"
                )
            )
        else:
            self.preview()

    @on(PagedTable.PageRequested, "#hyp-table")
    def page_requested(self, event: PagedTable.PageRequested) -> None:
        self.load(event.offset, self.status_filter)

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


class HypothesisScreen(DetailScreen, SteeringScreen):
    """A hypothesis in full: rationale, evidence (enter opens one), source refs, patch, outcomes."""

    PANE = "hypotheses"
    BINDINGS = [
        Binding("c", "copy_id", "Copy id"),
        Binding("p", "copy_patch", "Copy patch"),
        Binding("o", "open_url", "Open URL", show=False),
    ]

    def __init__(self, hypothesis_id: int) -> None:
        super().__init__()
        self.hypothesis_id = hypothesis_id
        self.detail: data.HypothesisDetail | None = None

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
                ],
                width=10,
            )
        )
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
