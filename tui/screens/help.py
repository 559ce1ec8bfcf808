"""The help screen: every key of every pane (read from the bindings, so it never goes stale)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.keys import format_key
from textual.widgets import Static

from tui.screens.base import DetailScreen
from tui.text import Text

NOTES = """\
Tables and lists: arrows, pgup/pgdn, home/end move; enter opens; tab and shift+tab move between parts.
ctrl+p opens the command palette: every action by name (start, pause, stop a run; mine; search...).
Everything here is also a command: autoresearch kb|hypotheses|run|history|redecide ... --help.
Keys may differ over SSH and tmux: the palette reaches every action without them.
Copy (c, p, y) writes to the terminal's clipboard with OSC 52; in tmux: set -g set-clipboard on.
Runs and miners started here are separate processes: quitting or dropping the SSH session leaves
them running; reopen the TUI to follow them.
In a browser: autoresearch tui --serve (binds 127.0.0.1:8000; no authentication, so reach it through
an SSH tunnel: ssh -L 8000:127.0.0.1:8000 host).
"""

HelpSections = list[tuple[str, type[DOMNode]]]
"""(title, class whose bindings are listed): the app, which knows every screen, gives them."""


def _bindings(cls: type[DOMNode]) -> list[Binding]:
    """The bindings our classes declare, bases included (subclass first, one per action); Textual's
    own (arrows, tab, pgup...) are summed up in one line instead."""
    seen: dict[str, Binding] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("tui."):
            continue
        declared: list[BindingType] = list(getattr(klass, "__dict__", {}).get("BINDINGS", []))
        for binding in Binding.make_bindings(declared):
            seen.setdefault(binding.action, binding)
    return list(seen.values())


def keys_text(sections: HelpSections) -> Text:
    out = Text()
    for i, (title, cls) in enumerate(sections):
        if i:
            out.append("\n")
        out.append(title + "\n", style="bold underline")
        for b in _bindings(cls):
            keys = ", ".join(format_key(k) for k in b.key.split(","))
            out.append(f"  {keys:<16}", style="bold cyan")
            out.append(f"{b.description or b.action}\n")
    return out


class HelpScreen(DetailScreen):
    PANE = "knowledge"
    TRAIL = "help"

    def __init__(self, sections: HelpSections) -> None:
        super().__init__()
        self.PANE = "help"
        self.sections = sections

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(id="help-keys")

    def on_mount(self) -> None:
        super().on_mount()
        text = keys_text(self.sections)
        text.append("\n")
        text.append(NOTES, style="grey70")
        self.query_one("#help-keys", Static).update(text)
