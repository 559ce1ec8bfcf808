"""Import a pi-autoresearch / SkyPilot-example `autoresearch.jsonl` log into the history.

The log is one JSON object per line. A config line (`"type": "config"`, `metricName`,
`bestDirection`, optional `name`, `metricUnit`) starts a segment; run lines follow (`run`,
`commit`, `metric`, `metrics`, `status` keep|discard|crash|checks_failed, `description`,
`timestamp`, `confidence`, `asi`, `literature_source`, `segment`).

Each segment becomes one run (`runs.imported_from` = `<file>#segment=<n>`) with one wave. The first
run line of a segment is its baseline measurement. Every other line becomes a hypothesis (origin
`import`, its literature_source kept as a source ref) and an experiment with the mapped status and
a single pair: side B is the line's own measurement, side A the value it was compared with (the
segment's latest kept measurement, which is what that loop measured against). Its verdict is
stored as a decision of origin `import` with the single-sample effect and no interval, so
`autoresearch redecide` can show how little one sample decides.

The whole file is checked before anything is written, and written in one transaction: a malformed
line is a one-line error naming the file and line, and nothing is imported.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from kb.db import insert, log_event, now, one, rows, transaction
from kb.errors import UserError, read_text

STATUS_MAP = {"keep": "kept", "discard": "discarded", "crash": "crashed", "checks_failed": "checks_failed"}
VERDICT_MAP = {"keep": "keep", "discard": "discard"}
_METRIC_NAME = re.compile(r"[\w.µ]+")
_REF_PREFIXES = ("http://", "https://", "fork:", "gap:", "note:", "passage:", "evidence:")


@dataclass
class _Line:
    number: int
    data: dict[str, Any]


@dataclass
class _Segment:
    index: int
    config: dict[str, Any]
    config_line: int | None
    lines: list[_Line] = field(default_factory=list)


@dataclass(frozen=True)
class ImportedRun:
    id: int
    name: str
    metric: str
    direction: str
    experiments: int
    kept: int
    imported_from: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "metric": self.metric,
            "direction": self.direction,
            "experiments": self.experiments,
            "kept": self.kept,
            "imported_from": self.imported_from,
        }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fail(path: Path, number: int, reason: str) -> UserError:
    return UserError(f"{path}:{number}: {reason}; nothing imported")


def _check_config(path: Path, number: int, data: dict[str, Any]) -> dict[str, Any]:
    metric = data.get("metricName")
    if not isinstance(metric, str) or not _METRIC_NAME.fullmatch(metric):
        raise _fail(path, number, f"config line: metricName {metric!r} must be a name matching [\\w.µ]+")
    direction = data.get("bestDirection", "higher")
    if direction not in ("higher", "lower"):
        raise _fail(path, number, f"config line: bestDirection {direction!r} must be 'higher' or 'lower'")
    for key in ("name", "metricUnit"):
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise _fail(path, number, f"config line: {key} must be a string")
    return {
        "name": data.get("name"),
        "metric": metric,
        "direction": direction,
        "unit": data.get("metricUnit"),
    }


def _check_run(path: Path, number: int, data: dict[str, Any]) -> None:
    status = data.get("status")
    if status not in STATUS_MAP:
        raise _fail(path, number, f"status {status!r} must be one of {', '.join(STATUS_MAP)}")
    if "metric" not in data or not _finite(data["metric"]):
        raise _fail(path, number, f"metric {data.get('metric')!r} must be a finite number")
    metrics = data.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise _fail(path, number, "metrics must be an object of name: number")
        for name, value in metrics.items():
            if not _METRIC_NAME.fullmatch(str(name)) or not _finite(value):
                raise _fail(path, number, f"metrics: {name}={value!r} must be a name and a finite number")
    for key in ("description", "commit", "literature_source"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise _fail(path, number, f"{key} must be a string")
    for key in ("timestamp", "confidence", "run", "segment"):
        if data.get(key) is not None and not _finite(data[key]):
            raise _fail(path, number, f"{key} {data[key]!r} must be a number")
    if data.get("asi") is not None and not isinstance(data["asi"], dict | str):
        raise _fail(path, number, "asi must be an object")


def parse(path: Path) -> list[_Segment]:
    """Read and check the whole log (no database access). Raises UserError on the first bad line."""
    text = read_text(path)
    segments: list[_Segment] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(path, number, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise _fail(path, number, "not a JSON object")
        kind = data.get("type")
        if kind == "config":
            segments.append(_Segment(len(segments), _check_config(path, number, data), number))
            continue
        if kind not in (None, "run"):
            raise _fail(path, number, f"unknown line type {kind!r} (expected config or a run line)")
        _check_run(path, number, data)
        if not segments:  # run lines before any config line: a segment with a generic metric name
            segments.append(
                _Segment(0, {"name": None, "metric": "metric", "direction": "higher", "unit": None}, None)
            )
        segments[-1].lines.append(_Line(number, data))
    segments = [s for s in segments if s.lines]
    if not segments:
        raise UserError(f"{path}: no run lines; nothing imported")
    return segments


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].rstrip("-")


def _unique_name(db: sqlite_utils.Database, base: str) -> str:
    name, n = base, 1
    while one(db, "SELECT id FROM runs WHERE name = ?", [name]):
        n += 1
        name = f"{base}-{n}"
    return name


def _source_ref(text: str) -> str:
    text = " ".join(text.split())
    return text if text.startswith(_REF_PREFIXES) else f"note:{text}"


def _stamp(value: Any, fallback: float) -> float:
    if not _finite(value):
        return fallback
    seconds = float(value)
    return seconds / 1000 if seconds > 1e11 else seconds  # milliseconds in some logs


def _better_ratio(value: float, reference: float, direction: str) -> float | None:
    if value <= 0 or reference <= 0:
        return None
    return value / reference - 1 if direction == "higher" else reference / value - 1


def import_jsonl(db: sqlite_utils.Database, path: Path, *, name: str | None = None) -> list[ImportedRun]:
    """Import every segment of the log as a run; returns the runs made. All or nothing."""
    path = path.expanduser().resolve()
    segments = parse(path)
    origin_prefix = f"{path}#"
    imported: list[ImportedRun] = []
    with transaction(db):
        earlier = rows(
            db, "SELECT name FROM runs WHERE imported_from LIKE ? ORDER BY id", [origin_prefix + "%"]
        )
        if earlier:
            names = ", ".join(r["name"] for r in earlier)
            raise UserError(f"{path}: already imported (run {names}); nothing imported")
        for segment in segments:
            imported.append(_import_segment(db, path, segment, name, multi=len(segments) > 1))
    return imported


def _import_segment(
    db: sqlite_utils.Database, path: Path, segment: _Segment, name: str | None, *, multi: bool
) -> ImportedRun:
    cfg = segment.config
    metric, direction = cfg["metric"], cfg["direction"]
    base_name = name or f"import-{_slug(cfg['name'] or path.stem) or 'log'}"
    if multi:
        base_name = f"{base_name}-s{segment.index}"
    run_name = _unique_name(db, base_name)
    imported_from = f"{path}#segment={segment.index}"
    stamp = now()
    first = segment.lines[0].data
    times = [_stamp(line.data.get("timestamp"), stamp) for line in segment.lines]
    policy = {"metric": metric, "direction": direction, "unit": cfg["unit"], "origin": "import"}
    run_id = insert(
        db,
        "runs",
        {
            "name": run_name,
            "status": "finished",
            "branch": None,
            "baseline_commit": first.get("commit"),
            "head_commit": first.get("commit"),
            "backend": "import",
            "policy": policy,
            "imported_from": imported_from,
            "started_at": min(times),
            "ended_at": max(times),
        },
    )
    wave_id = insert(
        db,
        "waves",
        {
            "run_id": run_id,
            "number": 1,
            "baseline_commit": first.get("commit") or "unknown",
            "status": "finished",
            "started_at": min(times),
            "ended_at": max(times),
        },
    )
    reference: dict[str, float] = {}
    reference_commit: str | None = None
    head: str | None = first.get("commit")
    kept = 0
    for position, (line, when) in enumerate(zip(segment.lines, times, strict=True)):
        data = line.data
        status = data["status"]
        values = {metric: float(data["metric"])}
        values.update({str(k): float(v) for k, v in (data.get("metrics") or {}).items()})
        # A crash's metric (usually 0) measured nothing; non-positive values cannot be ratios.
        measured = {} if status == "crash" else {k: v for k, v in values.items() if v > 0}
        is_baseline = position == 0
        description = " ".join(str(data.get("description") or "").split())
        title = description or (
            f"run {data['run']}" if data.get("run") is not None else f"line {line.number}"
        )
        asi = data.get("asi")
        hypothesis_id = None
        if not is_baseline:
            rationale = ""
            if isinstance(asi, dict):
                rationale = str(asi.get("hypothesis") or asi.get("rationale") or "")
            hypothesis_id = insert(
                db,
                "hypotheses",
                {
                    "title": title,
                    "rationale": rationale,
                    "status": "patched",
                    "origin": "import",
                    "confidence": data.get("confidence"),
                    "notes": json.dumps(asi, sort_keys=True) if asi is not None else None,
                    "dedupe_key": f"import:{imported_from}:{line.number}",
                    "created_at": when,
                    "updated_at": when,
                },
            )
            if data.get("literature_source"):
                insert(
                    db,
                    "hypothesis_sources",
                    {"hypothesis_id": hypothesis_id, "ref": _source_ref(data["literature_source"])},
                )
        exp_status = STATUS_MAP[status]
        experiment_id = insert(
            db,
            "experiments",
            {
                "run_id": run_id,
                "wave_id": wave_id,
                "hypothesis_id": hypothesis_id,
                "kind": "candidate",
                "title": title,
                "status": exp_status,
                "baseline_commit": reference_commit or first.get("commit"),
                "candidate_commit": data.get("commit"),
                "meta": {
                    "imported": True,
                    "line": line.number,
                    "run": data.get("run"),
                    "segment": data.get("segment", segment.index),
                    "original_status": status,
                    "baseline": is_baseline,
                    "confidence": data.get("confidence"),
                    "asi": asi,
                    "metric_unit": cfg["unit"],
                },
                "created_at": when,
                "started_at": when,
                "ended_at": when,
            },
        )
        # The baseline measurement is side A; any other line's own value is side B, and side A is
        # the measurement it was compared with.
        sides = [("A", measured)] if is_baseline else [("B", measured), ("A", reference)]
        for side, side_values in sides:
            for name_, value in side_values.items():
                if side == "A" and name_ not in measured:
                    continue
                insert(
                    db,
                    "samples",
                    {
                        "experiment_id": experiment_id,
                        "pair": 0,
                        "side": side,
                        "metric": name_,
                        "seq": 0,
                        "value": value,
                        "created_at": when,
                    },
                )
        if not is_baseline and status in VERDICT_MAP:
            effect = (
                _better_ratio(values[metric], reference[metric], direction) if metric in reference else None
            )
            confidence = data.get("confidence")
            insert(
                db,
                "decisions",
                {
                    "experiment_id": experiment_id,
                    "verdict": VERDICT_MAP[status],
                    "metric": metric,
                    "effect": effect,
                    "pairs": 1,
                    "reason": f"imported verdict {status!r} from one sample"
                    + (f" (confidence {confidence})" if confidence is not None else ""),
                    "policy": policy,
                    "metrics": {k: {"candidate": v, "baseline": reference.get(k)} for k, v in values.items()},
                    "is_final": 1,
                    "origin": "import",
                    "created_at": when,
                },
            )
        if status == "keep" and measured:
            reference = dict(measured)
            reference_commit = data.get("commit") or reference_commit
            head = data.get("commit") or head
            kept += 1
    db.execute("UPDATE runs SET head_commit = ? WHERE id = ?", [head, run_id])
    log_event(
        db,
        "import",
        f"imported {len(segment.lines)} lines of {path.name} (segment {segment.index}) as run {run_name}",
        run_id=run_id,
        data={"file": str(path), "segment": segment.index},
    )
    return ImportedRun(
        id=run_id,
        name=run_name,
        metric=metric,
        direction=direction,
        experiments=len(segment.lines),
        kept=kept,
        imported_from=imported_from,
    )
