"""What the screens use of the app, as a protocol: the screens import this, never `tui.app`.

The app (tui/app.py) imports the screens and wires them (its modes, the help screen's sections);
the screens reach the app only through `Host`, so the import graph has one direction. mypy checks
that AutoresearchApp provides every member (the `_HOST` line at the end of tui/app.py), and an
import-linter contract keeps `tui.screens` from importing `tui.app`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.signal import Signal
    from textual.worker import Worker

    from tui.data import Store
    from tui.spawn import RunRequest

Clock = Callable[[], float]


class Host(Protocol):
    """The app as its screens see it: the workspace, the clock, settings, and the steering calls."""

    store: Store
    clock: Clock
    page_size: int
    fleet_interval: float | None
    db_changed: Signal[int]
    """Published with the new data_version (or -1) when the database changed."""

    def screen_painted(self) -> None: ...

    def report_worker(self, worker: Worker[Any]) -> None: ...

    def notify_changed(self) -> None: ...

    def copy(self, text: str, what: str) -> None: ...

    def open_evidence(self, evidence_id: int) -> None: ...

    # The steering calls start thread workers; what they return is not the screens' business.
    def start_run(self, request: RunRequest) -> None: ...

    def steer_run(self, kind: str, run_id: int, args: dict[str, Any] | None = None) -> object: ...

    def cancel_experiment(self, experiment_id: int) -> object: ...

    def mine_hypotheses(self) -> None: ...

    def generate_hypotheses(self) -> None: ...
