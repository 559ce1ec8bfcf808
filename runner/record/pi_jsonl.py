"""pi-autoresearch's log (`autoresearch.jsonl`, `.auto/log.jsonl`) read into segments of run lines,
as its own reader (extensions/pi-autoresearch/jsonl.ts) reads it; runner.record.logformats states
the rules and calls `parse_jsonl`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.record.logtypes import (
    MAX_DEPTH,
    LogLine,
    Malformed,
    ParsedLog,
    Segment,
    Skipped,
    check_time,
    check_values,
    finite,
    known_status,
    numbered_lines,
)

#: pi-autoresearch's defaults (jsonl.ts): a config without bestDirection means lower is better.
PI_DIRECTION = "lower"
PI_METRIC = "metric"
#: Line types the writers write and pi-autoresearch's reader does not read back; skipped here too:
#: hook lines (hooks.ts:146-155) and fan92rus/pi-autoresearch's finalize line (index.ts:5264-5273).
SKIPPED_TYPES = ("hook", "finalize")
#: monotykamary/pi-autoresearch writes its config line in snake_case (harness/server.ts:819-828)
#: and reads it back so (src/lifecycle/handlers.ts:108-113): its key, for each of pi's.
SNAKE_CONFIG = {"metricName": "metric_name", "metricUnit": "metric_unit", "bestDirection": "direction"}
_EMPTY_SEGMENT = "config line {} starts a segment with no run lines ({}): nothing to import"
_SNAKE_NOTE = (
    "config line with metric_name, metric_unit, direction (monotykamary/pi-autoresearch's keys): "
    "read as metricName, metricUnit, bestDirection"
)
#: What a pi-autoresearch run line holds (log_experiment); other fields are kept as written.
_RUN_FIELDS = frozenset(
    ("type", "run", "commit", "metric", "metrics", "status", "description", "timestamp", "segment")
    + ("confidence", "asi", "literature_source")
)


def parse_jsonl(path: Path, text: str, statuses: Mapping[str, str]) -> ParsedLog:
    log = ParsedLog(path, "jsonl", 0, [], [], Counter(), Counter())
    # What pi's reader carries from one config line to the next.
    current = {"name": None, "metric": PI_METRIC, "unit": None}
    for number, raw in numbered_lines(text):
        log.lines += 1
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            log.skipped.append(Skipped(number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        except RecursionError:
            log.skipped.append(Skipped(number, f"nested more than {MAX_DEPTH} levels deep"))
            continue
        if not isinstance(data, dict):
            log.skipped.append(Skipped(number, "not a JSON object"))
            continue
        try:
            check_values(data)
            _read_line(log, data, number, current, statuses)
        except Malformed as exc:
            log.skipped.append(Skipped(number, str(exc)))
    last = log.segments[-1] if log.segments else None
    if last is not None and not last.lines and any(s.lines for s in log.segments):
        log.notes[_EMPTY_SEGMENT.format(last.config_line, "the file ends")] += 1
    return log


def _read_line(
    log: ParsedLog, data: dict[str, Any], number: int, current: dict[str, Any], statuses: Mapping[str, str]
) -> None:
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
        line = _run_line(data, number, log.segments[-1].metric, statuses)
        if line is None:  # a status word that means skip
            log.ignored[f"status {data.get('status')}"] += 1
            return
        if log.segments[-1].config_line is None:  # counted per line, as every note is
            log.notes[
                "run lines before any config line: metric `metric`, lower is better (pi's defaults)"
            ] += 1
        if finite(line.segment) and line.segment != log.segments[-1].pi_segment:
            line.notes.append(
                "a segment field other than the config lines make it: read by its place in "
                "the file, as pi-autoresearch does"
            )
        log.notes.update(line.notes)
        log.segments[-1].lines.append(line)
    elif kind is not None:
        raise Malformed(f"unknown line type {kind!r} (pi-autoresearch writes config, run and hook lines)")
    else:
        raise Malformed("neither a config line nor a run line (no type, run number, metric or status)")


def _is_run_line(data: dict[str, Any]) -> bool:
    if finite(data.get("run")):
        return True  # pi's test: a numeric `run`
    return data.get("type") in (None, "run") and ("metric" in data or "status" in data or "run" in data)


def _config_field(data: dict[str, Any], key: str) -> Any:
    """A config line's field, or its snake_case twin when pi's key is not there."""
    return data.get(key) if key in data else data.get(SNAKE_CONFIG[key])


def _config(
    data: dict[str, Any], number: int, current: dict[str, Any], index: int, log: ParsedLog
) -> Segment:
    """A segment from a config line, with pi's fallback for each field it leaves out; a field of
    the wrong kind is a malformed line (a lenient import uses the fallback and warns)."""
    problems: list[str] = []
    if any(key not in data and snake in data for key, snake in SNAKE_CONFIG.items()):
        log.notes[_SNAKE_NOTE] += 1
    metric = _config_field(data, "metricName")
    if metric is None:
        metric = current["metric"]
    elif not isinstance(metric, str) or not metric.strip():
        problems.append(f"metricName {metric!r} must be a non-empty string")
        metric = current["metric"]
    direction = _config_field(data, "bestDirection")
    if direction is None:
        log.notes["config line without bestDirection: lower is better (pi-autoresearch's default)"] += 1
        direction = PI_DIRECTION
    elif direction not in ("higher", "lower"):
        problems.append(f"bestDirection {direction!r} must be 'higher' or 'lower'")
        direction = PI_DIRECTION
    name, unit = data.get("name"), _config_field(data, "metricUnit")
    if name is not None and not isinstance(name, str):
        problems.append("name must be a string")
    if unit is not None and not isinstance(unit, str):
        problems.append("metricUnit must be a string")
    current.update(
        name=name if isinstance(name, str) and name else current["name"],
        metric=metric,
        # pi writes "" for a metric without a unit (index.ts:1594): unitless, as its dashboard says.
        unit=(unit or None) if isinstance(unit, str) else current["unit"],
    )
    if problems:
        log.skipped.append(
            Skipped(number, "config line: " + "; ".join(problems), "read with pi-autoresearch's defaults")
        )
    return Segment(index, current["name"], metric, direction, current["unit"], number)


def _read_status(value: Any, statuses: Mapping[str, str]) -> tuple[str, str, str | None]:
    """(this import's status or `skip`, pi's status, a note) for a line's `status` field."""
    pi = value if value in ("discard", "crash", "checks_failed") else "keep"
    if value is None:
        return "keep", pi, "no status: read as keep, as pi-autoresearch does"
    known = known_status(value, statuses) if isinstance(value, str) else None
    if known is None:
        return "keep", pi, "unknown status: read as keep, as pi-autoresearch does"
    status, source = known
    if source == "word" and status == value:
        return status, pi, None
    if source == "word":
        return status, pi, f"status read as {status} (pi-autoresearch reads it as {pi})"
    how = "--status" if source == "option" else "what the loop that writes it means"
    return status, pi, f"status {value!r} read as {status} ({how}; pi-autoresearch reads it as {pi})"


def _run_line(data: dict[str, Any], number: int, metric: str, statuses: Mapping[str, str]) -> LogLine | None:
    for key in ("description", "commit", "literature_source"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise Malformed(f"{key} must be a string")
    if data.get("run") is not None and not finite(data["run"]):
        raise Malformed(f"run {data['run']!r} must be a number")  # pi would drop the whole line
    status, pi_status, note = _read_status(data.get("status"), statuses)
    if status == "skip":
        return None
    notes = [note] if note else []
    for key in ("timestamp", "confidence"):  # pi reads 0 and null
        if data.get(key) is not None and not finite(data[key]):
            notes.append(f"{key} is not a number: ignored, as pi-autoresearch does")
    if finite(data.get("timestamp")):
        check_time(data["timestamp"])
    if data.get("timestamp") is None:
        notes.append("no timestamp: the time of the nearest line that has one (pi-autoresearch reads 0)")
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
    _read_values(line, data, metric)
    return line


def _read_values(line: LogLine, data: dict[str, Any], metric: str) -> None:
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
