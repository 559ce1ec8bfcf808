"""Import another loop's log into the history: pi-autoresearch's `autoresearch.jsonl` (or
`.auto/log.jsonl`) or karpathy/autoresearch's `results.tsv`, read by runner.record.logformats.

Each segment becomes one run (`runs.imported_from` = `<file>#segment=<n>`) with one wave. The first
line of a segment is its baseline measurement. Every other line becomes a hypothesis (origin
`import`, its literature_source kept as a source ref) and an experiment with the mapped status and
a single pair: side B is the line's own measurement, side A the value it was compared with (the
latest kept value of each metric, which is what those loops measured against). Its verdict is
stored as a decision of origin `import` with the single-sample effect and no interval, so
`autoresearch redecide` can show how little one sample decides. Values of zero or below are samples
like any other; where a ratio is undefined the decision's effect is a difference instead (the
decision's reason says so, and its `metrics` JSON holds `scale: difference`). A crash's metric (0 by
convention) is kept in the record but is no sample. Each line's change against the segment's first
line, as pi-autoresearch's dashboard shows it, is kept in `meta.vs_baseline`. A line without a time
takes the nearest earlier line's (else the nearest later one's, else the moment of the import).

pi-autoresearch's own confidence score (|best kept − baseline| / MAD of the segment's values) is
computed per segment (runner.record.import_summary) and stored in `runs.summary["import"]`, next to
this product's paired test of the same comparison, so `history` and the report show where the two
disagree. The confidence a line logged is kept in the experiment's `meta.pi_confidence`, never in the
hypothesis' 0..1 `confidence` column.

Long fields are capped where they are shown (titles, rationale, notes, source refs); the whole text
stays in the experiment's `meta` (`description`, `asi`, `literature_source`).

The whole file is read and checked before anything is written, and written in one transaction. By
default a malformed line is a one-line error naming the file and line, and nothing is imported;
`lenient` skips malformed lines, each with a warning, and counts them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.store import decisions, experiments, hypotheses, run_records, samples, waves
from runner.record.import_summary import segment_comparison
from runner.record.logformats import (
    STATUS_MAP,
    Format,
    LogLine,
    ParsedLog,
    Segment,
    Skipped,
    cap,
    finite,
    parse,
)
from runner.record.logtypes import seconds

VERDICT_MAP = {"keep": "keep", "discard": "discard"}
#: Shown lengths of imported text (the full text stays in the experiment's meta).
TITLE_MAX = 200
TEXT_MAX = 4000
REF_MAX = 500
_REF_PREFIXES = ("http://", "https://", "fork:", "gap:", "note:", "passage:", "evidence:")


@dataclass(frozen=True)
class ImportedRun:
    id: int
    name: str
    metric: str
    direction: str
    experiments: int
    kept: int
    imported_from: str
    pi_confidence: float | None = None
    paired_verdict: str | None = None
    agree: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "metric": self.metric,
            "direction": self.direction,
            "experiments": self.experiments,
            "kept": self.kept,
            "imported_from": self.imported_from,
            "pi_confidence": self.pi_confidence,
            "paired_verdict": self.paired_verdict,
            "agree": self.agree,
        }


@dataclass(frozen=True)
class ImportResult:
    path: Path
    format: Format
    lines: int
    runs: list[ImportedRun]
    skipped: list[Skipped]
    ignored: dict[str, int]
    notes: dict[str, int]

    @property
    def imported_lines(self) -> int:
        return sum(r.experiments for r in self.runs)

    @property
    def malformed(self) -> dict[str, int]:
        """Malformed lines by what a lenient import did with them (skipped, or read with defaults)."""
        return dict(Counter(s.action for s in self.skipped))

    def to_json(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "format": self.format,
            "lines": self.lines,
            "imported_lines": self.imported_lines,
            "runs": [r.to_json() for r in self.runs],
            "skipped": [s.to_json() for s in self.skipped],
            "malformed": self.malformed,
            "ignored": self.ignored,
            "notes": self.notes,
        }


def _cap_text(text: str, limit: int) -> str:
    """Multi-line text cut at `limit` characters, saying how much more the record holds."""
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n[... {len(text) - limit} more characters in the experiment's meta]"


# --- writing the runs ---------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text[:400].lower()).strip("-")[:40].rstrip("-")


def _source_ref(text: str) -> str:
    text = cap(text, REF_MAX)
    return text if text.startswith(_REF_PREFIXES) else f"note:{text}"


def _stamp(value: Any) -> float | None:
    if not finite(value):
        return None
    return seconds(float(value))  # milliseconds in pi's logs


def _times(lines: Sequence[LogLine], fallback: float) -> list[float]:
    """Each line's time; a line without one takes the nearest earlier line's, else the nearest
    later one's (a fork writes some lines without a timestamp), else `fallback` (a results.tsv
    without a time column: the moment of the import)."""
    stamps = [_stamp(line.timestamp) for line in lines]
    first_known = next((t for t in stamps if t is not None), fallback)
    out: list[float] = []
    previous: float | None = None
    for stamp in stamps:
        previous = stamp if stamp is not None else previous
        out.append(previous if previous is not None else first_known)
    return out


def _vs_baseline(value: float, baseline: float) -> float | None:
    """pi-autoresearch's "Δ baseline" (assets/template.html:956-959, log_experiment's own figure at
    index.ts:2316-2321): (value - baseline) / baseline, raw (not turned so that positive = better);
    None for a value of 0 or below or a baseline of 0."""
    if baseline == 0 or value <= 0:
        return None
    return (value - baseline) / baseline


def _better(value: float, reference: float, direction: str) -> tuple[float | None, float | None]:
    """(relative effect, difference), positive = better. The ratio needs two positive values;
    the difference is given only where the ratio is undefined."""
    if value > 0 and reference > 0:
        return (value / reference - 1 if direction == "higher" else reference / value - 1), None
    return None, (value - reference if direction == "higher" else reference - value)


def import_log(
    db: sqlite_utils.Database,
    path: Path,
    *,
    name: str | None = None,
    fmt: str = "auto",
    lenient: bool = False,
    metric: str | None = None,
    direction: str | None = None,
    statuses: Mapping[str, str] | None = None,
) -> ImportResult:
    """Import every segment of the log as a run. All or nothing: the file is read and checked
    first, then written in one transaction. `statuses` maps status words to keep, discard, crash,
    checks_failed or skip (`--status WORD=STATUS`)."""
    path = path.expanduser().resolve()
    log = parse(path, fmt=fmt, lenient=lenient, metric=metric, direction=direction, statuses=statuses)
    origin_prefix = f"{path}#"
    imported: list[ImportedRun] = []
    with transaction(db):
        earlier = run_records.imported_names(db, origin_prefix)
        if earlier:
            names = ", ".join(earlier)
            raise UserError(f"{path}: already imported (run {names}); nothing imported")
        for segment in log.segments:
            imported.append(_import_segment(db, log, segment, name, multi=len(log.segments) > 1))
        if log.skipped:
            first = log.skipped[0]
            log_event(
                db,
                "import",
                f"{len(log.skipped)} malformed lines of {path.name} skipped or read with pi's defaults "
                f"(--lenient); the first, line {first.line}: {cap(first.reason, 200)}",
                level="warning",
                run_id=imported[0].id,
                data={"file": str(path), "skipped": [s.to_json() for s in log.skipped[:1000]]},
            )
    return ImportResult(
        path=path,
        format=log.format,
        lines=log.lines,
        runs=imported,
        skipped=log.skipped,
        ignored=dict(log.ignored),
        notes=dict(log.notes),
    )


def import_jsonl(db: sqlite_utils.Database, path: Path, *, name: str | None = None) -> list[ImportedRun]:
    """Import a pi-autoresearch jsonl log strictly; returns the runs made."""
    return import_log(db, path, name=name, fmt="jsonl").runs


def _import_segment(
    db: sqlite_utils.Database, log: ParsedLog, segment: Segment, name: str | None, *, multi: bool
) -> ImportedRun:
    path = log.path
    metric, direction = segment.metric, segment.direction
    base_name = name or f"import-{_slug(segment.name or path.stem) or 'log'}"
    if multi:
        base_name = f"{base_name}-s{segment.index}"
    run_name = run_records.free_name(db, base_name)
    imported_from = f"{path}#segment={segment.index}"
    stamp = now()
    first = segment.lines[0]
    times = _times(segment.lines, stamp)
    policy = {"metric": metric, "direction": direction, "unit": segment.unit, "origin": "import"}
    run_id = run_records.create(
        db,
        {
            "name": run_name,
            "status": "finished",
            "branch": None,
            "baseline_commit": first.commit,
            "head_commit": first.commit,
            "backend": "import",
            "policy": policy,
            "imported_from": imported_from,
            "started_at": min(times),
            "ended_at": max(times),
        },
    )
    wave_id = waves.create(
        db,
        {
            "run_id": run_id,
            "number": 1,
            "baseline_commit": first.commit or "unknown",
            "status": "finished",
            "started_at": min(times),
            "ended_at": max(times),
        },
    )
    reference: dict[str, float] = {}
    reference_commit: str | None = None
    head = first.commit
    kept = 0
    experiment_ids: list[int] = []
    for position, (line, when) in enumerate(zip(segment.lines, times, strict=True)):
        experiment_id = _import_line(
            db, log, segment, line, when, position == 0, reference, reference_commit, run_id, wave_id, policy
        )
        experiment_ids.append(experiment_id)
        measured = {} if line.status == "crash" else line.values
        if line.status == "keep" or (position == 0 and measured):
            # What the next lines are compared with: the latest kept value of each metric (the
            # baseline line is the first reference whatever its status, as pi's baseline is).
            reference.update(measured)
        if line.status == "keep":
            reference_commit = line.commit or reference_commit
            head = line.commit or head
            kept += 1
    comparison = segment_comparison(segment, experiment_ids)
    summary = {
        "import": {
            "format": log.format,
            "file": str(path),
            "session": cap(segment.name, TITLE_MAX) if segment.name else None,
            "segment": segment.index,
            "config_line": segment.config_line,
            "lines": len(segment.lines),
            "notes": dict(
                Counter([*segment.notes, *(note for line in segment.lines for note in line.notes)])
            ),
            **comparison,
        }
    }
    # The summary as JSON text in its own key order (not sorted): `history --json` prints it so.
    run_records.update(db, run_id, {"head_commit": head, "summary": json.dumps(summary)})
    log_event(
        db,
        "import",
        f"imported {len(segment.lines)} lines of {path.name} (segment {segment.index}) as run {run_name}",
        run_id=run_id,
        data={"file": str(path), "segment": segment.index, "format": log.format},
    )
    return ImportedRun(
        id=run_id,
        name=run_name,
        metric=metric,
        direction=direction,
        experiments=len(segment.lines),
        kept=kept,
        imported_from=imported_from,
        pi_confidence=comparison["pi_confidence"],
        paired_verdict=(comparison["paired"] or {}).get("verdict"),
        agree=comparison["agree"],
    )


def _import_line(
    db: sqlite_utils.Database,
    log: ParsedLog,
    segment: Segment,
    line: LogLine,
    when: float,
    is_baseline: bool,
    reference: dict[str, float],
    reference_commit: str | None,
    run_id: int,
    wave_id: int,
    policy: dict[str, Any],
) -> int:
    metric, direction = segment.metric, segment.direction
    imported_from = f"{log.path}#segment={segment.index}"
    status = line.status
    # A crash's metric (0 by convention) measured nothing: kept in meta, never a sample.
    measured = {} if status == "crash" else line.values
    label = f"run {line.run:g}" if line.run is not None else f"line {line.number}"
    title = cap(line.description, TITLE_MAX) or label
    hypothesis_id = None
    if not is_baseline:
        rationale = ""
        if isinstance(line.asi, dict):
            rationale = str(line.asi.get("hypothesis") or line.asi.get("rationale") or "")
        hypothesis_id = hypotheses.create(
            db,
            {
                "title": title,
                "rationale": _cap_text(rationale, TEXT_MAX),
                "status": "patched",
                "origin": "import",
                # pi's confidence is a multiple of its noise floor, not this column's 0..1: it is
                # kept in the experiment's meta.pi_confidence.
                "confidence": None,
                "notes": _cap_text(json.dumps(line.asi, sort_keys=True), TEXT_MAX)
                if line.asi is not None
                else None,
                "dedupe_key": f"import:{imported_from}:{line.number}",
                "created_at": when,
                "updated_at": when,
            },
        )
        if line.literature_source:
            hypotheses.add_source_ref(db, hypothesis_id, _source_ref(line.literature_source))
    compared = None if is_baseline else _compare(line, metric, direction, reference)
    experiment_id = experiments.create(
        db,
        {
            "run_id": run_id,
            "wave_id": wave_id,
            "hypothesis_id": hypothesis_id,
            "kind": "candidate",
            "title": title,
            "status": STATUS_MAP[status],
            "reason": _worse_keep(status, metric, compared),
            "baseline_commit": reference_commit or segment.lines[0].commit,
            "candidate_commit": line.commit,
            "meta": {
                "imported": True,
                "format": log.format,
                "line": line.number,
                "run": line.run,
                "segment": line.segment if line.segment is not None else segment.index,
                "original_status": line.original_status,
                "pi_status": line.pi_status,
                "baseline": is_baseline,
                "pi_confidence": line.confidence,
                # pi's baseline is the segment's first line, a value it does not read is 0.
                "vs_baseline": _vs_baseline(
                    line.values.get(metric, 0.0), segment.lines[0].values.get(metric, 0.0)
                ),
                "asi": line.asi,
                "metric_unit": segment.unit,
                "description": line.description,
                "literature_source": line.literature_source,
                "values": line.values,
                "fields": line.fields,
                "unread": line.unread or None,
                "read_as": line.notes or None,
            },
            "created_at": when,
            "started_at": when,
            "ended_at": when,
        },
    )
    # The baseline measurement is side A; any other line's own value is side B, and side A the
    # value it was compared with.
    sides = (
        [("A", measured)]
        if is_baseline
        else [("B", measured), ("A", {k: reference[k] for k in measured if k in reference})]
    )
    for side, side_values in sides:
        for name_, value in side_values.items():
            samples.insert(
                db,
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
        _import_decision(db, line, metric, reference, compared, experiment_id, policy, when)
    return experiment_id


def _compare(
    line: LogLine, metric: str, direction: str, reference: dict[str, float]
) -> tuple[float | None, float | None] | None:
    """(relative effect, difference) of the line's primary value against the value it was compared
    with (`_better`), or None when either is missing."""
    if metric in line.values and metric in reference:
        return _better(line.values[metric], reference[metric], direction)
    return None


def _worse_keep(status: str, metric: str, compared: tuple[float | None, float | None] | None) -> str | None:
    """The experiment's reason for a line the log kept although its own numbers say it got worse
    than the value it was compared with: history, the report and the console then show `kept:
    kept by the log, worse by its numbers`, never a bare kept (which reads as a winner)."""
    if status != "keep" or compared is None:
        return None
    effect, difference = compared
    if effect is not None and effect < 0:
        return f"kept by the log, worse by its numbers ({metric} {effect:+.1%} against the last kept value)"
    if difference is not None and difference < 0:
        return f"kept by the log, worse by its numbers ({metric} {difference:+g} against the last kept value)"
    return None


def _import_decision(
    db: sqlite_utils.Database,
    line: LogLine,
    metric: str,
    reference: dict[str, float],
    compared: tuple[float | None, float | None] | None,
    experiment_id: int,
    policy: dict[str, Any],
    when: float,
) -> None:
    effect = difference = None
    reason = f"imported verdict {line.status!r} from one sample"
    if line.status != line.original_status:
        reason += f" (the log says {cap(str(line.original_status), 40)!r})"
    if compared is not None:
        effect, difference = compared
        if difference is not None:
            reason += (
                f"; on a difference scale ({metric} {line.values[metric]:g} against {reference[metric]:g}: "
                f"{difference:+g}, positive = better), a ratio being undefined for values of 0 or below"
            )
    else:
        reason += f"; no value of {metric} to compare, so no effect"
    worse = _worse_keep(line.status, metric, compared)
    if worse is not None:
        reason += f"; {worse}"
    if line.confidence is not None:
        reason += f" (pi confidence {line.confidence:g})"
    per_metric: dict[str, Any] = {
        k: {"candidate": v, "baseline": reference.get(k)} for k, v in line.values.items()
    }
    if difference is not None:
        per_metric[metric].update(scale="difference", difference=difference)
    decisions.record(
        db,
        {
            "experiment_id": experiment_id,
            "verdict": VERDICT_MAP[line.status],
            "metric": metric,
            "effect": effect,
            "pairs": 1,
            "reason": reason,
            "policy": policy,
            "metrics": per_metric,
            "is_final": 1,
            "origin": "import",
            "created_at": when,
        },
    )
