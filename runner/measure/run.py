"""Starting and resuming a run: the exclusive insert, names, and whether a runner is still alive."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import sqlite_utils

from kb import gitrepo
from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.store import run_records
from kb.store.run_records import RunProcess
from kb.store.runs import heartbeat_fresh
from kb.vocabulary import RUN_LIVE
from kb.workspace import Workspace
from runner import stats
from runner.fleet import preflight
from runner.harness.prepare import (
    template_path,
)
from runner.harness.template import load_template
from runner.measure import runlock
from runner.measure.common import (
    Progress,
    Research,
    RunFailed,
    RunOptions,
    RunStopped,
    RunSummary,
    first_given,
    policy_of,
    rules_of,
    stored_policy,
)
from runner.measure.lifecycle import run_summary
from runner.measure.runner import Runner


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _runner_alive(run: RunProcess) -> bool:
    """Is another process still driving this run? (Same host, live pid, fresh heartbeat.)"""
    if run.host != socket.gethostname() or run.pid == os.getpid():
        return False
    fresh = heartbeat_fresh(run.heartbeat_at, now())
    return fresh and _pid_alive(run.pid)


def _mark_dead_runs(db: sqlite_utils.Database) -> None:
    """Runs left `running` or `paused` by a runner that died are `interrupted` (resumable).

    Called with the workspace's run lock held (runner/measure/runlock.py): no other process drives a run
    then, on this host or another, so a run of another process is a dead one; runs of this process
    (other runners in threads) are judged by the database alone."""
    here = (os.getpid(), socket.gethostname())
    for run in run_records.processes(db, RUN_LIVE):
        if (run.pid, run.host) != here:
            with transaction(db):
                run_records.update(db, run.id, {"status": "interrupted"})
                log_event(
                    db,
                    "run_interrupted",
                    f"run {run.name}: its runner (pid {run.pid}) is gone",
                    level="warning",
                    run_id=run.id,
                )


def _unique_name(db: sqlite_utils.Database, wanted: str | None) -> str:
    if wanted:
        if not _name_ok(wanted):
            raise UserError(f"run name {wanted!r}: use letters, digits, '.', '_' and '-'")
        if run_records.name_taken(db, wanted):
            raise UserError(f"run name {wanted!r}: a run with this name exists")
        return wanted
    return run_records.free_name(db, time.strftime("%Y%m%d-%H%M%S"))


def _name_ok(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", name)) and ".." not in name


def start_run(
    ws: Workspace,
    options: RunOptions,
    progress: Progress | None = None,
    *,
    research: Research | None = None,
) -> Runner:
    """Create a run (its row and its branch at the baseline) and return its runner."""
    settings = ws.settings
    policy = policy_of(ws)  # a bad policy fails here, before anything is written
    if options.parallel is not None and options.parallel < 1:
        raise UserError(f"--parallel {options.parallel}: must be at least 1")
    load_template(template_path(ws, settings))
    preflight(options.backend or settings.fleet.backend, ws)  # a bad fleet config: nothing written
    lock = runlock.acquire(ws.root)  # another process driving a run here: its name, exit 1
    try:
        run_id, name = _create_run(ws, options, policy)
    except BaseException:
        lock.release()
        raise
    lock.record(run_id, name)
    return Runner(ws, run_id, progress=progress, lock=lock, research=research)


def _create_run(ws: Workspace, options: RunOptions, policy: stats.Policy) -> tuple[int, str]:
    """Check that no run is going and insert the new one, as one exclusive write."""
    db = ws.db()
    try:
        with transaction(db):  # BEGIN IMMEDIATE: runners of this process cannot interleave either
            return _insert_run(ws, db, options, policy)
    finally:
        db.conn.close()


def _insert_run(
    ws: Workspace, db: sqlite_utils.Database, options: RunOptions, policy: stats.Policy
) -> tuple[int, str]:
    settings = ws.settings
    _mark_dead_runs(db)
    for run in run_records.processes(db, RUN_LIVE):
        raise UserError(
            f"run {run.name} is going (pid {run.pid} on {run.host}): wait for it, stop it, "
            "or use another workspace"
        )
    for run in run_records.processes(db, ["interrupted"], measured_only=True):
        # Its experiments still hold their patches: a new run would silently skip them.
        raise UserError(f"run {run.name} was interrupted: continue it with `autoresearch run --resume`")
    from runner.hypotheses import runnable

    autopilot = options.autopilot if options.autopilot is not None else settings.autopilot.enabled
    # The autopilot's first research phase fills an empty queue; a plain run has nothing to do.
    if not autopilot and not runnable(db, require_approval=settings.hypotheses.require_approval):
        raise UserError(
            f"{ws.root}: the queue is empty, nothing to run (add patches: autoresearch queue add)"
        )
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = (
        options.baseline or settings.target.baseline_commit or gitrepo.resolve(repo, settings.target.baseline)
    )
    name = _unique_name(db, options.name)
    options.name = name
    branch = f"autoresearch/{name}"
    if gitrepo.branch_head(repo, branch) is None:
        gitrepo.set_branch(repo, branch, baseline, None)
    stamp = now()
    run_id = run_records.create(
        db,
        {
            "name": name,
            "status": "running",
            "branch": branch,
            "baseline_commit": baseline,
            "head_commit": baseline,
            "backend": options.backend or settings.fleet.backend,
            "policy": stored_policy(rules_of(ws), settings.metric.primary),
            "budget": {
                "minutes": first_given(options.budget_minutes, settings.budget.minutes),
                "usd": first_given(options.budget_usd, settings.budget.usd),
                "max_experiments": first_given(options.max_experiments, settings.budget.max_experiments),
            },
            "options": asdict(options),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": stamp,
            "heartbeat_at": stamp,
        },
    )
    log_event(db, "run_started", f"run {name} started on {baseline[:12]}", run_id=run_id)
    return run_id, name


def resume_run(
    ws: Workspace,
    run_id: int | None = None,
    progress: Progress | None = None,
    *,
    research: Callable[[RunOptions], Research] | None = None,
) -> Runner:
    """Take over an interrupted run (or a paused one, which this resumes); `research` builds the
    research stage from the run's own options (its --model and --api-base)."""
    lock = runlock.acquire(ws.root)
    try:
        run = _take_over(ws, run_id)
    except BaseException:
        lock.release()
        raise
    lock.record(run.id, run.name)
    runner = Runner(ws, run.id, progress=progress, lock=lock)
    runner.research = research(runner.options) if research is not None else None
    runner.ctx.state.resuming = True
    return runner


def _take_over(ws: Workspace, run_id: int | None) -> RunProcess:
    db = ws.db()
    _mark_dead_runs(db)
    run: RunProcess | None
    if run_id is None:
        resumable = run_records.processes(db, ["interrupted", *RUN_LIVE], measured_only=True)
        run = resumable[-1] if resumable else None  # the newest
        if run is None:
            raise UserError(f"{ws.root}: no interrupted run to resume")
    else:
        run = run_records.process(db, run_id)
        if run is None:
            raise UserError(f"run {run_id}: no such run")
    if run.status in ("finished", "failed"):
        raise UserError(f"run {run.name}: already {run.status}, nothing to resume")
    if _runner_alive(run):
        raise UserError(f"run {run.name}: still driven by pid {run.pid}; stop it first")
    with transaction(db):
        run_records.update(
            db,
            run.id,
            {"status": "running", "pid": os.getpid(), "host": socket.gethostname(), "heartbeat_at": now()},
        )
        log_event(db, "run_resumed", f"run {run.name} resumed (pid {os.getpid()})", run_id=run.id)
    db.conn.close()
    return run


__all__ = [
    "Progress",
    "Research",
    "RunFailed",
    "RunOptions",
    "RunStopped",
    "RunSummary",
    "Runner",
    "resume_run",
    "run_summary",
    "start_run",
]
