"""The console's one edge for outside text: a Rich `Text` whose every string is shown inert.

The console renders outside text (commit subjects, imported descriptions and metric names, a
model's titles, a candidate's build output, file names) as `Text`, never as markup, so `[bold]` or
`[link=...]` in a commit subject stays text. This `Text` also makes every control character visible
and inert (kb/textsafe.py: ESC as `^[`, so an OSC 52 clipboard write shows as `^[]52;c;...`), in
its constructor and in `append`, so a screen cannot forget it. tui/screens and tui/widgets import
`Text` from here, never from rich (tests/foundation/test_terminal_edge.py).

Plain strings for other widgets go through `inert_lines` (the log viewer's `Log.write`, a diff
before highlighting) and notifications through the app's `notify` (markup off, text inert).
"""

from __future__ import annotations

from rich.console import JustifyMethod, OverflowMethod
from rich.style import Style
from rich.text import Span
from rich.text import Text as RichText

from kb.textsafe import inert, is_inert


def inert_lines(text: str) -> str:
    """Several lines of outside text for a plain-text widget: newlines and tabs kept."""
    return inert(text, lines=True)


class Text(RichText):
    """rich.text.Text with its text inert (newlines and tabs kept; everything else shown)."""

    def __init__(
        self,
        text: str = "",
        style: str | Style = "",
        *,
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        no_wrap: bool | None = None,
        end: str = "\n",
        tab_size: int | None = None,
        spans: list[Span] | None = None,
    ) -> None:
        safe = inert(text, lines=True)
        super().__init__(
            safe,
            style,
            justify=justify,
            overflow=overflow,
            no_wrap=no_wrap,
            end=end,
            tab_size=tab_size,
            spans=spans if safe == text else None,  # spans of changed text would point elsewhere
        )

    def append(self, text: str | RichText, style: str | Style | None = None) -> Text:
        if isinstance(text, str):
            text = inert(text, lines=True)
        elif not isinstance(text, Text) and not is_inert(text.plain, lines=True):
            text = RichText(inert(text.plain, lines=True), style=text.style)
        super().append(text, style)
        return self

    def append_text(self, text: RichText) -> Text:
        if not isinstance(text, Text) and not is_inert(text.plain, lines=True):
            text = RichText(inert(text.plain, lines=True), style=text.style)
        super().append_text(text)
        return self
