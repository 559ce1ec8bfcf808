"""What the log readers (runner.record.pi_jsonl, runner.record.results_tsv) share: the lines and
segments they read, the malformed lines they list, and the status words of the loops they read.

A line's status is read through one table: the four words pi-autoresearch and karpathy/autoresearch
write (`keep`, `discard`, `crash`, `checks_failed`), in any case, then the words other loops write
for one of them (`STATUS_WORDS`, each with the writer it comes from), then the words `--status
WORD=STATUS` names (which win over both). `skip` drops the line: it is counted, not imported.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

from kb.errors import UserError
from kb.vocabulary import VERDICT_STATUS

Format = Literal["jsonl", "tsv"]
FORMATS: tuple[str, ...] = ("auto", "jsonl", "tsv")
#: The statuses both loops write (any case), as this product's experiment statuses.
STATUS_MAP = {
    **{v: VERDICT_STATUS[v] for v in ("keep", "discard")},
    "crash": "crashed",
    "checks_failed": "checks_failed",
}
#: What `--status WORD=STATUS` may say a word means: one of the four, or skip (not imported).
STATUS_CHOICES: tuple[str, ...] = (*STATUS_MAP, "skip")
#: Words other loops write for one of the four (compared in lower case), and where they come from.
STATUS_WORDS: dict[str, str] = {
    # uditgoenka/autoresearch autoresearch.md:47 (iteration 0), 0xedev/auto-researchtrading and
    # autoresearch-DGX-Spark results.tsv: the first, baseline row.
    "baseline": "keep",
    "best": "keep",  # autoresearch-DGX-Spark results.tsv: a keep that is the new best
    "keep (reworked)": "keep",  # uditgoenka/autoresearch fix.md:71
    "revert": "discard",  # 0xedev/auto-researchtrading, Cklaus1/autokernel5090 results.tsv
    "reverted": "discard",
    # karpathy/autoresearch program.md:108: a run over 10 minutes is killed and is a failure; forks
    # log it as `timeout` or `killed` (with 0 as the value, as for a crash).
    "timeout": "crash",
    "killed": "crash",
    "error": "crash",
    "metric-error": "crash",  # uditgoenka/autoresearch autoresearch.md:83: no number printed
    "budget_exceeded": "crash",  # fan92rus/pi-autoresearch index.ts:1001: reverted like a crash
    "invalid": "checks_failed",  # parameter-golf forks' program.md: `invalid` (artifact over 16MB)
    # fan92rus/pi-autoresearch index.ts:3340-3356: a phase's scratch step, neither kept nor
    # reverted; the phase's result is logged as a line of its own.
    "explore": "skip",
}


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
    notes: list[str] = field(default_factory=list)
    """How the segment itself was read (where its direction comes from, ...)."""


@dataclass
class ParsedLog:
    path: Path
    format: Format
    lines: int
    """Non-blank lines in the file (a TSV's header included)."""
    segments: list[Segment]
    skipped: list[Skipped]
    ignored: Counter[str]
    """Lines read and left out on purpose, by kind (`hook`, `finalize`, `comment`, `status explore`)."""
    notes: Counter[str]
    """How lines were read where the log left a default to the reader, with counts."""


class Malformed(Exception):
    """One line cannot be read; its reason names the field."""


MAX_DEPTH = 64
"""How deeply a line's JSON may nest (its `asi` is stored and shown; json itself recurses)."""
MAX_INTEGER = 2**63 - 1
"""The largest integer a line may hold (SQLite's INTEGER; a float cannot hold much more either)."""
LATEST_TIME = 253_402_300_799.0
"""9999-12-31T23:59:59Z: the last moment a date can show."""


def check_values(data: Any) -> None:
    """Refuse (Malformed) what the database or a face could not hold: nesting deeper than
    MAX_DEPTH, an integer beyond MAX_INTEGER (a 400-digit number), a lone surrogate (`\\ud800`,
    which no UTF-8 file can hold)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise Malformed(f"nested more than {MAX_DEPTH} levels deep")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = value[exc.start]
                raise Malformed(f"a string holds a lone surrogate (\\u{ord(bad):04x}): not text") from None
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
            digits = len(str(abs(value))) if abs(value) < 10**4000 else "over 4000"
            raise Malformed(f"a number of {digits} digits is out of range (at most {MAX_INTEGER})")


def seconds(value: float) -> float:
    """Unix seconds from a log's time: milliseconds (pi-autoresearch's) above 1e11."""
    return value / 1000 if value > 1e11 else value


def check_time(value: float, field: str = "timestamp") -> None:
    """Refuse a time no date can show (before 1970 or after the year 9999, in seconds or ms)."""
    if not 0 <= seconds(value) <= LATEST_TIME:
        raise Malformed(
            f"{field} {value:.6g} is out of range (Unix seconds or milliseconds from 1970 to the year 9999)"
        )


# --- small helpers ---------------------------------------------------------------------------------


def finite(value: Any) -> TypeGuard[int | float]:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


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


# --- status words ----------------------------------------------------------------------------------


def status_overrides(pairs: Mapping[str, str] | None) -> dict[str, str]:
    """`--status WORD=STATUS` pairs, checked: the words in lower case, each status one of
    STATUS_CHOICES."""
    out: dict[str, str] = {}
    for word, status in (pairs or {}).items():
        key, meaning = " ".join(word.split()).lower(), status.strip().lower()
        if not key:
            raise UserError("--status: an empty word (write --status WORD=STATUS)")
        if meaning not in STATUS_CHOICES:
            raise UserError(f"--status {word}={status}: STATUS must be one of {', '.join(STATUS_CHOICES)}")
        out[key] = meaning
    return out


def known_status(word: str, overrides: Mapping[str, str]) -> tuple[str, str] | None:
    """(status or `skip`, where the meaning comes from) for a status word, or None for a word no
    table knows. `where` is `word` (one of the four), `alias` (STATUS_WORDS) or `option`."""
    key = " ".join(word.split()).lower()
    if key in overrides:
        return overrides[key], "option"
    if key in STATUS_MAP:
        return key, "word"
    if key in STATUS_WORDS:
        return STATUS_WORDS[key], "alias"
    return None


def unknown_status_reason(word: str) -> str:
    shown = cap(word, 60)
    return (
        f"status {shown!r} is not keep, discard, crash or checks_failed (nor a word other loops use "
        f"for one): say what it means with --status {shown.lower()}=keep, discard, crash, "
        "checks_failed or skip"
    )
