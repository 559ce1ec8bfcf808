"""The run: an A/A self-test, then waves of experiments on a fleet, then the winners stacked.

    runner = start_run(ws, RunOptions(parallel=2))      # or resume_run(ws)
    summary = runner.execute()

Protocol (DESIGN.md): each wave takes up to `wave_size` runnable patches and measures each against
the current baseline (the head of `autoresearch/<run>` in the mirror) on one worker: a batch job
builds both trees and runs interleaved A/B pairs, and after every batch the wave is decided again
with runner/stats (false discoveries controlled across the wave). `continue` submits the next
batch on the same worker, up to the policy's cap. Kept experiments become commits on the run
branch (runner.record.winners.commit_winner) before the next wave starts. At the end the winners are
measured together against the original baseline (`stack`) and each one left out (`ablation`).

Nothing lives only in memory. Samples are stored as the job log is parsed (UNIQUE, so parsing a log
again adds nothing); a job row is written before the job starts and turns terminal in the same
transaction that records what followed from it. `resume_run` after a `kill -9` therefore reattaches
to the jobs still running, re-reads the logs of those that ended, kills process sessions and
removes worktrees nothing refers to, and carries on: no sample lost, no finished experiment run
again, no batch submitted twice.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import sqlite_utils

from kb import gitrepo
from kb.db import insert, log_event, now, one, rows, transaction, update
from kb.errors import UserError
from kb.vocabulary import EXPERIMENT_FINAL, EXPERIMENT_LIVE, SELF_TEST_STATUSES, STALE_HEARTBEAT
from kb.workspace import Workspace
from runner import stats
from runner.fleet import Fleet, JobRef, JobSpec, JobStatus, Worker, make_fleet, preflight
from runner.harness import patchpaths
from runner.harness.prepare import (
    A_DIR,
    B_DIR,
    DoesNotApply,
    commit_candidate,
    prepare_workdir,
    protected_paths,
    remove_workdir,
    resolve_scripts,
    template_path,
)
from runner.harness.protocol import WALL_METRIC, Invocation, LogParser
from runner.harness.sandbox import sandbox_envs, weakest
from runner.harness.template import load_template, one_line, render
from runner.measure import runlock

Progress = Callable[[str], None]

FINAL = EXPERIMENT_FINAL
LIVE = EXPERIMENT_LIVE
HEARTBEAT_SECONDS = 2.0
MAX_LOST_JOBS = 3
MAX_RETRIES = 2
SELF_TEST_ATTEMPTS = 2
JOB_MARGIN_SECONDS = 120


@dataclass
class RunOptions:
    """What `autoresearch run` was asked for; stored with the run so `--resume` continues alike."""

    waves: int | None = None
    parallel: int | None = None
    budget_minutes: float | None = None
    budget_usd: float | None = None
    max_experiments: int | None = None
    bench_timeout: int | None = None
    check_timeout: int | None = None
    build_timeout: int | None = None
    backend: str | None = None
    name: str | None = None
    self_test: bool = True
    final: bool = True
    """Measure the stacked winners and the ablations at the end."""
    baseline: str | None = None
    """Start from this commit instead of target.baseline_commit (`--from-winners`: a run's head)."""
    from_winners: str | None = None
    """The earlier run whose head `baseline` is (recorded with the run's options)."""

    @classmethod
    def from_json(cls, raw: str | None) -> RunOptions:
        data = json.loads(raw) if raw else {}
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class ActiveJob:
    ref: JobRef
    experiment_id: int
    batch: int
    nonce: str
    parser: LogParser
    parsed_lines: int
    """How far the log has been parsed (jobs.parsed_lines; warnings are deduplicated by line)."""
    deadline: float | None
    offset: int = 0
    stopped: str | None = None
    """Why the runner stopped this job itself: cancel, timeout, no_metric, stop."""


@dataclass
class Outcome:
    """What a finished job means for its experiment."""

    status: str | None  # a final experiment status, or None: decide from the samples
    reason: str | None = None
    detail: str = ""


@dataclass
class RunSummary:
    run_id: int
    name: str
    status: str
    branch: str
    baseline_commit: str
    head_commit: str
    self_test: dict[str, Any] | None
    experiments: list[dict[str, Any]] = field(default_factory=list)
    winners: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Research(Protocol):
    """What the measuring loop asks of the research stage. The loop defines it and never imports
    research; runner.autopilot wires an implementation in (the CLI, the console and the demo start
    runs through it)."""

    def after_wave(self, ws: Workspace, db: sqlite_utils.Database, wave_id: int) -> int | None:
        """The finished wave's post-mortem; the evidence id of the note it stored, if any."""
        ...


class RunStopped(Exception):
    """The run was told to stop (a `stop` command)."""


class RunFailed(Exception):
    """The run cannot go on (the self-test failed, the benchmark script is missing, ...)."""


# --- starting and resuming ---------------------------------------------------------------------


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


def _runner_alive(run: dict[str, Any]) -> bool:
    """Is another process still driving this run? (Same host, live pid, fresh heartbeat.)"""
    if run["host"] != socket.gethostname() or run["pid"] == os.getpid():
        return False
    fresh = run["heartbeat_at"] is not None and now() - run["heartbeat_at"] < STALE_HEARTBEAT
    return fresh and _pid_alive(run["pid"])


def _mark_dead_runs(db: sqlite_utils.Database) -> None:
    """Runs left `running` or `paused` by a runner that died are `interrupted` (resumable).

    Called with the workspace's run lock held (runner/measure/runlock.py): no other process drives a run
    then, on this host or another, so a run of another process is a dead one; runs of this process
    (other runners in threads) are judged by the database alone."""
    here = (os.getpid(), socket.gethostname())
    for run in rows(db, "SELECT * FROM runs WHERE status IN ('running', 'paused')"):
        if (run["pid"], run["host"]) != here:
            with transaction(db):
                update(db, "runs", run["id"], {"status": "interrupted"})
                log_event(
                    db,
                    "run_interrupted",
                    f"run {run['name']}: its runner (pid {run['pid']}) is gone",
                    level="warning",
                    run_id=run["id"],
                )


def _unique_name(db: sqlite_utils.Database, wanted: str | None) -> str:
    if wanted:
        if not _name_ok(wanted):
            raise UserError(f"run name {wanted!r}: use letters, digits, '.', '_' and '-'")
        if one(db, "SELECT id FROM runs WHERE name = ?", [wanted]):
            raise UserError(f"run name {wanted!r}: a run with this name exists")
        return wanted
    base = time.strftime("%Y%m%d-%H%M%S")
    name, n = base, 1
    while one(db, "SELECT id FROM runs WHERE name = ?", [name]):
        n += 1
        name = f"{base}-{n}"
    return name


def _name_ok(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", name)) and ".." not in name


def _policy(ws: Workspace) -> stats.Policy:
    s = ws.settings
    return stats.Policy(
        min_effect=s.policy.min_effect,
        alpha=s.policy.alpha,
        max_pairs=s.policy.max_pairs,
        min_pairs=s.policy.min_pairs,
        batch=s.policy.batch_pairs,
        direction=s.metric.direction,
    )


def start_run(
    ws: Workspace,
    options: RunOptions,
    progress: Progress | None = None,
    *,
    research: Research | None = None,
) -> Runner:
    """Create a run (its row and its branch at the baseline) and return its runner."""
    settings = ws.settings
    policy = _policy(ws)  # a bad policy fails here, before anything is written
    if options.parallel is not None and options.parallel < 1:
        raise UserError(f"--parallel {options.parallel}: must be at least 1")
    if settings.policy.self_test_pairs < stats.MIN_VALUES:
        raise UserError(f"policy.self_test_pairs: must be at least {stats.MIN_VALUES}")
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
    for run in rows(db, "SELECT * FROM runs WHERE status IN ('running', 'paused')"):
        raise UserError(
            f"run {run['name']} is going (pid {run['pid']} on {run['host']}): wait for it, stop it, "
            "or use another workspace"
        )
    for run in rows(db, "SELECT * FROM runs WHERE status = 'interrupted' AND imported_from IS NULL"):
        # Its experiments still hold their patches: a new run would silently skip them.
        raise UserError(f"run {run['name']} was interrupted: continue it with `autoresearch run --resume`")
    from runner.hypotheses import runnable

    if not runnable(db, require_approval=settings.hypotheses.require_approval):
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
    run_id = insert(
        db,
        "runs",
        {
            "name": name,
            "status": "running",
            "branch": branch,
            "baseline_commit": baseline,
            "head_commit": baseline,
            "backend": options.backend or settings.fleet.backend,
            "policy": {**asdict(policy), "metric": settings.metric.primary},
            "budget": {
                "minutes": _first(options.budget_minutes, settings.budget.minutes),
                "usd": _first(options.budget_usd, settings.budget.usd),
                "max_experiments": _first(options.max_experiments, settings.budget.max_experiments),
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
    research: Research | None = None,
) -> Runner:
    """Take over an interrupted run (or a paused one, which this resumes)."""
    lock = runlock.acquire(ws.root)
    try:
        run = _take_over(ws, run_id)
    except BaseException:
        lock.release()
        raise
    lock.record(run["id"], run["name"])
    runner = Runner(ws, run["id"], progress=progress, lock=lock, research=research)
    runner.resuming = True
    return runner


def _take_over(ws: Workspace, run_id: int | None) -> dict[str, Any]:
    db = ws.db()
    _mark_dead_runs(db)
    if run_id is None:
        run = one(
            db,
            "SELECT * FROM runs WHERE status IN ('interrupted', 'running', 'paused') "
            "AND imported_from IS NULL ORDER BY id DESC LIMIT 1",
        )
        if run is None:
            raise UserError(f"{ws.root}: no interrupted run to resume")
    else:
        run = one(db, "SELECT * FROM runs WHERE id = ?", [run_id])
        if run is None:
            raise UserError(f"run {run_id}: no such run")
    if run["status"] in ("finished", "failed"):
        raise UserError(f"run {run['name']}: already {run['status']}, nothing to resume")
    if _runner_alive(run):
        raise UserError(f"run {run['name']}: still driven by pid {run['pid']}; stop it first")
    with transaction(db):
        update(
            db,
            "runs",
            run["id"],
            {"status": "running", "pid": os.getpid(), "host": socket.gethostname(), "heartbeat_at": now()},
        )
        log_event(db, "run_resumed", f"run {run['name']} resumed (pid {os.getpid()})", run_id=run["id"])
    db.conn.close()
    return run


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


# --- the runner --------------------------------------------------------------------------------


class Runner:
    """Drives one run from this process. Single-threaded: one loop polls jobs and reads commands."""

    def __init__(
        self,
        ws: Workspace,
        run_id: int,
        *,
        progress: Progress | None = None,
        lock: runlock.RunLock | None = None,
        research: Research | None = None,
    ) -> None:
        self.ws = ws
        self.lock = lock
        self.research = research
        """The research stage, as this loop sees it (runner.autopilot wires it); None: measure only."""
        """The workspace's run lock, released when execute() returns (start_run/resume_run take it)."""
        self.db = ws.db()
        self.settings = ws.settings
        self.run_id = run_id
        run = self._run()
        self.name: str = run["name"]
        self.started_at: float = run["started_at"]
        self.branch: str = run["branch"]
        self.baseline: str = run["baseline_commit"]
        self.options = RunOptions.from_json(run["options"])
        self.budget: dict[str, Any] = json.loads(run["budget"] or "{}")
        self.policy = _policy(ws)
        self.metric = self.settings.metric.primary
        self.guards = [
            # Guard metrics move the same way as the primary one (pp and tg are both throughputs).
            stats.Guard(g.metric, g.max_regression, self.settings.metric.direction)
            for g in self.settings.metric.guards
        ]
        self.repo = gitrepo.open_repo(ws.mirror_path)
        self.template = load_template(template_path(ws, self.settings))
        self.scripts = resolve_scripts(ws, self.settings)
        self.protected = protected_paths(ws, self.settings)
        self.parallel = self.options.parallel or self.settings.fleet.parallel
        self.wave_size = self.settings.fleet.wave_size or self.parallel
        self.backend = run["backend"]
        self.progress: Progress = progress or (lambda _line: None)
        self.poll_interval = 0.05
        self.resuming = False
        self.paused = False
        self.stopping = False
        self.active: dict[int, ActiveJob] = {}
        self.fleet: Fleet | None = None
        self._last_beat = 0.0
        self._budget_reason: str | None = None

    # -- small helpers -------------------------------------------------------------------------

    def _run(self) -> dict[str, Any]:
        run = one(self.db, "SELECT * FROM runs WHERE id = ?", [self.run_id])
        if run is None:
            raise UserError(f"run {self.run_id}: no such run")
        return run

    def _exp(self, exp_id: int) -> dict[str, Any]:
        exp = one(self.db, "SELECT * FROM experiments WHERE id = ?", [exp_id])
        assert exp is not None
        return exp

    def _event(
        self,
        kind: str,
        message: str,
        *,
        level: str = "info",
        exp_id: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        log_event(self.db, kind, message, level=level, run_id=self.run_id, experiment_id=exp_id, data=data)

    def _say(self, line: str) -> None:
        self.progress(line)

    def head(self) -> str:
        return gitrepo.branch_head(self.repo, self.branch) or self.baseline

    def exp_dir(self, exp_id: int) -> Path:
        return self.ws.worktrees_dir / f"run{self.run_id}" / f"exp{exp_id}"

    def log_dir(self, exp_id: int) -> Path:
        return self.ws.logs_dir / f"run{self.run_id}" / f"exp{exp_id}"

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM behaves like Ctrl-C: stop this process cleanly, leaving the run resumable."""

        def raise_interrupt(_sig: int, _frame: object) -> None:
            raise KeyboardInterrupt

        try:
            previous: Any = signal.signal(signal.SIGTERM, raise_interrupt)
        except ValueError:  # not the main thread (tests drive runners from threads)
            previous = None
        try:
            yield
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    # -- the run -------------------------------------------------------------------------------

    def execute(self) -> RunSummary:
        """Run to the end (or until stopped, a budget is spent, or this process is interrupted)."""
        # This thread's own connection: the runner may be built in one thread and run in another.
        with contextlib.suppress(Exception):
            self.db.conn.close()
        self.db = self.ws.db()
        try:
            return self._execute()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _execute(self) -> RunSummary:
        with self._signals():
            try:
                self.fleet = make_fleet(self.backend, self.ws, self.db, self.run_id, self.parallel)
                workers = self.fleet.up()
                self._say(
                    f"run {self.name} ({self.branch}) from {self.baseline[:12]} on {self.backend} "
                    f"x{len(workers)}"
                )
                if self.resuming:
                    self._recover()
                stopped_by = self._stages()
                self._finish("finished", stopped_by=stopped_by)
            except KeyboardInterrupt:
                self._interrupt()
                raise
            except RunFailed as exc:
                self._cancel_live("run failed")
                self._finish("failed", error=str(exc))
            except Exception as exc:
                # Anything unexpected leaves the run resumable rather than failed.
                self._interrupt(error=f"{type(exc).__name__}: {exc}")
                raise
        return self.summary()

    def _stages(self) -> str:
        try:
            if not self._self_test_done():
                if not self._pending_work():
                    return "queue empty"
                self._budget_reason = self._budget_spent()
                if self._budget_reason:
                    return f"budget: {self._budget_reason}"
                self._self_test()
                if self._budget_reason:
                    return f"budget: {self._budget_reason}"
            waves_done = one(
                self.db,
                "SELECT count(*) AS n FROM waves WHERE run_id = ? AND status != 'running'",
                [self.run_id],
            )
            done = waves_done["n"] if waves_done else 0
            while True:
                wave = one(
                    self.db, "SELECT * FROM waves WHERE run_id = ? AND status = 'running'", [self.run_id]
                )
                if wave is None:
                    if self.options.waves is not None and done >= self.options.waves:
                        stopped_by = f"waves: {done}"
                        break
                    reason = self._budget_spent()
                    if reason:
                        stopped_by = f"budget: {reason}"
                        break
                    wave = self._new_wave()
                    if wave is None:
                        spent = self._budget_reason
                        stopped_by = f"budget: {spent}" if spent else "queue empty"
                        break
                self._wave(wave)
                done += 1
                if self._budget_reason:
                    stopped_by = f"budget: {self._budget_reason}"
                    break
            if self.options.final:
                self._final_stage()
            return stopped_by
        except RunStopped:
            self._cancel_live("stopped")
            return "stopped"

    def _cancel_live(self, reason: str) -> None:
        for exp in rows(
            self.db,
            "SELECT id FROM experiments WHERE run_id = ? AND status IN ('queued', 'running')",
            [self.run_id],
        ):
            self._finish_experiment(exp["id"], "cancelled", reason)
        with transaction(self.db):
            self.db.execute(
                "UPDATE waves SET status = 'cancelled', ended_at = ? WHERE run_id = ? AND status = 'running'",
                [now(), self.run_id],
            )

    # -- self-test -----------------------------------------------------------------------------

    def _self_test_done(self) -> bool:
        if not self.options.self_test:
            return True
        run = self._run()
        return bool(run["self_test"] and json.loads(run["self_test"]).get("passed"))

    def _pending_work(self) -> bool:
        if one(self.db, "SELECT id FROM waves WHERE run_id = ? LIMIT 1", [self.run_id]):
            return True
        return bool(self._runnable(1))

    def _self_test(self) -> None:
        """A/A before the first wave. A statistical difference is measured once more (two chance
        failures in a row have probability alpha**2); a crash or failing checks end the run."""
        while True:
            attempts = rows(
                self.db,
                "SELECT * FROM experiments WHERE run_id = ? AND kind = 'self_test' ORDER BY id",
                [self.run_id],
            )
            done = [e for e in attempts if e["status"] in FINAL]
            results = [self._self_test_result(e) for e in done]
            if results and results[-1].get("passed"):
                return
            if done and done[-1]["status"] not in SELF_TEST_STATUSES:
                last = done[-1]
                detail = json.loads(last["meta"] or "{}").get("detail", "")
                raise RunFailed(
                    f"self-test {last['status']}"
                    + (f" ({last['reason']})" if last["reason"] else "")
                    + (f": {detail}" if detail else "")
                    + f"; see {last['log_dir']}"
                )
            if len(results) >= SELF_TEST_ATTEMPTS:
                raise RunFailed(f"self-test failed: {results[-1].get('reason')}")
            if results:
                self._say(f"self-test: {results[-1].get('reason')}; measuring again")
            live = [e for e in attempts if e["status"] in LIVE]
            exp_id = (
                live[0]["id"]
                if live
                else self._create_experiment(
                    kind="self_test", title="A/A self-test", baseline=self.baseline, candidate=self.baseline
                )
            )
            self._say(f"self-test: the baseline against itself, {self.settings.policy.self_test_pairs} pairs")
            self._drive([exp_id])
            if self._budget_reason:
                return  # spent while it ran: the run ends, it did not fail

    def _self_test_result(self, exp: dict[str, Any]) -> dict[str, Any]:
        meta = json.loads(exp["meta"] or "{}")
        result = meta.get("self_test")
        if isinstance(result, dict):
            return result
        return {"passed": False, "reason": f"{exp['status']}: {exp['reason'] or 'no result'}"}

    # -- waves ---------------------------------------------------------------------------------

    def _runnable(self, limit: int) -> list[dict[str, Any]]:
        from runner.hypotheses import runnable

        found = runnable(self.db, require_approval=self.settings.hypotheses.require_approval)
        return found[:limit]

    def _new_wave(self) -> dict[str, Any] | None:
        size = self.wave_size
        cap = self.budget.get("max_experiments")
        if cap is not None:
            used = one(
                self.db,
                "SELECT count(*) AS n FROM experiments WHERE run_id = ? AND kind = 'candidate' "
                "AND retry_of IS NULL",
                [self.run_id],
            )
            size = min(size, cap - (used["n"] if used else 0))
            if size <= 0:
                self._budget_reason = f"max experiments ({cap})"
                return None
        carried = rows(
            self.db,
            "SELECT * FROM experiments WHERE run_id = ? AND wave_id IS NULL AND status = 'queued' "
            "AND kind = 'candidate' ORDER BY id",
            [self.run_id],
        )
        patches = self._runnable(max(0, size - len(carried)))
        if not carried and not patches:
            return None
        head = self.head()
        with transaction(self.db):
            number_row = one(
                self.db, "SELECT coalesce(max(number), 0) + 1 AS n FROM waves WHERE run_id = ?", [self.run_id]
            )
            number = number_row["n"] if number_row else 1
            wave_id = insert(
                self.db,
                "waves",
                {"run_id": self.run_id, "number": number, "baseline_commit": head, "started_at": now()},
            )
            for exp in carried:
                update(self.db, "experiments", exp["id"], {"wave_id": wave_id, "baseline_commit": head})
            for patch in patches:
                self._create_experiment(
                    kind="candidate",
                    title=patch["hypothesis_title"],
                    baseline=head,
                    patch=patch,
                    wave_id=wave_id,
                )
            self._event(
                "wave_started",
                f"wave {number}: {len(carried) + len(patches)} experiments against {head[:12]}",
                data={"wave": wave_id},
            )
        wave = one(self.db, "SELECT * FROM waves WHERE id = ?", [wave_id])
        assert wave is not None
        self._say(f"wave {number}: {len(carried) + len(patches)} experiments against {head[:12]}")
        return wave

    def _create_experiment(
        self,
        *,
        kind: str,
        title: str,
        baseline: str,
        candidate: str | None = None,
        patch: dict[str, Any] | None = None,
        wave_id: int | None = None,
        retry_of: int | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        with transaction(self.db):
            exp_id = insert(
                self.db,
                "experiments",
                {
                    "run_id": self.run_id,
                    "wave_id": wave_id,
                    "patch_id": patch["id"] if patch else None,
                    "hypothesis_id": patch["hypothesis_id"] if patch else None,
                    "kind": kind,
                    "title": title,
                    "status": "queued",
                    "baseline_commit": baseline,
                    "candidate_commit": candidate,
                    "retry_of": retry_of,
                    "meta": meta or {},
                    "created_at": now(),
                },
            )
            update(self.db, "experiments", exp_id, {"log_dir": str(self.log_dir(exp_id))})
        return exp_id

    def _wave(self, wave: dict[str, Any]) -> None:
        members = [
            e["id"]
            for e in rows(self.db, "SELECT id FROM experiments WHERE wave_id = ? ORDER BY id", [wave["id"]])
        ]
        self._drive(members, family=wave["id"])
        kept = rows(
            self.db,
            "SELECT e.*, d.effect FROM experiments e JOIN decisions d ON d.experiment_id = e.id "
            "AND d.is_final = 1 AND d.origin = 'runner' "
            "WHERE e.wave_id = ? AND e.status = 'kept' AND e.kind = 'candidate' "
            "AND NOT EXISTS (SELECT 1 FROM winners w WHERE w.experiment_id = e.id) "
            "ORDER BY d.effect DESC, e.id",
            [wave["id"]],
        )
        for exp in kept:
            self._commit_winner(exp)
        with transaction(self.db):
            update(self.db, "waves", wave["id"], {"status": "finished", "ended_at": now()})
        self._say(f"wave {wave['number']} done; baseline now {self.head()[:12]}")
        self._reflect(wave)

    def _reflect(self, wave: dict[str, Any]) -> None:
        """The wave's post-mortem becomes a KB note for the next research phase (the model's when one
        is configured, else a plain summary). A failed reflection never stops the run."""
        if self.research is None:
            return
        try:
            note = self.research.after_wave(self.ws, self.db, wave["id"])
        except Exception as exc:  # the run matters more than its diary
            self._event(
                "reflection_failed", f"wave {wave['number']}: reflection failed ({exc})", level="warning"
            )
            return
        self._say(f"wave {wave['number']} reflection stored as evidence {note}")

    def _commit_winner(self, exp: dict[str, Any]) -> None:
        from runner.record.winners import commit_winner

        try:
            record = commit_winner(self.ws, self.db, exp["id"])
        except patchpaths.ProtectedPath as exc:
            # Never on the branch nor in patches/: the experiment's verdict is withdrawn.
            with transaction(self.db):
                update(self.db, "experiments", exp["id"], {"status": "refused", "reason": str(exc)})
                self._event("experiment_refused", str(exc), level="warning", exp_id=exp["id"])
            self._say(f"  exp {exp['id']}: refused at commit ({exc})")
            return
        except UserError as exc:
            # Two winners of one wave touching the same lines: measure the later one again on the
            # new baseline in the next wave.
            self._event(
                "winner_conflict",
                f"experiment {exp['id']}: kept but not committed ({exc}); "
                "measuring it again on the new baseline",
                level="warning",
                exp_id=exp["id"],
            )
            self._requeue(exp, wave_id=None)
            self._say(f"  exp {exp['id']} kept but does not apply on the new head; queued again")
            return
        self._say(f"  winner: exp {exp['id']} as {record.commit_sha[:12]} ({record.patch_file.name})")

    def _requeue(self, exp: dict[str, Any], *, wave_id: int | None) -> int | None:
        depth, cursor = 0, exp
        while cursor.get("retry_of"):
            depth += 1
            prev = one(self.db, "SELECT * FROM experiments WHERE id = ?", [cursor["retry_of"]])
            if prev is None:
                break
            cursor = prev
        if depth >= MAX_RETRIES:
            return None
        patch = (
            one(self.db, "SELECT * FROM patches WHERE id = ?", [exp["patch_id"]]) if exp["patch_id"] else None
        )
        return self._create_experiment(
            kind=exp["kind"],
            title=exp["title"],
            baseline=exp["baseline_commit"] if wave_id is not None else self.head(),
            candidate=exp["candidate_commit"] if exp["kind"] != "candidate" else None,
            patch=patch,
            wave_id=wave_id,
            retry_of=exp["id"],
            meta={k: v for k, v in json.loads(exp["meta"] or "{}").items() if k in ("role", "left_out")},
        )

    # -- final stage: the winners together, and each one left out ------------------------------

    def _final_stage(self) -> None:
        winners = rows(
            self.db,
            "SELECT w.*, p.diff, e.title FROM winners w JOIN experiments e ON e.id = w.experiment_id "
            "JOIN patches p ON p.id = e.patch_id WHERE w.run_id = ? ORDER BY w.position",
            [self.run_id],
        )
        if not winners:
            return
        head = self.head()
        existing = rows(
            self.db,
            "SELECT * FROM experiments WHERE run_id = ? AND kind IN ('stack', 'ablation')",
            [self.run_id],
        )
        if not existing:
            # The trees each ablation measures: the other winners applied onto the original
            # baseline (git objects only). Then all the experiments at once, so a runner killed
            # here never leaves a stack without its ablations.
            bases: list[tuple[dict[str, Any], str | None]] = []
            if len(winners) >= 2:
                for left_out in winners:
                    base: str | None = self.baseline
                    for w in winners:
                        if w["id"] == left_out["id"] or base is None:
                            continue
                        try:
                            base = gitrepo.commit_patch(
                                self.repo,
                                base,
                                w["diff"],
                                f"ablation: {w['title']}\n",
                                env={k: v for k, v in gitrepo.identity_env().items() if k not in os.environ},
                            )
                        except UserError:
                            base = None
                    bases.append((left_out, base))
            with transaction(self.db):
                self._create_experiment(
                    kind="stack",
                    title=f"stack of {len(winners)} winners vs the original baseline",
                    baseline=self.baseline,
                    candidate=head,
                    meta={"role": "stack", "winners": len(winners)},
                )
                for left_out, base in bases:
                    exp_id = self._create_experiment(
                        kind="ablation",
                        title=f"ablation: without {left_out['title']}",
                        baseline=base or self.baseline,
                        candidate=head,
                        meta={"role": "ablation", "left_out": left_out["experiment_id"]},
                    )
                    if base is None:
                        self._finish_experiment(
                            exp_id,
                            "crashed",
                            "does_not_apply",
                            detail="the other winners do not apply without it",
                            cleanup=False,
                        )
            existing = rows(
                self.db,
                "SELECT * FROM experiments WHERE run_id = ? AND kind IN ('stack', 'ablation')",
                [self.run_id],
            )
        self._say(
            f"final: the {len(winners)} winners stacked against {self.baseline[:12]}"
            + (", and each left out" if len(winners) >= 2 else "")
        )
        self._drive([e["id"] for e in existing])
        stack: dict[str, Any] | None = None
        ablation: list[dict[str, Any]] = []
        for exp in rows(
            self.db,
            "SELECT * FROM experiments WHERE run_id = ? AND kind IN ('stack', 'ablation') ORDER BY id",
            [self.run_id],
        ):
            d = one(
                self.db,
                "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1 ORDER BY id DESC",
                [exp["id"]],
            )
            entry = {
                "experiment": exp["id"],
                "status": exp["status"],
                "reason": exp["reason"],
                "effect": d["effect"] if d else None,
                "ci": [d["ci_low"], d["ci_high"]] if d else None,
                "pairs": d["pairs"] if d else 0,
            }
            if exp["kind"] == "stack":
                stack = entry
            else:
                entry["left_out"] = json.loads(exp["meta"] or "{}").get("left_out")
                ablation.append(entry)
        with transaction(self.db):
            run = self._run()
            current = json.loads(run["summary"] or "{}")
            update(
                self.db, "runs", self.run_id, {"summary": {**current, "stack": stack, "ablation": ablation}}
            )

    # -- the scheduler -------------------------------------------------------------------------

    def _drive(self, exp_ids: list[int], family: int | None = None) -> None:
        """Run these experiments to a final status. `family` (a wave id) shares the FDR control."""
        ids = set(exp_ids)
        while True:
            self._housekeeping()
            progressed = False
            for job_id in list(self.active):
                active = self.active[job_id]
                if active.experiment_id in ids or self._exp(active.experiment_id)["status"] in FINAL:
                    progressed |= self._poll(active, family)
            # Requeued retries join the family they were created for.
            if family is not None:
                ids |= {
                    e["id"] for e in rows(self.db, "SELECT id FROM experiments WHERE wave_id = ?", [family])
                }
            live = (
                rows(
                    self.db,
                    f"SELECT * FROM experiments WHERE id IN ({','.join('?' for _ in ids)}) "
                    "AND status IN ('queued', 'running') ORDER BY id",
                    list(ids),
                )
                if ids
                else []
            )
            if not live and not any(a.experiment_id in ids for a in self.active.values()):
                return
            for exp in live:
                if any(a.experiment_id == exp["id"] for a in self.active.values()):
                    continue
                progressed |= self._advance(exp, family)
            if not progressed:
                time.sleep(self.poll_interval if self.active else 4 * self.poll_interval)

    def _idle_worker(self) -> Worker | None:
        assert self.fleet is not None
        busy = {
            r["worker_id"]
            for r in rows(
                self.db,
                "SELECT worker_id FROM experiments WHERE run_id = ? AND status = 'running' "
                "AND worker_id IS NOT NULL",
                [self.run_id],
            )
        }
        for worker in self.fleet.workers():
            if worker.id not in busy and worker.status in ("ready", "busy"):
                return worker
        return None

    def _advance(self, exp: dict[str, Any], family: int | None) -> bool:
        """Move an experiment with no live job one step on; True when something happened."""
        if exp["status"] == "queued":
            if self.stopping:
                self._finish_experiment(exp["id"], "cancelled", "stopped")
                return True
            if self._budget_reason:
                self._finish_experiment(exp["id"], "cancelled", "budget", detail=self._budget_reason)
                return True
            if self.paused:
                return False
            worker = self._idle_worker()
            if worker is None:
                return False
            if not self._prepare(exp, worker):
                return True
            self._submit(self._exp(exp["id"]), worker)
            return True
        # running, between batches (or just recovered)
        worker = self._worker_of(exp)
        last = one(
            self.db, "SELECT * FROM jobs WHERE experiment_id = ? ORDER BY batch DESC LIMIT 1", [exp["id"]]
        )
        if self.stopping:
            self._finish_experiment(exp["id"], "cancelled", "stopped")
            return True
        if self._budget_reason and last is not None:
            if exp["kind"] == "self_test":
                self._finish_experiment(exp["id"], "cancelled", "budget", detail=self._budget_reason)
                return True
            with transaction(self.db):
                final = self._decide(exp["id"], family, force_final=True)
            if final:
                self._cleanup(exp["id"])
            return True
        if self.paused:
            return False
        if worker is None:
            self._lose(exp, "its worker is gone")
            return True
        trees = self.exp_dir(exp["id"])
        if not (trees / A_DIR).exists() or not (trees / B_DIR).exists():
            if last is not None and last["status"] != "lost":
                # Built trees held between batches are gone: the pairs so far cannot go on.
                self._lose(exp, "its trees are gone")
                return True
            if not self._prepare(exp, worker):
                return True
        self._submit(self._exp(exp["id"]), worker)
        return True

    def _worker_of(self, exp: dict[str, Any]) -> Worker | None:
        assert self.fleet is not None
        for worker in self.fleet.workers():
            if worker.id == exp["worker_id"]:
                return worker
        return None

    def _prepare(self, exp: dict[str, Any], worker: Worker) -> bool:
        """Refusal, candidate commit and trees; False when the experiment ended right here."""
        exp_id = exp["id"]
        baseline = exp["baseline_commit"]
        candidate = exp["candidate_commit"]
        patch = (
            one(self.db, "SELECT * FROM patches WHERE id = ?", [exp["patch_id"]]) if exp["patch_id"] else None
        )
        if patch is not None:
            # What git would apply onto this baseline, not what the patch's headers say.
            try:
                why = patchpaths.check(patch["diff"], self.protected, self.repo, baseline)
            except patchpaths.PatchUnreadable as exc:
                self._finish_experiment(exp_id, "crashed", "does_not_apply", detail=str(exc))
                return False
            if why:
                self._finish_experiment(exp_id, "refused", why)
                return False
            if candidate is None:
                try:
                    candidate = commit_candidate(self.repo, baseline, patch["diff"], exp["title"])
                except DoesNotApply as exc:
                    self._finish_experiment(exp_id, "crashed", "does_not_apply", detail=str(exc))
                    return False
        assert candidate is not None
        with transaction(self.db):
            update(
                self.db,
                "experiments",
                exp_id,
                {
                    "status": "running",
                    "phase": "setup",
                    "worker_id": worker.id,
                    "candidate_commit": candidate,
                    "started_at": exp["started_at"] or now(),
                },
            )
        started = time.monotonic()
        try:
            workdir = self.exp_dir(exp_id)
            prepare_workdir(self.repo, workdir, baseline, candidate, self.scripts, self.protected)
        except UserError as exc:
            self._finish_experiment(exp_id, "crashed", "setup", detail=str(exc))
            if exp["kind"] == "self_test":
                raise RunFailed(f"cannot prepare the self-test: {exc}") from None
            return False
        self._merge_meta(exp_id, {"prepare_seconds": round(time.monotonic() - started, 3)})
        return True

    def _merge_meta(self, exp_id: int, values: dict[str, Any]) -> None:
        exp = self._exp(exp_id)
        meta = json.loads(exp["meta"] or "{}")
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(meta.get(key), dict):
                meta[key] = {**meta[key], **value}
            else:
                meta[key] = value
        update(self.db, "experiments", exp_id, {"meta": meta})

    # -- jobs ----------------------------------------------------------------------------------

    def _complete_pairs(self, exp_id: int) -> int:
        return len(self._pairs(exp_id, self.metric))

    def _next_batch(self, exp: dict[str, Any]) -> tuple[int, int, int, bool]:
        """(batch number, first pair, pairs, run checks) for the experiment's next job."""
        jobs = rows(self.db, "SELECT * FROM jobs WHERE experiment_id = ? ORDER BY batch", [exp["id"]])
        batch = (jobs[-1]["batch"] + 1) if jobs else 0
        pair_start = max((j["pair_start"] + j["pairs"] for j in jobs), default=0)
        checks_done = any(j["run_checks"] and j["status"] == "succeeded" for j in jobs)
        have = self._complete_pairs(exp["id"])
        if exp["kind"] == "self_test":
            target = self.settings.policy.self_test_pairs
        else:
            # Batches end exactly on the policy's planned looks (the alpha spending assumes it).
            target = next((n for n in self.policy.looks() if n > have), self.policy.max_pairs)
        # Checks run once per experiment, in its first batch (on the baseline for the self-test,
        # on the stacked winners at the end).
        return batch, pair_start, max(target - have, 1), not checks_done

    def _submit(self, exp: dict[str, Any], worker: Worker) -> None:
        assert self.fleet is not None
        batch, pair_start, pairs, run_checks = self._next_batch(exp)
        s = self.settings
        build_timeout = self.options.build_timeout or s.timeouts.build
        bench_timeout = self.options.bench_timeout or s.timeouts.bench
        check_timeout = self.options.check_timeout or s.timeouts.check
        nonce = secrets.token_hex(8)
        log_dir = self.log_dir(exp["id"])
        log_path = log_dir / f"batch-{batch}.log"
        job_dir = log_dir / "jobs" / f"batch-{batch}"
        deadline = (
            now()
            + 2 * (build_timeout + 5)
            + pairs * 2 * (bench_timeout + 5)
            + (check_timeout + 5 if run_checks else 0)
            + JOB_MARGIN_SECONDS
        )
        with transaction(self.db):
            job_id = insert(
                self.db,
                "jobs",
                {
                    "run_id": self.run_id,
                    "experiment_id": exp["id"],
                    "worker_id": worker.id,
                    "batch": batch,
                    "pair_start": pair_start,
                    "pairs": pairs,
                    "run_checks": int(run_checks),
                    "nonce": nonce,
                    "backend": self.backend,
                    "status": "submitting",
                    "log_path": str(log_path),
                    "job_dir": str(job_dir),
                    "deadline": deadline,
                    "submitted_at": now(),
                },
            )
            update(self.db, "experiments", exp["id"], {"batches": batch + 1, "phase": "setup"})
        task = render(
            self.template,
            name=f"ar-{self.name}-e{exp['id']}-b{batch}".replace("_", "-").lower()[:60],
            workdir=self.exp_dir(exp["id"]),
            envs={
                # target.env first: the protocol's own variables below always win.
                **s.target.env,
                "EXPERIMENT_ID": exp["id"],
                "EXPERIMENT_DESC": one_line(exp["title"]),
                "BUILD_CMD": s.target.build_cmd,
                "BUILD_TIMEOUT": build_timeout,
                "BENCH_TIMEOUT": bench_timeout,
                "CHECK_TIMEOUT": check_timeout,
                "BENCH_SCRIPT": self.scripts.bench.path,
                "CHECKS_SCRIPT": self.scripts.checks.path,
                "A_DIR": A_DIR,
                "B_DIR": B_DIR,
                "BATCH": batch,
                "PAIR_START": pair_start,
                "PAIRS": pairs,
                "RUN_CHECKS": int(run_checks),
                "AUTORESEARCH_NONCE": nonce,
                **sandbox_envs(self.ws),
            },
            resources_override=self._resources(),
        )
        spec = JobSpec(job_id, exp["id"], batch, task, log_path, job_dir)
        backend_id = self.fleet.submit(worker, spec)
        with transaction(self.db):
            update(self.db, "jobs", job_id, {"backend_job_id": backend_id, "status": "running"})
        ref = JobRef(job_id, worker.id, backend_id, log_path, job_dir)
        parser = LogParser(nonce, range(pair_start, pair_start + pairs))
        self.active[job_id] = ActiveJob(ref, exp["id"], batch, nonce, parser, 0, deadline)
        self._say(
            f"  exp {exp['id']} {exp['title']!r}: batch {batch}, "
            f"pairs {pair_start}..{pair_start + pairs - 1} on {worker.name}"
        )

    def _resources(self) -> dict[str, Any]:
        sky = self.settings.fleet.skypilot
        return {"infra": sky.infra, "cpus": sky.cpus, "memory": sky.memory, "accelerators": sky.accelerators}

    def _read_log(self, active: ActiveJob) -> list[Invocation]:
        try:
            with open(active.ref.log_path, "rb") as fh:
                fh.seek(active.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        active.offset += len(data)
        return active.parser.feed(data)

    def _poll(self, active: ActiveJob, family: int | None) -> bool:
        assert self.fleet is not None
        status = self.fleet.poll(active.ref)
        found = self._read_log(active)
        if status.terminal:
            found += active.parser.finish()
        self._store(active, found)
        exp = self._exp(active.experiment_id)
        phase = active.parser.state.phase
        if phase and exp["status"] == "running" and phase != exp["phase"]:
            update(self.db, "experiments", exp["id"], {"phase": phase})
        if not status.terminal:
            why = self._why_stop(active, exp, found)
            if why is None:
                return bool(found)
            self._stop_job(active, why)
            status = self.fleet.poll(active.ref)
            self._store(active, self._read_log(active) + active.parser.finish())
        self._job_ended(active, status, family)
        return True

    def _why_stop(self, active: ActiveJob, exp: dict[str, Any], found: list[Invocation]) -> str | None:
        """Whether the runner must stop a job that is still going, and why."""
        if exp["status"] in FINAL:
            return "cancel"
        if active.deadline is not None and now() > active.deadline:
            self._event(
                "job_timeout",
                f"experiment {exp['id']}: batch {active.batch} ran past its deadline; its session was killed",
                level="warning",
                exp_id=exp["id"],
            )
            return "timeout"
        if self._no_metric(found):
            return "no_metric"
        if active.parser.state.violation or active.parser.state.tampered:
            return "forged"
        return None

    def _stop_job(self, active: ActiveJob, why: str) -> None:
        assert self.fleet is not None
        active.stopped = why
        self.fleet.cancel(active.ref)

    def _no_metric(self, found: list[Invocation]) -> bool:
        return any(inv.rc == 0 and not any(s.metric == self.metric for s in inv.samples) for inv in found)

    def _store(self, active: ActiveJob, found: list[Invocation]) -> None:
        """Samples of finished invocations, and warnings for what could not be read, as parsed.

        Parsing a log again (after a restart) adds nothing twice: samples are UNIQUE, and a warning
        is written only if none exists for that job and log line."""
        state = active.parser.state
        if not found and not state.forged and state.lines <= active.parsed_lines:
            return
        exp_id = active.experiment_id
        with transaction(self.db):
            stamp = now()
            for inv in found:
                for s in inv.samples:
                    added = self.db.execute(
                        "INSERT OR IGNORE INTO samples (experiment_id, pair, side, metric, seq, value, "
                        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [exp_id, s.pair, s.side, s.metric, s.seq, s.value, stamp],
                    ).rowcount
                    if not added:  # parsed before (a restart): it must be the very same sample
                        kept = one(
                            self.db,
                            "SELECT value FROM samples WHERE experiment_id = ? AND pair = ? AND side = ? "
                            "AND metric = ? AND seq = ?",
                            [exp_id, s.pair, s.side, s.metric, s.seq],
                        )
                        if kept is not None and kept["value"] != s.value:
                            state.violation = state.violation or (
                                f"log line {s.line}: pair {s.pair} {s.side} {s.metric} #{s.seq} = "
                                f"{s.value:g} differs from the {kept['value']:g} stored before"
                            )
                for line, rejected in inv.rejected:
                    self._warn_once(
                        "metric_rejected",
                        active,
                        line,
                        f"experiment {exp_id} pair {inv.pair} {inv.side}: {rejected.reason} "
                        f"(log line {line}: {rejected.text.strip()[:120]!r})",
                        {
                            "text": rejected.text[:500],
                            "pair": inv.pair,
                            "side": inv.side,
                            "reason": rejected.reason,
                        },
                    )
            for line in state.forged:
                self._warn_once(
                    "forged_marker",
                    active,
                    line,
                    f"experiment {exp_id}: log line {line} looks like a runner marker "
                    "without the job's nonce (ignored)",
                    {},
                )
            state.forged.clear()
            if state.lines > active.parsed_lines:
                active.parsed_lines = state.lines
                update(self.db, "jobs", active.ref.job_id, {"parsed_lines": state.lines})

    def _warn_once(self, kind: str, active: ActiveJob, line: int, message: str, data: dict[str, Any]) -> None:
        seen = one(
            self.db,
            "SELECT id FROM events WHERE kind = ? AND experiment_id = ? "
            "AND json_extract(data, '$.job') = ? AND json_extract(data, '$.line') = ?",
            [kind, active.experiment_id, active.ref.job_id, line],
        )
        if seen is None:
            self._event(
                kind,
                message,
                level="warning",
                exp_id=active.experiment_id,
                data={"job": active.ref.job_id, "line": line, **data},
            )

    def _job_ended(self, active: ActiveJob, status: JobStatus, family: int | None) -> None:
        self.active.pop(active.ref.job_id, None)
        exp = self._exp(active.experiment_id)
        self._write_step_logs(active)
        seconds = self._step_seconds(active)
        job_status = status.state
        if active.stopped in ("cancel", "stop"):
            job_status = "cancelled"
        values = {
            "status": job_status,
            "exit_code": status.exit_code,
            "detail": status.detail or active.stopped,
            "ended_at": now(),
        }
        if exp["status"] in FINAL:  # cancelled while the job ran
            with transaction(self.db):
                update(self.db, "jobs", active.ref.job_id, values)
            return
        outcome = self._outcome(active, status)
        if outcome is None:  # the job vanished: run the batch again on the same worker
            lost = one(
                self.db,
                "SELECT count(*) AS n FROM jobs WHERE experiment_id = ? AND status = 'lost'",
                [exp["id"]],
            )
            with transaction(self.db):
                update(self.db, "jobs", active.ref.job_id, {**values, "status": "lost"})
                self._event(
                    "job_lost",
                    f"experiment {exp['id']}: batch {active.batch} vanished "
                    f"({status.detail}); its finished pairs are kept",
                    level="warning",
                    exp_id=exp["id"],
                )
            if lost and lost["n"] + 1 >= MAX_LOST_JOBS:
                self._lose(exp, f"{MAX_LOST_JOBS} batches vanished")
            elif any(active.parser.state.builds.get(side) != 0 for side in ("A", "B")):
                # It died while building: a half-written build output must not be trusted, so
                # the next batch starts from fresh trees.
                remove_workdir(self.repo, self.exp_dir(exp["id"]))
            return
        # The job's end and what follows from it (a final status, or the decision after this
        # batch) are one transaction: a runner killed here either redoes both or neither.
        with transaction(self.db):
            update(self.db, "jobs", active.ref.job_id, values)
            links = self._log_links(active)
            self._merge_meta(
                exp["id"],
                {"seconds": seconds, "logs": links, "wall": _walls(active), **self._isolation(active, exp)},
            )
            if outcome.status is not None:
                if active.parser.state.violation:
                    # Forged markers: none of its samples can be trusted (the job log keeps them all).
                    self.db.execute("DELETE FROM samples WHERE experiment_id = ?", [exp["id"]])
                self._finish_experiment(
                    exp["id"], outcome.status, outcome.reason, detail=outcome.detail, cleanup=False
                )
                final = True
            elif exp["kind"] == "self_test":
                final = self._decide_self_test(exp["id"])
            else:
                final = self._decide(exp["id"], family)
        if final:
            self._cleanup(exp["id"])
        if self._unsandboxed(active):
            state = active.parser.state
            why = state.isolation_detail or "the job ran no harness"
            raise RunFailed(
                f"sandbox.mode = required, but the worker allows no isolation ({why}); "
                f"see {active.ref.log_path}"
            )

    def _unsandboxed(self, active: ActiveJob) -> bool:
        """sandbox.mode = required, and this job ran (or would have run) its steps without isolation."""
        state = active.parser.state
        if self.settings.sandbox.mode != "required":
            return False
        if state.status == "failed" and state.reason == "sandbox":
            return True
        return state.phase is not None and (state.isolation or "none") == "none"

    def _isolation(self, active: ActiveJob, exp: dict[str, Any]) -> dict[str, Any]:
        """What the experiment ran under: the weakest isolation any of its jobs reported."""
        state = active.parser.state
        if state.isolation is None and state.phase is None:
            return {}  # it never got as far as its steps
        mode = state.isolation or "none"
        detail = state.isolation_detail if state.isolation else "the job ran no harness (no SANDBOX marker)"
        before = json.loads(exp["meta"] or "{}").get("isolation")
        if before is not None and weakest(before, mode) == before:
            return {}
        return {"isolation": mode, "isolation_detail": detail}

    def _outcome(self, active: ActiveJob, status: JobStatus) -> Outcome | None:
        """Final status from the job's end, or Outcome(None) to decide from samples; None: lost."""
        state = active.parser.state
        # A forgery or a tampered protected path outweighs whatever else the job did.
        if state.violation:
            return Outcome("refused", f"forged: {state.violation}", "the job's markers cannot be trusted")
        if state.tampered:
            step, side, path = state.tampered
            # build-B, bench-3-B and the checks are steps of B's tree; name the other tree's change.
            own = "B" if step == "checks" else step.rsplit("-", 1)[-1]
            where = "" if own == side else f" (in tree {side})"
            return Outcome("refused", f"tampered: {path} changed during {step}{where}")
        if active.stopped == "timeout":
            return Outcome("crashed", "timeout", "the whole job ran past its deadline")
        if active.stopped == "no_metric" or self._missing_metric(active):
            return Outcome("crashed", "no_metric", f"a benchmark run printed no valid METRIC {self.metric}")
        if status.detail == "setup failed":
            return Outcome("crashed", "setup", f"the worker's setup exited {status.exit_code}")
        if self._unsandboxed(active):
            why = state.isolation_detail or "the job ran no harness"
            return Outcome("crashed", "setup", f"sandbox.mode = required: {why}")
        if state.status == "failed":
            reason = state.reason or "benchmark"
            if state.checks_rc is not None and state.checks_rc != 0:
                return Outcome(
                    "checks_failed",
                    "timeout" if reason == "timeout" else None,
                    f"the checks exited {state.checks_rc}",
                )
            if reason in ("protected", "tampered"):
                return Outcome("refused", "tampered: a protected path differs from the baseline's")
            if reason not in ("build", "benchmark", "timeout"):
                reason = "benchmark"
            return Outcome("crashed", reason, f"exit {status.exit_code}")
        if state.status == "done" and status.state == "succeeded":
            return Outcome(None)
        if status.state == "lost":
            return None
        # Ended without the run script's final word: name the step it died in.
        phase = state.phase or "setup"
        reason = {"build": "build", "checks": "benchmark"}.get(phase, "benchmark")
        if phase == "checks":
            return Outcome(
                "checks_failed", None, f"the job ended during the checks (exit {status.exit_code})"
            )
        if phase == "setup":
            reason = "setup"
        return Outcome("crashed", reason, f"the job ended without a status (exit {status.exit_code})")

    def _missing_metric(self, active: ActiveJob) -> bool:
        return self._no_metric(active.parser.state.invocations)

    def _step_seconds(self, active: ActiveJob) -> dict[str, float]:
        totals: dict[str, float] = {"build": 0.0, "bench": 0.0, "checks": 0.0}
        for step in active.parser.state.steps:
            kind = step.name.split("-")[0]
            if step.seconds is not None and kind in totals:
                totals[kind] += step.seconds
        exp = self._exp(active.experiment_id)
        before = json.loads(exp["meta"] or "{}").get("seconds") or {}
        if active.batch == 0 or not before:
            base = {k: 0.0 for k in totals}
        else:
            base = {k: float(before.get(k, 0.0)) for k in totals}
        return {k: round(base[k] + totals[k], 4) for k in totals}

    def _write_step_logs(self, active: ActiveJob) -> None:
        """Split a job log into one file per build and checks step (the batch log keeps it all)."""
        try:
            lines = active.ref.log_path.read_bytes().split(b"\n")
        except OSError:
            return
        for step in active.parser.state.steps:
            if step.name.startswith("bench") or step.cached or step.last_line is None:
                continue
            chunk = b"\n".join(lines[step.first_line : step.last_line - 1]) + b"\n"
            (active.ref.log_path.parent / f"{step.name}.log").write_bytes(chunk)

    def _log_links(self, active: ActiveJob) -> dict[str, str]:
        folder = active.ref.log_path.parent
        links = {f"batch-{active.batch}": str(active.ref.log_path)}
        for step in active.parser.state.steps:
            if not step.name.startswith("bench") and (folder / f"{step.name}.log").exists():
                links[step.name] = str(folder / f"{step.name}.log")
        return links

    # -- decisions -----------------------------------------------------------------------------

    def _pairs(self, exp_id: int, metric: str) -> list[tuple[float, float]]:
        """(A, B) per complete pair: each side's value is the median of its samples."""
        values: dict[int, dict[str, list[float]]] = {}
        for r in rows(
            self.db,
            "SELECT pair, side, value FROM samples WHERE experiment_id = ? AND metric = ? ORDER BY pair, seq",
            [exp_id, metric],
        ):
            values.setdefault(r["pair"], {}).setdefault(r["side"], []).append(r["value"])
        return [
            (stats.side_value(sides["A"]), stats.side_value(sides["B"]))
            for _, sides in sorted(values.items())
            if sides.get("A") and sides.get("B")
        ]

    def _wall_pairs(self, exp_id: int) -> list[tuple[float, float]]:
        """(A, B) seconds of the harness's clock per complete pair (experiments' meta `wall`)."""
        wall = json.loads(self._exp(exp_id)["meta"] or "{}").get("wall") or {}
        found = sorted((int(pair), sides) for pair, sides in wall.items() if "A" in sides and "B" in sides)
        return [(float(sides["A"]), float(sides["B"])) for _, sides in found]

    def _metrics_summary(self, exp_id: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        names = [
            r["metric"]
            for r in rows(
                self.db,
                "SELECT DISTINCT metric FROM samples WHERE experiment_id = ? ORDER BY metric",
                [exp_id],
            )
        ]
        for name in [*names, WALL_METRIC]:
            pairs = self._wall_pairs(exp_id) if name == WALL_METRIC else self._pairs(exp_id, name)
            if not pairs:
                continue
            a = sorted(p[0] for p in pairs)
            b = sorted(p[1] for p in pairs)
            ma, mb = a[len(a) // 2], b[len(b) // 2]
            out[name] = {
                "pairs": len(pairs),
                "baseline": ma,
                "candidate": mb,
                "ratio": (mb / ma) if ma else None,
                "noise": stats.noise([p[0] for p in pairs]),
            }
        return out

    def _family(self, exp_id: int, family: int | None) -> list[int]:
        if family is None:
            return [exp_id]
        return [
            r["id"]
            for r in rows(
                self.db,
                "SELECT id FROM experiments WHERE wave_id = ? AND kind = 'candidate' AND status IN "
                "('queued', 'running', 'kept', 'discarded', 'inconclusive') ORDER BY id",
                [family],
            )
        ]

    def _decide(self, exp_id: int, family: int | None, *, force_final: bool = False) -> bool:
        """Decide after a batch, within the caller's transaction; True when the experiment is over
        (the caller then removes its trees)."""
        members = self._family(exp_id, family)
        if exp_id not in members:
            members.append(exp_id)
        cases = {m: tuple(zip(*self._pairs(m, self.metric), strict=True)) or ((), ()) for m in members}
        try:
            decisions = stats.decide_wave(
                {m: (list(c[0]), list(c[1])) for m, c in cases.items()},
                self.policy,
                final=False,
            )
            decision = decisions[exp_id]
            if force_final and decision.verdict == "continue":
                decision = stats.decide_wave(
                    {m: (list(c[0]), list(c[1])) for m, c in cases.items()}, self.policy, final=True
                )[exp_id]
            if decision.verdict == "keep" and self.guards:
                decision = stats.apply_guards(
                    decision,
                    self.guards,
                    {g.metric: _unzip(self._pairs(exp_id, g.metric)) for g in self.guards},
                    alpha=self.policy.alpha,
                )
            if decision.verdict == "keep" and self.settings.metric.wall_clock_guard:
                wall = _unzip(self._wall_pairs(exp_id))
                decision = stats.confirm_by_wall_clock(decision, *wall, alpha=self.policy.alpha)
        except UserError as exc:
            self._finish_experiment(
                exp_id, "crashed", "benchmark", detail=f"samples cannot be judged: {exc}", cleanup=False
            )
            return True
        final = decision.verdict != "continue"
        exp = self._exp(exp_id)
        with transaction(self.db):
            self._record_decision(exp_id, decision, final)
            if final:
                status = decision.status or "inconclusive"
                self._finish_experiment(exp_id, status, None, detail=decision.reason, cleanup=False)
        verdict = decision.status if final else "continue"
        self._say(
            f"  exp {exp_id} {exp['title']!r}: {verdict} {stats.pct(decision.effect)} "
            f"{stats.interval(decision.ci_low, decision.ci_high)} after {decision.pairs} pairs"
        )
        return final

    def _record_decision(self, exp_id: int, decision: stats.Decision, final: bool) -> None:
        exists = one(
            self.db,
            "SELECT id FROM decisions WHERE experiment_id = ? AND pairs = ? AND origin = 'runner' "
            "AND is_final = ?",
            [exp_id, decision.pairs, int(final)],
        )
        if exists:
            return
        insert(
            self.db,
            "decisions",
            {
                "experiment_id": exp_id,
                "verdict": decision.verdict,
                "metric": self.metric,
                "effect": _finite(decision.effect),
                "ci_low": _finite(decision.ci_low),
                "ci_high": _finite(decision.ci_high),
                "pairs": decision.pairs,
                "p_value": _finite(decision.p_value),
                "q_value": _finite(decision.q_value) if decision.q_value is not None else None,
                "noise": decision.noise,
                "reason": decision.reason,
                "policy": {**asdict(self.policy), "metric": self.metric},
                "metrics": self._metrics_summary(exp_id),
                "is_final": int(final),
                "origin": "runner",
                "created_at": now(),
            },
        )

    def _decide_self_test(self, exp_id: int) -> bool:
        """Judge the A/A test within the caller's transaction (it is always over after one batch)."""
        a, b = _unzip(self._pairs(exp_id, self.metric))
        try:
            result = stats.self_test(a, b, alpha=self.policy.alpha)
        except UserError as exc:
            self._merge_meta(exp_id, {"self_test": {"passed": False, "reason": str(exc)}})
            self._finish_experiment(
                exp_id, "crashed", "benchmark", detail=f"samples cannot be judged: {exc}", cleanup=False
            )
            return True
        data = result.to_json()
        interval = f"{stats.pct(result.effect)} {stats.interval(result.ci_low, result.ci_high)}"
        data["reason"] = (
            f"no difference: {interval}" if result.passed else f"the baseline differs from itself: {interval}"
        )
        with transaction(self.db):
            self._merge_meta(exp_id, {"self_test": data})
            self._finish_experiment(
                exp_id,
                "passed" if result.passed else "failed",
                None,
                detail=f"A/A {data['reason']}",
                cleanup=False,
            )
            if result.passed:
                update(
                    self.db,
                    "runs",
                    self.run_id,
                    {"self_test": data, "noise_floor": _finite(result.noise_floor)},
                )
            else:
                update(self.db, "runs", self.run_id, {"self_test": data})
            self._event(
                "self_test",
                f"self-test {'passed' if result.passed else 'failed'}: {data['reason']}",
                level="info" if result.passed else "warning",
                exp_id=exp_id,
                data=data,
            )
        noise = f"{result.noise:.1%}" if result.noise is not None else "?"
        self._say(f"self-test: {data['reason']}; noise {noise}, floor {result.noise_floor:.1%}")
        return True

    # -- endings -------------------------------------------------------------------------------

    def _finish_experiment(
        self, exp_id: int, status: str, reason: str | None, *, detail: str = "", cleanup: bool = True
    ) -> None:
        if cleanup:
            self._stop_jobs(exp_id)  # first, so a final status never hides a job still running
        with transaction(self.db):
            exp = self._exp(exp_id)
            if exp["status"] in FINAL:
                return
            update(
                self.db,
                "experiments",
                exp_id,
                {"status": status, "reason": reason, "phase": None, "ended_at": now()},
            )
            if detail:
                self._merge_meta(exp_id, {"detail": detail})
            level = "info" if status in ("kept", "discarded", "inconclusive", "passed") else "warning"
            self._event(
                "experiment_" + status,
                f"experiment {exp_id} {exp['title']!r}: {status}"
                + (f" ({reason})" if reason else "")
                + (f": {detail}" if detail else ""),
                level=level,
                exp_id=exp_id,
                data={"status": status, "reason": reason},
            )
        if status not in ("kept", "discarded", "inconclusive") or exp["kind"] == "self_test":
            self._say(
                f"  exp {exp_id} {exp['title']!r}: {status}"
                + (f" ({reason})" if reason else "")
                + (f": {detail}" if detail and status not in ("inconclusive", "passed") else "")
            )
        if cleanup:
            self._cleanup(exp_id)

    def _cleanup(self, exp_id: int) -> None:
        self._stop_jobs(exp_id)
        workdir = self.exp_dir(exp_id)
        if workdir.exists():
            remove_workdir(self.repo, workdir)

    def _stop_jobs(self, exp_id: int) -> None:
        for job_id, active in list(self.active.items()):
            if active.experiment_id == exp_id:
                self._stop_job(active, "cancel")
                with transaction(self.db):
                    update(self.db, "jobs", job_id, {"status": "cancelled", "ended_at": now()})
                self.active.pop(job_id, None)

    def _lose(self, exp: dict[str, Any], why: str) -> None:
        self._finish_experiment(exp["id"], "lost", None, detail=why)
        retry = self._requeue(self._exp(exp["id"]), wave_id=exp["wave_id"])
        if retry is not None:
            self._say(f"  exp {exp['id']} lost ({why}); queued again as exp {retry}")

    # -- housekeeping: heartbeat, commands, budget -----------------------------------------------

    def _housekeeping(self) -> None:
        assert self.fleet is not None
        self.fleet.tick()  # background fleet work (SkyPilot: launches, qualification); rate-limited
        stamp = now()
        beat = stamp - self._last_beat >= HEARTBEAT_SECONDS
        if beat:
            self._last_beat = stamp
            assert self.fleet is not None
            cost = self.fleet.cost_usd()
            update(self.db, "runs", self.run_id, {"heartbeat_at": stamp, "cost_usd": cost})
        # The clock is checked on every poll, costs (database sums) with the heartbeat.
        if self._budget_reason is None:
            self._budget_reason = self._budget_spent(costs=beat)
            if self._budget_reason:
                self._say(f"budget spent ({self._budget_reason}): finishing what runs, starting nothing")
                self._event("budget_spent", f"budget spent: {self._budget_reason}", level="warning")
        self._commands()
        if self.stopping:
            raise RunStopped

    def _budget_spent(self, *, costs: bool = True) -> str | None:
        minutes = self.budget.get("minutes")
        if minutes is not None and (now() - self.started_at) / 60 >= minutes:
            return f"{minutes:g} minutes"
        usd = self.budget.get("usd")
        if usd is not None and costs:
            llm = one(
                self.db,
                "SELECT coalesce(sum(cost_usd), 0) AS c FROM llm_calls WHERE run_id = ?",
                [self.run_id],
            )
            spent = (self.fleet.cost_usd() if self.fleet else 0.0) + (llm["c"] if llm else 0.0)
            if spent >= usd:
                return f"${usd:g} (spent ${spent:.2f})"
        return None

    def _commands(self) -> None:
        from runner import hypotheses

        for cmd in rows(self.db, "SELECT * FROM commands WHERE status = 'pending' ORDER BY id"):
            kind, target = cmd["kind"], cmd["target_id"]
            if cmd["target_kind"] == "run" and target not in (None, self.run_id):
                continue
            if cmd["target_kind"] == "experiment":
                exp = one(self.db, "SELECT * FROM experiments WHERE id = ?", [target])
                if exp is not None and exp["run_id"] != self.run_id:
                    continue
            claimed = self.db.execute(
                "UPDATE commands SET status = 'done', handled_at = ? WHERE id = ? AND status = 'pending'",
                [now(), cmd["id"]],
            ).rowcount
            if not claimed:
                continue
            args = json.loads(cmd["args"] or "{}")
            try:
                result = self._command(kind, target, args, hypotheses)
                status = "done"
            except UserError as exc:
                result, status = str(exc), "failed"
            update(self.db, "commands", cmd["id"], {"status": status, "result": result})
            self._event(
                "command",
                f"{kind} {cmd['target_kind'] or ''} {target or ''}: {result}".strip(),
                level="info" if status == "done" else "warning",
            )

    def _command(self, kind: str, target: int | None, args: dict[str, Any], hypotheses: Any) -> str:
        if kind == "approve":
            assert target is not None
            hyp = hypotheses.get(self.db, target)
            new = "patched" if hypotheses.latest_patch(self.db, target) else "approved"
            if hyp.status not in ("proposed", "rejected", "approved", "unpatchable"):
                return f"hypothesis {target} is already {hyp.status}"
            hypotheses.set_status(self.db, target, new)
            return f"hypothesis {target} {new}"
        if kind == "reject":
            assert target is not None
            hypotheses.set_status(self.db, target, "rejected")
            return f"hypothesis {target} rejected"
        if kind == "prioritize":
            assert target is not None
            priority = args.get("priority")
            if not isinstance(priority, int | float):
                raise UserError("prioritize: args need a numeric 'priority'")
            hypotheses.set_priority(self.db, target, float(priority))
            return f"hypothesis {target} priority {priority}"
        if kind == "pause":
            self.paused = True
            update(self.db, "runs", self.run_id, {"status": "paused"})
            self._say("paused: running batches finish, nothing new starts")
            return "paused"
        if kind == "resume":
            self.paused = False
            update(self.db, "runs", self.run_id, {"status": "running"})
            self._say("resumed")
            return "resumed"
        if kind == "stop":
            self.stopping = True
            self._say("stopping: cancelling running experiments")
            return "stopping"
        if kind == "cancel":
            assert target is not None
            exp = one(self.db, "SELECT * FROM experiments WHERE id = ?", [target])
            if exp is None:
                raise UserError(f"experiment {target}: no such experiment")
            if exp["status"] in FINAL:
                return f"experiment {target} already {exp['status']}"
            self._finish_experiment(target, "cancelled", "cancelled")
            return f"experiment {target} cancelled"
        raise UserError(f"command {kind!r}: unknown")

    # -- resume --------------------------------------------------------------------------------

    def _recover(self) -> None:
        """After a restart: reattach live jobs, clean what nothing refers to."""
        assert self.fleet is not None
        live_jobs = rows(
            self.db,
            "SELECT * FROM jobs WHERE run_id = ? AND status IN ('submitting', 'running') ORDER BY id",
            [self.run_id],
        )
        refs = [
            JobRef(j["id"], j["worker_id"], j["backend_job_id"], Path(j["log_path"]), Path(j["job_dir"]))
            for j in live_jobs
        ]
        states = self.fleet.reattach(refs)
        reattached = 0
        for job, ref in zip(live_jobs, refs, strict=True):
            exp = self._exp(job["experiment_id"])
            state = states.get(job["id"])
            if state is not None and state.state == "lost" and state.detail == "never started":
                # The runner died between writing the row and starting the job: forget the row.
                with transaction(self.db):
                    self.db.execute("DELETE FROM jobs WHERE id = ?", [job["id"]])
                continue
            self.active[job["id"]] = ActiveJob(
                ref,
                exp["id"],
                job["batch"],
                job["nonce"],
                LogParser(job["nonce"], range(job["pair_start"], job["pair_start"] + job["pairs"])),
                job["parsed_lines"],
                job["deadline"],
            )
            reattached += 1
        # Worktrees of experiments that are over (or never were) go; so do stale git records.
        keep = {
            r["id"]
            for r in rows(
                self.db,
                "SELECT id FROM experiments WHERE run_id = ? AND status IN ('queued', 'running')",
                [self.run_id],
            )
        }
        removed = 0
        folder = self.ws.worktrees_dir / f"run{self.run_id}"
        if folder.exists():
            for child in sorted(folder.iterdir()):
                exp_number = child.name[3:] if child.name.startswith("exp") else ""
                if not exp_number.isdigit() or int(exp_number) not in keep:
                    remove_workdir(self.repo, child)
                    removed += 1
        gitrepo.run(self.repo, "worktree", "prune")
        self._event(
            "recovered",
            f"run {self.name}: {reattached} jobs reattached, {removed} orphaned worktrees removed",
            data={"reattached": reattached, "worktrees_removed": removed},
        )
        self._say(f"resumed: {reattached} jobs reattached, {removed} orphaned worktrees removed")

    def _interrupt(self, error: str | None = None) -> None:
        """This process is going away: stop its jobs (a resume reruns their batches) and leave the
        run resumable."""
        for active in list(self.active.values()):
            try:
                assert self.fleet is not None
                self.fleet.cancel(active.ref)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        try:
            with transaction(self.db):
                update(self.db, "runs", self.run_id, {"status": "interrupted", "error": error})
                self._event(
                    "run_interrupted",
                    f"run {self.name} interrupted" + (f": {error}" if error else ""),
                    level="warning",
                )
        except Exception:  # noqa: BLE001
            pass

    def _finish(self, status: str, *, stopped_by: str | None = None, error: str | None = None) -> None:
        assert self.fleet is not None
        for active in list(self.active.values()):
            self.fleet.cancel(active.ref)
        self.active.clear()
        self.fleet.down()
        with transaction(self.db):
            run = self._run()
            summary = json.loads(run["summary"] or "{}")
            if stopped_by:
                summary["stopped_by"] = stopped_by
            update(
                self.db,
                "runs",
                self.run_id,
                {
                    "status": status,
                    "ended_at": now(),
                    "error": error,
                    "summary": summary,
                    "head_commit": self.head(),
                    "cost_usd": self.fleet.cost_usd(),
                },
            )
            self._event(
                "run_" + status,
                f"run {self.name} {status}"
                + (f" ({stopped_by})" if stopped_by else "")
                + (f": {error}" if error else ""),
                level="info" if status == "finished" else "error",
            )
        self._say(
            f"run {self.name} {status}"
            + (f" ({stopped_by})" if stopped_by else "")
            + (f": {error}" if error else "")
        )

    def summary(self) -> RunSummary:
        return run_summary(self.db, self.run_id)


def run_summary(db: sqlite_utils.Database, run_id: int) -> RunSummary:
    run = one(db, "SELECT * FROM runs WHERE id = ?", [run_id])
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    experiments = []
    for exp in rows(db, "SELECT * FROM experiments WHERE run_id = ? ORDER BY id", [run_id]):
        d = one(
            db,
            "SELECT * FROM decisions WHERE experiment_id = ? AND origin = 'runner' "
            "ORDER BY is_final DESC, id DESC LIMIT 1",
            [exp["id"]],
        )
        experiments.append(
            {
                "id": exp["id"],
                "kind": exp["kind"],
                "title": exp["title"],
                "status": exp["status"],
                "reason": exp["reason"],
                "wave_id": exp["wave_id"],
                "patch_id": exp["patch_id"],
                "effect": d["effect"] if d else None,
                "ci": [d["ci_low"], d["ci_high"]] if d else None,
                "pairs": d["pairs"] if d else 0,
                "log_dir": exp["log_dir"],
            }
        )
    winners = rows(
        db,
        "SELECT experiment_id, commit_sha, patch_file, position FROM winners "
        "WHERE run_id = ? ORDER BY position",
        [run_id],
    )
    return RunSummary(
        run_id=run_id,
        name=run["name"],
        status=run["status"],
        branch=run["branch"],
        baseline_commit=run["baseline_commit"],
        head_commit=run["head_commit"],
        self_test=json.loads(run["self_test"]) if run["self_test"] else None,
        experiments=experiments,
        winners=winners,
        summary=json.loads(run["summary"]) if run["summary"] else None,
        error=run["error"],
    )


def _walls(active: ActiveJob) -> dict[str, dict[str, float]]:
    """The harness's clock of this job's completed invocations, {pair: {side: seconds}} (merged
    into the experiment's meta `wall`, pair by pair, with the earlier batches')."""
    found: dict[str, dict[str, float]] = {}
    for inv in active.parser.state.invocations:
        if inv.rc == 0 and inv.seconds is not None:
            found.setdefault(str(inv.pair), {})[inv.side] = round(inv.seconds, 6)
    return found


def _unzip(pairs: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
