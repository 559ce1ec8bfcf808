"""Knowledge pane widgets: search snippets and the fusion matrix's cells."""

from __future__ import annotations

from tui import data
from tui.text import Text


def snippet_text(snippet: str) -> Text:
    """A search snippet with its matched terms (between data.SNIPPET_MARKS) in bold."""
    start, end = data.SNIPPET_MARKS
    out = Text(no_wrap=True, overflow="ellipsis")
    bold = False
    buffer = ""
    for char in " ".join(snippet.split()):
        if char in (start, end):
            if buffer:
                out.append(buffer, style="bold reverse" if bold else "")
            buffer = ""
            bold = char == start
        else:
            buffer += char
    if buffer:
        out.append(buffer, style="bold reverse" if bold else "")
    return out


def fusion_cell(state: str) -> Text:
    if state == "fused":
        return Text("●", style="bold green", justify="center")
    if state == "gap":
        return Text("GAP", style="bold white on red", justify="center")
    return Text("·", style="grey50", justify="center")
