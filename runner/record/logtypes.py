"""What the log readers (runner.record.pi_jsonl, runner.record.results_tsv) share: the lines and
segments they read and the malformed lines they list.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

from kb.errors import UserError

Format = Literal["jsonl", "tsv"]
FORMATS: tuple[str, ...] = ("auto", "jsonl", "tsv")
#: The statuses both loops write (any case), as this product's experiment statuses.
STATUS_MAP = {"keep": "kept", "discard": "discarded", "crash": "crashed", "checks_failed": "checks_failed"}


@dataclass(frozen=True)
class Skipped:
    """A malformed line: an error by default; a lenient import skips it (a config line's bad field
    takes pi-autoresearch's default instead, so that the segment still starts there)."""

    line: int
    reason: str
    action: str = "skipped"

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason, "action": self.action}


@dataclass
class LogLine:
    """One run line (or results.tsv row) as read, with how it was read where the log was unclear."""

    number: int
    status: str
    """keep, discard, crash or checks_failed: how this import reads the line."""
    pi_status: str
    """How pi-autoresearch's reader reads it (exact strings; anything else is keep)."""
    original_status: Any
    values: dict[str, float]
    """Every finite number the line gives, the primary metric first."""
    unread: dict[str, Any]
    """Values that are not finite numbers, as written (kept in the record, never samples)."""
    description: str
    commit: str | None = None
    run: float | None = None
    timestamp: float | None = None
    confidence: float | None = None
    asi: Any = None
    literature_source: str | None = None
    segment: Any = None
    fields: dict[str, Any] | None = None
    """The line's other fields, as written (a results.tsv's text columns, unknown jsonl keys)."""
    notes: list[str] = field(default_factory=list)
    """How fields were read where the log left it to the reader (no status: keep, ...)."""


@dataclass
class Segment:
    index: int
    name: str | None
    metric: str
    direction: str
    unit: str | None
    config_line: int | None
    lines: list[LogLine] = field(default_factory=list)
    pi_segment: int = 0
    """The segment number pi-autoresearch's reader gives these lines (what their `segment` says)."""


@dataclass
class ParsedLog:
    path: Path
    format: Format
    lines: int
    """Non-blank lines in the file (a TSV's header included)."""
    segments: list[Segment]
    skipped: list[Skipped]
    ignored: Counter[str]
    """Lines skipped as pi-autoresearch skips them, by type (`hook`)."""
    notes: Counter[str]
    """How lines were read where the log left a default to the reader, with counts."""


class Malformed(Exception):
    """One line cannot be read; its reason names the field."""


# --- small helpers ---------------------------------------------------------------------------------


def finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def cap(text: str, limit: int) -> str:
    """One line of at most `limit` characters (whitespace collapsed), with an ellipsis when cut."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def strip_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """(number, line) of the non-blank lines. Split on newlines only, as pi does: str.splitlines
    would also split inside a JSON string holding U+2028 or a form feed."""
    return [(n, raw.rstrip("\r")) for n, raw in enumerate(text.split("\n"), 1) if raw.strip()]


def fail(path: Path, number: int, reason: str, count: int) -> UserError:
    more = f" ({count} malformed lines; the first is shown)" if count > 1 else ""
    return UserError(f"{path}:{number}: {reason}{more}; nothing imported (--lenient skips malformed lines)")
