"""The Runner: the run's parts put together, the stages in order inside signal handling, and how
the run ends.

The parts (each a small object with the collaborators it calls, each testable alone):

    RunContext   the run's state (RunState, a value) and surroundings      context.py
    LiveJobs     the fleet and the jobs it is running                      live.py
    Lifecycle    experiments: create, queue again, finish, clean up        lifecycle.py
    Decider      a look of the one judge (runner.stats.judge), recorded    decide.py
    JobRunner    batch jobs: submit, read the log, the job's outcome       jobs.py (outcome.py: pure)
    Budget       minutes, dollars, experiments                             steering.py
    Steering     heartbeat and the commands people send                    steering.py
    Scheduler    one experiment one step on: prepare, rebase, submit       scheduler.py
    Cadence      when research runs, the plateau                           research_phase.py
    Stages       self-test, waves, final stack                             stages.py
    Recovery     reattach after a restart, leave resumable                 recovery.py
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kb.db import now, transaction
from kb.jsoncol import decoded_dict
from kb.store import run_records
from kb.workspace import Workspace
from runner.fleet import make_fleet
from runner.measure import runlock
from runner.measure.common import Progress, Research, RunFailed, RunOptions, RunSummary, Stop
from runner.measure.context import RunContext
from runner.measure.decide import Decider
from runner.measure.jobs import JobRunner
from runner.measure.lifecycle import Lifecycle, run_summary
from runner.measure.live import LiveJobs
from runner.measure.recovery import Recovery
from runner.measure.research_phase import Cadence
from runner.measure.scheduler import Scheduler
from runner.measure.stages import Stages
from runner.measure.steering import Budget, Steering


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
        """The workspace's run lock, released when execute() returns (start_run/resume_run take it)."""
        self.ctx = ctx = RunContext(ws, run_id, progress)
        self.live = LiveJobs()
        self.lifecycle = Lifecycle(ctx, self.live)
        self.decider = Decider(ctx, self.lifecycle)
        self.jobs = JobRunner(ctx, self.live, self.lifecycle, self.decider)
        self.budget = Budget(ctx, self.live)
        self.steering = Steering(ctx, self.live, self.lifecycle, self.budget)
        self.scheduler = Scheduler(ctx, self.live, self.lifecycle, self.decider, self.jobs, self.steering)
        self.cadence = Cadence(ctx, self.steering, research)
        self.stages = Stages(ctx, self.lifecycle, self.scheduler, self.cadence, self.budget)
        self.recovery = Recovery(ctx, self.live)

    @property
    def run_id(self) -> int:
        return self.ctx.state.run_id

    @property
    def name(self) -> str:
        return self.ctx.state.name

    @property
    def options(self) -> RunOptions:
        return self.ctx.state.options

    @property
    def research(self) -> Research | None:
        return self.cadence.research

    @research.setter
    def research(self, research: Research | None) -> None:
        self.cadence.research = research

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

    def execute(self) -> RunSummary:
        """Run to the end (or until stopped, a budget is spent, or this process is interrupted)."""
        self.ctx.reconnect()
        try:
            return self._execute()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _execute(self) -> RunSummary:
        ctx, state = self.ctx, self.ctx.state
        with self._signals():
            try:
                self.live.fleet_or_none = make_fleet(
                    state.backend, ctx.ws, ctx.db, state.run_id, state.parallel
                )
                workers = self.live.fleet.up()
                ctx.say(
                    f"run {state.name} ({state.branch}) from {state.baseline[:12]} on {state.backend} "
                    f"x{len(workers)}"
                )
                if state.resuming:
                    self.recovery.recover()
                self._finish("finished", stop=self.stages.run())
            except KeyboardInterrupt:
                self.recovery.interrupt()
                raise
            except RunFailed as exc:
                self.stages.cancel_live("run failed")
                self._finish("failed", error=str(exc))
            except Exception as exc:
                # Anything unexpected leaves the run resumable rather than failed.
                self.recovery.interrupt(error=f"{type(exc).__name__}: {exc}")
                raise
        return self.summary()

    def _finish(self, status: str, *, stop: Stop | None = None, error: str | None = None) -> None:
        ctx = self.ctx
        stopped_by = stop.words if stop else None
        self.live.cancel_all()
        self.live.fleet.down()
        with transaction(ctx.db):
            summary = decoded_dict(ctx.run()["summary"])
            if stopped_by:
                summary["stopped_by"] = stopped_by
            run_records.update(
                ctx.db,
                ctx.run_id,
                {
                    "status": status,
                    "stop_reason": stop.reason if stop else None,
                    "phase": None,
                    "ended_at": now(),
                    "error": error,
                    "summary": summary,
                    "head_commit": ctx.head(),
                    "cost_usd": self.live.fleet.cost_usd(),
                },
            )
            ctx.event(
                "run_" + status,
                f"run {ctx.state.name} {status}"
                + (f" ({stopped_by})" if stopped_by else "")
                + (f": {error}" if error else ""),
                level="info" if status == "finished" else "error",
                data={"stop_reason": stop.reason} if stop else None,
            )
        ctx.say(
            f"run {ctx.state.name} {status}"
            + (f" ({stopped_by})" if stopped_by else "")
            + (f": {error}" if error else "")
        )

    def summary(self) -> RunSummary:
        return run_summary(self.ctx.db, self.run_id)
