"""The fleet pane's reads (the current run, its workers and experiments, log files) and the
run and experiment steering commands it writes for the runner."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.store import research_log as _research_store
from kb.store import runs as _run_store
from kb.store.paging import version
from kb.store.research_log import ResearchPhase, RunSteering
from kb.store.runs import FleetExperiment, FleetWorker, RunStatus, current_run_id
from kb.vocabulary import EXPERIMENT_LIVE as LIVE_EXPERIMENT_STATUSES

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class FleetSnapshot:
    run: RunStatus | None
    workers: list[FleetWorker]
    experiments: list[FleetExperiment]
    """Live experiments (running, queued) first, then the most recent finished ones."""
    version: int
    research: list[ResearchPhase] = field(default_factory=list)
    """The run's research phases (the autopilot's), newest first."""
    steering: RunSteering = RunSteering()
    """The focus and avoid notes and the approval switch the run holds."""
    approval_default: bool = False
    """The config's hypotheses.require_approval (what approval None means)."""

    @property
    def approval(self) -> bool:
        """Do generated hypotheses wait for a person in this run?"""
        chosen = self.steering.approval
        return self.approval_default if chosen is None else chosen


def run_status(db: sqlite_utils.Database, run_id: int | None = None) -> RunStatus | None:
    chosen = run_id if run_id is not None else current_run_id(db)
    return None if chosen is None else _run_store.run_status(db, chosen)


def fleet(
    db: sqlite_utils.Database,
    run_id: int | None = None,
    *,
    finished: int = 30,
    approval_default: bool = False,
) -> FleetSnapshot:
    """Workers, experiments and research phases of the current run (or `run_id`), for the live
    fleet pane."""
    stamp = version(db)
    run = run_status(db, run_id)
    if run is None:
        return FleetSnapshot(None, [], [], stamp, approval_default=approval_default)
    workers = _run_store.run_workers(db, run.id)
    exps = _run_store.fleet_experiments(db, run.id, finished=finished)
    return FleetSnapshot(
        run,
        workers,
        exps,
        stamp,
        research=_research_store.research_log(db, run.id),
        steering=_research_store.run_steering(db, run.id),
        approval_default=approval_default,
    )


def log_files(folder: str | None) -> list[str]:
    """The log files of an experiment's folder (batches, build, bench, checks), by name."""
    if not folder:
        return []
    try:
        return sorted(e.path for e in os.scandir(folder) if e.is_file() and e.name.endswith(".log"))
    except OSError:
        return []


def log_tail(path: str | None, lines: int = 8, *, max_bytes: int = 16_384) -> list[str]:
    """The last `lines` lines of a log file (reads at most `max_bytes` from its end)."""
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            chunk = fh.read()
    except OSError:
        return []
    text = chunk.decode("utf-8", errors="replace").replace("\r", "")
    found = text.splitlines()
    if size > max_bytes and found:
        found = found[1:]  # the first line is probably cut
    return found[-lines:]


def read_log(path: str, offset: int = 0, max_bytes: int = 1_000_000) -> tuple[str, int]:
    """Up to `max_bytes` of a log from byte `offset`; returns (text, new offset) to follow it."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read(max_bytes)
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    # Stop after the last complete line, so a line still being written is read whole next time.
    last = chunk.rfind(b"\n")
    cut = last + 1 if last >= 0 else (len(chunk) if len(chunk) == max_bytes else 0)
    return chunk[:cut].decode("utf-8", errors="replace"), offset + cut


def send_command(
    db: sqlite_utils.Database, kind: str, target_id: int | None = None, args: dict[str, Any] | None = None
) -> int:
    """Queue a steering command (pause, resume, stop, cancel, ...) for the runner; returns its id."""
    from runner.commands import send

    return send(db, kind, target_id, args)


def cancel_experiment(db: sqlite_utils.Database, experiment_id: int) -> int:
    status = _run_store.experiment_status(db, experiment_id)
    if status not in LIVE_EXPERIMENT_STATUSES:
        raise UserError(f"experiment {experiment_id}: already {status}; nothing to cancel")
    return send_command(db, "cancel", experiment_id)


NOTE_KINDS = ("focus", "avoid", "approval", "budget")
"""Steering a run's autopilot (runner/commands.py): the next research phase reads them."""


def steer_run(
    db: sqlite_utils.Database, kind: str, run_id: int, now: float, args: dict[str, Any] | None = None
) -> int:
    """pause, resume or stop a run whose runner is alive (a dead one would never read it); focus,
    avoid, approval or budget it (`args` as runner.commands.send takes them). Those a run no runner
    drives would never read go to whichever run comes next, as `autoresearch steer` sends them."""
    run = _run_store.run_status(db, run_id)
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    if kind in NOTE_KINDS:
        return send_command(db, kind, run_id if run.runner_live(now) else None, args)
    if not run.runner_live(now):
        raise UserError(f"run {run.name}: no runner is driving it ({run.status}); nothing to {kind}")
    if kind == "pause" and run.status == "paused":
        raise UserError(f"run {run.name}: already paused")
    if kind == "resume" and run.status != "paused":
        raise UserError(f"run {run.name}: not paused")
    return send_command(db, kind, run_id)
