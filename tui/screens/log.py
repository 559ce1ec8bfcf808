"""The log viewer: an experiment's log files, one at a time, following the one being written."""

from __future__ import annotations

import os

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Log, Static

from tui import data
from tui.messages import LogRead
from tui.screens.base import DetailScreen
from tui.text import Text, inert_lines

MAX_LINES = 20_000
FIRST_READ = 2_000_000  # bytes from the end of a large log on opening


class LogScreen(DetailScreen):
    BINDINGS = [
        Binding("f", "next_file", "Next file"),
        Binding("F", "previous_file", "Prev file", show=False),
        Binding("c", "copy_path", "Copy path"),
    ]

    def __init__(self, experiment_id: int, pane: str = "fleet") -> None:
        super().__init__()
        self.PANE = pane
        self.experiment_id = experiment_id
        self.files: list[str] = []
        self.current: str | None = None
        self.read_offset = 0

    def compose_body(self) -> ComposeResult:
        yield Static(id="log-files")
        yield Log(id="log-view", max_lines=MAX_LINES, auto_scroll=True)

    def on_mount(self) -> None:
        super().on_mount()
        self.set_trail(f"log of experiment #{self.experiment_id}")
        interval = self.autoapp.fleet_interval
        if interval:
            self.set_interval(interval, self._follow)

    def _follow(self) -> None:
        if self.is_current and self.current is not None:
            self.read(self.current, self.read_offset, False)

    def reload(self) -> None:
        self.list_files()

    @work(thread=True, group="log-files", exclusive=True, exit_on_error=False)
    def list_files(self) -> None:
        with self.store.session() as db:
            folder = data.experiment_log_dir(db, self.experiment_id)
        files = data.log_files(folder)
        self.app.call_from_thread(self._files_listed, files)

    def _files_listed(self, files: list[str]) -> None:
        self.files = files
        if self.current not in files:
            # The newest batch log is what runs now; else whatever there is.
            batches = [f for f in files if f.rsplit("/", 1)[-1].startswith("batch-")]
            self.open(batches[-1] if batches else (files[0] if files else None))
        else:
            self._show_files()

    def open(self, path: str | None) -> None:
        self.current = path
        self.read_offset = 0
        self._show_files()
        self.query_one(Log).clear()
        if path is not None:
            self.read(path, 0, True)

    def _show_files(self) -> None:
        out = Text(no_wrap=True, overflow="ellipsis")
        if not self.files:
            out.append("no log files yet", style="grey50")
        for i, f in enumerate(self.files):
            name = f.rsplit("/", 1)[-1]
            out.append("  " if i else "")
            out.append(name, style="bold reverse" if f == self.current else "grey70")
        if self.files:
            out.append("   f/F switch", style="grey50")
        self.query_one("#log-files", Static).update(out)

    @work(thread=True, group="log-read", exclusive=True, exit_on_error=False)
    def read(self, path: str, offset: int, reset: bool) -> None:
        if reset:
            try:
                offset = max(0, os.path.getsize(path) - FIRST_READ)
            except OSError:
                offset = 0
        text, new_offset = data.read_log(path, offset, FIRST_READ)
        if text or reset:
            self.post_message(LogRead(path, text, new_offset, reset))

    def on_log_read(self, message: LogRead) -> None:
        if message.path != self.current:
            return
        view = self.query_one(Log)
        if message.reset:
            view.clear()
        if message.text:
            view.write(inert_lines(message.text))
        self.read_offset = message.offset

    def action_next_file(self) -> None:
        self._step(1)

    def action_previous_file(self) -> None:
        self._step(-1)

    def _step(self, step: int) -> None:
        if not self.files:
            return
        index = self.files.index(self.current) if self.current in self.files else -1
        self.open(self.files[(index + step) % len(self.files)])

    def action_copy_path(self) -> None:
        if self.current:
            self.autoapp.copy(self.current, self.current.rsplit("/", 1)[-1])
