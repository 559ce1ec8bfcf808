"""Read the logs other autoresearch loops write: pi-autoresearch's `autoresearch.jsonl` (or
`.auto/log.jsonl`) and karpathy/autoresearch's `results.tsv`, into segments of lines (no database).

**jsonl** (pi-autoresearch, the SkyPilot example). One JSON object per line, read as
pi-autoresearch's own reader (extensions/pi-autoresearch/jsonl.ts) reads it:

- a config line (`"type": "config"`: `name`, `metricName`, `metricUnit`, `bestDirection`) starts a
  segment; a field it leaves out keeps the previous config's value, except `bestDirection`, which
  falls back to pi's default `lower` (so do run lines before any config line, metric `metric`);
- hook lines (`"type": "hook"`, written whenever hooks are configured) are skipped, as pi skips them;
- every other line with a `run` number (or, without one, a `metric` or `status`) is a run line:
  `commit`, `metric`, `metrics`, `status`, `description`, `timestamp`, `confidence`, `asi`,
  `literature_source`, `segment`. A missing or unknown status reads as keep (pi's reading; statuses
  are compared case-insensitively here, pi reads `Discard` as keep); a `metric` or `metrics` entry
  that is not a finite number (`null`, `"12 t/s"`) is kept in the record but is no sample (pi reads
  a missing metric as 0; a measurement of 0 it is not). Metric names are stored as written
  (`p50-ms`, `tok/s`): the `[\\w.µ]` rule is for benchmark output only. Lines are split on `\\n`
  only (a description may hold U+2028), and a UTF-8 byte-order mark is dropped.

**tsv** (karpathy/autoresearch's program.md): a header `commit val_bpb memory_gb status description`,
tab-separated, then one row per experiment; status `keep`, `discard` or `crash` (any case; also
`checks_failed`). Every column but commit, status and description is a metric; the first is the
primary one (`metric=` picks another) and lower is better (val_bpb; `direction=` says otherwise).
One segment. Values are ASCII decimal numbers (runner.harness.protocol.plain_number); anything else in a
cell is no value.

Malformed lines (not JSON, not an object, a field of the wrong type, a line that is neither a
config, a hook nor a run line, a TSV row with an unknown status or the wrong number of columns) are
listed in `ParsedLog.skipped`; `parse` raises on the first unless `lenient`.

`pi_confidence` is pi-autoresearch's confidence score, as its computeConfidence defines it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

from kb.errors import UserError
from kb.files import read_text
from runner.harness.protocol import plain_number

Format = Literal["jsonl", "tsv"]
FORMATS: tuple[str, ...] = ("auto", "jsonl", "tsv")
#: The statuses both loops write (any case), as this product's experiment statuses.
STATUS_MAP = {"keep": "kept", "discard": "discarded", "crash": "crashed", "checks_failed": "checks_failed"}
#: Line types pi-autoresearch writes but does not read back; skipped here too.
SKIPPED_TYPES = ("hook",)
#: pi-autoresearch's defaults (jsonl.ts): a config without bestDirection means lower is better.
PI_DIRECTION = "lower"
PI_METRIC = "metric"
#: pi-autoresearch's labels for its confidence score (index.ts).
PI_LIKELY, PI_MARGINAL = 2.0, 1.0
_TSV_FIELDS = ("commit", "status", "description")
_EMPTY_SEGMENT = "config line {} starts a segment with no run lines ({}): nothing to import"
#: What a pi-autoresearch run line holds (log_experiment); other fields are kept as written.
_RUN_FIELDS = frozenset(
    ("type", "run", "commit", "metric", "metrics", "status", "description", "timestamp", "segment")
    + ("confidence", "asi", "literature_source")
)


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


class _Malformed(Exception):
    """One line cannot be read; its reason names the field."""


# --- small helpers ---------------------------------------------------------------------------------


def finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def cap(text: str, limit: int) -> str:
    """One line of at most `limit` characters (whitespace collapsed), with an ellipsis when cut."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _strip_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text


def _fail(path: Path, number: int, reason: str, count: int) -> UserError:
    more = f" ({count} malformed lines; the first is shown)" if count > 1 else ""
    return UserError(f"{path}:{number}: {reason}{more}; nothing imported (--lenient skips malformed lines)")


# --- pi-autoresearch's confidence score -------------------------------------------------------------


def pi_label(score: float | None) -> str:
    """pi-autoresearch's words for its score (>= 2: likely real, >= 1: marginal, else within noise)."""
    if score is None:
        return "not computable"
    if score >= PI_LIKELY:
        return "likely real"
    return "marginal" if score >= PI_MARGINAL else "within noise"


def pi_confidence(values: Sequence[float], statuses: Sequence[str], direction: str) -> float | None:
    """pi-autoresearch's confidence for one segment, as its computeConfidence (index.ts) defines it.

    `values` are the segment's primary values in log order (0 where pi reads none), `statuses` its
    statuses as pi reads them. The noise floor is the median absolute deviation (MAD) of the values
    above 0; the score is |best kept − baseline| / MAD, where the baseline is the segment's first
    value and the best kept the best value above 0 of a keep line. None with fewer than 3 values
    above 0, a MAD of 0, no keep, or a best kept equal to the baseline.
    """
    if not values:
        return None
    positive = [(v, s) for v, s in zip(values, statuses, strict=True) if v > 0]
    if len(positive) < 3:
        return None
    centre = statistics.median(v for v, _ in positive)
    mad = statistics.median(abs(v - centre) for v, _ in positive)
    if mad == 0:
        return None
    kept = [v for v, s in positive if s == "keep"]
    if not kept:
        return None
    best = max(kept) if direction == "higher" else min(kept)
    baseline = values[0]
    if best == baseline:
        return None
    return abs(best - baseline) / mad


# --- reading the log ---------------------------------------------------------------------------------


def detect_format(path: Path, text: str) -> Format:
    """tsv for a `.tsv` file or a first line that is a tab-separated header; jsonl otherwise."""
    if path.suffix.lower() == ".tsv":
        return "tsv"
    first = next((line for line in text.split("\n") if line.strip()), "")
    return "tsv" if "\t" in first and not first.lstrip().startswith(("{", "[")) else "jsonl"


def parse(
    path: Path,
    *,
    fmt: str = "auto",
    lenient: bool = False,
    metric: str | None = None,
    direction: str | None = None,
) -> ParsedLog:
    """Read and check the whole log (no database access). Raises UserError on the first malformed
    line unless `lenient`, which skips malformed lines and lists them."""
    if fmt not in FORMATS:
        raise UserError(f"format {fmt!r}: must be one of {', '.join(FORMATS)}")
    if direction is not None and direction not in ("higher", "lower"):
        raise UserError(f"direction {direction!r}: must be 'higher' or 'lower'")
    text = _strip_bom(read_text(path))
    kind: Format = detect_format(path, text) if fmt == "auto" else ("tsv" if fmt == "tsv" else "jsonl")
    if kind == "jsonl" and (metric is not None or direction is not None):
        raise UserError(
            f"{path}: --metric and --direction are for a results.tsv; a jsonl log's config lines say them"
        )
    if kind == "tsv":
        log = _parse_tsv(path, text, metric, direction or PI_DIRECTION)
    else:
        log = _parse_jsonl(path, text)
    if log.skipped and not lenient:
        first = log.skipped[0]
        raise _fail(path, first.line, first.reason, len(log.skipped))
    log.segments = [s for s in log.segments if s.lines]
    if not log.segments:
        raise UserError(f"{path}: no run lines; nothing imported")
    return log


def _lines(text: str) -> list[tuple[int, str]]:
    """(number, line) of the non-blank lines. Split on newlines only, as pi does: str.splitlines
    would also split inside a JSON string holding U+2028 or a form feed."""
    return [(n, raw.rstrip("\r")) for n, raw in enumerate(text.split("\n"), 1) if raw.strip()]


def _parse_jsonl(path: Path, text: str) -> ParsedLog:
    log = ParsedLog(path, "jsonl", 0, [], [], Counter(), Counter())
    # What pi's reader carries from one config line to the next.
    current = {"name": None, "metric": PI_METRIC, "unit": None}
    for number, raw in _lines(text):
        log.lines += 1
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            log.skipped.append(Skipped(number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(data, dict):
            log.skipped.append(Skipped(number, "not a JSON object"))
            continue
        try:
            kind = data.get("type")
            if kind == "config":
                segment = _config(data, number, current, len(log.segments), log)
                if log.segments and not log.segments[-1].lines:
                    # pi reads nothing into a config that the next one follows at once: say so,
                    # rather than drop the segment without a word.
                    log.notes[
                        _EMPTY_SEGMENT.format(log.segments[-1].config_line, "the next config line follows")
                    ] += 1
                # pi numbers a segment on from the previous one only once a run line was read.
                if log.segments:
                    earlier = log.segments[-1]
                    segment.pi_segment = earlier.pi_segment + (1 if any(s.lines for s in log.segments) else 0)
                log.segments.append(segment)
            elif kind in SKIPPED_TYPES:
                log.ignored[str(kind)] += 1
            elif _is_run_line(data):
                if not log.segments:  # run lines before any config line: pi's defaults
                    log.segments.append(Segment(0, None, PI_METRIC, PI_DIRECTION, None, None))
                if log.segments[-1].config_line is None:  # counted per line, as every note is
                    log.notes[
                        "run lines before any config line: metric `metric`, lower is better (pi's defaults)"
                    ] += 1
                line = _run_line(data, number, log.segments[-1].metric)
                if finite(line.segment) and line.segment != log.segments[-1].pi_segment:
                    line.notes.append(
                        "a segment field other than the config lines make it: read by its place in "
                        "the file, as pi-autoresearch does"
                    )
                log.notes.update(line.notes)
                log.segments[-1].lines.append(line)
            elif kind is not None:
                raise _Malformed(
                    f"unknown line type {kind!r} (pi-autoresearch writes config, run and hook lines)"
                )
            else:
                raise _Malformed(
                    "neither a config line nor a run line (no type, run number, metric or status)"
                )
        except _Malformed as exc:
            log.skipped.append(Skipped(number, str(exc)))
    last = log.segments[-1] if log.segments else None
    if last is not None and not last.lines and any(s.lines for s in log.segments):
        log.notes[_EMPTY_SEGMENT.format(last.config_line, "the file ends")] += 1
    return log


def _is_run_line(data: dict[str, Any]) -> bool:
    if finite(data.get("run")):
        return True  # pi's test: a numeric `run`
    return data.get("type") in (None, "run") and ("metric" in data or "status" in data or "run" in data)


def _config(
    data: dict[str, Any], number: int, current: dict[str, Any], index: int, log: ParsedLog
) -> Segment:
    """A segment from a config line, with pi's fallback for each field it leaves out; a field of
    the wrong kind is a malformed line (a lenient import uses the fallback and warns)."""
    problems: list[str] = []
    metric = data.get("metricName")
    if metric is None:
        metric = current["metric"]
    elif not isinstance(metric, str) or not metric.strip():
        problems.append(f"metricName {metric!r} must be a non-empty string")
        metric = current["metric"]
    direction = data.get("bestDirection")
    if direction is None:
        log.notes["config line without bestDirection: lower is better (pi-autoresearch's default)"] += 1
        direction = PI_DIRECTION
    elif direction not in ("higher", "lower"):
        problems.append(f"bestDirection {direction!r} must be 'higher' or 'lower'")
        direction = PI_DIRECTION
    for key in ("name", "metricUnit"):
        if data.get(key) is not None and not isinstance(data[key], str):
            problems.append(f"{key} must be a string")
    name, unit = data.get("name"), data.get("metricUnit")
    current.update(
        name=name if isinstance(name, str) and name else current["name"],
        metric=metric,
        unit=unit if isinstance(unit, str) else current["unit"],
    )
    if problems:
        log.skipped.append(
            Skipped(number, "config line: " + "; ".join(problems), "read with pi-autoresearch's defaults")
        )
    return Segment(index, current["name"], metric, direction, current["unit"], number)


def _read_status(value: Any) -> tuple[str, str, str | None]:
    """(this import's status, pi's status, a note) for a line's `status` field."""
    pi = value if value in ("discard", "crash", "checks_failed") else "keep"
    if value is None:
        return "keep", pi, "no status: read as keep, as pi-autoresearch does"
    folded = value.strip().lower() if isinstance(value, str) else None
    if folded in STATUS_MAP:
        note = None if folded == value else f"status read as {folded} (pi-autoresearch reads it as {pi})"
        return folded, pi, note
    return "keep", pi, "unknown status: read as keep, as pi-autoresearch does"


def _run_line(data: dict[str, Any], number: int, metric: str) -> LogLine:
    for key in ("description", "commit", "literature_source"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise _Malformed(f"{key} must be a string")
    if data.get("run") is not None and not finite(data["run"]):
        raise _Malformed(f"run {data['run']!r} must be a number")  # pi would drop the whole line
    status, pi_status, note = _read_status(data.get("status"))
    notes = [note] if note else []
    for key in ("timestamp", "confidence"):  # pi reads 0 and null
        if data.get(key) is not None and not finite(data[key]):
            notes.append(f"{key} is not a number: ignored, as pi-autoresearch does")
    line = LogLine(
        number=number,
        status=status,
        pi_status=pi_status,
        original_status=data.get("status"),
        values={},
        unread={},
        description=data.get("description") or "",
        commit=data.get("commit"),
        run=data.get("run"),
        timestamp=data["timestamp"] if finite(data.get("timestamp")) else None,
        confidence=data["confidence"] if finite(data.get("confidence")) else None,
        asi=data.get("asi"),
        literature_source=data.get("literature_source"),
        segment=data.get("segment"),
        fields={k: v for k, v in data.items() if k not in _RUN_FIELDS} or None,
        notes=notes,
    )
    primary = data.get("metric")
    if finite(primary):
        line.values[metric] = float(primary)
    else:
        line.unread[metric] = primary
        line.notes.append(
            "no metric: no sample (pi-autoresearch reads 0)"
            if primary is None
            else "metric is not a finite number: no sample (pi-autoresearch reads 0)"
        )
    metrics = data.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        line.unread["metrics"] = metrics
        line.notes.append("metrics is not an object: ignored, as pi-autoresearch does")
        metrics = None
    for name, value in (metrics or {}).items():
        if name == metric and metric in line.values:
            if value != line.values[metric]:
                line.unread[f"metrics.{name}"] = value
                line.notes.append("metrics gives the primary metric another value: `metric` is used")
        elif not name.strip():
            line.unread[name] = value
            line.notes.append("a metric without a name: no sample")
        elif finite(value):
            line.values[name] = float(value)
        else:
            line.unread[name] = value
            line.notes.append("a metrics value is not a finite number: no sample, as pi-autoresearch does")
    return line


def _parse_tsv(path: Path, text: str, metric: str | None, direction: str) -> ParsedLog:
    numbered = _lines(text)
    if not numbered:
        raise UserError(f"{path}: empty; nothing imported")
    header_line, header_raw = numbered[0]
    header = [cell.strip() for cell in header_raw.split("\t")]
    lowered = [h.lower() for h in header]
    if "status" not in lowered:
        raise UserError(
            f"{path}:{header_line}: a results.tsv header needs a status column "
            f"(commit, val_bpb, memory_gb, status, description); got {cap(' '.join(header), 120)!r}; "
            "nothing imported"
        )
    columns = {name: lowered.index(name) for name in _TSV_FIELDS if name in lowered}
    log = ParsedLog(path, "tsv", len(numbered), [], [], Counter(), Counter())
    rows = _tsv_rows(numbered[1:], header, columns, log)
    # A metric column holds numbers on at least half of its rows (a crash's 0 counts, a `-` does
    # not); the others (an id, a hypothesis, a kind) are text, kept with each line.
    others = [i for i, h in enumerate(lowered) if h not in _TSV_FIELDS and header[i]]
    metric_cols = [i for i in others if _numeric_column([cells[i] for _, _, cells in rows])]
    text_cols = [i for i in others if i not in metric_cols]
    if metric is not None:
        if metric not in [header[i] for i in metric_cols]:
            names = ", ".join(header[i] for i in metric_cols) or "none"
            raise UserError(
                f"{path}: no metric column {metric!r} (columns with numbers: {names}); nothing imported"
            )
        metric_cols.sort(key=lambda i: header[i] != metric)
    if not metric_cols:
        raise UserError(f"{path}:{header_line}: no column holds a number to import; nothing imported")
    segment = Segment(0, path.stem, header[metric_cols[0]], direction, None, header_line)
    log.segments.append(segment)
    for row_number, number, cells in rows:
        status = cells[columns["status"]]
        line = LogLine(
            number=number,
            status=status.lower(),
            pi_status=status.lower(),
            original_status=status,
            values={},
            unread={},
            description=cells[columns["description"]] if "description" in columns else "",
            commit=(cells[columns["commit"]] or None) if "commit" in columns else None,
            run=float(row_number),
            fields={header[i]: cells[i] for i in text_cols if cells[i]} or None,
        )
        for i in metric_cols:
            value = plain_number(cells[i])
            if value is not None:
                line.values[header[i]] = value
            else:
                line.unread[header[i]] = cells[i]
                line.notes.append(f"a {cap(header[i], 40)} cell not an ASCII decimal number: no sample")
        log.notes.update(line.notes)
        segment.lines.append(line)
    return log


def _numeric_column(cells: list[str]) -> bool:
    numbers = sum(plain_number(c) is not None for c in cells)
    return numbers > 0 and 2 * numbers >= len(cells)


def _tsv_rows(
    numbered: list[tuple[int, str]], header: list[str], columns: dict[str, int], log: ParsedLog
) -> list[tuple[int, int, list[str]]]:
    """(row number, line number, cells) of the well-formed rows; the others go to log.skipped."""
    out: list[tuple[int, int, list[str]]] = []
    description_last = columns.get("description") == len(header) - 1
    for row_number, (number, raw) in enumerate(numbered, 1):
        cells = [cell.strip() for cell in raw.split("\t")]
        if len(cells) > len(header) and description_last:
            # A tab inside the description (the last column): the rest of the row is its text.
            cells = [*cells[: len(header) - 1], "\t".join(cells[len(header) - 1 :])]
        if len(cells) == len(header) - 1 and description_last:
            cells.append("")
        if len(cells) != len(header):
            log.skipped.append(Skipped(number, f"{len(cells)} columns; the header has {len(header)}"))
            continue
        status = cells[columns["status"]]
        if status.lower() not in STATUS_MAP:
            reason = f"status {cap(status, 60)!r} must be one of keep, discard, crash, checks_failed"
            log.skipped.append(Skipped(number, reason))
            continue
        out.append((row_number, number, cells))
    return out
