"""What every screen shares: the pane bar and footer, refresh on database change, worker errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer
from textual.worker import Worker

from tui.widgets.common import PaneBar

if TYPE_CHECKING:
    from tui.data import Store
    from tui.host import Host


class AppScreen(Screen[None]):
    """A screen of one pane (a mode's base screen, or a detail view pushed on top of it).

    Subclasses build their body in `compose_body`, load their data in `reload` (which starts
    thread workers) and say which pane they belong to in `PANE`. When another process changes
    the database, the visible screen reloads; hidden ones reload when shown again.
    """

    PANE = "knowledge"
    TRAIL = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stale = True

    @property
    def autoapp(self) -> Host:
        """The app, through what screens may use of it (tui.host; the app imports the screens)."""
        return cast("Host", self.app)

    @property
    def store(self) -> Store:
        return self.autoapp.store

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A failed worker becomes one notification: the app's one handler (Host.report_worker)."""
        self.autoapp.report_worker(event.worker)

    def compose(self) -> ComposeResult:
        yield PaneBar(self.PANE, self.TRAIL, self.store.name, id="pane-bar")
        yield from self.compose_body()
        yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.autoapp.db_changed.subscribe(self, self._database_changed)
        self.call_after_refresh(self.autoapp.screen_painted)

    def is_loaded(self) -> bool:
        """Has the first load of this screen's data been shown?"""
        return True

    def on_screen_resume(self) -> None:
        if self.stale:
            self.stale = False
            self.reload()

    def _database_changed(self, version: int) -> None:
        if self.is_current:
            self.reload()
        else:
            self.stale = True

    def set_trail(self, trail: str) -> None:
        self.query_one(PaneBar).set_trail(trail)

    def reload(self) -> None:
        """Start the workers that load this screen's data (never query on the UI thread)."""


class DetailScreen(AppScreen):
    """A view pushed on a pane (a paper, a commit, a hypothesis...); Escape goes back."""

    BINDINGS = [Binding("escape", "back", "Back")]

    def action_back(self) -> None:
        self.dismiss()


class AppModal(ModalScreen[Any]):
    """A dialog; Escape closes it without an answer."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    @property
    def autoapp(self) -> Host:
        """The app, through what screens may use of it (tui.host; the app imports the screens)."""
        return cast("Host", self.app)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A failed worker becomes one notification: the app's one handler (Host.report_worker)."""
        self.autoapp.report_worker(event.worker)

    def action_cancel(self) -> None:
        self.dismiss(None)
