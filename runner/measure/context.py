"""What every part of the loop shares: the run as a value (`RunState`) and its surroundings
(`RunContext`: the workspace, the database, the mirror, the scripts, the progress line).

`RunState` is data: what the run is (its row, its options, the policy it is judged by) and where
its control stands (paused, stopping, a spent budget). Print it to see the run. The parts of the
loop (runner/measure: experiments, decisions, jobs, steering, scheduler, research cadence, stages)
are small objects that each receive the context and the collaborators they call; none derives from
another."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb import gitrepo
from kb.db import log_event
from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store import experiments, run_records
from kb.store.tables import ExperimentRow, RunRow
from kb.workspace import Workspace
from runner import stats
from runner.harness.prepare import protected_paths, resolve_scripts, template_path
from runner.harness.template import load_template
from runner.measure.common import Progress, RunOptions, Stop, rules_of

if TYPE_CHECKING:
    import git

    from kb.config import Settings
    from runner.harness.scripts import Scripts


@dataclass
class RunState:
    """The run as this process drives it: what it is, and where its control stands."""

    run_id: int
    name: str
    branch: str
    baseline: str
    """The run's original baseline (the head of its branch is the current one)."""
    started_at: float
    backend: str
    options: RunOptions
    rules: stats.Rules
    """The policy, the guard metrics and the wall-clock switch the experiments are judged by."""
    metric: str
    parallel: int
    wave_size: int
    budget: dict[str, Any]
    """runs.budget: minutes, usd, max_experiments (a `budget` command changes it while it runs)."""
    autopilot: bool
    has_model: bool
    paused: bool = False
    stopping: bool = False
    resuming: bool = False
    spent: Stop | None = None
    """The budget found spent (its words without "budget: "): running batches finish, nothing new starts."""
    last_beat: float = field(default=0.0, repr=False)

    @property
    def policy(self) -> stats.Policy:
        return self.rules.policy

    @classmethod
    def of(cls, run: RunRow, settings: Settings, ws: Workspace) -> RunState:
        # start_run creates every run it drives with its branch and baseline.
        if run["branch"] is None or run["baseline_commit"] is None:
            raise UserError(f"run {run['name']}: it has no branch or baseline; it cannot be driven")
        options = RunOptions.from_json(run["options"])
        parallel = options.parallel or settings.fleet.parallel
        return cls(
            run_id=run["id"],
            name=run["name"],
            branch=run["branch"],
            baseline=run["baseline_commit"],
            started_at=run["started_at"],
            backend=run["backend"],
            options=options,
            rules=rules_of(ws),
            metric=settings.metric.primary,
            parallel=parallel,
            wave_size=settings.fleet.wave_size or parallel,
            budget=decoded_dict(run["budget"]),
            autopilot=bool(options.autopilot)
            if options.autopilot is not None
            else settings.autopilot.enabled,
            has_model=bool(options.model or settings.llm.model),
        )


class RunContext:
    """The run's surroundings, shared by the parts of the loop: the state, the workspace and its
    database (this thread's connection), the mirror, the scripts and the progress line."""

    def __init__(self, ws: Workspace, run_id: int, progress: Progress | None = None) -> None:
        self.ws = ws
        self.db: sqlite_utils.Database = ws.db()
        self.settings: Settings = ws.settings
        run = run_records.row(self.db, run_id)
        if run is None:
            raise UserError(f"run {run_id}: no such run")
        self.state = RunState.of(run, self.settings, ws)
        self.repo: git.Repo = gitrepo.open_repo(ws.mirror_path)
        self.template: dict[str, Any] = load_template(template_path(ws, self.settings))
        self.scripts: Scripts = resolve_scripts(ws, self.settings)
        self.protected: list[tuple[str, str]] = protected_paths(ws, self.settings)
        self.progress: Progress = progress or (lambda _line: None)
        self.poll_interval = 0.05

    def reconnect(self) -> None:
        """This thread's own connection: a runner may be built in one thread and run in another."""
        with contextlib.suppress(Exception):  # one of another thread cannot be closed from here
            self.db.conn.close()
        self.db = self.ws.db()

    @property
    def run_id(self) -> int:
        return self.state.run_id

    def run(self) -> RunRow:
        run = run_records.row(self.db, self.state.run_id)
        if run is None:
            raise UserError(f"run {self.state.run_id}: no such run")
        return run

    def exp(self, exp_id: int) -> ExperimentRow:
        exp = experiments.row(self.db, exp_id)
        assert exp is not None
        return exp

    def event(
        self,
        kind: str,
        message: str,
        *,
        level: str = "info",
        exp_id: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        log_event(
            self.db, kind, message, level=level, run_id=self.state.run_id, experiment_id=exp_id, data=data
        )

    def say(self, line: str) -> None:
        self.progress(line)

    def head(self) -> str:
        return gitrepo.branch_head(self.repo, self.state.branch) or self.state.baseline

    def exp_dir(self, exp_id: int) -> Path:
        return self.ws.worktrees_dir / f"run{self.state.run_id}" / f"exp{exp_id}"

    def log_dir(self, exp_id: int) -> Path:
        return self.ws.logs_dir / f"run{self.state.run_id}" / f"exp{exp_id}"

    def merge_meta(self, exp_id: int, values: dict[str, Any]) -> None:
        experiments.merge_meta(self.db, exp_id, values)

    def set_phase(self, phase: str | None) -> None:
        """runs.phase: what the run is doing now (researching, measuring, reflecting)."""
        run_records.update(self.db, self.state.run_id, {"phase": phase})
