"""The console's panes, in one table: the key that shows each, its name (the app's mode and
`tui --pane`), its label, its screen (imported when the pane is first shown) and its help title.
The app's modes and bindings, the command palette, the help screen, the header's pane bar and the
CLI's `--pane` choice are all read from here, so a new pane is one screen module and one row."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pane:
    key: str
    name: str
    label: str
    screen: str
    """`module:class` of its screen."""
    help: str
    """What `enter` does there, for the help screen."""
    what: str
    """One line on what it shows (the command palette's help)."""

    def make_screen(self) -> Any:
        module, _, name = self.screen.partition(":")
        return getattr(importlib.import_module(module), name)()

    def screen_class(self) -> type:
        module, _, name = self.screen.partition(":")
        found = getattr(importlib.import_module(module), name)
        assert isinstance(found, type)
        return found


PANES: tuple[Pane, ...] = (
    Pane(
        "1",
        "knowledge",
        "Knowledge",
        "tui.screens.knowledge:KnowledgeScreen",
        "enter opens a paper, commit, inventory row or search hit",
        "papers, forks, the fusion inventory, search",
    ),
    Pane(
        "2",
        "hypotheses",
        "Hypotheses",
        "tui.screens.hypotheses:HypothesesScreen",
        "enter: detail",
        "the queue in the order the runner takes it",
    ),
    Pane(
        "3",
        "fleet",
        "Fleet",
        "tui.screens.fleet:FleetScreen",
        "enter: the selected experiment's log",
        "the run, its workers, research log and experiments live",
    ),
    Pane(
        "4",
        "history",
        "History",
        "tui.screens.history:HistoryScreen",
        "enter: the experiment in full",
        "runs, waves, experiments and their decisions",
    ),
)
NAMES: tuple[str, ...] = tuple(p.name for p in PANES)
