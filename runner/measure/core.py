"""The runner's state and the experiment lifecycle every stage uses: create, requeue, finish, clean up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlite_utils

from kb import gitrepo
from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.store import decisions, experiments, hypotheses, jobs, run_records
from kb.store.tables import ExperimentRow, PatchRow, RunRow
from kb.textsafe import quoted
from kb.workspace import Workspace
from runner import stats
from runner.fleet import Fleet
from runner.harness.prepare import (
    protected_paths,
    remove_workdir,
    resolve_scripts,
    template_path,
)
from runner.harness.template import load_template
from runner.measure import runlock
from runner.measure.common import (
    FINAL,
    MAX_RETRIES,
    ActiveJob,
    Progress,
    Research,
    RunOptions,
    RunSummary,
    Stop,
    policy_of,
)


class RunnerCore:
    """Drives one run from this process. Single-threaded: one loop polls jobs and reads commands.

    Each module of runner/measure adds one concern on top of the one below (core < decide < outcome
    < jobs < steering < scheduler < stages < recovery < runner), so a method only calls what lies
    beneath it and each file can be read alone."""

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
        # start_run creates every run it drives with its branch and baseline.
        assert run["branch"] is not None and run["baseline_commit"] is not None
        self.branch: str = run["branch"]
        self.baseline: str = run["baseline_commit"]
        self.options = RunOptions.from_json(run["options"])
        self.budget: dict[str, Any] = json.loads(run["budget"] or "{}")
        self.policy = policy_of(ws)
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
        self._spent: Stop | None = None
        """The budget found spent (budget_minutes, budget_usd, max_experiments; its words without
        "budget: "): running batches finish, nothing new starts."""

    def _run(self) -> RunRow:
        run = run_records.row(self.db, self.run_id)
        if run is None:
            raise UserError(f"run {self.run_id}: no such run")
        return run

    def _exp(self, exp_id: int) -> ExperimentRow:
        exp = experiments.row(self.db, exp_id)
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

    def _merge_meta(self, exp_id: int, values: dict[str, Any]) -> None:
        experiments.merge_meta(self.db, exp_id, values)

    def _create_experiment(
        self,
        *,
        kind: str,
        title: str,
        baseline: str,
        candidate: str | None = None,
        patch: PatchRow | None = None,
        wave_id: int | None = None,
        retry_of: int | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        with transaction(self.db):
            exp_id = experiments.create(
                self.db,
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
            experiments.update(self.db, exp_id, {"log_dir": str(self.log_dir(exp_id))})
        return exp_id

    def _requeue(self, exp: ExperimentRow, *, wave_id: int | None) -> int | None:
        depth, cursor = 0, exp
        while retry_of := cursor["retry_of"]:
            depth += 1
            prev = experiments.row(self.db, retry_of)
            if prev is None:
                break
            cursor = prev
        if depth >= MAX_RETRIES:
            return None
        patch = hypotheses.patch_row(self.db, exp["patch_id"]) if exp["patch_id"] else None
        baseline = exp["baseline_commit"] if wave_id is not None else self.head()
        assert baseline is not None  # the runner creates every experiment with its baseline
        return self._create_experiment(
            kind=exp["kind"],
            title=exp["title"],
            baseline=baseline,
            candidate=exp["candidate_commit"] if exp["kind"] != "candidate" else None,
            patch=patch,
            wave_id=wave_id,
            retry_of=exp["id"],
            meta={k: v for k, v in json.loads(exp["meta"] or "{}").items() if k in ("role", "left_out")},
        )

    def _finish_experiment(
        self, exp_id: int, status: str, reason: str | None, *, detail: str = "", cleanup: bool = True
    ) -> None:
        if cleanup:
            self._stop_jobs(exp_id)  # first, so a final status never hides a job still running
        with transaction(self.db):
            exp = self._exp(exp_id)
            if exp["status"] in FINAL:
                return
            experiments.finish(self.db, exp_id, status, reason, now())
            if detail:
                self._merge_meta(exp_id, {"detail": detail})
            level = "info" if status in ("kept", "discarded", "inconclusive", "passed") else "warning"
            self._event(
                "experiment_" + status,
                f"experiment {exp_id} {quoted(exp['title'])}: {status}"
                + (f" ({reason})" if reason else "")
                + (f": {detail}" if detail else ""),
                level=level,
                exp_id=exp_id,
                data={"status": status, "reason": reason},
            )
        if status not in ("kept", "discarded", "inconclusive") or exp["kind"] == "self_test":
            self._say(
                f"  exp {exp_id} {quoted(exp['title'])}: {status}"
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
                    jobs.update(self.db, job_id, {"status": "cancelled", "ended_at": now()})
                self.active.pop(job_id, None)

    def _stop_job(self, active: ActiveJob, why: str) -> None:
        assert self.fleet is not None
        active.stopped = why
        self.fleet.cancel(active.ref)

    def _lose(self, exp: ExperimentRow, why: str) -> None:
        self._finish_experiment(exp["id"], "lost", None, detail=why)
        retry = self._requeue(self._exp(exp["id"]), wave_id=exp["wave_id"])
        if retry is not None:
            self._say(f"  exp {exp['id']} lost ({why}); queued again as exp {retry}")

    def summary(self) -> RunSummary:
        return run_summary(self.db, self.run_id)


def run_summary(db: sqlite_utils.Database, run_id: int) -> RunSummary:
    run = run_records.row(db, run_id)
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    found = experiments.of_run(db, run_id)
    decided = decisions.latest_of(db, [exp.id for exp in found])
    summaries = []
    for exp in found:
        d = decided.get(exp.id)
        summaries.append(
            {
                "id": exp.id,
                "kind": exp.kind,
                "title": exp.title,
                "status": exp.status,
                "reason": exp.reason,
                "wave_id": exp.wave_id,
                "patch_id": exp.patch_id,
                "effect": d.effect if d else None,
                "ci": [d.ci_low, d.ci_high] if d else None,
                "pairs": d.pairs if d else 0,
                "log_dir": exp.log_dir,
            }
        )
    return RunSummary(
        run_id=run_id,
        name=run["name"],
        status=run["status"],
        branch=run["branch"],
        baseline_commit=run["baseline_commit"],
        head_commit=run["head_commit"],
        self_test=json.loads(run["self_test"]) if run["self_test"] else None,
        experiments=summaries,
        winners=run_records.winner_rows(db, run_id),
        summary=json.loads(run["summary"]) if run["summary"] else None,
        error=run["error"],
        stop_reason=run["stop_reason"],
    )
