"""Two experiments side by side (or one alone): decision, metrics, paired samples and the patch."""

from __future__ import annotations

import statistics

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Static

from tui import data
from tui.format import interval, number, pct
from tui.messages import ComparisonLoaded
from tui.screens.base import DetailScreen
from tui.text import Text
from tui.widgets.common import DiffView, key_values, status_cell

SAMPLE_ROWS = 40


def summary_text(d: data.ExperimentDetail, primary: str | None) -> Text:
    """What an experiment measured and decided, as text for one column of the comparison."""
    e = d.info
    out = Text()
    out.append(f"#{e.id} ", style="bold")
    out.append(e.title, style="bold")
    if e.winner_commit:
        out.append("  ★ winner", style="bold green")
    out.append("\n")
    dec = e.decision
    out.append_text(
        key_values(
            [
                ("status", status_cell(e.status if not e.reason else f"{e.status}: {e.reason}")),
                ("verdict", dec.verdict if dec else "-"),
                ("effect", f"{pct(e.effect)} {interval(*e.ci)}" if dec else "-"),
                ("pairs", e.pairs),
                ("p / q", f"{number(dec.p_value, 3)} / {number(dec.q_value, 3)}" if dec else "-"),
                ("noise", pct(dec.noise).lstrip("+") if dec and dec.noise is not None else "-"),
                ("wave", e.wave),
                ("worker", e.worker),
                ("hypothesis", f"#{e.hypothesis_id} {e.hypothesis_title}" if e.hypothesis_id else "-"),
                ("candidate", (e.winner_commit or e.candidate_commit or "-")[:16]),
            ],
            width=11,
        )
    )
    if dec and dec.reason:
        out.append(f"\n{dec.reason}", style="grey70")
    metrics = d.metrics
    if metrics:
        out.append("\n\nmetric medians (baseline → candidate)", style="bold")
        for name in metrics:
            base, cand = d.paired(name)
            if not base:
                continue
            a, b = statistics.median(base), statistics.median(cand)
            change = (b - a) / a if a else None
            out.append(f"\n  {name:<6} {number(a, 6):>8} → {number(b, 6):<8} {pct(change)}")
    chosen = primary if primary in metrics else (metrics[0] if metrics else None)
    if chosen:
        base, cand = d.paired(chosen)
        out.append(f"\n\npairs of {chosen} (A baseline, B candidate)", style="bold")
        for i, (a, b) in enumerate(zip(base, cand, strict=True)):
            if i == SAMPLE_ROWS:
                out.append(f"\n  … {len(base) - SAMPLE_ROWS} more pairs", style="grey50")
                break
            change = (b - a) / a if a else None
            out.append(f"\n  {i:>3} {number(a, 6):>8} {number(b, 6):>8}  {pct(change)}")
    if d.patch:
        out.append(
            f"\n\npatch {d.patch.id} ({d.patch.author_kind}): {', '.join(d.patch.files)}", style="bold"
        )
    return out


class CompareScreen(DetailScreen):
    """`CompareScreen(a, b)` shows two experiments side by side; `CompareScreen(a)` one in full."""

    PANE = "history"
    BINDINGS = [
        Binding("c", "copy_sha", "Copy sha"),
        Binding("p", "copy_patch", "Copy patch"),
    ]

    def __init__(self, left: int, right: int | None = None) -> None:
        super().__init__()
        self.left_id = left
        self.right_id = right
        self.details: list[data.ExperimentDetail] = []

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="compare"):
            with VerticalScroll(id="side-0", classes="side"):
                yield Static(id="summary-0")
                yield DiffView(id="diff-0")
            if self.right_id is not None:
                with VerticalScroll(id="side-1", classes="side"):
                    yield Static(id="summary-1")
                    yield DiffView(id="diff-1")

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="compare", exclusive=True, exit_on_error=False)
    def load(self) -> None:
        with self.store.session() as db:
            left = data.experiment_detail(db, self.left_id)
            right = data.experiment_detail(db, self.right_id) if self.right_id is not None else left
        self.post_message(ComparisonLoaded(left, right))

    def on_comparison_loaded(self, message: ComparisonLoaded) -> None:
        self.details = [message.left] if self.right_id is None else [message.left, message.right]
        if self.right_id is None:
            self.set_trail(f"experiment #{self.left_id}")
        else:
            self.set_trail(f"#{self.left_id} vs #{self.right_id}")
        primary = None
        for d in self.details:
            if d.info.decision is not None:
                primary = d.info.decision.metric
                break
        for i, d in enumerate(self.details):
            self.query_one(f"#summary-{i}", Static).update(summary_text(d, primary))
            self.query_one(f"#diff-{i}", DiffView).show(d.patch.diff if d.patch else "")

    def focused_side(self) -> data.ExperimentDetail | None:
        if not self.details:
            return None
        focused = self.focused
        if focused is not None and focused.id == "side-1" and len(self.details) > 1:
            return self.details[1]
        return self.details[0]

    def action_copy_sha(self) -> None:
        d = self.focused_side()
        if d is None:
            return
        sha = d.info.winner_commit or d.info.candidate_commit
        if sha:
            self.autoapp.copy(sha, f"sha {sha[:10]}")
        else:
            self.notify(f"experiment {d.info.id} has no commit", severity="warning")

    def action_copy_patch(self) -> None:
        d = self.focused_side()
        if d is not None and d.patch is not None:
            self.autoapp.copy(d.patch.diff, f"patch {d.patch.id}")
