"""Fleet pane widgets: the research log of an autopilot run (its research phases, newest first,
and the steering notes in force)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from tui.data import ResearchPhase, RunSteering
from tui.format import clip
from tui.text import Text
from tui.widgets.common import cell, fit_columns, right

FOUND = (
    ("Mined", "mined"),
    ("Gen", "generated"),
    ("Patch", "patched"),
    ("Repair", "repaired"),
    ("Port", "ported"),
    ("Rep", "repeats"),
)


def steering_line(steering: RunSteering, approval: bool, *, explicit: bool) -> Text:
    """The notes the next research phase reads, and whether its ideas wait for a person."""
    line = Text(no_wrap=False)
    line.append("steering ", style="bold")
    line.append("focus: ", style="grey70")
    line.append("; ".join(steering.focus) or "-", style="cyan" if steering.focus else "grey50")
    line.append(" · avoid: ", style="grey70")
    line.append("; ".join(steering.avoid) or "-", style="magenta" if steering.avoid else "grey50")
    line.append(" · approval: ", style="grey70")
    line.append("on" if approval else "off", style="bold yellow" if approval else "green")
    if not explicit:
        line.append(" (config)", style="grey50")
    return line


class ResearchLog(Vertical):
    """The research phases of the current run and its steering; the screen hands them down."""

    def compose(self) -> ComposeResult:
        yield Static(id="steering-line")
        yield DataTable(id="research", cursor_type="row")

    def show(
        self,
        phases: list[ResearchPhase],
        steering: RunSteering,
        approval: bool,
        width: int,
        *,
        rows: int = 4,
    ) -> None:
        """Show the phases (newest first), `rows` of them at once (the table scrolls for more)."""
        self.query_one("#steering-line", Static).update(
            steering_line(steering, approval, explicit=steering.approval is not None)
        )
        table = self.query_one("#research", DataTable)
        table.clear(columns=True)
        spec: list[tuple[str, int | None]] = [("Phase", 5)]
        spec += [(label, max(len(label), 3)) for label, _ in FOUND]
        spec += [("Fail", 4), ("Cost", 8), ("Calls", 5), ("Failures", None)]
        for label, w in fit_columns(spec, width):
            table.add_column(label, width=w, key=label)
        for p in phases:
            table.add_row(*research_cells(p), key=str(p.number))
        table.styles.height = min(max(len(phases), 1), rows) + 2  # border and header
        done = sum(p.cost_usd for p in phases)
        found = (
            f"Research: {len(phases)} phase{'s' if len(phases) != 1 else ''}, ${done:.4f} in model calls"
            if phases
            else "Research: no phase yet"
        )
        table.border_title = found + " · f focus, v avoid, a approval"


def research_cells(p: ResearchPhase) -> list[Any]:
    """One research phase as a row: what it found, its failures, what its model calls cost."""
    counts = [getattr(p, key) for _, key in FOUND]
    if not p.done:
        return [
            right(p.number),
            *[right("…", "grey50") for _ in counts],
            right("-"),
            right("-"),
            right("-"),
        ] + [cell("researching…", "yellow")]
    return [
        right(p.number),
        *[right(n or "-", "" if n else "grey50") for n in counts],
        right(len(p.failures) or "-", "bold red" if p.failures else "grey50"),
        right(f"${p.cost_usd:.4f}" if p.calls or p.cost_usd else "-"),
        right(p.calls or "-"),
        cell(clip(p.failures[0], 200) if p.failures else "", "red"),
    ]
