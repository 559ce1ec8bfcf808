"""karpathy/autoresearch's `results.tsv` read into one segment of rows; runner.record.logformats
states the rules and calls `parse_tsv`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from kb.errors import UserError
from runner.harness.protocol import plain_number
from runner.record.logtypes import (
    LogLine,
    ParsedLog,
    Segment,
    Skipped,
    cap,
    known_status,
    numbered_lines,
    unknown_status_reason,
)

_TSV_FIELDS = ("commit", "status", "description")


def parse_tsv(
    path: Path, text: str, metric: str | None, direction: str, statuses: Mapping[str, str]
) -> ParsedLog:
    numbered = numbered_lines(text)
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
    rows = _tsv_rows(numbered[1:], header, columns, statuses, log)
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
        written = cells[columns["status"]]
        known = known_status(written, statuses)
        assert known is not None  # _tsv_rows kept only rows with a known status
        status, source = known
        if status == "skip":
            log.ignored[f"status {written}"] += 1
            continue
        line = LogLine(
            number=number,
            status=status,
            pi_status=status,
            original_status=written,
            values={},
            unread={},
            description=cells[columns["description"]] if "description" in columns else "",
            commit=(cells[columns["commit"]] or None) if "commit" in columns else None,
            run=float(row_number),
            fields={header[i]: cells[i] for i in text_cols if cells[i]} or None,
        )
        if source == "alias":
            line.notes.append(
                f"status {written.lower()!r} read as {status}, as the loops that write it mean it"
            )
        elif source == "option":
            line.notes.append(f"status {written.lower()!r} read as {status} (--status)")
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
    numbered: list[tuple[int, str]],
    header: list[str],
    columns: dict[str, int],
    statuses: Mapping[str, str],
    log: ParsedLog,
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
        if known_status(status, statuses) is None:
            log.skipped.append(Skipped(number, unknown_status_reason(status)))
            continue
        out.append((row_number, number, cells))
    return out
