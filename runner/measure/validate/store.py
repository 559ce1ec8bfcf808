"""validation.json: the measurement and its report stored in the workspace, and the gate `run`
checks before it starts (the fingerprint still matches, the measurement passes current settings)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kb.errors import UserError
from kb.workspace import Workspace
from runner.measure.validate.fingerprint import changed, fingerprint, inputs_of
from runner.measure.validate.judge import evaluate
from runner.measure.validate.model import Measurement, Report

VALIDATION_FILE = "validation.json"
VERSION = 1


def path_of(ws: Workspace) -> Path:
    return ws.root / VALIDATION_FILE


def save(ws: Workspace, measurement: Measurement, report: Report) -> Path:
    path = path_of(ws)
    data = {"version": VERSION, "measurement": measurement.to_json(), "report": report.to_json()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load(ws: Workspace) -> Measurement | None:
    path = path_of(ws)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); run `autoresearch validate` again") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    return Measurement.from_json(data["measurement"])


@dataclass
class Gate:
    ok: bool
    reason: str
    """Why not, in one line with what to do; empty when ok."""
    report: Report | None = None


def gate(ws: Workspace, *, parallel: int | None = None, backend: str | None = None) -> Gate:
    """May a new run start? (validation.required; the stored measurement, judged under the current
    settings and for the run's parallel and backend.)"""
    settings = ws.settings
    if not settings.validation.required:
        return Gate(True, "")
    stored = load(ws)
    if stored is None:
        return Gate(
            False,
            "the benchmark, checks and settings of this workspace were never validated: run "
            "`autoresearch validate` (build, benchmark and checks once on the baseline, with advice)",
        )
    now_inputs = inputs_of(ws, settings)
    if fingerprint(now_inputs) != stored.fingerprint:
        what = ", ".join(changed(stored.inputs, now_inputs)) or "the inputs"
        return Gate(False, f"{what} changed since the last `autoresearch validate`: run it again")
    report = evaluate(stored, settings, parallel=parallel, backend=backend)
    if not report.passed:
        first = report.problems[0].message
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        return Gate(
            False,
            f"validation failed: {first}{more}; fix it and run `autoresearch validate` again",
            report,
        )
    return Gate(True, "", report)
