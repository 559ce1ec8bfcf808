"""The one edge for outside text shown to a person: control characters made visible and inert.

Text that came from outside (an imported log's descriptions and metric names, fork commit subjects
and authors, a model's titles, a candidate's build output, patch file names, a web server's status
line) may hold escape sequences that write the operator's clipboard (OSC 52), set the window title
(OSC 0), clear the screen or hide text. The database keeps what came in; every face shows it
through `inert` (as `cat -v` would: ESC is `^[`, so `\\x1b]52;c;...` shows as `^[]52;c;...`):

- C0 controls as `^@`..`^_` (tab and newline kept where a multi-line view needs them), DEL as `^?`;
- C1 controls, lone surrogates, bidi embeddings/overrides/isolates and line/paragraph separators as
  `\\x9b`, `\\udc80`, `\\u202e` (a bidi override reorders what the reader sees: Trojan Source).

Markup is the faces' own concern: the console renders outside text as `rich.text.Text` (never as
markup), reports escape HTML (`html_text`), and JSON escapes the rest (`json_text`).
"""

from __future__ import annotations

import html
import json
import math
import re
from datetime import UTC, datetime
from typing import Any

# Everything a terminal may act on or that reorders what is read. C0 (but tab and newline, which
# `_multi` keeps and `_single` does not), DEL, C1, bidi controls, separators, lone surrogates.
_SINGLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_MULTI = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# What json.dumps(ensure_ascii=False) leaves raw (it escapes C0 itself): the same set less C0.
_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)  # ESC -> ^[, NUL -> ^@, CR -> ^M
    if code == 0x7F:
        return "^?"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def inert(text: object, *, lines: bool = False) -> str:
    """`text` with every control character visible and inert; one line unless `lines` (which keeps
    newlines and tabs; a carriage return, which lets later text overwrite a line, is shown)."""
    value = "" if text is None else text if isinstance(text, str) else str(text)
    if lines and "\r\n" in value:
        value = value.replace("\r\n", "\n")
    pattern = _MULTI if lines else _SINGLE
    if pattern.search(value) is None:
        return value
    return pattern.sub(_shown, value)


def is_inert(text: str, *, lines: bool = False) -> bool:
    """Whether `text` holds nothing `inert` would change (what the faces' tests assert)."""
    return (_MULTI if lines else _SINGLE).search(text) is None


def clip(text: object, width: int) -> str:
    """One inert line of at most `width` characters (whitespace runs folded), `…` when cut."""
    line = " ".join(inert(text, lines=True).split())
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


def quoted(text: object, width: int = 80) -> str:
    """A title in a progress or log line: quoted, inert and cut (a 100 KB title is one short line)."""
    return "'" + clip(text, width).replace("'", "\\'") + "'"


def html_text(text: object, *, lines: bool = True) -> str:
    """Outside text for an HTML page: inert, then HTML-escaped (quotes too: safe in attributes)."""
    return html.escape(inert(text, lines=lines), quote=True)


def json_text(data: Any, *, indent: int | None = 2) -> str:
    """JSON for a terminal or a file: UTF-8 kept readable, but every character a terminal could act
    on escaped (json.dumps escapes C0 itself; DEL, C1, bidi controls and lone surrogates are escaped
    here, so the text also encodes as UTF-8). `json.loads` gives back exactly what was stored."""
    dumped = json.dumps(data, indent=indent, ensure_ascii=False, default=str)
    if _JSON.search(dumped) is None:
        return dumped
    return _JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)


def utc_time(value: float | None, fmt: str = "%Y-%m-%d %H:%M", *, none: str = "-") -> str:
    """A moment in UTC as `fmt`; `none` when unknown, and the number itself with a `?` when no
    date can show it (a time from an imported log beyond the year 9999 must not stop a listing)."""
    if value is None:
        return none
    try:
        return datetime.fromtimestamp(value, tz=UTC).strftime(fmt)
    except (OverflowError, ValueError, OSError):
        return f"{value:.6g}?" if isinstance(value, int | float) and not math.isnan(value) else "?"
