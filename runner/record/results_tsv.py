"""karpathy/autoresearch's `results.tsv` (and its forks' variants) read into one segment of rows;
runner.record.logformats states the rules and calls `parse_tsv`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from kb.errors import UserError
from runner.harness.protocol import plain_number
from runner.record.logtypes import (
    LogLine,
    Malformed,
    ParsedLog,
    Segment,
    Skipped,
    cap,
    check_time,
    known_status,
    numbered_lines,
    unknown_status_reason,
)

#: Columns read as what they say (any case); the others hold metrics or text.
FIELD_COLUMNS = ("commit", "status", "description")
#: Columns that label a row (numbers that are no measurement): an iteration, an experiment's id, a
#: phase (uditgoenka/autoresearch's `iteration`, the SkyPilot example's `experiment_id`, forks'
#: `experiment`, `exp_id`, `phase`). Kept as text.
LABEL_COLUMNS = frozenset(
    ("iteration", "iter", "experiment", "experiment_id", "exp", "exp_id", "id", "run", "run_id")
    + ("trial", "round", "phase", "stage", "index", "idx")
)
#: A column giving each row's time (ISO 8601, or Unix seconds or milliseconds).
TIME_COLUMNS = ("timestamp", "time", "datetime", "date", "ts")
#: Cells that say "no value" rather than hold one (a crash's `-`, `NA` for an unmeasured metric).
PLACEHOLDERS = frozenset(("", "-", "--", "—", "–", "n/a", "na", "nan", "none", "null", "?"))
#: uditgoenka/autoresearch writes `# metric_direction: higher_is_better` above the header
#: (autoresearch.md:49; its evals read it back, evals.md:26).
_DIRECTION_COMMENT = re.compile(r"#\s*metric_direction\s*:\s*(higher|lower)(?:_is_better)?\b", re.IGNORECASE)
_HEADER_HINT = "(commit, val_bpb, memory_gb, status, description)"
DEFAULT_DIRECTION = "lower"  # program.md: the lowest val_bpb


def parse_tsv(
    path: Path, text: str, metric: str | None, direction: str | None, statuses: Mapping[str, str]
) -> ParsedLog:
    numbered = numbered_lines(text)
    log = ParsedLog(path, "tsv", len(numbered), [], [], Counter(), Counter())
    comment_direction = None
    rows: list[tuple[int, str]] = []
    for number, raw in numbered:
        if raw.lstrip().startswith("#"):  # a comment line, above the header or between rows
            log.ignored["comment"] += 1
            found = _DIRECTION_COMMENT.match(raw.strip())
            if found and comment_direction is None:
                comment_direction = found.group(1).lower()
            continue
        rows.append((number, raw))
    if not rows:
        raise UserError(f"{path}: empty; nothing imported")
    header_line, header_raw = rows[0]
    header = _cells(header_raw)
    while header and not header[-1]:  # a header ending in a tab
        header.pop()
    lowered = [h.lower() for h in header]
    if "status" not in lowered:
        raise UserError(_no_header(path, header_line, header, statuses))
    columns = {name: lowered.index(name) for name in FIELD_COLUMNS if name in lowered}
    table = _rows(rows[1:], header, columns, statuses, log)
    others = [i for i, h in enumerate(lowered) if h not in FIELD_COLUMNS and header[i]]
    time_col = next((i for i in others if lowered[i] in TIME_COLUMNS), None)
    labels = [i for i in others if lowered[i] in LABEL_COLUMNS or i == time_col]
    # A metric column holds numbers on at least half of the rows that give it a value (a crash's 0
    # counts; `-` or `NA` gives none); the others (a hypothesis, a kind, a guard's pass) are text.
    metric_cols = [
        i for i in others if i not in labels and _numeric_column([cells[i] for _, _, cells in table])
    ]
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
    segment = Segment(0, path.stem, header[metric_cols[0]], direction or DEFAULT_DIRECTION, None, header_line)
    log.segments.append(segment)
    for row_number, number, cells in table:
        try:
            line = _line(
                row_number, number, cells, header, columns, metric_cols, text_cols, time_col, statuses
            )
        except Malformed as exc:
            log.skipped.append(Skipped(number, str(exc)))
            continue
        if line is None:
            log.ignored[f"status {cells[columns['status']]}"] += 1
            continue
        log.notes.update(line.notes)
        segment.lines.append(line)
    if direction is None:
        segment.direction, note = _direction(segment, comment_direction)
        segment.notes.append(note)
        log.notes[note] += 1
    return log


def _cells(raw: str) -> list[str]:
    return [cell.strip() for cell in raw.split("\t")]


def _no_header(path: Path, number: int, first: list[str], statuses: Mapping[str, str]) -> str:
    """The error for a first line without a status column: a row where the header should be (its
    status word found), or a header of another kind."""
    for i, cell in enumerate(first):
        if known_status(cell, statuses) is not None:
            return (
                f"{path}:{number}: no header row: the first line is a row (status {cell!r} in column "
                f"{i + 1}); a results.tsv starts with a header {_HEADER_HINT}; nothing imported"
            )
    return (
        f"{path}:{number}: a results.tsv header needs a status column {_HEADER_HINT}; "
        f"got {cap(' '.join(first), 120)!r}; nothing imported"
    )


def _numeric_column(cells: list[str]) -> bool:
    given = [c for c in cells if c.lower() not in PLACEHOLDERS]
    numbers = sum(plain_number(c) is not None for c in given)
    return numbers > 0 and 2 * numbers >= len(given)


def _rows(
    numbered: list[tuple[int, str]],
    header: list[str],
    columns: dict[str, int],
    statuses: Mapping[str, str],
    log: ParsedLog,
) -> list[tuple[int, int, list[str]]]:
    """(row number, line number, cells) of the well-formed rows; the others go to log.skipped."""
    out: list[tuple[int, int, list[str]]] = []
    width = len(header)
    description_last = columns.get("description") == width - 1
    for row_number, (number, raw) in enumerate(numbered, 1):
        cells = _cells(raw)
        while len(cells) > width and not cells[-1]:  # a row ending in a tab
            cells.pop()
        if len(cells) > width and description_last:
            # A tab inside the description (the last column): the rest of the row is its text.
            cells = [*cells[: width - 1], "\t".join(cells[width - 1 :])]
        if len(cells) == width - 1 and description_last:
            cells.append("")
        if len(cells) != width:
            log.skipped.append(Skipped(number, f"{len(cells)} columns; the header has {width}"))
            continue
        status = cells[columns["status"]]
        if known_status(status, statuses) is None:
            log.skipped.append(Skipped(number, unknown_status_reason(status)))
            continue
        out.append((row_number, number, cells))
    return out


def _line(
    row_number: int,
    number: int,
    cells: list[str],
    header: list[str],
    columns: dict[str, int],
    metric_cols: list[int],
    text_cols: list[int],
    time_col: int | None,
    statuses: Mapping[str, str],
) -> LogLine | None:
    """A row as a line, or None for a row whose status word means skip."""
    written = cells[columns["status"]]
    known = known_status(written, statuses)
    assert known is not None  # _rows kept only rows with a known status
    status, source = known
    if status == "skip":
        return None
    commit = cells[columns["commit"]] if "commit" in columns else ""
    line = LogLine(
        number=number,
        status=status,
        pi_status=status,
        original_status=written,
        values={},
        unread={},
        description=cells[columns["description"]] if "description" in columns else "",
        commit=None if commit.lower() in PLACEHOLDERS else commit,
        run=float(row_number),
        fields={header[i]: cells[i] for i in text_cols if cells[i]} or None,
    )
    if source == "alias":
        line.notes.append(f"status {written.lower()!r} read as {status}, as the loops that write it mean it")
    elif source == "option":
        line.notes.append(f"status {written.lower()!r} read as {status} (--status)")
    if time_col is not None:
        line.timestamp = _when(cells[time_col])
        if line.timestamp is not None:
            check_time(line.timestamp, cap(header[time_col], 40))
        if line.timestamp is None and cells[time_col]:
            line.notes.append(f"a {cap(header[time_col], 40)} cell that is no date or time: ignored")
    for i in metric_cols:
        value = plain_number(cells[i])
        if value is not None:
            line.values[header[i]] = value
            continue
        line.unread[header[i]] = cells[i]
        line.notes.append(
            f"no {cap(header[i], 40)} value ({cells[i] or 'empty'}): no sample"
            if cells[i].lower() in PLACEHOLDERS
            else f"a {cap(header[i], 40)} cell not an ASCII decimal number: no sample"
        )
    return line


def _when(cell: str) -> float | None:
    """Unix seconds from an ISO 8601 date or time (UTC unless it says otherwise), or from Unix
    seconds or milliseconds; None when the cell is neither."""
    number = plain_number(cell)
    if number is not None:
        return number
    try:
        moment = datetime.fromisoformat(cell.strip())
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _direction(segment: Segment, comment: str | None) -> tuple[str, str]:
    """Which way is better when --direction does not say: the log's `# metric_direction` comment,
    else the way its keeps went (each keep against the kept value before it), else program.md's
    lower. (direction, how it was decided)."""
    if comment is not None:
        return comment, f"{comment} is better: the direction from the log's `# metric_direction` comment"
    metric = segment.metric
    reference: float | None = None
    up = down = 0
    for position, line in enumerate(segment.lines):
        value = line.values.get(metric)
        if value is None or line.status == "crash":
            continue
        if reference is not None and line.status == "keep" and position > 0:
            up += value > reference
            down += value < reference
        if line.status == "keep" or reference is None:
            reference = value
    moved = up + down
    if up > down:
        return "higher", (
            f"higher is better, as {up} of {moved} keeps after the first row raised {metric} "
            "(or say --direction)"
        )
    if down > up:
        return "lower", (
            f"lower is better, as {down} of {moved} keeps after the first row lowered {metric} "
            "(or say --direction)"
        )
    return DEFAULT_DIRECTION, (
        f"lower is better (program.md's val_bpb): the keeps do not say which way {metric} improves "
        "(or say --direction)"
    )
